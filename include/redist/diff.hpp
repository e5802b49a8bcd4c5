// redist/diff.hpp — what changed between two manifests of a product:
// components added, removed or renamed, versions, platforms, CUDA variants,
// artifacts and sizes. `redist diff` compares two releases with it; drift
// watching compares two fetches of one manifest URL with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/export.hpp"
#include "redist/manifest.hpp"

namespace redist {
REDIST_API_BEGIN

enum class artifact_change_kind : std::uint8_t {
    added,              // a platform/variant the old manifest lacked
    removed,            // a platform/variant the new manifest lacks
    rebuilt,            // a new file (another relative_path): a new build or version
    replaced_in_place,  // same relative_path, another SHA-256 or size: upstream swapped the file
};
const char* to_string(artifact_change_kind kind) noexcept;

struct artifact_change {
    artifact_change_kind kind = artifact_change_kind::added;
    std::string component;  // the key in the new manifest (old one for removed)
    std::string platform;
    std::optional<std::string> variant;
    std::string old_relative_path, new_relative_path;  // empty for added / removed
    std::string old_sha256, new_sha256;
    std::uint64_t old_size = 0, new_size = 0;
};

struct component_rename {
    std::string from, to;
};

struct version_change {
    std::string component;  // the key in the new manifest
    std::string from, to;
};

struct manifest_diff {
    std::string old_label, new_label;  // release labels (may be empty in old manifests)
    std::vector<std::string> added;    // component keys, in manifest order
    std::vector<std::string> removed;
    std::vector<component_rename> renamed;
    std::vector<version_change> versions;
    std::vector<std::string> platforms_added, platforms_removed;  // sorted
    std::vector<std::string> variants_added, variants_removed;    // "cuda13", sorted
    std::vector<artifact_change> artifacts;                       // changed artifacts only; unchanged ones are left out
    std::uint64_t old_total_size = 0, new_total_size = 0;         // every artifact of each manifest

    // True when no component, version or artifact differs (other fields of
    // the manifests, like release_date, may still differ).
    bool empty() const noexcept;
    // True when an artifact was replaced in place (the one change a lock or
    // a cache cannot explain).
    bool has_replacement() const noexcept;
};

// Compares `from` (old) with `to` (new). Components are matched by key,
// then through the one table of components NVIDIA renamed between releases
// (cuda_cccl became cccl in CUDA 13.0), reported as renamed; artifacts by
// (component, platform, variant).
manifest_diff diff_manifests(const manifest& from, const manifest& to);

// The diff as one JSON object (keys as in manifest_diff); stable, for --json.
std::string manifest_diff_to_json(const manifest_diff& d, int indent = 2);

REDIST_API_END
}  // namespace redist
