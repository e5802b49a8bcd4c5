// libFuzzer target for the project file parser (redist/project.hpp): a
// redist.toml may come from anywhere (a cloned repository). Any input must
// give a value or a bad_manifest error, never a crash or another outcome;
// the same for the user's config.toml, which shares the TOML reader.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/project.hpp"
#include "redist/project.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto parsed = redist::parse_project(text, "fuzz/redist.toml");
    if (!parsed.ok() && parsed.error_value().code != redist::error_code::bad_manifest) std::abort();
    if (parsed.ok() && (parsed->products.empty() || parsed->platforms.empty())) std::abort();
    // The user's config.toml goes through the same TOML reader, with its own keys.
    auto config = redist::parse_user_config(text, "/fuzz/config.toml");
    if (!config.ok() && config.error_value().code != redist::error_code::bad_manifest) std::abort();
    if (config.ok() && config->retries && (*config->retries < 1 || *config->retries > 100)) std::abort();
    return 0;
}
