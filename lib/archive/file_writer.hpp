// archive/file_writer.hpp — the extractor's hand-off to the run's worker
// pool: each regular file of an archive is a file_job that hashes and writes
// its data (see "file writers" below).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "archive/chunk_queue.hpp"
#include "archive/sha256.hpp"
#include "redist/error.hpp"
#include "support/unique_fd.hpp"
#include "support/work_pool.hpp"

namespace redist::unpacking {

// ---- file writers: the extractor's hand-off to the run's worker pool -------------
//
// The extractor thread parses tar headers, creates each regular file itself
// (confined openat, O_EXCL|O_NOFOLLOW: see create_regular) and then hands
// the file's data on: as slices of the decoded xz block it lies in (no copy;
// see extractor::slice_of), else copied into blocks of up to kBlockBytes.
// Each file is a file_job: a strand whose blocks a pool worker hashes in
// order (SHA-256 is sequential), writing them with pwrite as it goes. A file
// of kSplitBytes or more is split instead: each block's pwrite is a task of
// its own, and so is the hashing of each piece of its receipt digest (a hash
// list of 8 MiB pieces, see file_digester in archive/sha256.hpp), one strand
// per piece; so several workers write and hash one large library at once, and
// the bytes behind the archive's slowest xz block are not left to one core.
// The last task of a file to finish computes the digest, sets the size
// (sparse files end in holes), mode and times through the descriptor and
// closes it.
//
// Namespace changes (creating, replacing, linking) stay on the extractor, in
// archive order; workers only touch descriptors of files this unpacker
// created. Admission (work_pool::reserve) bounds the bytes and the open files
// in flight.
//
// Inline writes: with a pool of two threads or fewer (a 2-core machine, or
// --threads 2) there is no core left for the workers that the decoder does
// not already use, so handing blocks over only adds a copy and a context
// switch per block: the 2-core bench measured the multi-block install at
// 1.153x the decoder floor with the extractor writing and 1.214x with the
// pool. Then the extractor hashes and writes each block straight from
// libarchive's buffer (file_job::write_now) and finishes the file itself.

inline constexpr std::size_t kBlockBytes = 1u << 20;
inline constexpr std::size_t kSpareBlocks = 4;  // recycled block buffers kept per unpacker
inline constexpr std::uint64_t kSplitBytes = 8u << 20;
inline constexpr unsigned kMaxInlineWriterThreads = 2;  // pools this small: inline writes (above)

// A pool reservation, released when this goes unless its new owner took it
// over (pool = nullptr).
struct reservation {
    work_pool* pool;
    std::size_t bytes, slots;
    ~reservation() {
        if (pool) pool->release(bytes, slots);
    }
};

// What the extractor and the write tasks of one unpacker share. Held by
// shared_ptr: a task may still release its last reference after the
// unpacker has seen its file finish.
struct write_state {
    work_pool* pool = nullptr;
    bool inline_writes = false;           // the extractor writes (see "Inline writes")
    std::string source;                   // for errors
    std::atomic<bool> stop{false};        // set by the unpacker's fail()
    std::function<void(error)> on_error;  // the unpacker's fail(); called before the file finishes
    std::mutex mutex;
    std::condition_variable idle;
    std::size_t files_in_flight = 0;

    void file_started() {
        std::lock_guard lock(mutex);
        ++files_in_flight;
    }
    void file_finished() noexcept {
        pool->release(0, 1);
        std::lock_guard lock(mutex);
        --files_in_flight;
        idle.notify_all();
    }
    void wait_idle() {
        std::unique_lock lock(mutex);
        idle.wait(lock, [&] { return files_in_flight == 0; });
    }

    // Full-size block buffers are recycled, so that a steady stream does
    // not allocate (and page-fault in) a fresh 1 MiB per block, freed on
    // another thread.
    std::unique_ptr<std::byte[]> take_buffer(std::size_t capacity) {
        if (capacity == kBlockBytes) {
            std::lock_guard lock(spare_mutex);
            if (!spares.empty()) {
                auto b = std::move(spares.back());
                spares.pop_back();
                return b;
            }
        }
        return std::make_unique_for_overwrite<std::byte[]>(capacity);
    }
    void give_back(std::unique_ptr<std::byte[]> buffer, std::size_t capacity) noexcept {
        if (capacity != kBlockBytes) return;
        std::lock_guard lock(spare_mutex);
        if (spares.size() < kSpareBlocks) spares.push_back(std::move(buffer));  // cannot throw: reserved
    }

    std::mutex spare_mutex;
    std::vector<std::unique_ptr<std::byte[]>> spares;  // capacity reserved up front
};

// Bytes of one file at one offset: either a copy, whose capacity is reserved
// from the pool and released when the last task holding it lets go, or a
// slice of a decoded xz block (see extractor::slice_of), which holds the
// block, and with it the block's lease of the decoders' memory.
struct data_block {
    std::unique_ptr<std::byte[]> bytes;
    std::shared_ptr<const chunk> source;  // a slice: the block it points into
    const std::byte* slice = nullptr;
    std::size_t size = 0;
    std::size_t capacity = 0;  // of `bytes`; 0 for a slice
    std::uint64_t offset = 0;
    std::shared_ptr<write_state> state;  // set once the capacity is reserved; null for a slice

    const std::byte* data() const noexcept { return source ? slice : bytes.get(); }

    data_block() = default;
    data_block(const data_block&) = delete;
    data_block& operator=(const data_block&) = delete;
    ~data_block() {
        if (!state) return;
        state->give_back(std::move(bytes), capacity);
        state->pool->release(capacity, 0);
    }
};
using block_ptr = std::shared_ptr<data_block>;

struct file_meta {
    std::string path;               // absolute, under the stage (for errors)
    unsigned mode = 0;              // applied at the end: the file is 0600 while written
    struct timespec times[2] = {};  // atime, mtime
    std::optional<std::uint64_t> declared_size;
    bool split = false;
};

class file_job : public std::enable_shared_from_this<file_job> {
public:
    file_job(std::shared_ptr<write_state> state, unique_fd fd, file_meta meta);

    // Extractor, inline mode: hashes and writes `size` bytes at `offset`.
    // In slices that stay in the core's cache between the hash and the copy
    // into the page cache: libarchive hands out up to a whole decoded xz
    // block (24 MiB) at once, and reading that from memory twice doubled the
    // kernel's copy time.
    result<void> write_now(const std::byte* data, std::size_t size, std::uint64_t offset);

    // Extractor, in offset order. A null block ends the file.
    void add(block_ptr block);

    // Valid once the file finished (write_state::wait_idle returned).
    const std::string& sha256() const noexcept { return sha256_; }
    std::uint64_t piece_size() const noexcept { return piece_size_for(size_); }
    std::uint64_t size() const noexcept { return size_; }

private:
    bool stopped() const noexcept { return state_->stop.load(std::memory_order_acquire); }

    template <class F>
    void guarded(F&& body) noexcept {
        if (stopped()) return;
        try {
            auto r = body();
            if (!r) state_->on_error(std::move(r).error_value());
        } catch (const std::bad_alloc&) {
            state_->on_error(make_error(error_code::internal, "out of memory"));
        } catch (const std::exception& e) {
            state_->on_error(make_error(error_code::internal, e.what()));
        }
    }

    error os_error(const char* what, int err) const;

    // Blocks in offset order, drained by one pool task at a time.
    struct strand {
        std::deque<block_ptr> queue;  // under mutex_
        bool scheduled = false;       // under mutex_
    };

    // Queues `block`; true when the strand needs a task to drain it.
    bool enqueue(strand& s, block_ptr block);

    // Takes the strand's next block; false (the strand idle again) when none is queued.
    bool dequeue(strand& s, block_ptr& block);

    // The file's strand: hashes and writes its blocks.
    void drain() noexcept;

    // A split file: the block's pwrite is a task, and each piece of the
    // digest it overlaps gets the block queued on that piece's strand.
    void add_split(block_ptr block);

    // One piece's strand: its part of each queued block, in offset order.
    void drain_piece(std::uint64_t k) noexcept;

    // After every task of a split file: holes up to the size read back as
    // zeros, then the hash list of the pieces.
    result<void> finish_pieces();

    // SHA-256 is sequential: offsets only grow, and a gap is a hole, hashed as zeros.
    void hash_at(const std::byte* data, std::size_t size, std::uint64_t offset);

    void end_of_data() noexcept;

    result<void> write_block(const data_block& block) const { return write_at(block.data(), block.size, block.offset); }

    result<void> write_at(const std::byte* data, std::size_t size, std::uint64_t offset) const;

    // A sparse file may end in a hole: it reads back as zeros up to the
    // declared size.
    result<void> finish_hash();

    void release_one() noexcept;

    // Size, mode and times, through the descriptor of the file we created.
    result<void> finalize();

    std::shared_ptr<write_state> state_;
    unique_fd fd_;
    const file_meta meta_;
    std::mutex mutex_;
    strand strand_;
    std::atomic<int> outstanding_{1};  // the strand (or, split, the extractor) until its end marker, plus tasks
    // A split file's digest pieces, laid out from its declared size.
    struct piece_lane {
        strand blocks;                        // the blocks overlapping the piece
        std::optional<sha256_hasher> hasher;  // owned by the piece's strand, created by its first block
        std::uint64_t hashed = 0;             // bytes of the piece hashed, holes included
    };
    std::vector<piece_lane> pieces_;
    // Owned by the strand, then read after the file finished.
    file_digester hasher_{receipt_piece_bytes};
    std::uint64_t hashed_ = 0;
    std::uint64_t data_end_ = 0;
    std::uint64_t size_ = 0;
    std::string sha256_;
};

}  // namespace redist::unpacking
