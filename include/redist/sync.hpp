// redist/sync.hpp — a whole project (redist.toml) into one prefix, in one
// transaction: resolve every product for every listed platform into a
// project lock (lockfile.hpp, version 2). Installing what the lock pins for
// one platform is install()'s job (fetch.hpp), as for `redist fetch`.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/fetch.hpp"
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

}  // namespace redist
