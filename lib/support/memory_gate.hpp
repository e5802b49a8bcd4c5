// Internal: a byte budget that several producers draw from, for memory that
// is held across threads (the xz block decoder's buffers; see xz_decode.hpp).
//
// acquire() hands out a lease, which gives its bytes back when it is
// destroyed, wherever that happens (a decoded block's buffer is freed by the
// extractor thread, long after a pool worker filled it). A request that does
// not fit waits; a request larger than the whole limit is let in when nothing
// else is held, so it runs alone rather than never.
//
// The gate also owns the buffers of that memory: mapped (mmap) rather than
// malloc'd, because glibc returns a freed 24 MiB chunk to the arena of the
// thread that allocated it and raises its mmap threshold, so with decoders,
// workers and extractors on 30 threads, freed blocks stayed resident in
// per-thread arenas (2 GiB of RSS on a 1 GiB budget, 16 cores). Freed
// buffers can be kept for reuse (keep/take): a fresh 24 MiB block costs
// 6,000 page faults, and a multi-block archive needs one per block. Kept buffers count against the limit (not in
// held()), and acquire() frees them before it waits, so they never hold memory a request needs. A buffer
// taken for reuse comes with a lease of its size (take()): it stays counted from the moment it leaves the
// kept list, even while its new owner waits for more (16 cores: buffers taken and then held uncounted
// during such waits were what kept the run's RSS 100 MiB above its budget).
//
// Two-step requests: a decoder leases a block's compressed bytes, reads them (the download may still be
// delivering them) and only then asks for the decoded block's room, so a slow download holds the small
// half only. Such a request names what its caller already holds (`own`); when everything held belongs to
// callers waiting like that, nothing would ever be freed, so one of them is let in (as any request is when
// nothing at all is held). A first step (own == 0) is not: it would only add to what waits.
//
// Waiters also wake on notify(), and give up when their `interrupt`
// predicate turns true: a decoder that waits for memory must still hand on
// its finished blocks, which is what frees memory (see decode_xz).
#pragma once

#include <sys/mman.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace redist {

class memory_gate {
public:
    // `limit` is read at each check, so the owner can let it follow the run
    // (run_budget subtracts the queues of the artifacts in flight).
    // Up to `max_kept` freed buffers are kept for reuse, or more while they
    // total at most `max_kept_bytes` (see keep()).
    explicit memory_gate(std::function<std::uint64_t()> limit, std::size_t max_kept = 2,
                         std::uint64_t max_kept_bytes = 0)
        : limit_(std::move(limit)), max_kept_(max_kept), max_kept_bytes_(max_kept_bytes) {}
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
        // Takes over `other`'s bytes (of the same gate, or an empty lease).
        void absorb(lease&& other) noexcept {
            if (!other.gate_) return;
            if (!gate_) gate_ = other.gate_;
            bytes_ += std::exchange(other.bytes_, 0);
            other.gate_ = nullptr;
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

    // Waits until `bytes` fit under the limit (or nothing is held but what
    // waiting callers own: see the top), then returns a lease of them.
    // `own`: bytes the caller holds in other leases of this gate while it
    // waits. Returns an empty lease, holding nothing, as soon as interrupt()
    // is true; it is checked under the gate's lock at every wake-up, so
    // state that interrupt() reads must change in signal().
    lease acquire(std::uint64_t bytes, const std::function<bool()>& interrupt, std::uint64_t own = 0) {
        std::unique_lock lock(mutex_);
        parked_ += own;
        if (own > 0) changed_.notify_all();  // another waiter may now be the one let in
        struct unpark {
            std::uint64_t& parked;
            std::uint64_t own;
            ~unpark() { parked -= own; }
        } unparked{parked_, own};
        for (;;) {
            if (interrupt()) return {};
            while (!kept_.empty() && held_ + kept_bytes_ + bytes > limit_()) evict_one();
            // Alone: nothing held, or (a second step) only what waiting callers own.
            const bool alone = held_ == 0 || (own > 0 && held_ <= parked_);
            if (alone || held_ + kept_bytes_ + bytes <= limit_()) break;
            changed_.wait(lock);
        }
        return hold(bytes);
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
    // `pred()` evaluated under the gate's lock (state that signal() changes).
    template <class F>
    bool test(F&& pred) {
        std::lock_guard lock(mutex_);
        return pred();
    }
    void notify() noexcept {
        std::lock_guard lock(mutex_);
        changed_.notify_all();
    }

    // A new mapping of `capacity` bytes (throws std::bad_alloc); give it back
    // with keep(), which unmaps what it does not keep.
    static std::byte* map(std::size_t capacity) {
        void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        ::madvise(p, capacity, MADV_HUGEPAGE);
        return static_cast<std::byte*>(p);
    }

    // The smallest kept buffer of `capacity` bytes up to a quarter more, or
    // null; `capacity` is set to its size. Its bytes move from the kept count
    // into `held`, a lease of them (kept bytes were within the limit, so this
    // never waits, and the buffer is never resident without being counted).
    std::byte* take(std::size_t& capacity, lease& held) {
        std::lock_guard lock(mutex_);
        auto best = kept_.end();
        for (auto it = kept_.begin(); it != kept_.end(); ++it) {
            if (it->capacity < capacity || it->capacity > capacity + capacity / 4) continue;
            if (best == kept_.end() || it->capacity < best->capacity) best = it;
        }
        if (best == kept_.end()) return nullptr;
        std::byte* bytes = best->bytes;
        capacity = best->capacity;
        kept_bytes_ -= capacity;
        kept_.erase(best);
        held = hold(capacity);
        return bytes;
    }

    // Takes back a buffer from map() or take(): kept for take(), counted
    // against the limit, or unmapped if it would not fit. At most max_kept,
    // or more small ones up to max_kept_bytes: a steady stream of blocks
    // reuses a buffer soon after it is freed, and more kept would only be
    // resident memory that nothing uses. Small blocks (xz -1: 3 MiB) come
    // and go faster than two kept buffers cover, and every fresh one costs
    // its page faults again (12-14 us each on the 2-core VMs, measured: a
    // 3 MiB block is 10 ms of CPU); the byte allowance covers them without
    // keeping more of the large ones.
    void keep(std::byte* bytes, std::size_t capacity) noexcept {
        std::lock_guard lock(mutex_);
        if (max_kept_ == 0 || held_ + kept_bytes_ + capacity > limit_()) return unmap(bytes, capacity);
        // The oldest go first: the newest is likelier to be in cache.
        while (!kept_.empty() && kept_.size() >= max_kept_ && kept_bytes_ + capacity > max_kept_bytes_) evict_oldest();
        try {
            kept_.push_back({bytes, capacity});
        } catch (...) {
            return unmap(bytes, capacity);
        }
        kept_bytes_ += capacity;
    }

    ~memory_gate() {
        for (const auto& k : kept_) unmap(k.bytes, k.capacity);
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
    static void unmap(std::byte* bytes, std::size_t capacity) noexcept { ::munmap(bytes, capacity); }
    // Counts `bytes` as held (the caller has the lock) and hands them out.
    lease hold(std::uint64_t bytes) {
        held_ += bytes;
        if (held_ > peak_) peak_ = held_;
        return lease(this, bytes);
    }
    void evict_one() {
        unmap(kept_.back().bytes, kept_.back().capacity);
        kept_bytes_ -= kept_.back().capacity;
        kept_.pop_back();
    }
    void evict_oldest() {
        unmap(kept_.front().bytes, kept_.front().capacity);
        kept_bytes_ -= kept_.front().capacity;
        kept_.erase(kept_.begin());
    }

    void release(std::uint64_t bytes) noexcept {
        std::lock_guard lock(mutex_);
        held_ -= bytes;
        changed_.notify_all();
    }

    std::function<std::uint64_t()> limit_;
    const std::size_t max_kept_;
    const std::uint64_t max_kept_bytes_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::uint64_t held_ = 0;
    std::uint64_t parked_ = 0;  // held by callers now waiting in acquire() (their `own`)
    std::uint64_t kept_bytes_ = 0;
    std::uint64_t peak_ = 0;
    struct kept_buffer {
        std::byte* bytes = nullptr;  // a mapping of capacity bytes, ours
        std::size_t capacity = 0;
    };
    std::vector<kept_buffer> kept_;
};

}  // namespace redist
