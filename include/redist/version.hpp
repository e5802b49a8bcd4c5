// redist/version.hpp — release labels: ordering, HTML index listing, spec resolution.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"

namespace redist {

// Orders labels by their dot-separated fields, numerically where both fields
// are numbers ("9.10.0" > "9.9.0"; "25.06.0" vs "25.5" compares 6 > 5), and
// lexically otherwise. A label that is a strict prefix of another is older
// ("9.1" < "9.1.0"). Returns <0, 0, >0.
int compare_versions(std::string_view a, std::string_view b) noexcept;

// Extracts the release labels from an HTML directory listing: every link
// whose target's last path segment is "redistrib_<label>.json" (NVIDIA's
// listing and nginx autoindex both qualify). Labels are returned
// de-duplicated and sorted newest first.
std::vector<std::string> parse_index_html(std::string_view html);

// Resolves a version spec against the available labels:
//   "latest"           the newest label
//   "9.27.0"           exactly that label
//   "9.27" or "9"      the newest label whose fields start with those fields
// Outcomes: ok (the label) | not_found (message lists what is available).
result<std::string> resolve_version_spec(std::string_view spec,
                                         const std::vector<std::string>& labels);

}  // namespace redist
