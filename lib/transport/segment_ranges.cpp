// segment_ranges.cpp — one artifact over several connections: the chunk plan
// and the run (see segment_ranges.hpp, and segmented_download.hpp for how).
//
// Choices that shape this file:
// - N easy handles on N threads, each running download_range(), rather than
//   one thread driving the libcurl multi interface: every request then goes
//   through the one implementation of transfer.hpp's rules (https never
//   downgrades, redirect limit, stall detector, raw bytes, error
//   classification), and the per-byte work (a pwrite) runs in parallel. N is
//   small (a handful), and the threads sleep in poll() nearly all the time.
// - Bounded ranges ("bytes=A-B") rather than open ones cut short: nothing is
//   sent that we do not keep, and connections end cleanly.
#include "transport/segment_ranges.hpp"

#include <algorithm>
#include <thread>

#include "redist/urls.hpp"
#include "support/posix_file.hpp"
#include "transport/segment_checks.hpp"
#include "transport/transfer.hpp"

namespace redist::segmenting {

namespace {

// The resume record is rewritten once this many bytes were written since the
// last time, when a chunk finishes, and a second after the last time (see segmented_download.hpp).
constexpr std::uint64_t kRecordStep = 4u << 20;
constexpr auto kRecordInterval = std::chrono::seconds(1);
constexpr std::uint64_t kAlignChunks = 2u << 20;

}  // namespace

std::vector<chunk> plan_chunks(std::uint64_t from, std::uint64_t size, const segment_record& present,
                               const segment_options& o) {
    std::vector<chunk> out;
    const auto n = static_cast<std::uint64_t>(std::max(1, o.connections));
    const std::uint64_t lo = std::max<std::uint64_t>(1, o.min_segment_bytes);
    const std::uint64_t hi = std::max(lo, o.max_segment_bytes);
    std::size_t r = 0;
    for (std::uint64_t x = from; x < size;) {
        while (r < present.ranges.size() && present.ranges[r].second <= x) ++r;
        if (r < present.ranges.size() && present.ranges[r].first <= x) {
            const std::uint64_t end = std::min(size, present.ranges[r].second);
            out.push_back({.start = x, .end = end, .done = end - x, .st = chunk::state::done});
            x = end;
            continue;
        }
        // About offset / n near the start (the decoder gets going at once)
        // and remaining / n near the end, so that the connections finish
        // together: a last chunk of 32 MiB on a link capped at 10 MiB/s per
        // connection took 3 s alone while the other connections sat idle.
        const std::uint64_t piece = std::clamp(std::min(x, size - x) / n, lo, hi);
        std::uint64_t end = x + piece;
        // Chunks end on multiples of 2 MiB (where they are that big), so
        // they are whole multiples of it: a server that paces a connection
        // sends in pieces (nginx's limit_rate: one sendfile_max_chunk, 2 MiB,
        // then a pause of 2 MiB / rate), and a chunk of 4.3 MiB waited a
        // whole extra pause (0.2 s at 10 MiB/s) for its last 0.3 MiB, with
        // every byte after it.
        if (piece >= 2 * kAlignChunks) end = end / kAlignChunks * kAlignChunks;
        if (r < present.ranges.size()) end = std::min(end, present.ranges[r].first);
        end = std::min(end, size);
        if (size - end <= lo / 2) end = size;  // no tiny last chunk
        out.push_back({.start = x, .end = end});
        x = end;
    }
    return out;
}

std::uint64_t segmented_run::contiguous_end() {
    while (head_ < chunks_.size() && chunks_[head_].st == chunk::state::done) ++head_;
    return head_ < chunks_.size() ? chunks_[head_].start + chunks_[head_].done : size_;
}

segment_record segmented_run::snapshot() {
    segment_record r;
    r.size = size_;
    if (!chunks_.empty() && chunks_.front().start > 0) r.ranges.emplace_back(0, chunks_.front().start);
    for (const chunk& c : chunks_) {
        if (c.done == 0) continue;
        if (!r.ranges.empty() && r.ranges.back().second == c.start) r.ranges.back().second = c.start + c.done;
        else r.ranges.emplace_back(c.start, c.start + c.done);
    }
    if (r.ranges.size() > kMaxRecordRanges) r.ranges.resize(kMaxRecordRanges);  // understating is safe
    return r;
}

bool segmented_run::record_due() const {
    if (unrecorded_ == 0 && finished_ == recorded_finished_) return false;
    return unrecorded_ >= kRecordStep || finished_ != recorded_finished_ ||
           clock_type::now() - last_record_ >= kRecordInterval;
}

void segmented_run::record_progress(bool force, bool wait_for_writer) {
    if (part_file_.empty()) return;
    if (!wait_for_writer) {
        std::lock_guard lock(mutex_);
        if (!force && !record_due()) return;
    }
    // A writer that finds the step reached waits here while another writes
    // the record: this is what bounds the bytes a record lags behind. (A
    // snapshot is written before its writer lets go: holding this lock
    // means every snapshot taken so far is on disk.)
    std::lock_guard serial(record_mutex_);
    segment_record record;
    std::size_t finished_in_record = 0;
    {
        std::lock_guard lock(mutex_);
        if (!force && !record_due()) return;  // written meanwhile
        record = snapshot();
        unrecorded_ = 0;
        recorded_finished_ = finished_in_record = finished_;
        last_record_ = clock_type::now();
    }
    // Every byte the snapshot counts was written (pwrite) before it was
    // counted, so a killed process's record never claims bytes it did not
    // write. No fdatasync (one per 4 MiB on the download's path): after a
    // power loss a record that claims lost bytes only makes the resumed hash
    // fail, which drops the .part and fetches the archive again in the same
    // run (artifact_stream).
    (void)atomic_write(segment_record_path(part_file_), segment_record_to_text(record), durability::none);
    std::lock_guard lock(mutex_);
    written_finished_ = std::max(written_finished_, finished_in_record);
}

void segmented_run::stop_all() {
    stop_ = true;
    work_cv_.notify_all();
    progress_cv_.notify_all();
}

// The lowest chunk nobody has whose retry time has come; nullptr: no more work.
// Until a 206 confirmed ranges, only the lowest pending chunk is handed out
// (its retries wait for it): a 200 then always answers the request for the
// first missing byte, so its body can become the whole stream.
chunk* segmented_run::take() {
    std::unique_lock lock(mutex_);
    for (;;) {
        if (stop_) return nullptr;
        const auto now = clock_type::now();
        std::optional<clock_type::time_point> wake;
        for (chunk& c : chunks_) {
            if (c.st != chunk::state::pending) continue;
            if (c.not_before <= now) {
                c.st = chunk::state::active;
                ++requests_;
                return &c;
            }
            wake = wake ? std::min(*wake, c.not_before) : c.not_before;
            if (!ranges_confirmed_) break;
        }
        if (!wake) return nullptr;
        work_cv_.wait_until(lock, *wake);
    }
}

void segmented_run::worker() {
    while (chunk* c = take()) fetch(*c);
}

void segmented_run::fetch(chunk& c) {
    std::uint64_t offset = 0;
    {
        std::lock_guard lock(mutex_);
        offset = c.start + c.done;
    }
    bool range_ignored = false;
    bool progressed = false;
    std::uint64_t skip = 0;  // a 200's body starts at byte 0, not at `offset`
    download_callbacks cb;
    cb.on_response = [&](const response_info& info) -> result<void> {
        const std::string version = response_version(info);
        std::lock_guard lock(mutex_);
        if (!info.partial) {
            if (ranges_confirmed_) {
                // Ranges worked before and other connections hold chunks:
                // nothing of this body is used; one stream from the prefix.
                range_ignored = true;
                return make_error(error_code::cancelled, "the server ignores byte ranges");
            }
            // The first request (no other is running): its body is the
            // whole file, so this chunk now runs to the end and the chunks
            // after it are dropped (any done ones among them are rewritten
            // with the same bytes, which the caller's hash checks anyway).
            if (!whole_stream_) {
                whole_stream_ = true;
                c.end = size_;
                chunks_.resize(static_cast<std::size_t>(&c - chunks_.data()) + 1);
            }
            skip = offset;
        } else {
            ranges_confirmed_ = !whole_stream_;
            progress_cv_.notify_one();  // the caller opens the other connections
        }
        if (versions_differ(validator_, version)) {
            changed_ = true;  // settle() stops the run; run_segments starts over
            return make_error(error_code::network, "the file changed during the download").with_url(sanitize_url(url_));
        }
        if (validator_.empty()) validator_ = version;
        return check_content_length(info, info.partial ? c.end - offset : size_, url_);
    };
    // Bytes received but not yet in the spool: libcurl hands the body over
    // in 16 KiB pieces, and a pwrite() per piece, from every connection into
    // the one file, made them wait for each other's inode lock.
    // A connection that stalls or crawls writes what it has at least every
    // kIdleWrite (on_idle), so the reader and a later resume get it.
    std::vector<std::byte> pending;
    auto last_write = clock_type::now();
    auto write_pending = [&]() -> result<void> {
        last_write = clock_type::now();
        if (pending.empty()) return {};
        const std::size_t n = pending.size();
        bool out_of_space = false;
        auto written = pwrite_all(fd_, pending.data(), n, offset, spool_path_, out_of_space);
        if (!written.ok()) {
            if (out_of_space) spool_full_ = true;
            return written;
        }
        pending.clear();
        offset += n;
        progressed = true;
        {
            std::lock_guard lock(mutex_);
            c.done += n;
            received_ += n;
            unrecorded_ += n;
            progress_cv_.notify_one();
        }
        record_progress(false);
        return {};
    };
    cb.on_data = [&](const std::byte* data, std::size_t n) -> result<void> {
        if (stop_) return make_error(error_code::cancelled, "segmented download stopped");
        const auto dropped = static_cast<std::size_t>(std::min<std::uint64_t>(skip, n));
        skip -= dropped;
        data += dropped;
        n -= dropped;
        if (n == 0) return {};
        if (n > c.end - offset - pending.size())
            return make_error(error_code::integrity, "more bytes than the range asked for").with_url(sanitize_url(url_));
        if (pending.empty()) pending.reserve(kSpoolBatch);
        pending.insert(pending.end(), data, data + n);
        if (pending.size() >= kSpoolBatch) return write_pending();
        return {};
    };
    cb.on_idle = [&]() -> result<void> {
        // The run stops (the caller cancelled, a fatal chunk): a stalled
        // request ends at once rather than at its next byte.
        if (stop_) return make_error(error_code::cancelled, "segmented download stopped");
        if (pending.empty()) {
            // Nothing to write, but bytes written less than kRecordInterval
            // before the transfer went quiet are not in the record yet: a
            // stalled run must not keep them unrecorded until it is killed.
            record_progress(false);
            return {};
        }
        if (clock_type::now() - last_write < kIdleWrite) return {};
        return write_pending();
    };
    transfer_failure_info info;
    auto outcome = download_range(url_, transfer_, cb, offset, c.end - 1, &info);
    // What came before a failure is kept too (the retry resumes after it).
    if (auto written = write_pending(); !written.ok() && outcome.ok()) outcome = std::move(written).error_value();
    settle(c, std::move(outcome), info, progressed, range_ignored);
    record_progress(false);  // a finished chunk is recorded at once
}

// After one request for `c`: done, back in the queue after a delay, or the end of everything.
void segmented_run::settle(chunk& c, result<void> outcome, const transfer_failure_info& info, bool progressed,
                           bool range_ignored) {
    std::lock_guard lock(mutex_);
    if (outcome.ok() && c.done == c.end - c.start) {
        c.st = chunk::state::done;
        ++finished_;
        progress_cv_.notify_one();
        return;
    }
    if (stop_) return;
    if (range_ignored) {
        fallback_ = true;
        stop_all();
        return;
    }
    if (changed_) {
        fatal_ = std::move(outcome).error_value();
        fatal_info_ = info;
        stop_all();
        return;
    }
    transfer_failure_info why = info;
    const bool ended_early = outcome.ok();
    error e = ended_early
                  ? make_error(error_code::network, "the body ended before the range did").with_url(sanitize_url(url_))
                  : std::move(outcome).error_value();
    if (ended_early) why.transient = true;
    c.failures = progressed ? 1 : c.failures + 1;
    const auto delay = retry_delay(retry_, c.failures, e, why);
    if (!delay) {
        fatal_ = std::move(e);
        fatal_info_ = why;
        stop_all();
        return;
    }
    ++retries_;
    c.st = chunk::state::pending;
    c.not_before = clock_type::now() + *delay;
    work_cv_.notify_all();
}

result<void> segmented_run::run(int connections, std::uint64_t& delivered, download_callbacks& callbacks,
                                segmented_stats& stats, transfer_failure_info* failure) {
    const auto pending = static_cast<std::size_t>(
        std::count_if(chunks_.begin(), chunks_.end(), [](const chunk& c) { return c.st != chunk::state::done; }));
    std::vector<std::thread> threads;
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(std::max(1, connections)), pending);
    // One connection first: a server that ignores ranges then costs no
    // extra request (its 200 becomes the stream), one that is down gets one
    // attempt at a time, and the first bytes (what the decoder needs) are
    // asked for at once. The rest follow the first 206 (one round trip).
    if (n > 0) threads.emplace_back([this] { worker(); });
    const auto open_the_others = [&] {
        for (std::size_t i = threads.size(); i < n; ++i) threads.emplace_back([this] { worker(); });
    };

    result<void> outcome;
    // The resume record is mostly the writers' job (record_progress), not
    // this thread's: on_data may keep it busy for long (a slow decoder)
    // while the connections write on. One exception: a chunk that finished
    // is recorded before any byte after it is delivered, so a run killed
    // once the caller has seen those bytes resumes at least past that chunk.
    while (delivered < size_) {
        std::unique_lock lock(mutex_);
        const auto others_due = [&] { return ranges_confirmed_ && !whole_stream_ && threads.size() < n; };
        const bool woken = progress_cv_.wait_for(
            lock, kIdleWrite, [&] { return stop_.load() || contiguous_end() > delivered || others_due(); });
        if (stop_) break;
        if (!woken && callbacks.on_idle) {
            // Nothing to deliver for a while (the head of the line stalls):
            // the caller may still stop the run (Ctrl-C), as one stream's can.
            lock.unlock();
            outcome = callbacks.on_idle();
            if (!outcome.ok()) break;
            continue;
        }
        if (others_due()) open_the_others();
        const std::uint64_t available = contiguous_end();
        // Not recorded_finished_: a writer may have taken the snapshot
        // and still be writing it, and a kill then keeps the record before.
        const bool finished_unwritten = finished_ != written_finished_;
        lock.unlock();
        if (finished_unwritten) record_progress(false, true);
        outcome = deliver_spooled(fd_, spool_path_, delivered, available, callbacks, buffer_);
        if (!outcome.ok()) break;
        delivered = available;
    }
    {
        std::lock_guard lock(mutex_);
        stop_all();
    }
    for (auto& t : threads) t.join();
    // Whatever is on disk now stays usable for a resume.
    if (delivered < size_ && !fallback_ && !spool_full_) record_progress(true);
    stats.requests += requests_;
    stats.retries += retries_;
    stats.received_bytes += received_;
    if (!outcome.ok()) return outcome;
    if (fatal_) {
        if (failure != nullptr) *failure = fatal_info_;
        return std::move(*fatal_);
    }
    return {};
}

}  // namespace redist::segmenting
