// unpack.cpp — the streaming unpacker; unpack.hpp draws its threads and
// queues (input_ and tar_ below are the two bounded queues).
//
// Why we decode xz ourselves: Debian's libarchive 3.6.2 decodes xz on one
// thread only, and its read filter sits in the same thread as the disk
// writes. decode_xz (xz_decode.hpp) decodes the blocks of a multi-block
// archive on the run's shared pool, and even for a single-block archive it
// keeps hashing and writing files off the decoder's core. decode_zstd does
// the same for the frames of a tar.zst.
//
// Errors: the first failure wins (fail()), and aborts both queues and the
// writers' admission so that every blocked push/pop/reserve returns at once;
// the threads then run to their end and are joined (and the writer tasks
// waited for) by finish(), cancel() or the destructor.
#include "archive/unpack.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "archive/sha256.hpp"
#include "archive/xz_decode.hpp"
#include "redist/printable.hpp"
#include "support/budget.hpp"
#include "support/posix_file.hpp"
#include "support/stopwatch.hpp"

namespace redist {
namespace {

namespace fs = std::filesystem;

// ---- tuning ---------------------------------------------------------------
// Queue bounds are in bytes, so peak memory does not depend on the archive
// size or on how the caller slices its writes.
// The two queues' capacities come from the run's budget (budget.hpp).
constexpr std::size_t kLzmaOutBuffer = 1u << 20;  // one decoded chunk
// zstd frames decode on the pool only with at least this many pool threads;
// below, one streaming decoder on the decoder thread is faster (measured on 2
// cores: the frames' hand-off costs more than the one core it would free).
constexpr unsigned kMinZstdPoolThreads = 3;
constexpr std::size_t kMinInputChunk = 64u << 10;  // small writes are coalesced
constexpr std::size_t kMaxInputChunk = 1u << 20;   // large writes are split
constexpr std::size_t kZipReadBlock = 1u << 20;
constexpr std::size_t kMaxSpares = 2;  // recycled buffers kept per queue
constexpr std::size_t kMaxSpareBytes = kLzmaOutBuffer;

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

// ---- RAII for the C handles --------------------------------------------------
struct archive_read_deleter {
    void operator()(archive* a) const noexcept { archive_read_free(a); }
};
struct archive_write_deleter {
    void operator()(archive* a) const noexcept { archive_write_free(a); }
};
using archive_reader = std::unique_ptr<archive, archive_read_deleter>;
using archive_writer = std::unique_ptr<archive, archive_write_deleter>;

std::string error_text(archive* a, const char* fallback = "unknown libarchive error") {
    const char* s = archive_error_string(a);
    return s ? s : fallback;
}

// ---- entry-name validation -----------------------------------------------------

// Calls f(segment) for each '/'-separated segment of `text`, empty and "."
// segments included, until f returns false. The one walk behind every name
// and symlink-target check below.
template <class F>
void for_each_segment(std::string_view text, F&& f) {
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('/', start);
        if (end == std::string_view::npos) end = text.size();
        if (!f(text.substr(start, end - start))) return;
        start = end + 1;
    }
}

bool is_name(std::string_view seg) { return !seg.empty() && seg != "." && seg != ".."; }

// Splits an archive entry name into its segments. Tolerates "./" prefixes,
// "." segments and doubled or trailing slashes (directory entries end in '/').
// Returns a message when the name is unsafe: absolute, contains "..", empty.
std::optional<std::string> split_entry_name(std::string_view name, std::vector<std::string_view>& segments) {
    segments.clear();
    if (name.empty()) return "empty entry name";
    if (name.front() == '/') return "absolute path in archive";
    // Receipts are JSON, which holds only UTF-8: a name that is not could not
    // be recorded, verified or removed (NVIDIA's names are ASCII).
    if (!valid_utf8(name)) return "entry name is not valid UTF-8";
    bool dotdot = false;
    for_each_segment(name, [&](std::string_view seg) {
        if (seg == "..") dotdot = true;
        else if (is_name(seg)) segments.push_back(seg);
        return !dotdot;
    });
    if (dotdot) return "'..' in entry name";
    return std::nullopt;
}

std::string join_segments(const std::vector<std::string_view>& segments, std::size_t first) {
    std::string out;
    for (std::size_t i = first; i < segments.size(); ++i) {
        if (!out.empty()) out += '/';
        out += segments[i];
    }
    return out;
}

// A symlink target's shape: how many leading "..", the first name after them
// (empty if none), and whether a ".." follows a name.
struct target_shape {
    std::size_t ups = 0;
    std::string_view first_name;
    bool dotdot_after_name = false;
};

target_shape shape_of(std::string_view target) {
    target_shape s;
    for_each_segment(target, [&](std::string_view seg) {
        if (seg == "..") {
            if (!s.first_name.empty()) s.dotdot_after_name = true;
            else ++s.ups;
        } else if (is_name(seg) && s.first_name.empty()) {
            s.first_name = seg;
        }
        return !s.dotdot_after_name;
    });
    return s;
}

// A symlink target is accepted when it is relative and has the shape
// "../" * k followed by plain names, with k no deeper than the link's own
// directory inside the stage. Why not just collapse ".." lexically: a ".."
// that follows a name can walk back out through another symlink of the
// archive ("a -> ." then "b -> a/.."), which lexical resolution misses. With
// ".." only up front, the climb happens through real directories (nothing is
// written through symlinks), and the descent can only pass through symlinks
// that were themselves checked to stay inside.
std::optional<std::string> check_symlink_target(std::string_view target, std::size_t link_depth) {
    if (target.empty()) return "empty symlink target";
    if (target.front() == '/') return "absolute symlink target";
    if (!valid_utf8(target)) return "symlink target is not valid UTF-8";  // recorded in the receipt
    const target_shape s = shape_of(target);
    if (s.dotdot_after_name) return "symlink target has '..' after a name";
    if (s.ups > link_depth) return "symlink target points outside the stage";
    return std::nullopt;
}

// Archive bytes in errors, escaped in full: entry paths must not be cut.
std::string printable(std::string_view text) { return redist::printable(text, no_length_limit, backslashes::keep); }

// The name of the reserved metadata directory at the prefix's root.
constexpr std::string_view kReservedDir = ".redist";

// True if a symlink whose directory lies `link_depth` levels below the stage
// root, with a target already accepted by check_symlink_target(), points into
// the reserved directory: "../" * link_depth followed by ".redist".
bool symlink_points_into_reserved(std::string_view target, std::size_t link_depth) {
    const target_shape s = shape_of(target);
    return s.ups == link_depth && s.first_name == kReservedDir;
}

std::string size_text(std::uint64_t bytes) {
    if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    return std::to_string(bytes) + " bytes";
}

error expansion_error(std::uint64_t cap) {
    return make_error(error_code::unsafe_archive,
                      "archive expands to more than " + size_text(cap) +
                          ", the limit for data whose hash is not yet known (see --max-expansion)");
}

// Feeds `count` zero bytes to the hasher: sparse-file holes read back as zeros.
template <class Hasher>
void hash_zeros(Hasher& hasher, std::uint64_t count) {
    static const std::byte zeros[64 * 1024] = {};
    while (count > 0) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(count, sizeof zeros));
        hasher.update(zeros, n);
        count -= n;
    }
}

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

constexpr std::size_t kBlockBytes = 1u << 20;
constexpr std::size_t kSpareBlocks = 4;  // recycled block buffers kept per unpacker
constexpr std::uint64_t kSplitBytes = 8u << 20;
constexpr unsigned kMaxInlineWriterThreads = 2;  // pools this small: inline writes (above)

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
    file_job(std::shared_ptr<write_state> state, unique_fd fd, file_meta meta)
        : state_(std::move(state)), fd_(std::move(fd)), meta_(std::move(meta)) {
        // Split files have a declared size (see write_regular).
        if (meta_.split)
            pieces_ = std::vector<piece_lane>((*meta_.declared_size + receipt_piece_bytes - 1) / receipt_piece_bytes);
    }

    // Extractor, inline mode: hashes and writes `size` bytes at `offset`.
    // In slices that stay in the core's cache between the hash and the copy
    // into the page cache: libarchive hands out up to a whole decoded xz
    // block (24 MiB) at once, and reading that from memory twice doubled the
    // kernel's copy time.
    result<void> write_now(const std::byte* data, std::size_t size, std::uint64_t offset) {
        constexpr std::size_t kSlice = 256u << 10;
        while (size > 0) {
            const std::size_t n = std::min(size, kSlice);
            hash_at(data, n, offset);
            REDIST_TRY_VOID(write_at(data, n, offset));
            data += n;
            size -= n;
            offset += n;
        }
        return {};
    }

    // Extractor, in offset order. A null block ends the file.
    void add(block_ptr block) {
        // Inline mode: the data went through write_now; only the end marker comes here.
        if (state_->inline_writes) return end_of_data();
        if (meta_.split) return add_split(std::move(block));
        if (enqueue(strand_, std::move(block))) state_->pool->post([self = shared_from_this()] { self->drain(); });
    }

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

    error os_error(const char* what, int err) const {
        return errno_error(what, printable(meta_.path), err).with_source(state_->source);
    }

    // Blocks in offset order, drained by one pool task at a time.
    struct strand {
        std::deque<block_ptr> queue;  // under mutex_
        bool scheduled = false;       // under mutex_
    };

    // Queues `block`; true when the strand needs a task to drain it.
    bool enqueue(strand& s, block_ptr block) {
        std::lock_guard lock(mutex_);
        s.queue.push_back(std::move(block));
        return !std::exchange(s.scheduled, true);
    }

    // Takes the strand's next block; false (the strand idle again) when none is queued.
    bool dequeue(strand& s, block_ptr& block) {
        std::lock_guard lock(mutex_);
        if (s.queue.empty()) {
            s.scheduled = false;
            return false;
        }
        block = std::move(s.queue.front());
        s.queue.pop_front();
        return true;
    }

    // The file's strand: hashes and writes its blocks.
    void drain() noexcept {
        for (;;) {
            block_ptr block;
            if (!dequeue(strand_, block)) return;
            if (!block) return end_of_data();  // nothing follows the end marker
            guarded([&]() -> result<void> {
                hash_at(block->data(), block->size, block->offset);
                return write_block(*block);
            });
        }
    }

    // A split file: the block's pwrite is a task, and each piece of the
    // digest it overlaps gets the block queued on that piece's strand.
    void add_split(block_ptr block) {
        if (!block) return release_one();  // the extractor's count; the last task finishes the file
        if (block->size == 0) return;
        const std::uint64_t end = block->offset + block->size;
        // The pieces were laid out from the declared size (see the constructor).
        if (end > pieces_.size() * receipt_piece_bytes) {
            state_->on_error(make_error(error_code::bad_archive, "file data beyond the size in its header")
                                 .with_path(printable(meta_.path))
                                 .with_source(state_->source));
            return;
        }
        data_end_ = std::max(data_end_, end);
        outstanding_.fetch_add(1, std::memory_order_relaxed);
        state_->pool->post([self = shared_from_this(), block]() mutable {
            self->guarded([&] { return self->write_block(*block); });
            block.reset();  // before the file can finish: a slice holds decoder memory
            self->release_one();
        });
        for (std::uint64_t k = block->offset / receipt_piece_bytes; k * receipt_piece_bytes < end; ++k) {
            if (!enqueue(pieces_[k].blocks, block)) continue;
            outstanding_.fetch_add(1, std::memory_order_relaxed);
            state_->pool->post([self = shared_from_this(), k] {
                self->drain_piece(k);
                self->release_one();
            });
        }
    }

    // One piece's strand: its part of each queued block, in offset order.
    void drain_piece(std::uint64_t k) noexcept {
        piece_lane& lane = pieces_[k];
        const std::uint64_t piece_begin = k * receipt_piece_bytes;
        const std::uint64_t piece_end = piece_begin + receipt_piece_bytes;
        for (;;) {
            block_ptr block;
            if (!dequeue(lane.blocks, block)) return;
            guarded([&]() -> result<void> {
                const std::uint64_t from = std::max(block->offset, piece_begin);
                const std::uint64_t to = std::min(block->offset + block->size, piece_end);
                if (!lane.hasher) lane.hasher.emplace();
                hash_zeros(*lane.hasher, from - (piece_begin + lane.hashed));
                lane.hasher->update(block->data() + (from - block->offset), static_cast<std::size_t>(to - from));
                lane.hashed = to - piece_begin;
                return {};
            });
        }
    }

    // After every task of a split file: holes up to the size read back as
    // zeros, then the hash list of the pieces.
    result<void> finish_pieces() {
        size_ = std::max(data_end_, meta_.declared_size.value_or(0));
        const std::uint64_t count = std::max<std::uint64_t>(1, (size_ + receipt_piece_bytes - 1) / receipt_piece_bytes);
        std::vector<std::array<unsigned char, 32>> digests;
        digests.reserve(count);
        for (std::uint64_t k = 0; k < count; ++k) {
            piece_lane& lane = pieces_[k];
            if (!lane.hasher) lane.hasher.emplace();
            const std::uint64_t length = std::min(receipt_piece_bytes, size_ - k * receipt_piece_bytes);
            hash_zeros(*lane.hasher, length - lane.hashed);
            digests.push_back(lane.hasher->finish_bytes());
            lane.hasher.reset();
        }
        sha256_ = piece_list_hex(digests);
        return {};
    }

    // SHA-256 is sequential: offsets only grow, and a gap is a hole, hashed as zeros.
    void hash_at(const std::byte* data, std::size_t size, std::uint64_t offset) {
        hash_zeros(hasher_, offset - hashed_);
        hasher_.update(data, size);
        hashed_ = offset + size;
    }

    void end_of_data() noexcept {
        guarded([&] { return finish_hash(); });
        release_one();
    }

    result<void> write_block(const data_block& block) const { return write_at(block.data(), block.size, block.offset); }

    result<void> write_at(const std::byte* data, std::size_t size, std::uint64_t offset) const {
        std::size_t done = 0;
        while (done < size) {
            const ssize_t n = ::pwrite(fd_.get(), data + done, size - done, static_cast<off_t>(offset + done));
            if (n < 0) {
                if (errno == EINTR) continue;
                return os_error("cannot write", errno);
            }
            done += static_cast<std::size_t>(n);
        }
        return {};
    }

    // A sparse file may end in a hole: it reads back as zeros up to the
    // declared size.
    result<void> finish_hash() {
        data_end_ = hashed_;
        if (meta_.declared_size && *meta_.declared_size > hashed_) {
            hash_zeros(hasher_, *meta_.declared_size - hashed_);
            hashed_ = *meta_.declared_size;
        }
        size_ = hashed_;
        sha256_ = hasher_.finish_hex();
        return {};
    }

    void release_one() noexcept {
        if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        if (meta_.split) guarded([&] { return finish_pieces(); });
        guarded([&] { return finalize(); });
        fd_.reset();
        state_->file_finished();
    }

    // Size, mode and times, through the descriptor of the file we created.
    result<void> finalize() {
        if (size_ > data_end_ && ::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0)
            return os_error("cannot extend", errno);
        if (::fchmod(fd_.get(), static_cast<mode_t>(meta_.mode)) != 0) return os_error("cannot set mode", errno);
        if (::futimens(fd_.get(), meta_.times) != 0) return os_error("cannot set times", errno);
        // close() may be where NFS reports a failed write.
        if (::close(fd_.release()) != 0 && errno != EINTR) return os_error("cannot write", errno);
        return {};
    }

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

// ---- the extraction loop (shared by the tar stream and the zip file) ---------------

// Writes the entries of an opened libarchive reader under `stage`, checking
// each one before anything touches the disk. Regular files go through the
// file_jobs above; directories, symlinks and hardlinks through libarchive's
// disk writer (their namespace change is all there is to them).
class extractor {
public:
    extractor(std::string stage, const unpack_options& options, std::shared_ptr<write_state> state)
        : stage_(std::move(stage)), options_(options), state_(std::move(state)) {}

    // The chunk that the reader's callback handed to libarchive last (a tar
    // stream from our xz decoder): file data inside a decoded block is passed
    // to the writers as slices of it, not copied (see slice_of).
    void read_from(const std::shared_ptr<chunk>* current) noexcept { current_chunk_ = current; }

    // Outcomes: ok | bad_archive | unsafe_archive | filesystem | internal | cancelled.
    // Waits for every file it handed to the workers before returning.
    result<void> run(archive* in) {
        auto r = run_entries(in);
        if (!r) state_->on_error(r.error_value());  // stops the workers' remaining blocks
        state_->wait_idle();
        if (!r) return r;
        if (state_->stop.load(std::memory_order_acquire)) return make_error(error_code::cancelled, "unpacking stopped");
        // Runs the deferred directory fixups (modes, times), after the files in them.
        if (archive_write_close(out_.get()) < ARCHIVE_OK)
            return make_error(error_code::filesystem,
                              std::string("cannot finish directories: ") + error_text(out_.get()))
                .with_path(stage_)
                .with_source(options_.source);
        return {};
    }

    // After run(): the entries in archive order, replaced ones left out.
    std::vector<unpacked_entry> take_entries() {
        std::vector<unpacked_entry> out;
        out.reserve(entries_.size());
        for (std::size_t i = 0; i < entries_.size(); ++i) {
            if (index_.at(entries_[i].path) != i) continue;  // replaced by a later entry
            if (jobs_[i]) {
                entries_[i].sha256 = jobs_[i]->sha256();
                entries_[i].piece_size = jobs_[i]->piece_size();
                entries_[i].size = jobs_[i]->size();
            }
            out.push_back(std::move(entries_[i]));
        }
        return out;
    }

    std::uint64_t wait_ns() const noexcept { return wait_ns_; }
    // File data copied into admitted blocks rather than passed on as slices.
    std::uint64_t copied_bytes() const noexcept { return copied_bytes_; }

private:
    // Where an entry goes: its stage-relative path and the depth of its directory.
    struct placement {
        std::string rel;
        std::size_t depth = 0;
        bool skip = false;  // the stage root or the top directory itself
    };

    result<void> run_entries(archive* in) {
        {
            std::lock_guard umask_lock(umask_mutex());  // it flips the process umask: see posix_file.hpp
            out_.reset(archive_write_disk_new());
        }
        if (!out_) return make_error(error_code::internal, "archive_write_disk_new failed");
        // SECURE_SYMLINKS and SECURE_NODOTDOT, the second line of defence of
        // unpack.hpp; not NOABSOLUTEPATHS (split_entry_name() checked the
        // original name before it was made absolute under the stage), nor
        // OWNER (files belong to whoever installs). PERM restores the mode bits as archived (minus
        // setuid/setgid/sticky, cleared below) and ignores the umask; TIME
        // restores mtimes. Directory modes and times are applied by
        // libarchive's deferred fixup at archive_write_close(), so a read-only
        // directory does not block the files that follow it.
        const int flags = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                          ARCHIVE_EXTRACT_SECURE_NODOTDOT;
        if (archive_write_disk_set_options(out_.get(), flags) != ARCHIVE_OK)
            return make_error(error_code::internal, "archive_write_disk_set_options failed");
        stage_fd_ = unique_fd(::open(stage_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!stage_fd_) return os_error("cannot open staging directory", stage_, errno);

        for (;;) {
            if (state_->stop.load(std::memory_order_acquire))
                return make_error(error_code::cancelled, "unpacking stopped");
            archive_entry* entry = nullptr;
            const int r = archive_read_next_header(in, &entry);
            if (r == ARCHIVE_EOF) break;
            // ARCHIVE_WARN here (e.g. a malformed pax attribute or a name that
            // cannot be converted) is treated as failure: we would rather stop
            // than install a tree that differs from what the archive meant.
            if (r < ARCHIVE_OK) return bad_data(error_text(in), "");
            REDIST_TRY_VOID(write_entry(in, entry));
        }
        return {};
    }

    error unsafe(const std::string& message, const std::string& original) const {
        return make_error(error_code::unsafe_archive, printable(message))
            .with_path(printable(original))
            .with_source(options_.source);
    }

    error bad_data(const std::string& message, const std::string& original) const {
        return make_error(error_code::bad_archive, printable(message))
            .with_path(printable(original))
            .with_source(options_.source);
    }

    error os_error(const std::string& what, const std::string& path, int err) const {
        return errno_error(what, printable(path), err).with_source(options_.source);
    }

    // Counts `bytes` more of decoded output against the cap.
    bool within_cap(std::uint64_t bytes) {
        output_ += bytes;
        return options_.max_output_bytes == 0 || output_ <= options_.max_output_bytes;
    }

    // libarchive's own security checks (symlink in the path, "..") fail with
    // errno 0 or ARCHIVE_ERRNO_MISC: that is the second line of defence
    // tripping, so it is reported as unsafe_archive. A real errno (ENOSPC,
    // EACCES, EROFS, ...) is a filesystem error about the path we wrote.
    error write_error(archive* out, const std::string& original, const std::string& target) const {
        const int en = archive_errno(out);
        if (en <= 0) return unsafe(error_text(out), original);
        // libarchive's text alone ("write failed") hides the cause: add errno's ("No space left on device").
        std::string message = error_text(out);
        const std::string cause = std::strerror(en);
        if (message.find(cause) == std::string::npos) message += ": " + cause;
        return make_error(error_code::filesystem, printable(message))
            .with_path(printable(target))
            .with_source(options_.source);
    }

    // Steps 1-5 of one entry; nothing touches the disk before step 4.
    result<void> write_entry(archive* in, archive_entry* entry) {
        const char* raw_name = archive_entry_pathname(entry);
        if (!raw_name) return make_error(error_code::bad_archive, "entry without a name").with_source(options_.source);
        const std::string original = raw_name;
        REDIST_TRY(const placement place, place_entry(entry, original));  // 1
        if (place.skip) return {};
        // (An exclude predicate on place.rel belongs here: after validation,
        // before anything is written; libarchive skips the data itself.)
        if (!within_cap(512)) return expansion_error(options_.max_output_bytes);  // a tar header's worth
        unpacked_entry record;
        record.path = place.rel;
        std::shared_ptr<file_job> job;
        REDIST_TRY_VOID(classify_entry(entry, original, place, record, job));  // 2
        REDIST_TRY_VOID(check_not_below_symlink(place.rel, original));
        // 3. Drop setuid/setgid/sticky.
        const unsigned mode = static_cast<unsigned>(archive_entry_perm(entry)) & 0777u;
        archive_entry_set_perm(entry, static_cast<mode_t>(mode));
        if (record.kind != entry_kind::hardlink) record.mode = mode;
        const std::string target_path = stage_ + "/" + place.rel;
        if (record.kind == entry_kind::regular) {  // 4
            REDIST_TRY(job, write_regular(in, entry, original, place.rel, target_path, mode));
        } else {
            REDIST_TRY_VOID(write_other(entry, original, target_path));
        }
        remember(std::move(record), std::move(job));  // 5
        return {};
    }

    // 1. Validate the original name, before any rewriting.
    result<placement> place_entry(archive_entry* entry, const std::string& original) {
        if (auto bad = split_entry_name(original, segments_)) return unsafe(*bad, original);
        const bool plain_dir = archive_entry_filetype(entry) == AE_IFDIR && !archive_entry_hardlink(entry);
        placement place;
        if (segments_.empty()) {
            // "./" itself is the stage root: nothing to create.
            if (plain_dir) return placement{{}, 0, true};
            return unsafe("empty entry name", original);
        }
        std::size_t first = 0;
        if (options_.strip_top_level) {
            if (!top_) top_ = std::string(segments_.front());
            else if (segments_.front() != *top_) return unsafe("more than one top-level directory", original);
            if (segments_.size() == 1) {
                if (plain_dir) return placement{{}, 0, true};  // the top directory itself
                return unsafe("entry outside the top-level directory", original);
            }
            first = 1;
        }
        if (segments_[first] == kReservedDir)
            return unsafe("entry under .redist/, which is reserved for redist's own metadata", original);
        place.rel = join_segments(segments_, first);
        place.depth = segments_.size() - first - 1;
        return place;
    }

    // 2. Kind checks; fills the record (and, for a hardlink, the job whose
    // digest it shares).
    result<void> classify_entry(archive_entry* entry, const std::string& original, const placement& place,
                                unpacked_entry& record, std::shared_ptr<file_job>& job) {
        if (archive_entry_hardlink(entry)) return classify_hardlink(entry, original, record, job);
        switch (archive_entry_filetype(entry)) {
            case AE_IFREG: record.kind = entry_kind::regular; return {};
            case AE_IFDIR: record.kind = entry_kind::directory; return {};
            case AE_IFLNK: {
                record.kind = entry_kind::symlink;
                const char* target = archive_entry_symlink(entry);
                if (!target) return unsafe("symlink without a target", original);
                if (auto bad = check_symlink_target(target, place.depth)) return unsafe(*bad, original);
                if (symlink_points_into_reserved(target, place.depth))
                    return unsafe("symlink into .redist/, which is reserved for redist's own metadata", original);
                record.link_target = target;
                return {};
            }
            case AE_IFCHR:
            case AE_IFBLK: return unsafe("device node in archive", original);
            case AE_IFIFO: return unsafe("fifo in archive", original);
            case AE_IFSOCK: return unsafe("socket in archive", original);
            default: return unsafe("unsupported entry type in archive", original);
        }
    }

    result<void> classify_hardlink(archive_entry* entry, const std::string& original, unpacked_entry& record,
                                   std::shared_ptr<file_job>& job) {
        // pax lets a hardlink carry data; libarchive then truncates and
        // rewrites the file it links to, and every record of that inode
        // would lie. Real archives never do this: refuse it.
        if (archive_entry_size_is_set(entry) && archive_entry_size(entry) > 0)
            return unsafe("hardlink entry carries data (it would rewrite an earlier file)", original);
        if (auto bad = split_entry_name(archive_entry_hardlink(entry), segments_))
            return unsafe("hardlink target: " + *bad, original);
        std::size_t tfirst = 0;
        if (options_.strip_top_level) {
            if (segments_.size() < 2 || segments_.front() != *top_)
                return unsafe("hardlink target outside the top-level directory", original);
            tfirst = 1;
        }
        std::string target_rel = join_segments(segments_, tfirst);
        auto it = index_.find(target_rel);
        if (it == index_.end() ||
            (entries_[it->second].kind != entry_kind::regular && entries_[it->second].kind != entry_kind::hardlink))
            return unsafe("hardlink target is not an earlier file of the archive", original);
        // The target's digest may still be in the works: share its job, and
        // read both when every file is done. libarchive links a data-less
        // hardlink without touching the inode's mode or times, so the link
        // does not race the target's last task.
        const unpacked_entry& target = entries_[it->second];
        job = jobs_[it->second];
        record.kind = entry_kind::hardlink;
        record.size = target.size;
        record.sha256 = target.sha256;
        record.piece_size = target.piece_size;
        record.mode = target.mode;
        record.link_target = target_rel;
        archive_entry_copy_hardlink(entry, (stage_ + "/" + target_rel).c_str());
        return {};
    }

    // Writing below a symlink of this archive would land wherever it points;
    // the confined walk (and libarchive) would refuse too, but this gives a
    // clear message.
    result<void> check_not_below_symlink(const std::string& rel, const std::string& original) const {
        for (std::size_t pos = rel.find('/'); pos != std::string::npos; pos = rel.find('/', pos + 1))
            if (symlinks_.count(rel.substr(0, pos))) return unsafe("entry below a symlink of the archive", original);
        return {};
    }

    // 4a. Directories, symlinks and hardlinks: libarchive's disk writer.
    // ARCHIVE_WARN counts as failure: for write_disk it means a mode, time or
    // link could not be restored as archived.
    result<void> write_other(archive_entry* entry, const std::string& original, const std::string& target_path) {
        parent_dir_.clear();  // the namespace may change under the cached directory
        parent_fd_.reset();
        archive_entry_copy_pathname(entry, target_path.c_str());
        {
            // Every header flips the process umask to 0 and back, as
            // archive_write_disk_new() does (see posix_file.hpp).
            std::lock_guard umask_lock(umask_mutex());
            if (archive_write_header(out_.get(), entry) < ARCHIVE_OK)
                return write_error(out_.get(), original, target_path);
        }
        if (archive_write_finish_entry(out_.get()) < ARCHIVE_OK) return write_error(out_.get(), original, target_path);
        return {};
    }

    // 4b. A regular file: created here, written and hashed by the workers.
    result<std::shared_ptr<file_job>> write_regular(archive* in, archive_entry* entry, const std::string& original,
                                                    const std::string& rel, const std::string& target_path,
                                                    unsigned mode) {
        REDIST_TRY(unique_fd fd, create_regular(rel, original, target_path));
        file_meta meta;
        meta.path = target_path;
        meta.mode = mode;
        meta.times[0] = archive_entry_atime_is_set(entry)
                            ? timespec{archive_entry_atime(entry), archive_entry_atime_nsec(entry)}
                            : timespec{0, UTIME_NOW};
        meta.times[1] = archive_entry_mtime_is_set(entry)
                            ? timespec{archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}
                            : timespec{0, UTIME_NOW};
        if (archive_entry_size_is_set(entry) && archive_entry_size(entry) > 0)
            meta.declared_size = static_cast<std::uint64_t>(archive_entry_size(entry));
        // Inline writes hash and write on the extractor (see "Inline writes"): nothing to split.
        meta.split = meta.declared_size && *meta.declared_size >= kSplitBytes && !state_->inline_writes;
        const auto declared = meta.declared_size.value_or(0);
        auto job = std::make_shared<file_job>(state_, std::move(fd), std::move(meta));
        state_->file_started();
        // Whatever happens below, the job gets its end marker, so that it
        // finishes (closing its descriptor) and wait_idle() returns.
        struct ender {
            file_job& job;
            ~ender() { job.add(nullptr); }
        } end_guard{*job};
        REDIST_TRY_VOID(copy_data(in, *job, original, declared));
        return job;
    }

    // Copies the entry's data blocks into pool-admitted blocks of the job.
    result<void> copy_data(archive* in, file_job& job, const std::string& original, std::uint64_t declared) {
        block_ptr block;
        std::uint64_t pos = 0;
        for (;;) {
            const void* buf = nullptr;
            std::size_t len = 0;
            la_int64_t offset = 0;
            const int r = archive_read_data_block(in, &buf, &len, &offset);
            if (r == ARCHIVE_EOF) break;
            if (r < ARCHIVE_OK) return bad_data(error_text(in), original);
            if (offset < 0 || static_cast<std::uint64_t>(offset) < pos)
                return bad_data("overlapping data blocks", original);
            // Holes count: they cost hashing time, and a dense copy later.
            if (!within_cap(static_cast<std::uint64_t>(offset) - pos + len))
                return expansion_error(options_.max_output_bytes);
            auto at = static_cast<std::uint64_t>(offset);
            const auto* bytes = static_cast<const std::byte*>(buf);
            pos = at + len;
            if (state_->inline_writes) {
                REDIST_TRY_VOID(job.write_now(bytes, len, at));
                continue;
            }
            if (auto slice = slice_of(bytes, len, at)) {
                if (block) job.add(std::exchange(block, nullptr));
                job.add(std::move(slice));
                continue;
            }
            while (len > 0) {
                if (!block || block->offset + block->size != at || block->size == block->capacity) {
                    if (block) job.add(std::move(block));
                    REDIST_TRY(block, new_block(at, declared > at ? declared - at : len));
                }
                const std::size_t n = std::min(len, block->capacity - block->size);
                std::memcpy(block->bytes.get() + block->size, bytes, n);
                copied_bytes_ += n;
                block->size += n;
                at += n;
                bytes += n;
                len -= n;
            }
        }
        if (block) job.add(std::move(block));
        // The end of the data may be a hole: it counts against the cap too.
        if (declared > pos && !within_cap(declared - pos)) return expansion_error(options_.max_output_bytes);
        return {};
    }

    // Data that libarchive returned from inside a decoded xz block (it points
    // into the chunk its read callback handed over, not into a buffer of its
    // own) becomes a slice that holds the block: no copy on this one thread.
    // Such a block carries its lease of the decoders' memory until the last slice is
    // written, so that memory, not the pool's admission, bounds it. Anything
    // else (streamed 1 MiB chunks without a lease, libarchive's own gzip/zstd
    // buffers, zip) is copied into admitted blocks.
    block_ptr slice_of(const std::byte* bytes, std::size_t len, std::uint64_t offset) const {
        if (!current_chunk_ || !*current_chunk_) return nullptr;
        const auto& source = *current_chunk_;
        const std::byte* begin = source->data();
        if (!source->leased() || bytes < begin || bytes > begin + source->size ||
            len > static_cast<std::size_t>(begin + source->size - bytes))
            return nullptr;
        auto block = std::make_shared<data_block>();
        block->source = source;
        block->slice = bytes;
        block->size = len;
        block->offset = offset;
        return block;
    }

    result<block_ptr> new_block(std::uint64_t offset, std::uint64_t wanted) {
        const auto capacity = static_cast<std::size_t>(std::clamp<std::uint64_t>(wanted, 1, kBlockBytes));
        REDIST_TRY_VOID(reserve(capacity, 0));
        reservation undo{state_->pool, capacity, 0};  // until the block owns the reservation
        auto block = std::make_shared<data_block>();
        block->capacity = capacity;
        block->bytes = state_->take_buffer(capacity);
        block->offset = offset;
        block->state = state_;  // from here on, the block releases what was reserved
        undo.pool = nullptr;
        return block;
    }

    // Waits for the pool to admit `bytes` of buffers and `slots` open files.
    result<void> reserve(std::size_t bytes, std::size_t slots) {
        const auto waited = std::chrono::steady_clock::now();
        if (!state_->pool->reserve(bytes, slots, state_->stop))
            return make_error(error_code::cancelled, "unpacking stopped");
        wait_ns_ += ns_since(waited);
        return {};
    }

    // Opens (creating when missing) the directory `dir` (stage-relative,
    // "" = the stage) one segment at a time, never following a symlink. The
    // last one opened is kept for the next file.
    result<int> open_dir(const std::string& dir, const std::string& original) {
        if (dir.empty()) return stage_fd_.get();
        if (parent_fd_ && parent_dir_ == dir) return parent_fd_.get();
        parent_fd_.reset();
        parent_dir_.clear();
        unique_fd cur;
        int at = stage_fd_.get();
        std::optional<error> failed;
        std::string walked = stage_;
        for_each_segment(dir, [&](std::string_view seg) {
            walked.append("/").append(seg);
            auto next = open_or_make_dir(at, std::string(seg), walked, original);
            if (!next) {
                failed = std::move(next).error_value();
                return false;
            }
            cur = std::move(*next);
            at = cur.get();
            return true;
        });
        if (failed) return *failed;
        parent_fd_ = std::move(cur);
        parent_dir_ = dir;
        return parent_fd_.get();
    }

    // One segment of open_dir. A missing directory is created as libarchive
    // would (0777 minus the umask); a file in the way is replaced, as
    // libarchive replaces it; a symlink in the way is an unsafe archive.
    result<unique_fd> open_or_make_dir(int at, const std::string& name, const std::string& path,
                                       const std::string& original) {
        for (int attempt = 0; attempt < 2; ++attempt) {
            unique_fd fd(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
            if (fd) return fd;
            const int err = errno;
            if (err == ENOENT) {
                if (::mkdirat(at, name.c_str(), static_cast<mode_t>(0777 & ~process_umask())) != 0 && errno != EEXIST)
                    return os_error("cannot create directory", path, errno);
                continue;
            }
            struct stat st {};
            if ((err == ELOOP || err == ENOTDIR) && ::fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
                if (S_ISLNK(st.st_mode)) return unsafe("entry below a symlink", original);
                if (::unlinkat(at, name.c_str(), 0) != 0) return os_error("cannot replace", path, errno);
                continue;
            }
            return os_error("cannot open directory", path, err);
        }
        return os_error("cannot open directory", path, EAGAIN);
    }

    // A new file of our own at rel, 0600 until its job finishes: O_EXCL so an
    // earlier entry of the same name is replaced (unlinked, as libarchive
    // does; a hardlink to it keeps the old content), O_NOFOLLOW so nothing
    // planted is followed. One slot of the pool is held until the job ends.
    result<unique_fd> create_regular(const std::string& rel, const std::string& original,
                                     const std::string& target_path) {
        const auto slash = rel.rfind('/');
        const std::string dir = slash == std::string::npos ? std::string() : rel.substr(0, slash);
        const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
        REDIST_TRY(const int at, open_dir(dir, original));
        REDIST_TRY_VOID(reserve(0, 1));
        reservation slot{state_->pool, 0, 1};
        for (int attempt = 0; attempt < 2; ++attempt) {
            unique_fd fd(::openat(at, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
            if (fd) {
                slot.pool = nullptr;  // the job's now
                return fd;
            }
            if (errno != EEXIST) return os_error("cannot create", target_path, errno);
            if (::unlinkat(at, name.c_str(), 0) != 0 &&
                (errno != EISDIR || ::unlinkat(at, name.c_str(), AT_REMOVEDIR) != 0))
                return os_error("cannot replace", target_path, errno);
        }
        return os_error("cannot create", target_path, EEXIST);
    }

    // 5. Remember it. A later entry with the same path replaces the earlier one.
    void remember(unpacked_entry record, std::shared_ptr<file_job> job) {
        if (record.kind == entry_kind::symlink) symlinks_.insert(record.path);
        else symlinks_.erase(record.path);
        index_.insert_or_assign(record.path, entries_.size());
        entries_.push_back(std::move(record));
        jobs_.push_back(std::move(job));
    }

    std::string stage_;                                      // canonical, absolute, no trailing slash
    const std::shared_ptr<chunk>* current_chunk_ = nullptr;  // see read_from
    std::uint64_t copied_bytes_ = 0;                         // file data copied, not sliced (--profile)
    const unpack_options& options_;
    std::shared_ptr<write_state> state_;
    archive_writer out_;
    unique_fd stage_fd_;
    std::string parent_dir_;  // stage-relative; parent_fd_ is open on it
    unique_fd parent_fd_;
    std::optional<std::string> top_;
    std::vector<std::string_view> segments_;  // scratch
    std::vector<unpacked_entry> entries_;
    std::vector<std::shared_ptr<file_job>> jobs_;         // per entry: the job with its digest (regular, hardlink)
    std::unordered_map<std::string, std::size_t> index_;  // stage-relative path -> its latest entry in entries_
    std::unordered_set<std::string> symlinks_;
    std::uint64_t output_ = 0;  // decoded bytes so far, for max_output_bytes
    std::uint64_t wait_ns_ = 0;
};

// ---- the tar stream's digest ---------------------------------------------------

// The SHA-256 of a decoded tar stream, in order. With a pool, a strand on
// it: one task at a time drains the queued parts, so that the decoder thread
// only hands frames on. Hashing on the decoder thread stalled everything
// behind it (its input queue filled, then the download and the copy's own
// hash waited): on 16 cores the copy's and the tar's hash passes ran one
// after the other.
class tar_digest {
public:
    // pool == nullptr: hashes on the caller's thread. `stop` set: queued parts are dropped.
    tar_digest(work_pool* pool, const std::atomic<bool>& stop) : pool_(pool), stop_(stop) {}
    tar_digest(const tar_digest&) = delete;
    tar_digest& operator=(const tar_digest&) = delete;
    ~tar_digest() { wait_idle(); }  // the strand's task refers to this

    bool threaded() const noexcept { return pool_ != nullptr; }

    // `size` bytes at `data`, which `block` keeps alive until they are hashed.
    // Waits while kMaxQueued bytes wait (the strand never waits: see work_pool).
    void add(std::shared_ptr<const byte_buffer> block, const std::byte* data, std::size_t size) {
        if (!pool_) {
            hasher_.update(data, size);
            return;
        }
        std::unique_lock lock(mutex_);
        room_.wait(lock, [&] { return queued_ < kMaxQueued; });
        parts_.push_back({std::move(block), data, size});
        queued_ += size;
        if (std::exchange(running_, true)) return;
        pool_->post([this] { drain(); });
    }

    // Every byte added so far, hashed: the digest (once).
    std::string finish() {
        wait_idle();
        return hasher_.finish_hex();
    }

private:
    static constexpr std::size_t kMaxQueued = 64u << 20;
    struct part {
        std::shared_ptr<const byte_buffer> block;
        const std::byte* data;
        std::size_t size;
    };

    void drain() noexcept {
        std::unique_lock lock(mutex_);
        while (!parts_.empty()) {
            part p = std::move(parts_.front());
            parts_.pop_front();
            lock.unlock();
            if (!stop_.load(std::memory_order_acquire)) hasher_.update(p.data, p.size);
            p.block.reset();  // its memory goes back before the decoder is told there is room
            lock.lock();
            queued_ -= p.size;
            room_.notify_all();
        }
        running_ = false;
        idle_.notify_all();
    }

    void wait_idle() {
        std::unique_lock lock(mutex_);
        idle_.wait(lock, [&] { return !running_; });
    }

    work_pool* const pool_;
    const std::atomic<bool>& stop_;
    sha256_hasher hasher_;  // the strand's while it runs; the caller's otherwise
    std::mutex mutex_;
    std::condition_variable room_, idle_;
    std::deque<part> parts_;
    std::size_t queued_ = 0;
    bool running_ = false;
};

// ---- the unpacker ------------------------------------------------------------

class unpacker_impl final : public stream_unpacker {
public:
    unpacker_impl(std::string stage, const unpack_options& options, std::shared_ptr<run_budget> budget)
        : stage_(std::move(stage)),
          options_(options),
          budget_(std::move(budget)),
          // Only an xz or zstd decoder takes a share; libarchive's filters decode on the extractor's thread.
          ticket_(options.format == archive_format::tar_xz || options.format == archive_format::tar_zst
                      ? std::make_unique<run_budget::ticket>(*budget_)
                      : nullptr),
          input_(budget_->queue_bytes()),
          tar_(budget_->queue_bytes()),
          writes_(std::make_shared<write_state>()) {
        writes_->pool = &budget_->pool();
        writes_->inline_writes = budget_->pool().threads() <= kMaxInlineWriterThreads;
        writes_->spares.reserve(kSpareBlocks);
        writes_->source = options_.source;
        writes_->on_error = [this](error e) { fail(std::move(e)); };
    }

    ~unpacker_impl() override { cancel(); }

    // A thread that cannot start throws std::system_error: start() reports it.
    result<void> start_workers() {
        switch (options_.format) {
            case archive_format::tar_xz:
            case archive_format::tar_zst:
                decoder_ = std::thread([this] { guarded([this] { return decode_stream(); }); });
                extractor_ = std::thread([this] { guarded([this] { return extract_stream(tar_); }); });
                break;
            case archive_format::tar_gz:
                extractor_ = std::thread([this] { guarded([this] { return extract_stream(input_); }); });
                break;
            case archive_format::zip:
                // A leftover (or planted) entry is removed, never opened: a link is not followed.
                spool_path_ = stage_ + ".zip.part";
                ::unlink(spool_path_.c_str());
                spool_ = unique_fd(
                    ::open(spool_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
                if (!spool_) return errno_error("cannot create spool file", spool_path_, errno);
                break;
            case archive_format::unknown:
                return make_error(error_code::bad_archive, "unsupported archive format").with_source(options_.source);
        }
        return {};
    }

    result<void> write(const std::byte* data, std::size_t size) override {
        if (finished_) return make_error(error_code::internal, "write after finish");
        if (failed_.load(std::memory_order_acquire)) return current_error();
        if (size == 0) return {};
        if (options_.format == archive_format::zip) return spool(data, size);
        try {
            if (input_.push_copy(data, size)) return {};
        } catch (const std::bad_alloc&) {
            fail(make_error(error_code::internal, "out of memory"));
        }
        return current_error();
    }

    result<std::vector<unpacked_entry>> finish() override {
        if (finished_) return make_error(error_code::internal, "finish called twice");
        finished_ = true;
        if (options_.format == archive_format::zip) {
            auto r = extract_zip();
            remove_spool();
            if (!r) fail(std::move(r).error_value());
        } else {
            input_.close();
            join();
        }
        if (failed_.load(std::memory_order_acquire)) return current_error();
        return std::move(entries_);
    }

    std::string tar_sha256() const override { return tar_sha256_; }

    void cancel() noexcept override {
        if (!finished_ || decoder_.joinable() || extractor_.joinable())
            fail(make_error(error_code::cancelled, "unpacking cancelled").with_source(options_.source));
        join();
        remove_spool();
    }

private:
    // Runs a thread body; its error, or an exception (bad_alloc from a queue
    // or a hasher) instead of std::terminate, becomes the recorded error.
    template <class F>
    void guarded(F&& body) noexcept {
        try {
            if (auto r = body(); !r) fail(std::move(r).error_value());
        } catch (const std::bad_alloc&) {
            fail(make_error(error_code::internal, "out of memory"));
        } catch (const std::exception& e) {
            fail(make_error(error_code::internal, e.what()));
        } catch (...) {
            fail(make_error(error_code::internal, "unknown exception in unpacker thread"));
        }
    }

    void fail(error e) noexcept {
        {
            std::lock_guard lock(error_mutex_);
            if (!error_) {
                try {
                    if (e.source.empty()) e.source = options_.source;
                    error_ = std::move(e);
                } catch (...) {
                    error_ = make_error(error_code::internal, "out of memory");
                }
                failed_.store(true, std::memory_order_release);
            }
        }
        input_.abort();
        tar_.abort();
        writes_->stop.store(true, std::memory_order_release);
        writes_->pool->wake();
        budget_->decode_memory().notify();  // a decoder waiting for memory or blocks
    }

    error current_error() {
        std::lock_guard lock(error_mutex_);
        return error_ ? *error_ : make_error(error_code::internal, "unpacker stopped");
    }

    // Also waits for the writer tasks, which call fail() (this) until their file ends.
    void join() noexcept {
        if (decoder_.joinable()) decoder_.join();
        if (extractor_.joinable()) extractor_.join();
        writes_->wait_idle();
    }

    void remove_spool() noexcept {
        if (spool_path_.empty()) return;
        spool_.reset();
        ::unlink(spool_path_.c_str());
        spool_path_.clear();
    }

    // ---- decoder thread (tar.xz, tar.zst)
    class queue_input final : public xz_input {
    public:
        explicit queue_input(chunk_queue& queue) : queue_(queue) {}
        status next(const std::byte*& data, std::size_t& size, bool wakeable) override {
            queue_.recycle(std::move(current_));
            switch (queue_.pop(current_, wakeable)) {
                case chunk_queue::pop_result::ok:
                    data = current_.bytes.get();
                    size = current_.size;
                    return status::ok;
                case chunk_queue::pop_result::end: return status::end;
                case chunk_queue::pop_result::woken: return status::woken;
                case chunk_queue::pop_result::aborted: break;
            }
            return status::stopped;
        }
        void wake() noexcept override { queue_.wake(); }

    private:
        chunk_queue& queue_;
        chunk current_;
    };

    // With a `hash`, the decoded bytes are hashed in order as they are handed on.
    class queue_output final : public xz_output {
    public:
        queue_output(chunk_queue& queue, std::uint64_t max_bytes, tar_digest* hash)
            : queue_(queue), max_bytes_(max_bytes), hash_(hash) {}
        bool put(byte_buffer&& decoded) override {
            if (!within_cap(decoded.size)) return false;
            if (hash_ && hash_->threaded()) {
                // Shared with the strand that hashes it.
                const std::size_t size = decoded.size;
                return hand_on(std::make_shared<const byte_buffer>(std::move(decoded)), 0, size);
            }
            if (hash_) hash_->add(nullptr, decoded.bytes.get(), decoded.size);
            return queue_.push(std::move(decoded));
        }
        bool put_part(const std::shared_ptr<const byte_buffer>& block, std::size_t offset, std::size_t size) override {
            return within_cap(size) && hand_on(block, offset, size);
        }
        byte_buffer spare(std::size_t capacity) override { return queue_.spare_or_make(capacity); }
        bool over_limit = false;

    private:
        // Counted already: to the hash and the extractor.
        bool hand_on(const std::shared_ptr<const byte_buffer>& block, std::size_t offset, std::size_t size) {
            if (hash_) hash_->add(block, block->bytes.get() + offset, size);
            return queue_.push(chunk::part_of(block, offset, size));
        }

        // Counts `n` more decoded bytes; false (and over_limit) past the cap.
        bool within_cap(std::size_t n) {
            decoded_ += n;
            if (max_bytes_ != 0 && decoded_ > max_bytes_) over_limit = true;
            return !over_limit;
        }

        chunk_queue& queue_;
        const std::uint64_t max_bytes_;
        tar_digest* hash_;
        std::uint64_t decoded_ = 0;
    };

    // The decoder thread of a tar.xz or a tar.zst: decode_xz or decode_zstd
    // (xz_decode.hpp) decodes the stream's blocks or frames on the run's pool,
    // under the run's decoder memory, and the tar goes to the extractor
    // through tar_, in order. A tar.zst's tar stream is hashed on the way
    // (tar_sha256()): a recompressed copy must decode to the tar its mirror
    // recorded.
    result<void> decode_stream() {
        // The ticket goes back when decoding ends: the decoders' memory limit grows.
        struct leave {
            std::unique_ptr<run_budget::ticket>& ticket;
            ~leave() { ticket.reset(); }
        } leave_budget{ticket_};
        const bool zstd = options_.format == archive_format::tar_zst;
        // decoder_threads = 1 keeps every block on this thread (tests, and
        // --threads 1 has no pool worker to spare anyway). zstd frames need a
        // larger pool (see kMinZstdPoolThreads).
        const unsigned min_pool = zstd ? kMinZstdPoolThreads : 2;
        const bool on_pool = options_.decoder_threads != 1 && budget_->pool().threads() >= min_pool;
        // Hashed on the pool beside the frames' decoding; streaming, on this thread.
        tar_digest tar_hash(on_pool ? &budget_->pool() : nullptr, failed_);
        queue_input in(input_);
        queue_output out(tar_, options_.max_output_bytes, zstd ? &tar_hash : nullptr);
        xz_decode_options o;
        if (on_pool) o.pool = &budget_->pool();
        o.memory = &budget_->decode_memory();
        o.worker_state_allowance = run_budget::kept_decoder_bytes;
        o.priority = options_.size_hint;
        o.max_block_memory = options_.decoder_memlimit;
        o.max_output = options_.max_output_bytes;
        o.stream_chunk = kLzmaOutBuffer;
        o.part_bytes = options_.decoder_part_bytes;
        o.stop = &failed_;
        o.mark = [budget = budget_.get()](const char* event) { budget->mark(event); };
        auto r = zstd ? decode_zstd(in, out, o) : decode_xz(in, out, o);
        if (!r) {  // recorded now: tar_hash's strand drops what it holds once stopped
            fail(out.over_limit ? expansion_error(options_.max_output_bytes) : std::move(r).error_value());
            return {};
        }
        if (zstd) tar_sha256_ = tar_hash.finish();
        budget_->add_time(profile_stage::decoder, r->busy_ns, r->wait_ns, r->decoded);
        budget_->mark("decoded");
        tar_.close();
        return {};
    }

    // ---- extractor thread (tar streams)
    struct read_source {
        chunk_queue* queue;
        // Shared with the slices the writers hold (extractor::slice_of).
        std::shared_ptr<chunk> current;
        std::uint64_t wait_ns = 0;
    };

    // libarchive's read callback contract: return the byte count and point
    // *buffer at data that stays valid until the next call; 0 is end of
    // input; ARCHIVE_FATAL (with an error set) aborts the read.
    static la_ssize_t read_callback(archive* a, void* user, const void** buffer) {
        auto* src = static_cast<read_source*>(user);
        // libarchive is done with it. Slices are only ever made of chunks
        // with a lease (decoded xz blocks and their parts), which recycle() would free
        // anyway: those go with their last reference, here or in the last
        // slice's writer, ordered by shared_ptr's own count. (Testing
        // use_count() == 1 instead was a relaxed read: TSan saw the free here
        // race with a writer's pwrite of the block.) A chunk without a lease
        // is held by nothing else and is kept for reuse.
        if (src->current && !src->current->leased()) src->queue->recycle(std::move(*src->current));
        src->current.reset();
        const auto waited = std::chrono::steady_clock::now();
        chunk next;
        const auto got = src->queue->pop(next);
        src->wait_ns += ns_since(waited);
        switch (got) {
            case chunk_queue::pop_result::ok:
                src->current = std::make_shared<chunk>(std::move(next));
                *buffer = src->current->data();
                return static_cast<la_ssize_t>(src->current->size);
            case chunk_queue::pop_result::end: return 0;
            case chunk_queue::pop_result::woken:  // not wakeable: never
            case chunk_queue::pop_result::aborted: break;
        }
        archive_set_error(a, ECANCELED, "unpacking stopped");
        return ARCHIVE_FATAL;
    }

    result<void> extract_stream(chunk_queue& queue) {
        const auto started = std::chrono::steady_clock::now();
        archive_reader in(archive_read_new());
        if (!in) return make_error(error_code::internal, "archive_read_new failed");
        archive_read_support_format_tar(in.get());
        if (options_.format == archive_format::tar_gz) {
            // xz and zstd streams were decoded before (tar_). Explicit filters, not archive_read_support_filter_all():
            // "all" also registers lrzip/lzop/grzip, which run external programs chosen by the data's magic bytes.
            archive_read_support_filter_gzip(in.get());
            archive_read_support_filter_zstd(in.get());
            archive_read_support_filter_xz(in.get());
            archive_read_support_filter_bzip2(in.get());
        }
        read_source src{&queue, {}};
        if (archive_read_open(in.get(), &src, nullptr, &read_callback, nullptr) != ARCHIVE_OK)
            return make_error(error_code::bad_archive, error_text(in.get(), "cannot open archive"));
        extractor ex(stage_, options_, writes_);
        ex.read_from(&src.current);
        auto r = ex.run(in.get());
        budget_->mark("extracted");  // every entry read and written: run() waits for the writers
        const std::uint64_t wait_ns = src.wait_ns + ex.wait_ns();
        const std::uint64_t total_ns = ns_since(started);
        budget_->add_time(profile_stage::extractor, total_ns > wait_ns ? total_ns - wait_ns : 0, wait_ns,
                          ex.copied_bytes());
        if (!r) return r;
        // The tar end marker may come before the end of the data (block
        // padding). Drain the rest so the xz decoder reaches the end of the
        // stream and verifies its checks, rather than blocking on a full queue.
        // The last block goes first: its memory may be what the decoder needs.
        src.current.reset();
        chunk scratch;
        for (;;) {
            const auto got = queue.pop(scratch);
            if (got == chunk_queue::pop_result::aborted) return {};  // the failure is recorded
            if (got == chunk_queue::pop_result::end) break;
        }
        entries_ = ex.take_entries();
        return {};
    }

    // ---- zip: spool, then extract with the seekable reader
    result<void> spool(const std::byte* data, std::size_t size) {
        auto written = write_all(spool_.get(), data, size, spool_path_);
        if (!written.ok()) fail(written.error_value());
        return written;
    }

    result<void> extract_zip() {
        REDIST_TRY_VOID(spool_.close(spool_path_));
        archive_reader in(archive_read_new());
        if (!in) return make_error(error_code::internal, "archive_read_new failed");
        // The seekable reader trusts the central directory, as unzip does;
        // the streaming one guesses from local headers and fails on zips whose
        // sizes sit only in data descriptors.
        archive_read_support_format_zip_seekable(in.get());
        if (archive_read_open_filename(in.get(), spool_path_.c_str(), kZipReadBlock) != ARCHIVE_OK)
            return make_error(error_code::bad_archive, error_text(in.get(), "cannot open zip archive"))
                .with_source(options_.source);
        extractor ex(stage_, options_, writes_);
        REDIST_TRY_VOID(ex.run(in.get()));
        entries_ = ex.take_entries();
        return {};
    }

    const std::string stage_;
    const unpack_options options_;
    std::shared_ptr<run_budget> budget_;
    std::unique_ptr<run_budget::ticket> ticket_;  // this artifact's share of the budget (xz only; decoder thread)
    chunk_queue input_;
    chunk_queue tar_;
    std::string tar_sha256_;  // of the decoded tar stream (tar.zst), set when decoding ended
    std::shared_ptr<write_state> writes_;
    std::thread decoder_;
    std::thread extractor_;
    std::mutex error_mutex_;
    std::optional<error> error_;
    std::atomic<bool> failed_{false};
    bool finished_ = false;
    std::vector<unpacked_entry> entries_;  // written by the extractor, read after join
    std::string spool_path_;
    unique_fd spool_;
};

}  // namespace

result<std::unique_ptr<stream_unpacker>> stream_unpacker::start(const fs::path& stage_dir,
                                                                const unpack_options& options) {
    std::error_code ec;
    // Canonical: libarchive's SECURE_SYMLINKS walks the whole absolute path
    // from "/" and refuses any symlink on it, including one above the stage
    // (a symlinked /tmp or home directory).
    const fs::path stage = fs::canonical(stage_dir, ec);
    if (ec)
        return make_error(error_code::filesystem, "cannot resolve staging directory: " + ec.message())
            .with_path(stage_dir.string());
    if (!fs::is_directory(stage, ec))
        return make_error(error_code::filesystem, "staging directory is not a directory").with_path(stage.string());
    if (!fs::is_empty(stage, ec) || ec)
        return make_error(error_code::filesystem, "staging directory is not empty").with_path(stage.string());
    try {
        auto budget = options.budget ? options.budget : std::make_shared<run_budget>();
        auto impl = std::make_unique<unpacker_impl>(stage.string(), options, std::move(budget));
        REDIST_TRY_VOID(impl->start_workers());
        return std::unique_ptr<stream_unpacker>(std::move(impl));
    } catch (const std::bad_alloc&) {
        return make_error(error_code::internal, "out of memory");
    } catch (const std::system_error& e) {
        return make_error(error_code::internal, std::string("cannot start thread: ") + e.what());
    }
}

}  // namespace redist
