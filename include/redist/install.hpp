// redist/install.hpp — the whole pipeline, end to end: resolve a release, pick
// artifacts, stream each one through download -> SHA-256 + size -> decode ->
// unpack into a stage, verify, and commit into the prefix.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "redist/budget.hpp"
#include "redist/cache.hpp"
#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/manifest.hpp"
#include "redist/observer.hpp"
#include "redist/platform.hpp"
#include "redist/prefix.hpp"
#include "redist/resolve.hpp"
#include "redist/select.hpp"
#include "redist/transfer.hpp"

namespace redist {
REDIST_API_BEGIN

// ---- installing ----------------------------------------------------------------

struct install_request {
    std::filesystem::path prefix;
    std::vector<release_plan> releases;  // what to install: one per release (fetch: one; sync: one per product)
    // Archive paths (prefix-relative, as installed) to skip: fnmatch(3) globs
    // with FNM_PATHNAME ('*' does not cross '/'). A glob that matches a
    // directory skips everything below it. Skipped paths are recorded in the
    // receipts (receipt::excluded), so verify does not miss them; a component
    // whose receipt was made with other globs is reinstalled.
    std::vector<std::string> exclude;
    // False: the prefix holds exactly what the request names (as `uv sync`):
    // a component installed there that no release of the request names (an
    // artifact's (product, component)) is removed, in the same journal as the
    // installs. `redist sync` sets it false unless --keep-unlisted.
    bool keep_unlisted = true;
    // Free-space preflight, from the plan's totals: before any download,
    // the prefix's filesystem must hold the unpacked contents (at least 3/2
    // of each archive's size: install_plan::unpack_bytes), plus the archives
    // still to be fetched when the cache shares it or cannot hold them (the
    // download then bypasses the cache and spools beside the stage). Fails
    // with filesystem (exit 10) naming both numbers.
    bool check_free_space = true;
    bool reinstall = false;          // --force: reinstall even when receipts match
    bool overwrite_unowned = false;  // --force: replace files in the prefix no receipt owns (commit_stages)
    link_mode tree_link_mode = link_mode::auto_select;  // how cached trees are placed (see cache.hpp)
    unsigned jobs = 0;  // concurrent artifacts; 0 = default_jobs() of the artifacts to fetch
    // Ranged connections per archive (http/https): 0 = the default: an
    // archive of 64 MiB or more starts as one stream and goes on over 6
    // connections once that stream is seen to keep the decoder waiting
    // (measured: bench/capped_link.py); N > 1 splits any archive of at least
    // 8 MiB from the first request; 1 = one stream. A server that ignores
    // ranges gets one stream anyway.
    int connections = 0;
    // Threads and memory the artifacts in flight share (make_run_budget; its
    // profile_of() afterwards has the per-stage times). The only source of
    // thread counts: null makes install() create one for the machine.
    std::shared_ptr<run_budget> budget;
    // Unverified bytes are bounded. The hash is known only after the last
    // byte, but unpacking runs while the bytes arrive, so a hostile archive
    // of the right size and the wrong hash could expand to gigabytes before
    // it is caught. Its decoded output (tar stream and file contents, holes
    // included) may be at most max_expansion times the manifest's size, and
    // never less than min_expansion_bytes (tiny archives are mostly tar
    // headers, which xz shrinks 50x and more). Past the cap unpacking stops,
    // the download runs to its end, and the hash decides: a mismatch is an
    // integrity failure (the next source is tried); a match is an unsafe
    // archive. Why 20: xz shrinks real CUDA payloads 1.5x (cuDNN 9.19: 471 MiB
    // -> 312 MiB) to about 6x (text-heavy header packages), so 20 leaves more
    // than 3x headroom, while an xz bomb (zeros shrink ~1000x and more) stops
    // after writing 20x the download. 0 = no cap.
    unsigned max_expansion = 20;
    std::uint64_t min_expansion_bytes = 64ull << 20;
    transfer_options transfer;
    source_policy sources;
    run_observer* observer = nullptr;  // not owned; null: nobody listens
    // Not owned; null: the run is never stopped from outside. Setting it
    // (from any thread, or a signal handler: Ctrl-C in the tools) stops the
    // run before its commit: transfers stop between chunks, no new artifact
    // starts, every stage is discarded (the prefix is unchanged, a .part in
    // the cache stays for a resume) and install returns cancelled. The
    // library sets it too when an artifact fails, to stop the others.
    std::atomic<bool>* cancel = nullptr;
    // A release's recompressed copies (release_plan::copies) are tried before
    // the originals they stand for, when the original is not in the cache.
    // False (--no-recompressed): never. A copy that fails in any way (network,
    // size, SHA-256, bad zstd, a decoded tar other than the recorded or the
    // locked one) is discarded with one observer on_copy_failure, and the
    // original is installed through the normal path.
    bool use_recompressed = true;
};

// ---- the plan: what install() will do, decided before anything is done ------------------

// Where an artifact comes from, decided once, by the plan: install() runs
// each artifact's job from the action planned for it, and does not classify
// again. Only runtime facts make a job fall through to the next source: a
// cached tree that cannot be trusted falls back to the blob (else the
// download), a blob that fails re-verification to the download. And a
// download whose archive another process sharing the cache published while
// this one waited for the blob's lock (single flight) takes that tree or blob
// instead of downloading the same bytes again.
enum class plan_action : std::uint8_t {
    unchanged,         // its receipt matches (and was made with the same exclude globs)
    from_cached_tree,  // the cache holds the archive's extracted tree: placed, not decoded
    from_cached_blob,  // the cache holds the verified archive: re-verified while it is unpacked
    download,          // mirrors, then the base
    remove,            // installed, but no release of the request names it (keep_unlisted false)
};
const char* to_string(plan_action action) noexcept;

struct planned_artifact {
    plan_action action = plan_action::download;
    std::string product;
    std::string component;
    std::string version;                 // the component's version (remove: the receipt's)
    std::optional<std::string> variant;  // the artifact's CUDA variant (remove: the receipt's)
    std::uint64_t size = 0;              // the archive's bytes (remove: 0)
    std::size_t release = 0;             // index in install_request::releases (remove: none)
    std::size_t artifact = 0;            // index in that release's artifacts
    std::size_t files = 0;               // remove: the files its receipt lists
    std::string release_label;           // remove: the receipt's release
    bool from_copy = false;              // download: a mirror's recompressed copy is tried first
    // The files it would write (or remove) are known before anything is
    // unpacked: unchanged and remove always; for the others, only in the
    // plan of forecast_install (--dry-run), where the cache's extracted tree
    // or a matching receipt lists them, or the archive was read to learn
    // them. False: its conflicts, if any, are found only once it is
    // unpacked, by install().
    bool files_known = false;
    // The receipt of this (product, component) already in the prefix, if
    // any: its component version and CUDA variant (what the install replaces).
    std::optional<std::string> previous_version;
    std::optional<std::string> previous_variant;
};

// A path the commit would refuse to write: install() would fail with a
// conflict (exit 9).
struct planned_conflict {
    std::string path;     // relative to the prefix
    std::string message;  // why, one line, as install()'s error says it
};

struct install_plan {
    std::vector<planned_artifact> items;  // releases' artifacts in request order, then removals by (product, component)
    std::uint64_t download_bytes = 0;     // archives to download (saturating)
    std::uint64_t unpack_bytes = 0;       // what unpacking needs at least in the prefix (3/2 of each archive)
    // forecast_install only: every conflict the commit would refuse among
    // the files known then (the items with files_known), sorted by path, one
    // per path. Complete when every item's files are known.
    std::vector<planned_conflict> conflicts;
    // forecast_install only: the archives it downloaded and unpacked into
    // the cache to learn their files, and their bytes.
    std::size_t archives_read = 0;
    std::uint64_t archive_bytes_read = 0;
};

// --dry-run's forecast, with every conflict. First the plan install()
// would make: the prefix's receipts are read (none when it does not exist)
// and the cache is opened read-only. Then, where an archive's files are not
// known from the cache's extracted trees or from the receipt of an artifact
// reinstalled as it is, the archive is read as install() reads it
// (downloaded, verified, unpacked, its extracted tree kept in the cache)
// into a throwaway prefix in the cache's scratch/, which is removed: nothing
// in the prefix changes. Then the commit's conflicts
// (install_plan::conflicts) are forecast from the known lists, once (the
// prefix's files in the way are hashed once, as the commit would). The
// plan's actions are those from before the archives were read (what an
// install would have done before this call); archives_read says what was
// read. Without a cache, no archive is read.
// Outcomes: ok | filesystem (a cache that cannot be trusted, a prefix that
// cannot be read) | bad_manifest (a corrupt receipts directory) |
// install()'s failures of the read archives (network, integrity, ...; the
// prefix is untouched).
result<install_plan> forecast_install(const install_request& request);

// ---- installing ---------------------------------------------------------------------------

struct component_report {
    std::string component;
    std::string version;
    std::string platform;
    std::optional<std::string> variant;
    std::string url;  // the URL that served the archive (a mirror, the base, or the cache's source)
    std::string sha256;
    std::uint64_t size = 0;
    std::string copy_sha256;  // installed from a mirror's recompressed copy: its SHA-256 (else empty)
    std::size_t files = 0;
    int requests = 0;  // HTTP/file requests made for this artifact
    double seconds = 0;
    bool from_cache = false;
    bool from_tree = false;  // from the cache's extracted tree: nothing was decoded
    bool unchanged = false;  // receipts already matched: nothing was done
    // The receipt this install replaced (planned_artifact::previous_version):
    // its component version and variant; unset for a new install.
    std::optional<std::string> previous_version;
    std::optional<std::string> previous_variant;
};

struct release_report {
    std::string product;
    std::string release_label;
    std::vector<component_report> components;  // in artifact order
};

// A component install() removed because the request no longer names it.
struct removed_component {
    std::string product;
    std::string component;
    std::string version;        // the receipt's component version
    std::string release_label;  // the receipt's release
    std::size_t files = 0;      // the files its receipt lists (shared ones stay)
};

struct install_report {
    std::filesystem::path prefix;
    std::vector<release_report> releases;    // in request order
    std::vector<removed_component> removed;  // sorted by (product, component)
};

// Installs every release's artifacts into the prefix (see install.hpp for
// the layout and the commit protocol): one lock, one plan (install_plan),
// one free-space preflight, one budget, one job loop over every release's
// artifacts largest first, and one commit (one journal) that also removes
// the unlisted components (unless keep_unlisted). All or nothing: a failure
// before the commit leaves the prefix as it was. Each artifact's sources
// (cache, mirrors, base) are tried in order: wrong bytes (integrity,
// including an archive that failed to unpack before its hash was known) and
// not-found move on to the next source.
// Outcomes: ok | not_found | network | integrity | bad_archive |
// unsafe_archive | conflict | filesystem (also the free-space preflight) |
// bad_manifest (a corrupt receipt or journal in the prefix, or invalid names)
// | internal (the archive reader could not be set up) | cancelled (an
// artifact that neither staged nor failed; rare).
result<install_report> install(const install_request& request);

// What the cache holds of the archives a request installs, for a run that
// stopped before its commit (Ctrl-C, a server that died): the next run
// takes these bytes from the cache instead of the network. Measured from
// the cache itself, not from what the run saw: verified archives (and
// extracted trees) count whole; an interrupted download counts the bytes its resume would reuse
// (the .part's recorded ranges, else its size: the next run's
// resume_event). Only artifacts whose receipts do not match yet (what
// the plan would not call unchanged). No cache: all zero.
// Outcomes: ok | filesystem (a prefix or cache that cannot be read).
struct kept_downloads {
    std::uint64_t bytes = 0;    // in the cache, verified or partial
    std::uint64_t partial = 0;  // of those, in interrupted downloads
    std::uint64_t total = 0;    // the archives' sizes (the manifests')
};
result<kept_downloads> kept_in_cache(const install_request& request);

// True when `path` (prefix-relative) or one of its parent directories matches one of `globs`.
bool path_excluded(std::string_view path, const std::vector<std::string>& globs);

REDIST_API_END
}  // namespace redist
