// Internal: the thread and memory budget of one run, shared by the unpackers
// of every artifact in flight (include/redist/budget.hpp has the limits and
// their defaults).
//
// Why: each artifact used to start an xz decoder with one thread per core and
// 512 MiB of multi-threading memory, so 14 artifacts in flight held 14 times
// what one needs (3 GiB on 16 cores). Then each got a fixed share of the
// threads, which left cores idle once the small artifacts were done. Now:
//
//  - one worker pool (work_pool.hpp) of `threads` workers runs every
//    artifact's file writes and every xz block decode (xz_decode.hpp), so the
//    cores go wherever there is work;
//  - one memory gate (memory_gate.hpp) bounds what the xz decoders hold:
//    compressed blocks, decoded blocks until the extractor has read them,
//    dictionaries. Its limit is the memory budget less what the rest of the
//    run holds (decoder_limit(): a process baseline, the pool's write
//    buffers, the workers' kept decoders, and the three queues of each
//    artifact in flight, which enrolls with a ticket while its unpacker runs).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "redist/budget.hpp"
#include "support/memory_gate.hpp"
#include "support/work_pool.hpp"

namespace redist {

// transfer: busy is the archive hash (a thread of its own on 4 cores or
// more), wait is the unpacker being behind. count: not a stage.
enum class profile_stage : std::uint8_t { transfer, decoder, extractor, writers, count };

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

    // What each pool worker's kept xz decoder may hold (xz_decode.cpp), set
    // aside from the decoders' memory.
    static constexpr std::uint64_t kept_decoder_bytes = std::uint64_t{9} << 20;
    // The xz decoders' memory (see above).
    memory_gate& decode_memory() noexcept { return decode_memory_; }

    // One artifact in flight: enrolled on construction (its queues come out
    // of the decoders' memory), leaves on destruction.
    class ticket {
    public:
        explicit ticket(run_budget& budget);
        ~ticket();
        ticket(const ticket&) = delete;
        ticket& operator=(const ticket&) = delete;

    private:
        run_budget* budget_;
    };

    // Notes that an artifact (or the run) reached `event` now (--profile).
    void mark(const char* event) noexcept;

    void add_time(profile_stage stage, std::uint64_t busy_ns, std::uint64_t wait_ns, std::uint64_t bytes = 0) noexcept;
    run_profile profile() const;

private:
    unsigned threads_;
    std::uint64_t memory_;
    std::size_t queue_bytes_;
    std::size_t pool_bytes_;

    std::uint64_t decoder_limit() const noexcept;

    std::atomic<std::size_t> enrolled_{0};
    // Declared before pool_, so destroyed after it: the pool runs its queued
    // decode tasks, which use the gate, before its workers are joined.
    memory_gate decode_memory_;
    std::unique_ptr<work_pool> pool_;

    struct stage_counters {
        std::atomic<std::uint64_t> busy_ns{0};
        std::atomic<std::uint64_t> wait_ns{0};
        std::atomic<std::uint64_t> bytes{0};
    };
    std::array<stage_counters, static_cast<std::size_t>(profile_stage::count)> stages_{};
    const std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
    mutable std::mutex marks_mutex_;
    std::vector<profile_mark> marks_;
};

}  // namespace redist
