// model/index_html.hpp (internal) — the release labels of an HTML index
// (version.cpp); list_versions() (redist/resolve.hpp) is the public way.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace redist {

// Extracts the release labels from an HTML directory listing: every link
// whose target's last path segment is "redistrib_<label>.json" (NVIDIA's
// listing and nginx autoindex both qualify). Only <a href=...> counts;
// quotes may be single, double or absent; hrefs may be absolute or "./"
// relative and are percent-decoded; query, fragment and HTML comments are
// ignored. A label must start with a letter or digit and hold only
// [A-Za-z0-9._+-], so it is safe to splice back into a URL. Labels are
// returned de-duplicated and sorted newest first.
std::vector<std::string> parse_index_html(std::string_view html);

}  // namespace redist
