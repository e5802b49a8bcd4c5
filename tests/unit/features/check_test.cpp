// Tests for redist/check.hpp and its readers (lib/features/elf.hpp,
// check_versions.hpp, check_data.hpp): escaping, the
// driver and GPU tables, the ELF reader and the ld.so.cache parser on real
// and synthetic bytes. The end-to-end cases (fake libraries built at test
// time, installed through the tools) are in tests/e2e/test_check.py.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "features/check_data.hpp"
#include "features/check_versions.hpp"
#include "features/elf.hpp"
#include "redist/check.hpp"

namespace {

std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put32(std::string& s, std::size_t at, std::uint32_t v) { std::memcpy(s.data() + at, &v, 4); }

// A new-format cache with the given (soname, path) entries, all with `flags`.
std::string make_cache(const std::vector<std::pair<std::string, std::string>>& entries, std::uint32_t flags) {
    const std::size_t header = 48, entry = 24;
    std::string s(header + entry * entries.size(), '\0');
    std::memcpy(s.data(), "glibc-ld.so.cache1.1", 20);
    put32(s, 20, static_cast<std::uint32_t>(entries.size()));
    std::string strings;
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const std::size_t at = header + i * entry;
        put32(s, at, flags);
        put32(s, at + 4, static_cast<std::uint32_t>(s.size() + strings.size()));
        strings += entries[i].first + '\0';
        put32(s, at + 8, static_cast<std::uint32_t>(s.size() + strings.size()));
        strings += entries[i].second + '\0';
    }
    put32(s, 24, static_cast<std::uint32_t>(strings.size()));
    return s + strings;
}

}  // namespace

TEST_CASE("escape_for_display makes hostile names printable") {
    CHECK(redist::escape_for_display("lib/libz.so.1") == "lib/libz.so.1");
    CHECK(redist::escape_for_display("a\x1b[31mb") == "a\\x1b[31mb");
    CHECK(redist::escape_for_display(std::string("nul\0x", 5)) == "nul\\x00x");
    CHECK(redist::escape_for_display("line\nbreak\r\x7f") == "line\\x0abreak\\x0d\\x7f");
    CHECK(redist::escape_for_display("back\\slash") == "back\\\\slash");
    CHECK(redist::escape_for_display("caf\xc3\xa9") == "caf\xc3\xa9");  // valid UTF-8 stays
    CHECK(redist::escape_for_display("bad\xc3(") == "bad\\xc3(");       // truncated sequence
    CHECK(redist::escape_for_display("\xff\xfe") == "\\xff\\xfe");
}

TEST_CASE("driver tables: CUDA versions, minimum drivers, package hints") {
    CHECK(redist::cuda_version_string(12040) == "12.4");
    CHECK(redist::cuda_version_string(13000) == "13.0");
    CHECK(redist::minimum_driver_for_cuda(12) == "525.60.13");
    CHECK(redist::minimum_driver_for_cuda(13) == "580.65.06");
    CHECK(redist::minimum_driver_for_cuda(99).empty());
    CHECK(redist::debian_package_hint("libz.so.1") == "zlib1g");
    CHECK(redist::debian_package_hint("libstdc++.so.6") == "libstdc++6");
    CHECK(redist::debian_package_hint("libmissing.so.1").empty());
}

TEST_CASE("preflight: a driver too old for the variant names what it supports and the option that works") {
    redist::driver_info d;
    d.cuda_version = 12040;
    d.kernel_module = "550.54.15";
    auto f = redist::preflight_findings(d, "cudnn", "9.19.0", 13);
    REQUIRE(f.size() == 1);
    CHECK(f[0].severity == redist::check_severity::failure);
    CHECK(f[0].message ==
          "the driver 550.54.15 supports CUDA 12.4, but cudnn 9.19.0 for CUDA 13 needs driver >= 580.65.06: "
          "use --cuda 12, or upgrade the driver");
    CHECK(redist::preflight_findings(d, "cudnn", "9.19.0", 12).empty());
    CHECK(redist::preflight_findings(d, "cudnn", "9.19.0", std::nullopt).empty());

    // Only the kernel module is known (libcuda could not be asked).
    redist::driver_info k;
    k.kernel_module = "550.54.15";
    f = redist::preflight_findings(k, "cudnn", "9.19.0", 13);
    REQUIRE(f.size() == 1);
    CHECK(f[0].message.find("supports CUDA 12.x") != std::string::npos);
    CHECK(f[0].message.find("use --cuda 12") != std::string::npos);
    k.kernel_module = "580.65.06";
    CHECK(redist::preflight_findings(k, "cudnn", "9.19.0", 13).empty());
    k.kernel_module = "450.80.02";  // older than CUDA 12's minimum too
    f = redist::preflight_findings(k, "cudnn", "9.19.0", 12);
    REQUIRE(f.size() == 1);
    CHECK(f[0].message.find("use --cuda 11") != std::string::npos);

    // No driver at all: nothing to say before a download.
    CHECK(redist::preflight_findings(redist::driver_info{}, "cudnn", "9.19.0", 13).empty());
}

TEST_CASE("preflight: GPU architectures against the cuDNN support table") {
    redist::driver_info d;
    d.cuda_version = 13000;
    d.gpus = {{0, 7, 0, "Tesla V100"}, {1, 9, 0, "H200"}};
    // cuDNN 9.11+ dropped pre-Turing GPUs: the V100 (7.0) is named, the H200 is fine.
    auto f = redist::preflight_findings(d, "cudnn", "9.19.0", 12);
    REQUIRE(f.size() == 1);
    CHECK(f[0].check == "gpu");
    CHECK(f[0].message.rfind(
              "GPU 0 (Tesla V100) has compute capability 7.0; cudnn 9.19.0 for CUDA 12 supports 7.5 and newer", 0) ==
          0);
    // 9.10 still supports Volta with the CUDA 12 variant, not with CUDA 13.
    CHECK(redist::preflight_findings(d, "cudnn", "9.10.2", 12).empty());
    CHECK(redist::preflight_findings(d, "cudnn", "9.10.2", 13).size() == 1);
    // Products without a table entry get no architecture finding.
    CHECK(redist::preflight_findings(d, "cutensor", "2.0.0", 12).empty());
}

TEST_CASE("the ELF reader reads this test binary") {
    const std::string self = slurp("/proc/self/exe");
    auto info = redist::elf::parse_elf(self);
    REQUIRE(info.ok());
    CHECK(info->elf_class == 2);  // ELFCLASS64 on the machines we build on
    CHECK(info->has_dynamic);
    CHECK(std::find(info->needed.begin(), info->needed.end(), "libc.so.6") != info->needed.end());
    auto from_file = redist::elf::read_elf_file("/proc/self/exe");
    // /proc/self/exe is a symlink: the file reader refuses to follow it.
    CHECK_FALSE(from_file.ok());
    const auto real = std::filesystem::canonical("/proc/self/exe");
    from_file = redist::elf::read_elf_file(real);
    REQUIRE(from_file.ok());
    CHECK(from_file->needed == info->needed);
}

TEST_CASE("the ELF reader reads symbol versions: needed by this binary, defined by libc") {
    const auto real = std::filesystem::canonical("/proc/self/exe");
    auto self = redist::elf::read_elf_file(real);
    REQUIRE(self.ok());
    const auto libc = std::find_if(self->version_needs.begin(), self->version_needs.end(),
                                   [](const auto& n) { return n.file == "libc.so.6"; });
    REQUIRE(libc != self->version_needs.end());
    REQUIRE_FALSE(libc->names.empty());
    for (const auto& name : libc->names) CHECK(name.rfind("GLIBC_", 0) == 0);
    // The libc this binary runs with defines every version it needs.
    std::string libc_path;
    {
        std::ifstream maps("/proc/self/maps");
        for (std::string line; std::getline(maps, line) && libc_path.empty();)
            if (const auto at = line.find('/'); at != std::string::npos && line.find("/libc.so.6") != std::string::npos)
                libc_path = line.substr(at);
    }
    REQUIRE_FALSE(libc_path.empty());
    auto defs = redist::elf::read_elf_file(std::filesystem::canonical(libc_path));
    REQUIRE(defs.ok());
    for (const auto& name : libc->names)
        CHECK(std::find(defs->version_defs.begin(), defs->version_defs.end(), name) != defs->version_defs.end());
    // libc's own name (the VER_FLG_BASE entry) is not a version.
    CHECK(std::find(defs->version_defs.begin(), defs->version_defs.end(), "libc.so.6") == defs->version_defs.end());
}

TEST_CASE("the ELF reader: a version section pointing outside itself makes no claims, the file still reads") {
    std::string bytes = slurp(std::filesystem::canonical("/proc/self/exe"));
    auto intact = redist::elf::parse_elf(bytes);
    REQUIRE(intact.ok());
    REQUIRE_FALSE(intact->version_needs.empty());
    // Find .gnu.version_r through the (ELF64, little-endian) section headers.
    auto u64 = [&](std::size_t at) {
        std::uint64_t v;
        std::memcpy(&v, bytes.data() + at, 8);
        return v;
    };
    auto u32 = [&](std::size_t at) {
        std::uint32_t v;
        std::memcpy(&v, bytes.data() + at, 4);
        return v;
    };
    auto u16 = [&](std::size_t at) {
        std::uint16_t v;
        std::memcpy(&v, bytes.data() + at, 2);
        return v;
    };
    const std::uint64_t shoff = u64(0x28);
    const unsigned shentsize = u16(0x3a), shnum = u16(0x3c);
    std::uint64_t verneed = 0;
    for (unsigned i = 0; i < shnum; ++i)
        if (u32(shoff + std::uint64_t(i) * shentsize + 4) == 0x6ffffffe)
            verneed = u64(shoff + std::uint64_t(i) * shentsize + 0x18);
    REQUIRE(verneed != 0);
    const std::uint32_t far = 0x7fffff00;  // vn_aux: the first Vernaux far outside the section
    std::memcpy(bytes.data() + verneed + 8, &far, 4);
    auto broken = redist::elf::parse_elf(bytes);
    REQUIRE(broken.ok());
    CHECK(broken->version_needs.empty());
    CHECK(broken->needed == intact->needed);
}

TEST_CASE("run_check_probe --quick: the driver is asked only its version") {
    std::vector<std::string> lines;
    auto emit = [&](std::string_view l) { lines.emplace_back(l); };
    CHECK(redist::run_check_probe({"--quick", "load"}, emit) == 2);  // still a usage error
    lines.clear();
    CHECK(redist::run_check_probe({"--quick", "driver", "/nonexistent/libcuda.so.1", ""}, emit) == 0);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == "begin\t0");  // --quick is no operation: indices are unchanged
    CHECK(lines[1].rfind("fail\t0\t/nonexistent/libcuda.so.1: cannot open shared object file", 0) == 0);
}

TEST_CASE("the ELF readers open regular files only: a FIFO or a device neither hangs nor is read") {
    const auto dir = std::filesystem::temp_directory_path() / ("redist-check-fifo-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto fifo = dir / "libfifo.so.1";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    // A blocking open of a FIFO waits for a writer: this would hang.
    CHECK(redist::elf::read_elf_ident(fifo).elf_class == 0);
    auto r = redist::elf::read_elf_file(fifo);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().message.find("not a regular file") != std::string::npos);
    // Through a symlink too (ident follows links, as ld.so does; the file reader refuses them).
    std::filesystem::create_symlink(fifo, dir / "liblink.so.1");
    CHECK(redist::elf::read_elf_ident(dir / "liblink.so.1").elf_class == 0);
    CHECK_FALSE(redist::elf::read_elf_file(dir / "liblink.so.1").ok());
    CHECK(redist::elf::read_elf_ident("/dev/zero").elf_class == 0);
    CHECK(redist::elf::read_elf_ident("/proc/self/exe").elf_class != 0);  // a link to a regular file
    std::filesystem::remove_all(dir);
}

TEST_CASE("header_define reads `#define NAME <decimal>` and nothing else") {
    const std::string text =
        "/* cudnn_version.h */\n#ifndef CUDNN_VERSION_H_\n#  define CUDNN_MAJOR 9\n#define CUDNN_MINOR\t19\r\n"
        "#define CUDNN_PATCHLEVEL 0 /* patch */\n#define CUDNN_VERSION (CUDNN_MAJOR * 10000)\n"
        "#define CUDNN_MAJORX 7\n#define HEX 0x10\n#define BIG 12345678901234\n";
    CHECK(redist::header_define(text, "CUDNN_MAJOR") == 9);
    CHECK(redist::header_define(text, "CUDNN_MINOR") == 19);
    CHECK(redist::header_define(text, "CUDNN_PATCHLEVEL") == 0);
    CHECK_FALSE(redist::header_define(text, "CUDNN_VERSION"));  // an expression: not evaluated
    CHECK_FALSE(redist::header_define(text, "HEX"));
    CHECK_FALSE(redist::header_define(text, "BIG"));  // more digits than a version has
    CHECK_FALSE(redist::header_define(text, "MISSING"));
    CHECK_FALSE(redist::header_define("", "CUDNN_MAJOR"));
    CHECK_FALSE(redist::header_define("#define CUDNN_MAJOR", "CUDNN_MAJOR"));
}

TEST_CASE("the ELF reader rejects garbage and truncations without crashing") {
    CHECK_FALSE(redist::elf::parse_elf("").ok());
    CHECK_FALSE(redist::elf::parse_elf("not an elf file at all").ok());
    const std::string self = slurp("/proc/self/exe");
    for (std::size_t cut : {4u, 16u, 52u, 64u, 200u}) {
        auto r = redist::elf::parse_elf(self.substr(0, cut));
        CHECK_FALSE(r.ok());
        if (!r.ok()) CHECK(r.error_value().code == redist::error_code::bad_archive);
    }
    // Corrupt the section header offset: either an error or a result, never a crash.
    std::string bad = self;
    std::memset(bad.data() + 0x28, 0xff, 8);
    (void)redist::elf::parse_elf(bad);
}

TEST_CASE("ld.so.cache: synthetic new-format caches") {
    const std::uint32_t flags = 0x0303;
    auto parsed = redist::elf::parse_ld_cache(
        make_cache({{"libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"}, {"libfoo.so.2", "/opt/foo/libfoo.so.2"}}, flags),
        flags);
    REQUIRE(parsed.ok());
    REQUIRE(parsed->size() == 2);
    CHECK((*parsed)[0].soname == "libz.so.1");
    CHECK((*parsed)[0].path == "/lib/x86_64-linux-gnu/libz.so.1");
    CHECK((*parsed)[1].path == "/opt/foo/libfoo.so.2");
    // Other architectures' entries are skipped.
    parsed = redist::elf::parse_ld_cache(make_cache({{"libz.so.1", "/lib32/libz.so.1"}}, 0x0003), flags);
    REQUIRE(parsed.ok());
    CHECK(parsed->empty());
    // Bad magic, counts and offsets are errors.
    CHECK_FALSE(redist::elf::parse_ld_cache("ld.so-garbage", flags).ok());
    std::string c = make_cache({{"a", "b"}}, flags);
    put32(c, 20, 1000000);  // nlibs beyond the file
    CHECK_FALSE(redist::elf::parse_ld_cache(c, flags).ok());
    c = make_cache({{"a", "b"}}, flags);
    put32(c, 48 + 8, 0xfffffff0u);  // value offset outside the file
    CHECK_FALSE(redist::elf::parse_ld_cache(c, flags).ok());
    c = make_cache({{"a", "b"}}, flags);
    c.pop_back();  // last string loses its NUL
    CHECK_FALSE(redist::elf::parse_ld_cache(c, flags).ok());
}

TEST_CASE("ld.so.cache: this machine's cache lists libc") {
    const std::string bytes = slurp("/etc/ld.so.cache");
    if (bytes.empty()) return;  // no cache (static containers)
    auto parsed = redist::elf::parse_ld_cache(bytes, redist::elf::ld_cache_host_flags());
    REQUIRE(parsed.ok());
    CHECK(std::any_of(parsed->begin(), parsed->end(), [](const auto& e) { return e.soname == "libc.so.6"; }));
}

TEST_CASE("run_checks: a prefix without receipts is not_found") {
    const std::filesystem::path dir = std::filesystem::path(REDIST_TEST_SCRATCH) / "empty";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    redist::check_options o;
    o.prefix = dir;
    auto r = redist::run_checks(o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == redist::error_code::not_found);
    CHECK(redist::exit_code_for(redist::error_code::check_failed) == 11);
}

TEST_CASE("run_check_probe: bad operations are a usage status, load errors are reported verbatim") {
    std::vector<std::string> lines;
    auto emit = [&](std::string_view l) { lines.emplace_back(l); };
    CHECK(redist::run_check_probe({"nonsense"}, emit) == 2);
    CHECK(redist::run_check_probe({"load"}, emit) == 2);  // missing argument
    lines.clear();
    CHECK(redist::run_check_probe({"load", "/nonexistent/libnothing.so.1"}, emit) == 0);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == "begin\t0");
    CHECK(lines[1] ==
          "fail\t0\t/nonexistent/libnothing.so.1: cannot open shared object file: No such file or directory");
}
