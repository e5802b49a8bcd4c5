// segment_spool.hpp (internal) — the spool of one download: the .part file
// (or a temp file) that the bytes wait in, and its resume record
// ("<part>.segments": which byte ranges are in it). Shared by the two ways a
// download runs (segment_ranges.hpp, segment_stream.hpp) and the entry point
// (segmented_download.cpp); split from them because what sits on disk and
// how much of it may be trusted is one concern, how bytes get there another.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

#include "redist/error.hpp"
#include "redist/transfer.hpp"
#include "support/unique_fd.hpp"
#include "transport/segmented_download.hpp"

namespace redist::segmenting {

using clock_type = std::chrono::steady_clock;

inline constexpr std::size_t kSpoolBatch = 256u << 10;  // per connection (see segmented_run::fetch())
inline constexpr auto kIdleWrite = std::chrono::milliseconds(250);
inline constexpr std::size_t kMaxRecordRanges = 4096;

// ---- the spool file (segment_spool.cpp has each contract) -----------------------
bool no_room(int err);
result<void> pwrite_all(int fd, const std::byte* data, std::size_t size, std::uint64_t offset,
                        const std::filesystem::path& path, bool& out_of_space);
result<void> deliver_spooled(int fd, const std::filesystem::path& path, std::uint64_t from, std::uint64_t to,
                             download_callbacks& callbacks, std::unique_ptr<std::byte[]>& buffer);
result<void> empty_spool(int fd, const std::filesystem::path& path, const std::filesystem::path& part_file,
                         std::uint64_t expected_size, download_callbacks& callbacks, bool ranged);

// ---- the spool of one segmented_download() call ------------------------------------
struct opened_spool {
    unique_fd fd;
    std::filesystem::path path;       // for messages
    std::filesystem::path part_file;  // empty: a temp spool (no record)
    segment_record present;           // ranges already there
};

std::uint64_t present_bytes(const segment_record& r);
result<void> give_up_part(opened_spool& s, const spool_location& spool, const error& why, bool ranged);
result<opened_spool> open_spool(const spool_location& spool, std::uint64_t expected_size, bool ranged);
// An unlinked temp file in `dir` (no record, no resume), for bytes out of order.
result<void> open_temp_spool(opened_spool& s, const std::filesystem::path& dir);
std::uint64_t prefix_of(const segment_record& r);
bool can_fall_back(const opened_spool& s, const spool_location& spool, bool spool_full);

}  // namespace redist::segmenting
