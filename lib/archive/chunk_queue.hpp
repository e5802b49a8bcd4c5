// archive/chunk_queue.hpp — the unit of bytes between the unpacker's
// threads (a chunk: owned bytes, or a part of a decoded xz block) and the
// bounded queue that carries chunks from one thread to the next (unpack.hpp
// draws the pipeline: input queue, tar queue).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "archive/xz_decode.hpp"  // byte_buffer

namespace redist::unpacking {

// Queue bounds are in bytes, so peak memory does not depend on the archive
// size or on how the caller slices its writes. The two queues' capacities
// come from the run's budget (budget.hpp).
inline constexpr std::size_t kLzmaOutBuffer = 1u << 20;   // one decoded chunk
inline constexpr std::size_t kMinInputChunk = 64u << 10;  // small writes are coalesced
inline constexpr std::size_t kMaxInputChunk = 1u << 20;   // large writes are split
inline constexpr std::size_t kMaxSpares = 2;              // recycled buffers kept per queue
inline constexpr std::size_t kMaxSpareBytes = kLzmaOutBuffer;

// A chunk of bytes without the zero-fill of std::vector; a decoded xz block
// also carries its memory lease (xz_decode.hpp). Or a part of a decoded xz
// block that the decoder handed on while the block was still being decoded
// (xz_output::put_part): then `bytes` is empty and `size` bytes from `part`
// belong to `block`, which every part of it shares.
struct chunk : byte_buffer {
    std::shared_ptr<const byte_buffer> block;
    const std::byte* part = nullptr;

    chunk() = default;
    chunk(byte_buffer&& own) : byte_buffer(std::move(own)) {}  // NOLINT(google-explicit-constructor)
    static chunk part_of(std::shared_ptr<const byte_buffer> block, std::size_t offset, std::size_t size) {
        chunk c;
        c.part = block->bytes.get() + offset;
        c.block = std::move(block);
        c.size = size;
        return c;
    }

    const std::byte* data() const noexcept { return block ? part : bytes.get(); }
    // A decoded xz block's bytes, held for as long as this chunk (and any
    // slice of it) lives: its lease goes with the last reference.
    bool leased() const noexcept { return block ? static_cast<bool>(block->lease) : static_cast<bool>(lease); }
};

// A FIFO of chunks bounded by the bytes it holds. push() blocks while full;
// pop() blocks while empty. close() ends the stream normally (pop drains what
// is left, then reports end); abort() wakes everyone and makes both fail.
class chunk_queue {
public:
    explicit chunk_queue(std::size_t capacity) : capacity_(capacity) {}

    // woken: only for a wakeable pop, after wake() (see there).
    enum class pop_result { ok, end, aborted, woken };

    // Copies `size` bytes, appending to the last queued chunk while it has
    // room, so 1-byte writes do not become 1-byte chunks. False if aborted.
    bool push_copy(const std::byte* data, std::size_t size) {
        std::unique_lock lock(mutex_);
        while (size > 0) {
            not_full_.wait(lock, [&] { return aborted_ || bytes_ < capacity_; });
            if (aborted_) return false;
            if (queue_.empty() || queue_.back().size == queue_.back().capacity) {
                if (!spares_.empty()) {
                    queue_.push_back(std::move(spares_.back()));
                    spares_.pop_back();
                } else {
                    queue_.push_back(chunk::make(std::clamp(size, kMinInputChunk, kMaxInputChunk)));
                }
            }
            chunk& back = queue_.back();
            const std::size_t n = std::min(size, back.capacity - back.size);
            std::memcpy(back.bytes.get() + back.size, data, n);
            back.size += n;
            bytes_ += n;
            data += n;
            size -= n;
            not_empty_.notify_one();
        }
        return true;
    }

    // Moves a whole chunk in (the decoder's output). False if aborted.
    bool push(chunk&& c) {
        std::unique_lock lock(mutex_);
        not_full_.wait(lock, [&] { return aborted_ || bytes_ < capacity_; });
        if (aborted_) return false;
        bytes_ += c.size;
        queue_.push_back(std::move(c));
        not_empty_.notify_one();
        return true;
    }

    pop_result pop(chunk& out, bool wakeable = false) {
        std::unique_lock lock(mutex_);
        not_empty_.wait(lock, [&] { return aborted_ || closed_ || !queue_.empty() || (wakeable && woken_); });
        if (aborted_) return pop_result::aborted;
        if (queue_.empty() && !closed_) {
            woken_ = false;
            return pop_result::woken;
        }
        if (queue_.empty()) return pop_result::end;
        out = std::move(queue_.front());
        queue_.pop_front();
        bytes_ -= out.size;
        not_full_.notify_one();
        return pop_result::ok;
    }

    // Buffer recycling: consumers hand back the chunks they are done with and
    // producers reuse them, so a steady stream does not malloc/munmap (and
    // page-fault) a fresh buffer per chunk, and reused buffers stay in cache.
    // Whole decoded xz blocks (tens of MiB, and leased) are freed, not kept.
    // Taken by value: whatever is not kept is freed here, before the caller
    // waits for its next chunk (an extractor that kept its last decoded block
    // while it waited held 24 MiB of the decoders' memory per artifact, and
    // could leave every decoder waiting for memory that only it could free).
    void recycle(chunk c) {
        if (!c.bytes || c.leased() || c.capacity > kMaxSpareBytes) return;
        std::lock_guard lock(mutex_);
        if (spares_.size() < kMaxSpares) {
            c.size = 0;
            spares_.push_back(std::move(c));
        }
    }

    chunk spare_or_make(std::size_t capacity) {
        {
            std::lock_guard lock(mutex_);
            if (!spares_.empty() && spares_.back().capacity == capacity) {
                chunk c = std::move(spares_.back());
                spares_.pop_back();
                return c;
            }
        }
        return chunk::make(capacity);
    }

    void close() {
        std::lock_guard lock(mutex_);
        closed_ = true;
        not_empty_.notify_all();
    }

    // Makes a waiting (or the next) wakeable pop return `woken` although
    // nothing came: the xz decoder waits for input here, and must also wake
    // when one of its blocks is decoded, to hand it on (xz_input::wake).
    void wake() noexcept {
        std::lock_guard lock(mutex_);
        woken_ = true;
        not_empty_.notify_all();
    }

    void abort() {
        std::lock_guard lock(mutex_);
        aborted_ = true;
        not_empty_.notify_all();
        not_full_.notify_all();
    }

private:
    std::mutex mutex_;
    std::condition_variable not_full_;
    std::condition_variable not_empty_;
    std::deque<chunk> queue_;
    std::vector<chunk> spares_;
    std::size_t bytes_ = 0;
    const std::size_t capacity_;
    bool closed_ = false;
    bool aborted_ = false;
    bool woken_ = false;
};

}  // namespace redist::unpacking
