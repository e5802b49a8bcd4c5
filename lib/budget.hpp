// Internal: the thread and memory budget of one run, shared by the unpackers
// of every artifact in flight (include/redist/budget.hpp has the limits and
// their defaults).
//
// Why: each artifact used to start an xz decoder with one thread per core and
// 512 MiB of multi-threading memory, so 14 artifacts in flight held 14 times
// what one needs (3 GiB on 16 cores). Now an artifact *enrolls* when its
// unpacker starts, and its decoder *claims* a share when its first bytes
// arrive (by then the artifacts started together have all enrolled):
//
//   share = free × weight / (sum of the weights of enrolled, unclaimed artifacts)
//
// for threads (at least 1) and for decoder memory alike, where free is what
// the claims in progress leave, and weight is the archive's size (1 when
// unknown). A large archive gets more threads than a small one, nothing
// claimed exceeds the budget, and what a finished artifact held goes to the
// artifacts that claim after it. Decoder memory is the budget minus the
// writer pool's buffers and each enrolled artifact's two stage queues.
//
// The writer pool (work_pool.hpp) is the budget's too: one pool for the whole
// run, as many threads as the thread budget.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "redist/budget.hpp"
#include "work_pool.hpp"

namespace redist {

enum class profile_stage : std::uint8_t { transfer, archive_hash, decoder, extractor, writers };

class run_budget {
public:
    // Limits at 0 take machine_limits()' values. Throws std::system_error if
    // the writer threads cannot start.
    explicit run_budget(run_limits limits = {});

    // The documented defaults, read from this machine (see redist/budget.hpp).
    static run_limits machine_limits();

    unsigned threads() const noexcept { return threads_; }
    std::uint64_t memory() const noexcept { return memory_; }
    work_pool& pool() noexcept { return *pool_; }
    // Capacity of each of one artifact's two stage queues (input, tar).
    std::size_t queue_bytes() const noexcept { return queue_bytes_; }

    struct decoder_share {
        unsigned threads = 1;
        std::uint64_t memlimit = 1;  // lzma_mt::memlimit_threading
    };

    // One artifact in flight: enrolled on construction, leaves (returning
    // what it claimed) on destruction.
    class ticket {
    public:
        ticket() = default;
        ticket(run_budget& budget, std::uint64_t weight);
        ~ticket();
        ticket(const ticket&) = delete;
        ticket& operator=(const ticket&) = delete;
        // Once per ticket: this artifact's decoder share.
        decoder_share claim();

    private:
        run_budget* budget_ = nullptr;
        std::uint64_t weight_ = 1;
        bool claimed_ = false;
        decoder_share share_;
    };

    void add_time(profile_stage stage, std::uint64_t busy_ns, std::uint64_t wait_ns, std::uint64_t bytes = 0) noexcept;
    run_profile profile() const;

private:
    unsigned threads_;
    std::uint64_t memory_;
    std::size_t queue_bytes_;
    std::size_t pool_bytes_;
    std::unique_ptr<work_pool> pool_;

    std::mutex mutex_;
    std::uint64_t unclaimed_weight_ = 0;
    std::size_t enrolled_ = 0;
    unsigned claimed_threads_ = 0;
    std::uint64_t claimed_memory_ = 0;

    struct stage_counters {
        std::atomic<std::uint64_t> busy_ns{0};
        std::atomic<std::uint64_t> wait_ns{0};
        std::atomic<std::uint64_t> bytes{0};
    };
    std::array<stage_counters, 5> stages_{};
};

}  // namespace redist
