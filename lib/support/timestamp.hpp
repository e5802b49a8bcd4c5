// timestamp.hpp (internal) — the one wall-clock format redist writes:
// receipts' installed_at, the drift history's first/last seen, SBOM creation.
#pragma once

#include <string>

namespace redist {

// Now, in UTC, as ISO 8601 with second precision: "2026-11-30T13:20:57Z".
std::string utc_now_iso8601();

}  // namespace redist
