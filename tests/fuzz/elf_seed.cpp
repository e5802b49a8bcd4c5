// Seed for elf_fuzz: compiled at build time into a small shared library with
// a SONAME, DT_NEEDED and DT_RUNPATH ($ORIGIN), so that the fuzzer starts from
// an ELF file that exercises every field `redist check` reads.
extern "C" int redist_elf_seed(int x) { return x + 1; }
