// Internal: the one downloader of an artifact's bytes. One stream, or one
// large artifact over several HTTP connections at once, reassembled in order
// for the hash and the decoder; one retry loop (the caller's hook) either way.
//
// Why: CDNs often cap each connection (nginx `limit_rate`); one stream of a
// 313 MiB archive then takes 30 s while xz decodes it in 7. Byte ranges over
// N connections make the download stop being the bottleneck.
//
// How (see segment_ranges.cpp for the reasons):
//  * Split when starved (segment_options::split_when_starved, the tools'
//    default): ranges only once one stream is seen to be the bottleneck.
//    Over each window the stream times what its consumer and spool take,
//    and reads its thread's CPU time; a window in which the two came to
//    less than half of it (the rest: waiting for bytes) stops it, and
//    ranges go on from the first byte not delivered (same version, or
//    the download starts over). Ranges cost a pass over the spool and more
//    work per byte on both ends: on 2 cores, a zstd copy from a loopback
//    registry took 0.67 s split against 0.49 s in one stream.
//  * The file is cut into chunks, small at the start and growing with the
//    offset (so that the contiguous prefix, which is all the decoder can use,
//    grows at about N times one connection's rate from the first second),
//    and shrinking again towards the end (so that the connections finish
//    together rather than the last chunk running on alone).
//    Worker threads (one per connection) take the lowest chunk nobody has,
//    fetch it with download_range() and pwrite() its bytes at their offset
//    into the spool file, 256 KiB at a time (and whatever they hold after
//    250 ms without a byte: on_idle), not libcurl's 16 KiB pieces, whose
//    pwrite()s queued on the file's inode lock. All of transfer.hpp's rules hold per request
//    (https never downgrades, redirect limit, stall detector, no decoding).
//  * The calling thread reads the spool back in order as the contiguous
//    prefix grows and calls on_data: the caller's callbacks run on its own
//    thread only, one byte stream from byte 0. Memory is bounded (libcurl's
//    buffers, 256 KiB per connection and one 1 MiB read buffer); the bytes wait on disk, in the
//    spool, which is the cache's .part file anyway.
//  * One stream (file://, small files, connections <= 1, a server ignoring
//    ranges) writes the spool 256 KiB at a time too, handing each piece to
//    on_data as it arrives. Without a spool (spool_location names neither a
//    .part nor a temp_dir, or only a temp_dir for a download that is not
//    split) nothing is written: the consumer holds the bytes, and a retry
//    asks for "Range: bytes=<delivered>-".
//  * A failed chunk keeps what it wrote and is retried from there when the
//    caller's retry hook says so; the other chunks go on.
//  * One request goes first; the other connections open when it is answered
//    with a 206. A server that answers it with 200 (it ignores ranges) gets
//    no other request: that body becomes the one stream (the bytes before
//    the asked-for offset are dropped; no byte is delivered twice). A 200
//    after ranges worked stops the run, which goes on as one stream.
//  * Resume: next to a .part spool, "<part>.segments" lists the byte ranges
//    known to be in the .part (the contiguous prefix and finished chunks
//    beyond it). It is untrusted (parse_segment_record, fuzzed): anything
//    odd, and the record is ignored. Without it a .part counts as written
//    sequentially (its size is the prefix), which is what a single stream
//    writes; a segmented run writes the record before its first
//    out-of-order byte. Resumed bytes are not trusted either: they go
//    through the caller's hash like every other byte.
//  * The record follows the writes, not the delivery (a slow consumer must
//    not hold it back): the connection whose write brings the bytes written
//    since the last record to kRecordStep (4 MiB), or that finishes a
//    chunk, or writes a second after the last record (also while stalled),
//    rewrites the record after those bytes are written, so that the record
//    never claims bytes a killed process did not write (after a power loss
//    it may: the resumed hash then fails, and the .part is dropped and
//    fetched again in the same run). A kill therefore loses at most
//    2 * 4 MiB + 3 * 256 KiB per connection (the bytes written since the
//    record on disk, which may itself be one step old while the next one is
//    being written, each step overrun by one 256 KiB write per connection;
//    and the 256 KiB each connection holds unwritten): 11 MiB with 4
//    connections, 12.5 MiB with the default 6.
//
// Known limits: every chunk is a new connection (download_range() keeps no
// connection cache: one TLS handshake per chunk, ~25 for a 313 MiB archive);
// stopping (a caller error, a fatal chunk) ends a request that stalls
// mid-body within about a second (its on_idle), but one still waiting for
// its response holds it up to transfer_options' stall_timeout_seconds; no
// work stealing at the tail (the last chunks are small, but a connection far
// slower than the others still holds its chunk to the end). While nothing
// can be delivered, callbacks.on_idle is called about every 250 ms on the
// calling thread, so the caller can stop a stalled run.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redist/error.hpp"
#include "redist/transfer.hpp"

namespace redist {

// How to split. The defaults come from bench/capped_link.py (see there).
struct segment_options {
    // Connections at once; <= 1: one stream. Chosen as the fewest connections
    // whose download (hash only) outruns one xz thread's decode (~45 MiB/s on
    // the 2-core bench machine) on the capped link (nginx limit_rate 10m per
    // connection, 312 MiB single-block cuDNN archive). Measured 2026-11-30,
    // once, load average 15 on 2 cores: 4 connections 35 MiB/s (8.9 s),
    // 6: 49 MiB/s (6.3 s), 8: 57 MiB/s (5.4 s); 1: ~30 s.
    int connections = 6;
    // Smaller archives use one stream: the extra requests are not worth it.
    std::uint64_t min_total_bytes = 64ull << 20;
    // Chunk sizes: chunk at offset x is about min(x, size - x) / connections
    // bytes, within these bounds (small first chunks: the decoder gets going
    // at once; big ones in the middle: fewer requests; small last ones: the
    // connections finish together), in whole multiples of 2 MiB once they
    // are that big (servers that pace a connection send 2 MiB at a time).
    std::uint64_t min_segment_bytes = 4ull << 20;
    std::uint64_t max_segment_bytes = 32ull << 20;
    // Split only once the link is seen to be the bottleneck: the download
    // starts as one stream, and goes on over ranges (from the first byte not
    // delivered yet) as soon as, over one starved_window of the stream, the
    // consumer and the spool (hash, decoder, disk, waits for room in the
    // decoder's queue) and the thread's CPU time came to less than half of
    // it: the rest was spent waiting for bytes. A link faster than
    // the consumer (a LAN or loopback mirror) then costs no ranged requests
    // and no second pass over the spool. False: ranges from the first
    // request (an explicit --connections N). Either way, a spool that holds
    // bytes out of order (an earlier split run) goes on in ranges.
    bool split_when_starved = false;
    std::chrono::milliseconds starved_window{250};
};

// Where the bytes wait between the network and on_data. Neither part_file nor
// temp_dir: no spool, which means one stream (never split), nothing written.
struct spool_location {
    // The cache's "<hex>.part": resumable; "<part>.segments" is kept beside it.
    // Opened with O_NOFOLLOW; must be a regular file with one link owned by us.
    std::filesystem::path part_file;
    // Without a part_file: an unlinked O_TMPFILE in this directory (no
    // resume) for a split download; one stream then needs no spool at all.
    // With one: the fallback when the part_file's filesystem cannot hold the
    // download (it has less room free than the bytes still missing, or a
    // write fails with ENOSPC or EDQUOT): the .part and its record are
    // removed, and the download goes on from the first byte the caller has
    // not had yet (nothing it had is fetched again), in a temp spool here
    // (ranges) or without a spool (one stream).
    std::filesystem::path temp_dir;
    // Told why, when the part_file is given up for temp_dir. May be empty.
    std::function<void(const error& why)> on_fallback;
    // Told the bytes an earlier run left in the part_file (the record's, or
    // the .part's size), when there are some, before any request. May be empty.
    std::function<void(std::uint64_t bytes_present)> on_resume;
    // Without a spool: the consumer already holds the file's first bytes
    // (a dead process's file it adopted); the first request asks for the
    // rest. Ignored when a spool is used (its bytes are delivered from 0).
    std::uint64_t consumer_has = 0;
};

// Asked after each failed request (attempt = 1, 2, ...: failures of a chunk
// in a row without progress; of one stream, every failed request, as
// try_sources counts attempts; `e` the request's error): how long to
// wait before trying again, or nullopt to give up (the whole download fails
// with that error). The one used by the tools is segment_retries()
// (sources.hpp): the run's retry policy, reporting each retry as it is made.
// Called with the download's lock held, from any of its threads, one call at
// a time: it need not be thread-safe but must be quick.
using segment_retry_hook =
    std::function<std::optional<std::chrono::milliseconds>(int attempt, const error& e, const transfer_failure_info&)>;

struct segmented_stats {
    bool segmented = false;            // false: one stream was used
    std::uint64_t reused_bytes = 0;    // taken from the spool of an earlier run
    std::uint64_t received_bytes = 0;  // body bytes that came over the network and were kept
    int requests = 0;                  // HTTP requests (or file:// reads) made
    int retries = 0;                   // requests that were repeats after a failure
};

// Downloads `url` (expected_size bytes; 0 = unknown, which means one stream)
// through the spool, if any, calling callbacks.on_response (content_length =
// expected_size or the server's) and then callbacks.on_data with every byte
// of the file in order, on the calling thread, from byte 0, or from
// spool.consumer_has without a spool. on_response's `partial` says which:
// false, the bytes that follow start at byte 0 and the consumer drops what
// it had; true, they follow the consumer's. Bytes found in the spool from an
// earlier run are delivered from there first. callbacks.on_idle is called
// while one stream waits for bytes.
//
// One version of the file, never two mixed (the version is the ETag, else
// the Last-Modified, of the response that the bytes so far started with):
//  - a 206 of another known version means the file changed: the spool is
//    emptied, on_response is called again (partial = false) before any byte
//    of the new version, and the download starts over from byte 0, on the
//    same source, when the retry hook allows it (asked as for a transient
//    network failure);
//  - a 200 to a Range request (the server ignores ranges) carrying the same
//    known version continues: the bytes the consumer has are skipped, none
//    is delivered twice; any other 200 (a version unknown on either side, or
//    another one) starts over with its body (on_response, partial = false),
//    without another request.
//
// One stream is used for file:// URLs, expected_size < min_total_bytes,
// connections <= 1, no spool, and servers that ignore ranges.
//
// On success the spool holds the whole file and "<part>.segments" is gone, so
// the caller can verify and rename the .part. On failure the spool and its
// record stay for a later resume (the caller removes both to start over:
// remove_segment_record()).
// Outcomes: ok | network / not_found (last failure of a request the retry
// hook gave up on, or "the file changed during the download"; `failure`
// describes it) | integrity (the server announced (Content-Length) or sent
// more bytes than asked for) |
// filesystem (spool) | whatever a callback returned, unchanged.
result<segmented_stats> segmented_download(const std::string& url, std::uint64_t expected_size,
                                           const transfer_options& transfer, const segment_options& segments,
                                           const spool_location& spool, download_callbacks& callbacks,
                                           const segment_retry_hook& retry = {},
                                           transfer_failure_info* failure = nullptr);

// ---- the resume record (exposed for tests and the fuzz target) --------------

// Byte ranges [first, second) of a file of `size` bytes, sorted, disjoint,
// non-adjacent, non-empty, within the size.
struct segment_record {
    std::uint64_t size = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
};

// Text form: "redist-segments 1\nsize N\nA B\n...". At most 64 KiB and 4096
// ranges. Outcomes: ok | bad_manifest (why, naming `what`).
result<segment_record> parse_segment_record(std::string_view text, std::string_view what);
std::string segment_record_to_text(const segment_record& record);

// "<part>.segments"
std::filesystem::path segment_record_path(const std::filesystem::path& part_file);
// The bytes a download of `expected_size` bytes through the spool
// `part_file` would take from it instead of the network (what its
// spool_location::on_resume would be told): the record's ranges, else the
// .part's size; 0 when there is no .part or it would be started over (not
// ours, not a regular file, a record that does not fit). Reads only.
std::uint64_t resumable_bytes(const std::filesystem::path& part_file, std::uint64_t expected_size) noexcept;
// Removes the record and the temp files of a killed run's record writes (best
// effort), e.g. when the caller drops the .part. Call with the blob locked.
void remove_segment_record(const std::filesystem::path& part_file) noexcept;

}  // namespace redist
