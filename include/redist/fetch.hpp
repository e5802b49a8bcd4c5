// redist/fetch.hpp — the whole pipeline, end to end: resolve a release, pick
// artifacts, stream each one through download -> SHA-256 + size -> decode ->
// unpack into a stage, verify, and commit into the prefix.
#pragma once

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
#include "redist/manifest.hpp"
#include "redist/platform.hpp"
#include "redist/select.hpp"
#include "redist/transfer.hpp"

namespace redist {

// ---- resolving ---------------------------------------------------------------

struct source_policy;
class fetch_observer;  // below: the events of a run

// The release labels of a product, newest first. http(s): parses the HTML
// index at <base>/<product>/redist/; file://: lists that directory.
// Outcomes:
//   ok
//   not_found     no product directory (file://), an index that lists no
//                 manifests, or offline and not cached
//   network       the index could not be fetched
//   bad_manifest  an index larger than 16 MiB
//   filesystem    a file:// directory that cannot be listed, or a cache that
//                 cannot be trusted
result<std::vector<std::string>> list_versions(const std::string& base_url, const std::string& product,
                                               const transfer_options& options);

// Where documents and artifacts come from, and how hard to try.
struct source_policy {
    std::vector<std::string> mirrors;                // bases tried in order before the base URL
    std::optional<std::filesystem::path> cache_dir;  // nullopt: no cache (--no-cache)
    bool offline = false;                            // only the cache and file:// sources
    int attempts_per_source = 4;                     // transient failures retried this often per source
    double initial_backoff_seconds = 0.5;            // doubled after each attempt, with jitter
    double max_backoff_seconds = 20;
    long max_retry_after_seconds = 60;  // a longer Retry-After moves on to the next source
    bool shared_cache = false;  // --shared-cache: the cache may belong to others; re-verify all of it (cache.hpp)
};

// As above, trying mirrors first, with retries, the document cache and --offline.
result<std::vector<std::string>> list_versions(const std::string& base_url, const std::string& product,
                                               const transfer_options& options, const source_policy& sources,
                                               fetch_observer* observer = nullptr);

struct release_request {
    std::string product;                 // "cudnn"; may be empty with manifest_location
    std::string version_spec;            // "9.27.0", "9.27", "9", "latest"
    std::string base_url;                // <base>; see urls.hpp
    std::string manifest_location;       // --manifest PATH|URL: skips the index entirely
    std::string manifest_sha256;         // --manifest-sha256: pin the manifest's bytes (integrity error otherwise)
    source_policy sources;               // mirrors are tried first for the index and manifest too
    fetch_observer* observer = nullptr;  // retries of the index and manifest; not owned
};

struct resolved_release {
    std::string product;
    std::string label;
    std::string manifest_url;
    std::string manifest_sha256;    // of the manifest bytes as fetched
    std::string manifest_text;      // the manifest bytes as fetched
    std::string artifact_base_url;  // the manifest's directory
    manifest parsed;
};

// Finds the label (exact specs skip the index), fetches and parses the
// manifest, and checks that release_product/release_label, when present,
// agree with the request.
// Outcomes:
//   ok
//   usage         neither a product nor a manifest was given
//   not_found     no such release (or offline and not cached)
//   network       the index or manifest could not be fetched
//   integrity     the manifest's SHA-256 is not request.manifest_sha256
//   bad_manifest  an empty, HTML or oversized (> 64 MiB) body, invalid JSON,
//                 or a manifest for another product or release
//   filesystem    the cache or a file:// manifest could not be read
result<resolved_release> resolve_release(const release_request& request, const transfer_options& options);

// ---- choosing the CUDA variant --------------------------------------------------

struct variant_choice {
    std::optional<int> cuda_major;  // nullopt: the selection has no variants at all
    std::string reason;             // "--cuda 12", "detected CUDA 13.0 (CUDA_HOME=...)", "newest in the manifest"
};

// An explicit request wins; next the detected toolkit, if the manifest offers
// that major; otherwise the newest variant offered.
variant_choice choose_cuda_variant(const manifest& m, const std::string& platform,
                                   const std::vector<std::string>& components, std::optional<int> explicit_major,
                                   const std::optional<cuda_detection>& detected);

// ---- installing ----------------------------------------------------------------

enum class fetch_stage : std::uint8_t { waiting, downloading, committing, done, unchanged, failed };
const char* to_string(fetch_stage stage) noexcept;

struct progress_event {
    std::string component;
    fetch_stage stage = fetch_stage::waiting;
    std::uint64_t bytes_done = 0;   // archive bytes received and hashed
    std::uint64_t bytes_total = 0;  // the manifest's size
};

// ---- observing a run: one observer, typed events -----------------------------------
//
// The library reports what it is doing through one fetch_observer (install,
// resolve_release, list_versions and mirror_releases); the tools turn the
// events into words. Methods may be called from worker threads, possibly
// concurrently: an observer must be thread-safe. Each defaults to doing nothing.

// Another process holds the prefix lock; the call blocks until it is released.
struct lock_wait_event {
    std::filesystem::path prefix;
};
// Another process is downloading the same blob into the shared cache.
struct blob_wait_event {
    std::string component;
};
// A transient failure is retried on the same source after a delay.
struct retry_event {
    std::string component;  // empty for documents (index, manifest)
    std::string url;        // sanitized
    error reason;           // what failed
    int next_attempt = 0;   // the attempt about to be made on this source, 1-based
    int attempts = 0;       // at most this many per source
    double delay_seconds = 0;
    bool retry_after = false;  // the delay is the server's Retry-After
};
// A source is given up, and the next one (a mirror, then the base) is tried.
struct source_change_event {
    std::string component;  // empty for documents
    std::string from_url;   // sanitized
    std::string to_url;     // sanitized
    error reason;           // why from_url was given up
};
// The cache cannot hold a split download (too little room, or a write to its
// .part failed with ENOSPC/EDQUOT): it goes on spooled in the prefix's
// staging directory instead, and the archive is not cached.
struct cache_bypass_event {
    std::string component;
    error reason;  // why the cache was given up
};
struct mirror_event;  // see mirror.hpp

class fetch_observer {
public:
    fetch_observer() = default;
    fetch_observer(const fetch_observer&) = default;
    fetch_observer& operator=(const fetch_observer&) = default;
    virtual ~fetch_observer() = default;
    virtual void on_progress(const progress_event&) {}
    virtual void on_lock_wait(const lock_wait_event&) {}
    virtual void on_blob_wait(const blob_wait_event&) {}
    virtual void on_retry(const retry_event&) {}
    virtual void on_source_change(const source_change_event&) {}
    virtual void on_cache_bypass(const cache_bypass_event&) {}
    virtual void on_mirror(const mirror_event&) {}  // mirror_releases' steps
};

// How many artifacts a fetch runs at once by default: enough job slots that
// the others, started largest first, fit beside the largest one:
// ceil(total bytes / largest archive's bytes), within 1..cores (the run's
// thread budget, --threads).
// Why: the largest archive is the run's long pole (its download and decode
// take longest), and more artifacts at once only take bandwidth and CPU from
// it. Measured on 16 cores (bench/RESULTS.md, session 9), 14 components
// (1.3 GiB, the largest 373 MiB): 4 at once (this rule's answer) 0.96x the
// decode floor, 6: 1.00x, 8: 1.08x, all 14: 1.13x. Archives of one xz block
// decode on one thread each; with these slots the others still finish
// within the largest one's time (the bound of any order).
unsigned default_jobs(const std::vector<std::uint64_t>& archive_sizes, unsigned cores);

struct install_request {
    std::filesystem::path prefix;
    std::string product;
    std::string release_label;
    std::string artifact_base_url;
    std::vector<artifact> artifacts;                        // from select_artifacts
    std::map<std::string, std::string> component_versions;  // component key -> version, for receipts
    bool force = false;                                     // reinstall even when receipts match
    link_mode tree_link_mode = link_mode::auto_select;      // how cached trees are placed (see cache.hpp)
    unsigned jobs = 0;  // concurrent artifacts; 0 = default_jobs() of the artifacts to fetch
    // Ranged connections per archive (http/https): 0 = the default, 6
    // connections for archives of 64 MiB or more (measured:
    // bench/capped_link.py); N > 1 splits any archive of at least 8 MiB;
    // 1 = one stream. A server that ignores ranges gets one stream anyway.
    int connections = 0;
    // Threads and memory the artifacts in flight share (make_run_budget; its
    // profile_of() afterwards has the per-stage times). Null: each artifact
    // sizes its decoder and writers for the whole machine.
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
    fetch_observer* observer = nullptr;  // not owned; null: nobody listens
};

struct component_report {
    std::string component;
    std::string version;
    std::string platform;
    std::optional<std::string> variant;
    std::string url;  // the URL that served the archive (a mirror, the base, or the cache's source)
    std::string sha256;
    std::uint64_t size = 0;
    std::size_t files = 0;
    int requests = 0;  // HTTP/file requests made for this artifact
    double seconds = 0;
    bool from_cache = false;
    bool unchanged = false;  // receipts already matched: nothing was done
};

struct install_report {
    std::filesystem::path prefix;
    std::string product;
    std::string release_label;
    std::vector<component_report> components;  // in artifact order
};

// Installs the artifacts into the prefix (see install.hpp for the layout and
// the commit protocol). All artifacts are committed in one transaction, or
// none is. Each artifact's sources (cache, mirrors, base) are tried in order:
// wrong bytes (integrity, including an archive that failed to unpack before its
// hash was known) and not-found move on to the next source.
// Outcomes: ok | not_found | network | integrity | bad_archive |
// unsafe_archive | conflict | filesystem | bad_manifest (a corrupt receipt or
// journal in the prefix, or invalid names) | internal (the archive reader
// could not be set up) | cancelled (an artifact that neither staged nor
// failed; rare).
result<install_report> install(const install_request& request);

}  // namespace redist
