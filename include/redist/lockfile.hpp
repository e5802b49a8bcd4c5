// redist/lockfile.hpp — reviewable lock files: a resolved request, pinned.
//
//   {"lock_version": 1, "product": "cudnn", "release_label": "9.27.0",
//    "manifest_url": "...", "manifest_sha256": "...",
//    "artifacts": [{"component", "version", "platform", "variant", "relative_path",
//                   "url", "sha256", "size"}, ...]}
//
// Artifacts are sorted (platform, variant, component) so that a re-lock of
// the same request produces the same bytes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/manifest.hpp"

namespace redist {

struct locked_artifact {
    artifact entry;       // component, platform, variant, relative_path, sha256, size, format
    std::string version;  // the component's version
    std::string url;      // absolute URL it was resolved to
};

struct lockfile {
    std::string product;
    std::string release_label;
    std::string manifest_url;
    std::string manifest_sha256;
    std::vector<locked_artifact> artifacts;
};

std::string lockfile_to_json(const lockfile& lock);
// Outcomes: ok | bad_manifest (source and json_path name the problem).
result<lockfile> lockfile_from_json(std::string_view json, std::string_view source);

// The locked artifacts for one platform and, where variants exist, one CUDA
// major (nullopt: the newest locked for that platform).
// Outcomes: ok | not_found (lists what the lock file holds).
result<std::vector<locked_artifact>> locked_for(const lockfile& lock, const std::string& platform,
                                                std::optional<int> cuda_major);

// Compares a (re-fetched) manifest with the lock: every locked artifact must
// still be in the manifest with the same sha256 and size.
// Outcomes: ok | integrity (names the component, platform and both hashes).
result<void> check_lock_against_manifest(const lockfile& lock, const manifest& m);

}  // namespace redist
