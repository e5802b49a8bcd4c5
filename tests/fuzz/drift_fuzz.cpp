// libFuzzer target for the drift history reader (redist/drift.hpp): history
// files live in a shared cache directory, so their bytes are untrusted.
// Any input must give a value or a bad_manifest error, never a crash, and a
// parsed history must survive a write/read round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "features/url_history.hpp"
#include "redist/drift.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto parsed = redist::parse_url_history(text, "fuzz.json");
    if (!parsed.ok()) {
        if (parsed.error_value().code != redist::error_code::bad_manifest) std::abort();
        return 0;
    }
    auto again = redist::parse_url_history(redist::url_history_to_json(*parsed), "round-trip.json");
    if (!again.ok() || again->url != parsed->url || again->seen.size() != parsed->seen.size()) std::abort();
    for (std::size_t i = 0; i < parsed->seen.size(); ++i)
        if (again->seen[i].sha256 != parsed->seen[i].sha256 || again->seen[i].size != parsed->seen[i].size ||
            again->seen[i].first_seen != parsed->seen[i].first_seen)
            std::abort();
    return 0;
}
