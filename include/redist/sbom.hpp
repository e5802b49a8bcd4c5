// redist/sbom.hpp — software bills of materials for what redist installed in
// a prefix: SPDX 2.3 JSON and CycloneDX 1.5 JSON, built from the receipts.
//
// Each installed component becomes one package (SPDX) or component
// (CycloneDX) carrying its product, release, version, platform, CUDA variant,
// download URL, archive SHA-256 and the license its manifest names; each
// regular file it installed is listed with its SHA-256 (and SHA-1, which SPDX
// 2.3 requires for files). Symlinks are not listed: their targets are.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/prefix.hpp"

namespace redist {
REDIST_API_BEGIN

enum class sbom_format : std::uint8_t { spdx_json, cyclonedx_json };

// "spdx-json" or "cyclonedx-json". Outcomes: ok | usage (names the choices).
result<sbom_format> parse_sbom_format(std::string_view text);

struct sbom_file {
    std::string path;  // prefix-relative, '/'-separated
    std::uint64_t size = 0;
    std::string sha256;
    std::string sha1;
};

struct sbom_component {
    receipt installed;             // the receipt (its `files` are not used; see `files`)
    std::string license;           // as the manifest names it ("CUDA Toolkit", "MIT"); empty: unknown
    std::vector<sbom_file> files;  // the regular files, sorted by path
};

struct sbom_document {
    std::string name;          // what the document describes, e.g. the prefix's directory name
    std::string created;       // ISO 8601 UTC, "2026-11-30T12:00:00Z"
    std::string tool_version;  // "0.1.0"
    std::vector<sbom_component> components;
};

// Renders the document. Deterministic: the same document gives the same
// bytes, so the SPDX namespace and the CycloneDX serial number are derived
// from a hash of the content (and `created`), not drawn at random.
// License names that are SPDX identifiers ("MIT") are used as such; every
// other name becomes a LicenseRef-<name> (SPDX, with its extracted text
// pointing at share/licenses/<component>/) or a named license (CycloneDX).
std::string render_sbom(const sbom_document& doc, sbom_format format);

// (product, component) -> the license named in that release's manifest.
using license_table = std::map<std::pair<std::string, std::string>, std::string>;

struct sbom_request {
    std::filesystem::path prefix;
    license_table licenses;  // missing entries: the license is unknown (NOASSERTION)
    std::string created;     // empty: now
    std::string tool_version;
};

// Reads the receipts, then every regular file they list, hashing SHA-256 and
// SHA-1 in one pass. Files are opened beneath the prefix only (openat2
// RESOLVE_BENEATH, final component not followed), so a path in a receipt
// cannot lead outside it. The SBOM states what is installed now: a file
// whose size or SHA-256 differs from its receipt is an integrity error naming
// it (`redist verify` lists them all).
// Outcomes: ok | not_found (no receipts in the prefix) | bad_manifest (a
// corrupt receipt) | integrity | filesystem.
result<sbom_document> collect_sbom(const sbom_request& request);

REDIST_API_END
}  // namespace redist
