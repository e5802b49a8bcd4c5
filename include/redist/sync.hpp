// redist/sync.hpp — a whole project (redist.toml) into one prefix, in one
// transaction: resolve every product for every listed platform into a
// project lock (lockfile.hpp, version 2), then stage every artifact of every
// product for one platform and commit them with a single journal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/fetch.hpp"
#include "redist/install.hpp"
#include "redist/lockfile.hpp"
#include "redist/project.hpp"

namespace redist {

// ---- resolving a project ------------------------------------------------------------

struct project_resolve_options {
    std::string base_url;   // the effective base (the project's base-url, else the caller's)
    source_policy sources;  // mirrors, cache, offline: as for resolve_release
    transfer_options transfer;
    // Called once per product with the manifest as fetched (drift watching,
    // in the tools). A returned error stops the resolution with that error.
    std::function<result<void>(const resolved_release&)> on_manifest;
    // The project's lock so far (nullptr: none): the lock is authoritative,
    // as uv's and pixi's are. A product whose version spec and components
    // are the lock's, under the lock's platforms and CUDA major, keeps its
    // locked entry as is, with no request; one whose components, or the
    // project's platforms or CUDA major, changed is resolved again at its
    // locked release; a new product, or one whose version spec changed, is
    // resolved from its spec. Products no longer in the project are dropped.
    const project_lock* previous = nullptr;
    // Resolved from their spec even when locked (`--upgrade`): every product
    // when `upgrade_all`, else those named in `upgrade`. Only for these may
    // a locked artifact that upstream replaced in place (same release, other
    // SHA-256 or size) take the new bytes.
    bool upgrade_all = false;
    std::vector<std::string> upgrade;
};

struct project_resolution {
    project_lock lock;
    std::vector<std::string> notes;  // one line each: alias renames, defaulted CUDA variants
};

// Resolves every product of the project (one manifest each), and for every
// listed platform selects its artifacts: the project's CUDA major where the
// product has variants, else the newest offered there. A component named by
// its other name in the alias table (cuda_cccl for a CUDA 13 release, where
// it is cccl) is locked under the manifest's name, with a note; the lock
// keeps the name as written in redist.toml for the staleness check.
// With options.previous, see there: a manifest that now names other bytes
// (SHA-256 or size) for an artifact the lock pins in the same release is an
// integrity error naming the product, component, both hashes and how to
// accept it, unless that product is being upgraded (then a note).
// Outcomes: ok | not_found (a product, version, component, platform or
// variant missing: the error names the product) | network | bad_manifest | integrity.
result<project_resolution> resolve_project(const project_file& project, const project_resolve_options& options);

// Where `project` installs, unless the command line says otherwise: its
// prefix must lie inside the project file's directory, lexically (after
// "..") and again after resolving the symlinks of the parts that exist. A
// cloned project must not make an exact sync remove another prefix's
// components or write outside the checkout.
// Outcomes: ok | bad_manifest (source = the project file, json_path = "project.prefix").
result<void> check_project_prefix(const project_file& project);

// The project's local sources (a base-url or mirrors naming a directory,
// which parse_project() keeps inside the project's directory lexically),
// checked again after resolving symlinks: a "mirror -> /etc" link in a
// checkout is refused. Returns their paths: a lock's file:// URLs may point
// under them (check_lock_sources).
// Outcomes: ok | bad_manifest (source = the project file, json_path =
// "project.base-url" or "project.mirrors[i]").
result<std::vector<std::filesystem::path>> project_local_roots(const project_file& project);

// ---- installing several products in one transaction ---------------------------------

// One product's share of a multi-product install.
struct product_install {
    std::string product;
    std::string label;
    std::string artifact_base_url;
    std::vector<artifact> artifacts;
    std::map<std::string, std::string> component_versions;
};

struct multi_install_request {
    std::filesystem::path prefix;
    std::vector<product_install> products;
    // Archive paths (prefix-relative, as installed) to skip: fnmatch(3) globs
    // with FNM_PATHNAME ('*' does not cross '/'). A glob that matches a
    // directory skips everything below it. Skipped paths are recorded in the
    // receipts (receipt::excluded), so verify does not miss them; a component
    // whose receipt was made with other globs is reinstalled.
    std::vector<std::string> exclude;
    // Everything else (force, link mode, jobs, expansion cap, transfer,
    // sources, callbacks) as for install(); its prefix, product, label,
    // artifact base, artifacts and component versions are ignored.
    install_request options;
    // Free-space preflight (space_preflight below): before any download, the
    // prefix's filesystem must hold the unpacked contents
    // (unpacked_size_estimate), plus the archives still to be fetched when
    // the cache shares it or cannot hold them (the download then bypasses
    // the cache and spools beside the stage). Fails with filesystem (exit 10)
    // naming both numbers.
    bool check_free_space = true;
    // The prefix holds exactly what the request names (as `uv sync`): a
    // component installed there that no product of the request names on this
    // platform (an artifact's (product, component)) is removed, in the same
    // journal as the installs. That includes components a plain `redist fetch`
    // put into the prefix. True keeps them (`redist sync --keep-unlisted`).
    bool keep_unlisted = false;
};

// A component install_all removed because the request no longer names it.
struct removed_component {
    std::string product;
    std::string component;
    std::string version;        // the receipt's component version
    std::string release_label;  // the receipt's release
    std::size_t files = 0;      // the files its receipt lists (shared ones stay)
};

struct multi_install_report {
    std::vector<install_report> products;    // in request order
    std::vector<removed_component> removed;  // sorted by (product, component)
};

// Stages every product's artifacts (receipts already matching are left
// alone), then commits them all, and removes the unlisted components (unless
// keep_unlisted), with one commit_stages_removing() call: one journal, all or
// nothing. A failure before the commit (a download, a hash, a conflict)
// leaves the prefix as it was, unlisted components included.
// Outcomes: as install(), plus filesystem for the free-space preflight.
result<multi_install_report> install_all(const multi_install_request& request);

// ---- the pieces, for callers that hold the lock themselves --------------------------

// Downloads and stages request.artifacts under `lock` without committing
// (lib/pipeline/fetch.cpp). `receipts` are the prefix's current receipts: an artifact
// whose receipt matches (and, with `exclude`, was made with the same globs)
// is reported unchanged and not staged, unless request.force. On failure,
// every stage under the lock is discarded. `exclude` as in multi_install_request.
struct staged_install {
    install_report report;
    std::vector<staged_component> staged;
};
result<staged_install> stage_install(const install_request& request, const prefix_lock& lock,
                                     const std::vector<receipt>& receipts, const std::vector<std::string>& exclude);

// The receipt already has this artifact of `product`, made with these exclude globs.
bool receipt_current(const receipt& r, const std::string& product, const artifact& a,
                     const std::vector<std::string>& exclude);

// True when `path` (prefix-relative) or one of its parent directories matches one of `globs`.
bool path_excluded(std::string_view path, const std::vector<std::string>& globs);

// What an archive of `archive_size` bytes takes at least once unpacked:
// 3/2 of its size. xz shrinks real CUDA payloads by 1.5x at the least
// (cuDNN 9.19: 471 MiB unpacked from 312 MiB) and by up to about 6x (headers),
// so this is a floor: a preflight that refused installs which fit would be
// worse than one that lets a few fail later. Saturates instead of wrapping.
std::uint64_t unpacked_size_estimate(std::uint64_t archive_size) noexcept;

// The one free-space preflight (install() and install_all): the artifacts of
// `products` without a current receipt (unless options.force) must fit, once
// unpacked (unpacked_size_estimate), on the prefix's filesystem; those not yet
// in options.sources' cache count there too unless the cache, on a
// filesystem of its own, has room for them (check_free_space).
// Outcomes: ok | filesystem.
result<void> space_preflight(const std::filesystem::path& prefix, const std::vector<product_install>& products,
                             const install_request& options, const std::vector<receipt>& receipts,
                             const std::vector<std::string>& exclude);

// The free-space check of install_all, on its own. `needed_prefix` and
// `needed_cache` are bytes; `cache_dir` may be empty (no cache). Where both
// lie on one filesystem, their sum must fit. REDIST_TEST_FREE_BYTES (tests
// only) replaces the free space statvfs reports.
// Outcomes: ok | filesystem (names the directory, what is needed and what is free).
result<void> check_free_space(const std::filesystem::path& prefix, std::uint64_t needed_prefix,
                              const std::filesystem::path& cache_dir, std::uint64_t needed_cache);

}  // namespace redist
