// Tests for archive/unpack.hpp.
//
// Every archive is built here with libarchive's write API (and liblzma's
// multi-threaded encoder for multi-block xz), then fed to the streaming
// unpacker in chunks of various sizes. Checks cover:
//  - the returned entries (paths, kinds, sizes, sha256, modes, link targets)
//    and the files on disk agree with what was put in;
//  - single- and multi-block xz, tar.gz, tar.zst, zip; chunk-size independence;
//  - malicious archives: unsafe_archive, and nothing written outside the stage;
//  - corrupt and truncated data: bad_archive; write errors: filesystem;
//  - write() after a worker failure returns the error; destruction mid-stream.
#include <catch2/catch.hpp>

#include "support.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <lzma.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "archive/sha256.hpp"
#include "archive/unpack.hpp"
#include "support/budget.hpp"
#include "support/posix_file.hpp"

namespace fs = std::filesystem;

using redist::entry_kind;
using redist::error_code;
using redist::unpacked_entry;

// Fails with the error's description instead of a bare "false".
namespace {

const fs::path scratch_root = fs::path(REDIST_TEST_SCRATCH);

// A fresh, empty directory scratch/<name>/ with an empty stage inside it.
// Returns the stage; its parent is the "outside" that must stay untouched.
fs::path fresh_stage(const std::string& name) {
    const fs::path dir = scratch_root / name;
    fs::remove_all(dir);
    fs::create_directories(dir / "stage");
    return dir / "stage";
}

// Everything under `dir`, as relative paths, for "nothing else was written".
std::vector<std::string> listing(const fs::path& dir) {
    std::vector<std::string> out;
    for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it)
        out.push_back(fs::relative(it->path(), dir).string());
    std::sort(out.begin(), out.end());
    return out;
}

// ---- building archives -------------------------------------------------------

enum class kind { file, dir, symlink, hardlink, chardev, fifo };

struct spec {
    std::string name;
    kind type = kind::file;
    std::string data;  // file content, or the link target
    unsigned mode = 0644;
    std::int64_t mtime = 1700000000;
};

enum class container { tar, tar_xz, tar_gz, tar_zst, zip };

la_ssize_t append_cb(archive*, void* client, const void* buf, size_t n) {
    static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
}

// `level` is the compressor's level: low by default, to keep the tests fast.
std::string build(const std::vector<spec>& specs, container c, int level = 1) {
    archive* a = archive_write_new();
    REQUIRE(a != nullptr);
    if (c == container::zip) {
        REQUIRE(archive_write_set_format_zip(a) == ARCHIVE_OK);
    } else {
        REQUIRE(archive_write_set_format_pax_restricted(a) == ARCHIVE_OK);
    }
    if (c == container::tar_xz) REQUIRE(archive_write_add_filter_xz(a) == ARCHIVE_OK);
    if (c == container::tar_gz) REQUIRE(archive_write_add_filter_gzip(a) == ARCHIVE_OK);
    if (c == container::tar_zst) REQUIRE(archive_write_add_filter_zstd(a) == ARCHIVE_OK);
    if (c != container::tar && c != container::zip)
        REQUIRE(archive_write_set_filter_option(a, nullptr, "compression-level", std::to_string(level).c_str()) ==
                ARCHIVE_OK);
    // No zero padding after the compressed stream: the truncation tests cut
    // real bytes, not padding.
    REQUIRE(archive_write_set_bytes_in_last_block(a, 1) == ARCHIVE_OK);
    std::string out;
    REQUIRE(archive_write_open(a, &out, nullptr, append_cb, nullptr) == ARCHIVE_OK);
    for (const spec& s : specs) {
        archive_entry* e = archive_entry_new();
        archive_entry_set_pathname(e, s.name.c_str());
        archive_entry_set_mtime(e, s.mtime, 0);
        archive_entry_set_perm(e, static_cast<mode_t>(s.mode));
        switch (s.type) {
            case kind::file:
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_size(e, static_cast<la_int64_t>(s.data.size()));
                break;
            case kind::dir: archive_entry_set_filetype(e, AE_IFDIR); break;
            case kind::symlink:
                archive_entry_set_filetype(e, AE_IFLNK);
                archive_entry_set_symlink(e, s.data.c_str());
                break;
            case kind::hardlink:
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_hardlink(e, s.data.c_str());
                archive_entry_set_size(e, 0);
                break;
            case kind::chardev:
                archive_entry_set_filetype(e, AE_IFCHR);
                archive_entry_set_rdev(e, makedev(1, 3));
                break;
            case kind::fifo: archive_entry_set_filetype(e, AE_IFIFO); break;
        }
        REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
        if (s.type == kind::file && !s.data.empty())
            REQUIRE(archive_write_data(a, s.data.data(), s.data.size()) == static_cast<la_ssize_t>(s.data.size()));
        archive_entry_free(e);
    }
    REQUIRE(archive_write_close(a) == ARCHIVE_OK);
    archive_write_free(a);
    return out;
}

// xz with many independent blocks, so the decoder really runs multi-threaded.
std::string xz_multiblock(const std::string& raw, std::uint64_t block_size) {
    lzma_stream strm = LZMA_STREAM_INIT;
    lzma_mt mt{};
    mt.threads = 2;
    mt.block_size = block_size;
    mt.preset = 0;
    mt.check = LZMA_CHECK_CRC64;
    REQUIRE(lzma_stream_encoder_mt(&strm, &mt) == LZMA_OK);
    std::string out(raw.size() + raw.size() / 2 + (1 << 16), '\0');
    strm.next_in = reinterpret_cast<const std::uint8_t*>(raw.data());
    strm.avail_in = raw.size();
    strm.next_out = reinterpret_cast<std::uint8_t*>(out.data());
    strm.avail_out = out.size();
    lzma_ret ret;
    while ((ret = lzma_code(&strm, LZMA_FINISH)) == LZMA_OK) {}
    REQUIRE(ret == LZMA_STREAM_END);
    out.resize(strm.total_out);
    lzma_end(&strm);
    return out;
}

// Deterministic incompressible bytes.
std::string noise(std::size_t n, std::uint64_t seed) {
    std::string s(n, '\0');
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (std::size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s[i] = static_cast<char>(x >> 56);
    }
    return s;
}

// ---- running the unpacker ----------------------------------------------------

redist::unpack_options opts(redist::archive_format f) {
    redist::unpack_options o;
    o.format = f;
    o.source = "test://archive";
    return o;
}

redist::result<std::vector<unpacked_entry>> unpack(const std::string& bytes, const fs::path& stage,
                                                   const redist::unpack_options& o, std::size_t chunk = 64 * 1024) {
    auto started = redist::stream_unpacker::start(stage, o);
    if (!started) return std::move(started).error_value();
    auto& u = *started.value();
    for (std::size_t pos = 0; pos < bytes.size(); pos += chunk) {
        const std::size_t n = std::min(chunk, bytes.size() - pos);
        auto w = u.write(reinterpret_cast<const std::byte*>(bytes.data() + pos), n);
        if (!w) {
            auto f = u.finish();  // must report the same failure
            REQUIRE_FALSE(f.ok());
            CHECK(f.error_value().code == w.error_value().code);
            return std::move(w).error_value();
        }
    }
    return u.finish();
}

bool same(const std::vector<unpacked_entry>& a, const std::vector<unpacked_entry>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].path != b[i].path || a[i].kind != b[i].kind || a[i].size != b[i].size || a[i].sha256 != b[i].sha256 ||
            a[i].link_target != b[i].link_target || a[i].mode != b[i].mode)
            return false;
    }
    return true;
}

const unpacked_entry* find(const std::vector<unpacked_entry>& v, const std::string& path) {
    for (const auto& e : v)
        if (e.path == path) return &e;
    return nullptr;
}

unsigned disk_mode(const fs::path& p) {
    struct stat st {};
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// The reference tree: the layout of an NVIDIA redist archive in miniature.
const std::string kTool = "#!/bin/sh\necho tool\n";
const std::string kHeader = "#pragma once\nint foo(void);\n";
const std::string kReadOnly = "do not edit\n";
const std::string kSuid = "suid payload\n";
const std::string kLib = noise(300 * 1024, 1) + std::string(200 * 1024, 'z');

std::vector<spec> reference_tree() {
    return {
        {"top/", kind::dir, "", 0755},
        {"top/bin/", kind::dir, "", 0755},
        {"top/bin/tool", kind::file, kTool, 0755},
        {"top/bin/suid", kind::file, kSuid, 04755},
        {"top/include/", kind::dir, "", 0755},
        {"top/include/foo.h", kind::file, kHeader, 0644},
        {"top/share/readonly.txt", kind::file, kReadOnly, 0444},
        {"top/lib/", kind::dir, "", 0755},
        {"top/lib/libfoo.so.9.1.0", kind::file, kLib, 0755},
        {"top/lib/libfoo.so.9", kind::symlink, "libfoo.so.9.1.0", 0777},
        {"top/lib/libfoo.so", kind::symlink, "libfoo.so.9", 0777},
        {"top/lib/libfoo-copy.so.9.1.0", kind::hardlink, "top/lib/libfoo.so.9.1.0", 0755},
        {"top/empty.txt", kind::file, "", 0600},
        {"top/locked/", kind::dir, "", 0555},
    };
}

std::vector<unpacked_entry> expected_reference() {
    auto entry = [](std::string p, entry_kind k, std::uint64_t size, std::string sha, std::string link, unsigned mode) {
        unpacked_entry e;
        e.path = std::move(p);
        e.kind = k;
        e.size = size;
        e.sha256 = std::move(sha);
        e.link_target = std::move(link);
        e.mode = mode;
        return e;
    };
    using redist::sha256_hex;
    return {
        entry("bin", entry_kind::directory, 0, "", "", 0755),
        entry("bin/tool", entry_kind::regular, kTool.size(), sha256_hex(kTool), "", 0755),
        entry("bin/suid", entry_kind::regular, kSuid.size(), sha256_hex(kSuid), "", 0755),
        entry("include", entry_kind::directory, 0, "", "", 0755),
        entry("include/foo.h", entry_kind::regular, kHeader.size(), sha256_hex(kHeader), "", 0644),
        entry("share/readonly.txt", entry_kind::regular, kReadOnly.size(), sha256_hex(kReadOnly), "", 0444),
        entry("lib", entry_kind::directory, 0, "", "", 0755),
        entry("lib/libfoo.so.9.1.0", entry_kind::regular, kLib.size(), sha256_hex(kLib), "", 0755),
        entry("lib/libfoo.so.9", entry_kind::symlink, 0, "", "libfoo.so.9.1.0", 0777),
        entry("lib/libfoo.so", entry_kind::symlink, 0, "", "libfoo.so.9", 0777),
        entry("lib/libfoo-copy.so.9.1.0", entry_kind::hardlink, kLib.size(), sha256_hex(kLib), "lib/libfoo.so.9.1.0",
              0755),
        entry("empty.txt", entry_kind::regular, 0, sha256_hex(""), "", 0600),
        entry("locked", entry_kind::directory, 0, "", "", 0555),
    };
}

void check_reference_on_disk(const fs::path& stage) {
    CHECK_FALSE(fs::exists(stage / "top"));
    CHECK(read_file(stage / "bin/tool") == kTool);
    CHECK(disk_mode(stage / "bin/tool") == 0755);
    CHECK(disk_mode(stage / "bin/suid") == 0755);  // setuid dropped
    CHECK(read_file(stage / "include/foo.h") == kHeader);
    CHECK(disk_mode(stage / "include/foo.h") == 0644);
    CHECK(disk_mode(stage / "share/readonly.txt") == 0444);
    CHECK(read_file(stage / "lib/libfoo.so.9.1.0") == kLib);
    CHECK(fs::read_symlink(stage / "lib/libfoo.so") == "libfoo.so.9");
    CHECK(fs::read_symlink(stage / "lib/libfoo.so.9") == "libfoo.so.9.1.0");
    CHECK(read_file(stage / "lib/libfoo.so") == kLib);  // the chain resolves
    CHECK(fs::equivalent(stage / "lib/libfoo-copy.so.9.1.0", stage / "lib/libfoo.so.9.1.0"));
    CHECK(fs::file_size(stage / "empty.txt") == 0);
    CHECK(disk_mode(stage / "locked") == 0555);  // fixed up at the end
    struct stat st {};
    REQUIRE(::stat((stage / "include/foo.h").c_str(), &st) == 0);
    CHECK(st.st_mtime == 1700000000);
}

// Runs `specs` (as tar.xz) and expects unsafe_archive naming `bad_name`, with
// nothing created next to the stage.
void expect_unsafe(const std::string& case_name, const std::vector<spec>& specs, const std::string& bad_name) {
    const fs::path stage = fresh_stage(case_name);
    auto r = unpack(build(specs, container::tar_xz), stage, opts(redist::archive_format::tar_xz));
    INFO(case_name);
    if (!r.ok()) UNSCOPED_INFO(r.error_value().describe());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::unsafe_archive);
    CHECK(r.error_value().path == bad_name);
    CHECK(r.error_value().source == "test://archive");
    CHECK(listing(stage.parent_path()).front() == "stage");
    for (const auto& p : listing(stage.parent_path())) CHECK(p.rfind("stage", 0) == 0);
}

}  // namespace

TEST_CASE("tar.xz: entries and files match what was archived", "[unpack]") {
    const fs::path stage = fresh_stage("reference");
    auto r = unpack(build(reference_tree(), container::tar_xz), stage, opts(redist::archive_format::tar_xz));
    REQUIRE_OK(r);
    CHECK(same(*r, expected_reference()));
    check_reference_on_disk(stage);
    fs::permissions(stage / "locked", fs::perms::owner_all);  // so the next run can clean up
}

TEST_CASE("results do not depend on chunk size or xz block layout", "[unpack]") {
    const auto tree = reference_tree();
    const std::string single = build(tree, container::tar_xz);
    const std::string multi = xz_multiblock(build(tree, container::tar), 64 * 1024);
    const auto expected = expected_reference();
    int run = 0;
    for (const std::string* bytes : {&single, &multi}) {
        for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20}) {
            if (chunk == 1 && bytes == &multi) continue;  // 1-byte feed once is enough
            const fs::path stage = fresh_stage("chunks" + std::to_string(run++));
            auto o = opts(redist::archive_format::tar_xz);
            o.decoder_threads = 2;
            auto r = unpack(*bytes, stage, o, chunk);
            INFO("chunk " << chunk << (bytes == &multi ? " multi-block" : " single-block"));
            REQUIRE_OK(r);
            CHECK(same(*r, expected));
            CHECK(read_file(stage / "lib/libfoo.so.9.1.0") == kLib);
            fs::permissions(stage / "locked", fs::perms::owner_all);
        }
    }
}

TEST_CASE("tar.gz, tar.zst and zip unpack", "[unpack]") {
    const auto expected = expected_reference();
    SECTION("tar.gz") {
        const fs::path stage = fresh_stage("gz");
        auto r = unpack(build(reference_tree(), container::tar_gz), stage, opts(redist::archive_format::tar_gz), 777);
        REQUIRE_OK(r);
        CHECK(same(*r, expected));
        check_reference_on_disk(stage);
        fs::permissions(stage / "locked", fs::perms::owner_all);
    }
    SECTION("tar.zst") {
        const fs::path stage = fresh_stage("zst");
        auto r = unpack(build(reference_tree(), container::tar_zst), stage, opts(redist::archive_format::tar_zst));
        REQUIRE_OK(r);
        CHECK(same(*r, expected));
        check_reference_on_disk(stage);
        fs::permissions(stage / "locked", fs::perms::owner_all);
    }
    SECTION("zip") {
        // libarchive's zip writer has no hardlinks; everything else is kept.
        std::vector<spec> tree;
        for (const auto& s : reference_tree())
            if (s.type != kind::hardlink) tree.push_back(s);
        const fs::path stage = fresh_stage("zip");
        auto r = unpack(build(tree, container::zip), stage, opts(redist::archive_format::zip), 1000);
        REQUIRE_OK(r);
        CHECK(find(*r, "lib/libfoo-copy.so.9.1.0") == nullptr);
        for (const auto& e : expected) {
            if (e.kind == entry_kind::hardlink) continue;
            const unpacked_entry* got = find(*r, e.path);
            INFO(e.path);
            REQUIRE(got != nullptr);
            CHECK(got->kind == e.kind);
            CHECK(got->sha256 == e.sha256);
            CHECK(got->size == e.size);
            CHECK(got->link_target == e.link_target);
        }
        CHECK(read_file(stage / "lib/libfoo.so") == kLib);
        CHECK(disk_mode(stage / "bin/tool") == 0755);
        CHECK(listing(stage.parent_path()).front() == "stage");  // spool file removed
        CHECK_FALSE(fs::exists(stage.parent_path() / "stage.zip.part"));
        fs::permissions(stage / "locked", fs::perms::owner_all);
    }
}

TEST_CASE("a zip's spool file never follows a link planted in its place", "[unpack]") {
    std::vector<spec> tree;
    for (const auto& s : reference_tree())
        if (s.type != kind::hardlink) tree.push_back(s);
    const fs::path stage = fresh_stage("zip_planted");
    const fs::path victim = stage.parent_path() / "victim";
    std::ofstream(victim) << "not to be touched";
    fs::create_symlink(victim, stage.parent_path() / "stage.zip.part");
    auto r = unpack(build(tree, container::zip), stage, opts(redist::archive_format::zip));
    REQUIRE_OK(r);
    CHECK(read_file(victim) == "not to be touched");
    CHECK(read_file(stage / "lib/libfoo.so") == kLib);
    fs::permissions(stage / "locked", fs::perms::owner_all);
}

TEST_CASE("strip_top_level off keeps the top directory", "[unpack]") {
    const fs::path stage = fresh_stage("nostrip");
    auto o = opts(redist::archive_format::tar_xz);
    o.strip_top_level = false;
    auto r = unpack(
        build({{"./a/", kind::dir, "", 0755}, {"./a/f", kind::file, "x", 0644}, {"b", kind::file, "y", 0600}},
              container::tar_xz),
        stage, o);
    REQUIRE_OK(r);
    REQUIRE(r->size() == 3);
    CHECK((*r)[0].path == "a");
    CHECK((*r)[1].path == "a/f");
    CHECK((*r)[2].path == "b");
    CHECK(read_file(stage / "a/f") == "x");
}

TEST_CASE("malicious archives are rejected and write nothing outside the stage", "[unpack]") {
    const spec top{"top/", kind::dir, "", 0755};
    expect_unsafe("dotdot", {{"../evil", kind::file, "x", 0644}}, "../evil");
    expect_unsafe("absolute", {{"/abs/path", kind::file, "x", 0644}}, "/abs/path");
    CHECK_FALSE(fs::exists("/abs/path"));
    expect_unsafe("inner_dotdot", {top, {"top/../../x", kind::file, "x", 0644}}, "top/../../x");
    expect_unsafe("empty_name", {top, {".", kind::file, "x", 0644}}, ".");
    expect_unsafe("symlink_abs", {top, {"top/passwd", kind::symlink, "/etc/passwd", 0777}}, "top/passwd");
    expect_unsafe("symlink_escape",
                  {top, {"top/link", kind::symlink, "../../outside", 0777}, {"top/link/file", kind::file, "x", 0644}},
                  "top/link");
    // ".." out of the stage from one level down, after stripping.
    expect_unsafe("symlink_escape_strip", {top, {"top/lib/up", kind::symlink, "../../x", 0777}}, "top/lib/up");
    // A symlink inside the stage is fine, but nothing may be written through it.
    expect_unsafe("through_symlink",
                  {top,
                   {"top/sub/", kind::dir, "", 0755},
                   {"top/link", kind::symlink, "sub", 0777},
                   {"top/link/file", kind::file, "x", 0644}},
                  "top/link/file");
    // "a -> ." then "b -> a/..": lexically inside, really outside.
    expect_unsafe("symlink_dotdot_after_name",
                  {top, {"top/a", kind::symlink, ".", 0777}, {"top/b", kind::symlink, "a/..", 0777}}, "top/b");
    expect_unsafe("hardlink_abs", {top, {"top/pw", kind::hardlink, "/etc/passwd", 0644}}, "top/pw");
    expect_unsafe("hardlink_missing", {top, {"top/h", kind::hardlink, "top/not-there", 0644}}, "top/h");
    expect_unsafe("hardlink_later", {top, {"top/h", kind::hardlink, "top/f", 0644}, {"top/f", kind::file, "x", 0644}},
                  "top/h");
    expect_unsafe("chardev", {top, {"top/null", kind::chardev, "", 0666}}, "top/null");
    expect_unsafe("fifo", {top, {"top/fifo", kind::fifo, "", 0644}}, "top/fifo");
    expect_unsafe(
        "two_tops",
        {top, {"top/f", kind::file, "x", 0644}, {"other/", kind::dir, "", 0755}, {"other/g", kind::file, "y", 0644}},
        "other/");
    expect_unsafe("file_at_top", {top, {"README", kind::file, "x", 0644}}, "README");
}

TEST_CASE("corrupt and truncated archives give bad_archive", "[unpack]") {
    static const std::string good = build(reference_tree(), container::tar_xz);  // once, not per section
    SECTION("truncated xz") {
        auto r = unpack(good.substr(0, good.size() / 2), fresh_stage("trunc"), opts(redist::archive_format::tar_xz));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::bad_archive);
    }
    SECTION("xz stream cut just before its footer") {
        auto r = unpack(good.substr(0, good.size() - 4), fresh_stage("trunc_footer"),
                        opts(redist::archive_format::tar_xz));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::bad_archive);
    }
    SECTION("flipped byte") {
        std::string bad = good;
        bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x55);
        auto r = unpack(bad, fresh_stage("flip"), opts(redist::archive_format::tar_xz));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::bad_archive);
        CHECK(r.error_value().source == "test://archive");
    }
    SECTION("truncated tar inside a valid xz stream") {
        const std::string tar = build(reference_tree(), container::tar);
        const std::string cut = tar.substr(0, 3000);  // stops inside an entry
        auto r = unpack(xz_multiblock(cut, 1 << 20), fresh_stage("trunc_tar"), opts(redist::archive_format::tar_xz));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::bad_archive);
    }
    SECTION("not xz at all") {
        auto r = unpack(build(reference_tree(), container::tar_gz), fresh_stage("notxz"),
                        opts(redist::archive_format::tar_xz));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::bad_archive);
    }
    SECTION("truncated zip") {
        const std::string zip = build(reference_tree(), container::zip);
        auto r = unpack(zip.substr(0, zip.size() - 30), fresh_stage("trunc_zip"), opts(redist::archive_format::zip));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::bad_archive);
    }
}

TEST_CASE("write() reports a worker failure promptly instead of blocking", "[unpack]") {
    // 24 MiB of incompressible data: far more than the queues hold, so a
    // writer that ignored the failure would block forever.
    const std::string big = noise(20u << 20, 7);
    const std::string bytes = build({{"../evil", kind::file, "x", 0644}, {"top/big", kind::file, big, 0644}},
                                    container::tar_gz);
    const fs::path stage = fresh_stage("early_fail");
    auto started = redist::stream_unpacker::start(stage, opts(redist::archive_format::tar_gz));
    REQUIRE(started.ok());
    auto& u = *started.value();
    bool failed = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (std::size_t pos = 0; !failed && std::chrono::steady_clock::now() < deadline; pos += 4096) {
        if (pos >= bytes.size()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            pos = bytes.size() - 1;
        }
        auto w = u.write(reinterpret_cast<const std::byte*>(bytes.data() + pos),
                         std::min<std::size_t>(4096, bytes.size() - pos));
        if (!w) {
            failed = true;
            CHECK(w.error_value().code == error_code::unsafe_archive);
            CHECK(w.error_value().path == "../evil");
            // Sticky: the next write says the same.
            auto again = u.write(reinterpret_cast<const std::byte*>(bytes.data()), 1);
            REQUIRE_FALSE(again.ok());
            CHECK(again.error_value().code == error_code::unsafe_archive);
        }
    }
    CHECK(failed);
    auto f = u.finish();
    REQUIRE_FALSE(f.ok());
    CHECK(f.error_value().code == error_code::unsafe_archive);
}

TEST_CASE("destroying or cancelling mid-stream does not hang", "[unpack]") {
    // static: Catch2 runs the test case once per section.
    static const std::string bytes = xz_multiblock(
        build({{"top/big", kind::file, noise(3u << 20, 9), 0644}}, container::tar), 1u << 20);
    SECTION("destroy without finish") {
        auto started = redist::stream_unpacker::start(fresh_stage("destroy"), opts(redist::archive_format::tar_xz));
        REQUIRE(started.ok());
        REQUIRE(started.value()->write(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size() / 2).ok());
        started.value().reset();  // must join promptly
    }
    SECTION("cancel from another thread while write() is blocked") {
        auto started = redist::stream_unpacker::start(fresh_stage("cancel"), opts(redist::archive_format::tar_xz));
        REQUIRE(started.ok());
        auto& u = *started.value();
        std::thread canceller([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            u.cancel();
        });
        // Writes the archive over and over (concatenated xz streams are valid,
        // and the tar reader stops at the first end marker), so only the
        // cancel can stop this loop.
        redist::result<void> w;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (w.ok() && std::chrono::steady_clock::now() < deadline)
            w = u.write(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
        canceller.join();
        REQUIRE_FALSE(w.ok());
        CHECK(w.error_value().code == error_code::cancelled);
        u.cancel();  // twice is fine
        CHECK_FALSE(u.finish().ok());
    }
}

TEST_CASE("start() checks the stage", "[unpack]") {
    const fs::path stage = fresh_stage("not_empty");
    std::ofstream(stage / "junk") << "x";
    auto r = redist::stream_unpacker::start(stage, opts(redist::archive_format::tar_xz));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::filesystem);
    auto missing = redist::stream_unpacker::start(stage / "missing", opts(redist::archive_format::tar_xz));
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error_value().code == error_code::filesystem);
}

TEST_CASE("a failed disk write is a filesystem error naming the file", "[unpack]") {
    // RLIMIT_FSIZE makes write() past 512 KiB fail with EFBIG (SIGXFSZ ignored),
    // the same path an ENOSPC takes; root cannot be denied by permissions.
    const fs::path stage = fresh_stage("efbig");
    const std::string bytes = build(
        {{"top/", kind::dir, "", 0755}, {"top/big", kind::file, noise(1536u << 10, 3), 0644}}, container::tar_xz, 0);
    struct rlimit old {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 512u << 10;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    auto r = unpack(bytes, stage, opts(redist::archive_format::tar_xz));
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::filesystem);
    CHECK(r.error_value().path == (fs::canonical(stage) / "big").string());
}

// ---- reserved names, hardlinks with data, escaping, the output cap ----

namespace {

// A raw ustar header. libarchive's writer drops the data of hardlink entries,
// so the pax "hardlink with data" case is written by hand.
std::string tar_header(const std::string& name, char type, std::uint64_t size, const std::string& link = "") {
    std::string h(512, '\0');
    const auto put = [&](std::size_t off, std::size_t len, const std::string& v) {
        std::memcpy(&h[off], v.data(), std::min(len, v.size()));
    };
    const auto octal = [&](std::size_t off, std::size_t len, std::uint64_t v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%0*llo", static_cast<int>(len - 1), static_cast<unsigned long long>(v));
        put(off, len - 1, buf);
    };
    put(0, 100, name);
    octal(100, 8, 0644);
    octal(108, 8, 0);
    octal(116, 8, 0);
    octal(124, 12, size);
    octal(136, 12, 1700000000);
    h[156] = type;
    put(157, 100, link);
    put(257, 6, std::string("ustar\0", 6));
    put(263, 2, "00");
    std::memset(&h[148], ' ', 8);
    unsigned sum = 0;
    for (const char c : h) sum += static_cast<unsigned char>(c);
    char cs[8];
    std::snprintf(cs, sizeof cs, "%06o", sum);
    std::memcpy(&h[148], cs, 7);  // six digits and a NUL; the eighth byte stays ' '
    return h;
}

std::string padded(std::string data) {
    data.resize((data.size() + 511) / 512 * 512, '\0');
    return data;
}

// A tar holding top/ and an old-GNU sparse entry ('S') top/sparse: "hello"
// stored at `at` of a file of `real` bytes, the rest holes.
std::string old_gnu_sparse_tar(std::uint64_t at, std::uint64_t real) {
    std::string h = tar_header("top/sparse", 'S', 5);
    const auto octal = [&](std::size_t off, std::size_t len, std::uint64_t v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%0*llo", static_cast<int>(len - 1), static_cast<unsigned long long>(v));
        std::memcpy(&h[off], buf, len - 1);
    };
    std::memcpy(&h[257], "ustar  ", 8);  // old GNU magic and version
    octal(386, 12, at);                  // sparse[0].offset
    octal(398, 12, 5);                   // sparse[0].numbytes
    octal(483, 12, real);                // realsize
    std::memset(&h[148], ' ', 8);
    unsigned sum = 0;
    for (const char c : h) sum += static_cast<unsigned char>(c);
    char cs[8];
    std::snprintf(cs, sizeof cs, "%06o", sum);
    std::memcpy(&h[148], cs, 7);
    return tar_header("top/", '5', 0) + h + padded("hello") + std::string(1024, '\0');
}

// Entries and disk agree: what `redist verify` checks right after an install.
void check_entries_match_disk(const fs::path& stage, const std::vector<unpacked_entry>& entries) {
    for (const auto& e : entries) {
        if (e.kind != entry_kind::regular && e.kind != entry_kind::hardlink) continue;
        INFO(e.path);
        const std::string content = read_file(stage / e.path);
        CHECK(content.size() == e.size);
        CHECK(redist_test::receipt_digest_oracle(content) == e.sha256);
        CHECK(e.piece_size == redist::piece_size_for(content.size()));
    }
}

}  // namespace

TEST_CASE("entries under .redist/ and symlinks into it are unsafe", "[unpack]") {
    const spec top{"top/", kind::dir, "", 0755};
    expect_unsafe("reserved_file", {top, {"top/.redist/receipts/cudnn.json", kind::file, "{}", 0644}},
                  "top/.redist/receipts/cudnn.json");
    expect_unsafe("reserved_dir", {top, {"top/.redist/", kind::dir, "", 0755}}, "top/.redist/");
    expect_unsafe("reserved_symlink_name", {top, {"top/.redist", kind::symlink, "lib", 0777}}, "top/.redist");
    expect_unsafe("reserved_symlink_target",
                  {top, {"top/lib/", kind::dir, "", 0755}, {"top/lib/x", kind::symlink, "../.redist/receipts", 0777}},
                  "top/lib/x");
    expect_unsafe("reserved_symlink_target_root", {top, {"top/r", kind::symlink, "./.redist", 0777}}, "top/r");

    // Only the root's .redist is reserved; deeper ones, and look-alikes, are ordinary names.
    const fs::path stage = fresh_stage("reserved_elsewhere");
    auto r = unpack(build({top,
                           {"top/share/.redist/x", kind::file, "x", 0644},
                           {"top/.redistrib", kind::file, "y", 0644},
                           {"top/share/l", kind::symlink, ".redist/x", 0777}},
                          container::tar_xz),
                    stage, opts(redist::archive_format::tar_xz));
    REQUIRE_OK(r);
    CHECK(read_file(stage / "share/.redist/x") == "x");
    CHECK(read_file(stage / "share/l") == "x");
}

TEST_CASE("a hardlink entry that carries data is unsafe", "[unpack]") {
    // pax: a hardlink may carry data, and libarchive would then rewrite top/a.
    const std::string pax_body = "13 comment=x\n";
    std::string raw = tar_header("top/", '5', 0) + tar_header("top/a", '0', 5) + padded("hello") +
                      tar_header("PaxHeader/b", 'x', pax_body.size()) + padded(pax_body) +
                      tar_header("top/b", '1', 7, "top/a") + padded("goodbye") + std::string(1024, '\0');
    const fs::path stage = fresh_stage("hardlink_data");
    auto r = unpack(xz_multiblock(raw, 1 << 20), stage, opts(redist::archive_format::tar_xz));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::unsafe_archive);
    CHECK(r.error_value().path == "top/b");
    CHECK(r.error_value().message.find("carries data") != std::string::npos);

    // The same without data is an ordinary hardlink.
    raw = tar_header("top/", '5', 0) + tar_header("top/a", '0', 5) + padded("hello") +
          tar_header("top/b", '1', 0, "top/a") + std::string(1024, '\0');
    const fs::path stage2 = fresh_stage("hardlink_nodata");
    auto ok = unpack(xz_multiblock(raw, 1 << 20), stage2, opts(redist::archive_format::tar_xz));
    REQUIRE_OK(ok);
    check_entries_match_disk(stage2, *ok);
}

TEST_CASE("a file replaced after being hardlinked leaves entries that match the disk", "[unpack]") {
    const fs::path stage = fresh_stage("hardlink_then_replaced");
    auto r = unpack(build({{"top/", kind::dir, "", 0755},
                           {"top/a", kind::file, "first", 0644},
                           {"top/b", kind::hardlink, "top/a", 0644},
                           {"top/a", kind::file, "second, longer", 0644}},
                          container::tar_xz),
                    stage, opts(redist::archive_format::tar_xz));
    REQUIRE_OK(r);
    CHECK(read_file(stage / "a") == "second, longer");
    CHECK(read_file(stage / "b") == "first");
    check_entries_match_disk(stage, *r);
}

TEST_CASE("bidi overrides in entry names are escaped in errors, and long names are not cut", "[unpack]") {
    // U+202E would make a terminal show the rest of the name reversed. The
    // archive is built (and read) in a UTF-8 locale: in "C", libarchive's pax
    // writer cannot convert the name.
    struct utf8_locale {
        std::string before = std::setlocale(LC_CTYPE, nullptr);
        utf8_locale() { REQUIRE(std::setlocale(LC_CTYPE, "C.UTF-8")); }
        ~utf8_locale() { std::setlocale(LC_CTYPE, before.c_str()); }
    } locale;
    const std::string tail(300, 'y');
    expect_unsafe("escape_bidi",
                  {{"top/", kind::dir, "", 0755}, {"top/\xe2\x80\xae/../" + tail, kind::file, "x", 0644}},
                  "top/\\u{202E}/../" + tail);
}

TEST_CASE("control characters in entry names are escaped in errors", "[unpack]") {
    const std::string name = "top/\x1b]0;pwned\x07/\x1b[2J/../x";
    const fs::path stage = fresh_stage("escape");
    auto r = unpack(build({{"top/", kind::dir, "", 0755}, {name, kind::file, "x", 0644}}, container::tar_xz), stage,
                    opts(redist::archive_format::tar_xz));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::unsafe_archive);
    CHECK(r.error_value().path == "top/\\x1b]0;pwned\\x07/\\x1b[2J/../x");
    const std::string line = r.error_value().describe();
    CHECK(std::none_of(line.begin(), line.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }));
}

TEST_CASE("decoded output beyond max_output_bytes is unsafe, in every format", "[unpack]") {
    const std::string zeros(4u << 20, '\0');
    const std::vector<spec> bomb = {{"top/", kind::dir, "", 0755}, {"top/zeros", kind::file, zeros, 0644}};
    struct format_case {
        const char* name;
        container c;
        redist::archive_format f;
    };
    for (const auto& fc : {format_case{"xz", container::tar_xz, redist::archive_format::tar_xz},
                           format_case{"gz", container::tar_gz, redist::archive_format::tar_gz},
                           format_case{"zst", container::tar_zst, redist::archive_format::tar_zst},
                           format_case{"zip", container::zip, redist::archive_format::zip}}) {
        INFO(fc.name);
        const std::string bytes = build(bomb, fc.c);
        CHECK(bytes.size() < (1u << 20) / 8);  // a real bomb: the cap is far beyond 8x

        auto capped = opts(fc.f);
        capped.max_output_bytes = 1u << 20;
        auto r = unpack(bytes, fresh_stage(std::string("cap_") + fc.name), capped);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::unsafe_archive);
        CHECK(r.error_value().message.find("expands to more than 1 MiB") != std::string::npos);
        CHECK(r.error_value().source == "test://archive");

        auto roomy = opts(fc.f);
        roomy.max_output_bytes = 8u << 20;
        const fs::path stage = fresh_stage(std::string("cap_ok_") + fc.name);
        auto ok = unpack(bytes, stage, roomy);
        REQUIRE_OK(ok);
        CHECK(fs::file_size(stage / "zeros") == zeros.size());
    }
}

TEST_CASE("the output cap counts the holes of sparse files", "[unpack]") {
    // An old-GNU sparse entry ('S'): 5 bytes stored at the end of a 64 MiB
    // file. Without the cap its hole would be hashed (and later copied) in full.
    const std::string raw = old_gnu_sparse_tar((64ull << 20) - 5, 64ull << 20);
    const std::string xz = xz_multiblock(raw, 1 << 20);

    auto o = opts(redist::archive_format::tar_xz);
    o.max_output_bytes = 1u << 20;  // the decoded tar stream is 3 KiB: only the hole can trip it
    const auto started = std::chrono::steady_clock::now();
    auto r = unpack(xz, fresh_stage("cap_sparse"), o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::unsafe_archive);
    CHECK(r.error_value().message.find("expands to more than 1 MiB") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));

    o.max_output_bytes = 65ull << 20;
    const fs::path stage = fresh_stage("cap_sparse_ok");
    auto ok = unpack(xz, stage, o);
    REQUIRE_OK(ok);
    REQUIRE(ok->size() == 1);
    CHECK(ok->front().size == (64ull << 20));
    CHECK(fs::file_size(stage / "sparse") == (64ull << 20));
}

// ---- the writer pool and the run budget ----

namespace {

// A reference extraction: the same tar through libarchive's own disk writer,
// as the unpacker once wrote every file itself (minus our checks, which
// these archives pass).
void reference_extract(const std::string& tar, const fs::path& dir) {
    archive* in = archive_read_new();
    archive_read_support_format_tar(in);
    REQUIRE(archive_read_open_memory(in, tar.data(), tar.size()) == ARCHIVE_OK);
    archive* out = archive_write_disk_new();
    archive_write_disk_set_options(out, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM);
    const std::string root = fs::absolute(dir).string() + "/";
    archive_entry* e = nullptr;
    while (archive_read_next_header(in, &e) == ARCHIVE_OK) {
        archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
        archive_entry_copy_pathname(e, (root + archive_entry_pathname(e)).c_str());
        if (archive_entry_hardlink(e)) archive_entry_copy_hardlink(e, (root + archive_entry_hardlink(e)).c_str());
        REQUIRE(archive_write_header(out, e) == ARCHIVE_OK);
        const void* buf = nullptr;
        std::size_t len = 0;
        la_int64_t off = 0;
        while (archive_read_data_block(in, &buf, &len, &off) == ARCHIVE_OK)
            REQUIRE(archive_write_data_block(out, buf, len, off) == ARCHIVE_OK);
        REQUIRE(archive_write_finish_entry(out) == ARCHIVE_OK);
    }
    REQUIRE(archive_write_close(out) == ARCHIVE_OK);
    archive_write_free(out);
    archive_read_free(in);
}

// Every path under both trees: same kind, mode, size, content, link target,
// mtime (files), and the same hardlink groups.
void check_same_tree(const fs::path& got, const fs::path& want) {
    REQUIRE(listing(got) == listing(want));
    std::map<std::pair<dev_t, ino_t>, std::string> got_inodes;
    std::map<std::pair<dev_t, ino_t>, std::string> want_inodes;
    for (const auto& rel : listing(want)) {
        INFO(rel);
        struct stat a {};
        struct stat b {};
        REQUIRE(::lstat((got / rel).c_str(), &a) == 0);
        REQUIRE(::lstat((want / rel).c_str(), &b) == 0);
        CHECK((a.st_mode & S_IFMT) == (b.st_mode & S_IFMT));
        CHECK((a.st_mode & 07777) == (b.st_mode & 07777));
        if (S_ISLNK(b.st_mode)) CHECK(fs::read_symlink(got / rel) == fs::read_symlink(want / rel));
        if (S_ISREG(b.st_mode)) {
            CHECK(a.st_size == b.st_size);
            CHECK(a.st_mtime == b.st_mtime);
            CHECK(read_file(got / rel) == read_file(want / rel));
            // Hardlink groups: the first name seen for each inode.
            const auto ga = got_inodes.emplace(std::make_pair(a.st_dev, a.st_ino), rel).first->second;
            const auto wb = want_inodes.emplace(std::make_pair(b.st_dev, b.st_ino), rel).first->second;
            CHECK(ga == wb);
        }
    }
}

std::vector<spec> many_files_tree() {
    std::vector<spec> specs = {{"top/", kind::dir, "", 0755}};
    for (int d = 0; d < 20; ++d) {
        const std::string dir = "top/d" + std::to_string(d) + "/";
        specs.push_back({dir, kind::dir, "", d % 7 == 0 ? 0555u : 0755u});
        for (int f = 0; f < 30; ++f) {
            const auto n = static_cast<std::size_t>((d * 30 + f) * 37 % 5000);
            specs.push_back({dir + "f" + std::to_string(f), kind::file,
                             noise(n, static_cast<std::uint64_t>(d * 100 + f)), f % 3 == 0 ? 0755u : 0644u});
        }
        specs.push_back({dir + "link", kind::symlink, "f1", 0777});
        specs.push_back({dir + "hard", kind::hardlink, dir + "f2", 0644});
    }
    // Implied parents: no directory entry for top/implied/deep/.
    specs.push_back({"top/implied/deep/file", kind::file, "implied", 0600});
    // Larger than the split threshold (8 MiB): its writes go to several workers.
    specs.push_back({"top/lib/", kind::dir, "", 0755});
    specs.push_back({"top/lib/libbig.so", kind::file, noise(9u << 20, 77) + std::string(3u << 20, 'q'), 0755});
    specs.push_back({"top/lib/libbig-hard.so", kind::hardlink, "top/lib/libbig.so", 0755});
    specs.push_back({"top/lib/libbig.so.1", kind::symlink, "libbig.so", 0777});
    specs.push_back({"top/empty", kind::file, "", 0444});
    return specs;
}

std::shared_ptr<redist::run_budget> budget(unsigned threads, std::uint64_t memory) {
    return std::make_shared<redist::run_budget>(redist::run_limits{threads, memory});
}

// The bytes a stage of the budget's profile reports (0 when it did not run).
std::uint64_t stage_bytes(const redist::run_budget& b, const std::string& stage) {
    for (const auto& s : b.profile().stages)
        if (s.stage == stage) return s.bytes;
    return 0;
}

}  // namespace

TEST_CASE("files written by the worker pool match libarchive's own extraction", "[unpack][pool]") {
    const auto specs = many_files_tree();
    const std::string tar = build(specs, container::tar, 0);
    const fs::path ref = fresh_stage("pool_reference");
    reference_extract(tar, ref);
    const std::string xz = xz_multiblock(tar, 1u << 20);

    std::vector<unpacked_entry> first;
    for (const unsigned threads : {1u, 2u, 4u}) {
        INFO("threads " << threads);
        auto o = opts(redist::archive_format::tar_xz);
        o.budget = budget(threads, 256ull << 20);  // the smallest default: 16 MiB of writer buffers
        const fs::path stage = fresh_stage("pool_" + std::to_string(threads));
        auto r = unpack(xz, stage, o);
        REQUIRE_OK(r);
        check_same_tree(stage, ref / "top");
        check_entries_match_disk(stage, *r);
        const unpacked_entry* big = find(*r, "lib/libbig.so");
        REQUIRE(big != nullptr);
        CHECK(big->size == (12u << 20));
        // 12 MiB: recorded by the hash list of its two 8 MiB pieces, hashed
        // by two strands with the pool, in order on the extractor inline.
        const std::string big_content = noise(9u << 20, 77) + std::string(3u << 20, 'q');
        CHECK(big->sha256 == redist_test::receipt_digest_oracle(big_content));
        CHECK(big->sha256 != redist::sha256_hex(big_content));
        CHECK(big->piece_size == redist::receipt_piece_bytes);
        const unpacked_entry* hard = find(*r, "lib/libbig-hard.so");
        REQUIRE(hard != nullptr);
        CHECK(hard->sha256 == big->sha256);
        CHECK(hard->size == big->size);
        // Entries (and receipts' hashes) do not depend on the thread count.
        if (first.empty()) first = *r;
        else CHECK(same(first, *r));
    }
}

TEST_CASE("file data inside decoded xz blocks reaches the writers without a copy", "[unpack][pool]") {
    // The extractor used to copy every byte into 1 MiB blocks for the
    // writers, on its one thread; with a pool, data that lies inside a
    // decoded xz block is handed on as slices of it. The profile counts what
    // was still copied: for multi-block xz only data that libarchive itself
    // had to buffer (nothing here), for gzip (libarchive's own buffers)
    // everything.
    const auto specs = many_files_tree();
    const std::string tar = build(specs, container::tar, 0);
    const fs::path ref = fresh_stage("slices_reference");
    reference_extract(tar, ref);
    std::uint64_t file_bytes = 0;
    for (const auto& s : specs)
        if (s.type == kind::file) file_bytes += s.data.size();
    // Multi-block xz: whole decoded blocks, then blocks handed on in parts
    // while they decode (the one the stream waits for; whether a block is
    // taken in parts depends on timing, 243 parts here for 16 KiB parts, and
    // that it is when the stream waits for it, xz_decode_test checks):
    // slices of either, no copies.
    const auto from_slices = [&](const std::string& name, unsigned threads, std::size_t block_size,
                                 std::size_t part_bytes) {
        INFO(name);
        auto o = opts(redist::archive_format::tar_xz);
        o.budget = budget(threads, 256ull << 20);
        o.decoder_part_bytes = part_bytes;
        const fs::path stage = fresh_stage(name);
        auto r = unpack(xz_multiblock(tar, block_size), stage, o);
        REQUIRE_OK(r);
        check_same_tree(stage, ref / "top");
        check_entries_match_disk(stage, *r);
        CHECK(stage_bytes(*o.budget, "extractor") == 0);
        CHECK(o.budget->decode_memory().held() == 0);  // every slice gave its block back
    };
    from_slices("slices_xz", 4, 1u << 20, 0);
    from_slices("slices_xz_parts", 2, 4u << 20, 16u << 10);
    {
        auto o = opts(redist::archive_format::tar_gz);
        o.budget = budget(4, 256ull << 20);
        const fs::path stage = fresh_stage("slices_gz");
        auto r = unpack(build(specs, container::tar_gz), stage, o);
        REQUIRE_OK(r);
        check_same_tree(stage, ref / "top");
        CHECK(stage_bytes(*o.budget, "extractor") == file_bytes);
    }
}

TEST_CASE("unpackers sharing one budget each get the same result", "[unpack][pool]") {
    const std::string xz = xz_multiblock(build(many_files_tree(), container::tar, 0), 1u << 20);
    auto shared = budget(2, 256ull << 20);
    std::vector<redist::result<std::vector<unpacked_entry>>> results;
    results.reserve(3);
    std::vector<std::thread> threads;
    std::mutex m;
    for (int i = 0; i < 3; ++i)
        threads.emplace_back([&, i] {
            auto o = opts(redist::archive_format::tar_xz);
            o.budget = shared;
            o.size_hint = xz.size();
            auto started = redist::stream_unpacker::start(fresh_stage("shared_" + std::to_string(i)), o);
            if (!started) return;
            auto& u = *started.value();
            for (std::size_t pos = 0; pos < xz.size(); pos += 100000)
                if (!u.write(reinterpret_cast<const std::byte*>(xz.data() + pos),
                             std::min<std::size_t>(100000, xz.size() - pos)))
                    break;
            auto r = u.finish();
            std::lock_guard lock(m);
            results.push_back(std::move(r));
        });
    for (auto& t : threads) t.join();
    REQUIRE(results.size() == 3);
    for (auto& r : results) REQUIRE_OK(r);
    CHECK(same(*results[0], *results[1]));
    CHECK(same(*results[0], *results[2]));
    CHECK(stage_bytes(*shared, "decoder") > (36u << 20));
}

TEST_CASE("an extractor waiting for its next block holds none of the decoders' memory", "[unpack][pool]") {
    // 4 MiB of noise in 512 KiB xz blocks (each leases 1 MiB for its
    // compressed copy and 1 MiB for its output); the input stops in the
    // middle of the third block. Once the first two are written, the gate
    // holds only the third block's compressed copy: the decoder, waiting for
    // its bytes, hands on the blocks decoded meanwhile, and the extractor,
    // waiting for more, does not keep the last block it read (it used to,
    // and with many artifacts that left every decoder waiting for memory).
    const std::string data = noise(4u << 20, 5);
    const std::string xz = xz_multiblock(build({{"top/lib/libnoise.so", kind::file, data, 0644}}, container::tar, 0),
                                         512u << 10);
    auto shared = budget(2, 256ull << 20);
    auto o = opts(redist::archive_format::tar_xz);
    o.budget = shared;
    auto started = redist::stream_unpacker::start(fresh_stage("gate_idle"), o);
    REQUIRE_OK(started);
    auto& u = *started.value();
    const std::size_t cut = xz.size() * 5 / 16;  // about 2.5 of the 8 blocks
    REQUIRE(u.write(reinterpret_cast<const std::byte*>(xz.data()), cut).ok());
    auto& gate = shared->decode_memory();
    // Settled: the same 1 MiB for half a second (until then the decoder
    // still holds more).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    auto settled_since = std::chrono::steady_clock::now();
    std::uint64_t held = 0;
    while (std::chrono::steady_clock::now() < deadline) {
        const std::uint64_t now_held = gate.held();
        if (now_held != held || now_held != (1u << 20)) settled_since = std::chrono::steady_clock::now();
        held = now_held;
        if (std::chrono::steady_clock::now() - settled_since > std::chrono::milliseconds(500)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK(held == (1u << 20));  // the third block's compressed copy, and nothing else
    REQUIRE(u.write(reinterpret_cast<const std::byte*>(xz.data() + cut), xz.size() - cut).ok());
    auto r = u.finish();
    REQUIRE_OK(r);
    const unpacked_entry* noise_file = find(*r, "lib/libnoise.so");
    REQUIRE(noise_file != nullptr);
    CHECK(noise_file->sha256 == redist::sha256_hex(data));
    CHECK(gate.held() == 0);
}

TEST_CASE("a sparse file written by the pool matches libarchive's own extraction", "[unpack][pool]") {
    // Old-GNU sparse entry ('S'): 5 bytes at `at` of a file of `real` bytes
    // that ends in a hole. 3 MiB: one strand hashes it. 20 MiB: split, three
    // 8 MiB pieces of the receipt digest: the first all hole (never given a
    // block), the 5 bytes across the second and third.
    struct shape {
        std::uint64_t at, real;
    };
    for (const shape sh :
         {shape{(3ull << 20) - 5, (3ull << 20) + 4096}, shape{(16ull << 20) - 2, (20ull << 20) + 4096}}) {
        const std::string raw = old_gnu_sparse_tar(sh.at, sh.real);
        const fs::path ref = fresh_stage("sparse_reference");
        reference_extract(raw, ref);
        std::string content(sh.real, '\0');
        content.replace(sh.at, 5, "hello");
        // 2 threads: the extractor writes inline; 4: the pool's workers write.
        for (const unsigned threads : {2u, 4u}) {
            INFO("threads " << threads << ", size " << sh.real);
            const fs::path stage = fresh_stage("sparse_pool_" + std::to_string(threads));
            auto o = opts(redist::archive_format::tar_xz);
            o.budget = budget(threads, 256ull << 20);
            auto r = unpack(xz_multiblock(raw, 1 << 20), stage, o);
            REQUIRE_OK(r);
            check_same_tree(stage, ref / "top");
            check_entries_match_disk(stage, *r);
            REQUIRE(r->size() == 1);
            CHECK(r->front().size == sh.real);
            CHECK(r->front().sha256 == redist_test::receipt_digest_oracle(content));
        }
    }
}

TEST_CASE("a failing write in a worker stops everything and reports the file", "[unpack][pool]") {
    // RLIMIT_FSIZE: writes past 2 MiB fail with EFBIG, in the split writes of
    // the large file (several workers) while small files are in flight too.
    const std::string xz = xz_multiblock(build(many_files_tree(), container::tar, 0), 1u << 20);
    for (const unsigned threads : {1u, 4u}) {
        INFO("threads " << threads);
        const fs::path stage = fresh_stage("pool_efbig_" + std::to_string(threads));
        auto o = opts(redist::archive_format::tar_xz);
        o.budget = budget(threads, 256ull << 20);
        struct rlimit old {};
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
        auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
        struct rlimit small = old;
        small.rlim_cur = 2u << 20;
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
        auto r = unpack(xz, stage, o);
        ::setrlimit(RLIMIT_FSIZE, &old);
        std::signal(SIGXFSZ, old_handler);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::filesystem);
        CHECK(r.error_value().path == (fs::canonical(stage) / "lib/libbig.so").string());
        CHECK(r.error_value().source == "test://archive");
        for (const auto& p : listing(stage.parent_path())) CHECK(p.rfind("stage", 0) == 0);
        // Nothing the unpacker wrote is still open or growing: a second look
        // after a pause sees the same sizes.
        const auto size_now = fs::file_size(stage / "lib/libbig.so");
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        CHECK(fs::file_size(stage / "lib/libbig.so") == size_now);
    }
}

TEST_CASE("libarchive's umask flips happen only under umask_mutex", "[unpack][pool]") {
    // libarchive's disk writer sets the process umask to 0 and back for every
    // entry it writes (here directories and symlinks), as archive_write_disk_new
    // does. redist reads the umask once, under umask_mutex(), and the
    // directories it creates take their mode from that read: a read that
    // caught a 0 made every directory of that run world-writable (CI,
    // e2e.test_fetch: share/licenses/<component> 0777). So under the mutex
    // the umask must always read as set, while unpackers write entries.
    std::vector<spec> specs = {{"top/", kind::dir, "", 0755}};
    for (int i = 0; i < 300; ++i) {
        const std::string dir = "top/d" + std::to_string(i) + "/";
        specs.push_back({dir, kind::dir, "", 0755});
        specs.push_back({dir + "link", kind::symlink, "elsewhere", 0777});
    }
    const std::string tgz = build(specs, container::tar_gz);
    constexpr int kUnpackers = 4;
    constexpr int kRounds = 3;
    std::vector<fs::path> stages;
    for (int i = 0; i < kUnpackers * kRounds; ++i) stages.push_back(fresh_stage("umask_" + std::to_string(i)));

    const mode_t saved = ::umask(022);
    std::atomic<bool> done{false};
    std::atomic<long> reads{0};
    std::atomic<long> zeros{0};
    std::thread watcher([&] {
        while (!done.load()) {
            std::lock_guard lock(redist::umask_mutex());
            const mode_t now = ::umask(0);  // the only way to read it: set and set back, under the mutex
            ::umask(now);
            ++reads;
            if (now == 0) ++zeros;
        }
    });
    std::atomic<int> failures{0};
    std::vector<std::thread> unpackers;
    for (int t = 0; t < kUnpackers; ++t)
        unpackers.emplace_back([&, t] {
            for (int round = 0; round < kRounds; ++round) {
                auto started = redist::stream_unpacker::start(stages[t * kRounds + round],
                                                              opts(redist::archive_format::tar_gz));
                if (!started) {
                    ++failures;
                    continue;
                }
                auto& u = *started.value();
                if (!u.write(reinterpret_cast<const std::byte*>(tgz.data()), tgz.size()) || !u.finish()) ++failures;
            }
        });
    for (auto& t : unpackers) t.join();
    done = true;
    watcher.join();
    ::umask(saved);
    CHECK(failures == 0);
    CHECK(reads > 0);
    CHECK(zeros == 0);
}

// ---- tar.zst: libzstd on the decoder thread, the tar stream hashed ----------------

namespace {

// Compresses `tar` as zstd frames of `frame_bytes` input each (as a mirror's
// recompressed copy is written), optionally with a window of 2^window_log.
std::string zstd_frames(const std::string& tar, std::size_t frame_bytes, int window_log = 0) {
    std::unique_ptr<ZSTD_CCtx, std::size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
    REQUIRE(cctx);
    REQUIRE_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 1)));
    if (window_log != 0) REQUIRE_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_windowLog, window_log)));
    std::string out;
    std::vector<char> buffer(ZSTD_CStreamOutSize());
    for (std::size_t at = 0; at < tar.size() || at == 0; at += frame_bytes) {
        ZSTD_inBuffer in{tar.data() + at, std::min(frame_bytes, tar.size() - at), 0};
        // Streamed (ZSTD_e_continue first), the frame header does not know
        // the content size, so it declares the whole window as set.
        while (in.pos < in.size) {
            ZSTD_outBuffer o{buffer.data(), buffer.size(), 0};
            REQUIRE_FALSE(ZSTD_isError(ZSTD_compressStream2(cctx.get(), &o, &in, ZSTD_e_continue)));
            out.append(buffer.data(), o.pos);
        }
        std::size_t left = 0;
        do {
            ZSTD_outBuffer o{buffer.data(), buffer.size(), 0};
            left = ZSTD_compressStream2(cctx.get(), &o, &in, ZSTD_e_end);
            REQUIRE_FALSE(ZSTD_isError(left));
            out.append(buffer.data(), o.pos);
        } while (left != 0);
        if (tar.empty()) break;
    }
    return out;
}

}  // namespace

TEST_CASE("tar.zst of many frames unpacks and reports its tar stream's SHA-256", "[unpack]") {
    const std::string tar = build(reference_tree(), container::tar);
    const std::string zst = zstd_frames(tar, 1024);
    REQUIRE(zst.size() > 0);
    const fs::path stage = fresh_stage("zst-frames");
    auto started = redist::stream_unpacker::start(stage, opts(redist::archive_format::tar_zst));
    REQUIRE_OK(started);
    auto& u = *started.value();
    for (std::size_t at = 0; at < zst.size(); at += 100)
        REQUIRE_OK(
            u.write(reinterpret_cast<const std::byte*>(zst.data() + at), std::min<std::size_t>(100, zst.size() - at)));
    auto r = u.finish();
    REQUIRE_OK(r);
    CHECK(same(*r, expected_reference()));
    CHECK(u.tar_digest() == redist::sha256_hex(tar));
    fs::permissions(stage / "locked", fs::perms::owner_all);
}

TEST_CASE("a truncated, corrupt or oversized tar.zst is refused", "[unpack]") {
    const std::string tar = build(reference_tree(), container::tar);
    const std::string zst = zstd_frames(tar, 4096);
    SECTION("truncated mid-frame") {
        const fs::path stage = fresh_stage("zst-cut");
        auto r = unpack(zst.substr(0, zst.size() - 3), stage, opts(redist::archive_format::tar_zst));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::bad_archive);
    }
    SECTION("not zstd at all") {
        const fs::path stage = fresh_stage("zst-garbage");
        auto r = unpack(tar, stage, opts(redist::archive_format::tar_zst));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::bad_archive);
        CHECK(r.error_value().message.find("zstd") != std::string::npos);
    }
    SECTION("a window beyond 128 MiB") {
        const fs::path stage = fresh_stage("zst-window");
        auto r = unpack(zstd_frames(tar, tar.size(), 30), stage, opts(redist::archive_format::tar_zst));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::bad_archive);
    }
    SECTION("a bomb stops at max_output_bytes") {
        const fs::path stage = fresh_stage("zst-bomb");
        std::vector<spec> big{{"top/", kind::dir, "", 0755},
                              {"top/zeros", kind::file, std::string(8u << 20, '\0'), 0644}};
        auto o = opts(redist::archive_format::tar_zst);
        o.max_output_bytes = 1u << 20;
        auto r = unpack(zstd_frames(build(big, container::tar), 1u << 20), stage, o);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::unsafe_archive);
    }
}

// ---- tar.zst frames with content sizes: decoded on the run's pool -----------------

namespace {

// Compresses `tar` as frames of `frame_bytes` each, in one call per frame, so
// that every frame header records its content size (as recompress_xz_to_zstd
// writes a mirror's copy).
std::string zstd_sized_frames(const std::string& tar, std::size_t frame_bytes) {
    std::string out;
    std::vector<char> buffer(ZSTD_compressBound(frame_bytes));
    for (std::size_t at = 0; at < tar.size(); at += frame_bytes) {
        const std::size_t n = std::min(frame_bytes, tar.size() - at);
        const std::size_t written = ZSTD_compress(buffer.data(), buffer.size(), tar.data() + at, n, 1);
        REQUIRE_FALSE(ZSTD_isError(written));
        REQUIRE(ZSTD_getFrameContentSize(buffer.data(), written) == n);
        out.append(buffer.data(), written);
    }
    return out;
}

void put_le(std::string& out, std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// A zstd frame written by hand: `content` in raw blocks, its header declaring
// `declared` bytes of content (single segment, an 8-byte content size field).
std::string raw_frame(const std::string& content, std::uint64_t declared) {
    std::string f;
    put_le(f, ZSTD_MAGICNUMBER, 4);
    f.push_back(static_cast<char>(0xE0));  // FCS 8 bytes, single segment, no checksum, no dictionary
    put_le(f, declared, 8);
    std::size_t at = 0;
    do {
        const std::size_t n = std::min<std::size_t>(content.size() - at, 1u << 17);
        const bool last = at + n == content.size();
        put_le(f, (n << 3) | (last ? 1u : 0u), 3);  // type 0: raw
        f.append(content, at, n);
        at += n;
    } while (at < content.size());
    return f;
}

std::string skippable_frame(const std::string& payload) {
    std::string f;
    put_le(f, 0x184D2A53, 4);
    put_le(f, payload.size(), 4);
    return f + payload;
}

// Unpacks with a pool of four threads: frames with content sizes go to the pool.
redist::unpack_options pool_opts(std::shared_ptr<redist::run_budget> run) {
    auto o = opts(redist::archive_format::tar_zst);
    o.budget = std::move(run);
    return o;
}

std::string big_tar() {
    std::vector<spec> specs{{"top/", kind::dir, "", 0755},
                            {"top/noise", kind::file, noise(300000, 7), 0644},
                            {"top/text", kind::file, std::string(200000, 'a') + noise(1000, 8), 0600},
                            {"top/small", kind::file, "x", 0644}};
    return build(specs, container::tar);
}

}  // namespace

TEST_CASE("tar.zst frames with content sizes decode on the pool as the stream decoder does", "[unpack][pool]") {
    const std::string tar = big_tar();
    const std::string zst = zstd_sized_frames(tar, 16u << 10);
    auto streaming = opts(redist::archive_format::tar_zst);
    streaming.decoder_threads = 1;
    streaming.budget = budget(4, 256ull << 20);
    const fs::path stage1 = fresh_stage("zst-streamed");
    auto started1 = redist::stream_unpacker::start(stage1, streaming);
    REQUIRE_OK(started1);
    auto& u1 = *started1.value();
    REQUIRE_OK(u1.write(reinterpret_cast<const std::byte*>(zst.data()), zst.size()));
    auto streamed = u1.finish();
    REQUIRE_OK(streamed);
    CHECK(streaming.budget->decode_memory().peak() == 0);  // nothing went to the pool

    for (const std::size_t chunk : {std::size_t{7}, std::size_t{4096}, zst.size()}) {
        CAPTURE(chunk);
        auto pooled = pool_opts(budget(4, 256ull << 20));
        const fs::path stage2 = fresh_stage("zst-pooled");
        auto started2 = redist::stream_unpacker::start(stage2, pooled);
        REQUIRE_OK(started2);
        auto& u2 = *started2.value();
        for (std::size_t at = 0; at < zst.size(); at += chunk)
            REQUIRE_OK(u2.write(reinterpret_cast<const std::byte*>(zst.data() + at), std::min(chunk, zst.size() - at)));
        auto r = u2.finish();
        REQUIRE_OK(r);
        CHECK(same(*r, *streamed));
        CHECK(u2.tar_digest() == u1.tar_digest());
        CHECK(u2.tar_digest() == redist::sha256_hex(tar));
        // The frames were leased and decoded on the pool, and every lease went back.
        CHECK(pooled.budget->decode_memory().peak() > 0);
        CHECK(pooled.budget->decode_memory().held() == 0);
    }
}

TEST_CASE("tar.zst's hash list: the same streamed and on the pool, whatever the frames", "[unpack][pool]") {
    const std::string tar = big_tar();
    constexpr std::uint64_t piece = 64u << 10;
    REQUIRE(tar.size() > 4 * piece);  // several pieces, the last one shorter
    redist::file_digester expected(piece);
    expected.update(tar.data(), tar.size());
    const std::string list = expected.finish_hex();
    REQUIRE(list != redist::sha256_hex(tar));
    // Frames of one piece each (as recompress_xz_to_zstd writes them), and
    // frames that cut pieces anywhere.
    for (const std::size_t frame : {std::size_t{piece}, std::size_t{48u << 10}, std::size_t{100000}}) {
        const std::string zst = zstd_sized_frames(tar, frame);
        for (const bool pooled : {false, true}) {
            CAPTURE(frame, pooled);
            auto o = pool_opts(budget(4, 256ull << 20));
            if (!pooled) o.decoder_threads = 1;
            o.tar_piece_bytes = piece;
            const fs::path stage = fresh_stage("zst-list");
            auto started = redist::stream_unpacker::start(stage, o);
            REQUIRE_OK(started);
            for (std::size_t at = 0; at < zst.size(); at += 4096)
                REQUIRE_OK(started.value()->write(reinterpret_cast<const std::byte*>(zst.data() + at),
                                                  std::min<std::size_t>(4096, zst.size() - at)));
            REQUIRE_OK(started.value()->finish());
            CHECK(started.value()->tar_digest() == list);
            CHECK((o.budget->decode_memory().peak() > 0) == pooled);
        }
    }
}

TEST_CASE("tar.zst on the pool: skippable frames and frames without a content size", "[unpack][pool]") {
    const std::string tar = big_tar();
    SECTION("skippable frames between data frames are skipped") {
        const std::size_t half = tar.size() / 2;
        const std::string zst = skippable_frame("") + zstd_sized_frames(tar.substr(0, half), 8192) +
                                skippable_frame("metadata") + zstd_sized_frames(tar.substr(half), 8192) +
                                skippable_frame("end");
        auto o = pool_opts(budget(4, 256ull << 20));
        const fs::path stage = fresh_stage("zst-skippable");
        auto started = redist::stream_unpacker::start(stage, o);
        REQUIRE_OK(started);
        REQUIRE_OK(started.value()->write(reinterpret_cast<const std::byte*>(zst.data()), zst.size()));
        REQUIRE_OK(started.value()->finish());
        CHECK(started.value()->tar_digest() == redist::sha256_hex(tar));
        CHECK(o.budget->decode_memory().peak() > 0);
    }
    SECTION("a single frame without a content size streams") {
        auto o = pool_opts(budget(4, 256ull << 20));
        const fs::path stage = fresh_stage("zst-unsized");
        auto started = redist::stream_unpacker::start(stage, o);
        REQUIRE_OK(started);
        const std::string zst = zstd_frames(tar, tar.size());
        REQUIRE(ZSTD_getFrameContentSize(zst.data(), zst.size()) == ZSTD_CONTENTSIZE_UNKNOWN);
        REQUIRE_OK(started.value()->write(reinterpret_cast<const std::byte*>(zst.data()), zst.size()));
        REQUIRE_OK(started.value()->finish());
        CHECK(started.value()->tar_digest() == redist::sha256_hex(tar));
        CHECK(o.budget->decode_memory().peak() == 0);
    }
    SECTION("frames of raw blocks, sized and not, in one stream") {
        const std::string zst = raw_frame(tar.substr(0, 1000), 1000) + zstd_frames(tar.substr(1000, 5000), 1u << 20) +
                                raw_frame(tar.substr(6000), tar.size() - 6000);
        auto o = pool_opts(budget(4, 256ull << 20));
        auto r = unpack(zst, fresh_stage("zst-mixed"), o, 333);
        REQUIRE_OK(r);
    }
}

TEST_CASE("tar.zst on the pool: lying, truncated and oversized frames are refused", "[unpack][pool]") {
    const std::string tar = big_tar();
    const std::string head = tar.substr(0, 10000);
    const std::string rest = tar.substr(10000);
    const auto refused = [](const std::string& zst, const char* name, redist::error_code code) {
        auto o = pool_opts(budget(4, 256ull << 20));
        auto r = unpack(zst, fresh_stage(name), o, 4096);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == code);
        CHECK(r.error_value().describe().find('\n') == std::string::npos);
        CHECK(o.budget->decode_memory().held() == 0);
        return r.error_value().message;
    };
    SECTION("a content size larger than the frame decodes to") {
        const auto m = refused(raw_frame(head, head.size() + 1) + raw_frame(rest, rest.size()), "zst-lie-big",
                               redist::error_code::bad_archive);
        CHECK(m.rfind("zstd: ", 0) == 0);
    }
    SECTION("a content size smaller than the frame decodes to") {
        const auto m = refused(raw_frame(head, head.size() - 1) + raw_frame(rest, rest.size()), "zst-lie-small",
                               redist::error_code::bad_archive);
        CHECK(m.rfind("zstd: ", 0) == 0);
    }
    SECTION("a truncated last frame") {
        const std::string zst = zstd_sized_frames(tar, 8192);
        for (const std::size_t cut : {std::size_t{1}, std::size_t{3}, std::size_t{100}}) {
            CAPTURE(cut);
            CHECK(refused(zst.substr(0, zst.size() - cut), "zst-cut-last", redist::error_code::bad_archive) ==
                  "truncated zstd stream");
        }
        CHECK(refused(zst + std::string("\x28\xb5\x2f", 3), "zst-cut-magic", redist::error_code::bad_archive) ==
              "truncated zstd stream");
    }
    SECTION("a frame declaring more than kMaxParallelFrame (64 MiB) streams, and its lie is found") {
        auto o = pool_opts(budget(4, 256ull << 20));
        auto r = unpack(raw_frame(tar, (std::uint64_t{64} << 20) + 1), fresh_stage("zst-huge"), o);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::bad_archive);
        CHECK(o.budget->decode_memory().peak() == 0);  // never leased 64 MiB for it
    }
    SECTION("a frame of more blocks than its content size can need, up to its buffer's last bytes") {
        // One byte of content in a raw block, then empty raw blocks up to 2
        // bytes short of the 1 MiB read for it, then a checksum: the frame
        // streams from what was read, and libzstd judges it.
        std::string f;
        put_le(f, ZSTD_MAGICNUMBER, 4);
        f.push_back(static_cast<char>(0xE4));  // as raw_frame, with a checksum
        put_le(f, 1, 8);
        put_le(f, 1u << 3, 3);
        f.push_back('x');
        while (f.size() < (std::size_t{1} << 20) - 5) put_le(f, 0, 3);
        put_le(f, 1, 3);  // the last, empty
        REQUIRE(f.size() == (std::size_t{1} << 20) - 2);
        put_le(f, 0, 4);  // a checksum that does not match
        refused(f, "zst-many-blocks", redist::error_code::bad_archive);
    }
    SECTION("frames beyond the output cap") {
        std::vector<spec> big{{"top/", kind::dir, "", 0755},
                              {"top/zeros", kind::file, std::string(8u << 20, '\0'), 0644}};
        auto o = pool_opts(budget(4, 256ull << 20));
        o.max_output_bytes = 1u << 20;
        auto r = unpack(zstd_sized_frames(build(big, container::tar), 256u << 10), fresh_stage("zst-pool-bomb"), o);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::unsafe_archive);
        CHECK(o.budget->decode_memory().held() == 0);
    }
}

// ---- the tree a copy unpacks to ------------------------------------------------------

namespace {

std::vector<unpacked_entry> unpacked_tree(const std::vector<spec>& specs, const std::string& name,
                                          std::string* tar_digest = nullptr, bool digest_tar = true) {
    auto o = opts(redist::archive_format::tar_zst);
    o.digest_tar = digest_tar;
    const std::string zst = build(specs, container::tar_zst);
    auto started = redist::stream_unpacker::start(fresh_stage(name), o);
    REQUIRE_OK(started);
    REQUIRE_OK(started.value()->write(reinterpret_cast<const std::byte*>(zst.data()), zst.size()));
    auto entries = started.value()->finish();
    REQUIRE_OK(entries);
    if (tar_digest) *tar_digest = started.value()->tar_digest();
    return std::move(entries).value();
}

}  // namespace

TEST_CASE("tree_digest: nine NUL-ended fields per entry, sorted by path", "[unpack][tree]") {
    unpacked_entry file;
    file.path = "lib/b";
    file.size = 3;
    file.sha256 = redist::sha256_hex("abc");
    file.mode = 0755;
    file.mtime = {true, 1700000000, 5};
    unpacked_entry link;
    link.path = "lib/a";
    link.kind = entry_kind::symlink;
    link.link_target = "b";
    link.mode = 0777;
    std::string text;
    for (const char* field : {"symlink", "lib/a", "777", "0", "0", "", "b", "-", "-",  //
                              "file", "lib/b", "755", "3", "0", file.sha256.c_str(), "", "1700000000.5", "-"}) {
        text += field;
        text += '\0';
    }
    CHECK(redist::tree_digest({file, link}) == redist::sha256_hex(text));
    CHECK(redist::tree_digest({link, file}) == redist::sha256_hex(text));
    CHECK(redist::tree_digest({}) == redist::sha256_hex(""));
}

TEST_CASE("tree_digest: the same tree in another tar, and every difference that lands", "[unpack][tree]") {
    std::string tar_a, tar_b;
    const auto reference = unpacked_tree(reference_tree(), "tree-a", &tar_a);
    const std::string digest = redist::tree_digest(reference);
    // What a receipt keeps of each entry, with the times restored on it; a hardlink sets none.
    const unpacked_entry* lib = find(reference, "lib/libfoo.so.9.1.0");
    REQUIRE(lib != nullptr);
    CHECK(lib->mtime == redist::entry_time{true, 1700000000, 0});
    CHECK_FALSE(lib->atime.set);
    const unpacked_entry* copy = find(reference, "lib/libfoo-copy.so.9.1.0");
    REQUIRE(copy != nullptr);
    CHECK_FALSE(copy->mtime.set);

    // Another member order: another tar, the same tree.
    auto reordered = reference_tree();
    std::rotate(reordered.begin() + 1, reordered.end() - 2, reordered.end());
    CHECK(redist::tree_digest(unpacked_tree(reordered, "tree-b", &tar_b)) == digest);
    CHECK(tar_a != tar_b);

    const auto changed = [&](const std::string& name, auto edit) {
        auto specs = reference_tree();
        for (auto& s : specs)
            if (s.name == name) edit(s);
        return redist::tree_digest(unpacked_tree(specs, "tree-changed"));
    };
    CHECK(changed("top/include/foo.h", [](spec& s) { s.data += " "; }) != digest);
    CHECK(changed("top/include/foo.h", [](spec& s) { s.mode = 0600; }) != digest);
    CHECK(changed("top/include/foo.h", [](spec& s) { s.mtime += 1; }) != digest);
    CHECK(changed("top/lib/", [](spec& s) { s.mtime += 1; }) != digest);
    CHECK(changed("top/lib/libfoo.so", [](spec& s) { s.data = "libfoo.so.9.1.0"; }) != digest);
    CHECK(changed("top/lib/libfoo-copy.so.9.1.0", [](spec& s) { s.data = "top/bin/tool"; }) != digest);
    // Setuid is dropped on the way: the tree states the mode as written.
    CHECK(changed("top/bin/suid", [](spec& s) { s.mode = 0755; }) == digest);
}

TEST_CASE("a copy checked by its tree has no tar digest computed", "[unpack][tree]") {
    std::string digest = "unset";
    const auto without = unpacked_tree(reference_tree(), "tree-nodigest", &digest, /*digest_tar=*/false);
    CHECK(digest.empty());
    std::string with;
    const auto entries = unpacked_tree(reference_tree(), "tree-digest", &with);
    CHECK_FALSE(with.empty());
    CHECK(same(without, entries));
    CHECK(redist::tree_digest(without) == redist::tree_digest(entries));
}
