// fetch_test.cpp — the pure parts of lib/pipeline/fetch.cpp's scheduling: how many
// artifacts a fetch runs at once by default (default_jobs).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "redist/fetch.hpp"

using redist::default_jobs;

TEST_CASE("default_jobs: enough slots for the others to finish beside the largest archive", "[fetch]") {
    constexpr std::uint64_t MiB = 1u << 20;
    // 14 components on 16 cores: 1322 MiB, the largest 373 MiB -> 4.
    const std::vector<std::uint64_t> cuda14 = {148 * MiB, 1,         5 * MiB, 1,        28 * MiB,  168 * MiB, 61 * MiB,
                                               155 * MiB, 131 * MiB, MiB,     41 * MiB, 373 * MiB, 178 * MiB, 32 * MiB};
    CHECK(default_jobs(cuda14, 16) == 4);
    // The 2-core bench's 9 cuDNN components (323 MiB, the largest 169 MiB): 2, which is also the cores.
    CHECK(default_jobs({169 * MiB, 90 * MiB, 32 * MiB, 16 * MiB, 12 * MiB, 1, MiB, MiB, 1}, 2) == 2);
    // Equal sizes: all at once, as far as the cores go.
    CHECK(default_jobs(std::vector<std::uint64_t>(10, 50 * MiB), 16) == 10);
    CHECK(default_jobs(std::vector<std::uint64_t>(10, 50 * MiB), 4) == 4);
    // A total just over a multiple of the largest rounds up.
    CHECK(default_jobs({100, 100, 1}, 16) == 3);
    CHECK(default_jobs({100, 60, 40}, 16) == 2);
}

TEST_CASE("default_jobs: edge cases stay within 1..cores", "[fetch]") {
    CHECK(default_jobs({}, 8) == 8);
    CHECK(default_jobs({0, 0}, 8) == 8);  // sizes unknown: the cores
    CHECK(default_jobs({42}, 8) == 1);
    CHECK(default_jobs({42}, 0) == 1);  // no core count: at least one
    // Hostile manifest sizes saturate instead of wrapping to a small total.
    CHECK(default_jobs({UINT64_MAX, UINT64_MAX, UINT64_MAX}, 8) == 1);
    CHECK(default_jobs({UINT64_MAX / 2, UINT64_MAX / 2, 5, UINT64_MAX / 2}, 8) == 3);
}
