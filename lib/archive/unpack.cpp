// unpack.cpp — the streaming unpacker; unpack.hpp draws its threads and
// queues (input_ and tar_ below are the two bounded queues, chunk_queue.hpp).
// Its parts: the extraction loop and its checks (extractor.hpp, with the
// name rules of entry_names.hpp), the writers on the pool (file_writer.hpp),
// and here the decoder thread, the tar stream's digest and zip's spool.
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
#include <cstdio>
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

#include "archive/chunk_queue.hpp"
#include "archive/extractor.hpp"
#include "archive/file_writer.hpp"
#include "archive/sha256.hpp"
#include "archive/xz_decode.hpp"
#include "support/budget.hpp"
#include "support/posix_file.hpp"
#include "support/stopwatch.hpp"

namespace redist {
namespace {

namespace fs = std::filesystem;
using unpacking::chunk;
using unpacking::chunk_queue;
using unpacking::error_text;
using unpacking::expansion_error;
using unpacking::extractor;
using unpacking::kLzmaOutBuffer;
using unpacking::kMaxInlineWriterThreads;
using unpacking::kSpareBlocks;
using unpacking::write_state;
using archive_reader = unpacking::archive_reader;

// ---- tuning ---------------------------------------------------------------
// zstd frames decode on the pool only with at least this many pool threads;
// below, one streaming decoder on the decoder thread is faster (measured on 2
// cores: the frames' hand-off costs more than the one core it would free).
constexpr unsigned kMinZstdPoolThreads = 3;
constexpr std::size_t kZipReadBlock = 1u << 20;

// ---- the tar stream's digest ---------------------------------------------------

// What the decoder hands the decoded tar to, in order, when the digest of a
// tar.zst's tar stream is asked for (unpack_options::tar_piece_bytes).
// pool == nullptr: hashes on the caller's thread. `stop` set: queued bytes
// are dropped unhashed.
class tar_hash {
public:
    tar_hash(const tar_hash&) = delete;
    tar_hash& operator=(const tar_hash&) = delete;
    virtual ~tar_hash() = default;
    // Whether add() needs `block` (it keeps the bytes alive for a pool task).
    bool threaded() const noexcept { return pool_ != nullptr; }
    // `size` bytes at `data`, which `block` keeps alive until they are hashed.
    // Waits while kMaxQueued bytes wait for the pool (its tasks never wait:
    // see work_pool).
    virtual void add(std::shared_ptr<const byte_buffer> block, const std::byte* data, std::size_t size) = 0;
    // Every byte added so far, hashed: the digest (once). "" if hashing failed.
    virtual std::string finish() = 0;

protected:
    tar_hash(work_pool* pool, const std::atomic<bool>& stop) : pool_(pool), stop_(stop) {}
    static constexpr std::size_t kMaxQueued = 64u << 20;
    // Bytes handed on, waiting for a pool task.
    struct part {
        std::shared_ptr<const byte_buffer> block;
        const std::byte* data;
        std::size_t size;
    };
    work_pool* const pool_;
    const std::atomic<bool>& stop_;
};

// The SHA-256 of a decoded tar stream, in order. With a pool, a strand on
// it: one task at a time drains the queued parts, so that the decoder thread
// only hands frames on. Hashing on the decoder thread stalled everything
// behind it (its input queue filled, then the download and the copy's own
// hash waited): on 16 cores the copy's and the tar's hash passes ran one
// after the other.
class tar_sha256_digest final : public tar_hash {
public:
    tar_sha256_digest(work_pool* pool, const std::atomic<bool>& stop) : tar_hash(pool, stop) {}
    ~tar_sha256_digest() override { wait_idle(); }  // the strand's task refers to this

    void add(std::shared_ptr<const byte_buffer> block, const std::byte* data, std::size_t size) override {
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

    std::string finish() override {
        wait_idle();
        return hasher_.finish_hex();
    }

private:
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

    sha256_hasher hasher_;  // the strand's while it runs; the caller's otherwise
    std::mutex mutex_;
    std::condition_variable room_, idle_;
    std::deque<part> parts_;
    std::size_t queued_ = 0;
    bool running_ = false;
};

// The hash list of a decoded tar stream (recompressed.hpp; file_digester's
// digest): the SHA-256 of each consecutive `piece_bytes` piece, then of their
// raw digests in order. With a pool every piece is one task, so pieces hash
// on all cores at once while later frames decode; a copy's frames are pieces
// (recompress_xz_to_zstd writes one frame per piece), so a decoded frame is
// hashed whole by the next free worker. The tar's one SHA-256 (tar_sha256_digest) is
// a single core's pass, which on 16 cores took longer than the whole install.
// Without a pool, on the caller's thread as it streams.
class tar_list_digest final : public tar_hash {
public:
    tar_list_digest(work_pool* pool, const std::atomic<bool>& stop, std::uint64_t piece_bytes)
        : tar_hash(pool, stop), piece_bytes_(piece_bytes), streamed_(piece_bytes) {}
    ~tar_list_digest() override { wait_idle(); }  // the pieces' tasks refer to this

    void add(std::shared_ptr<const byte_buffer> block, const std::byte* data, std::size_t size) override {
        if (!pool_) {
            streamed_.update(data, size);
            return;
        }
        while (size > 0) {
            const std::size_t n = static_cast<std::size_t>(
                std::min<std::uint64_t>(size, piece_bytes_ - current_.bytes));
            current_.parts.push_back({block, data, n});
            current_.bytes += n;
            data += n;
            size -= n;
            if (current_.bytes == piece_bytes_) submit();
        }
    }

    std::string finish() override {
        if (!pool_) return streamed_.finish_hex();
        if (current_.bytes > 0) submit();
        wait_idle();
        std::lock_guard lock(mutex_);
        return failed_ ? std::string() : piece_list_hex(digests_);
    }

private:
    struct piece {
        std::vector<part> parts;
        std::uint64_t bytes = 0;
    };

    // Posts the current piece. Waits while kMaxQueued bytes wait to be hashed.
    void submit() {
        auto p = std::make_shared<piece>(std::move(current_));
        current_ = piece{};
        std::size_t index = 0;
        {
            std::unique_lock lock(mutex_);
            room_.wait(lock, [&] { return queued_ < kMaxQueued; });
            queued_ += p->bytes;
            ++running_;
            index = digests_.size();
            digests_.emplace_back();
        }
        pool_->post([this, index, p] { hash(index, *p); });
    }

    void hash(std::size_t index, piece& p) noexcept {
        std::array<unsigned char, 32> digest{};
        bool ok = true;
        if (!stop_.load(std::memory_order_acquire)) {
            try {
                sha256_hasher hasher;
                for (const auto& part : p.parts) hasher.update(part.data, part.size);
                digest = hasher.finish_bytes();
            } catch (...) {  // bad_alloc from OpenSSL: the digest fails, and with it the copy
                ok = false;
            }
        }
        p.parts.clear();  // the blocks' memory goes back before the decoder is told there is room
        std::lock_guard lock(mutex_);
        digests_[index] = digest;
        failed_ = failed_ || !ok;
        queued_ -= p.bytes;
        --running_;
        room_.notify_all();
        if (running_ == 0) idle_.notify_all();
    }

    void wait_idle() {
        std::unique_lock lock(mutex_);
        idle_.wait(lock, [&] { return running_ == 0; });
    }

    const std::uint64_t piece_bytes_;
    file_digester streamed_;  // without a pool
    piece current_;           // the caller's: the piece being gathered
    std::mutex mutex_;
    std::condition_variable room_, idle_;
    std::vector<std::array<unsigned char, 32>> digests_;  // one per piece posted, in order
    std::uint64_t queued_ = 0;
    std::size_t running_ = 0;
    bool failed_ = false;
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

    std::string tar_digest() const override { return tar_digest_; }

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
        queue_output(chunk_queue& queue, std::uint64_t max_bytes, tar_hash* hash)
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
        tar_hash* hash_;
        std::uint64_t decoded_ = 0;
    };

    // The decoder thread of a tar.xz or a tar.zst: decode_xz or decode_zstd
    // (xz_decode.hpp) decodes the stream's blocks or frames on the run's pool,
    // under the run's decoder memory, and the tar goes to the extractor
    // through tar_, in order. A tar.zst's tar stream is hashed on the way
    // (tar_digest()): a recompressed copy must decode to the tar its mirror
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
        work_pool* hash_pool = on_pool ? &budget_->pool() : nullptr;
        std::optional<tar_sha256_digest> whole;
        std::optional<tar_list_digest> list;
        tar_hash* hash = nullptr;
        if (zstd && options_.digest_tar) {
            if (options_.tar_piece_bytes != 0) hash = &list.emplace(hash_pool, failed_, options_.tar_piece_bytes);
            else hash = &whole.emplace(hash_pool, failed_);
        }
        queue_input in(input_);
        queue_output out(tar_, options_.max_output_bytes, hash);
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
        if (hash) tar_digest_ = hash->finish();
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
    std::string tar_digest_;  // of the decoded tar stream (tar.zst), set when decoding ended
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

std::string tree_digest(const std::vector<unpacked_entry>& entries) {
    std::vector<const unpacked_entry*> sorted;
    sorted.reserve(entries.size());
    for (const auto& e : entries) sorted.push_back(&e);
    std::stable_sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->path < b->path; });
    const auto time_text = [](const entry_time& t) {
        return t.set ? std::to_string(t.seconds) + "." + std::to_string(t.nanoseconds) : std::string("-");
    };
    const auto kind_text = [](entry_kind kind) {
        switch (kind) {
            case entry_kind::regular: return "file";
            case entry_kind::directory: return "dir";
            case entry_kind::symlink: return "symlink";
            case entry_kind::hardlink: return "hardlink";
        }
        return "?";
    };
    sha256_hasher hasher;
    const auto field = [&](std::string_view text) {
        hasher.update(text);
        hasher.update(std::string_view("\0", 1));
    };
    char mode[16];
    for (const unpacked_entry* e : sorted) {
        std::snprintf(mode, sizeof mode, "%o", e->mode);
        field(kind_text(e->kind));
        field(e->path);
        field(mode);
        field(std::to_string(e->size));
        field(std::to_string(e->piece_size));
        field(e->sha256);
        field(e->link_target);
        field(time_text(e->mtime));
        field(time_text(e->atime));
    }
    return hasher.finish_hex();
}

}  // namespace redist
