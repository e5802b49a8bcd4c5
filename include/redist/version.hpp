// redist/version.hpp — release labels: ordering, HTML index listing, spec resolution.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

// Orders labels by their dot-separated fields, numerically where both fields
// are numbers ("9.10.0" > "9.9.0"; "25.06.0" vs "25.5" compares 6 > 5), and
// lexically otherwise. A label that is a strict prefix of another is older
// ("9.1" < "9.1.0"). A field mixing digits and letters ("0rc1") compares by
// its leading number, then lexically by the rest; fields with a leading
// number sort before fields without one (this keeps the order transitive).
// Labels equal field by field but spelled differently ("25.06" vs "25.6")
// are ordered by their bytes, so 0 means identical: a strict total order.
// Returns <0, 0, >0.
int compare_versions(std::string_view a, std::string_view b) noexcept;

// Resolves a version spec against the available labels:
//   "latest"           the newest label
//   "9.27.0"           exactly that label
//   "9.27" or "9"      the newest label whose fields start with those fields
//                      (whole fields: "9" matches 9.27.0 but not 90.1, and
//                      "9.2" does not match 9.27.0)
// `labels` need not be sorted or unique.
// Outcomes: ok (the label) | not_found (message lists the available labels,
// newest first, at most 10) | usage (empty spec or an empty field, "9..1").
result<std::string> resolve_version_spec(std::string_view spec, const std::vector<std::string>& labels);

REDIST_API_END
}  // namespace redist
