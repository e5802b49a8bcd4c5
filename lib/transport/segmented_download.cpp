// segmented_download.cpp — one artifact over several connections (see the header).
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
#include "transport/segmented_download.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "redist/urls.hpp"
#include "support/posix_file.hpp"

namespace redist {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::size_t kReadBlock = 1u << 20;
constexpr std::size_t kSpoolBatch = 256u << 10;  // per connection (see fetch())
constexpr auto kIdleWrite = std::chrono::milliseconds(250);
// The resume record is rewritten once this many bytes were written since the
// last time, when a chunk finishes, and a second after the last time (see the header).
constexpr std::uint64_t kRecordStep = 4u << 20;
constexpr auto kRecordInterval = std::chrono::seconds(1);
constexpr std::size_t kMaxRecordBytes = 64u << 10;
constexpr std::size_t kMaxRecordRanges = 4096;
constexpr std::string_view kRecordMagic = "redist-segments 1";

// ---- the spool file ----------------------------------------------------------

// EFBIG: the file may not grow (a size limit, RLIMIT_FSIZE), as good as no room.
bool no_room(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG; }

// `out_of_space` is set when the write failed for lack of room (ENOSPC, EDQUOT).
result<void> pwrite_all(int fd, const std::byte* data, std::size_t size, std::uint64_t offset, const fs::path& path,
                        bool& out_of_space) {
    while (size > 0) {
        const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            out_of_space = no_room(errno);
            return errno_error("cannot write the download spool", path, errno);
        }
        data += n;
        size -= static_cast<std::size_t>(n);
        offset += static_cast<std::uint64_t>(n);
    }
    return {};
}

result<std::size_t> pread_some(int fd, std::byte* data, std::size_t size, std::uint64_t offset, const fs::path& path) {
    for (;;) {
        const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno_error("cannot read the download spool", path, errno);
        if (n == 0)
            return make_error(error_code::filesystem, "the download spool is shorter than recorded")
                .with_path(path.string());
        return static_cast<std::size_t>(n);
    }
}

// A .part of ours: a regular file, one link, our uid. Anything else at the
// name (a planted symlink, a hard link to someone's file) is unlinked and
// replaced by a new file (O_EXCL|O_NOFOLLOW): never followed, never reused.
result<unique_fd> open_part_file(const fs::path& path, bool& fresh) {
    fresh = false;
    unique_fd fd(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (fd) {
        struct stat st {};
        if (::fstat(fd.get(), &st) != 0) return errno_error("cannot stat the download spool", path, errno);
        if (S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == ::geteuid()) {
            ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
            return fd;
        }
        fd.reset();
    } else if (errno != ENOENT && errno != ELOOP && errno != ENXIO && errno != EWOULDBLOCK) {
        return errno_error("cannot open the download spool", path, errno);
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
        return errno_error("cannot replace the download spool", path, errno);
    fd.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd) return errno_error("cannot create the download spool", path, errno);
    fresh = true;
    return fd;
}

// Hands the spool's bytes [from, to) to on_data in order, through `buffer`
// (allocated on first use).
result<void> deliver_spooled(int fd, const fs::path& path, std::uint64_t from, std::uint64_t to,
                             download_callbacks& callbacks, std::unique_ptr<std::byte[]>& buffer) {
    if (!buffer) buffer = std::make_unique_for_overwrite<std::byte[]>(kReadBlock);
    while (from < to) {
        const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(to - from, kReadBlock));
        REDIST_TRY(const std::size_t got, pread_some(fd, buffer.get(), want, from, path));
        if (callbacks.on_data) REDIST_TRY_VOID(callbacks.on_data(buffer.get(), got));
        from += got;
    }
    return {};
}

// The file changed under a download: the spool is emptied, and so is its
// resume record, which would claim bytes no longer there (a ranged run
// keeps an empty one: its bytes are out of order; one stream's are not),
// and the caller is told to start over by a second on_response (partial = false).
result<void> empty_spool(int fd, const fs::path& path, const fs::path& part_file, std::uint64_t expected_size,
                         download_callbacks& callbacks, bool ranged) {
    if (fd >= 0 && ::ftruncate(fd, 0) != 0) return errno_error("cannot truncate the download spool", path, errno);
    if (!part_file.empty() && ranged)
        REDIST_TRY_VOID(atomic_write(segment_record_path(part_file), segment_record_to_text({expected_size, {}}),
                                     durability::none));
    if (!part_file.empty() && !ranged) remove_segment_record(part_file);
    response_info whole;
    whole.content_length = expected_size > 0 ? static_cast<std::int64_t>(expected_size) : -1;
    return callbacks.on_response ? callbacks.on_response(whole) : result<void>{};
}

// After a failed request (`failures` in a row without progress): how long to
// wait before the next one, or nullopt to give up. Only network and not_found
// failures are retried, and only when the caller's hook says so.
std::optional<std::chrono::milliseconds> retry_delay(const segment_retry_hook& retry, int failures, const error& e,
                                                     const transfer_failure_info& info) {
    if ((e.code != error_code::network && e.code != error_code::not_found) || !retry) return std::nullopt;
    return retry(failures, e, info);
}

// Byte ranges already in a .part, from its record or (no record) its size;
// nullopt: start over (the .part and its record are not to be trusted).
std::optional<segment_record> present_ranges(int fd, const fs::path& part, std::uint64_t expected_size) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return std::nullopt;
    const auto file_size = static_cast<std::uint64_t>(st.st_size);
    const fs::path record = segment_record_path(part);
    struct stat rst {};
    if (::lstat(record.c_str(), &rst) != 0 && errno == ENOENT) {
        // No record: a sequentially written .part (one stream, or an older redist).
        if (expected_size != 0 && file_size > expected_size) return std::nullopt;
        segment_record sequential{expected_size, {}};
        if (file_size > 0) sequential.ranges.emplace_back(0, file_size);
        return sequential;
    }
    // Not a symlink, not a FIFO, at most 64 KiB: else unreadable, and we start over.
    auto text = read_file(record, kMaxRecordBytes, follow_links::no);
    if (!text.ok()) return std::nullopt;
    auto parsed = parse_segment_record(*text, record.string());
    if (!parsed.ok() || parsed->size != expected_size || expected_size == 0 ||
        (!parsed->ranges.empty() && parsed->ranges.back().second > file_size))
        return std::nullopt;  // a record we did not write, or for another file: trust nothing
    return std::move(parsed).value();
}

// ---- the checks every response passes -------------------------------------------
// One place for them: each request (one stream or a range).

// The version of the file a response's body belongs to: its ETag, else its
// Last-Modified; empty when the server sends neither.
std::string response_version(const response_info& r) { return !r.etag.empty() ? r.etag : r.last_modified; }

// Bytes of version `kept` cannot be joined by a response of version `now`:
// both are known and differ (the file changed between two requests).
bool versions_differ(std::string_view kept, std::string_view now) {
    return !kept.empty() && !now.empty() && kept != now;
}

// A response that announces another body size than the `expected_body`
// bytes asked for is wrong bytes, refused before its body is read.
// Outcomes: ok (no Content-Length, or that one) | integrity.
result<void> check_content_length(const response_info& r, std::uint64_t expected_body, const std::string& url) {
    if (r.content_length < 0 || static_cast<std::uint64_t>(r.content_length) == expected_body) return {};
    return make_error(error_code::integrity, "size mismatch: Content-Length disagrees with the manifest's size")
        .with_url(sanitize_url(url))
        .with_expected_actual(std::to_string(expected_body), std::to_string(r.content_length));
}

// ---- shared state of one segmented download ----------------------------------

struct chunk {
    std::uint64_t start = 0;
    std::uint64_t end = 0;   // exclusive
    std::uint64_t done = 0;  // bytes written from start
    enum class state : std::uint8_t { pending, active, done } st = state::pending;
    int failures = 0;  // in a row, without progress
    clock_type::time_point not_before{};
};

// Chunks covering [from, size): already-present ranges become done chunks,
// the gaps are cut into pieces of about offset / connections bytes.
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
        std::uint64_t end = x + std::clamp(x / n, lo, hi);
        if (r < present.ranges.size()) end = std::min(end, present.ranges[r].first);
        end = std::min(end, size);
        if (size - end < lo / 2) end = size;  // no tiny last chunk
        out.push_back({.start = x, .end = end});
        x = end;
    }
    return out;
}

class segmented_run {
public:
    segmented_run(const std::string& url, std::uint64_t size, const transfer_options& transfer, int fd,
                  fs::path spool_path, fs::path part_file, std::vector<chunk> chunks, const segment_retry_hook& retry)
        : url_(url),
          size_(size),
          transfer_(transfer),
          fd_(fd),
          spool_path_(std::move(spool_path)),
          part_file_(std::move(part_file)),
          chunks_(std::move(chunks)),
          retry_(retry) {}

    // Delivers [delivered, size) in order. Returns with `delivered` at the
    // size (ok), or where it stopped (error, or fallback() true).
    result<void> run(int connections, std::uint64_t& delivered, download_callbacks& callbacks, segmented_stats& stats,
                     transfer_failure_info* failure);
    bool fallback() const { return fallback_; }
    // A write to the spool failed for lack of room (see spool_location::temp_dir).
    bool spool_full() const { return spool_full_; }
    // The server ignored the first request's Range and its 200 body became
    // the one stream (no second request; no byte sent twice).
    bool whole_stream() const { return whole_stream_; }
    // A response came from another version of the file than the bytes so far.
    bool changed() const { return changed_; }

private:
    void worker();
    chunk* take();
    void fetch(chunk& c);
    void settle(chunk& c, result<void> outcome, const transfer_failure_info& info, bool progressed, bool range_ignored);
    std::uint64_t contiguous_end();  // lock held
    segment_record snapshot();       // lock held
    // Rewrites the resume record when it is due (see kRecordStep), or always
    // when `force`; data first (written), then the record.
    void record_progress(bool force);
    bool record_due() const;  // lock held
    void stop_all();
    std::unique_ptr<std::byte[]> buffer_;  // deliver_spooled()'s

    const std::string& url_;
    std::uint64_t size_;
    const transfer_options& transfer_;
    int fd_;
    fs::path spool_path_;
    fs::path part_file_;
    std::vector<chunk> chunks_;
    const segment_retry_hook& retry_;

    std::mutex mutex_;
    std::condition_variable work_cv_;      // workers: a chunk became takeable, or stop
    std::condition_variable progress_cv_;  // the caller's thread: bytes arrived, or stop
    std::atomic<bool> stop_{false};
    std::atomic<bool> spool_full_{false};
    std::size_t head_ = 0;  // first chunk not done
    bool fallback_ = false;
    // One request goes first; the other connections open only once it was
    // answered with a 206 (ranges_confirmed_). A 200 instead turns that
    // request into the whole download (whole_stream_).
    bool ranges_confirmed_ = false;
    bool whole_stream_ = false;
    bool changed_ = false;
    std::optional<error> fatal_;
    transfer_failure_info fatal_info_;
    std::string validator_;     // ETag (else Last-Modified) of the first response
    std::size_t finished_ = 0;  // chunks done by this run
    int requests_ = 0;
    int retries_ = 0;
    std::uint64_t received_ = 0;
    // The record: one writer at a time (record_mutex_); the rest under mutex_.
    std::mutex record_mutex_;
    std::uint64_t unrecorded_ = 0;  // bytes written since the last snapshot recorded
    std::size_t recorded_finished_ = 0;
    clock_type::time_point last_record_ = clock_type::now();
};

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

void segmented_run::record_progress(bool force) {
    if (part_file_.empty()) return;
    {
        std::lock_guard lock(mutex_);
        if (!force && !record_due()) return;
    }
    // A writer that finds the step reached waits here while another writes
    // the record: this is what bounds the bytes a record lags behind.
    std::lock_guard serial(record_mutex_);
    segment_record record;
    {
        std::lock_guard lock(mutex_);
        if (!force && !record_due()) return;  // written meanwhile
        record = snapshot();
        unrecorded_ = 0;
        recorded_finished_ = finished_;
        last_record_ = clock_type::now();
    }
    // Every byte the snapshot counts was written (pwrite) before it was
    // counted, so a killed process's record never claims bytes it did not
    // write. No fdatasync (one per 4 MiB on the download's path): after a
    // power loss a record that claims lost bytes only makes the resumed hash
    // fail, which drops the .part and fetches the archive again in the same
    // run (artifact_stream).
    (void)atomic_write(segment_record_path(part_file_), segment_record_to_text(record), durability::none);
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
        const bool finished_unrecorded = finished_ != recorded_finished_;
        lock.unlock();
        if (finished_unrecorded) record_progress(false);
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

// ---- one stream ----------------------------------------------------------------

struct single_stream {
    const std::string& url;
    std::uint64_t expected_size;  // 0: unknown
    const transfer_options& transfer;
    int fd;  // -1: no spool
    const fs::path& spool_path;
    download_callbacks& callbacks;
    bool& responded;                   // the caller's on_response has been called
    std::uint64_t delivered = 0;       // handed to on_data (or held by the consumer)
    std::uint64_t spooled = 0;         // contiguous bytes written to the spool; without one, = delivered
    bool spool_full = false;           // a write failed for lack of room
    std::string validator{};           // ETag (else Last-Modified) of the response the bytes so far started with
    fs::path part_file{};              // the spool's resume record goes with it (empty: a temp spool)
    bool changed = false;              // the last attempt found the file changed (start_over)
    std::vector<std::byte> pending{};  // delivered, not yet written: spooled + pending.size() == delivered
    clock_type::time_point last_write{};
    // A write failed for lack of room: true when the .part was given up
    // (spool_location::temp_dir) and the stream goes on without a spool.
    std::function<bool(const error& why)> give_up{};

    result<void> attempt(segmented_stats& stats, transfer_failure_info& info);
    result<void> accept(const response_info& r, std::uint64_t& skip);
    result<void> take(const std::byte* data, std::size_t n, segmented_stats& stats);
    result<void> write(const std::byte* data, std::size_t n);
    result<void> flush();
    result<void> deliver_spooled();
    result<void> start_over();
};

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
    REDIST_TRY_VOID(redist::deliver_spooled(fd, spool_path, delivered, spooled, callbacks, buffer));
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
    return callbacks.on_data ? callbacks.on_data(data, n) : result<void>{};
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
    auto outcome = download(url, transfer, cb, spooled, &info);
    // Before any return: a resumable spool holds every byte delivered, and
    // the next request starts after them. A failed write wins: it is not
    // the source's, and the spool is behind what the consumer has.
    if (auto flushed = flush(); !flushed.ok()) return flushed;
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

// Decimal digits only, no leading zero, at most 19 of them (no overflow).
bool parse_u64(std::string_view text, std::uint64_t& out) {
    if (text.empty() || text.size() > 19 || (text.size() > 1 && text.front() == '0')) return false;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

// ---- the record ------------------------------------------------------------------

fs::path segment_record_path(const fs::path& part_file) {
    fs::path p = part_file;
    p += ".segments";
    return p;
}

void remove_segment_record(const fs::path& part_file) noexcept {
    std::error_code ignored;
    const fs::path record = segment_record_path(part_file);
    fs::remove(record, ignored);
    // A run killed while it rewrote the record left its atomic_write temp
    // ("<record>.tmp.<random>"). The caller holds the blob's lock, so no live
    // process is writing one. Names are matched exactly and unlinked, never
    // followed.
    const std::string record_name = record.filename().string();
    for (fs::directory_iterator it(record.parent_path(), ignored), end; !ignored && it != end; it.increment(ignored)) {
        if (is_atomic_write_temp_of(it->path().filename().string(), record_name)) {
            std::error_code also_ignored;
            fs::remove(it->path(), also_ignored);
        }
    }
}

std::string segment_record_to_text(const segment_record& record) {
    std::string out(kRecordMagic);
    out += "\nsize " + std::to_string(record.size) + "\n";
    for (const auto& [a, b] : record.ranges) out += std::to_string(a) + " " + std::to_string(b) + "\n";
    return out;
}

result<segment_record> parse_segment_record(std::string_view text, std::string_view what) {
    const auto bad = [&](const std::string& why) {
        return make_error(error_code::bad_manifest, "bad download record: " + why).with_path(std::string(what));
    };
    if (text.size() > kMaxRecordBytes) return bad("larger than 64 KiB");
    std::vector<std::string_view> lines;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        if (nl == std::string_view::npos) return bad("the last line has no newline");
        lines.push_back(text.substr(0, nl));
        text.remove_prefix(nl + 1);
    }
    if (lines.size() < 2 || lines[0] != kRecordMagic) return bad("not a redist-segments 1 record");
    segment_record r;
    if (!lines[1].starts_with("size ") || !parse_u64(lines[1].substr(5), r.size) || r.size == 0)
        return bad("line 2: expected 'size N' with N > 0");
    if (lines.size() - 2 > kMaxRecordRanges) return bad("more than 4096 ranges");
    for (std::size_t i = 2; i < lines.size(); ++i) {
        const auto sp = lines[i].find(' ');
        std::uint64_t a = 0;
        std::uint64_t b = 0;
        const std::string where = "line " + std::to_string(i + 1) + ": ";
        if (sp == std::string_view::npos || !parse_u64(lines[i].substr(0, sp), a) ||
            !parse_u64(lines[i].substr(sp + 1), b))
            return bad(where + "expected 'FIRST END'");
        if (a >= b || b > r.size) return bad(where + "empty range, or beyond the size");
        if (!r.ranges.empty() && a <= r.ranges.back().second) return bad(where + "ranges must be sorted and apart");
        r.ranges.emplace_back(a, b);
    }
    return r;
}

// ---- the entry point ----------------------------------------------------------------

namespace {

struct opened_spool {
    unique_fd fd;
    fs::path path;           // for messages
    fs::path part_file;      // empty: a temp spool (no record)
    segment_record present;  // ranges already there
};

// An unlinked temp file in `dir` (no record, no resume).
result<void> open_temp(opened_spool& s, const fs::path& dir) {
    s.path = dir;
    s.part_file.clear();
    s.fd.reset(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
    if (s.fd) return {};
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
        return errno_error("cannot create a temporary download spool in", dir, errno);
    // No O_TMPFILE on this filesystem: a named file, unlinked at once.
    std::string name = (dir / "redist-spool.XXXXXX").string();
    s.fd.reset(::mkostemp(name.data(), O_CLOEXEC));
    if (!s.fd) return errno_error("cannot create a temporary download spool in", dir, errno);
    ::unlink(name.c_str());
    return {};
}

std::uint64_t present_bytes(const segment_record& r) {
    std::uint64_t n = 0;
    for (const auto& [a, b] : r.ranges) n += b - a;
    return n;
}

// Gives up the cache's .part (removed with its record: a cache that cannot
// hold the download would only fill up again), telling the caller why: a
// split download goes on in a temp spool in spool.temp_dir, one stream
// without a spool. The caller continues from the bytes it has already been given.
result<void> give_up_part(opened_spool& s, const spool_location& spool, const error& why, bool ranged) {
    s.fd.reset();
    ::unlink(spool.part_file.c_str());
    remove_segment_record(spool.part_file);
    s.part_file.clear();
    s.path.clear();
    if (ranged) REDIST_TRY_VOID(open_temp(s, spool.temp_dir));
    s.present.ranges.clear();
    if (spool.on_fallback) spool.on_fallback(why);
    return {};
}

// The .part's filesystem has less room than the bytes still missing:
// the reason to give it up at once, or nullopt.
std::optional<error> lacks_room(const opened_spool& s, std::uint64_t expected_size) {
    struct statvfs vfs {};
    if (expected_size == 0 || ::fstatvfs(s.fd.get(), &vfs) != 0) return std::nullopt;
    const std::uint64_t missing = expected_size - std::min(expected_size, present_bytes(s.present));
    const auto room = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (room >= missing) return std::nullopt;
    return make_error(error_code::filesystem, "the cache has " + std::to_string(room) +
                                                  " bytes free, the download needs " + std::to_string(missing))
        .with_path(s.path.string());
}

// The spool: the .part, else (a split download) a temp file, else none.
result<opened_spool> open_spool(const spool_location& spool, std::uint64_t expected_size, bool ranged) {
    opened_spool s;
    s.present.size = expected_size;
    if (spool.part_file.empty()) {
        if (ranged && !spool.temp_dir.empty()) REDIST_TRY_VOID(open_temp(s, spool.temp_dir));
        return s;
    }
    s.path = spool.part_file;
    s.part_file = spool.part_file;
    bool fresh = false;
    REDIST_TRY(s.fd, open_part_file(spool.part_file, fresh));
    if (fresh) {
        remove_segment_record(spool.part_file);
    } else if (auto present = present_ranges(s.fd.get(), spool.part_file, expected_size)) {
        s.present = std::move(*present);
    } else {
        remove_segment_record(spool.part_file);
        if (::ftruncate(s.fd.get(), 0) != 0) return errno_error("cannot truncate the download spool", s.path, errno);
    }
    if (!spool.temp_dir.empty()) {
        if (auto why = lacks_room(s, expected_size)) REDIST_TRY_VOID(give_up_part(s, spool, *why, ranged));
    }
    return s;
}

std::uint64_t prefix_of(const segment_record& r) {
    return !r.ranges.empty() && r.ranges.front().first == 0 ? r.ranges.front().second : 0;
}

// A write to the cache's .part failed for lack of room, and there is a temp_dir to go on in.
bool can_fall_back(const opened_spool& s, const spool_location& spool, bool spool_full) {
    return spool_full && !s.part_file.empty() && !spool.temp_dir.empty();
}

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
                          plan_chunks(delivered, expected_size, s.present, segments), retry);
        auto outcome = run.run(segments.connections, delivered, callbacks, stats, failure);
        if (!outcome.ok() && run.changed()) {
            // From byte 0 again, on the same source (see single_stream::start_over).
            REDIST_TRY_VOID(empty_spool(s.fd.get(), s.path, s.part_file, expected_size, callbacks, true));
            s.present.ranges.clear();
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

std::uint64_t resumable_bytes(const fs::path& part_file, std::uint64_t expected_size) noexcept {
    // As open_part_file would keep it: a regular file with one link, ours.
    const unique_fd fd(::open(part_file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != ::geteuid())
        return 0;
    try {
        const auto present = present_ranges(fd.get(), part_file, expected_size);
        return present ? present_bytes(*present) : 0;
    } catch (...) {  // allocation: a report, never a failure
        return 0;
    }
}

result<segmented_stats> segmented_download(const std::string& url, std::uint64_t expected_size,
                                           const transfer_options& transfer, const segment_options& segments,
                                           const spool_location& spool, download_callbacks& callbacks,
                                           const segment_retry_hook& retry, transfer_failure_info* failure) {
    if (failure != nullptr) *failure = {};
    // A local file (file://, an image layout) is read in one stream, not in ranges.
    const bool may_split = !is_local_url(url) && segments.connections > 1 && expected_size > 0 &&
                           expected_size >= segments.min_total_bytes;
    REDIST_TRY(opened_spool s, open_spool(spool, expected_size, may_split));
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

    if (may_split && s.fd && one.spooled < expected_size) {
        stats.segmented = true;
        if (!s.part_file.empty()) {
            // Before the first out-of-order byte: from now on the .part's
            // size says nothing; the record does.
            REDIST_TRY_VOID(
                atomic_write(segment_record_path(s.part_file), segment_record_to_text(s.present), durability::none));
        }
        responded = true;
        response_info whole;
        whole.status = 206;
        whole.content_length = static_cast<std::int64_t>(expected_size);
        if (callbacks.on_response) REDIST_TRY_VOID(callbacks.on_response(whole));
        REDIST_TRY(const bool ranges_ignored, run_segments(url, expected_size, transfer, segments, spool, s, one,
                                                           callbacks, retry, failure, stats));
        one.fd = s.fd.get();
        one.part_file = s.part_file;
        if (!ranges_ignored) {
            if (!s.part_file.empty()) remove_segment_record(s.part_file);
            return stats;
        }
        // The server ignores ranges: one stream from what the caller has.
    }
    // A .part that fills up is given up where the write failed: the stream
    // goes on in the same request, without a spool.
    one.give_up = [&](const error& why) {
        if (!can_fall_back(s, spool, true)) return false;
        (void)give_up_part(s, spool, why, false);  // cannot fail: no temp spool to open
        return true;
    };
    REDIST_TRY_VOID(run_single_stream(one, retry, stats, failure));
    if (!s.part_file.empty()) remove_segment_record(s.part_file);
    return stats;
}

}  // namespace redist
