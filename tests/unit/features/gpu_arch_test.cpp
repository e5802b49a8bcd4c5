// Tests for the fatbin reader (lib/features/elf.hpp: parse_fatbin,
// read_gpu_code) and the `gpu-code` check (lib/features/gpu_arch.hpp), on
// fatbin sections and ELF files generated here, and through run_checks on a
// prefix whose GPUs are given (check_options::compute_capabilities). Real
// nvcc output is tested in tests/e2e/test_check.py (GpuCode), which skips
// without nvcc.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "features/elf.hpp"
#include "features/gpu_arch.hpp"
#include "redist/check.hpp"
#include "redist/prefix.hpp"
#include "redist/printable.hpp"
#include "store/receipts.hpp"
#include "support.hpp"

namespace {

namespace fs = std::filesystem;
using redist::elf::gpu_arch;
using flavor = gpu_arch::flavor;

void put(std::string& s, std::size_t at, std::uint64_t v, std::size_t width) {
    for (std::size_t i = 0; i < width; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

constexpr std::uint16_t ptx = 1, sass = 2;
constexpr std::uint64_t compressed = 0x8000, arch_specific = 0x100000, family = 0x200000;

struct entry {
    std::uint16_t kind = sass;
    unsigned arch = 90;
    std::uint64_t flags = 0x11;  // 64-bit, Linux host, as nvcc writes them
    std::string payload =
        "\x7f"
        "ELF payload";
    std::size_t header = 64;  // real ones: 64, 80, 96, 104, 112
};

// One fatbin container, laid out as nvcc lays it out: the 16-byte header,
// then each entry's header and its payload padded to 8 bytes.
std::string container(const std::vector<entry>& entries) {
    std::string body;
    for (const auto& e : entries) {
        const std::size_t padded = (e.payload.size() + 7) & ~std::size_t{7};
        std::string h(e.header, '\0');
        put(h, 0, e.kind, 2);
        put(h, 2, 0x0101, 2);
        put(h, 4, e.header, 4);
        put(h, 8, padded, 8);
        put(h, 16, e.payload.size(), 4);
        put(h, 28, e.arch, 4);
        put(h, 40, e.flags, 8);
        body += h + e.payload + std::string(padded - e.payload.size(), '\0');
    }
    std::string head(16, '\0');
    put(head, 0, 0xBA55ED50u, 4);
    put(head, 4, 1, 2);
    put(head, 6, 16, 2);
    put(head, 8, body.size(), 8);
    return head + body;
}

#if defined(__aarch64__)
constexpr std::uint16_t host_machine = 183;  // EM_AARCH64
#else
constexpr std::uint16_t host_machine = 62;  // EM_X86_64
#endif

// A minimal shared library (ELF64, little-endian, this machine): .dynamic
// with a SONAME (so `redist check` takes it for a library), and the given
// sections, e.g. {".nv_fatbin", bytes}.
std::string make_elf(const std::vector<std::pair<std::string, std::string>>& extra, const std::string& soname) {
    struct section {
        std::string name;
        std::uint32_t type;
        std::uint64_t flags;
        std::string data;
        std::uint32_t link = 0;
        std::uint64_t entsize = 0;
    };
    std::string dynstr = std::string(1, '\0') + soname + '\0';
    std::string dynamic(32, '\0');
    put(dynamic, 0, 14, 8);  // DT_SONAME
    put(dynamic, 8, 1, 8);   // its offset in .dynstr; then DT_NULL
    std::vector<section> sections = {
        {"", 0, 0, ""}, {".shstrtab", 3, 0, ""}, {".dynstr", 3, 2, dynstr}, {".dynamic", 6, 3, dynamic, 2, 16}};
    for (const auto& [name, data] : extra) sections.push_back({name, 1, 2, data});
    std::string shstrtab(1, '\0');
    std::vector<std::uint32_t> name_at;
    for (const auto& s : sections) {
        name_at.push_back(s.name.empty() ? 0 : static_cast<std::uint32_t>(shstrtab.size()));
        if (!s.name.empty()) shstrtab += s.name + '\0';
    }
    sections[1].data = shstrtab;
    std::string file(64, '\0');
    std::vector<std::uint64_t> offset;
    for (const auto& s : sections) {
        file.resize((file.size() + 7) & ~std::size_t{7}, '\0');
        offset.push_back(file.size());
        file += s.data;
    }
    file.resize((file.size() + 7) & ~std::size_t{7}, '\0');
    const std::uint64_t shoff = file.size();
    for (std::size_t i = 0; i < sections.size(); ++i) {
        std::string sh(64, '\0');
        put(sh, 0, name_at[i], 4);
        put(sh, 4, sections[i].type, 4);
        put(sh, 8, sections[i].flags, 8);
        put(sh, 24, i ? offset[i] : 0, 8);
        put(sh, 32, sections[i].data.size(), 8);
        put(sh, 40, sections[i].link, 4);
        put(sh, 48, i ? 8 : 0, 8);
        put(sh, 56, sections[i].entsize, 8);
        file += sh;
    }
    std::memcpy(file.data(),
                "\x7f"
                "ELF\x02\x01\x01",
                7);
    put(file, 16, 3, 2);  // ET_DYN
    put(file, 18, host_machine, 2);
    put(file, 20, 1, 4);
    put(file, 40, shoff, 8);
    put(file, 52, 64, 2);  // e_ehsize
    put(file, 58, 64, 2);  // e_shentsize
    put(file, 60, sections.size(), 2);
    put(file, 62, 1, 2);  // e_shstrndx
    return file;
}

std::vector<std::string> names(const std::vector<gpu_arch>& list, bool is_ptx) {
    std::vector<std::string> out;
    for (const auto& a : list) out.push_back(redist::elf::arch_name(a, is_ptx));
    return out;
}

using strings = std::vector<std::string>;

}  // namespace

TEST_CASE("parse_fatbin lists SASS and PTX architectures, with their a and f flavors") {
    const std::string bytes =
        container({{sass, 80}, {sass, 90, 0x11 | arch_specific}, {ptx, 90, 0x11 | compressed}}) +
        // Zeros between containers (alignment) are skipped.
        std::string(8, '\0') +
        container({{sass, 100, 0x1000011 | family, "cubin", 112}, {ptx, 121, 0x11, "ptx", 80}, {sass, 80}});
    redist::elf::gpu_code code;
    REQUIRE(redist::elf::parse_fatbin(bytes, code).ok());
    CHECK(code.containers == 2);
    CHECK(code.entries == 6);
    CHECK(code.other == 0);
    CHECK(names(code.sass, false) == strings{"sm_80", "sm_90a", "sm_100f"});  // distinct, sorted
    CHECK(names(code.ptx, true) == strings{"compute_90", "compute_121"});
    CHECK(redist::gpu_arch::describe(code) == "SASS sm_80, sm_90a, sm_100f; PTX compute_90, compute_121");

    redist::elf::gpu_code odd;
    REQUIRE(redist::elf::parse_fatbin(container({{0x40, 90}}), odd).ok());  // a kind we do not judge
    CHECK(odd.other == 1);
    CHECK(odd.sass.empty());
    redist::elf::gpu_code none;
    REQUIRE(redist::elf::parse_fatbin("", none).ok());
    CHECK(none.containers == 0);
}

TEST_CASE("parse_fatbin refuses what does not fit, with the offset, and never reads past the section") {
    const std::string good = container({{sass, 80}, {ptx, 80}});
    auto refused = [](std::string bytes) {
        redist::elf::gpu_code code;
        auto r = redist::elf::parse_fatbin(bytes, code);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::bad_archive);
        return r.error_value().message;
    };
    CHECK(refused(good.substr(0, 10)) == "bad fatbin: a container header cut short at offset 0");
    CHECK(refused(good.substr(0, good.size() - 8)) == "bad fatbin: a container larger than its section at offset 0");
    CHECK(refused("garbage!" + good) == "bad fatbin: no container header (magic 0xBA55ED50) at offset 0");
    CHECK(refused(good + "x") == "bad fatbin: a container header cut short at offset " + std::to_string(good.size()));
    std::string bad = good;
    put(bad, 4, 2, 2);
    CHECK(refused(bad) == "bad fatbin: container version 2 (not 1) at offset 0");
    bad = good;
    put(bad, 6, 8, 2);  // a container header smaller than itself
    CHECK(refused(bad) == "bad fatbin: a container header size out of bounds at offset 0");
    bad = good;
    put(bad, 16 + 4, 20, 4);  // the first entry's header: too small for the fields read
    CHECK(refused(bad) == "bad fatbin: an entry header size out of bounds at offset 16");
    bad = good;
    put(bad, 16 + 4, 0xffffffffu, 4);
    CHECK(refused(bad) == "bad fatbin: an entry header size out of bounds at offset 16");
    bad = good;
    put(bad, 16 + 8, ~std::uint64_t{0}, 8);  // a payload size that would overflow
    CHECK(refused(bad) == "bad fatbin: an entry larger than its container at offset 16");
    // A container whose size ends inside an entry header: the rest is not zeros.
    bad = good;
    put(bad, 8, 64 + 16 + 20, 8);
    CHECK(refused(bad.substr(0, 16 + 64 + 16 + 20)) ==
          "bad fatbin: an entry header cut short at offset " + std::to_string(16 + 64 + 16));
    // Every truncation: an error or a result, never a read past the end (ASan).
    for (std::size_t cut = 0; cut < good.size(); ++cut) {
        redist::elf::gpu_code code;
        (void)redist::elf::parse_fatbin(std::string_view(good).substr(0, cut), code);
    }
}

TEST_CASE("code_for: SASS runs on its major at an equal or higher minor, PTX forward, a and f only in their family") {
    auto code = [](std::vector<gpu_arch> s, std::vector<gpu_arch> p) {
        redist::elf::gpu_code c;
        c.sass = std::move(s);
        c.ptx = std::move(p);
        return c;
    };
    auto use = [](const redist::elf::gpu_code& c, int major, int minor) -> std::string {
        const auto u = redist::gpu_arch::code_for(c, major, minor);
        return u ? redist::elf::arch_name(u->arch, u->ptx) : "none";
    };
    const auto sm80 = code({{8, 0}}, {});
    CHECK(use(sm80, 8, 0) == "sm_80");
    CHECK(use(sm80, 8, 6) == "sm_80");
    CHECK(use(sm80, 8, 9) == "sm_80");
    CHECK(use(sm80, 9, 0) == "none");  // SASS never runs on another major
    CHECK(use(sm80, 7, 5) == "none");
    CHECK(use(code({{8, 6}}, {}), 8, 0) == "none");  // nor on a lower minor
    const auto sm90a = code({{9, 0, flavor::arch_specific}}, {});
    CHECK(use(sm90a, 9, 0) == "sm_90a");
    CHECK(use(code({{10, 0, flavor::arch_specific}}, {}), 10, 3) == "none");  // sm_100a: 10.0 only
    CHECK(use(code({{10, 0, flavor::family}}, {}), 10, 3) == "sm_100f");
    CHECK(use(code({{10, 0, flavor::family}}, {}), 12, 0) == "none");
    const auto ptx80 = code({}, {{8, 0}});
    CHECK(use(ptx80, 9, 0) == "compute_80");  // JIT-compiled forward
    CHECK(use(ptx80, 12, 1) == "compute_80");
    CHECK(use(ptx80, 7, 5) == "none");
    CHECK(use(code({}, {{9, 0, flavor::arch_specific}}), 9, 0) == "compute_90a");
    CHECK(use(code({}, {{9, 0, flavor::arch_specific}}), 10, 0) == "none");
    CHECK(use(code({}, {{10, 0, flavor::family}}), 10, 3) == "compute_100f");
    CHECK(use(code({}, {{10, 0, flavor::family}}), 12, 0) == "none");
    // SASS is preferred to PTX, and the newest SASS that runs is the one used.
    CHECK(use(code({{7, 5}, {8, 0}, {8, 6}, {9, 0}}, {{12, 1}}), 8, 9) == "sm_86");
    CHECK(use(code({{7, 5}}, {{7, 5}}), 9, 0) == "compute_75");
}

TEST_CASE("read_gpu_code reads .nv_fatbin and __nv_relfatbin of an ELF file, and nothing from a file without them") {
    const auto dir = redist_test::scratch("read_gpu_code");
    const std::string fatbin = container({{sass, 80}, {ptx, 80, 0x11 | compressed}});
    const std::string relfatbin = container({{sass, 90, 0x11 | arch_specific}});
    redist_test::write(dir / "libk.so", make_elf({{".nv_fatbin", fatbin}, {"__nv_relfatbin", relfatbin}}, "libk.so"));
    auto code = redist::elf::read_gpu_code(dir / "libk.so");
    REQUIRE(code.ok());
    CHECK(code->sections == 2);
    CHECK(code->containers == 2);
    CHECK(names(code->sass, false) == strings{"sm_80", "sm_90a"});
    CHECK(names(code->ptx, true) == strings{"compute_80"});
    // The same bytes in memory, and the ELF reader still reads the file.
    auto again = redist::elf::parse_gpu_code(redist_test::slurp(dir / "libk.so"));
    REQUIRE(again.ok());
    CHECK(again->sass == code->sass);
    auto info = redist::elf::read_elf_file(dir / "libk.so");
    REQUIRE(info.ok());
    CHECK(info->soname == "libk.so");
    CHECK(info->is_shared_library());

    redist_test::write(dir / "libplain.so", make_elf({{".rodata", "nothing"}}, "libplain.so"));
    code = redist::elf::read_gpu_code(dir / "libplain.so");
    REQUIRE(code.ok());
    CHECK(code->sections == 0);

    // A broken fatbin names its section and the offset.
    redist_test::write(dir / "libbad.so", make_elf({{".nv_fatbin", fatbin.substr(0, 40)}}, "libbad.so"));
    code = redist::elf::read_gpu_code(dir / "libbad.so");
    REQUIRE_FALSE(code.ok());
    CHECK(code.error_value().message == ".nv_fatbin: bad fatbin: a container larger than its section at offset 0");
    CHECK(code.error_value().path == (dir / "libbad.so").string());
    CHECK_FALSE(redist::elf::read_gpu_code(dir / "missing.so").ok());
}

TEST_CASE("read_gpu_code reads entry headers across its read window, and refuses a section outside the file") {
    const auto dir = redist_test::scratch("read_gpu_code_window");
    // Payloads of odd sizes up to 3 windows long, so that headers fall on and across window edges.
    std::vector<entry> entries;
    for (unsigned i = 0; i < 60; ++i) {
        entry e{sass, 50 + (i % 8) * 10, 0x11, std::string(i * 211 % 12000 + 1, 'p'), i % 3 ? 64u : 112u};
        if (i % 5 == 0) e.kind = ptx;
        entries.push_back(e);
    }
    const std::string fatbin = container(entries) + container({{sass, 121, 0x11, std::string(4096, 'q')}});
    redist::elf::gpu_code in_memory;
    REQUIRE(redist::elf::parse_fatbin(fatbin, in_memory).ok());
    const std::string file = make_elf({{".nv_fatbin", fatbin}}, "libwide.so");
    redist_test::write(dir / "libwide.so", file);
    auto code = redist::elf::read_gpu_code(dir / "libwide.so");
    REQUIRE(code.ok());
    CHECK(code->entries == 61);
    CHECK(code->containers == 2);
    CHECK(code->sass == in_memory.sass);
    CHECK(code->ptx == in_memory.ptx);
    CHECK(names(code->sass, false).back() == "sm_121");

    // The section header says the section runs past the end of the file.
    std::string cut = file;
    const std::uint64_t shoff = [&] {
        std::uint64_t v = 0;
        std::memcpy(&v, cut.data() + 40, 8);
        return v;
    }();
    put(cut, shoff + 4 * 64 + 32, cut.size(), 8);  // section 4 (.nv_fatbin): sh_size
    redist_test::write(dir / "libcut.so", cut);
    code = redist::elf::read_gpu_code(dir / "libcut.so");
    REQUIRE_FALSE(code.ok());
    CHECK(code.error_value().message.find(".nv_fatbin") != std::string::npos);
}

TEST_CASE("read_gpu_code on the real cuDNN: code for Hopper, none for Volta outside the precompiled engines") {
    const fs::path ops = "/usr/local/cuda/lib64/libcudnn_ops.so.9";
    std::error_code ec;
    if (!fs::exists(ops, ec)) {
        WARN("no cuDNN under /usr/local/cuda/lib64: skipped");
        return;
    }
    auto code = redist::elf::read_gpu_code(fs::canonical(ops));
    REQUIRE(code.ok());
    CHECK(code->sections == 1);
    CHECK(code->containers > 1);
    CHECK(redist::gpu_arch::code_for(*code, 9, 0));
    CHECK(redist::gpu_arch::code_for(*code, 8, 0));
    CHECK_FALSE(redist::gpu_arch::code_for(*code, 7, 0));  // cuDNN 9.11+: Turing and newer
    const auto sass = names(code->sass, false);
    CHECK(std::find(sass.begin(), sass.end(), "sm_75") != sass.end());
}

namespace {

// A prefix with one component installing the given files (written, and
// listed in a receipt as regular files; give them sorted by path, as receipts list them).
fs::path make_prefix(const std::string& name, const std::string& product, const std::string& version,
                     const std::string& variant, const std::vector<std::pair<std::string, std::string>>& files) {
    const auto prefix = redist_test::scratch(name);
    redist::receipt r;
    r.product = product;
    r.release_label = version;
    r.component = product;
    r.component_version = version;
    r.platform = "linux-x86_64";
    r.variant = variant;
    r.archive_sha256 = std::string(64, 'a');
    for (const auto& [path, bytes] : files) {
        redist_test::write(prefix / path, bytes);
        r.files.push_back({path, redist::entry_kind::regular, bytes.size(), std::string(64, 'b'), "", 0644});
    }
    redist_test::write(prefix / ".redist/receipts" / product / (product + ".json"), redist::receipt_to_json(r));
    return prefix;
}

std::vector<redist::check_finding> gpu_code_findings(const redist::check_report& report) {
    std::vector<redist::check_finding> out;
    for (const auto& f : report.findings)
        if (f.check == "gpu-code") out.push_back(f);
    return out;
}

}  // namespace

TEST_CASE("run_checks: a library without code for the given GPU is a failure, one with code is not") {
    const auto prefix = make_prefix(
        "check_given_gpu", "demo", "1.0.0", "cuda12",
        {{"lib/libcpu.so.1.0.0", make_elf({}, "libcpu.so.1")},
         {"lib/libnew.so.1.0.0", make_elf({{".nv_fatbin", container({{sass, 80}, {sass, 90}})}}, "libnew.so.1")},
         {"lib/libold.so.1.0.0", make_elf({{".nv_fatbin", container({{sass, 80}})}}, "libold.so.1")}});
    redist::check_options o;
    o.prefix = prefix;
    o.load = false;  // no child: the files alone
    o.ld_so_cache = prefix / "no-ld.so.cache";
    o.compute_capabilities = {{9, 0}};
    auto report = redist::run_checks(o);
    REQUIRE(report.ok());
    auto found = gpu_code_findings(*report);
    REQUIRE(found.size() == 2);  // libcpu has no GPU code: no finding
    CHECK(found[0].path == "lib/libnew.so.1.0.0");
    CHECK(found[0].severity == redist::check_severity::info);
    CHECK(found[0].message ==
          "lib/libnew.so.1.0.0: code for GPU 0 (target, compute capability 9.0): SASS sm_90 (carries SASS sm_80, "
          "sm_90 and no PTX)");
    CHECK(found[1].path == "lib/libold.so.1.0.0");
    CHECK(found[1].severity == redist::check_severity::failure);
    CHECK(found[1].component == "demo");
    CHECK(found[1].message ==
          "lib/libold.so.1.0.0 has no code for GPU 0 (target, compute capability 9.0): it carries SASS sm_80 and no "
          "PTX; running there takes SASS sm_90 (or sm_90a) or PTX compute_90 or older, else its kernels fail with "
          "\"no kernel image is available for execution on the device\" (a build of demo 1.0.0 with that code is "
          "needed: an older release or another CUDA variant may have it)");
    CHECK(report->failed());

    // On an Ampere 8.6 both run (sm_80 SASS runs on 8.6); two GPUs of one kind are one finding.
    o.compute_capabilities = {{8, 6}, {8, 6}};
    report = redist::run_checks(o);
    REQUIRE(report.ok());
    found = gpu_code_findings(*report);
    REQUIRE(found.size() == 2);
    for (const auto& f : found) {
        CHECK(f.severity == redist::check_severity::info);
        CHECK(f.message.find("GPUs 0, 1 (target, compute capability 8.6): SASS sm_80") != std::string::npos);
    }
    CHECK_FALSE(report->failed());

    // No GPU to judge (none given, no driver asked): no gpu-code finding.
    o.compute_capabilities.clear();
    report = redist::run_checks(o);
    REQUIRE(report.ok());
    CHECK(gpu_code_findings(*report).empty());
}

TEST_CASE("run_checks: cuDNN without code for a Volta names the release and variant that has it") {
    const auto prefix = make_prefix(
        "check_cudnn_volta", "cudnn", "9.19.0.56", "cuda13",
        {{"lib/libcudnn_ops.so.9.19.0",
          make_elf({{".nv_fatbin", container({{sass, 75}, {sass, 80}, {sass, 90, 0x11 | arch_specific}})}},
                   "libcudnn_ops.so.9")}});
    redist::check_options o;
    o.prefix = prefix;
    o.load = false;
    o.ld_so_cache = prefix / "no-ld.so.cache";
    o.compute_capabilities = {{7, 0}};
    auto report = redist::run_checks(o);
    REQUIRE(report.ok());
    const auto found = gpu_code_findings(*report);
    REQUIRE(found.size() == 1);
    CHECK(found[0].severity == redist::check_severity::failure);
    CHECK(found[0].message ==
          "lib/libcudnn_ops.so.9.19.0 has no code for GPU 0 (target, compute capability 7.0): it carries SASS "
          "sm_75, sm_80, sm_90a and no PTX; running there takes SASS sm_70 (or sm_70a) or PTX compute_70 or older, "
          "else its kernels fail with \"no kernel image is available for execution on the device\"; cudnn 9.10 for "
          "CUDA 12 supports compute capability 7.0 (cuDNN 9.0-9.10 support matrix: Maxwell (5.0) and newer): redist "
          "fetch cudnn 9.10 --cuda 12 --prefix " +
              redist::shell_quote(prefix.string()));
    // The support table says the same before a download (the `gpu` check).
    CHECK(std::any_of(report->findings.begin(), report->findings.end(), [](const auto& f) {
        return f.check == "gpu" && f.message.find("GPU 0 (target) has compute capability 7.0") == 0;
    }));
    // The Hopper-only sm_90a is code for a 9.0, and for nothing else.
    o.compute_capabilities = {{9, 0}};
    report = redist::run_checks(o);
    REQUIRE(report.ok());
    REQUIRE(gpu_code_findings(*report).size() == 1);
    CHECK(gpu_code_findings(*report)[0].severity == redist::check_severity::info);
    o.compute_capabilities = {{8, 9}};  // Ada: sm_80 SASS runs
    report = redist::run_checks(o);
    REQUIRE(report.ok());
    CHECK(gpu_code_findings(*report)[0].severity == redist::check_severity::info);
}
