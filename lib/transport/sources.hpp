// Internal: the one source driver. Documents, artifacts
// and `redist mirror` all fetch through try_sources(): one retry policy, one
// offline rule, one error ranking, one place that reports retries.
//
//   retry_policy      pure: what to do after a failed attempt (retry after a
//                     delay, move on to the next source, or give up)
//   try_sources       walks the URLs in order, calling an attempt function,
//                     sleeping through an injected sleeper, reporting retry
//                     and source-change events to the observer
//   source_health     the run's mirrors that could not be reached twice:
//                     skipped for the rest of the run, reported once; the
//                     base URL (the last resort) never is
//   segment_retries   the same decision for the retries a segmented
//                     download makes inside one attempt
//
// The seam where a source becomes bytes is the attempt function: it gets the
// source (source_attempt: its kind decided once, by make_source, and its
// URL) and returns ok or the error, filling source_attempt::failure
// (transfer_failure_info) the way download() does.
// A new kind of source (another scheme, a registry) plugs in there: it
// needs no retry loop of its own, only to say whether a failure is
// transient or unreachable.
//
// Nothing here touches the network: the attempt function does.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "archive/sha256.hpp"
#include "redist/error.hpp"
#include "redist/observer.hpp"
#include "redist/transfer.hpp"
#include "support/posix_file.hpp"
#include "transport/segmented_download.hpp"
#include "transport/source.hpp"

namespace redist {

// What one failed attempt says, as far as retrying is concerned.
struct attempt_failure {
    error_code code = error_code::network;
    bool transient = false;                   // worth retrying on the same source
    std::optional<long> retry_after_seconds;  // the server's Retry-After, if any
};

struct retry_decision {
    enum class action : std::uint8_t { retry, next_source, fail };
    action what = action::fail;
    std::chrono::milliseconds delay{0};  // action::retry: how long to wait first
    bool operator==(const retry_decision&) const = default;
};

// Built from source_policy; pure apart from the jitter source, which is
// injected (a function returning a uniform number in [0, 1)).
//   - network failures marked transient are retried on the same source, at
//     most attempts_per_source attempts in all;
//   - the delay before retry k (k = the attempt that failed, 1-based) is
//     initial * 2^(k-1), capped at max_backoff, times a jitter in [0.5, 1);
//   - a Retry-After replaces that delay (no jitter: the server asked for it)
//     when it is at most max_retry_after_seconds; a longer one moves on to
//     the next source instead of blocking for it;
//   - not_found, integrity and non-transient network failures move on to the
//     next source (another mirror may have the right bytes);
//   - anything else (filesystem, cancelled, bad_archive, ...) fails at once:
//     another source would not change it.
class retry_policy {
public:
    using jitter_source = std::function<double()>;
    explicit retry_policy(const source_policy& sources, jitter_source jitter = {});

    retry_decision next(int attempt, const attempt_failure& failure) const;
    int attempts_per_source() const { return attempts_; }

private:
    int attempts_;
    double initial_, max_backoff_;
    long max_retry_after_;
    jitter_source jitter_;
};

// What try_sources hands the attempt function, and what it reports back.
struct source_attempt {
    const redist::source& from;     // the source tried (its URL: from.url())
    std::size_t source = 0;         // index into the list of sources
    int attempt = 1;                // on this source, 1-based
    transfer_failure_info failure;  // filled by the attempt (download() does)
    // Set by an attempt that retried on its own through segment_retries():
    // its failure was decided on there, and moves on to the next source.
    bool retried_inside = false;
};
using attempt_function = std::function<result<void>(source_attempt&)>;

// The run's record of sources that could not be reached (see transfer.hpp).
// A source is an origin (model/urls.hpp url_origin: "scheme://host:port",
// a registry's that of its API); local ones (file://, oci-layout:) are never
// skipped. A source whose requests got no response at all (refused,
// unresolvable, timed out: transfer_failure_info::unreachable) `limit`
// times without a success in between is skipped from then on: by every
// later attempt, artifact and document of the run, without a request.
class source_health {
public:
    explicit source_health(int limit = 2) : limit_(std::max(1, limit)) {}
    // Why `url`'s source is skipped; nullopt: it is not.
    std::optional<error> skipped(const std::string& url) const;
    // An unreachable failure of `url`. True for the one failure that made
    // its source skipped (the caller reports that once).
    bool failed(const std::string& url, const error& why);
    // A response came: the count starts over.
    void answered(const std::string& url);
    int limit() const { return limit_; }

private:
    struct entry {
        int failures = 0;
        std::optional<error> skipped;
    };
    int limit_;
    mutable std::mutex mutex_;
    std::map<std::string, entry> sources_;
};

struct source_run {
    explicit source_run(retry_policy p) : policy(std::move(p)) {}
    // The policy's retries, health, mirrors and offline rule.
    explicit source_run(const source_policy& sources);
    retry_policy policy;
    std::function<void(std::chrono::milliseconds)> sleep;  // empty: std::this_thread::sleep_for
    run_observer* observer = nullptr;
    std::string component;                  // for the events
    std::shared_ptr<source_health> health;  // may be null: no source is skipped
    bool offline = false;                   // only local sources are tried (offline_skips)
    // The mirrors (as URLs): the only sources `health` may skip. A URL under
    // none of them is the base, the last resort: it gets every attempt of
    // the policy, with its backoff, however often it could not be reached
    // (a registry or web server that restarts must not fail a CI job).
    std::vector<std::string> mirrors;
    bool is_mirror(std::string_view url) const;
};

// What to do after attempt `attempt` on `url` failed with `e`: the policy's
// decision, after the source's health has taken the failure in (a mirror
// that became skipped is reported once, and not retried; the base is never
// skipped). A retry is
// reported to the observer here, as it is decided. The one decision for
// try_sources and segment_retries.
retry_decision decide_retry(const source_run& run, const std::string& url, int attempt, const error& e,
                            const transfer_failure_info& failure);

// The retry hook of a segmented download (segmented_download.hpp) from
// `url`: decide_retry for every failed request, so that a retry inside one
// connection is reported like any other. The attempt that ran the download
// sets source_attempt::retried_inside. `run` must outlive the hook.
// `requests` (if given; it must outlive the hook too) counts each retry
// decided: one more request, as try_sources counts its attempts.
segment_retry_hook segment_retries(const source_run& run, const std::string& url, int* requests = nullptr);

struct sources_outcome {
    std::size_t source = 0;  // the URL that succeeded
    int requests = 0;        // attempts made in all
};

// Tries `sources` in order. Offline, a source that
// is not local counts as not_found ("offline, and not in the cache") without
// an attempt (offline_skips); so does a source the run's health skips
// (network, naming why). Each failure goes through run.policy: retry (a
// retry event, then sleep), next source (a source-change event when there is
// one), or fail (returned at once).
// `requests` (if given) counts the attempts made, success or not.
// Outcomes: ok | the best failure by remember_failure's ranking | the
// failing error unchanged for action::fail.
result<sources_outcome> try_sources(const std::vector<source>& sources, const source_run& run,
                                    const attempt_function& attempt, int* requests = nullptr);

// ---- the artifact stream -------------------------------------------------------------
//
// One artifact's bytes, from any source, in one pass as they arrive from the
// one downloader (segmented_download.hpp: one stream or ranges, its spool,
// its retries): counted against the manifest's size (never more), hashed,
// and handed to a byte_sink (the unpacker writing a stage for fetch; a plain
// file for mirror).
//
// The rules it keeps (pinned by tests/unit/transport/sources_test.cpp):
//   - the downloader resumes: its spool (the cache's .part) or, without one,
//     the bytes the stream holds ("Range: bytes=<received>-"); a response
//     that starts over (the file changed, a 200 of an unknown version)
//     restarts the sink and the hash before its first byte;
//   - an integrity failure drops the bytes and the spool's .part (the next
//     source starts over); a network failure keeps them (the next source
//     resumes, and the .part stays for the next process).

// Where the bytes go besides the hash. Not thread-safe; one per stream.
class byte_sink {
public:
    byte_sink() = default;
    byte_sink(const byte_sink&) = delete;
    byte_sink& operator=(const byte_sink&) = delete;
    virtual ~byte_sink() = default;
    // Drops whatever was written: the next byte written is byte 0.
    virtual result<void> restart() = 0;
    // Outcomes: ok | an error that stops the transfer (disk full). A sink
    // whose complaint must wait for the hash (the unpacker: a corrupt
    // download is an integrity failure, not a decoder error) records it and
    // returns ok.
    virtual result<void> write(const std::byte* data, std::size_t size) = 0;
    // Bytes the sink already holds from an earlier process, as a file to be
    // hashed (not written again); nullopt: none, start from byte 0.
    virtual std::optional<std::filesystem::path> held_bytes(std::uint64_t /*max_size*/) { return std::nullopt; }
};

// A plain file: "<final>.part.<pid>" beside `final_path`, renamed into
// place by commit() after the stream verified it. held_bytes() adopts the
// .part file a dead process left for the same final path (renamed to ours,
// atomically, so two live processes never share one).
class file_sink final : public byte_sink {
public:
    explicit file_sink(std::filesystem::path final_path);
    ~file_sink() override;  // closes; the .part stays unless discard() or commit() ran
    result<void> restart() override;
    result<void> write(const std::byte* data, std::size_t size) override;
    std::optional<std::filesystem::path> held_bytes(std::uint64_t max_size) override;
    // fsync, close, rename over the final path. Outcomes: ok | filesystem.
    result<void> commit();
    void discard() noexcept;  // closes and removes the .part file
    const std::filesystem::path& part_path() const { return part_; }

private:
    std::filesystem::path final_, part_;
    unique_fd fd_;
};

struct expected_artifact {
    std::uint64_t size = 0;
    std::string sha256;
    // The bytes are vouched for by what they decode to, checked in full
    // before anything is committed (a recompressed copy whose signed record
    // lists its decoded tar's pieces: install.cpp, try_copy). Their own
    // SHA-256 would be one more sequential pass that vouches for nothing
    // more, so it is not computed: only the size is checked here.
    bool checked_by_content = false;
};

class artifact_stream {
public:
    // threads: the run's thread budget (run_budget::threads()); the archive's
    // hash gets a thread of its own only when the budget has room for it.
    artifact_stream(expected_artifact expected, byte_sink& sink, unsigned threads);
    ~artifact_stream();
    artifact_stream(const artifact_stream&) = delete;
    artifact_stream& operator=(const artifact_stream&) = delete;

    // Called with the bytes received so far: after each response's headers,
    // then at most every 200 ms while the body streams (or a cached file is
    // read: fetch_file), and once the last byte is in.
    void set_progress(std::function<void(std::uint64_t)> progress) { progress_ = std::move(progress); }
    // Checked before each attempt and between chunks: set, the transfer stops (cancelled).
    void set_cancel(const std::atomic<bool>* cancel) { cancel_ = cancel; }

    // From byte 0: restarts the sink and the hash.
    result<void> restart();
    // Continues from the bytes the sink holds from an earlier process (hashed
    // only, not written again); starts from 0 when there are none. Returns
    // whether bytes were resumed.
    result<bool> resume_or_restart();

    // One attempt from `url` through the one downloader (segmented_download):
    // its spool, split into `segments` when it may, its retries through
    // `retry` (the caller sets source_attempt::retried_inside). Without a
    // spool it continues from received(); with one, from byte 0 (the spool
    // holds the bytes so far). Fills `failure` as download() does. After the
    // last byte the size and SHA-256 are checked. Wrong bytes (integrity)
    // remove the spool's .part and record. When they do not match and the
    // stream had resumed bytes an earlier process left (the .part, a dead
    // process's file), those bytes are what is suspect, not the source: they
    // are dropped and the artifact is downloaded again from byte 0, from the
    // same URL, once in this call. Only a mismatch of bytes that all came
    // from `url` in this process is an integrity failure. Outcomes: ok
    // (verified) | network | not_found | integrity | cancelled | filesystem |
    // the sink's error.
    result<void> fetch_from(const std::string& url, const transfer_options& options, const segment_options& segments,
                            const spool_location& spool, const segment_retry_hook& retry,
                            transfer_failure_info& failure);
    // Streams a local file (a cached blob) through hash and sink, from 0, and
    // verifies it. An unreadable or odd file (symlink, FIFO) is an integrity
    // failure: treated like wrong bytes. Outcomes as fetch_from.
    result<void> fetch_file(const std::filesystem::path& path, const std::string& source);

    std::uint64_t received() const { return received_; }
    bool verified() const { return verified_; }
    // For --profile: time spent hashing, and handing bytes to the sink
    // (which waits while the unpacker is behind).
    std::uint64_t hash_ns() {
        settle();
        return hash_ns_;
    }
    std::uint64_t sink_ns() const { return sink_ns_; }

    // Feeds bytes (used by fetch_from; public for tests). Outcomes: ok |
    // integrity (more bytes than the manifest's size) | the sink's error.
    result<void> feed(const std::byte* data, std::size_t size);
    // After the last byte: size and SHA-256. Outcomes: ok | integrity.
    result<void> verify(const std::string& source);

private:
    result<void> fetch_once(const std::string& url, const transfer_options& options, const segment_options& segments,
                            const spool_location& spool, const segment_retry_hook& retry,
                            transfer_failure_info& failure);
    result<void> replay(const std::filesystem::path& path, bool into_sink);
    download_callbacks body_callbacks(std::chrono::steady_clock::time_point& last_report);
    void report_progress(std::chrono::steady_clock::time_point& last_report);

    expected_artifact expected_;
    byte_sink& sink_;
    sha256_hasher hasher_;
    std::uint64_t received_ = 0;
    std::uint64_t hash_ns_ = 0;
    std::uint64_t sink_ns_ = 0;
    bool verified_ = false;
    // The bytes so far include bytes an earlier process left (resume_or_restart,
    // or a spool's reused ranges); cleared by restart().
    bool resumed_ = false;
    // verify() found a mismatch while resumed_ was set (then restarted).
    bool resumed_bytes_failed_ = false;
    bool paused_mid_download_ = false;
    std::function<void(std::uint64_t)> progress_;
    const std::atomic<bool>* cancel_ = nullptr;

    // Hashing on a thread of its own (see sources.cpp). Every member
    // function but feed() settles it before it touches hasher_ or hash_ns_.
    // Declared last: stopped first.
    class hash_worker;
    void hash(const std::byte* data, std::size_t size);
    // Returns once every byte fed so far is hashed.
    void settle();
    std::unique_ptr<hash_worker> hash_worker_;
};

}  // namespace redist
