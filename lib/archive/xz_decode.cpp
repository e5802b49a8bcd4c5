// xz_decode.cpp — see xz_decode.hpp.
//
// The .xz container (https://tukaani.org/xz/xz-file-format.txt):
//   stream  = header(12) block* index footer(12), then stream padding (zero
//             bytes, a multiple of 4), then optionally another stream
//   block   = header((b+1)*4 bytes, b the first byte, never 0) compressed
//             data, padding to a multiple of 4, check (0/4/8/32 bytes)
//   index   = starts with a 0 byte where a block header would start
#include "archive/xz_decode.hpp"

#include <lzma.h>

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

constexpr std::size_t kBufferGrain = 1u << 20;
std::size_t round_up(std::uint64_t n) {
    return static_cast<std::size_t>((n + kBufferGrain - 1) / kBufferGrain * kBufferGrain);
}

error bad(const char* what) { return make_error(error_code::bad_archive, what); }
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
    xz_input::status read(std::byte* dst, std::size_t n) {
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

error input_error(xz_input::status s) { return s == xz_input::status::stopped ? stopped() : bad("truncated xz data"); }

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

    // `header` holds block.header_size bytes, the size byte first.
    lzma_ret decode(const std::uint8_t* header, std::uint32_t header_size, lzma_check check) {
        for (auto& f : filters) f = lzma_filter{LZMA_VLI_UNKNOWN, nullptr};
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

// ---- a block decoded by a pool task -------------------------------------------
struct pool_block {
    block_options options;
    byte_buffer input;   // body: compressed data, padding, check
    byte_buffer output;  // room for out_size bytes, with the output's lease
    std::size_t out_size = 0;
    memory_gate::lease work;  // decoder state beyond the worker's allowance, given back when the task ends
    bool done = false;        // under the gate's lock
    lzma_ret result = LZMA_OK;
    std::uint64_t busy_ns = 0;
    // Whether the worker may keep this block's decoder afterwards: only when
    // its memory is within what the budget set aside per worker.
    bool keep_decoder = true;
    // Output bytes decoded so far, published after each part; the decoder
    // thread hands them on while it waits for this block (watched). Both
    // sequentially consistent: a worker that sees `watched` false has
    // published what the waiter's next look will see, so it need not wake it.
    std::atomic<std::size_t> produced{0};
    std::atomic<bool> watched{false};

    struct part_options {
        std::size_t bytes = 0;  // 0: in one go
        memory_gate* gate = nullptr;
        const std::function<void()>* decoded = nullptr;
    };

    void run(const part_options& parts) {
        const auto t = clock_type::now();
        result = decode_on_this_thread(parts);
        input = {};
        busy_ns = ns_since(t);
    }

private:
    // One decoder per pool worker, kept between blocks: re-initializing a
    // block decoder on the same lzma_stream reuses its dictionary when the
    // size matches, where lzma_block_buffer_decode would allocate (and
    // page-fault) 8 MiB or more for every block.
    struct worker_decoder {
        lzma_stream strm = LZMA_STREAM_INIT;
        worker_decoder() = default;
        worker_decoder(const worker_decoder&) = delete;
        worker_decoder& operator=(const worker_decoder&) = delete;
        ~worker_decoder() { lzma_end(&strm); }
    };

    lzma_ret decode_on_this_thread(const part_options& parts) {
        thread_local worker_decoder decoder;
        lzma_stream& strm = decoder.strm;
        lzma_ret r = lzma_block_decoder(&strm, &options.block);
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

    // The first `bytes` of the output are decoded: publishes them, and wakes
    // the decoder thread if it is waiting for this block.
    void part_done(std::size_t bytes, const part_options& parts) {
        if (produced.load(std::memory_order_relaxed) == bytes) return;  // liblzma finishing the block's check
        produced.store(bytes);
        if (watched.load()) parts.gate->signal([] {});
        if (*parts.decoded) (*parts.decoded)();
    }
};

class block_decoder {
public:
    block_decoder(xz_input& in, xz_output& out, const xz_decode_options& options)
        : out_(out), options_(options), in_(in, stats_.wait_ns) {
        max_pending_ = options.max_pending ? options.max_pending
                       : options.pool      ? options.pool->threads() + options.pool->threads() / 4
                                           : 1;
        max_block_ = options.max_block_memory ? options.max_block_memory : kMaxParallelBlock;
        max_state_ = options.memory ? std::max<std::uint64_t>(options.memory->limit(), kMinStateLimit)
                                    : kMaxParallelBlock;
        if (!options.memory) options_.pool = nullptr;
    }
    block_decoder(const block_decoder&) = delete;
    block_decoder& operator=(const block_decoder&) = delete;

    // Waits for the tasks still queued (their blocks are discarded), so that
    // nothing outlives the caller's pool and gate unintentionally.
    ~block_decoder() {
        if (options_.memory && !pending_.empty()) {
            options_.memory->wait(
                [&] { return std::all_of(pending_.begin(), pending_.end(), [](const auto& b) { return b->done; }); });
        }
    }

    result<xz_decode_stats> run() {
        bool first = true;
        for (;;) {
            if (auto r = stream(first); !r) return std::move(r).error_value();
            first = false;
            ++stats_.streams;
            auto more = skip_padding();
            if (!more) return std::move(more).error_value();
            if (!*more) break;
        }
        return stats_;
    }

private:
    bool stopping() const { return options_.stop && options_.stop->load(std::memory_order_acquire); }

    // One stream, from its header (the first 4 bytes already read when it
    // follows stream padding) to its footer.
    result<void> stream(bool first) {
        std::array<std::uint8_t, kStreamHeaderSize> header{};
        const std::size_t have = first ? 0 : 4;
        if (!first) std::memcpy(header.data(), next_magic_.data(), 4);
        if (auto s = in_.read(reinterpret_cast<std::byte*>(header.data() + have), header.size() - have);
            s != xz_input::status::ok)
            return input_error(s);
        lzma_stream_flags flags{};
        if (const lzma_ret r = lzma_stream_header_decode(&flags, header.data()); r != LZMA_OK) {
            return first ? lzma_failure(r) : bad("corrupt xz data");
        }
        if (!lzma_check_is_supported(flags.check)) return bad("unsupported xz check");
        index_hash hashes;
        for (;;) {
            std::uint8_t size_byte = 0;
            if (auto s = in_.read(reinterpret_cast<std::byte*>(&size_byte), 1); s != xz_input::status::ok) {
                return input_error(s);
            }
            if (size_byte == 0) break;  // the index indicator
            if (auto r = block(size_byte, flags.check, hashes.get()); !r) return r;
        }
        if (auto r = drain(); !r) return r;
        if (auto r = index(hashes.get()); !r) return r;
        return footer(flags, hashes.get());
    }

    struct index_hash {
        lzma_index_hash* hash = lzma_index_hash_init(nullptr, nullptr);
        index_hash() = default;
        index_hash(const index_hash&) = delete;
        index_hash& operator=(const index_hash&) = delete;
        ~index_hash() { lzma_index_hash_end(hash, nullptr); }
        lzma_index_hash* get() const { return hash; }
    };

    result<void> block(std::uint8_t size_byte, lzma_check check, lzma_index_hash* hashes) {
        if (!hashes) return make_error(error_code::internal, "xz decoder out of memory");
        std::array<std::uint8_t, LZMA_BLOCK_HEADER_SIZE_MAX> header{};
        header[0] = size_byte;
        const std::uint32_t header_size = lzma_block_header_size_decode(size_byte);
        if (auto s = in_.read(reinterpret_cast<std::byte*>(header.data() + 1), header_size - 1);
            s != xz_input::status::ok)
            return input_error(s);
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
        return options_.max_output == 0 || scheduled_ + o.block.uncompressed_size <= options_.max_output;
    }

    // The head block is finished (or there is none): checked under the gate's lock.
    bool head_done() const { return !pending_.empty() && pending_.front()->done; }

    result<void> to_pool(std::unique_ptr<block_options> options, std::uint64_t state, lzma_index_hash* hashes) {
        auto job = std::make_shared<pool_block>();
        const std::uint64_t body = options->body_size();
        const std::uint64_t out_size = options->block.uncompressed_size;
        if (lzma_index_hash_append(hashes, lzma_block_unpadded_size(&options->block), out_size) != LZMA_OK) {
            return bad("corrupt xz data");
        }
        // Room in this stream's window, then memory: both wait for earlier
        // blocks, which this thread hands on meanwhile.
        while (pending_.size() >= max_pending_) {
            if (auto r = hand_on_head(); !r) return r;
        }
        // Capacities in whole MiB, so that kept buffers fit the next blocks.
        const std::uint64_t extra_state = state > options_.worker_state_allowance
                                              ? state - options_.worker_state_allowance
                                              : 0;
        // The compressed bytes first, read before the decoded block's room is
        // asked for: the download may still be delivering them, and while it
        // does only this smaller half is held (16 cores, 14 archives: most
        // decoders are waiting for their next block's bytes at any time).
        job->input = byte_buffer::from_gate(*options_.memory, round_up(body));
        if (auto r = cover(job->input.lease, job->input.capacity, 0); !r) return r;
        job->input.size = static_cast<std::size_t>(body);
        if (auto r = read_body(job->input.bytes.get(), job->input.size); !r) return r;
        job->output = byte_buffer::from_gate(*options_.memory, round_up(out_size));
        if (auto r = cover(job->output.lease, job->output.capacity, job->input.lease.bytes()); !r) return r;
        if (auto r = cover(job->work, extra_state, job->input.lease.bytes() + job->output.lease.bytes()); !r) {
            return r;
        }
        job->keep_decoder = state <= options_.worker_state_allowance;
        job->out_size = static_cast<std::size_t>(out_size);
        // The task's own copy of the options: block.filters points into them.
        job->options.block = options->block;
        job->options.filters = options->filters;
        job->options.block.filters = job->options.filters.data();
        for (auto& f : options->filters) f = lzma_filter{LZMA_VLI_UNKNOWN, nullptr};  // now the job's
        memory_gate* gate = options_.memory;
        xz_input* input = &in_.input();
        // options_ outlives the task: the destructor waits for every pending block.
        const auto* mark = options_.mark ? &options_.mark : nullptr;
        const pool_block::part_options parts{options_.part_bytes, gate, &options_.part_decoded};
        options_.pool->post(
            [job, gate, input, mark, parts] {
                if (mark) (*mark)("xz block began");
                job->run(parts);
                if (mark) (*mark)("xz block decoded");
                job->work.reset();
                // Under the gate's lock: the decoder outlives every block that
                // is not done yet (its destructor waits for them there).
                gate->signal([&] {
                    job->done = true;
                    input->wake();
                });
            },
            work_pool::lane::bulk, options_.priority);
        pending_.push_back(std::move(job));
        ++stats_.pool_blocks;
        scheduled_ += out_size;
        return {};
    }

    // Makes `lease` hold `bytes`, waiting for the rest; meanwhile this
    // stream's finished blocks are handed on, which is what frees memory.
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
            if (auto r = hand_on_head(); !r) return r;
        }
        return {};
    }

    // Reads a block's body, which the download may still be delivering.
    // While it waits for bytes, the blocks decoded meanwhile are handed on:
    // neither their memory nor the extractor waits for a slow download.
    result<void> read_body(std::byte* dst, std::size_t n) {
        while (n > 0) {
            if (in_.available() == 0) {
                if (auto r = hand_on_finished(); !r) return r;
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

    // Hands on the finished blocks at the head of the line; never waits for one.
    result<void> hand_on_finished() {
        while (!pending_.empty() && options_.memory->test([&] { return head_done(); })) {
            if (auto r = hand_on_head(); !r) return r;
        }
        return {};
    }

    // Waits for the oldest pool block and passes its output on: in parts
    // while it is still being decoded (part_bytes), the rest when it ends.
    result<void> hand_on_head() {
        if (pending_.empty()) return {};
        const std::shared_ptr<pool_block> job = pending_.front();
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
            if (auto r = put_part(job, handed, upto - handed); !r) return r;
            handed = upto;
            if (options_.mark) options_.mark("xz block part handed on");
        }
        pending_.pop_front();
        stats_.busy_ns += job->busy_ns;
        if (job->result != LZMA_OK) return lzma_failure(job->result);  // BUF_ERROR already mapped by the task
        if (handed == 0) return put(std::move(job->output));
        return put_part(job, handed, job->output.size - handed);
    }

    // `size` bytes at `offset` of a block's output, as a part that holds the block.
    result<void> put_part(const std::shared_ptr<pool_block>& job, std::size_t offset, std::size_t size) {
        return hand_to_output(size, [&] {
            const bool ok = out_.put_part(std::shared_ptr<const byte_buffer>(job, &job->output), offset, size);
            stats_.parts += ok ? 1 : 0;
            return ok;
        });
    }

    result<void> drain() {
        while (!pending_.empty()) {
            if (auto r = hand_on_head(); !r) return r;
        }
        return {};
    }

    result<void> put(byte_buffer&& buffer) {
        const std::size_t n = buffer.size;
        return hand_to_output(n, [&] { return out_.put(std::move(buffer)); });
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

    // A block decoded as it streams in, on this thread, after the blocks before it.
    result<void> streamed(block_options& options, std::uint64_t state, lzma_index_hash* hashes) {
        // liblzma's block decoder has no memory limit of its own: a header
        // may ask for a 4 GiB dictionary, which it would allocate.
        if (state > max_state_) return bad("xz data needs more memory than allowed (see --max-memory)");
        if (auto r = drain(); !r) return r;
        memory_gate::lease lease;
        if (options_.memory) {
            lease = options_.memory->acquire(state + options_.stream_chunk, [&] { return stopping(); });
            if (!lease) return stopped();
        }
        lzma_stream strm = LZMA_STREAM_INIT;
        if (const lzma_ret r = lzma_block_decoder(&strm, &options.block); r != LZMA_OK) return lzma_failure(r);
        struct end_guard {
            lzma_stream* s;
            ~end_guard() { lzma_end(s); }
        } guard{&strm};
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
            LZMA_OK) {
            return bad("corrupt xz data");
        }
        return {};
    }

    // The index, from the indicator byte (already read) on.
    result<void> index(lzma_index_hash* hashes) {
        if (!hashes) return make_error(error_code::internal, "xz decoder out of memory");
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
        if (auto s = in_.read(reinterpret_cast<std::byte*>(footer.data()), footer.size()); s != xz_input::status::ok) {
            return input_error(s);
        }
        lzma_stream_flags flags{};
        if (lzma_stream_footer_decode(&flags, footer.data()) != LZMA_OK ||
            lzma_stream_flags_compare(&header_flags, &flags) != LZMA_OK ||
            flags.backward_size != lzma_index_hash_size(hashes)) {
            return bad("corrupt xz data");
        }
        return {};
    }

    // Stream padding: zero bytes in groups of 4. True if another stream follows
    // (its first 4 bytes are in next_magic_), false at the end of the input.
    result<bool> skip_padding() {
        for (;;) {
            const auto s = in_.fill();
            if (s == xz_input::status::stopped) return stopped();
            if (s == xz_input::status::end) return false;
            if (auto r = in_.read(reinterpret_cast<std::byte*>(next_magic_.data()), 4); r != xz_input::status::ok) {
                return r == xz_input::status::stopped ? stopped() : bad("corrupt xz data");
            }
            if (next_magic_ != std::array<std::uint8_t, 4>{}) return true;
        }
    }

    xz_output& out_;
    xz_decode_options options_;
    xz_decode_stats stats_;
    reader in_;
    std::uint64_t scheduled_ = 0;  // output handed on, or due from blocks in flight
    std::size_t max_pending_ = 1;
    std::uint64_t max_block_ = kMaxParallelBlock;
    std::uint64_t max_state_ = kMaxParallelBlock;  // a streamed block's decoder memory
    std::deque<std::shared_ptr<pool_block>> pending_;
    std::array<std::uint8_t, 4> next_magic_{};
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

}  // namespace redist
