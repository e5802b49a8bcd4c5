// Internal: .xz and .zst decoders that decode the independent units of one
// stream (xz blocks, zstd frames) on the run's shared worker pool, and hand
// the output on in stream order. Both formats share one scheduler (the
// window of units in flight, the memory leases, the hand-off in order); what
// differs is how the container is parsed and how one unit is decoded. zstd:
// see decode_zstd below.
//
// Why not lzma_stream_decoder_mt: its threads are its own, fixed when it
// starts. With 14 artifacts in flight, each had to be given a fixed share of
// the cores up front, so when the small ones finished, the largest archive
// still decoded on its few threads while the other cores idled (1.7x the
// all-at-once floor on 16 cores). Here every artifact's blocks queue on the
// same pool, so the cores go wherever blocks are waiting, and one memory gate
// bounds what all of them hold (see memory_gate.hpp).
//
// How: the calling thread (the unpacker's decoder thread) parses the .xz
// container itself: stream header, block headers, index, footer, padding,
// concatenated streams. A block whose header records its compressed and
// uncompressed sizes (xz -T, and NVIDIA's multi-block archives) is read
// whole and decoded by one pool task (lzma_block_decoder on the worker's kept
// stream), and handed on whole when it is done, or in parts as it decodes if
// it is the block that the stream waits for (see part_bytes). A block without
// sizes (a single-threaded xz's one block) is decoded on the calling thread
// as it streams, as a plain stream decoder would. Each block's check
// is verified by liblzma; the index is verified against the blocks with
// lzma_index_hash, and the footer against the header and the index size.
//
// The input is untrusted until the archive's SHA-256 is known, so nothing is
// allocated from a size in the data without a cap: a block goes to the pool
// only when its sizes are declared, within kMaxParallelBlock, and within the
// output cap; anything else streams, and streaming holds one output chunk.
// A streamed block's decoder (its dictionary) may use the gate's limit, or
// 96 MiB if that is more (512 MiB without a gate); a header that asks for
// more is refused ("xz data needs more memory than allowed").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>

#include "redist/error.hpp"
#include "support/memory_gate.hpp"

namespace redist {

class work_pool;

// Frees a byte_buffer's bytes, or gives a mapping back to the memory gate it
// came from (which keeps it for reuse or unmaps it).
struct buffer_deleter {
    memory_gate* home = nullptr;
    std::size_t capacity = 0;
    void operator()(std::byte* bytes) const noexcept {
        if (home) home->keep(bytes, capacity);
        else delete[] bytes;
    }
};

// A heap buffer without std::vector's zero-fill. A decoded block carries the
// lease of the memory it holds, given back when the buffer is freed.
struct byte_buffer {
    std::unique_ptr<std::byte[], buffer_deleter> bytes;
    std::size_t size = 0;
    std::size_t capacity = 0;
    memory_gate::lease lease;  // declared last: given back before the bytes go to the gate

    static byte_buffer make(std::size_t capacity) {
        byte_buffer b;
        b.bytes.reset(std::make_unique_for_overwrite<std::byte[]>(capacity).release());
        b.capacity = capacity;
        return b;
    }
    // A mapping the gate kept (which may be a little larger), with a lease of
    // its size, or a new one, without a lease (the caller acquires it); either
    // goes back to the gate when freed.
    static byte_buffer from_gate(memory_gate& gate, std::size_t capacity) {
        byte_buffer b;
        // A block may decode to nothing (a multi-block writer that flushed an
        // empty block): no bytes, no mapping (mmap refuses a length of 0).
        if (capacity == 0) return b;
        std::byte* bytes = gate.take(capacity, b.lease);
        if (!bytes) bytes = memory_gate::map(capacity);
        b.bytes = std::unique_ptr<std::byte[], buffer_deleter>(bytes, buffer_deleter{&gate, capacity});
        b.capacity = capacity;
        return b;
    }
};

// Where the compressed bytes come from, a piece at a time.
class xz_input {
public:
    // woken: no bytes yet, but wake() was called (only when `wakeable`).
    enum class status : std::uint8_t { ok, end, stopped, woken };
    virtual ~xz_input() = default;
    // The next piece (size > 0 when ok), valid until the next call.
    // `wakeable`: wake() ends the wait early, with `woken`.
    virtual status next(const std::byte*& data, std::size_t& size, bool wakeable) = 0;
    // Called (from a pool worker) when one of the stream's blocks is
    // decoded: a decoder waiting for a slow download hands it on rather than
    // holding it (and its memory) until the next bytes come. Any thread.
    virtual void wake() noexcept {}
};

// Where the decoded bytes go, in stream order.
class xz_output {
public:
    virtual ~xz_output() = default;
    // False stops decoding (the consumer failed or was cancelled).
    virtual bool put(byte_buffer&& decoded) = 0;
    // `size` bytes at `offset` of a decoded block that is handed on in parts
    // (the block the stream waits for, while a pool worker still decodes its
    // later bytes: see xz_decode_options::part_bytes). Every part holds the
    // block, whose buffer and lease go when the last part does; the bytes of
    // this part are final, the block's `size` is not. The default copies.
    virtual bool put_part(const std::shared_ptr<const byte_buffer>& block, std::size_t offset, std::size_t size) {
        byte_buffer copy = byte_buffer::make(size);
        std::memcpy(copy.bytes.get(), block->bytes.get() + offset, size);
        copy.size = size;
        return put(std::move(copy));
    }
    // A buffer for streamed output; an implementation may recycle them.
    virtual byte_buffer spare(std::size_t capacity) { return byte_buffer::make(capacity); }
};

struct xz_decode_options {
    // Null: every block is decoded on the calling thread.
    work_pool* pool = nullptr;
    // Required with a pool: bounds the bytes that pool blocks hold, from their
    // compressed copy to the moment their output buffer is freed.
    memory_gate* memory = nullptr;
    // Decoder memory each pool worker keeps between blocks, which the owner
    // has counted already: a pool block is charged only what its decoder
    // needs beyond it.
    std::uint64_t worker_state_allowance = 0;
    // The pool runs the blocks of a higher priority first (work_pool::post).
    // The unpacker passes the archive's size: with every download sharing the
    // link, the largest archive's last bytes come last, so its blocks must
    // not queue behind those of archives that end sooner.
    std::uint64_t priority = 0;
    // Blocks in flight for this stream at most (0 = the pool's threads and a
    // quarter more). The extra blocks are read ahead while every worker is
    // busy, so that a download does not stall behind the first blocks (16
    // cores); on 2 cores, 2 more cost 50 MiB of decoded blocks and gained
    // nothing.
    std::size_t max_pending = 0;
    // A block whose decoding would need more (input, output, dictionary)
    // streams on the calling thread instead. 0 = kMaxParallelBlock.
    std::uint64_t max_block_memory = 0;
    // With a cap on the output (0 = none), a block that could cross it streams,
    // so the consumer's own check stops it early.
    std::uint64_t max_output = 0;
    std::size_t stream_chunk = 1u << 20;  // output piece size when streaming
    // The block the stream waits for is handed on in parts of this many
    // bytes while a pool worker decodes it (put_part), rather than whole when
    // it ends: a slow block (one of incompressible data decodes at 25 MB/s)
    // holds up everything after it, and what the consumer does with its
    // bytes (the SHA-256 of the file they belong to, in order) is then done
    // by the time it ends. 0: whole blocks only.
    std::size_t part_bytes = 2u << 20;
    // Called from the pool worker after each part it decodes (tests). Empty:
    // no calls. Must not throw.
    std::function<void()> part_decoded;
    // Set by the owner to stop: waits end and decode_xz returns "stopped".
    // The owner must also call memory->notify() after setting it.
    const std::atomic<bool>* stop = nullptr;
    // Called from the pool worker as each pool block begins and ends decoding
    // ("xz block began" / "xz block decoded"), for --profile's timeline.
    // Empty: no calls. Must not throw.
    std::function<void(const char* event)> mark;
};

constexpr std::uint64_t kMaxParallelBlock = std::uint64_t{512} << 20;
// A zstd frame whose content size is larger streams (recompress_xz_to_zstd
// writes frames of 8 MiB).
constexpr std::uint64_t kMaxParallelFrame = std::uint64_t{64} << 20;

struct xz_decode_stats {
    std::uint64_t decoded = 0;        // bytes handed to put()
    std::uint64_t pool_blocks = 0;    // blocks decoded by pool tasks
    std::uint64_t stream_blocks = 0;  // blocks decoded on the calling thread
    std::uint64_t parts = 0;          // put_part calls (pool blocks handed on in parts)
    std::uint64_t streams = 0;
    std::uint64_t busy_ns = 0;  // decoding, on any thread
    std::uint64_t wait_ns = 0;  // the calling thread waiting for input, memory, blocks or the consumer
};

// Decodes a whole .xz file (one or more streams, with stream padding) from
// `in` to `out`. Errors are error_code::bad_archive with liblzma's reason
// ("corrupt xz data", "truncated xz data", ...), or error_code::cancelled
// when stopped (by the flag, the input or the output). Pool tasks still
// running when it returns hold only their own buffers and leases.
result<xz_decode_stats> decode_xz(xz_input& in, xz_output& out, const xz_decode_options& options);

// Decodes a whole .zst file (frames and skippable frames) from `in` to `out`,
// with the same options. A frame whose header records its content size
// (within kMaxParallelFrame, the 128 MiB window cap, max_block_memory and
// max_output) is read whole (its blocks walked as they arrive, to find its
// end) and decoded by one pool task into a buffer of exactly that size; any
// other frame, and every frame without a pool, streams on the calling thread
// with one libzstd streaming decoder (window at most 128 MiB; part_bytes and
// worker_state_allowance do not apply). Stats: pool_blocks and stream_blocks
// count frames, streams counts frames of either kind. Errors: bad_archive
// ("zstd: " and libzstd's reason, or "truncated zstd stream"), or cancelled.
result<xz_decode_stats> decode_zstd(xz_input& in, xz_output& out, const xz_decode_options& options);

}  // namespace redist
