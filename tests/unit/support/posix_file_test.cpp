// The file helpers (lib/support/posix_file.hpp): bounded reads that never block on a
// FIFO or follow a planted symlink, and the one atomic writer.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"
#include "support/posix_file.hpp"

namespace fs = std::filesystem;
using namespace redist_test;
using namespace redist;

namespace {

unsigned stat_mode(const fs::path& path) {
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    return st.st_mode;
}

}  // namespace

TEST_CASE("read_file reads a regular file within its limit") {
    const fs::path dir = scratch("read");
    REQUIRE(atomic_write(dir / "f", "hello", durability::none).ok());
    auto text = read_file(dir / "f", 5);
    REQUIRE(text.ok());
    CHECK(*text == "hello");
    auto empty_limit = read_file(dir / "f", 4);
    REQUIRE_FALSE(empty_limit.ok());
    CHECK(empty_limit.error_value().code == error_code::bad_manifest);
    auto custom = read_file(dir / "f", 4, follow_links::no, error_code::filesystem);
    REQUIRE_FALSE(custom.ok());
    CHECK(custom.error_value().code == error_code::filesystem);
}

TEST_CASE("read_file refuses a FIFO without blocking, and symlinks unless asked") {
    const fs::path dir = scratch("special");
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
    auto fifo = read_file(dir / "fifo", 100);  // would hang forever without O_NONBLOCK
    REQUIRE_FALSE(fifo.ok());
    CHECK(fifo.error_value().code == error_code::filesystem);
    REQUIRE(atomic_write(dir / "target", "t", durability::none).ok());
    fs::create_symlink(dir / "target", dir / "link");
    CHECK_FALSE(read_file(dir / "link", 100).ok());
    auto followed = read_file(dir / "link", 100, follow_links::yes);
    REQUIRE(followed.ok());
    CHECK(*followed == "t");
    CHECK_FALSE(read_file(dir, 100).ok());  // a directory
    auto missing = read_file(dir / "missing", 100);
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error_value().path == (dir / "missing").string());
}

TEST_CASE("the one read loop: blocks to the end, an offset, a failed block stops it, errors name the file") {
    const fs::path file = scratch("read-loop") / "data";
    std::string bytes(10000, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
    write(file, bytes);
    auto fd = open_regular(file, follow_links::no);
    REQUIRE_OK(fd);

    std::vector<std::byte> buffer(4096);
    std::string seen;
    std::vector<std::size_t> blocks;
    auto total = read_each_block(fd->get(), buffer, file, [&](const std::byte* data, std::size_t n) -> result<void> {
        seen.append(reinterpret_cast<const char*>(data), n);
        blocks.push_back(n);
        return {};
    });
    REQUIRE_OK(total);
    CHECK(*total == bytes.size());
    CHECK(seen == bytes);
    CHECK(blocks == std::vector<std::size_t>{4096, 4096, 1808});
    auto at_end = read_some(fd->get(), buffer.data(), buffer.size(), file);
    REQUIRE_OK(at_end);
    CHECK(*at_end == 0);

    char two[2] = {};
    auto at = pread_some(fd->get(), two, sizeof two, 9998, file);
    REQUIRE_OK(at);
    CHECK(*at == 2);
    CHECK(std::string(two, 2) == bytes.substr(9998));

    // The block's consumer fails: nothing more is read, and its error comes back as it was.
    REQUIRE(::lseek(fd->get(), 0, SEEK_SET) == 0);
    int calls = 0;
    auto stopped = read_each_block(fd->get(), buffer, file, [&](const std::byte*, std::size_t) -> result<void> {
        ++calls;
        return make_error(error_code::integrity, "the first block is wrong");
    });
    REQUIRE_FALSE(stopped.ok());
    CHECK(stopped.error_value().code == error_code::integrity);
    CHECK(calls == 1);

    // A descriptor that cannot be read (a directory): the error names the path, in the caller's category.
    const unique_fd dir(::open(file.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(dir);
    auto failed = read_some(dir.get(), buffer.data(), buffer.size(), file.parent_path(), error_code::network);
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.error_value().code == error_code::network);
    CHECK(failed.error_value().path == file.parent_path().string());
    CHECK(failed.error_value().message.find("cannot read") != std::string::npos);
}

TEST_CASE("atomic_write replaces a symlink instead of writing through it") {
    const fs::path dir = scratch("atomic");
    REQUIRE(atomic_write(dir / "victim", "precious", durability::full).ok());
    fs::create_symlink(dir / "victim", dir / "out");
    REQUIRE(atomic_write(dir / "out", "new", durability::contents).ok());
    CHECK(slurp(dir / "victim") == "precious");
    CHECK_FALSE(fs::is_symlink(dir / "out"));
    CHECK(slurp(dir / "out") == "new");
    // No temp file is left behind.
    std::size_t entries = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        CHECK_FALSE(is_atomic_write_temp(e.path().filename().string()));
        ++entries;
    }
    CHECK(entries == 2);
}

TEST_CASE("is_atomic_write_temp_of matches the temp names of one target only") {
    CHECK(is_atomic_write_temp_of("a.segments.tmp.42.0", "a.segments"));
    CHECK_FALSE(is_atomic_write_temp_of("a.segments.tmp.", "a.segments"));  // nothing after the marker
    CHECK_FALSE(is_atomic_write_temp_of("a.segments", "a.segments"));
    CHECK_FALSE(is_atomic_write_temp_of("b.a.segments.tmp.42.0", "a.segments"));
    CHECK_FALSE(is_atomic_write_temp_of("a.segments.other.tmp.42.0", "a.segments"));
    CHECK_FALSE(is_atomic_write_temp_of("a.segmentstmp.42.0", "a.segments"));
}

TEST_CASE("atomic_write fails cleanly where it cannot write") {
    const fs::path dir = scratch("fail");
    auto missing_dir = atomic_write(dir / "no" / "such" / "file", "x", durability::full);
    REQUIRE_FALSE(missing_dir.ok());
    CHECK(missing_dir.error_value().code == error_code::filesystem);
    CHECK(missing_dir.error_value().message.find("cannot create") != std::string::npos);
}

TEST_CASE("atomic_write never opens a name planted beside the target") {
    // A checkout or a shared cache may hold symlinks at every name a writer
    // with a fixed or guessable temp name would use ("<f>.tmp", "<f>.tmp.<pid>.<n>").
    const fs::path dir = scratch("planted");
    REQUIRE(atomic_write(dir / "victim", "precious", durability::none).ok());
    std::vector<std::string> planted = {"out.tmp", "out.tmp.0"};
    for (int n = 0; n < 8; ++n) planted.push_back("out.tmp." + std::to_string(::getpid()) + "." + std::to_string(n));
    for (const auto& name : planted) fs::create_symlink(dir / "victim", dir / name);
    for (int i = 0; i < 8; ++i) REQUIRE(atomic_write(dir / "out", "new " + std::to_string(i), durability::full).ok());
    CHECK(slurp(dir / "victim") == "precious");
    CHECK(slurp(dir / "out") == "new 7");
    for (const auto& name : planted) CHECK(fs::is_symlink(dir / name));  // not ours: left alone
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
    CHECK(entries == planted.size() + 2);  // victim, out: no temp file left
}

TEST_CASE("atomic_write leaves no temp file when the rename fails, and the target as it was") {
    const fs::path dir = scratch("rename_fails");
    fs::create_directories(dir / "out" / "inside");  // a directory cannot be replaced by a file
    auto failed = atomic_write(dir / "out", "x", durability::full);
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.error_value().code == error_code::filesystem);
    CHECK(failed.error_value().message.find("cannot rename into place") != std::string::npos);
    CHECK(fs::is_directory(dir / "out" / "inside"));
    for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename() == "out");
}

TEST_CASE("atomic_write gives a new file the asked mode less the umask") {
    const fs::path dir = scratch("mode");
    REQUIRE(atomic_write(dir / "default", "x", durability::none).ok());
    CHECK((stat_mode(dir / "default") & 07777) == (0644 & ~process_umask()));
    REQUIRE(atomic_write(dir / "private", "x", durability::none, 0600).ok());
    CHECK((stat_mode(dir / "private") & 07777) == 0600);
    REQUIRE(::chmod((dir / "default").c_str(), 0666) == 0);  // a replaced file's mode is not kept
    REQUIRE(atomic_write(dir / "default", "y", durability::none).ok());
    CHECK((stat_mode(dir / "default") & 07777) == (0644 & ~process_umask()));
}

TEST_CASE("unique_fd closes once and can be released") {
    const fs::path dir = scratch("fd");
    REQUIRE(atomic_write(dir / "f", "x", durability::none).ok());
    int raw = -1;
    {
        unique_fd fd(::open((dir / "f").c_str(), O_RDONLY | O_CLOEXEC));
        REQUIRE(fd.valid());
        raw = fd.get();
        unique_fd moved = std::move(fd);
        CHECK_FALSE(fd.valid());
        CHECK(moved.get() == raw);
    }
    CHECK(::fcntl(raw, F_GETFD) == -1);  // closed by the destructor
    unique_fd kept(::open((dir / "f").c_str(), O_RDONLY | O_CLOEXEC));
    const int released = kept.release();
    CHECK_FALSE(kept.valid());
    CHECK(::close(released) == 0);
}

TEST_CASE("errno_error names the path and the reason") {
    const error e = errno_error("cannot open", "/some/path", ENOENT);
    CHECK(e.code == error_code::filesystem);
    CHECK(e.path == "/some/path");
    CHECK(e.message.find("cannot open: ") == 0);
    CHECK(errno_error("x", "p", EACCES, error_code::bad_manifest).code == error_code::bad_manifest);
}

TEST_CASE("create_directories_masked keeps the umask even while another thread has set it to 0") {
    // What libarchive's archive_write_disk_new() does for a moment (posix_file.hpp).
    const unsigned mask = redist::process_umask();
    const fs::path dir = scratch("masked");
    const mode_t old = ::umask(0);
    std::error_code ec;
    redist::create_directories_masked(dir / "a" / "b", ec);
    ::umask(old);
    REQUIRE_FALSE(ec);
    for (const fs::path& p : {dir / "a", dir / "a" / "b"}) {
        struct stat st {};
        REQUIRE(::stat(p.c_str(), &st) == 0);
        CHECK((st.st_mode & 07777) == (0777 & ~mask));
    }
    CHECK(mask == static_cast<unsigned>(old));
    // A file in the way is an error, not a directory.
    { std::ofstream(dir / "file") << "x"; }
    redist::create_directories_masked(dir / "file" / "c", ec);
    CHECK(ec);
}

namespace {

void write_bytes(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_CASE("claim_scratch_dir adopts a killed run's partial downloads and removes the rest") {
    const fs::path parent = scratch("scratch-adopt");
    fs::create_directories(parent / "run-empty");
    fs::create_directories(parent / "run-killed");
    write_bytes(parent / "run-killed" / "abc.part.123", "half");
    write_bytes(parent / "run-killed" / "abc", "a finished download the killed run never handed on");
    write_bytes(parent / "run-killed" / "abc.original", "x");
    fs::create_directories(parent / "other");  // another prefix: not ours to touch
    const unique_fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY));
    {
        auto claim = claim_scratch_dir(parent_fd.get(), parent, "run-");
        REQUIRE(claim.ok());
        CHECK(claim->adopted());
        CHECK(claim->path() == parent / "run-killed");
        CHECK(names_in(parent) == std::vector<std::string>{"other", "run-killed"});
        CHECK(names_in(claim->path()) == std::vector<std::string>{"abc.part.123"});
        // Held: another claim makes a directory of its own.
        auto second = claim_scratch_dir(parent_fd.get(), parent, "run-");
        REQUIRE(second.ok());
        CHECK_FALSE(second->adopted());
        CHECK(second->path() != claim->path());
        CHECK((stat_mode(second->path()) & 0777) == 0700);
        second->release();
        CHECK_FALSE(fs::exists(second->path()));  // nothing in it: removed
        // Releasing keeps only what a later run resumes.
        write_bytes(claim->path() / "def", "done");
    }
    CHECK(names_in(parent / "run-killed") == std::vector<std::string>{"abc.part.123"});
    fs::remove(parent / "run-killed" / "abc.part.123");
    {
        auto claim = claim_scratch_dir(parent_fd.get(), parent, "run-");
        REQUIRE(claim.ok());
        CHECK_FALSE(claim->adopted());  // a leftover with nothing to resume is removed
        CHECK_FALSE(fs::exists(parent / "run-killed"));
    }
    CHECK(names_in(parent) == std::vector<std::string>{"other"});
}

TEST_CASE("claim_scratch_dir never enters a symlink, and remove_unheld_scratch_dirs skips held ones") {
    const fs::path parent = scratch("scratch-links");
    const fs::path elsewhere = scratch("scratch-links-elsewhere");
    write_bytes(elsewhere / "keep.part.1", "theirs");
    fs::create_directory_symlink(elsewhere, parent / "run-link");
    const unique_fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY));
    auto claim = claim_scratch_dir(parent_fd.get(), parent, "run-");
    REQUIRE(claim.ok());
    CHECK_FALSE(claim->adopted());
    CHECK(fs::exists(elsewhere / "keep.part.1"));
    fs::create_directories(parent / "run-dead");
    write_bytes(parent / "run-dead" / "f.part.9", "dead");
    CHECK(remove_unheld_scratch_dirs(parent_fd.get(), "run-", std::nullopt) == 4);
    CHECK_FALSE(fs::exists(parent / "run-dead"));
    CHECK(fs::exists(claim->path()));  // held by its run
    CHECK(fs::exists(elsewhere / "keep.part.1"));
    CHECK(is_resumable_part_name("abc.part.123"));
    CHECK_FALSE(is_resumable_part_name("abc.part."));
    CHECK_FALSE(is_resumable_part_name("abc.part.12x"));
    CHECK_FALSE(is_resumable_part_name(".part.1"));
    CHECK(redist::part_file_pid("lib.tar.xz.part.4194304") == 4194304);
    CHECK(redist::part_file_pid("a.part.b.part.7") == 7);
    CHECK(redist::part_file_pid("abc.part.1234567890") == -1);  // no pid has 10 digits
    CHECK(redist::part_file_pid("abc.tar.xz") == -1);
}
