// elf.hpp (internal) — the dynamic-linking facts of an ELF file, the GPU
// code it carries (its fatbin sections), and the entries of /etc/ld.so.cache:
// the inputs `redist check` resolves with.
//
// These readers take bytes from archives someone else built (and a cache file
// another tool wrote), so they are bounds-checked throughout and fuzzed
// (tests/fuzz/elf_fuzz.cpp, tests/fuzz/fatbin_fuzz.cpp).
#pragma once

#include <compare>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"

namespace redist::elf {

struct elf_info {
    int elf_class = 0;         // ELFCLASS32 / ELFCLASS64
    unsigned machine = 0;      // EM_X86_64, EM_AARCH64, ...
    unsigned type = 0;         // ET_DYN, ET_EXEC, ...
    bool has_interp = false;   // PT_INTERP: a program (possibly PIE), not only a library
    bool has_dynamic = false;  // PT_DYNAMIC / SHT_DYNAMIC present
    std::string soname;
    std::vector<std::string> needed;   // DT_NEEDED, in order
    std::vector<std::string> rpath;    // DT_RPATH, split on ':'
    std::vector<std::string> runpath;  // DT_RUNPATH, split on ':'
    // Symbol versions (SHT_GNU_verneed/verdef; empty in files without section
    // headers): what ld.so checks at load time, before any symbol is bound,
    // so "version `GLIBCXX_3.4.30' not found" is found without loading.
    struct version_need {
        std::string file;                // "libstdc++.so.6", as in DT_NEEDED
        std::vector<std::string> names;  // "GLIBCXX_3.4.30", ... (weak ones left out: not fatal)
    };
    std::vector<version_need> version_needs;
    std::vector<std::string> version_defs;  // the versions this file defines ("GLIBC_2.34", ...)

    bool is_shared_library() const { return type == 3 /* ET_DYN */ && !has_interp; }
};

// The non-empty entries of a search path list: DT_RPATH/DT_RUNPATH split on
// ':', LD_LIBRARY_PATH on ':' and ';' (as ld.so splits it).
std::vector<std::string> split_path_list(std::string_view text, std::string_view separators = ":");

// Parses an ELF image held in memory. Outcomes: ok | bad_archive (not ELF,
// truncated, or inconsistent; the message says what).
result<elf_info> parse_elf(std::string_view bytes);

// Parses an ELF file (mapped read-only; opened with open_regular, no symlink
// followed, nothing but a regular file of at most 4 GiB: the caller
// passes the receipt's path of a regular file). Outcomes: ok | bad_archive |
// filesystem.
result<elf_info> read_elf_file(const std::filesystem::path& path);

// Reads only the ELF header: class and machine, or {0,0} when the file is not
// ELF. Used to skip candidates of the wrong class, as ld.so does. Symlinks are
// followed (system libraries are links to versioned files), but only a
// regular file is opened: a FIFO or a device an RPATH names is "not ELF".
struct elf_ident {
    int elf_class = 0;
    unsigned machine = 0;
};
elf_ident read_elf_ident(const std::filesystem::path& path) noexcept;

// ---- GPU code: the fatbin containers nvcc embeds -----------------------------
//
// A library with CUDA kernels carries them in `.nv_fatbin` (`__nv_relfatbin`
// in relocatable device code): one or more containers, each a 16-byte header
// (magic 0xBA55ED50, version 1, header size, size of what follows) and then
// entries, each a header (kind: 1 PTX, 2 ELF/cubin; its own header size; the
// padded payload size; the architecture at offset 28, sm_90 as 90; flags at
// offset 40: 0x100000 architecture-specific `sm_90a`, 0x200000
// family-specific `sm_100f`, compressed payloads marked too) and its payload.
// Only the entry headers are read (pread, a small window at a time): the
// architecture is there whether the payload is compressed or not, so nothing
// is decompressed and the payloads are never read.

struct gpu_arch {
    enum class flavor : std::uint8_t { plain, arch_specific /* sm_90a */, family /* sm_100f */ };
    int major = 0, minor = 0;  // sm_90: 9, 0; sm_121: 12, 1
    flavor kind = flavor::plain;
    auto operator<=>(const gpu_arch&) const = default;
};
// "sm_90a" (SASS) or "compute_90a" (PTX).
std::string arch_name(const gpu_arch& a, bool ptx);

struct gpu_code {
    std::size_t sections = 0;    // fatbin sections found (0: the file carries no GPU code)
    std::size_t containers = 0;  // fatbin containers in them
    std::size_t entries = 0;     // entries of every kind
    std::size_t other = 0;       // entries of a kind that is neither PTX nor SASS (not judged)
    std::vector<gpu_arch> sass;  // distinct architectures of the cubin entries, sorted
    std::vector<gpu_arch> ptx;   // distinct virtual architectures of the PTX entries, sorted
};

// Adds the containers of one fatbin section's bytes to `into`. Outcomes: ok
// | bad_archive (a container or entry that does not fit, an unknown magic or
// version; the message gives the offset). Zero bytes between containers
// (alignment) are skipped.
result<void> parse_fatbin(std::string_view section, gpu_code& into);

// The GPU code of an ELF file: every `.nv_fatbin` and `__nv_relfatbin`
// section (sections == 0 when it has none). Opened as read_elf_file opens it.
// Outcomes: ok | bad_archive | filesystem.
result<gpu_code> read_gpu_code(const std::filesystem::path& path);
// The same on an ELF image in memory (tests, the fuzzer).
result<gpu_code> parse_gpu_code(std::string_view elf_bytes);

// ---- /etc/ld.so.cache -------------------------------------------------------

struct ld_cache_entry {
    std::string soname;  // "libz.so.1"
    std::string path;    // "/lib/x86_64-linux-gnu/libz.so.1"
};

// The flags value of libraries for this machine in the cache (FLAG_ELF_LIBC6
// plus the architecture bits), as ldconfig writes them.
std::uint32_t ld_cache_host_flags() noexcept;

// Parses glibc's cache: the "glibc-ld.so.cache1.1" format, alone or after
// the old "ld.so-1.7.0" table. Entries whose flags differ from `want_flags`
// are skipped (0: keep all). Outcomes: ok | bad_manifest (bad magic,
// counts or offsets outside the file).
result<std::vector<ld_cache_entry>> parse_ld_cache(std::string_view bytes, std::uint32_t want_flags);

}  // namespace redist::elf
