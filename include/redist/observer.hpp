// redist/observer.hpp — what the library tells a tool while it works: one
// observer interface with typed events (install, resolve_release,
// list_versions, mirror_releases). The tools turn the events into words
// (tools/common/observer.cpp).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

// The stages of a component in install(), in the order they come:
//   downloading  its archive is read (network, or a cached archive); the
//                events carry the bytes hashed so far, at most every 200 ms
//                and once more when the last byte is in
//   staged       downloaded, verified and unpacked beside the prefix (or
//                placed from the cache's tree): its part is done, and it
//                waits for the others and the commit; bytes_done = bytes_total
//   committing   the commit of every staged component runs
//   done         committed: the component is in the prefix
// or instead: unchanged (its receipt already matches, nothing is done),
// failed (this component's own failure: the run stops) or stopped (it was
// cancelled: Ctrl-C, or another component failed). waiting is never sent.
enum class fetch_stage : std::uint8_t { waiting, downloading, committing, done, unchanged, failed, staged, stopped };
const char* to_string(fetch_stage stage) noexcept;

struct progress_event {
    std::string component;
    fetch_stage stage = fetch_stage::waiting;
    std::uint64_t bytes_done = 0;   // archive bytes received and hashed (failed, stopped: 0)
    std::uint64_t bytes_total = 0;  // the manifest's size
};

// ---- observing a run: one observer, typed events -----------------------------------
//
// The library reports what it is doing through one run_observer (install,
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
// A mirror could not be reached repeatedly (connection refused, timed
// out): it is skipped for the rest of the run, for every document and
// artifact. Reported once per mirror. The base URL, the last resort, is
// never skipped: it gets every attempt of --retries.
struct source_skip_event {
    std::string source;  // "scheme://host:port"
    int failures = 0;    // in a row, without a response
    error reason;        // the last failure
};
// The cache cannot hold a split download (too little room, or a write to its
// .part failed with ENOSPC/EDQUOT): it goes on spooled in the prefix's
// staging directory instead, and the archive is not cached.
struct cache_bypass_event {
    std::string component;
    error reason;  // why the cache was given up
};
// A download goes on from the bytes an earlier run left (the cache's .part)
// instead of from byte 0.
struct resume_event {
    std::string component;
    std::uint64_t bytes_done = 0;   // kept from the earlier run (hashed again)
    std::uint64_t bytes_total = 0;  // the manifest's size
};
// A mirror's recompressed copy is not used, and the original is: the
// record (recompressed_<label>.json) could not be read, is invalid or is for
// another manifest (component empty), or one copy failed (network, size,
// SHA-256, bad zstd, or a tar other than the recorded or locked one; its
// stage is discarded and the original installed through the normal path).
struct copy_failure_event {
    std::string component;  // empty: the record as a whole
    std::string url;        // sanitized: the record's, or the copy's
    error reason;
};
struct mirror_event;  // see mirror.hpp

class run_observer {
public:
    run_observer() = default;
    run_observer(const run_observer&) = default;
    run_observer& operator=(const run_observer&) = default;
    virtual ~run_observer() = default;
    virtual void on_progress(const progress_event&) {}
    virtual void on_lock_wait(const lock_wait_event&) {}
    virtual void on_blob_wait(const blob_wait_event&) {}
    virtual void on_retry(const retry_event&) {}
    virtual void on_source_change(const source_change_event&) {}
    virtual void on_source_skip(const source_skip_event&) {}
    virtual void on_cache_bypass(const cache_bypass_event&) {}
    virtual void on_resume(const resume_event&) {}
    virtual void on_copy_failure(const copy_failure_event&) {}
    virtual void on_mirror(const mirror_event&) {}  // mirror_releases' steps
};

// The name run_observer had when fetch was all it observed.
using fetch_observer [[deprecated("fetch_observer is now run_observer")]] = run_observer;

REDIST_API_END
}  // namespace redist
