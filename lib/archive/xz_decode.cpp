// xz_decode.cpp — see xz_decode.hpp.
//
// The zstd format (RFC 8878): frames, each a header, blocks (a 3-byte
// header each) and an optional 4-byte checksum; skippable frames between.
//
// The .xz container (https://tukaani.org/xz/xz-file-format.txt):
//   stream  = header(12) block* index footer(12), then stream padding (zero
//             bytes, a multiple of 4), then optionally another stream
//   block   = header((b+1)*4 bytes, b the first byte, never 0) compressed
//             data, padding to a multiple of 4, check (0/4/8/32 bytes)
//   index   = starts with a 0 byte where a block header would start
#include "archive/xz_decode.hpp"

#include <lzma.h>
#include <sys/mman.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getFrameHeader, ZSTD_frameHeaderSize (exported by libzstd 1.5)
#include <zstd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <utility>

#include "support/stopwatch.hpp"
#include "support/work_pool.hpp"

namespace redist {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t kStreamHeaderSize = LZMA_STREAM_HEADER_SIZE;  // 12, as the footer
// A streamed block may always use this much decoder memory, whatever the
// gate's limit: xz -9's 64 MiB dictionary must decode even on a tiny budget.
constexpr std::uint64_t kMinStateLimit = std::uint64_t{96} << 20;

// zstd frames may ask for a window of at most 2^27 bytes (128 MiB, libzstd's
// own default limit; `zstd --long` archives need more and are refused).
constexpr int kZstdWindowLogMax = 27;

constexpr std::size_t kBufferGrain = 1u << 20;
std::size_t round_up(std::uint64_t n) {
    return static_cast<std::size_t>((n + kBufferGrain - 1) / kBufferGrain * kBufferGrain);
}

error bad(const char* what) { return make_error(error_code::bad_archive, what); }
error zstd_failure(const char* why) { return make_error(error_code::bad_archive, std::string("zstd: ") + why); }
error stopped() { return make_error(error_code::cancelled, "unpacking stopped"); }

error lzma_failure(lzma_ret ret) {
    switch (ret) {
        case LZMA_FORMAT_ERROR: return bad("not an xz stream");
        case LZMA_OPTIONS_ERROR: return bad("unsupported xz options");
        case LZMA_DATA_ERROR: return bad("corrupt xz data");
        case LZMA_BUF_ERROR: return bad("truncated xz data");
        case LZMA_MEM_ERROR: return make_error(error_code::internal, "xz decoder out of memory");
        case LZMA_MEMLIMIT_ERROR: return bad("xz data needs more memory than allowed");
        default:
            return make_error(error_code::internal,
                              "xz decoder failed (lzma_ret " + std::to_string(static_cast<int>(ret)) + ")");
    }
}

// An lzma_stream that frees its decoder with its owner.
struct owned_lzma_stream {
    lzma_stream strm = LZMA_STREAM_INIT;
    owned_lzma_stream() = default;
    owned_lzma_stream(const owned_lzma_stream&) = delete;
    owned_lzma_stream& operator=(const owned_lzma_stream&) = delete;
    ~owned_lzma_stream() { lzma_end(&strm); }
};

using zstd_dctx = std::unique_ptr<ZSTD_DCtx, std::size_t (*)(ZSTD_DCtx*)>;

// ---- input: pieces from xz_input, read by byte count -----------------------
class reader {
public:
    explicit reader(xz_input& in, std::uint64_t& wait_ns) : in_(in), wait_ns_(wait_ns) {}

    // Makes at least one byte available: ok, end (no more input) or stopped;
    // when `wakeable`, also woken (see xz_input::wake).
    xz_input::status fill(bool wakeable = false) {
        while (pos_ >= size_) {
            const auto t = clock_type::now();
            const auto s = in_.next(data_, size_, wakeable);
            wait_ns_ += ns_since(t);
            pos_ = 0;
            if (s == xz_input::status::woken && !wakeable) continue;
            if (s != xz_input::status::ok) {
                size_ = 0;
                return s;
            }
        }
        return xz_input::status::ok;
    }

    // Copies exactly n bytes; ok, or end/stopped if the input ran out first.
    xz_input::status read(void* to, std::size_t n) {
        auto* dst = static_cast<std::byte*>(to);
        while (n > 0) {
            const auto s = fill();
            if (s != xz_input::status::ok) return s;
            const std::size_t k = std::min(n, size_ - pos_);
            std::memcpy(dst, data_ + pos_, k);
            pos_ += k;
            dst += k;
            n -= k;
        }
        return xz_input::status::ok;
    }

    // The unread part of the current piece (call fill() first).
    const std::uint8_t* here() const { return reinterpret_cast<const std::uint8_t*>(data_ + pos_); }
    std::size_t available() const { return size_ - pos_; }
    void consume(std::size_t n) { pos_ += n; }
    xz_input& input() const { return in_; }

private:
    xz_input& in_;
    std::uint64_t& wait_ns_;
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t pos_ = 0;
};

// ---- one block's header, with the filter options it owns --------------------
struct block_options {
    lzma_block block{};
    std::array<lzma_filter, LZMA_FILTERS_MAX + 1> filters{};

    block_options() {
        for (auto& f : filters) f = lzma_filter{LZMA_VLI_UNKNOWN, nullptr};
    }
    block_options(const block_options&) = delete;
    block_options& operator=(const block_options&) = delete;
    ~block_options() { lzma_filters_free(filters.data(), nullptr); }

    // Once. `header` holds block.header_size bytes, the size byte first.
    lzma_ret decode(const std::uint8_t* header, std::uint32_t header_size, lzma_check check) {
        block.version = 1;
        block.header_size = header_size;
        block.check = check;
        block.filters = filters.data();
        return lzma_block_header_decode(&block, nullptr, header);
    }
    bool sizes_known() const {
        return block.compressed_size != LZMA_VLI_UNKNOWN && block.uncompressed_size != LZMA_VLI_UNKNOWN;
    }
    // Bytes after the header: compressed data, padding and check; 0 when the
    // declared compressed size is invalid.
    std::uint64_t body_size() const {
        const lzma_vli total = lzma_block_total_size(&block);
        return total > block.header_size ? total - block.header_size : 0;
    }
};

// ---- a unit decoded by a pool task: an xz block or a zstd frame -----------------
// Its compressed bytes are read whole and the room for its declared output is
// leased before it is posted; the task decodes the one into the other.
struct pool_unit {
    byte_buffer input;   // the compressed bytes
    byte_buffer output;  // room for out_size bytes, with the output's lease
    std::size_t out_size = 0;
    memory_gate::lease work;  // decoder state beyond the worker's allowance, given back when the task ends
    bool done = false;        // under the gate's lock
    bool failed = false;      // set by the task; failure() says why
    std::uint64_t busy_ns = 0;
    // Output bytes decoded so far, published after each part; the decoder
    // thread hands them on while it waits for this unit (watched). Both
    // sequentially consistent: a worker that sees `watched` false has
    // published what the waiter's next look will see, so it need not wake it.
    std::atomic<std::size_t> produced{0};
    std::atomic<bool> watched{false};

    struct part_options {
        std::size_t bytes = 0;  // 0: in one go
        memory_gate* gate = nullptr;
        const std::function<void()>* decoded = nullptr;
    };

    pool_unit() = default;
    pool_unit(const pool_unit&) = delete;
    pool_unit& operator=(const pool_unit&) = delete;
    virtual ~pool_unit() = default;

    void run(const part_options& parts) {
        const auto t = clock_type::now();
        failed = !decode(parts);
        input = {};
        busy_ns = ns_since(t);
    }
    // Why decode() failed; called on the decoder thread, once the task is done.
    virtual error failure() const = 0;

protected:
    // Decodes input into output (output.size set); false on failure. Never throws.
    virtual bool decode(const part_options& parts) = 0;

    // The first `bytes` of the output are decoded: publishes them, and wakes
    // the decoder thread if it is waiting for this unit.
    void part_done(std::size_t bytes, const part_options& parts) {
        if (produced.load(std::memory_order_relaxed) == bytes) return;  // liblzma finishing the block's check
        produced.store(bytes);
        if (watched.load()) parts.gate->signal([] {});
        if (*parts.decoded) (*parts.decoded)();
    }
};

// An xz block whose header records its sizes.
struct xz_block final : pool_unit {
    std::unique_ptr<block_options> options;  // on the heap: block.filters points into it
    // Whether the worker may keep this block's decoder afterwards: only when
    // its memory is within what the budget set aside per worker.
    bool keep_decoder = true;
    lzma_ret result = LZMA_OK;

    error failure() const override { return lzma_failure(result); }  // BUF_ERROR already mapped by decode()

private:
    bool decode(const part_options& parts) override {
        result = decode_on_this_thread(parts);
        return result == LZMA_OK;
    }

    lzma_ret decode_on_this_thread(const part_options& parts) {
        // One decoder per pool worker, kept between blocks: re-initializing a
        // block decoder on the same lzma_stream reuses its dictionary when the
        // size matches, where lzma_block_buffer_decode would allocate (and
        // page-fault) 8 MiB or more for every block.
        thread_local owned_lzma_stream decoder;
        lzma_stream& strm = decoder.strm;
        lzma_ret r = lzma_block_decoder(&strm, &options->block);
        if (r != LZMA_OK) return r;
        strm.next_in = reinterpret_cast<const std::uint8_t*>(input.bytes.get());
        strm.avail_in = input.size;
        strm.next_out = reinterpret_cast<std::uint8_t*>(output.bytes.get());
        strm.avail_out = 0;
        const std::size_t step = parts.bytes ? parts.bytes : out_size;
        std::size_t given = 0;  // output room handed to liblzma so far
        do {
            if (strm.avail_out == 0 && given < out_size) {
                const std::size_t n = std::min(step, out_size - given);
                strm.avail_out = n;
                given += n;
            }
            r = lzma_code(&strm, LZMA_FINISH);
            if (parts.bytes && strm.avail_out == 0 && r == LZMA_OK) part_done(given, parts);
        } while (r == LZMA_OK);
        output.size = out_size - strm.avail_out;
        if (!keep_decoder) {  // a dictionary beyond the kept allowance is not kept
            lzma_end(&strm);
            strm = LZMA_STREAM_INIT;
        }
        if (r != LZMA_STREAM_END) return r == LZMA_BUF_ERROR ? LZMA_DATA_ERROR : r;
        // The declared sizes were checked by liblzma; all the input is this block.
        return strm.avail_in == 0 && strm.avail_out == 0 ? LZMA_OK : LZMA_DATA_ERROR;
    }
};

// A zstd frame whose header records its content size, decoded in one call
// into a buffer of exactly that size (libzstd checks that the frame decodes
// to exactly that many bytes, and the frame's checksum when it has one).
struct zstd_frame final : pool_unit {
    const char* why = nullptr;  // libzstd's reason, a static string

    error failure() const override { return zstd_failure(why); }

private:
    bool decode(const part_options&) override {
        // One decoder context per pool worker, kept between frames (a few hundred
        // KiB: the frame is decoded straight into its output, with no window).
        thread_local const zstd_dctx dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
        if (!dctx) {
            why = "cannot create a zstd decoder";
            return false;
        }
        const std::size_t n = ZSTD_decompressDCtx(dctx.get(), output.bytes.get(), out_size, input.bytes.get(),
                                                  input.size);
        if (ZSTD_isError(n)) {
            why = ZSTD_getErrorName(n);
            return false;
        }
        output.size = n;
        if (n == out_size) return true;
        why = "frame decodes to other than its content size";
        return false;
    }
};

// ---- the pool side, shared by both formats ---------------------------------------
// The calling thread reads each unit's compressed bytes, leases its memory and
// posts it; finished units are handed on in stream order, the oldest in parts
// while it decodes. Units are posted only after the ones before them, so a
// unit that streams on the calling thread first drains the line.
class unit_scheduler {
public:
    unit_scheduler(xz_input& in, xz_output& out, const xz_decode_options& options, const char* truncated)
        : out_(out), options_(options), in_(in, stats_.wait_ns), truncated_(truncated) {
        max_pending_ = options.max_pending ? options.max_pending
                       : options.pool      ? options.pool->threads() + options.pool->threads() / 4
                                           : 1;
        max_block_ = options.max_block_memory ? options.max_block_memory : kMaxParallelBlock;
        if (!options.memory) options_.pool = nullptr;
    }
    unit_scheduler(const unit_scheduler&) = delete;
    unit_scheduler& operator=(const unit_scheduler&) = delete;

    // Waits for the tasks still queued (their units are discarded), so that
    // nothing outlives the caller's pool and gate unintentionally.
    ~unit_scheduler() {
        if (options_.memory && !pending_.empty())
            options_.memory->wait([&] { return std::ranges::all_of(pending_, [](const auto& b) { return b->done; }); });
    }

protected:
    bool stopping() const { return options_.stop && options_.stop->load(std::memory_order_acquire); }

    error input_error(xz_input::status s) const { return s == xz_input::status::stopped ? stopped() : bad(truncated_); }

    // Exactly n bytes of the container (a header, the footer), however they arrive.
    result<void> read_exact(void* dst, std::size_t n) {
        const auto s = in_.read(dst, n);
        if (s == xz_input::status::ok) return {};
        return input_error(s);
    }

    // The head unit is finished (or there is none): checked under the gate's lock.
    bool head_done() const { return !pending_.empty() && pending_.front()->done; }

    // Room in this stream's window: waits for earlier units, handing them on.
    result<void> make_room() {
        while (pending_.size() >= max_pending_) REDIST_TRY_VOID(hand_on_head());
        return {};
    }

    // Maps and leases room for `bytes` of the unit's compressed input; the
    // capacity is in whole MiB, so that kept buffers fit the next units.
    // This is leased first, before the decoded unit's room is asked for:
    // the download may still be delivering these bytes, and while it does
    // only this smaller half is held (16 cores, 14 archives: most decoders
    // are waiting for their next unit's bytes at any time).
    result<void> lease_input(pool_unit& job, std::uint64_t bytes) {
        job.input = byte_buffer::from_gate(*options_.memory, round_up(bytes));
        return cover(job.input.lease, job.input.capacity, 0);
    }

    // Then the room for its `out_size` decoded bytes, and `extra_state` of
    // decoder memory beyond what the worker keeps anyway.
    result<void> lease_output(pool_unit& job, std::uint64_t out_size, std::uint64_t extra_state) {
        job.output = byte_buffer::from_gate(*options_.memory, round_up(out_size));
        REDIST_TRY_VOID(cover(job.output.lease, job.output.capacity, job.input.lease.bytes()));
        REDIST_TRY_VOID(cover(job.work, extra_state, job.input.lease.bytes() + job.output.lease.bytes()));
        job.out_size = static_cast<std::size_t>(out_size);
        return {};
    }

    // Posts a unit whose input and output are leased; `began` and `ended`
    // name it in the profile's timeline.
    void post(const std::shared_ptr<pool_unit>& job, const char* began, const char* ended) {
        memory_gate* gate = options_.memory;
        xz_input* input = &in_.input();
        // options_ outlives the task: the destructor waits for every pending unit.
        const auto* mark = options_.mark ? &options_.mark : nullptr;
        const pool_unit::part_options parts{options_.part_bytes, gate, &options_.part_decoded};
        options_.pool->post(
            [task_unit = job, gate, input, mark, parts, began, ended]() mutable {
                if (mark) (*mark)(began);
                task_unit->run(parts);
                if (mark) (*mark)(ended);
                task_unit->work.reset();
                // The task's reference goes before `done` is set: pending_ holds
                // the unit until the decoder sees it done, so the last reference,
                // and with it the output's lease, is the decoder's: a failed
                // stream gives every lease back before decode_* returns.
                pool_unit* const unit = task_unit.get();
                task_unit.reset();
                // Under the gate's lock: the decoder outlives every unit that
                // is not done yet (its destructor waits for them there).
                gate->signal([&] {
                    unit->done = true;
                    input->wake();
                });
            },
            work_pool::lane::bulk, options_.priority);
        pending_.push_back(job);
        ++stats_.pool_blocks;
        scheduled_ += job->out_size;
    }

    // Makes `lease` hold `bytes`, waiting for the rest; meanwhile this
    // stream's finished units are handed on, which is what frees memory.
    // `own`: the other leases this thread holds while it waits.
    result<void> cover(memory_gate::lease& lease, std::uint64_t bytes, std::uint64_t own) {
        while (lease.bytes() < bytes) {
            auto more = options_.memory->acquire(
                bytes - lease.bytes(), [&] { return stopping() || head_done(); }, own + lease.bytes());
            if (more) {
                lease.absorb(std::move(more));
                break;
            }
            if (stopping()) return stopped();
            REDIST_TRY_VOID(hand_on_head());
        }
        return {};
    }

    // Reads n bytes of a unit, which the download may still be delivering.
    // While it waits for bytes, the units decoded meanwhile are handed on:
    // neither their memory nor the extractor waits for a slow download.
    result<void> read_body(std::byte* dst, std::size_t n) {
        while (n > 0) {
            if (in_.available() == 0) {
                REDIST_TRY_VOID(hand_on_finished());
                const auto s = in_.fill(true);
                if (s == xz_input::status::woken) continue;
                if (s != xz_input::status::ok) return input_error(s);
            }
            const std::size_t k = std::min(n, in_.available());
            (void)in_.read(dst, k);  // at hand: copies, never waits
            dst += k;
            n -= k;
        }
        return {};
    }

    // Hands on the finished units at the head of the line; never waits for one.
    result<void> hand_on_finished() {
        while (!pending_.empty() && options_.memory->test([&] { return head_done(); })) REDIST_TRY_VOID(hand_on_head());
        return {};
    }

    // Waits for the oldest pool unit and passes its output on: in parts
    // while it is still being decoded (part_bytes), the rest when it ends.
    result<void> hand_on_head() {
        if (pending_.empty()) return {};
        const std::shared_ptr<pool_unit> job = pending_.front();
        const std::size_t part = options_.part_bytes;
        std::size_t handed = 0;  // in parts
        if (part) job->watched.store(true);
        for (;;) {
            const auto t = clock_type::now();
            bool done = false;
            options_.memory->wait([&] {
                done = job->done;
                return done || stopping() || (part && job->produced.load() >= handed + part);
            });
            stats_.wait_ns += ns_since(t);
            if (stopping()) return stopped();
            if (done) break;
            const std::size_t upto = job->produced.load();
            REDIST_TRY_VOID(put_part(job, handed, upto - handed));
            handed = upto;
            if (options_.mark) options_.mark("xz block part handed on");
        }
        pending_.pop_front();
        stats_.busy_ns += job->busy_ns;
        if (job->failed) return job->failure();
        if (handed == 0) return put(std::move(job->output));
        return put_part(job, handed, job->output.size - handed);
    }

    // `size` bytes at `offset` of a unit's output, as a part that holds the unit.
    result<void> put_part(const std::shared_ptr<pool_unit>& job, std::size_t offset, std::size_t size) {
        return hand_to_output(size, [&] {
            const bool ok = out_.put_part(std::shared_ptr<const byte_buffer>(job, &job->output), offset, size);
            stats_.parts += ok ? 1 : 0;
            return ok;
        });
    }

    result<void> drain() {
        while (!pending_.empty()) REDIST_TRY_VOID(hand_on_head());
        return {};
    }

    result<void> put(byte_buffer&& buffer) {
        return hand_to_output(buffer.size, [&] { return out_.put(std::move(buffer)); });
    }

    // Gives `n` decoded bytes to the output through `hand` (false: the output
    // refused them), timing the wait and counting what was handed on.
    template <class Hand>
    result<void> hand_to_output(std::size_t n, Hand&& hand) {
        if (n == 0) return {};
        const auto t = clock_type::now();
        const bool ok = hand();
        stats_.wait_ns += ns_since(t);
        if (!ok) return stopped();
        stats_.decoded += n;
        scheduled_ = std::max(scheduled_, stats_.decoded);
        return {};
    }

    // Whether `out_size` more bytes stay within the output cap: a unit that
    // could cross it streams instead, so that the consumer's own check stops it early.
    bool within_output_cap(std::uint64_t out_size) const {
        return options_.max_output == 0 || scheduled_ + out_size <= options_.max_output;
    }

    xz_output& out_;
    xz_decode_options options_;
    xz_decode_stats stats_;
    reader in_;
    const char* truncated_;        // the message for input that ends early
    std::uint64_t scheduled_ = 0;  // output handed on, or due from units in flight
    std::size_t max_pending_ = 1;
    std::uint64_t max_block_ = kMaxParallelBlock;
    std::deque<std::shared_ptr<pool_unit>> pending_;
};

// ---- xz: the container, its blocks on the pool ------------------------------------
class block_decoder : unit_scheduler {
public:
    block_decoder(xz_input& in, xz_output& out, const xz_decode_options& options)
        : unit_scheduler(in, out, options, "truncated xz data") {
        max_state_ = options.memory ? std::max<std::uint64_t>(options.memory->limit(), kMinStateLimit)
                                    : kMaxParallelBlock;
    }

    result<xz_decode_stats> run() {
        for (bool first = true;; first = false) {
            REDIST_TRY_VOID(stream(first));
            ++stats_.streams;
            REDIST_TRY(const bool more, skip_padding());
            if (!more) return stats_;
        }
    }

private:
    // One stream, from its header (the first 4 bytes already read when it
    // follows stream padding) to its footer.
    result<void> stream(bool first) {
        std::array<std::uint8_t, kStreamHeaderSize> header{};
        const std::size_t have = first ? 0 : 4;
        if (!first) std::memcpy(header.data(), next_magic_.data(), 4);
        REDIST_TRY_VOID(read_exact(header.data() + have, header.size() - have));
        lzma_stream_flags flags{};
        if (const lzma_ret r = lzma_stream_header_decode(&flags, header.data()); r != LZMA_OK)
            return first ? lzma_failure(r) : bad("corrupt xz data");
        if (!lzma_check_is_supported(flags.check)) return bad("unsupported xz check");
        const std::unique_ptr<lzma_index_hash, index_hash_end> hashes(lzma_index_hash_init(nullptr, nullptr));
        if (!hashes) return make_error(error_code::internal, "xz decoder out of memory");
        for (;;) {
            std::uint8_t size_byte = 0;
            REDIST_TRY_VOID(read_exact(&size_byte, 1));
            if (size_byte == 0) break;  // the index indicator
            REDIST_TRY_VOID(block(size_byte, flags.check, hashes.get()));
        }
        REDIST_TRY_VOID(drain());
        REDIST_TRY_VOID(index(hashes.get()));
        return footer(flags, hashes.get());
    }

    struct index_hash_end {
        void operator()(lzma_index_hash* hash) const noexcept { lzma_index_hash_end(hash, nullptr); }
    };

    result<void> block(std::uint8_t size_byte, lzma_check check, lzma_index_hash* hashes) {
        std::array<std::uint8_t, LZMA_BLOCK_HEADER_SIZE_MAX> header{};
        header[0] = size_byte;
        const std::uint32_t header_size = lzma_block_header_size_decode(size_byte);
        REDIST_TRY_VOID(read_exact(header.data() + 1, header_size - 1));
        auto options = std::make_unique<block_options>();
        if (const lzma_ret r = options->decode(header.data(), header_size, check); r != LZMA_OK) return lzma_failure(r);
        const std::uint64_t state = lzma_raw_decoder_memusage(options->filters.data());
        if (state == UINT64_MAX) return bad("unsupported xz options");
        if (goes_to_pool(*options, state)) return to_pool(std::move(options), state, hashes);
        return streamed(*options, state, hashes);
    }
    bool goes_to_pool(const block_options& o, std::uint64_t state) const {
        if (!options_.pool || !o.sizes_known()) return false;
        const std::uint64_t body = o.body_size();
        // Each term is checked alone first, so that the sum cannot wrap.
        if (body == 0 || body > max_block_ || o.block.uncompressed_size > max_block_ || state > max_block_)
            return false;
        if (body + o.block.uncompressed_size + state > max_block_) return false;
        return within_output_cap(o.block.uncompressed_size);
    }

    result<void> to_pool(std::unique_ptr<block_options> options, std::uint64_t state, lzma_index_hash* hashes) {
        auto job = std::make_shared<xz_block>();
        const std::uint64_t body = options->body_size();
        const std::uint64_t out_size = options->block.uncompressed_size;
        if (lzma_index_hash_append(hashes, lzma_block_unpadded_size(&options->block), out_size) != LZMA_OK)
            return bad("corrupt xz data");
        // Room in this stream's window, then memory: both wait for earlier
        // blocks, which this thread hands on meanwhile.
        REDIST_TRY_VOID(make_room());
        REDIST_TRY_VOID(lease_input(*job, body));
        job->input.size = static_cast<std::size_t>(body);
        REDIST_TRY_VOID(read_body(job->input.bytes.get(), job->input.size));
        const std::uint64_t extra_state = state > options_.worker_state_allowance
                                              ? state - options_.worker_state_allowance
                                              : 0;
        REDIST_TRY_VOID(lease_output(*job, out_size, extra_state));
        job->keep_decoder = state <= options_.worker_state_allowance;
        job->options = std::move(options);
        post(job, "xz block began", "xz block decoded");
        return {};
    }
    // A block decoded as it streams in, on this thread, after the blocks before it.
    result<void> streamed(block_options& options, std::uint64_t state, lzma_index_hash* hashes) {
        // liblzma's block decoder has no memory limit of its own: a header
        // may ask for a 4 GiB dictionary, which it would allocate.
        if (state > max_state_) return bad("xz data needs more memory than allowed (see --max-memory)");
        REDIST_TRY_VOID(drain());
        memory_gate::lease lease;
        if (options_.memory) {
            lease = options_.memory->acquire(state + options_.stream_chunk, [&] { return stopping(); });
            if (!lease) return stopped();
        }
        owned_lzma_stream decoder;
        lzma_stream& strm = decoder.strm;
        if (const lzma_ret r = lzma_block_decoder(&strm, &options.block); r != LZMA_OK) return lzma_failure(r);
        byte_buffer out = out_.spare(options_.stream_chunk);
        strm.next_out = reinterpret_cast<std::uint8_t*>(out.bytes.get());
        strm.avail_out = out.capacity;
        for (;;) {
            if (stopping()) return stopped();
            if (auto s = in_.fill(); s != xz_input::status::ok) return input_error(s);
            strm.next_in = in_.here();
            strm.avail_in = in_.available();
            const auto t = clock_type::now();
            const lzma_ret r = lzma_code(&strm, LZMA_RUN);
            stats_.busy_ns += ns_since(t);
            in_.consume(in_.available() - strm.avail_in);
            if (r != LZMA_OK && r != LZMA_STREAM_END) return lzma_failure(r);
            if (strm.avail_out == 0 || r == LZMA_STREAM_END) {
                out.size = out.capacity - strm.avail_out;
                if (auto p = put(std::move(out)); !p) return p;
                out = out_.spare(options_.stream_chunk);
                strm.next_out = reinterpret_cast<std::uint8_t*>(out.bytes.get());
                strm.avail_out = out.capacity;
            }
            if (r == LZMA_STREAM_END) break;
        }
        ++stats_.stream_blocks;
        // lzma_code filled in the sizes the header left out.
        if (lzma_index_hash_append(hashes, lzma_block_unpadded_size(&options.block), options.block.uncompressed_size) !=
            LZMA_OK)
            return bad("corrupt xz data");
        return {};
    }

    // The index, from the indicator byte (already read) on.
    result<void> index(lzma_index_hash* hashes) {
        const std::uint8_t indicator = 0;
        std::size_t pos = 0;
        lzma_ret r = lzma_index_hash_decode(hashes, &indicator, &pos, 1);
        while (r == LZMA_OK) {
            if (auto s = in_.fill(); s != xz_input::status::ok) return input_error(s);
            pos = 0;
            r = lzma_index_hash_decode(hashes, in_.here(), &pos, in_.available());
            in_.consume(pos);
        }
        if (r != LZMA_STREAM_END) return bad("corrupt xz data");
        return {};
    }

    result<void> footer(const lzma_stream_flags& header_flags, lzma_index_hash* hashes) {
        std::array<std::uint8_t, kStreamHeaderSize> footer{};
        REDIST_TRY_VOID(read_exact(footer.data(), footer.size()));
        lzma_stream_flags flags{};
        if (lzma_stream_footer_decode(&flags, footer.data()) != LZMA_OK ||
            lzma_stream_flags_compare(&header_flags, &flags) != LZMA_OK ||
            flags.backward_size != lzma_index_hash_size(hashes))
            return bad("corrupt xz data");
        return {};
    }

    // Stream padding: zero bytes in groups of 4. True if another stream follows
    // (its first 4 bytes are in next_magic_), false at the end of the input.
    result<bool> skip_padding() {
        for (;;) {
            const auto s = in_.fill();
            if (s == xz_input::status::stopped) return stopped();
            if (s == xz_input::status::end) return false;
            if (auto r = in_.read(next_magic_.data(), 4); r != xz_input::status::ok)
                return r == xz_input::status::stopped ? stopped() : bad("corrupt xz data");
            if (next_magic_ != std::array<std::uint8_t, 4>{}) return true;
        }
    }

    std::uint64_t max_state_ = kMaxParallelBlock;  // a streamed block's decoder memory
    std::array<std::uint8_t, 4> next_magic_{};
};
// ---- zstd: frames with a content size on the pool ----------------------------------
// A zstd file is frames, one after another, with nothing between them. A
// frame header records its content size when the writer knew it (zstd -c of
// a file, ZSTD_compress2, recompress_xz_to_zstd), but never the frame's
// compressed size: the frame's blocks are walked as they arrive (each block
// header says how many bytes follow) to find where it ends. A frame that
// does not go to the pool (goes_to_pool) streams on the calling thread with
// the run's one streaming decoder, which also gives every malformed header
// or block its libzstd error: a frame whose walk finds a reserved block
// type, an oversized block, or more bytes than its content size can need
// streams from the bytes read so far.
class frame_decoder : unit_scheduler {
public:
    frame_decoder(xz_input& in, xz_output& out, const xz_decode_options& options)
        : unit_scheduler(in, out, options, "truncated zstd stream"), dctx_(ZSTD_createDCtx(), ZSTD_freeDCtx) {}

    result<xz_decode_stats> run() {
        if (!dctx_ || ZSTD_isError(ZSTD_DCtx_setParameter(dctx_.get(), ZSTD_d_windowLogMax, kZstdWindowLogMax)))
            return make_error(error_code::internal, "cannot create a zstd decoder");
        for (bool first = true;; first = false) {
            const auto s = in_.fill();
            if (s == xz_input::status::stopped) return stopped();
            if (s == xz_input::status::end) {
                if (first) return input_error(s);  // no frame at all
                break;
            }
            REDIST_TRY_VOID(frame());
            ++stats_.streams;
        }
        REDIST_TRY_VOID(drain());
        return stats_;
    }

private:
    static constexpr std::size_t kMagicSize = 4;
    static constexpr std::size_t kBlockHeaderSize = 3;
    static constexpr std::size_t kChecksumSize = 4;

    // One frame (or skippable frame), from its first byte.
    result<void> frame() {
        if (!options_.pool) return streamed(nullptr, 0);
        std::array<std::byte, ZSTD_FRAMEHEADERSIZE_MAX> header{};
        REDIST_TRY_VOID(read_body(header.data(), kMagicSize));
        std::uint32_t magic = 0;
        std::memcpy(&magic, header.data(), kMagicSize);                             // little-endian, as the format
        if (magic != ZSTD_MAGICNUMBER) return streamed(header.data(), kMagicSize);  // skippable, legacy or not zstd
        const std::size_t prefix = ZSTD_FRAMEHEADERSIZE_PREFIX(ZSTD_f_zstd1);
        REDIST_TRY_VOID(read_body(header.data() + kMagicSize, prefix - kMagicSize));
        const std::size_t header_size = ZSTD_frameHeaderSize(header.data(), prefix);
        if (ZSTD_isError(header_size) || header_size > header.size()) return streamed(header.data(), prefix);
        REDIST_TRY_VOID(read_body(header.data() + prefix, header_size - prefix));
        ZSTD_frameHeader zfh{};
        if (ZSTD_getFrameHeader(&zfh, header.data(), header_size) != 0 || !goes_to_pool(zfh))
            return streamed(header.data(), header_size);
        return to_pool(zfh, header.data(), header_size);
    }

    // The most bytes a frame of `content` bytes can take (every block raw,
    // and zstd's own bound beyond that), with its header and checksum.
    static std::uint64_t frame_bound(const ZSTD_frameHeader& zfh) {
        return zfh.headerSize + ZSTD_compressBound(static_cast<std::size_t>(zfh.frameContentSize)) + kBlockHeaderSize +
               kChecksumSize;
    }

    bool goes_to_pool(const ZSTD_frameHeader& zfh) const {
        if (zfh.frameType != ZSTD_frame || zfh.dictID != 0) return false;
        // Also excludes ZSTD_CONTENTSIZE_UNKNOWN and _ERROR, which are the largest values.
        if (zfh.frameContentSize == 0 || zfh.frameContentSize > kMaxParallelFrame) return false;
        if (zfh.windowSize > (std::uint64_t{1} << kZstdWindowLogMax)) return false;
        if (frame_bound(zfh) + zfh.frameContentSize > max_block_) return false;
        return within_output_cap(zfh.frameContentSize);
    }

    result<void> to_pool(const ZSTD_frameHeader& zfh, const std::byte* header, std::size_t header_size) {
        auto job = std::make_shared<zstd_frame>();
        REDIST_TRY_VOID(make_room());
        REDIST_TRY_VOID(lease_input(*job, frame_bound(zfh)));
        std::byte* const bytes = job->input.bytes.get();
        const std::size_t room = job->input.capacity;
        std::memcpy(bytes, header, header_size);
        std::size_t size = header_size;
        // The blocks: a 3-byte header (bit 0: last, bits 1-2: type, then the
        // size), then `size` bytes, or 1 byte for an RLE block.
        for (bool last = false; !last;) {
            if (size + kBlockHeaderSize > room) return streamed(bytes, size);
            REDIST_TRY_VOID(read_body(bytes + size, kBlockHeaderSize));
            const auto* b = reinterpret_cast<const std::uint8_t*>(bytes + size);
            const std::uint32_t block = b[0] | (std::uint32_t{b[1]} << 8) | (std::uint32_t{b[2]} << 16);
            size += kBlockHeaderSize;
            last = (block & 1u) != 0;
            const std::uint32_t type = (block >> 1) & 3u;
            const std::size_t block_size = block >> 3;
            const std::size_t body = type == 1 ? 1 : block_size;
            if (type == 3 || block_size > ZSTD_BLOCKSIZE_MAX || size + body > room) return streamed(bytes, size);
            REDIST_TRY_VOID(read_body(bytes + size, body));
            size += body;
        }
        if (zfh.checksumFlag) {
            if (size + kChecksumSize > room) return streamed(bytes, size);
            REDIST_TRY_VOID(read_body(bytes + size, kChecksumSize));
            size += kChecksumSize;
        }
        job->input.size = size;
        trim(job->input);
        REDIST_TRY_VOID(lease_output(*job, zfh.frameContentSize, 0));
        post(job, "zstd frame began", "zstd frame decoded");
        return {};
    }

    // The input was leased for the most a frame can take; a frame is mostly
    // a quarter of that. The rest is given back now, and its pages too (a
    // buffer the gate kept may have been a whole decoded frame before).
    static void trim(byte_buffer& input) {
        const std::size_t used = std::min(round_up(input.size), input.capacity);
        if (input.lease.bytes() > used) (void)input.lease.split(input.lease.bytes() - used);
        if (input.capacity > used) ::madvise(input.bytes.get() + used, input.capacity - used, MADV_DONTNEED);
    }

    // A frame decoded as it streams in, on this thread, after the frames
    // before it: its first `prefix_size` bytes at `prefix` (already read),
    // the rest from the input, up to the frame's end.
    result<void> streamed(const std::byte* prefix, std::size_t prefix_size) {
        REDIST_TRY_VOID(drain());
        byte_buffer out = out_.spare(options_.stream_chunk);
        ZSTD_outBuffer dst{out.bytes.get(), out.capacity, 0};
        ZSTD_inBuffer src{prefix, prefix_size, 0};
        bool reading = false;  // src is the input's current piece (else the prefix)
        bool full = false;     // the last call filled the output: more may be waiting in the decoder
        for (;;) {
            if (stopping()) return stopped();
            if (src.pos == src.size && !full) {
                if (reading) in_.consume(src.size);
                if (auto s = in_.fill(); s != xz_input::status::ok) return input_error(s);
                src = ZSTD_inBuffer{in_.here(), in_.available(), 0};
                reading = true;
            }
            const auto t = clock_type::now();
            const std::size_t hint = ZSTD_decompressStream(dctx_.get(), &dst, &src);
            stats_.busy_ns += ns_since(t);
            if (ZSTD_isError(hint)) return zstd_failure(ZSTD_getErrorName(hint));
            full = dst.pos == dst.size;
            if (full || hint == 0) {
                out.size = dst.pos;
                if (auto p = put(std::move(out)); !p) return p;
                if (hint == 0) break;  // the frame ended, and all of it is handed on
                out = out_.spare(options_.stream_chunk);
                dst = ZSTD_outBuffer{out.bytes.get(), out.capacity, 0};
            }
        }
        if (reading) in_.consume(src.pos);
        ++stats_.stream_blocks;
        return {};
    }

    zstd_dctx dctx_;
};

}  // namespace

result<xz_decode_stats> decode_xz(xz_input& in, xz_output& out, const xz_decode_options& options) {
    try {
        block_decoder decoder(in, out, options);
        return decoder.run();
    } catch (const std::bad_alloc&) {
        return make_error(error_code::internal, "xz decoder out of memory");
    }
}

result<xz_decode_stats> decode_zstd(xz_input& in, xz_output& out, const xz_decode_options& options) {
    try {
        frame_decoder decoder(in, out, options);
        return decoder.run();
    } catch (const std::bad_alloc&) {
        return make_error(error_code::internal, "zstd decoder out of memory");
    }
}

}  // namespace redist
