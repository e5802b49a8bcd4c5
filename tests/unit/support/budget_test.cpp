// Tests for lib/support/work_pool.hpp and lib/support/budget.hpp: the writer pool's
// admission and draining, and how a run's budget divides threads and memory;
// and lib/support/parallel.hpp, the job loop of fetch, mirror and verify.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/budget.hpp"
#include "support/parallel.hpp"
#include "support/work_pool.hpp"

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

TEST_CASE("work_pool runs urgent tasks first, then bulk tasks by priority and in posting order", "[budget]") {
    std::vector<std::string> order;  // written by the pool's one worker only
    std::atomic<bool> go{false};
    {
        work_pool pool(1, {});
        // Holds the only worker until everything below is queued.
        pool.post([&] {
            while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            order.emplace_back("blocker");
        });
        const auto record = [&](const char* name) { return [&order, name] { order.emplace_back(name); }; };
        pool.post(record("small"), work_pool::lane::bulk, 1);
        pool.post(record("large 1"), work_pool::lane::bulk, 3);
        pool.post(record("middle"), work_pool::lane::bulk, 2);
        pool.post(record("large 2"), work_pool::lane::bulk, 3);
        pool.post(record("urgent"));
        go = true;
    }  // the destructor runs what is queued, then joins
    const std::vector<std::string> expected = {"blocker", "urgent", "large 1", "large 2", "middle", "small"};
    CHECK(order == expected);
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

TEST_CASE("run_budget: the decoders' memory is the budget less buffers and enrolled queues", "[budget]") {
    run_budget b({16, 1024 * kMiB});
    auto& gate = b.decode_memory();
    // Less the process baseline (48), the writers' buffers (64), one artifact's three queues
    // and the 16 workers' kept decoders.
    const std::uint64_t free_alone = 1024 * kMiB - 48 * kMiB - 64 * kMiB - 3 * b.queue_bytes() -
                                     std::uint64_t{16} * 9 * kMiB;
    std::atomic<bool> never{false};
    const auto no = [&] { return never.load(); };
    {
        run_budget::ticket t(b);
        // Exactly the free memory fits; a byte more waits, so an interrupt returns an empty lease.
        auto all = gate.acquire(free_alone, no);
        CHECK(all.bytes() == free_alone);
        CHECK(gate.held() == free_alone);
        auto more = gate.acquire(1, [] { return true; });
        CHECK_FALSE(more);
        {
            run_budget::ticket second(b);  // one more artifact's queues: the limit shrinks
            all.reset();
            auto big = gate.acquire(free_alone, no);  // alone: let in although over the limit
            CHECK(big.bytes() == free_alone);
            auto small = gate.acquire(free_alone - 3 * b.queue_bytes(), [] { return true; });
            CHECK_FALSE(small);
        }
    }
    CHECK(gate.held() == 0);
    CHECK(gate.peak() == free_alone);
}

TEST_CASE("memory_gate: a waiting request gets in when a lease is freed on another thread", "[budget]") {
    redist::memory_gate gate([] { return std::uint64_t{100}; });
    auto first = gate.acquire(80, [] { return false; });
    REQUIRE(first.bytes() == 80);
    auto part = first.split(30);  // 50 + 30 held
    CHECK(part.bytes() == 30);
    CHECK(gate.held() == 80);
    std::thread freer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        first.reset();
    });
    auto second = gate.acquire(60, [] { return false; });  // 30 + 60 fits once the 50 are back
    freer.join();
    CHECK(second.bytes() == 60);
    CHECK(gate.held() == 90);
    part.reset();
    second.reset();
    CHECK(gate.held() == 0);
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

TEST_CASE("memory_gate: freed buffers are kept for reuse, and freed before a request has to wait", "[budget]") {
    const std::size_t page = 4096;
    redist::memory_gate gate([&] { return std::uint64_t{100} * page; }, 2);
    gate.keep(redist::memory_gate::map(30 * page), 30 * page);
    std::byte* forty = redist::memory_gate::map(40 * page);
    forty[0] = std::byte{42};
    gate.keep(forty, 40 * page);
    gate.keep(redist::memory_gate::map(20 * page), 20 * page);  // a third: the oldest (30) goes
    CHECK(gate.kept() == 60 * page);
    CHECK(gate.held() == 0);
    std::size_t want = 35 * page;  // 40 is within a quarter more
    redist::memory_gate::lease taken;
    std::byte* bytes = gate.take(want, taken);
    REQUIRE(bytes == forty);
    CHECK(bytes[0] == std::byte{42});  // the same memory, not a copy
    CHECK(want == 40 * page);
    CHECK(gate.kept() == 20 * page);
    // Still counted: no longer kept, held in the lease that came with it.
    CHECK(taken.bytes() == 40 * page);
    CHECK(gate.held() == 40 * page);
    taken.reset();
    CHECK(gate.held() == 0);
    std::size_t big = 60 * page;  // nothing kept is close enough
    redist::memory_gate::lease none;
    CHECK(gate.take(big, none) == nullptr);
    CHECK(big == 60 * page);
    CHECK_FALSE(none);
    // 20 kept + 90 asked > 100: the kept buffer is freed rather than waited for.
    auto lease = gate.acquire(90 * page, [] { return false; });
    CHECK(lease.bytes() == 90 * page);
    CHECK(gate.kept() == 0);
    // A buffer that would not fit under the limit is not kept (it is unmapped).
    gate.keep(bytes, 40 * page);
    CHECK(gate.kept() == 0);
}

TEST_CASE("memory_gate: small freed buffers are kept beyond the count while they fit the byte allowance", "[budget]") {
    const std::size_t page = 4096;
    // At most 2 by count, or more while they total 100 pages.
    redist::memory_gate gate([&] { return std::uint64_t{1000} * page; }, 2, std::uint64_t{100} * page);
    std::vector<std::byte*> small;
    for (int i = 0; i < 5; ++i) {
        small.push_back(redist::memory_gate::map(20 * page));
        small.back()[0] = std::byte(i);
    }
    for (auto* b : small) gate.keep(b, 20 * page);
    CHECK(gate.kept() == 100 * page);  // all five: 100 pages fit the allowance
    // A sixth would pass it: the oldest goes, as with the count alone.
    gate.keep(redist::memory_gate::map(20 * page), 20 * page);
    CHECK(gate.kept() == 100 * page);
    std::size_t want = 20 * page;
    redist::memory_gate::lease taken;
    std::byte* reused = gate.take(want, taken);
    REQUIRE(reused != nullptr);
    CHECK(gate.kept() == 80 * page);
    gate.keep(reused, want);
    // Large buffers: the count rule alone (2), the allowance adds none.
    redist::memory_gate big_gate([&] { return std::uint64_t{1000} * page; }, 2, std::uint64_t{100} * page);
    for (int i = 0; i < 3; ++i) big_gate.keep(redist::memory_gate::map(80 * page), 80 * page);
    CHECK(big_gate.kept() == 160 * page);
    // Without an allowance (the default), the count rule as before.
    redist::memory_gate counted([&] { return std::uint64_t{1000} * page; }, 2);
    for (int i = 0; i < 4; ++i) counted.keep(redist::memory_gate::map(20 * page), 20 * page);
    CHECK(counted.kept() == 40 * page);
}

TEST_CASE("memory_gate: callers that hold a first lease and wait for a second are not left waiting for each other",
          "[budget]") {
    // Two decoders each hold a block's compressed bytes (30 + 30 of 100) and
    // ask for its decoded room (60). Neither fits while the other holds its
    // 30; everything held belongs to waiters, so one is let in, and the other
    // follows once the first gives its bytes back.
    redist::memory_gate gate([] { return std::uint64_t{100}; });
    auto input_a = gate.acquire(30, [] { return false; });
    auto input_b = gate.acquire(30, [] { return false; });
    REQUIRE(gate.held() == 60);
    // A first step (nothing held by its caller) is not let in over the limit.
    CHECK_FALSE(gate.acquire(50, [] { return true; }));
    std::atomic<int> admitted{0};  // (Catch's CHECK is not for other threads)
    auto second_step = [&](redist::memory_gate::lease& input) {
        auto output = gate.acquire(
            60, [] { return false; }, input.bytes());
        if (output.bytes() == 60) ++admitted;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        output.reset();
        input.reset();
    };
    std::thread a([&] { second_step(input_a); });
    std::thread b([&] { second_step(input_b); });
    a.join();
    b.join();
    CHECK(admitted == 2);
    CHECK(gate.held() == 0);
    CHECK(gate.peak() <= 30 + 30 + 60);  // one at a time over the limit, never both
}

TEST_CASE("memory_gate: a second step fits normally when there is room, and absorb() merges leases", "[budget]") {
    redist::memory_gate gate([] { return std::uint64_t{100}; });
    auto other = gate.acquire(50, [] { return false; });  // someone else's, not waiting
    auto input = gate.acquire(20, [] { return false; });
    // 50 + 20 + 40 > 100 and the 50 are not a waiter's: the request waits (interrupted here).
    CHECK_FALSE(gate.acquire(
        40, [] { return true; }, input.bytes()));
    auto output = gate.acquire(
        30, [] { return false; }, input.bytes());  // 100: fits
    CHECK(output.bytes() == 30);
    input.absorb(std::move(output));
    CHECK(input.bytes() == 50);
    CHECK_FALSE(output);  // NOLINT(bugprone-use-after-move): absorb() empties it, as checked here
    CHECK(gate.held() == 100);
    input.reset();
    other.reset();
    CHECK(gate.held() == 0);
}

TEST_CASE("for_each_index runs every index once, on as many threads as asked and no more", "[budget]") {
    for (const unsigned threads : {0u, 1u, 2u, 7u}) {
        for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{200}}) {
            std::vector<std::atomic<int>> runs(count);
            std::mutex seen_mutex;
            std::set<std::thread::id> seen;
            std::atomic<int> running{0};
            std::atomic<int> most_at_once{0};
            redist::for_each_index(count, threads, nullptr, [&](std::size_t i) {
                const int now = ++running;
                int most = most_at_once.load();
                while (now > most && !most_at_once.compare_exchange_weak(most, now)) {}
                std::this_thread::sleep_for(std::chrono::microseconds(200));
                ++runs[i];
                {
                    const std::lock_guard<std::mutex> hold(seen_mutex);
                    seen.insert(std::this_thread::get_id());
                }
                --running;
            });
            INFO("threads " << threads << ", count " << count);
            for (std::size_t i = 0; i < count; ++i) CHECK(runs[i] == 1);
            const std::size_t allowed = std::min<std::size_t>(std::max(threads, 1u), std::max<std::size_t>(count, 1));
            CHECK(static_cast<std::size_t>(most_at_once.load()) <= allowed);
            CHECK(seen.size() <= allowed);
            // One thread is the caller itself. (With more, helpers may take
            // every job before the caller gets one: no check there.)
            if (threads <= 1 && count > 0) CHECK(seen == std::set<std::thread::id>{std::this_thread::get_id()});
        }
    }
}

TEST_CASE("for_each_index hands out no index once stop is set", "[budget]") {
    std::atomic<bool> stop{false};
    std::vector<std::atomic<int>> runs(100);
    redist::for_each_index(runs.size(), 1, &stop, [&](std::size_t i) {
        ++runs[i];
        if (i == 9) stop = true;
    });
    for (std::size_t i = 0; i < runs.size(); ++i) CHECK(runs[i] == (i <= 9 ? 1 : 0));

    // Several threads: each may finish the job it holds, none starts another.
    stop = false;
    std::atomic<int> started{0};
    redist::for_each_index(1000, 4, &stop, [&](std::size_t) {
        if (++started == 10) stop = true;
    });
    CHECK(started >= 10);
    CHECK(started < 10 + 4);
}
