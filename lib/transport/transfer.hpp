// transport/transfer.hpp (internal) — a ranged download (transfer.cpp), the
// piece of libcurl work the segmented downloader's connections run
// (segment_ranges.cpp); redist/transfer.hpp holds download() and
// fetch_text(), which programs call.
#pragma once

#include <cstdint>
#include <string>

#include "redist/error.hpp"
#include "redist/transfer.hpp"

namespace redist {

// Like download(), for bytes [first, last] (inclusive) only: sends
// "Range: bytes=first-last" (for the segmented downloads of large archives).
// A 206 must carry exactly "Content-Range: bytes first-last/..." (else a
// permanent network error); a 200 (the server ignores ranges) is reported as
// partial=false before any body byte, and the callbacks then get the whole
// file unless on_response refuses it. http(s) only: a file:// URL is an
// internal error. Same outcomes as download().
result<void> download_range(const std::string& url, const transfer_options& options, download_callbacks& callbacks,
                            std::uint64_t first, std::uint64_t last, transfer_failure_info* failure = nullptr);

}  // namespace redist
