// transfer.cpp — one HTTP(S)/file:// transfer through the libcurl easy API.
//
// Contracts that shape this file:
// - We check the HTTP status ourselves (not CURLOPT_FAILONERROR) so that we
//   can tell 404 from 503, read Retry-After, and never hand an error page's
//   body to on_data.
// - The write callback returns the byte count it consumed, or
//   CURL_WRITEFUNC_ERROR to abort; curl_easy_perform then returns
//   CURLE_WRITE_ERROR and the reason is whatever we stored in transfer_state.
// - No exception may cross a C callback: every user callback runs through
//   guarded(), and an exception becomes a stored internal error.
// - Bytes are delivered raw (configure()), and file:// is read here, not by
//   libcurl (read_file_url).
#include "redist/transfer.hpp"
#include "model/urls.hpp"
#include "support/posix_file.hpp"
#include "transport/http_request.hpp"
#include "transport/oci.hpp"
#include "transport/source.hpp"
#include "transport/transfer.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace redist {

namespace {

// ---- RAII for the C handles -------------------------------------------------

struct curl_easy_cleaner {
    void operator()(CURL* h) const { curl_easy_cleanup(h); }
};
struct curl_slist_cleaner {
    void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using curl_easy = std::unique_ptr<CURL, curl_easy_cleaner>;
using curl_slist_ptr = std::unique_ptr<curl_slist, curl_slist_cleaner>;

// ---- small helpers ---------------------------------------------------------

bool iequals_prefix(std::string_view text, std::string_view prefix) {
    if (text.size() < prefix.size()) return false;
    for (std::size_t i = 0; i < prefix.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(text[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
            return false;
    }
    return true;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
        s.remove_suffix(1);
    return s;
}

// Retry-After is either delta-seconds or an HTTP-date (RFC 9110 10.2.3).
// curl_getdate() parses the RFC 1123 / 850 / asctime date forms.
std::optional<long> parse_retry_after(std::string_view value) {
    value = trim(value);
    if (value.empty()) return std::nullopt;
    if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        if (value.size() > 9) return 1'000'000'000L;  // absurd, but not an overflow
        return std::strtol(std::string(value).c_str(), nullptr, 10);
    }
    const std::string text(value);
    const time_t when = curl_getdate(text.c_str(), nullptr);
    if (when == -1) return std::nullopt;
    const time_t now = std::time(nullptr);
    return when > now ? static_cast<long>(when - now) : 0L;
}

// "bytes START-END/TOTAL" -> {START, END}; nullopt if unparsable. Without
// `bounded` (an open range was asked for) only "bytes START-" must parse,
// and END is 0.
std::optional<std::pair<long long, long long>> content_range_bounds(std::string_view value, bool bounded) {
    value = trim(value);
    if (!iequals_prefix(value, "bytes ")) return std::nullopt;
    value.remove_prefix(6);
    value = trim(value);
    long long bounds[2] = {0, 0};
    std::size_t i = 0;
    for (int which = 0; which < (bounded ? 2 : 1); ++which) {
        const std::size_t first = i;
        for (; i < value.size() && value[i] >= '0' && value[i] <= '9'; ++i) {
            if (bounds[which] > (1LL << 55)) return std::nullopt;
            bounds[which] = bounds[which] * 10 + (value[i] - '0');
        }
        if (i == first || i >= value.size() || value[i] != (which == 0 ? '-' : '/')) return std::nullopt;
        ++i;
    }
    return std::pair{bounds[0], bounds[1]};
}

bool is_https_url(std::string_view url) { return iequals_prefix(url, "https:"); }

// ---- per-transfer state shared with the C callbacks ------------------------

struct transfer_state {
    CURL* curl = nullptr;
    download_callbacks* callbacks = nullptr;
    std::string safe_url{};
    std::uint64_t resume_from = 0;
    std::optional<std::uint64_t> range_last{};  // download_range(): the last byte asked for

    // Headers of the current response. Reset at each status line, because
    // with redirects (and 1xx) the header callback sees several responses.
    std::string reason{};
    std::string etag{};
    std::string last_modified{};
    std::string content_range{};
    std::optional<long> retry_after{};
    http_response* response = nullptr;  // send_request(): the headers it reports
    std::size_t max_body = 0;           // send_request(): the most body bytes taken

    bool started = false;     // on_response has been called
    bool http_error = false;  // aborted because the status was not 2xx
    long status = 0;
    std::optional<error> callback_error{};  // returned unchanged by download()

    // Stall detection: the last time the byte count moved.
    std::chrono::steady_clock::time_point last_progress = std::chrono::steady_clock::now();
    curl_off_t last_dlnow = -1;  // bytes received plus bytes sent, at the last progress
    long stall_seconds = 0;
    bool stalled = false;
};

error callback_exception(const char* which) {
    try {
        throw;
    } catch (const std::exception& e) {
        return make_error(error_code::internal, std::string(which) + " threw: " + e.what());
    } catch (...) {
        return make_error(error_code::internal, std::string(which) + " threw an unknown exception");
    }
}

// Runs a user callback: what it returns, or the exception it threw as an
// internal error (none may cross a C callback).
template <class F>
result<void> guarded(const char* which, F&& callback) {
    try {
        return callback();
    } catch (...) {
        return callback_exception(which);
    }
}

// A callback's outcome: true when ok, else false with its error kept for download().
bool kept_ok(transfer_state& st, result<void> outcome) {
    if (outcome.ok()) return true;
    st.callback_error = std::move(outcome).error_value();
    return false;
}

size_t header_callback(char* buffer, size_t size, size_t nitems, void* userdata) {
    auto* st = static_cast<transfer_state*>(userdata);
    const std::size_t total = size * nitems;
    try {
        const std::string_view line(buffer, total);
        if (iequals_prefix(line, "HTTP/")) {
            // "HTTP/1.1 503 Service Unavailable" or "HTTP/2 200": a new response.
            st->reason.clear();
            st->etag.clear();
            st->last_modified.clear();
            st->content_range.clear();
            st->retry_after.reset();
            if (st->response != nullptr) *st->response = http_response{};
            const auto sp1 = line.find(' ');
            if (sp1 != std::string_view::npos) {
                const auto sp2 = line.find(' ', sp1 + 1);
                if (sp2 != std::string_view::npos) st->reason = std::string(trim(line.substr(sp2 + 1)));
            }
            return total;
        }
        const auto colon = line.find(':');
        if (colon == std::string_view::npos) return total;
        const std::string_view name = trim(line.substr(0, colon));
        const std::string_view value = trim(line.substr(colon + 1));
        auto is = [&](std::string_view want) { return name.size() == want.size() && iequals_prefix(name, want); };
        if (is("etag")) st->etag = std::string(value);
        else if (is("last-modified")) st->last_modified = std::string(value);
        else if (is("content-range")) st->content_range = std::string(value);
        else if (is("retry-after")) st->retry_after = parse_retry_after(value);
        if (st->response != nullptr) {
            http_response& r = *st->response;
            if (is("location")) r.location = std::string(value);
            else if (is("www-authenticate")) r.www_authenticate = std::string(value);
            else if (is("link")) r.link = std::string(value);
            else if (is("docker-content-digest")) r.docker_content_digest = std::string(value);
        }
    } catch (...) {
        st->callback_error = callback_exception("header parsing");
        return 0;  // any other count aborts the transfer
    }
    return total;
}

// Runs once before the first body byte (or after an empty 2xx body). Returns
// false if the transfer must stop; the reason is left in `st`.
bool start_response(transfer_state& st) {
    st.started = true;
    curl_easy_getinfo(st.curl, CURLINFO_RESPONSE_CODE, &st.status);
    if (st.status < 200 || st.status >= 300) {
        st.http_error = true;
        return false;
    }
    response_info info;
    info.status = st.status;
    curl_off_t length = -1;
    if (curl_easy_getinfo(st.curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK)
        info.content_length = length;
    info.partial = st.status == 206;
    info.etag = st.etag;
    info.last_modified = st.last_modified;

    // A 206 for a different range than we asked for would splice the wrong
    // bytes onto the partial file; refuse it (the hash would catch it later,
    // but only after downloading everything).
    if (st.status == 206) {
        // The range asked for, exactly: the same first byte and, for a bounded range, the same last byte.
        const auto bounds = content_range_bounds(st.content_range, st.range_last.has_value());
        if (!bounds || bounds->first != static_cast<long long>(st.resume_from) ||
            (st.range_last && bounds->second != static_cast<long long>(*st.range_last))) {
            st.callback_error = make_error(error_code::network,
                                           "HTTP 206 with unexpected Content-Range '" + st.content_range +
                                               "' (asked for bytes=" + std::to_string(st.resume_from) + "-" +
                                               (st.range_last ? std::to_string(*st.range_last) : "") + ")")
                                    .with_url(st.safe_url);
            return false;
        }
    }
    if (st.callback_error) return false;

    return !st.callbacks->on_response ||
           kept_ok(st, guarded("on_response callback", [&] { return st.callbacks->on_response(info); }));
}

size_t write_callback(char* data, size_t size, size_t nmemb, void* userdata) {
    auto* st = static_cast<transfer_state*>(userdata);
    const std::size_t total = size * nmemb;
    if (!st->started && !start_response(*st)) return CURL_WRITEFUNC_ERROR;
    if (total == 0 || !st->callbacks->on_data) return total;
    const bool ok = kept_ok(*st, guarded("on_data callback", [&] {
        return st->callbacks->on_data(reinterpret_cast<const std::byte*>(data), total);
    }));
    return ok ? total : CURL_WRITEFUNC_ERROR;
}

// Our own stall detector: "no body byte for N seconds", counting the bytes
// sent too (a PUT of a large blob moves bytes up only, until the registry
// answers). CURLOPT_LOW_SPEED_* averages over a window of up to 5 s, so after
// a burst it fires seconds late; this callback runs at least once a second
// whatever happens on the wire.
int xferinfo_callback(void* userdata, curl_off_t /*dltotal*/, curl_off_t dlnow, curl_off_t /*ultotal*/,
                      curl_off_t ulnow) {
    auto* st = static_cast<transfer_state*>(userdata);
    const auto now = std::chrono::steady_clock::now();
    if (dlnow + ulnow != st->last_dlnow) {
        st->last_dlnow = dlnow + ulnow;
        st->last_progress = now;
        return 0;
    }
    if (st->started && st->callbacks->on_idle &&
        !kept_ok(*st, guarded("on_idle callback", [&] { return st->callbacks->on_idle(); })))
        return 1;
    if (st->stall_seconds > 0 && now - st->last_progress >= std::chrono::seconds(st->stall_seconds)) {
        st->stalled = true;
        return 1;  // non-zero aborts with CURLE_ABORTED_BY_CALLBACK
    }
    return 0;
}

// Failures worth retrying: the network or the server may well behave on the
// next attempt. DNS failures count as transient: a CI resolver hiccup is far
// more common than a mistyped mirror host, and a few retries are cheap.
bool is_transient(CURLcode rc) {
    switch (rc) {
        case CURLE_COULDNT_RESOLVE_PROXY:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_PARTIAL_FILE:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
        case CURLE_GOT_NOTHING:
        case CURLE_SSL_CONNECT_ERROR:  // handshake cut short, usually a reset
        case CURLE_AGAIN:
#if LIBCURL_VERSION_NUM >= 0x074200
        case CURLE_HTTP3:
        case CURLE_QUIC_CONNECT_ERROR:
#endif
            return true;
        default: return false;  // TLS verification, bad URL, too many redirects, ...
    }
}

void set_failure(transfer_failure_info* failure, bool transient, long status, std::optional<long> retry_after) {
    if (failure == nullptr) return;
    failure->transient = transient;
    failure->too_large = false;
    failure->unreachable = false;
    failure->http_status = status;
    failure->retry_after_seconds = retry_after;
}

error http_status_error(const transfer_state& st, transfer_failure_info* failure) {
    const long s = st.status;
    std::string message = "HTTP " + std::to_string(s);
    if (!st.reason.empty()) message += " " + st.reason;
    if (s == 404 || s == 410) {
        set_failure(failure, false, s, std::nullopt);
        return make_error(error_code::not_found, std::move(message));
    }
    const bool transient = s == 408 || s == 429 || (s >= 500 && s < 600);
    set_failure(failure, transient, s, transient ? st.retry_after : std::nullopt);
    if (transient && st.retry_after) message += " (retry after " + std::to_string(*st.retry_after) + " s)";
    return make_error(error_code::network, std::move(message));
}

// Anything that must be set up before perform; an error here is not the
// network's fault. (Used by configure() and by the request helpers below;
// #undef at the end of them.)
#define REDIST_SETOPT(handle, option, value)                                                                    \
    do {                                                                                                        \
        const CURLcode setopt_rc_ = curl_easy_setopt((handle), (option), (value));                              \
        if (setopt_rc_ != CURLE_OK)                                                                             \
            return make_error(error_code::internal,                                                             \
                              std::string("curl_easy_setopt(" #option "): ") + curl_easy_strerror(setopt_rc_)); \
    } while (0)

result<void> configure(CURL* h, const std::string& url, const transfer_options& options, transfer_state& st,
                       curl_slist_ptr& headers, char* errbuf, const std::string& range, const std::string& ca,
                       const std::vector<std::string>& extra_headers) {
    REDIST_SETOPT(h, CURLOPT_URL, url.c_str());
    REDIST_SETOPT(h, CURLOPT_ERRORBUFFER, errbuf);
    // Signals are not thread-safe; tools may run several transfers at once.
    REDIST_SETOPT(h, CURLOPT_NOSIGNAL, 1L);
    // Only these schemes (file:// never comes here, see read_file_url), and a
    // redirect keeps the scheme's strength: from https only to https (else a
    // network attacker who can answer one plain-http request could serve the
    // bytes), from http to either; never to file:// (a hostile mirror could
    // otherwise make us read local files).
    REDIST_SETOPT(h, CURLOPT_PROTOCOLS_STR, "http,https");
    REDIST_SETOPT(h, CURLOPT_REDIR_PROTOCOLS_STR, is_https_url(url) ? "https" : "http,https");
    REDIST_SETOPT(h, CURLOPT_FOLLOWLOCATION, 1L);
    REDIST_SETOPT(h, CURLOPT_MAXREDIRS, 10L);
    REDIST_SETOPT(h, CURLOPT_USERAGENT, options.user_agent.c_str());
    REDIST_SETOPT(h, CURLOPT_CONNECTTIMEOUT, options.connect_timeout_seconds);
    // Verification is never turned off; there is deliberately no option for it.
    REDIST_SETOPT(h, CURLOPT_SSL_VERIFYPEER, 1L);
    REDIST_SETOPT(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!ca.empty()) REDIST_SETOPT(h, CURLOPT_CAINFO, ca.c_str());
    // Larger receive buffer: fewer callbacks, better throughput on fast links.
    REDIST_SETOPT(h, CURLOPT_BUFFERSIZE, 256L * 1024L);
    REDIST_SETOPT(h, CURLOPT_TCP_KEEPALIVE, 1L);
    // Proxies: libcurl honours http_proxy/https_proxy/no_proxy by default.

    // We hash the raw bytes: ask for no content coding. (CURLOPT_ACCEPT_ENCODING
    // stays unset so curl never decodes either.)
    // curl_slist_append returns null on allocation failure and leaves the
    // old list intact; report that instead of losing the list.
    const auto append = [&](const char* line) {
        curl_slist* next = curl_slist_append(headers.get(), line);
        if (next == nullptr) return false;
        (void)headers.release();
        headers.reset(next);
        return true;
    };
    if (!append("Accept-Encoding: identity"))
        return make_error(error_code::internal, "out of memory building request headers");
    // Custom headers (a registry's Authorization): CURLOPT_UNRESTRICTED_AUTH
    // stays off, so libcurl sends Authorization only to the host, port and
    // scheme of `url`, never to where a redirect leads (blob storage).
    for (const auto& line : extra_headers)
        if (!append(line.c_str())) return make_error(error_code::internal, "out of memory building request headers");
    REDIST_SETOPT(h, CURLOPT_HTTPHEADER, headers.get());

    // CURLOPT_RANGE rather than CURLOPT_RESUME_FROM_LARGE: with the latter,
    // curl itself fails (CURLE_RANGE_ERROR) when a server ignores the range
    // and answers 200; we want to report partial=false and let the caller
    // start over from byte 0 instead.
    if (!range.empty()) REDIST_SETOPT(h, CURLOPT_RANGE, range.c_str());

    REDIST_SETOPT(h, CURLOPT_HEADERFUNCTION, &header_callback);
    REDIST_SETOPT(h, CURLOPT_HEADERDATA, &st);
    REDIST_SETOPT(h, CURLOPT_WRITEFUNCTION, &write_callback);
    REDIST_SETOPT(h, CURLOPT_WRITEDATA, &st);
    REDIST_SETOPT(h, CURLOPT_XFERINFOFUNCTION, &xferinfo_callback);
    REDIST_SETOPT(h, CURLOPT_XFERINFODATA, &st);
    REDIST_SETOPT(h, CURLOPT_NOPROGRESS, 0L);
    return {};
}

// ---- file:// ----------------------------------------------------------------

const char* file_kind(mode_t mode) {
    if (S_ISLNK(mode)) return "a symlink";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

}  // namespace

result<void> read_open_file(int fd, const std::string& safe_url, const transfer_options& options,
                            download_callbacks& callbacks, std::uint64_t resume_from,
                            std::optional<std::uint64_t> range_last, transfer_failure_info* failure) {
    const auto os_error = [&](const char* what, int en) {
        return errno_error(what, {}, en, error_code::network).with_url(safe_url);
    };
    struct stat st {};
    if (::fstat(fd, &st) != 0) return os_error("cannot read file", errno);
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (resume_from > size || (range_last && (*range_last < resume_from || *range_last >= size)))
        return make_error(error_code::network,
                          "cannot resume at byte " + std::to_string(resume_from) + ": the file is shorter")
            .with_url(safe_url);
    const std::uint64_t end = range_last ? *range_last + 1 : size;
    response_info info;
    info.content_length = static_cast<std::int64_t>(end - resume_from);
    info.partial = resume_from > 0 || range_last.has_value();
    if (callbacks.on_response)
        REDIST_TRY_VOID(guarded("on_response callback", [&] { return callbacks.on_response(info); }));
    if (resume_from > 0 && ::lseek(fd, static_cast<off_t>(resume_from), SEEK_SET) < 0)
        return os_error("cannot seek in file", errno);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

    constexpr std::size_t kBlock = 1u << 20;
    const auto buffer = std::make_unique_for_overwrite<std::byte[]>(kBlock);
    const auto stall = std::chrono::seconds(options.stall_timeout_seconds);
    for (std::uint64_t left = end - resume_from; left > 0;) {
        const auto before = std::chrono::steady_clock::now();
        auto got = read_some(fd, buffer.get(), static_cast<std::size_t>(std::min<std::uint64_t>(left, kBlock)), {},
                             error_code::network);
        if (!got.ok()) return std::move(got).error_value().with_url(safe_url);
        const std::size_t n = *got;
        if (options.stall_timeout_seconds > 0 && std::chrono::steady_clock::now() - before >= stall) {
            set_failure(failure, true, 0, std::nullopt);
            return make_error(error_code::network,
                              "stalled: no data for " + std::to_string(options.stall_timeout_seconds) + " s")
                .with_url(safe_url);
        }
        if (n == 0) break;  // it shrank meanwhile: the caller's size check tells
        left -= n;
        if (callbacks.on_data)
            REDIST_TRY_VOID(guarded("on_data callback", [&] { return callbacks.on_data(buffer.get(), n); }));
    }
    return {};
}

std::string system_ca_bundle(std::string_view built_in, const std::function<bool(const std::string&)>& is_file) {
    if (!built_in.empty() && is_file(std::string(built_in))) return {};  // libcurl's own default works
    // Where the distributions keep theirs (the list Go's crypto/x509 searches).
    static constexpr std::string_view known[] = {
        "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Gentoo, Arch
        "/etc/pki/tls/certs/ca-bundle.crt",                   // RHEL, Fedora, Amazon Linux
        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL, CentOS
        "/etc/ssl/ca-bundle.pem",                             // openSUSE
        "/etc/pki/tls/cacert.pem",                            // OpenELEC
        "/etc/ssl/cert.pem",                                  // Alpine
    };
    for (const std::string_view path : known)
        if (path != built_in && is_file(std::string(path))) return std::string(path);
    return {};  // none found: libcurl's default, whose error then names it
}

namespace {

// Reads a file:// source. Why not libcurl: it percent-decodes the path
// ("..%2f" walks up), and its blocking open() of a FIFO hangs forever, before
// any progress callback could fire. Here:
// - lstat() first, so that a FIFO, a device or a symlink is refused without
//   even being opened (opening a device can have side effects); then open()
//   with O_NOFOLLOW|O_NONBLOCK (never blocks, never follows a final symlink
//   swapped in meanwhile) and fstat() to check again what we really opened.
// - Nothing about a refused file (size, contents, hash) reaches an error.
// - At most the size seen at open time is read, so a file that keeps growing
//   cannot feed us forever.
// - Deadline: O_NONBLOCK stays set, so special files that honour it answer
//   EAGAIN instead of blocking; a read() of a regular file that takes longer
//   than the stall timeout (slow or hung network storage) fails as "stalled",
//   as soon as the kernel gives control back -- a read stuck inside the
//   kernel cannot be interrupted from user space.
result<void> read_file_url(const std::string& url, const std::string& safe_url, const transfer_options& options,
                           download_callbacks& callbacks, std::uint64_t resume_from, transfer_failure_info* failure) {
    std::string path;
    if (auto bad = file_url_to_path(url, path)) return make_error(error_code::network, *bad).with_url(safe_url);
    const auto refuse = [&](const char* kind) {
        return make_error(error_code::network,
                          std::string("refusing ") + kind + ": a file source must be a regular file")
            .with_url(safe_url);
    };
    const auto os_error = [&](const char* what, int en) {
        const error_code code = (en == ENOENT || en == ENOTDIR || en == EACCES) ? error_code::not_found
                                                                                : error_code::network;
        return errno_error(what, {}, en, code).with_url(safe_url);
    };

    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return os_error("cannot read file", errno);
    if (!S_ISREG(st.st_mode)) return refuse(file_kind(st.st_mode));
    const unique_fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY));
    if (fd.get() < 0) {
        if (errno == ELOOP) return refuse("a symlink");
        return os_error("cannot read file", errno);
    }
    if (::fstat(fd.get(), &st) != 0) return os_error("cannot read file", errno);
    if (!S_ISREG(st.st_mode)) return refuse(file_kind(st.st_mode));
    return read_open_file(fd.get(), safe_url, options, callbacks, resume_from, std::nullopt, failure);
}

std::string ca_bundle(const transfer_options& options) {
    if (!options.ca_file.empty()) return options.ca_file;
    for (const char* var : {"SSL_CERT_FILE", "CURL_CA_BUNDLE"}) {
        const char* value = std::getenv(var);
        if (value != nullptr && *value != '\0') return value;
    }
    // Decided once per process: the files do not move during a run.
    static const std::string system = [] {
        const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
        return system_ca_bundle(info != nullptr && info->cainfo != nullptr ? info->cainfo : "",
                                [](const std::string& path) {
                                    struct stat st {};
                                    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
                                });
    }();
    return system;
}

// One http(s) request by libcurl: the http reader (source.hpp).
result<void> curl_read(const std::string& url, const read_request& request) {
    const std::vector<std::string>& extra_headers = request.headers;
    const transfer_options& options = request.options;
    download_callbacks& callbacks = request.callbacks;
    const std::uint64_t resume_from = request.resume_from;
    const std::optional<std::uint64_t> range_last = request.range_last;
    transfer_failure_info* const failure = request.failure;
    const std::string safe_url = sanitize_url(url);
    const curl_easy handle(curl_easy_init());
    if (!handle) return make_error(error_code::internal, "curl_easy_init failed").with_url(safe_url);

    transfer_state st{.curl = handle.get(),
                      .callbacks = &callbacks,
                      .safe_url = safe_url,
                      .resume_from = resume_from,
                      .range_last = range_last,
                      .stall_seconds = options.stall_timeout_seconds};

    char errbuf[CURL_ERROR_SIZE] = {};
    curl_slist_ptr headers;
    const std::string range = range_last        ? std::to_string(resume_from) + "-" + std::to_string(*range_last)
                              : resume_from > 0 ? std::to_string(resume_from) + "-"
                                                : std::string();
    {
        auto configured = configure(handle.get(), url, options, st, headers, errbuf, range, ca_bundle(options),
                                    extra_headers);
        if (!configured.ok()) return std::move(configured).error_value().with_url(safe_url);
    }

    const CURLcode rc = curl_easy_perform(handle.get());

    // A callback's own error wins, unchanged (it may carry its own url/path).
    if (st.callback_error) return std::move(*st.callback_error);

    if (rc == CURLE_OK) {
        // Headers only, no body byte: the write callback never ran.
        if (!st.started) {
            start_response(st);
            if (st.callback_error) return std::move(*st.callback_error);
        }
        if (st.http_error) return http_status_error(st, failure).with_url(safe_url);
        return {};
    }
    if (st.http_error) return http_status_error(st, failure).with_url(safe_url);

    long status = 0;
    curl_easy_getinfo(handle.get(), CURLINFO_RESPONSE_CODE, &status);

    if (rc == CURLE_ABORTED_BY_CALLBACK && st.stalled) {
        set_failure(failure, true, status, std::nullopt);
        if (failure != nullptr) failure->unreachable = !st.started;  // accepted, never answered
        return make_error(error_code::network,
                          "stalled: no data for " + std::to_string(options.stall_timeout_seconds) + " s")
            .with_url(safe_url);
    }
    if (rc == CURLE_OUT_OF_MEMORY) {
        return make_error(error_code::internal, std::string("curl: ") + curl_easy_strerror(rc)).with_url(safe_url);
    }

    const bool transient = is_transient(rc);
    set_failure(failure, transient, status, std::nullopt);
    // No response at all: refused, unresolvable, timed out, reset before the status line.
    if (failure != nullptr) failure->unreachable = transient && status == 0 && !st.started;
    // Where a redirect took us is often the useful part of the story.
    char* effective = nullptr;
    std::string redirected;
    if (curl_easy_getinfo(handle.get(), CURLINFO_EFFECTIVE_URL, &effective) == CURLE_OK && effective != nullptr &&
        url != effective)
        redirected = sanitize_url(effective);
    if (rc == CURLE_UNSUPPORTED_PROTOCOL && !redirected.empty()) {
        // REDIR_PROTOCOLS refused where the redirect led.
        const std::string message = is_https_url(url) ? "refusing a redirect from https to " + redirected +
                                                            " (only https may follow https)"
                                                      : "refusing a redirect to " + redirected +
                                                            " (only http and https are followed)";
        return make_error(error_code::network, message).with_url(safe_url);
    }
    std::string message = std::string(curl_easy_strerror(rc));
    if (errbuf[0] != '\0' && message != errbuf) message += std::string(": ") + errbuf;
    if (status != 0) message += " (HTTP " + std::to_string(status) + ")";
    if (!redirected.empty()) message += " [redirected to " + redirected + "]";
    return make_error(error_code::network, std::move(message)).with_url(safe_url);
}

// How each kind of source is read (source.hpp): http(s) by libcurl, a
// directory mirror from disk, a registry or an image layout through oci.cpp
// (a registry's URL is mapped to the blob's, which comes back through
// download_with_headers() with its credentials).
class http_reader final : public source_reader {
public:
    result<void> read(const source& from, const read_request& request) const override {
        return curl_read(from.url(), request);
    }
};

class file_reader final : public source_reader {
public:
    result<void> read(const source& from, const read_request& request) const override {
        const std::string& url = from.url();
        const std::string safe_url = sanitize_url(url);
        if (request.range_last)
            return make_error(error_code::internal, "download_range() does not read file:// URLs").with_url(safe_url);
        return read_file_url(url, safe_url, request.options, request.callbacks, request.resume_from, request.failure);
    }
};

class oci_reader final : public source_reader {
public:
    result<void> read(const source& from, const read_request& request) const override {
        return oci_download(from, request.options, request.callbacks, request.resume_from, request.range_last,
                            request.failure);
    }
};

result<void> perform_download(const std::string& url, const std::vector<std::string>& extra_headers,
                              const transfer_options& options, download_callbacks& callbacks, std::uint64_t resume_from,
                              std::optional<std::uint64_t> range_last, transfer_failure_info* failure) {
    set_failure(failure, false, 0, std::nullopt);
    return make_source(url).read({.headers = extra_headers,
                                  .options = options,
                                  .callbacks = callbacks,
                                  .resume_from = resume_from,
                                  .range_last = range_last,
                                  .failure = failure});
}

}  // namespace

const source_reader& builtin_reader(source_kind kind) noexcept {
    static const http_reader http;
    static const file_reader file;
    static const oci_reader oci;
    switch (kind) {
        case source_kind::http: return http;
        case source_kind::file: return file;
        case source_kind::registry:
        case source_kind::layout: return oci;
    }
    return http;
}

result<void> download(const std::string& url, const transfer_options& options, download_callbacks& callbacks,
                      std::uint64_t resume_from, transfer_failure_info* failure) {
    return perform_download(url, {}, options, callbacks, resume_from, std::nullopt, failure);
}

result<void> download_with_headers(const std::string& url, const std::vector<std::string>& headers,
                                   const transfer_options& options, download_callbacks& callbacks,
                                   std::uint64_t resume_from, std::optional<std::uint64_t> range_last,
                                   transfer_failure_info* failure) {
    if (source_kind_of(url) != source_kind::http)
        return make_error(error_code::internal, "download_with_headers() takes http(s) URLs only")
            .with_url(sanitize_url(url));
    return perform_download(url, headers, options, callbacks, resume_from, range_last, failure);
}

result<void> download_range(const std::string& url, const transfer_options& options, download_callbacks& callbacks,
                            std::uint64_t first, std::uint64_t last, transfer_failure_info* failure) {
    if (last < first)
        return make_error(error_code::internal, "download_range: empty range").with_url(sanitize_url(url));
    return perform_download(url, {}, options, callbacks, first, last, failure);
}

result<std::string> fetch_text(const std::string& url, const transfer_options& options, std::size_t max_bytes,
                               transfer_failure_info* failure) {
    std::string body;
    bool refused_as_too_large = false;
    const auto too_large = [&](std::uint64_t size) {
        refused_as_too_large = true;
        return make_error(error_code::network, "response larger than " + std::to_string(max_bytes) + " bytes (" +
                                                   std::to_string(size) + " bytes or more)")
            .with_url(url);
    };
    download_callbacks callbacks;
    callbacks.on_response = [&](const response_info& info) -> result<void> {
        // Refuse early when the server announces an oversized body.
        if (info.content_length > 0 && static_cast<std::uint64_t>(info.content_length) > max_bytes)
            return too_large(static_cast<std::uint64_t>(info.content_length));
        if (info.content_length > 0) body.reserve(static_cast<std::size_t>(info.content_length));
        return {};
    };
    callbacks.on_data = [&](const std::byte* data, std::size_t size) -> result<void> {
        if (size > max_bytes - body.size()) return too_large(body.size() + size);
        body.append(reinterpret_cast<const char*>(data), size);
        return {};
    };
    auto r = download(url, options, callbacks, 0, failure);
    if (failure != nullptr) failure->too_large = refused_as_too_large;
    if (!r.ok()) return std::move(r).error_value();
    return body;
}

// ---- send_request: status, headers and a small body for the caller -----------------------

namespace {

size_t response_body_callback(char* data, size_t size, size_t nmemb, void* userdata) {
    auto* st = static_cast<transfer_state*>(userdata);
    const std::size_t total = size * nmemb;
    std::string& body = st->response->body;
    if (total > st->max_body - body.size()) {
        st->callback_error = make_error(error_code::network,
                                        "response larger than " + std::to_string(st->max_body) + " bytes")
                                 .with_url(st->safe_url);
        return CURL_WRITEFUNC_ERROR;
    }
    body.append(data, total);
    return total;
}

size_t request_read_callback(char* buffer, size_t size, size_t nitems, void* userdata) {
    auto* file = static_cast<std::FILE*>(userdata);
    const std::size_t n = std::fread(buffer, 1, size * nitems, file);
    if (n == 0 && std::ferror(file)) return CURL_READFUNC_ABORT;
    return n;
}

// The method and body of a request, after configure().
result<void> configure_method(CURL* h, const http_request& request, std::FILE* body_file, std::uint64_t file_size) {
    const bool may_follow = request.method == "GET" || request.method == "HEAD";
    REDIST_SETOPT(h, CURLOPT_FOLLOWLOCATION, may_follow ? 1L : 0L);
    if (request.method == "HEAD") {
        REDIST_SETOPT(h, CURLOPT_NOBODY, 1L);
    } else if (body_file != nullptr) {
        REDIST_SETOPT(h, CURLOPT_UPLOAD, 1L);  // PUT
        REDIST_SETOPT(h, CURLOPT_READFUNCTION, &request_read_callback);
        REDIST_SETOPT(h, CURLOPT_READDATA, body_file);
        REDIST_SETOPT(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(file_size));
    } else if (request.method == "POST" || request.method == "PUT") {
        REDIST_SETOPT(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
        REDIST_SETOPT(h, CURLOPT_POSTFIELDS, request.body.c_str());
        if (request.method == "PUT") REDIST_SETOPT(h, CURLOPT_CUSTOMREQUEST, "PUT");
    } else if (request.method == "DELETE") {
        REDIST_SETOPT(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else if (request.method != "GET") {
        return make_error(error_code::internal, "send_request: unsupported method " + request.method);
    }
    return {};
}

#undef REDIST_SETOPT

}  // namespace

result<http_response> send_request(const http_request& request, const transfer_options& options,
                                   transfer_failure_info* failure) {
    set_failure(failure, false, 0, std::nullopt);
    const std::string safe_url = sanitize_url(request.url);
    if (!iequals_prefix(request.url, "http://") && !is_https_url(request.url))
        return make_error(error_code::internal, "send_request() takes http(s) URLs only").with_url(safe_url);
    const curl_easy handle(curl_easy_init());
    if (!handle) return make_error(error_code::internal, "curl_easy_init failed").with_url(safe_url);

    std::uint64_t file_size = 0;
    struct file_closer {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    std::unique_ptr<std::FILE, file_closer> file;
    if (!request.body_file.empty()) {
        struct stat info {};
        REDIST_TRY(unique_fd fd, open_regular(request.body_file, follow_links::no, &info));
        file.reset(::fdopen(fd.get(), "rb"));
        if (!file) return make_error(error_code::internal, "fdopen failed").with_path(request.body_file.string());
        (void)fd.release();  // the FILE owns it now
        file_size = static_cast<std::uint64_t>(info.st_size);
    }

    http_response response;
    download_callbacks no_callbacks;
    transfer_state st{.curl = handle.get(),
                      .callbacks = &no_callbacks,
                      .safe_url = safe_url,
                      .response = &response,
                      .max_body = request.max_response_bytes,
                      .stall_seconds = options.stall_timeout_seconds};

    char errbuf[CURL_ERROR_SIZE] = {};
    curl_slist_ptr headers;
    {
        auto configured = configure(handle.get(), request.url, options, st, headers, errbuf, {}, ca_bundle(options),
                                    request.headers);
        if (configured.ok()) configured = configure_method(handle.get(), request, file.get(), file_size);
        if (configured.ok() &&
            curl_easy_setopt(handle.get(), CURLOPT_WRITEFUNCTION, &response_body_callback) != CURLE_OK)
            configured = make_error(error_code::internal, "curl_easy_setopt(CURLOPT_WRITEFUNCTION) failed");
        if (!configured.ok()) return std::move(configured).error_value().with_url(safe_url);
    }
    const CURLcode rc = curl_easy_perform(handle.get());
    if (st.callback_error) return std::move(*st.callback_error);
    curl_easy_getinfo(handle.get(), CURLINFO_RESPONSE_CODE, &response.status);
    if (rc != CURLE_OK) {
        const bool stalled = rc == CURLE_ABORTED_BY_CALLBACK && st.stalled;
        const bool transient = is_transient(rc) || stalled;
        set_failure(failure, transient, response.status, std::nullopt);
        if (stalled)
            return make_error(error_code::network,
                              "stalled: no data for " + std::to_string(options.stall_timeout_seconds) + " s")
                .with_url(safe_url);
        std::string message = std::string(curl_easy_strerror(rc));
        if (errbuf[0] != '\0' && message != errbuf) message += std::string(": ") + errbuf;
        return make_error(error_code::network, std::move(message)).with_url(safe_url);
    }
    curl_off_t length = -1;
    if (curl_easy_getinfo(handle.get(), CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK)
        response.content_length = length;
    const bool transient = response.status == 408 || response.status == 429 || response.status >= 500;
    set_failure(failure, transient, response.status, transient ? st.retry_after : std::nullopt);
    return response;
}

}  // namespace redist
