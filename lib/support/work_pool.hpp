// Internal: a fixed pool of worker threads with admission control, shared by
// every unpacker of one run (see budget.hpp).
//
// Producers reserve() before they hand work in: a reservation counts bytes
// (buffers in flight) and slots (open files in flight) against the pool's
// limits, and blocks while they are exhausted. Workers never block on
// producers, so every posted task runs to its end and releases what it held:
// admission can delay a producer, never deadlock it, as long as each producer
// holds at most one unfinished slot while it waits (the unpacker's extractor
// does: it ends one file before it opens the next).
//
// post() never blocks and never drops a task: the pool drains its queue before
// its destructor joins. A task that throws is a bug; the pool catches and
// ignores the exception rather than terminate (the unpacker's tasks catch
// their own).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace redist {

class work_pool {
public:
    struct limits {
        std::size_t max_bytes = 32u << 20;  // buffered bytes in flight
        std::size_t max_slots = 256;        // open files in flight
    };

    work_pool(unsigned threads, limits lim);
    ~work_pool();  // runs what is queued, then joins
    work_pool(const work_pool&) = delete;
    work_pool& operator=(const work_pool&) = delete;

    // Blocks until `bytes` and `slots` fit (a request larger than the limit is
    // admitted when nothing else is in flight) or `stop` is true (then returns
    // false and reserves nothing). Call wake() after setting a stop flag.
    bool reserve(std::size_t bytes, std::size_t slots, const std::atomic<bool>& stop);
    void release(std::size_t bytes, std::size_t slots) noexcept;
    void wake() noexcept;

    // Which queue a task waits in: a free worker takes the urgent ones
    // first. The unpackers' file writes are urgent (they are short, and free
    // admission and the decoders' output when they end); decoding a whole xz
    // block is bulk.
    enum class lane : std::uint8_t { urgent, bulk };

    // Queues a task for the next free worker. Within the bulk lane a higher
    // `priority` runs first, and equal priorities run in the order posted.
    void post(std::function<void()> task, lane which = lane::urgent, std::uint64_t priority = 0);

    unsigned threads() const noexcept { return static_cast<unsigned>(workers_.size()); }

    // Seconds the workers spent running one lane's tasks / idle, summed over workers.
    double busy_seconds(lane which = lane::urgent) const noexcept;
    double idle_seconds() const noexcept;

private:
    void run_worker();

    const limits limits_;
    std::mutex mutex_;
    std::condition_variable work_ready_;
    std::condition_variable room_;
    struct bulk_task {
        std::uint64_t priority;
        std::uint64_t sequence;
        std::function<void()> run;
    };
    // A heap whose top is the highest priority, posted first.
    static bool runs_later(const bulk_task& a, const bulk_task& b) noexcept {
        return a.priority != b.priority ? a.priority < b.priority : a.sequence > b.sequence;
    }

    std::deque<std::function<void()>> tasks_;
    std::vector<bulk_task> bulk_tasks_;
    std::uint64_t bulk_posted_ = 0;
    std::size_t bytes_ = 0;
    std::size_t slots_ = 0;
    bool stopping_ = false;
    std::atomic<std::uint64_t> busy_ns_{0};
    std::atomic<std::uint64_t> bulk_busy_ns_{0};
    std::atomic<std::uint64_t> idle_ns_{0};
    std::vector<std::thread> workers_;
};

}  // namespace redist
