// Differential libFuzzer target for redist::decode_xz (lib/archive/xz_decode.hpp):
// hostile .xz bytes go through the block-parallel decoder (a pool of 2
// threads, a 64 MiB memory gate) and through liblzma's own stream decoder of
// concatenated streams, and the two must agree.
//
// Input layout: byte 0 picks how the rest is fed to decode_xz,
//   bits 0-3  piece size: 1 << (bits % 15) bytes, to vary where the bytes are cut
//   bit  4    no pool: every block on the calling thread
//   bit  5    max_pending = 1
//   bit  6    repair the CRC32s of the container first (stream headers, block
//             headers as far as their sizes lead, indexes, footers), so that
//             mutations get past those checks to the sizes, filters and
//             records behind them
//   bit  7    1 KiB parts: the block the stream waits for is handed on in
//             pieces while a worker decodes it (xz_output::put_part)
// and bytes 1.. are the .xz data. The seeds in corpus/xz_decode/ (made with
// xz, a 64 KiB dictionary to keep runs fast) start with such a byte.
//
// Both decoders stop at kMaxOutput bytes of output. After every input, and
// aborting (a crash for libFuzzer) otherwise:
//   - a decode_xz failure is bad_archive (or cancelled when it was the output
//     cap that stopped it), with a one-line message;
//   - both succeed: the outputs are byte-identical;
//   - liblzma succeeds within the cap: decode_xz succeeds too, unless a
//     stream's check is one liblzma cannot verify (it decodes such a stream
//     unchecked, decode_xz refuses it);
//   - decode_xz succeeds: liblzma succeeds too, unless it ran out of its
//     memory limit (a huge declared dictionary);
//   - whatever each produced before it stopped agrees on the common prefix
//     (both run the same LZMA decoding over the same bytes);
//   - the memory gate holds nothing once the pool is gone.
#include <lzma.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "archive/xz_decode.hpp"
#include "fuzz_support.hpp"
#include "support/memory_gate.hpp"
#include "support/work_pool.hpp"

using fuzz::require;

namespace {

constexpr std::size_t kMaxOutput = 16u << 20;
constexpr std::uint64_t kMemory = 64u << 20;

struct reference_result {
    enum class outcome { ok, failed, over_cap, memlimit } result = outcome::failed;
    bool unsupported_check = false;
    std::vector<std::uint8_t> output;  // at most kMaxOutput bytes
};

reference_result reference_decode(const std::uint8_t* data, std::size_t size) {
    reference_result r;
    lzma_stream s = LZMA_STREAM_INIT;
    require(lzma_stream_decoder(&s, kMemory, LZMA_CONCATENATED | LZMA_TELL_UNSUPPORTED_CHECK) == LZMA_OK);
    s.next_in = data;
    s.avail_in = size;
    std::vector<std::uint8_t> buf(64u << 10);
    for (;;) {
        s.next_out = buf.data();
        s.avail_out = buf.size();
        const lzma_ret ret = lzma_code(&s, LZMA_FINISH);
        const std::size_t got = buf.size() - s.avail_out;
        if (r.output.size() + got > kMaxOutput) {
            r.output.insert(r.output.end(), buf.begin(),
                            buf.begin() + static_cast<std::ptrdiff_t>(kMaxOutput - r.output.size()));
            r.result = reference_result::outcome::over_cap;
            break;
        }
        r.output.insert(r.output.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(got));
        if (ret == LZMA_OK) continue;
        if (ret == LZMA_UNSUPPORTED_CHECK) {  // a warning: decoding goes on, unchecked
            r.unsupported_check = true;
            continue;
        }
        if (ret == LZMA_STREAM_END) r.result = reference_result::outcome::ok;
        if (ret == LZMA_MEMLIMIT_ERROR) r.result = reference_result::outcome::memlimit;
        break;
    }
    lzma_end(&s);
    return r;
}

std::uint64_t read_vli(const std::vector<std::uint8_t>& b, std::size_t& pos, bool& ok) {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 63; shift += 7) {
        if (pos >= b.size()) break;
        const std::uint8_t byte = b[pos++];
        v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
        if ((byte & 0x80) == 0) return v;
    }
    ok = false;
    return 0;
}

// Writes at `at` the CRC32 of the `size` bytes at `from`.
void put_crc32(std::vector<std::uint8_t>& b, std::size_t from, std::size_t size, std::size_t at) {
    const std::uint32_t crc = lzma_crc32(b.data() + from, size, 0);
    for (std::size_t i = 0; i < 4; ++i) b[at + i] = static_cast<std::uint8_t>(crc >> (8 * i));
}

// Walks one stream from `pos` and rewrites each CRC32 to match what precedes
// it; stops where the structure can no longer be followed. Returns where the
// stream ended, or 0 when it stopped early.
std::size_t repair_stream(std::vector<std::uint8_t>& b, std::size_t pos) {
    if (pos + 12 > b.size()) return 0;
    put_crc32(b, pos + 6, 2, pos + 8);
    const std::uint32_t check_size = lzma_check_size(static_cast<lzma_check>(b[pos + 7] & 0x0F));
    if (check_size == UINT32_MAX) return 0;
    pos += 12;
    std::uint64_t records = 0;
    while (pos < b.size() && b[pos] != 0) {  // block headers
        const std::size_t header = (static_cast<std::size_t>(b[pos]) + 1) * 4;
        if (pos + header > b.size() || (b[pos + 1] & 0x40) == 0) return 0;
        put_crc32(b, pos, header - 4, pos + header - 4);
        std::size_t at = pos + 2;
        bool ok = true;
        const std::uint64_t compressed = read_vli(b, at, ok);
        if (!ok || compressed > b.size()) return 0;
        pos += header + static_cast<std::size_t>(compressed);
        pos += (4 - pos % 4) % 4 + check_size;
        ++records;
    }
    // The index: indicator, count, records, padding, CRC32.
    const std::size_t index = pos;
    std::size_t at = pos + 1;
    bool ok = true;
    const std::uint64_t count = read_vli(b, at, ok);
    if (!ok || count != records) return 0;
    for (std::uint64_t i = 0; i < 2 * count && ok; ++i) read_vli(b, at, ok);
    at += (4 - (at - index) % 4) % 4;
    if (!ok || at + 4 + 12 > b.size()) return 0;
    put_crc32(b, index, at - index, at);
    const std::size_t footer = at + 4;
    put_crc32(b, footer + 4, 6, footer);  // the footer's CRC32 comes first
    return footer + 12;
}

std::vector<std::uint8_t> repair_crcs(const std::uint8_t* data, std::size_t size) {
    std::vector<std::uint8_t> b(data, data + size);
    std::size_t pos = 0;
    while ((pos = repair_stream(b, pos)) != 0) {
        while (pos + 4 <= b.size() && b[pos] == 0 && b[pos + 1] == 0 && b[pos + 2] == 0 && b[pos + 3] == 0) pos += 4;
    }
    return b;
}

class pieces_input final : public redist::xz_input {
public:
    pieces_input(const std::uint8_t* data, std::size_t size, std::size_t piece)
        : data_(data), size_(size), piece_(piece) {}
    status next(const std::byte*& data, std::size_t& size, bool /*wakeable*/) override {
        if (pos_ >= size_) return status::end;
        size = std::min(piece_, size_ - pos_);
        data = reinterpret_cast<const std::byte*>(data_ + pos_);
        pos_ += size;
        return status::ok;
    }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t piece_;
    std::size_t pos_ = 0;
};

// Collects up to kMaxOutput bytes; refuses the buffer that would cross it.
class capped_output final : public redist::xz_output {
public:
    bool put(redist::byte_buffer&& decoded) override {
        require(!over_cap);  // no put() after a refusal
        require(decoded.size <= decoded.capacity);
        require(decoded.size == 0 || decoded.bytes != nullptr);
        const auto* p = reinterpret_cast<const std::uint8_t*>(decoded.bytes.get());
        if (output.size() + decoded.size > kMaxOutput) {
            output.insert(output.end(), p, p + (kMaxOutput - output.size()));
            over_cap = true;
            return false;
        }
        output.insert(output.end(), p, p + decoded.size);
        return true;
    }
    std::vector<std::uint8_t> output;
    bool over_cap = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t control = data[0];
    const std::uint8_t* xz = data + 1;
    const std::size_t length = size - 1;
    std::vector<std::uint8_t> repaired;
    if ((control & 0x40u) != 0) {
        repaired = repair_crcs(xz, length);
        xz = repaired.data();
    }

    const reference_result ref = reference_decode(xz, length);

    redist::memory_gate gate([] { return kMemory; });
    capped_output out;
    std::optional<redist::result<redist::xz_decode_stats>> got;
    {
        std::optional<redist::work_pool> pool;
        if ((control & 0x10u) == 0) pool.emplace(2, redist::work_pool::limits{});
        pieces_input in(xz, length, std::size_t{1} << ((control & 0x0Fu) % 15));
        redist::xz_decode_options options;
        options.pool = pool ? &*pool : nullptr;
        options.memory = &gate;
        options.max_pending = (control & 0x20u) != 0 ? 1 : 0;
        options.max_block_memory = kMemory;
        options.max_output = kMaxOutput;
        options.stream_chunk = 64u << 10;
        // Small parts: the block the stream waits for goes on in pieces (put_part).
        if ((control & 0x80u) != 0) options.part_bytes = 1u << 10;
        got.emplace(redist::decode_xz(in, out, options));
    }  // the pool's tasks have finished
    require(gate.held() == 0);

    // What both produced must agree as far as both got.
    const std::size_t common = std::min(out.output.size(), ref.output.size());
    if (common > 0) require(std::memcmp(out.output.data(), ref.output.data(), common) == 0);

    using outcome = reference_result::outcome;
    if (got->ok()) {
        require(!out.over_cap);
        require(got->value().decoded == out.output.size());
        require(ref.result == outcome::ok || ref.result == outcome::memlimit);
        if (ref.result == outcome::ok) require(out.output == ref.output);
        return 0;
    }
    const redist::error& err = got->error_value();
    require(!err.message.empty());
    const std::string line = err.describe();
    require(line.find('\n') == std::string::npos && line.find('\r') == std::string::npos);
    if (out.over_cap) {
        require(err.code == redist::error_code::cancelled);
        // decode_xz got past the cap, so liblzma, decoding the same bytes, does
        // too (unless its memory limit stopped it first).
        require(ref.result == outcome::over_cap || ref.result == outcome::memlimit);
        return 0;
    }
    require(err.code == redist::error_code::bad_archive);
    if (ref.result == outcome::ok) require(ref.unsupported_check);
    return 0;
}
