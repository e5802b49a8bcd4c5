// The lock file (lib/support/file_lock.hpp): the one opener of the prefix
// lock, the cache's blob locks and the drift history's URL locks. A planted
// symlink, FIFO or directory is refused without blocking; flock's modes and
// the non-blocking try.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "support.hpp"
#include "support/file_lock.hpp"

namespace fs = std::filesystem;
using namespace redist_test;
using namespace redist;

namespace {

result<unique_fd> try_lock(const fs::path& path, lock_mode mode) { return lock_file(path, mode, lock_wait::try_once); }

}  // namespace

TEST_CASE("lock_file creates a missing lock file and holds it") {
    const fs::path dir = scratch("create");
    auto held = lock_file(dir / "lock", lock_mode::exclusive, lock_wait::block);
    REQUIRE(held.ok());
    CHECK(held->valid());
    CHECK(fs::is_regular_file(fs::symlink_status(dir / "lock")));
}

TEST_CASE("lock_file refuses a symlink at the lock's name and leaves its target alone") {
    const fs::path dir = scratch("symlink");
    write(dir / "target", "keep");
    fs::create_symlink(dir / "target", dir / "lock");
    fs::create_symlink(dir / "absent", dir / "dangling");
    for (const char* name : {"lock", "dangling"}) {
        auto held = lock_file(dir / name, lock_mode::exclusive, lock_wait::block);
        REQUIRE_FALSE(held.ok());
        CHECK(held.error_value().code == error_code::filesystem);
        CHECK(held.error_value().message.find("cannot open lock file") != std::string::npos);
        CHECK(held.error_value().path == (dir / name).string());
    }
    CHECK(slurp(dir / "target") == "keep");
    CHECK_FALSE(fs::exists(dir / "absent"));
}

TEST_CASE("lock_file refuses a FIFO or a directory without blocking") {
    const fs::path dir = scratch("special");
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
    fs::create_directory(dir / "directory");
    for (const char* name : {"fifo", "directory"}) {
        for (const lock_mode mode : {lock_mode::exclusive, lock_mode::shared}) {
            auto held = lock_file(dir / name, mode, lock_wait::block);
            REQUIRE_FALSE(held.ok());
            CHECK(held.error_value().code == error_code::filesystem);
            CHECK(held.error_value().message.find("lock file") != std::string::npos);
        }
    }
}

TEST_CASE("lock_wait::try_once: an empty descriptor while another holder conflicts") {
    // flock belongs to the open file description: a second open of the same
    // file in this process conflicts like another process would.
    const fs::path path = scratch("try") / "lock";
    auto writer = try_lock(path, lock_mode::exclusive);
    REQUIRE(writer.ok());
    REQUIRE(writer->valid());
    auto second = try_lock(path, lock_mode::exclusive);
    REQUIRE(second.ok());
    CHECK_FALSE(second->valid());
    auto reader = try_lock(path, lock_mode::shared);
    REQUIRE(reader.ok());
    CHECK_FALSE(reader->valid());

    writer->reset();  // closing the descriptor releases the lock
    auto again = try_lock(path, lock_mode::exclusive);
    REQUIRE(again.ok());
    CHECK(again->valid());
}

TEST_CASE("shared locks coexist and keep a writer out") {
    const fs::path path = scratch("shared") / "lock";
    auto first = try_lock(path, lock_mode::shared);
    auto second = try_lock(path, lock_mode::shared);
    REQUIRE(first.ok());
    REQUIRE(second.ok());
    CHECK(first->valid());
    CHECK(second->valid());
    auto writer = try_lock(path, lock_mode::exclusive);
    REQUIRE(writer.ok());
    CHECK_FALSE(writer->valid());
}

TEST_CASE("lock_wait::block calls on_wait once, then waits for the holder") {
    const fs::path path = scratch("block") / "lock";
    auto holder = try_lock(path, lock_mode::exclusive);
    REQUIRE(holder.ok());
    int waits = 0;
    // on_wait runs before the wait: releasing the holder there lets the wait end.
    auto waiter = lock_file(path, lock_mode::exclusive, lock_wait::block, [&] {
        ++waits;
        holder->reset();
    });
    REQUIRE(waiter.ok());
    CHECK(waiter->valid());
    CHECK(waits == 1);
}

TEST_CASE("lock_file_at names the lock under a directory descriptor") {
    const fs::path dir = scratch("at");
    const unique_fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(dir_fd.valid());
    auto held = lock_file_at(dir_fd.get(), "lock", lock_mode::shared, lock_wait::block, {}, dir / "lock");
    REQUIRE(held.ok());
    CHECK(held->valid());
    CHECK(fs::is_regular_file(dir / "lock"));
}
