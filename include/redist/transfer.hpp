// redist/transfer.hpp — HTTP(S) transfers through libcurl, and file:// reads.
//
// The caller must call curl_global_init() once at program start (the tools'
// main() and the test runner do). The library never does it on the fly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/signing.hpp"

namespace redist {
REDIST_API_BEGIN

struct transfer_options {
    std::string ca_file;  // --ca-file; else SSL_CERT_FILE / CURL_CA_BUNDLE; else system
    long connect_timeout_seconds = 30;
    long stall_timeout_seconds = 60;  // no body byte for this long: transient failure; 0: off
    // Documents (index, manifest) are small: a server that does not connect,
    // or sends no byte of one, within these is down (at most the above).
    long document_connect_timeout_seconds = 5;
    long document_stall_timeout_seconds = 5;
    std::string user_agent = "redist";
};

// What the server said about a response, known before the body.
struct response_info {
    long status = 0;                   // HTTP status; 0 for file://
    std::int64_t content_length = -1;  // of this response's body; -1 if unknown
    bool partial = false;              // 206: the Range request was honoured
    std::string etag;
    std::string last_modified;
};

// True for failures worth retrying (connection reset/refused, timeouts,
// HTTP/2 stream errors, 408, 429, 5xx). Set on network errors by download().
struct transfer_failure_info {
    bool transient = false;
    bool too_large = false;  // fetch_text: the body exceeded max_bytes
    // No response at all (connection refused or reset, name not resolved,
    // connect timeout, nothing received before the stall timeout): the
    // source is down rather than the file (see source_health).
    bool unreachable = false;
    long http_status = 0;
    std::optional<long> retry_after_seconds;
};

struct download_callbacks {
    // Called once, after the headers of a successful (2xx) response and before
    // any body byte. Returning an error aborts the transfer with that error
    // (e.g. a Content-Length that disagrees with the manifest).
    std::function<result<void>(const response_info&)> on_response;
    // Called with each chunk of the body, in order. Returning an error aborts
    // the transfer with that error.
    std::function<result<void>(const std::byte* data, std::size_t size)> on_data;
    // Called now and then while no body byte has come since the last call
    // (at least once a second during a stall; http and https only): where a
    // caller that buffers what on_data gave it writes it out, so a stalled
    // or killed transfer keeps what it received. Returning an error aborts
    // the transfer with that error.
    std::function<result<void>()> on_idle;
};

// Downloads `url` once (no retries here; see the fetch layer), streaming the
// body into the callbacks. With resume_from > 0, sends "Range: bytes=N-";
// on_response reports whether the server honoured it: partial=true (206 whose
// Content-Range starts at N, or file://) means the body is bytes N.. of the
// file; partial=false (a server that ignores ranges answers 200) means the
// body is the whole file from byte 0, and the caller must start over (drop
// what it had). A 206 for any other range is a permanent network error.
// Redirects are followed (at most 10) and keep the scheme's strength: a
// transfer that starts on https only follows redirects to https (a downgrade
// to http fails as a permanent network error naming both URLs); http may go
// to http or https; file:// is never reached through a redirect. The body is
// raw (no content coding is requested or decoded). A transfer that receives
// no body byte for options.stall_timeout_seconds fails as transient "stalled".
//
// file:// URLs are read here, not by libcurl (which would percent-decode the
// path and block forever opening a FIFO): "file:///abs/path" or
// "file://localhost/abs/path"; percent-escapes are decoded, except that an
// escaped '/' or NUL, and a ".." segment, are refused. The file is opened
// without following a final symlink and without blocking, and must be a
// regular file: a FIFO, device, socket, directory or symlink is refused at
// once (network, permanent) without reading a byte. A single read() that
// takes longer than the stall timeout fails as "stalled" (transient). The
// body is the file's bytes from resume_from up to its size at open time.
// Outcomes:
//   ok           the whole body was delivered
//   not_found    HTTP 404/410, or a missing (or unreadable) file://
//   network      any other transport or HTTP failure; `failure` (if given)
//                says whether it is transient and any Retry-After
//   (callback)   the error a callback returned, unchanged
result<void> download(const std::string& url, const transfer_options& options, download_callbacks& callbacks,
                      std::uint64_t resume_from = 0, transfer_failure_info* failure = nullptr);

// Fetches a small document (manifest, index, lock) into memory, refusing
// bodies larger than max_bytes (network error, permanent, with
// failure->too_large set so that callers can report it as a bad document).
// Same outcomes as download(), including `failure`.
result<std::string> fetch_text(const std::string& url, const transfer_options& options,
                               std::size_t max_bytes = 64u << 20, transfer_failure_info* failure = nullptr);

// Sources that could not be reached repeatedly during a run (connection
// refused, timed out), shared by every document and artifact of the run:
// such a source is skipped for the rest of it. Thread-safe. See
// lib/transport/sources.hpp.
class source_health;
std::shared_ptr<source_health> make_source_health();

// Where documents and artifacts come from, and how hard to try.
struct source_policy {
    std::vector<std::string> mirrors;                // bases tried in order before the base URL
    std::vector<std::string> fallback_bases;         // bases tried in order after it (NVIDIA's second host)
    std::optional<std::filesystem::path> cache_dir;  // nullopt: no cache (--no-cache)
    bool offline = false;                            // only the cache and file:// sources
    int attempts_per_source = 4;                     // transient failures retried this often per source
    double initial_backoff_seconds = 0.5;            // doubled after each attempt, with jitter
    double max_backoff_seconds = 20;
    long max_retry_after_seconds = 60;  // a longer Retry-After moves on to the next source
    bool shared_cache = false;  // --shared-cache: the cache may belong to others; re-verify all of it (cache.hpp)
    // The keys whose signature makes a mirror's recompressed copies usable
    // (recompressed.hpp, signing.hpp); empty: no copy is ever used.
    std::vector<trusted_key> trusted_keys{};
    // Shared by the copies of this policy (one per run); null: every
    // try_sources call keeps its own.
    std::shared_ptr<source_health> health = make_source_health();
};

REDIST_API_END
}  // namespace redist
