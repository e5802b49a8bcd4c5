// Internal: the parts of transfer.cpp that the OCI registry client
// (oci.cpp) needs beyond download(): extra request headers, and requests
// whose status, headers and small body the caller reads itself (HEAD, POST,
// PUT, small GETs). One HTTP stack: both run on transfer.cpp's libcurl setup
// (scheme rules, TLS, redirects, timeouts).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/transfer.hpp"

namespace redist {

// download() / download_range() of an http(s) URL with extra request headers
// ("Name: value"). An "Authorization" header goes to the host of `url`
// only: libcurl (7.83.1 and later, CURLOPT_UNRESTRICTED_AUTH left off) drops
// custom Authorization and Cookie headers when a redirect leads to another
// host, port or scheme. range_last set: a bounded range as download_range().
result<void> download_with_headers(const std::string& url, const std::vector<std::string>& headers,
                                   const transfer_options& options, download_callbacks& callbacks,
                                   std::uint64_t resume_from, std::optional<std::uint64_t> range_last,
                                   transfer_failure_info* failure);

// Streams an open regular file to `callbacks` as download() streams a
// file:// URL (transfer.cpp, read_file_url): from resume_from to range_last
// (inclusive) or the size fstat() gives now, with the stall deadline;
// safe_url names it in errors. Outcomes: as download() of a file:// URL.
result<void> read_open_file(int fd, const std::string& safe_url, const transfer_options& options,
                            download_callbacks& callbacks, std::uint64_t resume_from,
                            std::optional<std::uint64_t> range_last, transfer_failure_info* failure);

// The CA bundle to use when neither --ca-file nor SSL_CERT_FILE /
// CURL_CA_BUNDLE names one: "" while libcurl's built-in default
// (`built_in`, curl_version_info()'s cainfo: Debian's
// /etc/ssl/certs/ca-certificates.crt) is a file, else the first of the
// places other distributions keep theirs that `is_file` finds (RHEL's
// /etc/pki/tls/certs/ca-bundle.crt, ...), else "". So the release bundle,
// whose libcurl was built on Debian, verifies peers on RHEL too.
std::string system_ca_bundle(std::string_view built_in, const std::function<bool(const std::string&)>& is_file);

struct http_request {
    std::string method = "GET";          // GET, HEAD (both follow redirects), POST, PUT, DELETE (never follow)
    std::string url;                     // http or https
    std::vector<std::string> headers{};  // "Name: value"
    std::string body{};                  // sent for POST and PUT unless body_file is set
    std::filesystem::path body_file{};   // PUT: streamed from this regular file
    std::size_t max_response_bytes = 4u << 20;
};

struct http_response {
    long status = 0;
    std::string body;  // at most max_response_bytes (a longer body is a network error)
    std::string location;
    std::string www_authenticate;
    std::string link;
    std::string docker_content_digest;
    std::int64_t content_length = -1;
};

// One request; any HTTP status is a response for the caller to judge.
// Outcomes: ok | network (transport failure, a body over the limit;
// failure->transient as download() sets it) | filesystem (body_file
// unreadable) | internal.
result<http_response> send_request(const http_request& request, const transfer_options& options,
                                   transfer_failure_info* failure = nullptr);

}  // namespace redist
