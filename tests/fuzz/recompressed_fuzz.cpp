// libFuzzer target for redist::parse_recompressed and check_recompressed_for
// (a mirror's sidecar recompressed_<label>.json: read from any mirror or
// registry the user names, so every byte is hostile).
//
// Contract checked on every input: a failure is one clean bad_manifest line
// naming the source; a success round-trips: what recompressed_to_json writes
// is read back to the same record (byte-identical when written again), and
// checking it against a small manifest never crashes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"
#include "model/recompressed_sidecar.hpp"
#include "redist/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view json(reinterpret_cast<const char*>(data), size);
    const auto parsed = redist::parse_recompressed(json, "fuzz.json");
    if (!parsed.ok()) {
        fuzz::require_clean_error(parsed.error_value(), redist::error_code::bad_manifest, "fuzz.json");
        return 0;
    }
    const std::string written = redist::recompressed_to_json(parsed.value());
    const auto reread = redist::parse_recompressed(written, "rewritten.json");
    fuzz::require(reread.ok());
    fuzz::require(redist::recompressed_to_json(reread.value()) == written);
    redist::manifest m;
    m.release_label = "1.0";
    redist::component c;
    c.key = "c";
    redist::artifact a;
    a.component = "c";
    a.relative_path = "c/x-1.tar.xz";
    a.sha256 = std::string(64, 'a');
    c.artifacts.push_back(a);
    m.components.push_back(c);
    const auto checked = redist::check_recompressed_for(parsed.value(), m, std::string(64, 'd'), "fuzz.json");
    if (!checked.ok()) fuzz::require_clean_error(checked.error_value(), redist::error_code::bad_manifest, "fuzz.json");
    for (const auto& copy : parsed->copies) fuzz::require(parsed->find(copy.original_sha256) != nullptr);
    return 0;
}
