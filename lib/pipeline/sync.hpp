// pipeline/sync.hpp (internal) — the steps of a project's workflow that
// open_project, lock_project and plan_sync take (sync.cpp): finding the
// project file, checking its prefix and its local sources, resolving it
// into a lock, and attaching a mirror's recompressed copies to the lock's
// plans; exposed for the unit tests (tests/unit/pipeline/sync_test.cpp).
// redist/sync.hpp holds the workflow a program runs.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/lockfile.hpp"
#include "redist/manifest.hpp"
#include "redist/project.hpp"
#include "redist/sync.hpp"

namespace redist {

// ---- opening a project --------------------------------------------------------------

// The project file above `start_dir`: redist.toml in it or in the nearest
// parent, up to the repository root (a directory holding .git, which is
// searched too) or /. A file found above `start_dir` that belongs to
// another user (neither this process's effective user nor root) is refused:
// running as root in a shared /tmp, a stranger's redist.toml is no project.
// The file is not read. Outcomes: ok (start_dir / ... / "redist.toml") |
// not_found (none up to the root; path = start_dir) | bad_manifest (another
// user's; path = the file).
result<std::filesystem::path> find_project(const std::filesystem::path& start_dir);

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

// ---- resolving it -------------------------------------------------------------------

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

// ---- planning its sync --------------------------------------------------------------

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

}  // namespace redist
