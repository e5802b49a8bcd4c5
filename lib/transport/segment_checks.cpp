// segment_checks.cpp — what every response of an artifact must say (one
// version, the Content-Length asked for) and the retry rule of one request;
// the contracts are in segment_checks.hpp.
#include "transport/segment_checks.hpp"

#include "redist/urls.hpp"

namespace redist::segmenting {

std::string response_version(const response_info& r) { return !r.etag.empty() ? r.etag : r.last_modified; }

bool versions_differ(std::string_view kept, std::string_view now) {
    return !kept.empty() && !now.empty() && kept != now;
}

result<void> check_content_length(const response_info& r, std::uint64_t expected_body, const std::string& url) {
    if (r.content_length < 0 || static_cast<std::uint64_t>(r.content_length) == expected_body) return {};
    return make_error(error_code::integrity, "size mismatch: Content-Length disagrees with the manifest's size")
        .with_url(sanitize_url(url))
        .with_expected_actual(std::to_string(expected_body), std::to_string(r.content_length));
}

std::optional<std::chrono::milliseconds> retry_delay(const segment_retry_hook& retry, int failures, const error& e,
                                                     const transfer_failure_info& info) {
    if ((e.code != error_code::network && e.code != error_code::not_found) || !retry) return std::nullopt;
    return retry(failures, e, info);
}

}  // namespace redist::segmenting
