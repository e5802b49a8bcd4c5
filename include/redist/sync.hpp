// redist/sync.hpp — a whole project (redist.toml) into one prefix, in one
// transaction. The workflow of `redist sync` and `redist lock`, in four steps:
//
//   open_project   find redist.toml (here or in a parent directory), refuse
//                  a stranger's file, read it bounded, parse it strictly,
//                  find its lock
//   lock_project   the project lock (lockfile.hpp, version 2) in a mode:
//                  update (resolve what changed, rewrite the lock when it
//                  changed), locked (the lock, checked against the project),
//                  frozen (the lock as it is)
//   plan_sync      the platform, the prefix, the lock's plans: an
//                  install_request
//   install()      (install.hpp), as for `redist fetch`; sync_project does
//                  the last two in one call
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/install.hpp"
#include "redist/lockfile.hpp"
#include "redist/project.hpp"
#include "redist/resolve.hpp"

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
    run_observer* observer = nullptr;
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

// A locked release's manifest (product, release_label and manifest_url as a
// lock records them), read again from the same sources in the same order as
// resolving it (request.sources: mirrors, then the lock's base, the URL
// less "/<product>/redist/redistrib_<label>.json"), so that a dead mirror
// falls back to the base. A
// manifest URL that is not <base>/<product>/redist/redistrib_<label>.json
// (locked from a manifest named by its location) is read from that URL
// alone. Of `request`, the sources, observer, recompressed and
// manifest_sha256 (the locked one to pin it, empty to see drift) are used;
// the product, version, base and location are the lock's. `redist fetch
// --locked` and plan_sync (for a mirror's recompressed copies) read it so.
// Outcomes: as resolve_release.
result<resolved_release> reread_locked_manifest(const std::string& product, const std::string& release_label,
                                                const std::string& manifest_url, release_request request,
                                                const transfer_options& transfer);

// ---- opening a project --------------------------------------------------------------

struct project_open_request {
    std::filesystem::path file{};       // the project file (--file); empty: found from start_dir (open_project)
    std::filesystem::path start_dir{};  // where the search starts; empty: the current directory
    std::filesystem::path lock_file{};  // empty: redist.lock beside the project file
    // The local directories among the sources the caller named (its base
    // and mirrors): a lock's file:// URLs may point under them.
    std::vector<std::filesystem::path> local_roots{};
    // Products the caller names (`--upgrade --product P`): each must be one
    // of the project's.
    std::vector<std::string> products{};
};

struct opened_project {
    std::filesystem::path file;  // as given, or as found: messages name it
    project_file project;        // parsed from the file, made absolute
    std::filesystem::path lock_path;
    // Where a lock's file:// URLs may point: the request's local_roots,
    // then the project's own local sources (a base-url or mirrors naming a
    // directory inside the project's, checked again after resolving
    // symlinks: a "mirror -> /etc" link in a checkout is refused).
    std::vector<std::filesystem::path> roots;
};

// Finds (unless request.file names it), reads (read_project_document: a
// regular file, at most kMaxProjectFileBytes) and parses the project file,
// and checks its local sources. The project file is redist.toml in
// start_dir or in the nearest parent, up to the repository root (a
// directory holding .git, which is searched too) or /. A file found above
// start_dir that belongs to another user (neither this process's effective
// user nor root) is refused: running as root in a shared /tmp, a
// stranger's redist.toml is no project.
// Outcomes: ok | not_found (no project file up to the root; path =
// start_dir) | bad_manifest (another user's file; path = the file; a local
// source outside the project's directory: source = the file, json_path =
// "project.base-url" or "project.mirrors[i]") | filesystem, bad_manifest
// (read_project_document, parse_project) | usage (a named product the
// project lacks, with a suggestion; source = the file).
result<opened_project> open_project(const project_open_request& request);

// ---- locking it ------------------------------------------------------------------

// How a project's lock is made, as uv's and pixi's flags:
//   update  the lock brought up to date: what it pins stays, what changed
//           in the project file (or is upgraded) is resolved; written only
//           when it changed (`redist lock`, a plain `redist sync`)
//   locked  the lock as written, after checking that it is up to date with
//           the project file; never written (`--locked`)
//   frozen  the lock as written, unchecked; never written (`--frozen`)
enum class lock_mode { update, locked, frozen };

struct project_lock_request {
    lock_mode mode = lock_mode::update;
    // update: resolve these again from their spec even when locked
    // (`--upgrade [--product P]`): every product when upgrade_all, else
    // those named (they set project_resolve_options' fields of the same
    // names). locked and frozen refuse them: they never change the lock.
    bool upgrade_all = false;
    std::vector<std::string> upgrade{};
    // Sources, CUDA detection, the manifest hook; `previous`, upgrade_all
    // and upgrade are set by lock_project. An empty base_url is the
    // project's base-url, else default_base_url; empty sources.mirrors are
    // the project's mirrors.
    project_resolve_options resolve{};
    // When set, gives the options instead of `resolve`, called each time
    // they are needed and not before: a caller whose sources cost something
    // (opening a cache, asking the driver) pays only once the platform, the
    // prefix and (locked, frozen) the lock are found good.
    std::function<project_resolve_options()> make_resolve{};
    bool write = true;  // update: write the lock when it changed (false: a dry run)
};

struct project_lock_report {
    project_lock lock;
    std::vector<std::string> notes;     // the resolution's, one line each: alias renames, defaulted CUDA variants
    std::vector<std::string> warnings;  // one line each: a lock path holding no regular file, replaced
    bool written = false;               // the lock file was written
};

// The lock is a regular file, never followed through a symlink: what a
// checkout holds at its name otherwise (a link to /etc/shadow) is never
// read; locked and frozen then fail, update replaces it (a warning). It is
// read bounded (kMaxLockFileBytes), parsed strictly, and every URL in it
// must be http(s) or lie under project.roots (check_lock_sources).
// update writes it atomically (atomic_write, durable): a reader sees the
// old lock or the new one.
// Outcomes: ok | usage (locked or frozen with an upgrade asked for) |
// bad_manifest (no lock for locked or frozen; not a regular file; a lock
// out of date with the project file in locked mode; an unreadable or
// hostile lock, never replaced) | update: what resolving returns (not_found:
// a product, version, component, platform or variant missing, the error
// names the product; network; bad_manifest; integrity: a manifest that now
// names other bytes for an artifact the lock pins in the same release,
// unless that product is upgraded) | filesystem (writing it).
result<project_lock_report> lock_project(const opened_project& project, const project_lock_request& request);

// ---- syncing it ------------------------------------------------------------------

struct sync_request {
    project_lock_request lock{};     // its resolve options' sources are also install()'s
    std::string platform{};          // a platform the project lists; empty: this machine's
    std::filesystem::path prefix{};  // instead of the project's (--prefix); empty: the project's
    // Install into the project's prefix even when it lies outside the
    // project file's directory (lexically, or once the symlinks of the parts
    // that exist are resolved); refused otherwise.
    bool allow_outside_prefix = false;
    std::vector<std::string> exclude{};  // added to the project's
    // Keep components in the prefix that the project does not name (by
    // default they leave it in the same transaction).
    bool keep_unlisted = false;
    // Attach a mirror's recompressed copies where the lock pins their
    // decoded tar (each such product's locked manifest read again, with the
    // copies' record beside it); a product whose manifest cannot be read
    // again gets none (an observer on_copy_failure), never an error.
    bool use_recompressed = true;
};

struct sync_plan {
    project_lock_report lock;
    std::string platform;
    // The prefix, the lock's plans for the platform, the excludes, the
    // sources: ready for install() once the caller adds its observer,
    // budget and flags.
    install_request install;
};

// The project's platform (request.platform, which the project must list),
// its prefix (request.prefix, else the project's, inside its directory
// unless allow_outside_prefix), its lock in request.lock's mode
// (lock_project), and one release_plan per product for the platform.
// Outcomes: ok | usage (a platform the project does not list; source = the
// file) | bad_manifest (a prefix outside the project's directory; source =
// the project file, json_path = "project.prefix") | what detect_host_platform
// and lock_project return | not_found (the lock does not list the platform;
// source = the lock file).
result<sync_plan> plan_sync(const opened_project& project, const sync_request& request);

// An install() error against a project lock, explained: an archive that
// does not match what the lock pins for `platform` (its size or SHA-256,
// an integrity error) may have been replaced in place upstream, so the
// message names the locked artifact and how to accept the new bytes
// (`redist sync --upgrade --product P`). The lock is never rewritten to
// match. Any other error is returned as it is.
error explain_lock_mismatch(error e, const project_lock& lock, const std::string& platform);

struct sync_report {
    project_lock_report lock;
    std::string platform;
    install_report report;  // what landed, and what left the prefix
};

// plan_sync, then install() with the plan as it is (install_request's
// defaults for the rest). Outcomes: as plan_sync and install() (an
// integrity error explained: explain_lock_mismatch).
result<sync_report> sync_project(const opened_project& project, const sync_request& request);

REDIST_API_END
}  // namespace redist
