// Internal: a byte budget that several producers draw from, for memory that
// is held across threads (the xz block decoder's buffers; see xz_decode.hpp).
//
// acquire() hands out a lease, which gives its bytes back when it is
// destroyed, wherever that happens (a decoded block's buffer is freed by the
// extractor thread, long after a pool worker filled it). A request that does
// not fit waits; a request larger than the whole limit is let in when nothing
// else is held, so it runs alone rather than never.
//
// Freed buffers can be kept for reuse (keep/take): a fresh 24 MiB block
// buffer costs 6,000 page faults, and a multi-block archive needs one per
// block. Kept buffers count against the limit (not in held()), and acquire()
// frees them before it waits, so they never hold memory a request needs.
//
// Waiters also wake on notify(), and give up when their `interrupt`
// predicate turns true: a decoder that waits for memory must still hand on
// its finished blocks, which is what frees memory (see decode_xz).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace redist {

class memory_gate {
public:
    // `limit` is read at each check, so the owner can let it follow the run
    // (run_budget subtracts the queues of the artifacts in flight).
    // Up to `max_kept` freed buffers are kept for reuse (see keep()).
    explicit memory_gate(std::function<std::uint64_t()> limit, std::size_t max_kept = 2)
        : limit_(std::move(limit)), max_kept_(max_kept) {}
    memory_gate(const memory_gate&) = delete;
    memory_gate& operator=(const memory_gate&) = delete;

    class lease {
    public:
        lease() = default;
        lease(lease&& other) noexcept
            : gate_(std::exchange(other.gate_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
        lease& operator=(lease&& other) noexcept {
            if (this != &other) {
                reset();
                gate_ = std::exchange(other.gate_, nullptr);
                bytes_ = std::exchange(other.bytes_, 0);
            }
            return *this;
        }
        lease(const lease&) = delete;
        lease& operator=(const lease&) = delete;
        ~lease() { reset(); }

        // Moves `bytes` (at most what this lease holds) into a lease of their own.
        lease split(std::uint64_t bytes) noexcept {
            if (bytes > bytes_) bytes = bytes_;
            bytes_ -= bytes;
            return lease(gate_, bytes);
        }
        void reset() noexcept {
            if (gate_ && bytes_ > 0) gate_->release(bytes_);
            gate_ = nullptr;
            bytes_ = 0;
        }
        std::uint64_t bytes() const noexcept { return bytes_; }
        explicit operator bool() const noexcept { return gate_ != nullptr; }

    private:
        friend class memory_gate;
        lease(memory_gate* gate, std::uint64_t bytes) : gate_(gate), bytes_(bytes) {}
        memory_gate* gate_ = nullptr;
        std::uint64_t bytes_ = 0;
    };

    // Waits until `bytes` fit under the limit (or nothing is held), then
    // returns a lease of them. Returns an empty lease, holding nothing, as
    // soon as interrupt() is true; it is checked under the gate's lock at
    // every wake-up, so state that interrupt() reads must change in signal().
    lease acquire(std::uint64_t bytes, const std::function<bool()>& interrupt) {
        std::unique_lock lock(mutex_);
        for (;;) {
            if (interrupt()) return {};
            while (!kept_.empty() && held_ + kept_bytes_ + bytes > limit_()) evict_one();
            if (held_ == 0 || held_ + kept_bytes_ + bytes <= limit_()) break;
            changed_.wait(lock);
        }
        held_ += bytes;
        if (held_ > peak_) peak_ = held_;
        return lease(this, bytes);
    }

    // Waits until done() is true, under the same rule as acquire's interrupt.
    void wait(const std::function<bool()>& done) {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, done);
    }

    // Runs `change` under the gate's lock, then wakes every waiter to look
    // again: how a pool task reports a finished block without a lost wake-up.
    // (Notifying under the lock: a waiter that sees the change may destroy
    // the gate, and then nothing of it may be touched after the unlock.)
    template <class F>
    void signal(F&& change) {
        std::lock_guard lock(mutex_);
        change();
        changed_.notify_all();
    }
    void notify() noexcept {
        std::lock_guard lock(mutex_);
        changed_.notify_all();
    }

    // The smallest kept buffer of `capacity` bytes up to a quarter more, or
    // null; `capacity` is set to its size. Its bytes leave the gate's count:
    // the caller acquires them again as a lease.
    std::unique_ptr<std::byte[]> take(std::size_t& capacity) {
        std::lock_guard lock(mutex_);
        auto best = kept_.end();
        for (auto it = kept_.begin(); it != kept_.end(); ++it) {
            if (it->capacity < capacity || it->capacity > capacity + capacity / 4) continue;
            if (best == kept_.end() || it->capacity < best->capacity) best = it;
        }
        if (best == kept_.end()) return nullptr;
        std::unique_ptr<std::byte[]> bytes = std::move(best->bytes);
        capacity = best->capacity;
        kept_bytes_ -= capacity;
        kept_.erase(best);
        return bytes;
    }

    // Keeps a freed buffer for take(), counted against the limit (it is freed
    // if it would not fit). At most max_kept: a steady stream of blocks
    // reuses a buffer soon after it is freed, and more kept would only be
    // resident memory that nothing uses.
    void keep(std::unique_ptr<std::byte[]> bytes, std::size_t capacity) noexcept {
        std::lock_guard lock(mutex_);
        if (held_ + kept_bytes_ + capacity > limit_()) return;  // freed here
        if (max_kept_ == 0) return;
        if (kept_.size() >= max_kept_) {  // the oldest goes: the newest is likelier to be in cache
            kept_bytes_ -= kept_.front().capacity;
            kept_.erase(kept_.begin());
        }
        try {
            kept_.push_back({std::move(bytes), capacity});
        } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory, the buffer is freed instead
            return;
        }
        kept_bytes_ += capacity;
    }

    std::uint64_t limit() const {
        std::lock_guard lock(mutex_);
        return limit_();
    }
    // Bytes in leases (kept buffers not included), and their peak.
    std::uint64_t held() const {
        std::lock_guard lock(mutex_);
        return held_;
    }
    std::uint64_t kept() const {
        std::lock_guard lock(mutex_);
        return kept_bytes_;
    }
    std::uint64_t peak() const {
        std::lock_guard lock(mutex_);
        return peak_;
    }

private:
    void evict_one() {
        kept_bytes_ -= kept_.back().capacity;
        kept_.pop_back();
    }

    void release(std::uint64_t bytes) noexcept {
        std::lock_guard lock(mutex_);
        held_ -= bytes;
        changed_.notify_all();
    }

    std::function<std::uint64_t()> limit_;
    const std::size_t max_kept_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::uint64_t held_ = 0;
    std::uint64_t kept_bytes_ = 0;
    std::uint64_t peak_ = 0;
    struct kept_buffer {
        std::unique_ptr<std::byte[]> bytes;
        std::size_t capacity = 0;
    };
    std::vector<kept_buffer> kept_;
};

}  // namespace redist
