// Tests for lib/archive/xz_decode.hpp: the block-parallel .xz decoder.
//
// Every input is made here with liblzma itself: the multi-threaded encoder
// with a small block size (blocks whose headers carry both sizes, which go to
// the pool), the single-threaded stream encoder (one block without sizes,
// which streams) and the buffer encoder (one block with sizes). The data is
// pseudo-random but compressible, from a fixed seed. The input is handed over
// in pieces of 1 byte, 7 bytes, 64 KiB or all at once. Checks cover:
//  - output identical to the original with and without a pool, with a tiny
//    memory limit, with max_pending = 1, and what the stats count;
//  - concatenated streams with and without stream padding;
//  - corrupt input: empty, garbage, every truncation, flipped bytes in each
//    part of the container, bad padding, an index that disagrees with the
//    blocks, edited block headers: always bad_archive, never a crash or hang;
//    every single-byte flip agrees with liblzma's own stream decoder;
//  - cancellation by the output, the stop flag and the input;
//  - the memory gate: nothing held once decode_xz returned and the pool is
//    gone, and a kept output buffer keeps its lease.
#include <catch2/catch.hpp>

#include <lzma.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "archive/xz_decode.hpp"
#include "support/memory_gate.hpp"
#include "support/work_pool.hpp"

using redist::byte_buffer;
using redist::error_code;
using redist::memory_gate;
using redist::work_pool;
using redist::xz_decode_options;
using redist::xz_decode_stats;

namespace {

using bytes = std::vector<std::uint8_t>;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;
// A piece size: the whole input at once. (In GENERATE, write as<std::size_t>{}
// first: Catch 2.13 would keep a leading lvalue such as kAll by reference.)
constexpr std::size_t kAll = 0;
constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();

// Words from a small random vocabulary, picked by xorshift: compresses to
// about a third, with matches at every distance.
bytes make_data(std::size_t size, std::uint64_t seed) {
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    auto next = [&x] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
    };
    std::vector<std::string> words;
    for (int i = 0; i < 200; ++i) {
        std::string w(3 + next() % 9, 'a');
        for (auto& c : w) c = static_cast<char>('a' + next() % 26);
        words.push_back(w);
    }
    bytes data;
    data.reserve(size + 16);
    while (data.size() < size) {
        const auto r = next();
        const std::string& w = words[r % words.size()];
        data.insert(data.end(), w.begin(), w.end());
        if (r % 13 == 0) data.push_back(static_cast<std::uint8_t>(r >> 32));  // a stray binary byte
        data.push_back(r % 11 == 0 ? '\n' : ' ');
    }
    data.resize(size);
    return data;
}

bytes run_encoder(lzma_stream& s, const bytes& data) {
    bytes out(data.size() + data.size() / 2 + 64 * kKiB);
    s.next_in = data.data();
    s.avail_in = data.size();
    s.next_out = out.data();
    s.avail_out = out.size();
    lzma_ret ret = LZMA_OK;
    while ((ret = lzma_code(&s, LZMA_FINISH)) == LZMA_OK) {
        REQUIRE(s.avail_out > 0);
    }
    REQUIRE(ret == LZMA_STREAM_END);
    out.resize(out.size() - s.avail_out);
    lzma_end(&s);
    return out;
}

// Blocks of at most `block_size` bytes, both sizes in every block header (as xz -T writes).
bytes encode_blocks(const bytes& data, std::uint64_t block_size, lzma_check check = LZMA_CHECK_CRC64) {
    // A 64 KiB dictionary: the blocks are small, and a decoder allocates its
    // whole dictionary up front, which would dominate the run time of the
    // tests that decode thousands of damaged copies.
    lzma_options_lzma lzma{};
    REQUIRE(lzma_lzma_preset(&lzma, 1) == false);
    lzma.dict_size = 64 * kKiB;
    lzma_filter filters[] = {{LZMA_FILTER_LZMA2, &lzma}, {LZMA_VLI_UNKNOWN, nullptr}};
    lzma_stream s = LZMA_STREAM_INIT;
    lzma_mt mt{};
    mt.threads = 2;
    mt.block_size = block_size;
    mt.filters = filters;
    mt.check = check;
    REQUIRE(lzma_stream_encoder_mt(&s, &mt) == LZMA_OK);
    return run_encoder(s, data);
}

// One block without sizes in its header (as a single-threaded xz writes).
bytes encode_streamed(const bytes& data) {
    lzma_stream s = LZMA_STREAM_INIT;
    REQUIRE(lzma_easy_encoder(&s, 1, LZMA_CHECK_CRC32) == LZMA_OK);
    return run_encoder(s, data);
}

// One block with both sizes in its header.
bytes encode_buffer(const bytes& data) {
    bytes out(lzma_stream_buffer_bound(data.size()));
    std::size_t pos = 0;
    REQUIRE(lzma_easy_buffer_encode(1, LZMA_CHECK_SHA256, nullptr, data.data(), data.size(), out.data(), &pos,
                                    out.size()) == LZMA_OK);
    out.resize(pos);
    return out;
}

// One stream whose blocks hold `pieces` in order, each block with both sizes
// in its header (lzma_block_buffer_encode), an empty piece an empty block:
// what a multi-block writer that flushes with nothing buffered writes.
bytes encode_block_list(const std::vector<bytes>& pieces, lzma_check check = LZMA_CHECK_CRC64) {
    lzma_stream_flags flags{};
    flags.version = 0;
    flags.check = check;
    bytes out(LZMA_STREAM_HEADER_SIZE);
    REQUIRE(lzma_stream_header_encode(&flags, out.data()) == LZMA_OK);
    lzma_index* index = lzma_index_init(nullptr);
    REQUIRE(index != nullptr);
    for (const bytes& piece : pieces) {
        lzma_options_lzma lzma{};
        REQUIRE(lzma_lzma_preset(&lzma, 1) == false);
        lzma.dict_size = 64 * kKiB;
        lzma_filter filters[] = {{LZMA_FILTER_LZMA2, &lzma}, {LZMA_VLI_UNKNOWN, nullptr}};
        lzma_block block{};
        block.version = 1;
        block.check = check;
        block.filters = filters;
        const std::size_t at = out.size();
        out.resize(at + lzma_block_buffer_bound(piece.size()));
        std::size_t pos = at;
        REQUIRE(lzma_block_buffer_encode(&block, nullptr, piece.data(), piece.size(), out.data(), &pos, out.size()) ==
                LZMA_OK);
        out.resize(pos);
        REQUIRE(block.uncompressed_size == piece.size());
        REQUIRE(lzma_index_append(index, nullptr, lzma_block_unpadded_size(&block), block.uncompressed_size) ==
                LZMA_OK);
    }
    const std::size_t at = out.size();
    out.resize(at + lzma_index_size(index) + LZMA_STREAM_HEADER_SIZE);
    std::size_t pos = at;
    REQUIRE(lzma_index_buffer_encode(index, out.data(), &pos, out.size()) == LZMA_OK);
    flags.backward_size = lzma_index_size(index);
    lzma_index_end(index, nullptr);
    REQUIRE(lzma_stream_footer_encode(&flags, out.data() + pos) == LZMA_OK);
    return out;
}

bytes concat(std::initializer_list<bytes> parts) {
    bytes all;
    for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
    return all;
}

// liblzma's own decoder of concatenated streams: the reference.
std::optional<bytes> reference_decode(const bytes& xz) {
    lzma_stream s = LZMA_STREAM_INIT;
    REQUIRE(lzma_stream_decoder(&s, UINT64_MAX, LZMA_CONCATENATED) == LZMA_OK);
    s.next_in = xz.data();
    s.avail_in = xz.size();
    bytes out;
    std::uint8_t buf[64 * kKiB];
    lzma_ret ret = LZMA_OK;
    do {
        s.next_out = buf;
        s.avail_out = sizeof buf;
        ret = lzma_code(&s, LZMA_FINISH);
        out.insert(out.end(), buf, buf + (sizeof buf - s.avail_out));
    } while (ret == LZMA_OK);
    lzma_end(&s);
    if (ret != LZMA_STREAM_END) return std::nullopt;
    return out;
}

// ---- the input and the output ------------------------------------------

class memory_input final : public redist::xz_input {
public:
    // piece: bytes per next() (kAll: everything at once); stopped_after:
    // pieces handed out before next() answers `stopped`.
    memory_input(const bytes& data, std::size_t piece, std::size_t stopped_after = kNever)
        : data_(data),
          piece_(piece == kAll ? std::max<std::size_t>(data.size(), 1) : piece),
          stopped_after_(stopped_after) {}

    status next(const std::byte*& data, std::size_t& size, bool /*wakeable*/) override {
        if (pieces_ >= stopped_after_) return status::stopped;
        if (pos_ >= data_.size()) {
            ++calls_after_end;
            return status::end;
        }
        size = std::min(piece_, data_.size() - pos_);
        data = reinterpret_cast<const std::byte*>(data_.data() + pos_);
        pos_ += size;
        ++pieces_;
        return status::ok;
    }

    std::size_t calls_after_end = 0;

private:
    const bytes& data_;
    std::size_t piece_;
    std::size_t stopped_after_;
    std::size_t pos_ = 0;
    std::size_t pieces_ = 0;
};

// Appends what it is given; refuses every put() after the first `accept`;
// keeps the buffers (and so their leases) when asked to.
class vector_output final : public redist::xz_output {
public:
    bool put(byte_buffer&& decoded) override {
        ++puts;
        if (refused) ++puts_after_refusal;
        if (puts > accept) {
            refused = true;
            return false;
        }
        if (decoded.size > decoded.capacity || (decoded.size > 0 && !decoded.bytes)) bad_buffer = true;
        largest = std::max(largest, decoded.size);
        const auto* p = reinterpret_cast<const std::uint8_t*>(decoded.bytes.get());
        data.insert(data.end(), p, p + decoded.size);
        if (on_put) on_put();
        if (keep) kept.push_back(std::move(decoded));
        return true;
    }

    bytes data;
    std::size_t accept = kNever;
    std::size_t puts = 0;
    std::size_t puts_after_refusal = 0;
    std::size_t largest = 0;
    bool put_part(const std::shared_ptr<const byte_buffer>& block, std::size_t offset, std::size_t size) override {
        ++parts;
        return xz_output::put_part(block, offset, size);
    }

    bool refused = false;
    bool bad_buffer = false;
    bool keep = false;
    std::atomic<std::size_t> parts{0};
    std::vector<byte_buffer> kept;
    std::function<void()> on_put;
};

// ---- one decode, with its pool and gate ------------------------------------

struct config {
    std::size_t piece = kAll;
    unsigned threads = 4;  // 0: no pool (and no gate)
    std::uint64_t limit = 64 * kMiB;
    std::size_t max_pending = 0;
    std::uint64_t max_block_memory = 0;
    std::uint64_t max_output = 0;
    std::size_t stream_chunk = 1u << 20;
    std::size_t part_bytes = 2u << 20;
    const std::atomic<bool>* stop = nullptr;
    std::size_t input_stopped_after = kNever;
    std::size_t accept_puts = kNever;
};

struct outcome {
    std::optional<redist::result<xz_decode_stats>> result;
    bytes output;
    std::uint64_t held_after = 0;  // the gate, once the pool is gone and the output freed
    std::uint64_t peak = 0;
    std::size_t puts = 0;
    std::size_t puts_after_refusal = 0;
    std::size_t largest_put = 0;
    bool bad_buffer = false;

    bool ok() const { return result->ok(); }
    const xz_decode_stats& stats() const { return result->value(); }
    const redist::error& error() const { return result->error_value(); }
};

outcome decode(const bytes& xz, const config& cfg = {}) {
    outcome o;
    memory_gate gate([limit = cfg.limit] { return limit; });
    vector_output out;
    out.accept = cfg.accept_puts;
    {
        std::optional<work_pool> pool;
        if (cfg.threads > 0) pool.emplace(cfg.threads, work_pool::limits{});
        memory_input in(xz, cfg.piece, cfg.input_stopped_after);
        xz_decode_options options;
        options.pool = pool ? &*pool : nullptr;
        options.memory = pool ? &gate : nullptr;
        options.max_pending = cfg.max_pending;
        options.max_block_memory = cfg.max_block_memory;
        options.max_output = cfg.max_output;
        options.stream_chunk = cfg.stream_chunk;
        options.part_bytes = cfg.part_bytes;
        options.stop = cfg.stop;
        o.result.emplace(redist::decode_xz(in, out, options));
    }  // the pool runs what is queued, then joins
    o.output = std::move(out.data);
    o.puts = out.puts;
    o.puts_after_refusal = out.puts_after_refusal;
    o.largest_put = out.largest;
    o.bad_buffer = out.bad_buffer;
    o.held_after = gate.held();
    o.peak = gate.peak();
    return o;
}

void check_decoded(const outcome& o, const bytes& expected) {
    if (!o.ok()) FAIL("decode_xz failed: " << o.error().describe());
    CHECK(o.output.size() == expected.size());
    CHECK(o.output == expected);
    CHECK(o.stats().decoded == expected.size());
    CHECK_FALSE(o.bad_buffer);
    CHECK(o.held_after == 0);
}

void check_bad_archive(const outcome& o) {
    REQUIRE_FALSE(o.ok());
    INFO(o.error().describe());
    CHECK(o.error().code == error_code::bad_archive);
    CHECK_FALSE(o.error().message.empty());
    CHECK(o.error().describe().find('\n') == std::string::npos);
    CHECK(o.held_after == 0);
}

void check_cancelled(const outcome& o) {
    REQUIRE_FALSE(o.ok());
    INFO(o.error().describe());
    CHECK(o.error().code == error_code::cancelled);
    CHECK(o.held_after == 0);
}

// ---- the container's layout, for targeted damage -----------------------------

std::uint32_t le32(const bytes& b, std::size_t pos) {
    return static_cast<std::uint32_t>(b[pos]) | static_cast<std::uint32_t>(b[pos + 1]) << 8 |
           static_cast<std::uint32_t>(b[pos + 2]) << 16 | static_cast<std::uint32_t>(b[pos + 3]) << 24;
}

void put_le32(bytes& b, std::size_t pos, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[pos + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
}

// A variable-length integer at `pos`: its value and where it ends.
struct vli {
    std::uint64_t value = 0;
    std::size_t pos = 0;
    std::size_t end = 0;
};

vli read_vli(const bytes& b, std::size_t pos) {
    vli v;
    v.pos = pos;
    for (int shift = 0;; shift += 7) {
        REQUIRE(pos < b.size());
        REQUIRE(shift < 63);
        const std::uint8_t byte = b[pos++];
        v.value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
        if ((byte & 0x80) == 0) break;
    }
    v.end = pos;
    return v;
}

// Changes a VLI's value by `delta`, keeping its encoded length.
void nudge_vli(bytes& b, const vli& v, int delta) {
    std::uint8_t& low = b[v.pos];
    const int seven = (low & 0x7F) + delta;
    REQUIRE(seven >= 0);
    REQUIRE(seven <= 0x7F);
    low = static_cast<std::uint8_t>((low & 0x80) | seven);
}

// Where things are in a single-stream .xz file.
struct layout {
    std::size_t block_header = 12;  // the first block's header
    std::size_t block_header_size = 0;
    vli block_compressed;        // in the first block header
    vli block_uncompressed;      // in the first block header
    std::size_t block_data = 0;  // the first block's compressed data
    std::size_t index = 0;
    std::size_t index_size = 0;
    std::uint64_t records = 0;
    vli record_unpadded;      // the index's first record
    vli record_uncompressed;  // the index's first record
    std::size_t footer = 0;
};

layout parse_layout(const bytes& xz) {
    layout l;
    REQUIRE(xz.size() >= 32);
    l.footer = xz.size() - 12;
    REQUIRE(xz[xz.size() - 2] == 'Y');
    REQUIRE(xz[xz.size() - 1] == 'Z');
    l.index_size = (static_cast<std::size_t>(le32(xz, l.footer + 4)) + 1) * 4;
    l.index = l.footer - l.index_size;
    REQUIRE(xz[l.index] == 0x00);
    const vli count = read_vli(xz, l.index + 1);
    l.records = count.value;
    REQUIRE(l.records >= 1);
    l.record_unpadded = read_vli(xz, count.end);
    l.record_uncompressed = read_vli(xz, l.record_unpadded.end);

    l.block_header_size = (static_cast<std::size_t>(xz[l.block_header]) + 1) * 4;
    l.block_data = l.block_header + l.block_header_size;
    const std::uint8_t flags = xz[l.block_header + 1];
    REQUIRE((flags & 0xC0) == 0xC0);  // both sizes present
    l.block_compressed = read_vli(xz, l.block_header + 2);
    l.block_uncompressed = read_vli(xz, l.block_compressed.end);
    return l;
}

void fix_block_header_crc(bytes& xz, const layout& l) {
    const std::size_t crc_at = l.block_header + l.block_header_size - 4;
    put_le32(xz, crc_at, lzma_crc32(xz.data() + l.block_header, crc_at - l.block_header, 0));
}

void fix_index_crc(bytes& xz, const layout& l) {
    const std::size_t crc_at = l.index + l.index_size - 4;
    put_le32(xz, crc_at, lzma_crc32(xz.data() + l.index, crc_at - l.index, 0));
}

bytes flipped(bytes xz, std::size_t pos) {
    REQUIRE(pos < xz.size());
    xz[pos] ^= 0x55;
    return xz;
}

// Which cut or flip positions the exhaustive damage tests visit. A normal
// build visits every byte. A sanitized build (REDIST_TEST_SANITIZED, see
// tests/CMakeLists.txt) decodes 10-20x slower: there the exhaustive tests
// took 470 s of the ASan tree's 1250 s of tests. So it visits the bytes
// before `dense_head` (stream and block headers) and from `dense_tail`
// (index and footer) in full, and every 7th byte between them (7 is coprime
// with the 4-byte padding, so every alignment is hit).
struct damage_sample {
    std::size_t dense_head = 0;
    std::size_t dense_tail = 0;

    bool visits(std::size_t pos) const {
#ifdef REDIST_TEST_SANITIZED
        constexpr std::size_t kStride = 7;
        return pos < dense_head || pos >= dense_tail || pos % kStride == 0;
#else
        (void)pos;
        return true;
#endif
    }
};

// The sample of a stream with sizes in its block headers: the first block's
// header and the index are found (once, not per position), with 16 bytes
// either side.
damage_sample damage_sample_of(const bytes& xz) {
    constexpr std::size_t kMargin = 16;
    const layout l = parse_layout(xz);
    return {l.block_data + kMargin, l.index - kMargin};
}

// ---- shared inputs ----------------------------------------------------------

const bytes& data_1m() {
    static const bytes d = make_data(1 * kMiB, 1);
    return d;
}
const bytes& xz_blocks_1m() {  // 16 blocks of 64 KiB
    static const bytes x = encode_blocks(data_1m(), 64 * kKiB);
    return x;
}
const bytes& data_small() {
    static const bytes d = make_data(10000, 2);
    return d;
}
// 5 blocks of 2000 bytes, about 5 KB compressed (every truncation and every
// flip is decoded). 2000 is not a multiple of 128, so the sizes' first VLI
// byte can be edited by one either way without changing its length.
const bytes& xz_blocks_small() {
    static const bytes x = encode_blocks(data_small(), 2000);
    return x;
}

}  // namespace

// ---- decoding ---------------------------------------------------------------

TEST_CASE("xz_decode: the test inputs have the layout the tests assume", "[xz_decode]") {
    CHECK(parse_layout(xz_blocks_1m()).records == 16);
    CHECK(parse_layout(xz_blocks_small()).records == 5);
    CHECK(xz_blocks_small().size() < 8 * kKiB);
    const bytes streamed = encode_streamed(data_small());
    CHECK((streamed[12 + 1] & 0xC0) == 0);  // its block header carries no sizes
    CHECK(reference_decode(xz_blocks_1m()) == data_1m());
}

TEST_CASE("xz_decode: multi-block stream decodes the same with and without a pool", "[xz_decode]") {
    const std::size_t piece = GENERATE(as<std::size_t>{}, kAll, 7, 64 * kKiB);
    CAPTURE(piece);
    config with_pool;
    with_pool.piece = piece;
    const outcome pooled = decode(xz_blocks_1m(), with_pool);
    check_decoded(pooled, data_1m());
    CHECK(pooled.stats().streams == 1);
    CHECK(pooled.stats().pool_blocks > 0);
    CHECK(pooled.stats().pool_blocks + pooled.stats().stream_blocks == 16);
    CHECK(pooled.peak > 0);  // pool blocks hold leases
    CHECK(pooled.peak <= 64 * kMiB);

    config no_pool;
    no_pool.piece = piece;
    no_pool.threads = 0;
    const outcome alone = decode(xz_blocks_1m(), no_pool);
    check_decoded(alone, data_1m());
    CHECK(alone.stats().streams == 1);
    CHECK(alone.stats().pool_blocks == 0);
    CHECK(alone.stats().stream_blocks == 16);
}

TEST_CASE("xz_decode: blocks in parts decode the same, whatever the part size", "[xz_decode]") {
    // Whether the decoder thread finds the head block unfinished, and so takes
    // it in parts, depends on timing; the output must not.
    const std::size_t part = GENERATE(as<std::size_t>{}, 0, 1 * kKiB, 4 * kKiB, 64 * kKiB);
    const unsigned threads = GENERATE(1u, 4u);
    CAPTURE(part, threads);
    config cfg;
    cfg.part_bytes = part;
    cfg.threads = threads;
    cfg.piece = 7 * kKiB;
    const outcome o = decode(xz_blocks_1m(), cfg);
    check_decoded(o, data_1m());
    if (part == 0) CHECK(o.stats().parts == 0);
}

TEST_CASE("xz_decode: the block the stream waits for is handed on in parts while it decodes", "[xz_decode]") {
    // One worker, held after the first part of the first block until that
    // part has reached the output: a decoder that handed blocks on only whole
    // would never do so (the worker gives up waiting after 30 s).
    const bytes data = make_data(4 * kMiB, 12);
    const bytes xz = encode_blocks(data, 2 * kMiB);
    memory_gate gate([] { return 64 * kMiB; });
    vector_output out;
    std::atomic<int> parts_decoded{0};
    bool first_part_arrived_before_its_block_ended = false;
    std::optional<redist::result<xz_decode_stats>> result;
    {
        work_pool pool(1, work_pool::limits{});
        xz_decode_options options;
        options.pool = &pool;
        options.memory = &gate;
        options.part_bytes = 256 * kKiB;
        options.part_decoded = [&] {
            if (++parts_decoded != 1) return;
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            while (out.parts == 0 && std::chrono::steady_clock::now() < deadline)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            first_part_arrived_before_its_block_ended = out.parts > 0;
        };
        memory_input in(xz, kAll, kNever);
        result.emplace(redist::decode_xz(in, out, options));
    }
    REQUIRE(result);
    if (!result->ok()) FAIL(result->error_value().describe());
    CHECK(first_part_arrived_before_its_block_ended);
    CHECK(result->value().parts >= 2);  // that part, and at least the rest of its block
    CHECK(result->value().parts == out.parts);
    CHECK(out.data == data);
    CHECK(gate.held() == 0);
}

// Gives the bytes before `cut` in 64 KiB pieces, then waits until release()
// (a slow download); a wakeable wait also ends on wake(), with `woken`.
class held_back_input final : public redist::xz_input {
public:
    held_back_input(const bytes& data, std::size_t cut) : data_(data), cut_(cut) {}

    status next(const std::byte*& data, std::size_t& size, bool wakeable) override {
        std::unique_lock lock(mutex_);
        if (pos_ >= data_.size()) return status::end;
        if (pos_ >= cut_ && !released_) {
            waiting_ = true;
            changed_.notify_all();
            changed_.wait(lock, [&] { return released_ || (wakeable && woken_); });
            if (!released_) {
                woken_ = false;
                return status::woken;
            }
        }
        const std::size_t end = released_ ? data_.size() : cut_;
        size = std::min<std::size_t>(64 * kKiB, end - pos_);
        data = reinterpret_cast<const std::byte*>(data_.data() + pos_);
        pos_ += size;
        return status::ok;
    }
    void wake() noexcept override {
        std::lock_guard lock(mutex_);
        woken_ = true;
        changed_.notify_all();
    }
    void wait_until_waiting() {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return waiting_; });
    }
    void release() {
        std::lock_guard lock(mutex_);
        released_ = true;
        changed_.notify_all();
    }

private:
    const bytes& data_;
    const std::size_t cut_;
    std::size_t pos_ = 0;
    bool waiting_ = false, woken_ = false, released_ = false;
    std::mutex mutex_;
    std::condition_variable changed_;
};

TEST_CASE("xz_decode: blocks decoded while the input waits are handed on before more input comes", "[xz_decode]") {
    // The one pool worker is kept busy until the decoder waits for the third
    // block's bytes; the first two blocks are decoded only then. A decoder that
    // did not wake up for them would hold them (and their memory) until the
    // download went on.
    const bytes data = make_data(2 * kMiB, 11);
    const bytes xz = encode_blocks(data, 512 * kKiB);
    held_back_input in(xz, xz.size() * 5 / 8);  // in the third of four blocks
    memory_gate gate([] { return 64 * kMiB; });
    vector_output out;
    std::atomic<std::size_t> puts{0};
    out.on_put = [&] { ++puts; };
    std::optional<redist::result<xz_decode_stats>> result;
    {
        work_pool pool(1, work_pool::limits{});
        pool.post([&] { in.wait_until_waiting(); });
        xz_decode_options options;
        options.pool = &pool;
        options.memory = &gate;
        options.max_pending = 4;  // room for every block: only the input holds the decoder up
        std::thread decoder([&] { result.emplace(redist::decode_xz(in, out, options)); });
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (puts < 2 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        CHECK(puts == 2);
        CHECK(gate.held() <= 2 * kMiB);  // the third block's compressed copy (rounded up) and nothing decoded
        in.release();
        decoder.join();
    }
    REQUIRE(result);
    if (!result->ok()) FAIL(result->error_value().describe());
    CHECK(out.data == data);
    CHECK(gate.held() == 0);
}

TEST_CASE("xz_decode: input in 1-byte pieces", "[xz_decode]") {
    const unsigned threads = GENERATE(0u, 4u);
    CAPTURE(threads);
    config cfg;
    cfg.piece = 1;
    cfg.threads = threads;
    check_decoded(decode(xz_blocks_small(), cfg), data_small());
    check_decoded(decode(encode_streamed(data_small()), cfg), data_small());
}

TEST_CASE("xz_decode: a block without sizes streams on the calling thread", "[xz_decode]") {
    const bytes data = make_data(600 * kKiB, 3);
    const bytes xz = encode_streamed(data);
    const std::size_t piece = GENERATE(as<std::size_t>{}, kAll, 7, 64 * kKiB);
    CAPTURE(piece);
    config cfg;
    cfg.piece = piece;
    cfg.stream_chunk = 64 * kKiB;
    const outcome o = decode(xz, cfg);
    check_decoded(o, data);
    CHECK(o.stats().stream_blocks == 1);
    CHECK(o.stats().pool_blocks == 0);
    CHECK(o.stats().streams == 1);
    CHECK(o.largest_put <= 64 * kKiB);  // streamed output comes in stream_chunk pieces
    CHECK(o.puts >= data.size() / (64 * kKiB));
}

TEST_CASE("xz_decode: a single block with sizes goes to the pool", "[xz_decode]") {
    const bytes data = make_data(300 * kKiB, 4);
    const outcome o = decode(encode_buffer(data));
    check_decoded(o, data);
    CHECK(o.stats().pool_blocks + o.stats().stream_blocks == 1);
    CHECK(o.stats().pool_blocks == 1);
}

TEST_CASE("xz_decode: a stream without blocks decodes to nothing", "[xz_decode]") {
    const bytes empty_stream = encode_buffer({});
    const unsigned threads = GENERATE(0u, 4u);
    config cfg;
    cfg.threads = threads;
    const outcome o = decode(empty_stream, cfg);
    check_decoded(o, {});
    CHECK(o.stats().streams == 1);
    CHECK(o.stats().pool_blocks + o.stats().stream_blocks == 0);
}

TEST_CASE("xz_decode: a block that decodes to nothing is accepted, as liblzma accepts it", "[xz_decode]") {
    // A pool block of 0 bytes needs no output buffer: asking the gate to map
    // one failed (mmap of 0 bytes), and a valid archive was refused as
    // "xz decoder out of memory".
    const bytes a = make_data(3000, 11);
    const bytes b = make_data(5000, 12);
    const std::pair<bytes, bytes> cases[] = {
        {encode_block_list({{}}), {}},
        {encode_block_list({{}, a}), a},
        {encode_block_list({a, {}, b}), concat({a, b})},
        {encode_block_list({a, b, {}}, LZMA_CHECK_SHA256), concat({a, b})},
    };
    const unsigned threads = GENERATE(0u, 4u);
    const std::size_t piece = GENERATE(as<std::size_t>{}, kAll, 7);
    CAPTURE(threads, piece);
    config cfg;
    cfg.threads = threads;
    cfg.piece = piece;
    for (const auto& [xz, expected] : cases) {
        REQUIRE(reference_decode(xz) == expected);  // liblzma's own decoder accepts it
        const outcome o = decode(xz, cfg);
        check_decoded(o, expected);
        if (threads > 0) CHECK(o.stats().stream_blocks == 0);  // every block, the empty one too, went to the pool
    }
}

TEST_CASE("xz_decode: concatenated streams, with and without stream padding", "[xz_decode]") {
    const bytes a = make_data(200 * kKiB, 5);
    const bytes b = make_data(150 * kKiB, 6);
    const bytes xa = encode_blocks(a, 64 * kKiB);
    const bytes xb = encode_streamed(b);
    const bytes zeros4(4, 0);
    const bytes zeros8(8, 0);
    const unsigned threads = GENERATE(0u, 4u);
    const std::size_t piece = GENERATE(as<std::size_t>{}, kAll, 7);
    CAPTURE(threads, piece);
    config cfg;
    cfg.threads = threads;
    cfg.piece = piece;
    const std::pair<bytes, bytes> cases[] = {
        {concat({xa, xb}), concat({a, b})},         {concat({xa, zeros4, xb}), concat({a, b})},
        {concat({xa, xb, zeros8}), concat({a, b})}, {concat({xa, zeros8, xb, zeros4}), concat({a, b})},
        {concat({xb, zeros4, xa}), concat({b, a})},
    };
    for (const auto& [input, expected] : cases) {
        const outcome o = decode(input, cfg);
        check_decoded(o, expected);
        CHECK(o.stats().streams == 2);
    }
}

TEST_CASE("xz_decode: a 1-byte memory limit still decodes, one block at a time", "[xz_decode]") {
    const std::size_t piece = GENERATE(as<std::size_t>{}, kAll, 7);
    config cfg;
    cfg.piece = piece;
    cfg.limit = 1;
    const outcome o = decode(xz_blocks_1m(), cfg);
    check_decoded(o, data_1m());
    CHECK(o.held_after == 0);
}

TEST_CASE("xz_decode: max_pending 1", "[xz_decode]") {
    config cfg;
    cfg.max_pending = 1;
    const outcome o = decode(xz_blocks_1m(), cfg);
    check_decoded(o, data_1m());
    CHECK(o.stats().pool_blocks + o.stats().stream_blocks == 16);
}

TEST_CASE("xz_decode: blocks over max_block_memory stream instead", "[xz_decode]") {
    config cfg;
    cfg.max_block_memory = 1;
    const outcome o = decode(xz_blocks_1m(), cfg);
    check_decoded(o, data_1m());
    CHECK(o.stats().pool_blocks == 0);
    CHECK(o.stats().stream_blocks == 16);
}

TEST_CASE("xz_decode: blocks that could cross max_output stream instead", "[xz_decode]") {
    config cfg;
    cfg.max_output = data_1m().size() / 2;
    const outcome o = decode(xz_blocks_1m(), cfg);
    check_decoded(o, data_1m());  // the cap is the consumer's to enforce
    CHECK(o.stats().stream_blocks > 0);
    CHECK(o.stats().pool_blocks + o.stats().stream_blocks == 16);
}

TEST_CASE("xz_decode: max_output counts the output of blocks still in flight", "[xz_decode]") {
    // 64 KiB blocks under a 100 KiB cap: the first block cannot cross it, and
    // every later one could, counting the output before it, whether that was
    // handed on yet or is still being decoded. So only the first may go to the pool.
    config cfg;
    cfg.max_output = 100 * kKiB;
    const outcome o = decode(xz_blocks_1m(), cfg);
    check_decoded(o, data_1m());
    CHECK(o.stats().pool_blocks == 1);
    CHECK(o.stats().stream_blocks == 15);
}

TEST_CASE("xz_decode: an output buffer that is kept keeps its lease", "[xz_decode]") {
    memory_gate gate([] { return std::uint64_t{64 * kMiB}; });
    vector_output out;
    out.keep = true;
    std::optional<redist::result<xz_decode_stats>> r;
    {
        work_pool pool(4, {});
        memory_input in(xz_blocks_1m(), kAll);
        xz_decode_options options;
        options.pool = &pool;
        options.memory = &gate;
        r.emplace(redist::decode_xz(in, out, options));
    }
    REQUIRE(r->ok());
    CHECK(out.data == data_1m());
    REQUIRE(r->value().pool_blocks > 0);
    CHECK(gate.held() > 0);
    out.kept.clear();
    CHECK(gate.held() == 0);
}

// ---- corrupt input ------------------------------------------------------------

TEST_CASE("xz_decode: empty input and garbage are bad_archive", "[xz_decode]") {
    const unsigned threads = GENERATE(0u, 4u);
    config cfg;
    cfg.threads = threads;
    check_bad_archive(decode({}, cfg));
    bytes garbage = make_data(5000, 7);
    check_bad_archive(decode(garbage, cfg));
    // The magic, then garbage.
    const bytes magic = {0xFD, '7', 'z', 'X', 'Z', 0x00};
    std::copy(magic.begin(), magic.end(), garbage.begin());
    check_bad_archive(decode(garbage, cfg));
    // Only stream padding.
    check_bad_archive(decode(bytes(8, 0), cfg));
    // A stream header alone.
    check_bad_archive(decode(bytes(xz_blocks_small().begin(), xz_blocks_small().begin() + 12), cfg));
}

TEST_CASE("xz_decode: every truncation of a multi-block stream is bad_archive", "[xz_decode]") {
    const bytes& xz = xz_blocks_small();
    const unsigned threads = GENERATE(4u, 0u);
    const std::size_t piece = GENERATE(as<std::size_t>{}, kAll, 7);
    config cfg;
    cfg.threads = threads;
    cfg.piece = piece;
    const damage_sample sample = damage_sample_of(xz);
    for (std::size_t cut = 0; cut < xz.size(); ++cut) {
        if (!sample.visits(cut)) {
            continue;
        }
        CAPTURE(threads, piece, cut, xz.size());
        const outcome o = decode(bytes(xz.begin(), xz.begin() + static_cast<std::ptrdiff_t>(cut)), cfg);
        REQUIRE_FALSE(o.ok());
        REQUIRE(o.error().code == error_code::bad_archive);
        REQUIRE(o.held_after == 0);
    }
}

TEST_CASE("xz_decode: every truncation of a streamed block is bad_archive", "[xz_decode]") {
    const bytes xz = encode_streamed(data_small());
    // A streamed block has no sizes to parse: its header and the stream's
    // index and footer fit in 64 bytes at either end.
    const damage_sample sample{64, xz.size() - 64};
    for (std::size_t cut = 0; cut < xz.size(); ++cut) {
        if (!sample.visits(cut)) {
            continue;
        }
        CAPTURE(cut, xz.size());
        const outcome o = decode(bytes(xz.begin(), xz.begin() + static_cast<std::ptrdiff_t>(cut)));
        REQUIRE_FALSE(o.ok());
        REQUIRE(o.error().code == error_code::bad_archive);
    }
}

TEST_CASE("xz_decode: a flipped byte in each part of the container is bad_archive", "[xz_decode]") {
    const bytes& xz = xz_blocks_small();
    const layout l = parse_layout(xz);
    const unsigned threads = GENERATE(4u, 0u);
    CAPTURE(threads);
    config cfg;
    cfg.threads = threads;
    SECTION("stream header magic") { check_bad_archive(decode(flipped(xz, 1), cfg)); }
    SECTION("stream header flags") { check_bad_archive(decode(flipped(xz, 7), cfg)); }
    SECTION("stream header CRC32") { check_bad_archive(decode(flipped(xz, 9), cfg)); }
    SECTION("block header size") { check_bad_archive(decode(flipped(xz, l.block_header), cfg)); }
    SECTION("block header flags") { check_bad_archive(decode(flipped(xz, l.block_header + 1), cfg)); }
    SECTION("block header CRC32") {
        check_bad_archive(decode(flipped(xz, l.block_header + l.block_header_size - 2), cfg));
    }
    SECTION("block data") { check_bad_archive(decode(flipped(xz, l.block_data + 100), cfg)); }
    SECTION("block check") {
        // The first block's CRC64 is the 8 bytes before the second block header.
        const std::size_t check_at = l.block_data + l.block_compressed.value + (4 - l.block_compressed.value % 4) % 4;
        check_bad_archive(decode(flipped(xz, check_at + 3), cfg));
    }
    SECTION("last block data") { check_bad_archive(decode(flipped(xz, l.index - 20), cfg)); }
    SECTION("index indicator") { check_bad_archive(decode(flipped(xz, l.index), cfg)); }
    SECTION("index record count") { check_bad_archive(decode(flipped(xz, l.index + 1), cfg)); }
    SECTION("index record") { check_bad_archive(decode(flipped(xz, l.record_uncompressed.pos), cfg)); }
    SECTION("index CRC32") { check_bad_archive(decode(flipped(xz, l.index + l.index_size - 1), cfg)); }
    SECTION("footer CRC32") { check_bad_archive(decode(flipped(xz, l.footer), cfg)); }
    SECTION("footer backward size") { check_bad_archive(decode(flipped(xz, l.footer + 4), cfg)); }
    SECTION("footer flags") { check_bad_archive(decode(flipped(xz, l.footer + 9), cfg)); }
    SECTION("footer magic") { check_bad_archive(decode(flipped(xz, xz.size() - 1), cfg)); }
}

TEST_CASE("xz_decode: every single-byte flip agrees with liblzma", "[xz_decode]") {
    const bytes& xz = xz_blocks_small();
    const unsigned threads = GENERATE(4u, 0u);
    config cfg;
    cfg.threads = threads;
    const damage_sample sample = damage_sample_of(xz);
    for (std::size_t pos = 0; pos < xz.size(); ++pos) {
        if (!sample.visits(pos)) {
            continue;
        }
        CAPTURE(threads, pos, xz.size());
        const bytes damaged = flipped(xz, pos);
        const auto expected = reference_decode(damaged);
        const outcome o = decode(damaged, cfg);
        REQUIRE(o.ok() == expected.has_value());
        if (o.ok()) {
            REQUIRE(o.output == *expected);
        } else {
            REQUIRE(o.error().code == error_code::bad_archive);
        }
        REQUIRE(o.held_after == 0);
    }
}

TEST_CASE("xz_decode: stream padding that is not a multiple of 4 is bad_archive", "[xz_decode]") {
    const unsigned threads = GENERATE(4u, 0u);
    config cfg;
    cfg.threads = threads;
    const bytes& xz = xz_blocks_small();
    check_bad_archive(decode(concat({xz, bytes(3, 0)}), cfg));
    check_bad_archive(decode(concat({xz, bytes(5, 0)}), cfg));
    check_bad_archive(decode(concat({xz, bytes(3, 0), xz}), cfg));
    check_bad_archive(decode(concat({xz, bytes(4, 0), bytes{1, 0, 0, 0}}), cfg));  // padding, then garbage
    check_bad_archive(decode(concat({bytes(4, 0), xz}), cfg));                     // padding may only follow a stream
}

TEST_CASE("xz_decode: an index that disagrees with the blocks is bad_archive", "[xz_decode]") {
    const unsigned threads = GENERATE(4u, 0u);
    CAPTURE(threads);
    config cfg;
    cfg.threads = threads;
    bytes xz = xz_blocks_small();
    const layout l = parse_layout(xz);
    // Each edit keeps the index's CRC32 right, so only the comparison with the blocks can catch it.
    SECTION("uncompressed size of a record, one more") { nudge_vli(xz, l.record_uncompressed, 1); }
    SECTION("uncompressed size of a record, one less") { nudge_vli(xz, l.record_uncompressed, -1); }
    SECTION("unpadded size of a record, one more") { nudge_vli(xz, l.record_unpadded, 1); }
    SECTION("unpadded size of a record, one less") { nudge_vli(xz, l.record_unpadded, -1); }
    fix_index_crc(xz, l);
    REQUIRE_FALSE(reference_decode(xz).has_value());
    check_bad_archive(decode(xz, cfg));
}

TEST_CASE("xz_decode: a block header whose sizes disagree with its data is bad_archive", "[xz_decode]") {
    const unsigned threads = GENERATE(4u, 0u);
    CAPTURE(threads);
    config cfg;
    cfg.threads = threads;
    bytes xz = xz_blocks_small();
    const layout l = parse_layout(xz);
    // Each edit keeps the header's CRC32 right.
    SECTION("uncompressed size one more") { nudge_vli(xz, l.block_uncompressed, 1); }
    SECTION("uncompressed size one less") { nudge_vli(xz, l.block_uncompressed, -1); }
    SECTION("compressed size one more") { nudge_vli(xz, l.block_compressed, 1); }
    SECTION("compressed size one less") { nudge_vli(xz, l.block_compressed, -1); }
    fix_block_header_crc(xz, l);
    REQUIRE_FALSE(reference_decode(xz).has_value());
    check_bad_archive(decode(xz, cfg));
}

TEST_CASE("xz_decode: a block header and index that agree on a wrong size are bad_archive", "[xz_decode]") {
    bytes xz = xz_blocks_small();
    const layout l = parse_layout(xz);
    REQUIRE(l.block_uncompressed.value == l.record_uncompressed.value);
    nudge_vli(xz, l.block_uncompressed, -1);
    nudge_vli(xz, l.record_uncompressed, -1);
    fix_block_header_crc(xz, l);
    fix_index_crc(xz, l);
    REQUIRE_FALSE(reference_decode(xz).has_value());
    check_bad_archive(decode(xz));
}

// ---- cancellation -----------------------------------------------------------

TEST_CASE("xz_decode: an output that refuses a buffer cancels", "[xz_decode]") {
    const unsigned threads = GENERATE(4u, 0u);
    CAPTURE(threads);
    config cfg;
    cfg.threads = threads;
    cfg.accept_puts = 1;
    cfg.stream_chunk = 16 * kKiB;  // several puts, even where a block streams
    SECTION("multi-block") {
        const outcome o = decode(xz_blocks_1m(), cfg);
        check_cancelled(o);
        CHECK(o.puts == 2);
        CHECK(o.puts_after_refusal == 0);
    }
    SECTION("streamed") {
        const outcome o = decode(encode_streamed(make_data(200 * kKiB, 8)), cfg);
        check_cancelled(o);
        CHECK(o.puts == 2);
        CHECK(o.puts_after_refusal == 0);
    }
}

TEST_CASE("xz_decode: the stop flag set before the start cancels", "[xz_decode]") {
    const std::atomic<bool> stop{true};
    const unsigned threads = GENERATE(4u, 0u);
    config cfg;
    cfg.threads = threads;
    cfg.stop = &stop;
    const outcome o = decode(xz_blocks_1m(), cfg);
    check_cancelled(o);
    CHECK(o.output.empty());
}

TEST_CASE("xz_decode: an input that answers stopped cancels", "[xz_decode]") {
    const unsigned threads = GENERATE(4u, 0u);
    const std::size_t after = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{5});
    CAPTURE(threads, after);
    config cfg;
    cfg.threads = threads;
    cfg.piece = 64 * kKiB;
    cfg.input_stopped_after = after;
    check_cancelled(decode(xz_blocks_1m(), cfg));
    check_cancelled(decode(encode_streamed(data_1m()), cfg));
}

TEST_CASE("xz_decode: the stop flag ends a wait for memory", "[xz_decode]") {
    // The output keeps every buffer, so with a 1-byte limit the second pool
    // block can never get its memory: only the stop flag ends the wait.
    memory_gate gate([] { return std::uint64_t{1}; });
    vector_output out;
    out.keep = true;
    std::atomic<bool> stop{false};
    std::optional<redist::result<xz_decode_stats>> r;
    {
        work_pool pool(4, {});
        std::thread owner([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            stop = true;
            gate.notify();
        });
        memory_input in(xz_blocks_1m(), kAll);
        xz_decode_options options;
        options.pool = &pool;
        options.memory = &gate;
        options.stop = &stop;
        r.emplace(redist::decode_xz(in, out, options));
        owner.join();
    }
    if (r->ok()) {
        // It streamed what it could not get memory for: then all must be there.
        CHECK(out.data == data_1m());
    } else {
        CHECK(r->error_value().code == error_code::cancelled);
    }
    out.kept.clear();
    CHECK(gate.held() == 0);
}

TEST_CASE("xz_decode: the stop flag set by the output mid-stream ends decoding", "[xz_decode]") {
    std::atomic<bool> stop{false};
    memory_gate gate([] { return std::uint64_t{64 * kMiB}; });
    vector_output out;
    out.on_put = [&] {
        stop = true;
        gate.notify();
    };
    std::optional<redist::result<xz_decode_stats>> r;
    {
        work_pool pool(2, {});
        memory_input in(xz_blocks_1m(), 7);
        xz_decode_options options;
        options.pool = &pool;
        options.memory = &gate;
        options.stop = &stop;
        options.max_pending = 2;
        options.stream_chunk = 16 * kKiB;
        r.emplace(redist::decode_xz(in, out, options));
    }
    REQUIRE_FALSE(r->ok());
    CHECK(r->error_value().code == error_code::cancelled);
    CHECK(out.data.size() < data_1m().size());
    CHECK(gate.held() == 0);
}

TEST_CASE("xz_decode: a block header that asks for a 4 GiB dictionary is refused, not allocated", "[xz_decode]") {
    bytes xz = xz_blocks_small();
    const layout l = parse_layout(xz);
    // Filter flags follow the two sizes: ID 0x21 (LZMA2), properties size 1, the dictionary byte.
    const std::size_t filter = l.block_uncompressed.end;
    REQUIRE(xz[filter] == 0x21);
    REQUIRE(xz[filter + 1] == 0x01);
    xz[filter + 2] = 40;  // 4 GiB - 1
    fix_block_header_crc(xz, l);
    for (const unsigned threads : {0u, 4u}) {
        config cfg;
        cfg.threads = threads;
        const outcome o = decode(xz, cfg);
        check_bad_archive(o);
        CHECK(o.error().message.find("more memory than allowed") != std::string::npos);
        CHECK(o.output.empty());
    }
}
