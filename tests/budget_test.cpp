// Tests for lib/work_pool.hpp and lib/budget.hpp: the writer pool's
// admission and draining, and how a run's budget divides threads and memory.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "../lib/budget.hpp"
#include "../lib/work_pool.hpp"

using redist::run_budget;
using redist::work_pool;

namespace {
constexpr std::uint64_t kMiB = 1ull << 20;
}

TEST_CASE("work_pool runs every posted task, also those queued at destruction", "[budget]") {
    std::atomic<int> ran{0};
    {
        work_pool pool(3, {});
        for (int i = 0; i < 1000; ++i) pool.post([&] { ran.fetch_add(1); });
    }
    CHECK(ran.load() == 1000);
}

TEST_CASE("work_pool runs tasks on several threads", "[budget]") {
    work_pool pool(4, {});
    std::mutex m;
    std::vector<std::thread::id> seen;
    std::atomic<int> inside{0};
    std::atomic<int> max_inside{0};
    std::atomic<int> done{0};
    for (int i = 0; i < 16; ++i)
        pool.post([&] {
            const int now = ++inside;
            int prev = max_inside.load();
            while (prev < now && !max_inside.compare_exchange_weak(prev, now)) {}
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            --inside;
            {
                std::lock_guard lock(m);
                seen.push_back(std::this_thread::get_id());
            }
            ++done;
        });
    while (done.load() < 16) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(max_inside.load() > 1);
    CHECK(pool.threads() == 4);
}

TEST_CASE("work_pool admission blocks until bytes and slots are released", "[budget]") {
    work_pool pool(1, {10, 2});
    const std::atomic<bool> never{false};
    REQUIRE(pool.reserve(8, 1, never));
    REQUIRE(pool.reserve(2, 1, never));  // exactly full

    std::atomic<bool> admitted{false};
    std::thread waiter([&] { admitted = pool.reserve(1, 0, never); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(admitted.load());  // 11 bytes > 10
    pool.release(2, 1);
    waiter.join();
    CHECK(admitted.load());

    // A slot limit blocks too, independently of bytes.
    std::atomic<bool> slot{false};
    REQUIRE(pool.reserve(0, 1, never));  // slots: 2 of 2
    std::thread slot_waiter([&] { slot = pool.reserve(0, 1, never); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(slot.load());
    pool.release(0, 1);
    slot_waiter.join();
    CHECK(slot.load());
}

TEST_CASE("work_pool admission gives up when its stop flag is set", "[budget]") {
    work_pool pool(1, {4, 1});
    const std::atomic<bool> never{false};
    REQUIRE(pool.reserve(4, 1, never));
    std::atomic<bool> stop{false};
    std::atomic<int> result{-1};
    std::thread waiter([&] { result = pool.reserve(1, 0, stop) ? 1 : 0; });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop = true;
    pool.wake();
    waiter.join();
    CHECK(result.load() == 0);
    // A request larger than the whole limit is admitted once nothing is in flight.
    pool.release(4, 1);
    CHECK(pool.reserve(100, 5, never));
}

TEST_CASE("run_budget: machine defaults follow the documented formula", "[budget]") {
    const auto limits = run_budget::machine_limits();
    CHECK(limits.threads >= 1);
    CHECK(limits.threads <= std::max(1u, std::thread::hardware_concurrency()));
    CHECK(limits.max_memory >= 256 * kMiB);
    CHECK(limits.max_memory <= 1024 * kMiB);
    run_budget b;
    CHECK(b.threads() == limits.threads);
    CHECK(b.memory() == limits.max_memory);
    CHECK(b.pool().threads() == limits.threads);
}

TEST_CASE("run_budget divides threads and decoder memory by weight", "[budget]") {
    run_budget b({16, 1024 * kMiB});
    const std::uint64_t overhead_one = 64 * kMiB + 2 * b.queue_bytes();
    {
        // Alone: everything but the pool's buffers and its own queues.
        run_budget::ticket t(b, 100);
        const auto s = t.claim();
        CHECK(s.threads == 16);
        CHECK(s.memlimit == 1024 * kMiB - overhead_one);
        CHECK(t.claim().threads == 16);  // claiming twice returns the same share
    }
    {
        // Three enrolled before any claims: shares follow the weights, and
        // together they never exceed the budget.
        run_budget::ticket big(b, 600);
        run_budget::ticket mid(b, 300);
        run_budget::ticket small(b, 100);
        const auto sb = big.claim();
        const auto sm = mid.claim();
        const auto ss = small.claim();
        CHECK(sb.threads == 10);  // 16 * 0.6 = 9.6
        CHECK(sm.threads == 5);   // 6 * 0.75 = 4.5 -> 5 (lround)
        CHECK(ss.threads == 1);
        CHECK(sb.threads + sm.threads + ss.threads <= 16);
        CHECK(sb.memlimit > sm.memlimit);
        CHECK(sm.memlimit > ss.memlimit);
        const std::uint64_t decoders = 1024 * kMiB - 64 * kMiB - 3 * 2 * b.queue_bytes();
        CHECK(sb.memlimit + sm.memlimit + ss.memlimit <= decoders);
        CHECK(sb.memlimit + sm.memlimit + ss.memlimit >= decoders - 16);
    }
    {
        // What finished artifacts held comes back.
        run_budget::ticket again(b, 1);
        CHECK(again.claim().threads == 16);
    }
}

TEST_CASE("run_budget: a late artifact still gets a thread", "[budget]") {
    run_budget b({2, 256 * kMiB});
    run_budget::ticket first(b, 1);
    CHECK(first.claim().threads == 2);
    run_budget::ticket late(b, 1);
    const auto s = late.claim();
    CHECK(s.threads == 1);
    CHECK(s.memlimit >= 1);
}

TEST_CASE("run_budget: profile sums the stages that ran", "[budget]") {
    run_budget b({2, 256 * kMiB});
    b.add_time(redist::profile_stage::decoder, 2'000'000'000, 500'000'000, 42);
    b.add_time(redist::profile_stage::decoder, 1'000'000'000, 0, 8);
    const auto p = b.profile();
    CHECK(p.threads == 2);
    CHECK(p.max_memory == 256 * kMiB);
    const redist::stage_time* decoder = nullptr;
    for (const auto& s : p.stages) {
        if (s.stage == "decoder") decoder = &s;
        CHECK(s.stage != "transfer");  // never reported: left out
    }
    REQUIRE(decoder != nullptr);
    CHECK(decoder->busy_seconds == Approx(3.0));
    CHECK(decoder->wait_seconds == Approx(0.5));
    CHECK(decoder->bytes == 50);
}
