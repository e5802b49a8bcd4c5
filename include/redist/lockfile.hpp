// redist/lockfile.hpp — reviewable lock files: a resolved request, pinned.
//
//   {"lock_version": 1, "product": "cudnn", "release_label": "9.27.0",
//    "manifest_url": "...", "manifest_sha256": "...",
//    "artifacts": [{"component", "version", "platform", "variant", "relative_path",
//                   "url", "sha256", "size", "tar_sha256", "tar_list_sha256",
//                   "tree_sha256", "copy_key"}, ...]}
//
// "tar_sha256" and "copy_key" (optional) are written when the release was
// resolved through a mirror with recompressed copies (recompressed.hpp)
// whose record a trusted key signed: the SHA-256 of the archive's decoded
// tar, and the fingerprint of that key (signing.hpp). Installing from the
// lock then uses a copy only when its record is signed by a key trusted
// then, and it decodes to exactly that tar; an artifact locked without both
// is installed from its original, never from a copy. "tar_list_sha256"
// (optional) pins the same tar's hash list where the copy's record has one:
// a copy is then checked against it, its pieces hashed in parallel, rather
// than against tar_sha256 in one pass. "tree_sha256" (optional) pins the
// tree the copy unpacks to (recompressed_copy::tree_sha256) where its record
// has one: a copy is then checked by the files it writes, whose digests the
// receipt needs anyway, and its tar is not hashed.
//
// Artifacts are sorted (platform, variant, component) so that a re-lock of
// the same request produces the same bytes.
//
// Version 2, the project lock `redist sync` writes next to redist.toml, pins
// every product of a project for every listed platform:
//
//   {"lock_version": 2, "platforms": ["linux-sbsa", "linux-x86_64"], "cuda": 12,
//    "products": [{"name": "cuda", "version": "12.9", "components": ["cuda_nvcc"],
//                  "release_label": "12.9.1", "manifest_url": "...", "manifest_sha256": "...",
//                  "artifacts": [ ...as in version 1... ]}, ...]}
//
// "version", "components", "platforms" and "cuda" repeat what redist.toml
// asked for (components as written there, aliases included), so that a lock
// can be checked against the project file without any request: a lock whose
// inputs differ is stale (lock_project's locked mode refuses it). "cuda" is
// absent when the project names none. Products are sorted by name,
// platforms by name. A product with `deps = true` has "deps": true, and the
// `cuda` release its dependencies come from, when the project does not name
// `cuda` itself, is a product with "dependency_of": ["cudnn"].
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/manifest.hpp"
#include "redist/project.hpp"

namespace redist {
REDIST_API_BEGIN

struct locked_artifact {
    artifact entry;               // component, platform, variant, relative_path, sha256, size, format
    std::string version;          // the component's version
    std::string url;              // absolute URL it was resolved to
    std::string tar_sha256;       // the decoded tar of a mirror's recompressed copy; "" when none was recorded
    std::string tar_list_sha256;  // that tar's hash list (recompressed_copy::tar_list_sha256); "" when none
    std::string tree_sha256;      // the tree the copy unpacks to (recompressed_copy::tree_sha256); "" when none
    std::string copy_key;         // the fingerprint of the trusted key that signed that copy's record
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

// Compares a (re-fetched) manifest with the lock: every locked artifact must
// still be in the manifest with the same sha256 and size.
// Outcomes: ok | integrity (names the component, platform and both hashes).
result<void> check_lock_against_manifest(const lockfile& lock, const manifest& m);

// Every release a lock file pins, whichever version it is (a version 1 lock
// pins one; a project lock one per product), each as a version 1 lock would
// hold it: what `redist mirror --from-lock` mirrors. Outcomes: ok |
// bad_manifest (as lockfile_from_json / project_lock_from_json).
result<std::vector<lockfile>> releases_of_lock(std::string_view json, std::string_view source);

// ---- making and using a version 1 lock (`redist lock`, `fetch --locked`) ----

// Every URL of a lock is a source like any other (local_roots in urls.hpp):
// http(s)://, oci://, oci+http://, or file:// and oci-layout: under one of
// `local_roots` (the local mirrors and base the user named). Checked before anything is read.
// Outcomes: ok | bad_manifest (source = `source`, json_path = the URL's,
// e.g. "products[0].manifest_url", "artifacts[3].url").
result<void> check_lock_sources(const lockfile& lock, std::string_view source,
                                const std::vector<std::filesystem::path>& local_roots);

// Locks every artifact `components` (empty: all) selects on each platform
// and, per platform, each CUDA major in `cuda_majors` (empty: every variant
// offered). Plain artifacts are locked once. URLs are sanitized.
// Outcomes: ok | not_found (a platform, component or variant is missing).
result<lockfile> make_lockfile(const resolved_release& release, const std::vector<std::string>& platforms,
                               const std::vector<int>& cuda_majors, const std::vector<std::string>& components);

// What a lock installs (release_plan, manifest.hpp): the lock's artifacts for `platform` and `cuda_major` (nullopt:
// the newest locked for that platform), restricted to `components` when not empty. A component may be named by its
// other name in the alias table (cuda_cccl for cccl); `notes` then gets a line saying so. No request is made. Outcomes:
// ok | not_found (platform, variant or a component not locked).
result<release_plan> plan_from_lock(const lockfile& lock, const std::string& platform, std::optional<int> cuda_major,
                                    const std::vector<std::string>& components,
                                    std::vector<std::string>* notes = nullptr);

// ---- version 2: the project lock ------------------------------------------------

struct locked_product {
    std::string name;                     // the product ("cuda")
    std::string version_spec;             // as redist.toml asked ("12.9")
    std::vector<std::string> components;  // as redist.toml asked (empty: every component)
    std::optional<int> cuda;              // the product's own `cuda` in redist.toml ("cuda" here; absent: none)
    std::string release_label;            // what it resolved to ("12.9.1")
    std::string manifest_url;
    std::string manifest_sha256;
    std::vector<locked_artifact> artifacts;  // every listed platform
    // Per platform with CUDA variants: the variant keys locked and why
    // ("cuda12: detected CUDA 12.4.1 (CUDA_HOME=/opt/cuda, version.json)"),
    // as "cuda_reasons": [{"platform", "reason"}]; absent in older locks.
    std::map<std::string, std::string> cuda_reasons;
    // redist.toml's `deps = true` for this product ("deps": true; absent: false).
    bool deps = false;
    // A product the project does not name, locked for the dependencies
    // (dependencies.hpp) of these products ("dependency_of": ["cudnn"]); empty
    // for a product of the project. Its version and components are what the
    // table asked for: the CUDA major ("12") and the components.
    std::vector<std::string> dependency_of;
};

struct project_lock {
    std::vector<std::string> platforms;  // sorted
    std::optional<int> cuda;
    std::vector<locked_product> products;  // sorted by name
};

inline constexpr std::uint64_t kMaxLockFileBytes = 16u << 20;

// Outcomes: ok | bad_manifest (source and json_path name the problem: broken
// JSON, a duplicate key, a name that is not valid, a product twice, not
// version 2). Never crashes on any input (fuzzed: tests/fuzz/project_lock_fuzz.cpp).
result<project_lock> project_lock_from_json(std::string_view json, std::string_view source);

// As for the version 1 lock: every manifest and artifact URL of every product.
result<void> check_lock_sources(const project_lock& lock, std::string_view source,
                                const std::vector<std::filesystem::path>& local_roots);

REDIST_API_END
}  // namespace redist
