// The one source driver. See sources.hpp.
#include "transport/sources.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include "redist/cache.hpp"
#include "redist/urls.hpp"
#include "store/cache_file.hpp"
#include "support/debug_pause.hpp"
#include "support/stopwatch.hpp"

namespace redist {

namespace {

// Per-thread generator, seeded per process and thread, so that many clients
// retrying the same server do not retry in lockstep.
double default_jitter() {
    static thread_local std::minstd_rand rng(
        static_cast<unsigned>(::getpid()) ^
        static_cast<unsigned>(std::hash<std::thread::id>{}(std::this_thread::get_id())));
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

bool moves_on(error_code code) {
    return code == error_code::network || code == error_code::not_found || code == error_code::integrity;
}

std::chrono::milliseconds to_ms(double seconds) {
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000.0)));
}

// The error to report when every source failed: an integrity failure
// (somebody served wrong bytes) or not-found says more than a later
// transient one. Keeps the better of `kept` and `e`.
void remember_failure(std::optional<error>& kept, error e) {
    const auto rank = [](error_code c) {
        return c == error_code::integrity ? 3 : c == error_code::network ? 2 : c == error_code::not_found ? 1 : 4;
    };
    if (!kept || rank(e.code) >= rank(kept->code)) kept = std::move(e);
}

}  // namespace

retry_policy::retry_policy(const source_policy& sources, jitter_source jitter)
    : attempts_(std::max(1, sources.attempts_per_source)),
      initial_(std::max(0.0, sources.initial_backoff_seconds)),
      max_backoff_(std::max(0.0, sources.max_backoff_seconds)),
      max_retry_after_(sources.max_retry_after_seconds),
      jitter_(jitter ? std::move(jitter) : jitter_source(default_jitter)) {}

retry_decision retry_policy::next(int attempt, const attempt_failure& failure) const {
    using action = retry_decision::action;
    if (!moves_on(failure.code)) return {action::fail, {}};
    const bool retryable = failure.code == error_code::network && failure.transient && attempt < attempts_;
    if (!retryable) return {action::next_source, {}};
    if (failure.retry_after_seconds) {
        // Honoured as given, but a server asking for a long pause is a
        // server to leave: another source may answer now.
        if (*failure.retry_after_seconds > max_retry_after_) return {action::next_source, {}};
        return {action::retry, to_ms(static_cast<double>(std::max(0L, *failure.retry_after_seconds)))};
    }
    double seconds = initial_ * std::ldexp(1.0, std::min(std::max(attempt, 1) - 1, 30));
    seconds = std::min(seconds, max_backoff_);
    const double j = std::clamp(jitter_(), 0.0, 1.0);
    seconds *= 0.5 + 0.5 * j;
    return {action::retry, to_ms(seconds)};
}

// ---- source_health -----------------------------------------------------------------------

std::shared_ptr<source_health> make_source_health() { return std::make_shared<source_health>(); }

std::optional<error> source_health::skipped(const std::string& url) const {
    const std::string origin = url_origin(url);
    if (origin.empty()) return std::nullopt;
    std::lock_guard lock(mutex_);
    const auto it = sources_.find(origin);
    return it == sources_.end() ? std::nullopt : it->second.skipped;
}

bool source_health::failed(const std::string& url, const error& why) {
    const std::string origin = url_origin(url);
    if (origin.empty()) return false;
    std::lock_guard lock(mutex_);
    entry& e = sources_[origin];
    if (e.skipped) return false;
    if (++e.failures < limit_) return false;
    e.skipped = make_error(error_code::network, "skipped for the rest of this run after " + std::to_string(e.failures) +
                                                    " failures in a row: " + why.message);
    return true;
}

void source_health::answered(const std::string& url) {
    const std::string origin = url_origin(url);
    if (origin.empty()) return;
    std::lock_guard lock(mutex_);
    const auto it = sources_.find(origin);
    if (it != sources_.end() && !it->second.skipped) it->second.failures = 0;
}

source_run::source_run(const source_policy& sources)
    : policy(sources), health(sources.health), offline(sources.offline) {
    for (const auto& m : sources.mirrors) mirrors.push_back(to_url(m));
}

bool source_run::is_mirror(std::string_view url) const {
    return std::any_of(mirrors.begin(), mirrors.end(), [&](const std::string& m) {
        // A mirror's URLs lie under it: "<mirror>/<product>/...".
        return !m.empty() && url.starts_with(m) && (url.size() == m.size() || m.back() == '/' || url[m.size()] == '/');
    });
}

namespace {

void notify_retry(const source_run& run, const std::string& url, const error& e, int next_attempt,
                  const retry_decision& d, bool retry_after) {
    if (!run.observer) return;
    run.observer->on_retry({.component = run.component,
                            .url = sanitize_url(url),
                            .reason = e,
                            .next_attempt = next_attempt,
                            .attempts = run.policy.attempts_per_source(),
                            .delay_seconds = std::chrono::duration<double>(d.delay).count(),
                            .retry_after = retry_after});
}

void notify_source_change(const source_run& run, const std::vector<source>& sources, std::size_t from,
                          const std::optional<error>& why) {
    if (!run.observer || from + 1 >= sources.size()) return;
    run.observer->on_source_change({.component = run.component,
                                    .from_url = sanitize_url(sources[from].url()),
                                    .to_url = sanitize_url(sources[from + 1].url()),
                                    .reason = why.value_or(error{})});
}

void notify_skip(const source_run& run, const std::string& url, const error& e) {
    if (!run.observer) return;
    run.observer->on_source_skip(
        {.source = url_origin(url), .failures = run.health ? run.health->limit() : 0, .reason = e});
}

enum class source_result : std::uint8_t { ok, next, fail };

// The attempts on one source. Leaves the failure to report in `last`.
source_result attempts_on(const source& from, std::size_t index, const source_run& run, const attempt_function& attempt,
                          std::optional<error>& last, int& requests) {
    const std::string& url = from.url();
    for (int n = 1;; ++n) {
        source_attempt a{from, index, n, {}};
        ++requests;
        auto done = attempt(a);
        if (done.ok()) {
            if (run.health) run.health->answered(url);
            return source_result::ok;
        }
        error e = std::move(done).error_value();
        // An attempt that retried inside decided on (and reported) its retries: none here.
        const retry_decision d = a.retried_inside ? run.policy.next(n, {e.code, false, std::nullopt})
                                                  : decide_retry(run, url, n, e, a.failure);
        if (d.what == retry_decision::action::fail) {
            last = std::move(e);
            return source_result::fail;
        }
        remember_failure(last, std::move(e));
        if (d.what == retry_decision::action::next_source) return source_result::next;
        if (run.sleep) run.sleep(d.delay);
        else std::this_thread::sleep_for(d.delay);
    }
}

}  // namespace

retry_decision decide_retry(const source_run& run, const std::string& url, int attempt, const error& e,
                            const transfer_failure_info& failure) {
    retry_decision d = run.policy.next(attempt, {e.code, failure.transient, failure.retry_after_seconds});
    if (run.health && run.is_mirror(url)) {
        if (failure.unreachable && e.code == error_code::network) {
            if (run.health->failed(url, e)) notify_skip(run, url, e);
        } else if (failure.http_status != 0) {
            run.health->answered(url);  // it answered, if not with the file
        }
        if (d.what == retry_decision::action::retry && run.health->skipped(url))
            d = {retry_decision::action::next_source, {}};
    }
    if (d.what == retry_decision::action::retry)
        notify_retry(run, url, e, attempt + 1, d, failure.retry_after_seconds.has_value());
    return d;
}

segment_retry_hook segment_retries(const source_run& run, const std::string& url, int* requests) {
    return [&run, url, requests](int attempt, const error& e,
                                 const transfer_failure_info& failure) -> std::optional<std::chrono::milliseconds> {
        const retry_decision d = decide_retry(run, url, attempt, e, failure);
        if (d.what != retry_decision::action::retry) return std::nullopt;
        if (requests != nullptr) ++*requests;
        return d.delay;
    };
}

result<sources_outcome> try_sources(const std::vector<source>& sources, const source_run& run,
                                    const attempt_function& attempt, int* requests) {
    std::optional<error> last;
    int made = 0;
    const auto count = [&] {
        if (requests) *requests += made;
    };
    for (std::size_t i = 0; i < sources.size(); ++i) {
        const std::string& url = sources[i].url();
        if (offline_skips(sources[i], run.offline)) {
            remember_failure(
                last, make_error(error_code::not_found, "offline, and not in the cache").with_url(sanitize_url(url)));
            continue;
        }
        if (auto skipped = run.health && run.is_mirror(url) ? run.health->skipped(url) : std::nullopt) {
            remember_failure(last, std::move(*skipped).with_url(sanitize_url(url)));
            continue;
        }
        std::optional<error> here;
        const source_result r = attempts_on(sources[i], i, run, attempt, here, made);
        if (r == source_result::ok) {
            count();
            return sources_outcome{i, made};
        }
        if (r == source_result::fail) {
            count();
            return std::move(*here);
        }
        notify_source_change(run, sources, i, here);
        remember_failure(last, std::move(*here));
    }
    count();
    if (!last) return make_error(error_code::not_found, "no source to try");
    return std::move(*last);
}

// ---- file_sink -------------------------------------------------------------------------

namespace {

std::filesystem::path part_name(const std::filesystem::path& final_path, long pid) {
    return std::filesystem::path(final_path.string() + ".part." + std::to_string(pid));
}

// The pid of "<final name>.part.<pid>" (prefix: "<final name>.part."), or -1.
long part_pid(const std::string& name, const std::string& prefix) {
    return name.starts_with(prefix) && name.find(".part.", prefix.size()) == std::string::npos ? part_file_pid(name)
                                                                                               : -1;
}

bool process_is_gone(long pid) { return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

file_sink::file_sink(std::filesystem::path final_path)
    : final_(std::move(final_path)), part_(part_name(final_, static_cast<long>(::getpid()))) {}

file_sink::~file_sink() = default;

result<void> file_sink::restart() {
    fd_.reset();
    // O_NOFOLLOW: the mirror directory is ours, but never write through a link.
    fd_ = unique_fd(::open(part_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd_) return errno_error("cannot create", part_, errno);
    return {};
}

result<void> file_sink::write(const std::byte* data, std::size_t size) {
    if (!fd_) return make_error(error_code::internal, "file_sink written before restart").with_path(part_.string());
    return write_all(fd_.get(), data, size, part_);
}

std::optional<std::filesystem::path> file_sink::held_bytes(std::uint64_t max_size) {
    // A dead process's .part of the same file becomes ours (rename is atomic:
    // of two processes adopting it, one wins); the others of dead processes
    // are removed. A live process's .part is left alone.
    std::error_code ec;
    const std::string prefix = final_.filename().string() + ".part.";
    std::optional<std::filesystem::path> adopted;
    for (const auto& entry : std::filesystem::directory_iterator(final_.parent_path(), ec)) {
        const long pid = part_pid(entry.path().filename().string(), prefix);
        if (pid < 0 || entry.path() == part_ || !process_is_gone(pid)) continue;
        struct stat st {};
        const bool usable = !adopted && ::lstat(entry.path().c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
                            st.st_size > 0 && static_cast<std::uint64_t>(st.st_size) <= max_size;
        if (usable && ::rename(entry.path().c_str(), part_.c_str()) == 0) {
            adopted = part_;
            continue;
        }
        std::error_code rm;
        std::filesystem::remove(entry.path(), rm);
    }
    if (!adopted) return std::nullopt;
    fd_ = unique_fd(::open(part_.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC));
    if (!fd_) return std::nullopt;
    return adopted;
}

result<void> file_sink::commit() {
    // Without fsync a power loss after the rename could leave a short file
    // under the final name, which is exactly what must not happen.
    if (::fsync(fd_.get()) != 0) return errno_error("cannot sync", part_, errno);
    REDIST_TRY_VOID(fd_.close(part_));
    if (::rename(part_.c_str(), final_.c_str()) != 0) return errno_error("cannot rename into place", final_, errno);
    return {};
}

void file_sink::discard() noexcept {
    fd_.reset();
    ::unlink(part_.c_str());
}

// ---- artifact_stream ---------------------------------------------------------------------

// SHA-256 on the transfer thread, besides the hand-off to the unpacker,
// capped a loopback download near 500 MiB/s on 16 cores. With cores to
// spare, the transfer thread only copies each piece here, and this worker
// hashes it, in order, while the unpacker decodes. Bounded: the transfer
// waits while kQueueBytes are queued.
class artifact_stream::hash_worker {
public:
    static constexpr std::size_t kQueueBytes = 2u << 20;
    static constexpr std::size_t kPiece = 1u << 20;
    // Worth a thread: an archive this large, in a run with this many threads.
    static constexpr std::uint64_t kMinSize = 8u << 20;
    static constexpr unsigned kMinCores = 4;

    explicit hash_worker(std::function<void(const std::byte*, std::size_t)> work) : work_(std::move(work)) {
        thread_ = std::thread([this] { run(); });
    }
    hash_worker(const hash_worker&) = delete;
    hash_worker& operator=(const hash_worker&) = delete;
    ~hash_worker() {
        {
            std::lock_guard lock(mutex_);
            stop_ = true;
        }
        work_ready_.notify_all();
        thread_.join();
    }

    void push(const std::byte* data, std::size_t size) {
        std::unique_lock lock(mutex_);
        while (size > 0) {
            room_.wait(lock, [&] { return queued_ < kQueueBytes; });
            if (queue_.empty() || queue_.back().size() >= kPiece) {
                queue_.emplace_back();
                if (!spares_.empty()) {
                    queue_.back().swap(spares_.back());
                    spares_.pop_back();
                }
                queue_.back().clear();
                queue_.back().reserve(kPiece);
            }
            auto& back = queue_.back();
            const std::size_t n = std::min(size, kPiece - back.size());
            back.insert(back.end(), data, data + n);
            queued_ += n;
            data += n;
            size -= n;
            work_ready_.notify_one();
        }
    }

    // Returns once every byte pushed so far has been hashed.
    void settle() {
        std::unique_lock lock(mutex_);
        idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
    }

private:
    void run() {
        std::unique_lock lock(mutex_);
        for (;;) {
            work_ready_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping
            std::vector<std::byte> piece = std::move(queue_.front());
            queue_.pop_front();
            busy_ = true;
            lock.unlock();
            work_(piece.data(), piece.size());
            lock.lock();
            busy_ = false;
            queued_ -= piece.size();
            if (spares_.size() < 2) spares_.push_back(std::move(piece));
            room_.notify_all();
            if (queue_.empty()) idle_.notify_all();
        }
    }

    std::function<void(const std::byte*, std::size_t)> work_;
    std::mutex mutex_;
    std::condition_variable work_ready_;
    std::condition_variable room_;
    std::condition_variable idle_;
    std::deque<std::vector<std::byte>> queue_;
    std::vector<std::vector<std::byte>> spares_;
    std::size_t queued_ = 0;
    bool busy_ = false;
    bool stop_ = false;
    std::thread thread_;
};

artifact_stream::artifact_stream(expected_artifact expected, byte_sink& sink, unsigned threads)
    : expected_(std::move(expected)), sink_(sink) {
    // REDIST_HASH_THREAD=1/0 forces the choice (tests exercise both on any machine).
    const char* forced = REDIST_TEST_OVERRIDE("REDIST_HASH_THREAD");
    const bool wanted = !expected_.checked_by_content && (forced && *forced ? std::string_view(forced) != "0"
                                                                            : expected_.size >= hash_worker::kMinSize &&
                                                                                  threads >= hash_worker::kMinCores);
    if (wanted) {
        try {
            hash_worker_ = std::make_unique<hash_worker>(
                [this](const std::byte* data, std::size_t size) { hash(data, size); });
        } catch (const std::system_error&) {  // NOLINT(bugprone-empty-catch): no thread, hash inline
        }
    }
}

artifact_stream::~artifact_stream() = default;

void artifact_stream::settle() {
    if (hash_worker_) hash_worker_->settle();
}

void artifact_stream::hash(const std::byte* data, std::size_t size) {
    const auto started = std::chrono::steady_clock::now();
    hasher_.update(data, size);
    hash_ns_ += ns_since(started);
}

result<void> artifact_stream::restart() {
    settle();
    REDIST_TRY_VOID(sink_.restart());
    hasher_ = sha256_hasher();
    received_ = 0;
    verified_ = false;
    resumed_ = false;
    paused_mid_download_ = false;
    return {};
}

result<bool> artifact_stream::resume_or_restart() {
    settle();
    if (auto held = sink_.held_bytes(expected_.size)) {
        hasher_ = sha256_hasher();
        received_ = 0;
        verified_ = false;
        if (replay(*held, /*into_sink=*/false).ok()) {
            resumed_ = received_ > 0;
            return true;
        }
    }
    REDIST_TRY_VOID(restart());
    return false;
}

result<void> artifact_stream::replay(const std::filesystem::path& path, bool into_sink) {
    // O_NOFOLLOW, regular files only. Anything else is not what we wrote
    // there: treated like corrupt bytes (dropped, fetched again).
    auto opened = open_cache_file(path, cache_file_access::read);
    if (!opened.ok())
        return make_error(error_code::integrity, "unusable cache entry: " + opened.error_value().message)
            .with_path(path.string());
    const unique_fd fd(*opened);
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    std::vector<std::byte> buffer(1u << 20);
    settle();
    auto last_report = std::chrono::steady_clock::now();
    auto replayed = read_each_block(
        fd.get(), buffer, path, [&](const std::byte* data, std::size_t size) -> result<void> {
            if (into_sink) {
                REDIST_TRY_VOID(feed(data, size));
                // A cached archive goes at the unpacker's pace: its progress too (set_progress).
                report_progress(last_report);
                return {};
            }
            if (received_ + size > expected_.size)
                return make_error(error_code::integrity, "size mismatch: more bytes than the manifest's size")
                    .with_path(path.string());
            received_ += size;
            if (!expected_.checked_by_content) hasher_.update(data, size);
            return {};
        });
    settle();
    if (!replayed.ok()) return std::move(replayed).error_value();
    return {};
}

result<void> artifact_stream::feed(const std::byte* data, std::size_t size) {
    if (received_ + size > expected_.size) {
        return make_error(error_code::integrity, "size mismatch: more bytes than the manifest's size")
            .with_expected_actual(std::to_string(expected_.size), "at least " + std::to_string(received_ + size));
    }
    received_ += size;
    if (hash_worker_) hash_worker_->push(data, size);
    else if (!expected_.checked_by_content) hash(data, size);
    const auto handing = std::chrono::steady_clock::now();
    auto written = sink_.write(data, size);
    sink_ns_ += ns_since(handing);
    REDIST_TRY_VOID(std::move(written));
    if (!paused_mid_download_ && received_ >= expected_.size / 2) {
        paused_mid_download_ = true;
        // The tests kill the process here: what it received so far, but for
        // the downloader's last unwritten batch, is in the .part.
        settle();
        debug_pause("mid-download");
    }
    return {};
}

result<void> artifact_stream::verify(const std::string& source) {
    settle();
    const std::uint64_t size = received_;
    auto checked = expected_.checked_by_content
                       ? check_integrity(expected_.size, "", size, "", source)  // the size alone
                       : check_integrity(expected_.size, expected_.sha256, size, hasher_.finish_hex(), source);
    if (!checked.ok()) {
        // Wrong bytes: worthless for any later source. When some came from
        // an earlier process, they may be the wrong ones (see fetch_from).
        resumed_bytes_failed_ = resumed_;
        REDIST_TRY_VOID(restart());
        return checked;
    }
    verified_ = true;
    return {};
}

namespace {
bool cancelled(const std::atomic<bool>* flag) { return flag && flag->load(); }
error cancelled_error() {
    return make_error(error_code::cancelled, "cancelled: another artifact failed, or the run was interrupted");
}
}  // namespace

// set_progress's callback hears of the bytes so far at most every 200 ms.
void artifact_stream::report_progress(std::chrono::steady_clock::time_point& last_report) {
    const auto now = std::chrono::steady_clock::now();
    if (!progress_ || now - last_report <= std::chrono::milliseconds(200)) return;
    last_report = now;
    progress_(received_);
}

download_callbacks artifact_stream::body_callbacks(std::chrono::steady_clock::time_point& last_report) {
    download_callbacks callbacks;
    // partial = false: the bytes that follow start at byte 0 (a spool
    // delivers from there; the file changed; a server ignored the Range).
    callbacks.on_response = [this](const response_info& info) -> result<void> {
        if (!info.partial && received_ > 0) REDIST_TRY_VOID(restart());
        if (progress_) progress_(received_);
        return {};
    };
    // A stop asked for (set_cancel) ends a stalled transfer too. The bytes
    // that came before a stall are reported in it (on_data reports at most
    // every 200 ms: the last piece before the stall may not have been).
    callbacks.on_idle = [this, &last_report]() -> result<void> {
        if (cancelled(cancel_)) return cancelled_error();
        report_progress(last_report);
        return {};
    };
    callbacks.on_data = [this, &last_report](const std::byte* data, std::size_t size) -> result<void> {
        if (cancelled(cancel_)) return cancelled_error();
        REDIST_TRY_VOID(feed(data, size));
        report_progress(last_report);
        return {};
    };
    return callbacks;
}

result<void> artifact_stream::fetch_from(const std::string& url, const transfer_options& options,
                                         const segment_options& segments, const spool_location& spool,
                                         const segment_retry_hook& retry, transfer_failure_info& failure) {
    auto outcome = fetch_once(url, options, segments, spool, retry, failure);
    // Bytes an earlier process left turned out wrong (verify() put the
    // stream back at byte 0): once more, with bytes from `url` only.
    const bool resumed_bytes_failed = std::exchange(resumed_bytes_failed_, false);
    if (!outcome.ok() && outcome.error_value().code == error_code::integrity && resumed_bytes_failed && received_ == 0)
        outcome = fetch_once(url, options, segments, spool, retry, failure);
    return outcome;
}

result<void> artifact_stream::fetch_once(const std::string& url, const transfer_options& options,
                                         const segment_options& segments, const spool_location& spool,
                                         const segment_retry_hook& retry, transfer_failure_info& failure) {
    if (cancelled(cancel_)) return cancelled_error();
    const std::string where = sanitize_url(url);
    spool_location here = spool;
    here.consumer_has = received_;  // used without a spool
    auto last_report = std::chrono::steady_clock::now();
    download_callbacks callbacks = body_callbacks(last_report);
    auto drop_spool = [&] {
        if (spool.part_file.empty()) return;
        ::unlink(spool.part_file.c_str());
        remove_segment_record(spool.part_file);
    };
    auto downloaded = segmented_download(url, expected_.size, options, segments, here, callbacks, retry, &failure);
    if (!downloaded.ok()) {
        error e = std::move(downloaded).error_value();
        if (e.code == error_code::integrity) {
            REDIST_TRY_VOID(restart());
            drop_spool();
            if (e.url.empty()) e.url = where;
        }
        return e;
    }
    if (downloaded->reused_bytes > 0) resumed_ = true;  // the spool's bytes from an earlier run went through the hash
    if (progress_) progress_(received_);                // the last bytes (on_data reports at most every 200 ms)
    auto checked = verify(where);
    if (!checked.ok()) drop_spool();
    return checked;
}

result<void> artifact_stream::fetch_file(const std::filesystem::path& path, const std::string& source) {
    REDIST_TRY_VOID(restart());
    auto replayed = replay(path, /*into_sink=*/true);
    if (!replayed.ok()) {
        error e = std::move(replayed).error_value();
        REDIST_TRY_VOID(restart());
        return e;
    }
    return verify(source);
}

}  // namespace redist
