// libFuzzer target for the resume record of segmented downloads
// (lib/transport/segmented_download.hpp): "<part>.segments" lives in the cache, which
// may be shared, so its bytes are untrusted. Any input must give a record or
// a bad_manifest error, never a crash; a parsed record must be sorted,
// disjoint and within its size, and survive a write/read round trip.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "transport/segmented_download.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto parsed = redist::parse_segment_record(text, "fuzz.segments");
    if (!parsed.ok()) {
        if (parsed.error_value().code != redist::error_code::bad_manifest) std::abort();
        return 0;
    }
    std::uint64_t previous_end = 0;
    for (std::size_t i = 0; i < parsed->ranges.size(); ++i) {
        const auto [first, end] = parsed->ranges[i];
        if (first >= end || end > parsed->size || (i > 0 && first <= previous_end)) std::abort();
        previous_end = end;
    }
    auto again = redist::parse_segment_record(redist::segment_record_to_text(*parsed), "round-trip.segments");
    if (!again.ok() || again->size != parsed->size || again->ranges != parsed->ranges) std::abort();
    return 0;
}
