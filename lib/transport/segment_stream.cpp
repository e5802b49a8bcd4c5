// segment_stream.cpp — one stream of a download: how each response is taken
// (the same file, or start over), the body spooled 256 KiB at a time, and
// the retry loop (see segment_stream.hpp).
#include "transport/segment_stream.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <thread>
#include <utility>

#include "redist/urls.hpp"
#include "support/posix_file.hpp"
#include "transport/segment_checks.hpp"

namespace redist::segmenting {

// The bytes so far belong to another version of the file than the one now
// served: they are worthless. The spool is emptied, the caller is told to
// drop what it had (a second on_response, partial = false), and the request
// fails as transient (run_single_stream), so that a retry starts at byte 0.
result<void> single_stream::start_over() {
    changed = true;
    spooled = delivered = 0;
    pending.clear();
    validator.clear();
    REDIST_TRY_VOID(empty_spool(fd, spool_path, part_file, expected_size, callbacks, false));
    return make_error(error_code::network, "the file changed during the download").with_url(sanitize_url(url));
}

result<void> single_stream::deliver_spooled() {
    if (fd < 0 || delivered >= spooled) return {};
    std::unique_ptr<std::byte[]> buffer;
    REDIST_TRY_VOID(segmenting::deliver_spooled(fd, spool_path, delivered, spooled, callbacks, buffer));
    delivered = spooled;
    return {};
}

result<void> single_stream::write(const std::byte* data, std::size_t n) {
    last_write = clock_type::now();
    auto written = pwrite_all(fd, data, n, spooled, spool_path, spool_full);
    if (written.ok()) {
        spooled += n;
        return {};
    }
    if (!spool_full || !give_up || !give_up(written.error_value())) return written;
    // No spool from now on: every byte goes to on_data only.
    fd = -1;
    part_file.clear();
    spooled = delivered;
    return {};
}

result<void> single_stream::flush() {
    if (pending.empty()) return {};
    auto written = write(pending.data(), pending.size());
    pending.clear();
    return written;
}

// The response to a request for bytes `spooled`.. (see the header for the rules).
result<void> single_stream::accept(const response_info& r, std::uint64_t& skip) {
    const std::string v = response_version(r);
    bool tell = !responded;
    if (spooled > 0 && r.partial && versions_differ(validator, v)) return start_over();
    if (spooled > 0 && !r.partial) {
        if (!validator.empty() && v == validator) {
            skip = delivered;  // the whole file, of the same version: what the consumer has is skipped
            spooled = delivered;
        } else {
            // Maybe another version: start over with this body, no request lost.
            if (fd >= 0 && ::ftruncate(fd, 0) != 0)
                return errno_error("cannot truncate the download spool", spool_path, errno);
            if (!part_file.empty()) remove_segment_record(part_file);
            tell = tell || delivered > 0;
            spooled = delivered = 0;
            validator.clear();
        }
    }
    if (validator.empty()) validator = v;
    if (expected_size > 0) REDIST_TRY_VOID(check_content_length(r, expected_size - (r.partial ? spooled : 0), url));
    if (tell) {
        responded = true;
        response_info whole = r;
        whole.partial = delivered > 0;
        if (r.content_length >= 0)
            whole.content_length = r.content_length + static_cast<std::int64_t>(r.partial ? spooled : 0);
        if (expected_size > 0) whole.content_length = static_cast<std::int64_t>(expected_size);
        if (callbacks.on_response) REDIST_TRY_VOID(callbacks.on_response(whole));
    }
    return r.partial ? deliver_spooled() : result<void>{};
}

// A piece of the body: into the spool, 256 KiB at a time as the ranged path
// writes (a larger piece as it is), and to on_data at once. The piece that
// reaches half the file writes the batch first, so that a process killed
// there (the crash tests' "mid-download" pause, artifact_stream::feed)
// leaves every byte it received in the .part.
result<void> single_stream::take(const std::byte* data, std::size_t n, segmented_stats& stats) {
    if (expected_size > 0 && n > expected_size - delivered)
        return make_error(error_code::integrity, "more bytes than expected")
            .with_url(sanitize_url(url))
            .with_expected_actual(std::to_string(expected_size), "at least " + std::to_string(delivered + n));
    stats.received_bytes += n;
    const auto took_at = probe ? clock_type::now() : clock_type::time_point{};
    if (fd >= 0 && pending.empty() && n >= kSpoolBatch) {
        REDIST_TRY_VOID(write(data, n));
    } else if (fd >= 0) {
        if (pending.empty()) pending.reserve(kSpoolBatch);
        pending.insert(pending.end(), data, data + n);
        const bool half = delivered < expected_size / 2 && delivered + n >= expected_size / 2;
        if (pending.size() >= kSpoolBatch || half) REDIST_TRY_VOID(flush());
    }
    delivered += n;
    if (fd < 0) spooled = delivered;  // no spool, or none any more (give_up)
    if (callbacks.on_data) REDIST_TRY_VOID(callbacks.on_data(data, n));
    return probe ? watch_for_starvation(took_at) : result<void>{};
}

namespace {

std::chrono::nanoseconds thread_cpu_time() {
    struct timespec ts {};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

}  // namespace

// What take() spent on a piece (spool, hash, decoder: the consumer's side,
// waits for room in its queue included) and the CPU the thread used (that
// again, and libcurl's receiving) are not waiting for the network: when
// they come to less than half of a window, the link is the bottleneck. (The
// two overlap, so waiting is understated: a doubtful window does not
// split.) A window opens at a byte, not at the request: connecting and the
// first byte's latency are not the link's rate.
result<void> single_stream::watch_for_starvation(clock_type::time_point took_at) {
    starvation_probe& p = *probe;
    const auto now = clock_type::now();
    if (p.window_start == clock_type::time_point{}) {
        p.window_start = took_at;
        p.busy = {};
        p.cpu_at_start = thread_cpu_time();
    }
    p.busy += now - took_at;
    const auto elapsed = now - p.window_start;
    if (elapsed < p.window) return {};
    const auto cpu_now = thread_cpu_time();
    const bool link_is_the_bottleneck = (p.busy + (cpu_now - p.cpu_at_start)) * 2 < elapsed;
    p.window_start = now;
    p.busy = {};
    p.cpu_at_start = cpu_now;
    if (!link_is_the_bottleneck || expected_size - delivered < p.min_rest) return {};
    starved = true;
    return make_error(error_code::cancelled, "the link is slower than the consumer: going on in ranges")
        .with_url(sanitize_url(url));
}

result<void> single_stream::attempt(segmented_stats& stats, transfer_failure_info& info) {
    std::uint64_t skip = 0;
    download_callbacks cb;
    cb.on_response = [&](const response_info& r) { return accept(r, skip); };
    cb.on_data = [&](const std::byte* data, std::size_t n) -> result<void> {
        const auto dropped = static_cast<std::size_t>(std::min<std::uint64_t>(skip, n));
        skip -= dropped;
        if (n == dropped) return {};
        return take(data + dropped, n - dropped, stats);
    };
    // A stalled or crawling transfer: the spool gets what came so far (at
    // most every kIdleWrite), so a kill or a resume loses none of it.
    cb.on_idle = [&]() -> result<void> {
        if (!pending.empty() && clock_type::now() - last_write >= kIdleWrite) REDIST_TRY_VOID(flush());
        return callbacks.on_idle ? callbacks.on_idle() : result<void>{};
    };
    ++stats.requests;
    last_write = clock_type::now();
    starved = false;
    if (probe) probe->window_start = {};
    auto outcome = download(url, transfer, cb, spooled, &info);
    // Before any return: a resumable spool holds every byte delivered, and
    // the next request starts after them. A failed write wins: it is not
    // the source's, and the spool is behind what the consumer has.
    if (auto flushed = flush(); !flushed.ok()) return flushed;
    if (starved) return {};  // stopped on purpose: the caller goes on in ranges
    return outcome;
}

result<void> run_single_stream(single_stream& s, const segment_retry_hook& retry, segmented_stats& stats,
                               transfer_failure_info* failure) {
    if (s.expected_size > 0 && s.spooled == s.expected_size) {
        // Everything is in the spool (or with the consumer) already: no request at all.
        if (!s.responded) {
            s.responded = true;
            response_info whole;
            whole.content_length = static_cast<std::int64_t>(s.expected_size);
            whole.partial = s.delivered > 0;
            if (s.callbacks.on_response) REDIST_TRY_VOID(s.callbacks.on_response(whole));
        }
        return s.deliver_spooled();
    }
    for (int failures = 0;;) {
        transfer_failure_info info;
        auto outcome = s.attempt(stats, info);
        if (outcome.ok() && s.starved) return {};
        if (outcome.ok() && (s.expected_size == 0 || s.spooled == s.expected_size)) return {};
        if (outcome.ok()) {
            outcome = make_error(error_code::network, "the body ended early").with_url(sanitize_url(s.url));
            info.transient = true;
        }
        if (std::exchange(s.changed, false)) info.transient = true;  // from byte 0, on the same source
        ++failures;  // every failed request on the source, as try_sources counts attempts
        const auto delay = retry_delay(retry, failures, outcome.error_value(), info);
        if (!delay) {
            if (failure != nullptr) *failure = info;
            return outcome;
        }
        ++stats.retries;
        std::this_thread::sleep_for(*delay);
    }
}

}  // namespace redist::segmenting
