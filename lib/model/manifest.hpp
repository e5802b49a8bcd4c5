// model/manifest.hpp (internal) — the manifest's rules the rest of the
// library applies too: an artifact's format from its file name, the safety
// of a relative_path (manifests, locks, a mirror's sidecar and its own
// paths), and the form of a SHA-256 (manifests, locks, receipts, the cache,
// registries). manifest.cpp parses with them; lockfile.cpp, the cache
// (store/), transport/oci.cpp and the mirror (features/) check with them;
// the unit tests and the fuzz targets call them directly.
// redist/manifest.hpp holds the manifest's types and parse_manifest.
#pragma once

#include <string_view>

#include "redist/manifest.hpp"

namespace redist {

// Derived from the file name's extension (".tar.xz", ".txz", ".tar.gz", ".tgz",
// ".tar.zst", ".zip"); anything else is unknown.
archive_format archive_format_from_path(std::string_view relative_path) noexcept;

// Why an artifact's relative_path is unsafe, or nullptr if it is fine. It is
// checked as written and after percent-decoding (libcurl decodes it in
// URLs): an escape of '/', '.', '\\', '%' or a control character (%2f, %2E,
// %5c, %25, %00, ...) is refused. ".." may only start the path, at most three
// times ("../../../pool/..." climbs from "<base>/<product>/redist/" to the
// base's parent, as NVIDIA's bin-archive does); where it lands is checked
// against the manifest's URL by resolve_reference() (model/urls.hpp). Used
// for manifests and lock files.
const char* artifact_path_problem(std::string_view relative_path) noexcept;

// True if `text` is 64 hex digits (either case): how a manifest, a lock or a
// receipt names an archive.
bool is_sha256_hex(std::string_view text) noexcept;

}  // namespace redist
