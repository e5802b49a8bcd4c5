// segment_ranges.hpp (internal) — the ranged way of a download: the plan
// that cuts the missing bytes into chunks (plan_chunks), and the run that
// fetches them over several connections at once and hands them on in order
// (segmented_run). Apart from the one stream (segment_stream.hpp): it is the
// only part with threads, locks and a record written while bytes arrive.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/transfer.hpp"
#include "transport/segment_spool.hpp"
#include "transport/segmented_download.hpp"

namespace redist::segmenting {

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
                               const segment_options& o);

class segmented_run {
public:
    segmented_run(const std::string& url, std::uint64_t size, const transfer_options& transfer, int fd,
                  std::filesystem::path spool_path, std::filesystem::path part_file, std::vector<chunk> chunks,
                  const segment_retry_hook& retry, std::string validator)
        : url_(url),
          size_(size),
          transfer_(transfer),
          fd_(fd),
          spool_path_(std::move(spool_path)),
          part_file_(std::move(part_file)),
          chunks_(std::move(chunks)),
          retry_(retry),
          validator_(std::move(validator)) {}

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
    // The version (ETag, else Last-Modified) the bytes so far belong to:
    // given by the one stream a run goes on from, else set by the first response.
    const std::string& validator() const { return validator_; }

private:
    void worker();
    chunk* take();
    void fetch(chunk& c);
    void settle(chunk& c, result<void> outcome, const transfer_failure_info& info, bool progressed, bool range_ignored);
    std::uint64_t contiguous_end();  // lock held
    segment_record snapshot();       // lock held
    // Rewrites the resume record when it is due (see kRecordStep), or always
    // when `force`; data first (written), then the record. wait_for_writer:
    // returns only once a record holding every chunk finished so far is on
    // disk, waiting for a writer in flight rather than skipping the write
    // because it has taken its snapshot.
    void record_progress(bool force, bool wait_for_writer = false);
    bool record_due() const;  // lock held
    void stop_all();
    std::unique_ptr<std::byte[]> buffer_;  // deliver_spooled()'s

    const std::string& url_;
    std::uint64_t size_;
    const transfer_options& transfer_;
    int fd_;
    std::filesystem::path spool_path_;
    std::filesystem::path part_file_;
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
    std::string validator_;     // see validator()
    std::size_t finished_ = 0;  // chunks done by this run
    int requests_ = 0;
    int retries_ = 0;
    std::uint64_t received_ = 0;
    // The record: one writer at a time (record_mutex_); the rest under mutex_.
    std::mutex record_mutex_;
    std::uint64_t unrecorded_ = 0;       // bytes written since the last snapshot recorded
    std::size_t recorded_finished_ = 0;  // finished_ in the last snapshot taken
    std::size_t written_finished_ = 0;   // finished_ in the last record written to disk
    clock_type::time_point last_record_ = clock_type::now();
};

}  // namespace redist::segmenting
