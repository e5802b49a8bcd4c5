// segmented_download.cpp — one artifact over one stream or several
// connections (see the header): the entry point, which opens the spool
// (segment_spool.hpp), runs the ranges (segment_ranges.hpp) where the
// download may be split, and one stream (segment_stream.hpp) otherwise or
// where the server ignores ranges.
#include "transport/segmented_download.hpp"

#include <thread>

#include "redist/urls.hpp"
#include "support/posix_file.hpp"
#include "transport/segment_checks.hpp"
#include "transport/segment_ranges.hpp"
#include "transport/segment_spool.hpp"
#include "transport/segment_stream.hpp"
#include "transport/source.hpp"

namespace redist {

using namespace segmenting;

namespace {

// The ranged part of segmented_download: from the bytes in the spool on.
// Returns whether the server ignored ranges (one stream must go on from
// one.delivered; else all of it was delivered), or the error.
result<bool> run_segments(const std::string& url, std::uint64_t expected_size, const transfer_options& transfer,
                          const segment_options& segments, const spool_location& spool, opened_spool& s,
                          single_stream& one, download_callbacks& callbacks, const segment_retry_hook& retry,
                          transfer_failure_info* failure, segmented_stats& stats) {
    std::uint64_t delivered = 0;
    if (one.spooled > 0) {
        REDIST_TRY_VOID(one.deliver_spooled());
        delivered = one.delivered;
    }
    for (int changes = 0;;) {
        segmented_run run(url, expected_size, transfer, s.fd.get(), s.path, s.part_file,
                          plan_chunks(delivered, expected_size, s.present, segments), retry, one.validator);
        auto outcome = run.run(segments.connections, delivered, callbacks, stats, failure);
        one.validator = run.validator();
        if (!outcome.ok() && run.changed()) {
            // From byte 0 again, on the same source (see single_stream::start_over).
            REDIST_TRY_VOID(empty_spool(s.fd.get(), s.path, s.part_file, expected_size, callbacks, true));
            s.present.ranges.clear();
            one.validator.clear();
            delivered = 0;
            transfer_failure_info why;
            why.transient = true;
            if (failure != nullptr) *failure = why;
            const auto delay = retry_delay(retry, ++changes, outcome.error_value(), why);
            if (!delay) return std::move(outcome).error_value();
            ++stats.retries;
            std::this_thread::sleep_for(*delay);
            continue;
        }
        if (!outcome.ok() && can_fall_back(s, spool, run.spool_full())) {
            // Go on in a temp spool from the first byte not delivered yet.
            REDIST_TRY_VOID(give_up_part(s, spool, outcome.error_value(), true));
            continue;
        }
        if (!outcome.ok() && !run.fallback()) return std::move(outcome).error_value();
        stats.segmented = !run.fallback() && !run.whole_stream();
        one.delivered = delivered;
        one.spooled = delivered;
        return run.fallback();
    }
}

}  // namespace

result<segmented_stats> segmented_download(const std::string& url, std::uint64_t expected_size,
                                           const transfer_options& transfer, const segment_options& segments,
                                           const spool_location& spool, download_callbacks& callbacks,
                                           const segment_retry_hook& retry, transfer_failure_info* failure) {
    if (failure != nullptr) *failure = {};
    // A local file (file://, an image layout) is read in one stream, not in ranges.
    const bool may_split = !make_source(url).local() && segments.connections > 1 && expected_size > 0 &&
                           expected_size >= segments.min_total_bytes;
    // Ranges from the first request, or only once the link is seen to be
    // the bottleneck (split_when_starved): then a temp spool, which only
    // ranges need, is opened when the stream turns into them.
    const bool split_later = may_split && segments.split_when_starved;
    REDIST_TRY(opened_spool s, open_spool(spool, expected_size, may_split && !split_later));
    segmented_stats stats;
    stats.reused_bytes = present_bytes(s.present);
    if (stats.reused_bytes > 0 && spool.on_resume) spool.on_resume(stats.reused_bytes);
    bool responded = false;
    single_stream one{url, expected_size, transfer, s.fd ? s.fd.get() : -1, s.path, callbacks, responded};
    one.part_file = s.part_file;
    one.spooled = prefix_of(s.present);
    if (!s.fd) {
        if (expected_size > 0 && spool.consumer_has > expected_size)
            return make_error(error_code::integrity, "more bytes than expected").with_url(sanitize_url(url));
        one.delivered = one.spooled = spool.consumer_has;
    }

    // The ranged run from the first byte not delivered yet. Returns whether
    // the server ignored ranges (one stream goes on); else it delivered all.
    const auto in_ranges = [&]() -> result<bool> {
        stats.segmented = true;
        if (!s.part_file.empty()) {
            // Before the first out-of-order byte: from now on the .part's
            // size says nothing; the record does.
            REDIST_TRY_VOID(
                atomic_write(segment_record_path(s.part_file), segment_record_to_text(s.present), durability::none));
        }
        if (!std::exchange(responded, true)) {
            response_info whole;
            whole.status = 206;
            whole.content_length = static_cast<std::int64_t>(expected_size);
            if (callbacks.on_response) REDIST_TRY_VOID(callbacks.on_response(whole));
        }
        REDIST_TRY(const bool ranges_ignored, run_segments(url, expected_size, transfer, segments, spool, s, one,
                                                           callbacks, retry, failure, stats));
        one.fd = s.fd.get();
        one.part_file = s.part_file;
        if (!ranges_ignored && !s.part_file.empty()) remove_segment_record(s.part_file);
        return ranges_ignored;
    };

    const bool out_of_order = present_bytes(s.present) > prefix_of(s.present);
    if (may_split && (!split_later || out_of_order) && s.fd && one.spooled < expected_size) {
        REDIST_TRY(const bool ranges_ignored, in_ranges());
        if (!ranges_ignored) return stats;
        // The server ignores ranges: one stream from what the caller has.
    } else if (split_later && one.spooled < expected_size && (s.fd || !spool.temp_dir.empty())) {
        one.probe = single_stream::starvation_probe{.window = segments.starved_window,
                                                    .min_rest = 2 * segments.min_segment_bytes};
    }
    // A .part that fills up is given up where the write failed: the stream
    // goes on in the same request, without a spool.
    one.give_up = [&](const error& why) {
        if (!can_fall_back(s, spool, true)) return false;
        (void)give_up_part(s, spool, why, false);  // cannot fail: no temp spool to open
        return true;
    };
    REDIST_TRY_VOID(run_single_stream(one, retry, stats, failure));
    if (std::exchange(one.starved, false)) {
        // The link is the bottleneck: the rest comes in ranges, written at
        // their offsets into the spool the stream wrote (a record now says
        // what it holds), else into a temp spool that holds only the rest.
        one.probe.reset();
        if (!s.fd) {
            REDIST_TRY_VOID(open_temp_spool(s, spool.temp_dir));
            one.spooled = one.delivered;
        } else if (!s.part_file.empty()) {
            s.present.ranges.clear();
            if (one.spooled > 0) s.present.ranges.emplace_back(0, one.spooled);
        }
        REDIST_TRY(const bool ranges_ignored, in_ranges());
        if (ranges_ignored) REDIST_TRY_VOID(run_single_stream(one, retry, stats, failure));
    }
    if (!s.part_file.empty()) remove_segment_record(s.part_file);
    return stats;
}

}  // namespace redist
