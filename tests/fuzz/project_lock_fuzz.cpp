// libFuzzer target for redist::project_lock_from_json, the version 2 lock
// `redist sync` writes beside redist.toml (reviewed by people, but it may come
// from anyone: a pull request, a shared repository).
//
// Contract checked on every input: a failure is one clean bad_manifest line
// naming the source; a success round-trips: what project_lock_to_json writes
// is read back to the same lock (byte-identical when written again).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"
#include "model/lockfile.hpp"
#include "redist/lockfile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view json(reinterpret_cast<const char*>(data), size);
    const auto parsed = redist::project_lock_from_json(json, "fuzz.lock");
    if (!parsed.ok()) {
        fuzz::require_clean_error(parsed.error_value(), redist::error_code::bad_manifest, "fuzz.lock");
        return 0;
    }
    const std::string written = redist::project_lock_to_json(parsed.value());
    const auto reread = redist::project_lock_from_json(written, "rewritten.lock");
    fuzz::require(reread.ok());
    fuzz::require(redist::project_lock_to_json(reread.value()) == written);
    return 0;
}
