// segment_stream.hpp (internal) — the one-stream way of a download (file://,
// small files, one connection, a server ignoring ranges): one request at a
// time, from the first byte the spool lacks, its body written to the spool
// and handed on as it arrives, retried by the caller's hook. Apart from the
// ranged run (segment_ranges.hpp): no threads, bytes arrive in order.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/transfer.hpp"
#include "transport/segment_spool.hpp"
#include "transport/segmented_download.hpp"

namespace redist::segmenting {

struct single_stream {
    const std::string& url;
    std::uint64_t expected_size;  // 0: unknown
    const transfer_options& transfer;
    int fd;  // -1: no spool
    const std::filesystem::path& spool_path;
    download_callbacks& callbacks;
    bool& responded;                    // the caller's on_response has been called
    std::uint64_t delivered = 0;        // handed to on_data (or held by the consumer)
    std::uint64_t spooled = 0;          // contiguous bytes written to the spool; without one, = delivered
    bool spool_full = false;            // a write failed for lack of room
    std::string validator{};            // ETag (else Last-Modified) of the response the bytes so far started with
    std::filesystem::path part_file{};  // the spool's resume record goes with it (empty: a temp spool)
    bool changed = false;               // the last attempt found the file changed (start_over)
    std::vector<std::byte> pending{};   // delivered, not yet written: spooled + pending.size() == delivered
    clock_type::time_point last_write{};
    // A write failed for lack of room: true when the .part was given up
    // (spool_location::temp_dir) and the stream goes on without a spool.
    std::function<bool(const error& why)> give_up{};
    // Where the download may go on in ranges once the link is seen to be
    // the bottleneck (segment_options::split_when_starved): over windows of
    // the stream, take() times itself (the spool and the consumer, which
    // may block while its queue is full) and the thread's CPU time is read
    // (libcurl's own work: receiving, TLS). A window in which both together
    // came to less than half of it was mostly spent waiting for the
    // network: it ends the attempt (starved), when at least min_rest bytes
    // are left, and the caller goes on in ranges.
    struct starvation_probe {
        std::chrono::milliseconds window{};
        std::uint64_t min_rest = 0;
        clock_type::time_point window_start{};  // {}: the window opens at the next byte
        clock_type::duration busy{};
        std::chrono::nanoseconds cpu_at_start{};
    };
    std::optional<starvation_probe> probe{};
    bool starved = false;

    result<void> attempt(segmented_stats& stats, transfer_failure_info& info);
    result<void> accept(const response_info& r, std::uint64_t& skip);
    result<void> take(const std::byte* data, std::size_t n, segmented_stats& stats);
    result<void> watch_for_starvation(clock_type::time_point took_at);
    result<void> write(const std::byte* data, std::size_t n);
    result<void> flush();
    result<void> deliver_spooled();
    result<void> start_over();
};

result<void> run_single_stream(single_stream& s, const segment_retry_hook& retry, segmented_stats& stats,
                               transfer_failure_info* failure);

}  // namespace redist::segmenting
