// segment_checks.hpp (internal) — the rules every response of an artifact
// passes, and whether a failed request is tried again: one place for them,
// used by each request of a download (one stream, segment_stream.hpp, or a
// range, segment_ranges.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "redist/error.hpp"
#include "redist/transfer.hpp"
#include "transport/segmented_download.hpp"

namespace redist::segmenting {

// The version of the file a response's body belongs to: its ETag, else its
// Last-Modified; empty when the server sends neither.
std::string response_version(const response_info& r);

// Bytes of version `kept` cannot be joined by a response of version `now`:
// both are known and differ (the file changed between two requests).
bool versions_differ(std::string_view kept, std::string_view now);

// A response that announces another body size than the `expected_body`
// bytes asked for is wrong bytes, refused before its body is read.
// Outcomes: ok (no Content-Length, or that one) | integrity.
result<void> check_content_length(const response_info& r, std::uint64_t expected_body, const std::string& url);

// After a failed request (`failures` in a row without progress): how long to
// wait before the next one, or nullopt to give up. Only network and not_found
// failures are retried, and only when the caller's hook says so.
std::optional<std::chrono::milliseconds> retry_delay(const segment_retry_hook& retry, int failures, const error& e,
                                                     const transfer_failure_info& info);

}  // namespace redist::segmenting
