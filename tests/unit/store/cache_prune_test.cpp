// `redist cache prune --max-size`: blob_cache::prune_to_size evicts the least
// recently used entries first, down to the limit, and no further.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "redist/cache.hpp"
#include "support.hpp"

using namespace redist;
namespace fs = std::filesystem;

namespace {

void put_blob(const blob_cache& cache, char digit, std::size_t size, int hours_ago) {
    const fs::path path = cache.blob_path(std::string(64, digit));
    redist_test::write(path, std::string(size, 'x'));
    struct timespec times[2];
    times[0].tv_sec = times[1].tv_sec = std::time(nullptr) - hours_ago * 3600;
    times[0].tv_nsec = times[1].tv_nsec = 0;
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

}  // namespace

TEST_CASE("prune_to_size: least recently used first, down to the limit") {
    const auto root = redist_test::scratch("cache_prune");
    auto cache = blob_cache::open(root);
    REQUIRE(cache.ok());
    put_blob(*cache, 'a', 100, 3);  // oldest
    put_blob(*cache, 'b', 200, 1);
    put_blob(*cache, 'c', 300, 2);

    auto none = cache->prune_to_size(600);  // everything fits: nothing goes
    REQUIRE(none.ok());
    CHECK(*none == 0);
    CHECK(cache->has_blob(std::string(64, 'a')));

    auto freed = cache->prune_to_size(250);  // a (oldest), then c: 200 bytes stay
    REQUIRE(freed.ok());
    CHECK(*freed == 400);
    CHECK_FALSE(cache->has_blob(std::string(64, 'a')));
    CHECK_FALSE(cache->has_blob(std::string(64, 'c')));
    CHECK(cache->has_blob(std::string(64, 'b')));

    auto all = cache->prune_to_size(0);
    REQUIRE(all.ok());
    CHECK(*all == 200);
    auto left = cache->list();
    REQUIRE(left.ok());
    CHECK(left->empty());
}
