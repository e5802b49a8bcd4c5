// redist/sync.hpp — a whole project (redist.toml) into one prefix, in one
// transaction: resolve every product for every listed platform into a
// project lock (lockfile.hpp, version 2). Installing what the lock pins for
// one platform is install()'s job (install.hpp), as for `redist fetch`.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/install.hpp"
#include "redist/lockfile.hpp"
#include "redist/project.hpp"

namespace redist {
REDIST_API_BEGIN

// ---- resolving a project ------------------------------------------------------------

struct project_resolve_options {
    std::string base_url;   // the effective base (the project's base-url, else the caller's)
    source_policy sources;  // mirrors, cache, offline: as for resolve_release
    transfer_options transfer;
    // Called once per product with the manifest as fetched (drift watching,
    // in the tools). A returned error stops the resolution with that error.
    std::function<result<void>(const resolved_release&)> on_manifest;
    // Retries, source changes, and a mirror's recompressed-copy record that
    // cannot be used (resolve_release); not owned, may be null.
    fetch_observer* observer = nullptr;
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
    // The CUDA toolkit found on this machine (detect_cuda), for products
    // with variants where neither the product nor the project names a
    // `cuda` (choose_cuda_variant); nullopt: none found, or not looked for.
    std::optional<cuda_detection> detected_cuda;
    // With no toolkit found: what the system's driver supports
    // (cuda_from_driver), called only for such a product on a platform where
    // its components offer variants, so that a project without them asks no
    // driver (the tool asks it once and keeps the answer). Null, or nullopt
    // from it: no driver to ask.
    std::function<std::optional<cuda_detection>()> driver_cuda;
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
// A resolved product's artifacts that a mirror's recompressed copy
// (recompressed.hpp) describes get that copy's tar_sha256 in the lock, as
// `redist lock` pins them (make_lockfile).
// Outcomes: ok | not_found (a product, version, component, platform or
// variant missing: the error names the product) | network | bad_manifest | integrity.
result<project_resolution> resolve_project(const project_file& project, const project_resolve_options& options);

// A mirror's recompressed copies for `plans` (plans_for_platform(lock, ...)),
// as `redist fetch --locked` finds them: for each product whose lock pins a
// decoded tar (tar_sha256), its locked manifest is read again from
// options' sources (mirrors first), pinned to the locked manifest_sha256,
// with the recompressed-copy record beside it, and the record's copies are
// attached to the product's plan; install() uses a copy only where it
// decodes to the tar the lock pins. A product whose lock pins no tar is not
// asked for anything. A manifest that cannot be read again, or is no longer
// the locked one: that product gets no copies and options.observer one
// on_copy_failure (component empty). Never fails: the originals stay.
void attach_locked_copies(const project_lock& lock, std::vector<release_plan>& plans,
                          const project_resolve_options& options);

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

REDIST_API_END
}  // namespace redist
