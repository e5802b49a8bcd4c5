// segmented_download_test.cpp — lib/segmented_download against the
// misbehaving loopback server (tests/fixtures/fault_server.py), whose request
// log gives the ranges asked for and the body bytes really sent.
#include "transport/segmented_download.hpp"

#include <catch2/catch.hpp>

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "archive/sha256.hpp"
#include "fixtures/fault_server_support.hpp"
#include "support.hpp"
#include "transport/segment_ranges.hpp"

namespace fs = std::filesystem;
using redist::error_code;

namespace {

std::string random_bytes(std::size_t size, unsigned seed) {
    std::mt19937 gen(seed);
    std::string out(size, '\0');
    for (auto& c : out) c = static_cast<char>(gen() & 0xff);
    return out;
}

std::string sha256_of(const std::string& bytes) {
    redist::sha256_hasher h;
    h.update(bytes);
    return h.finish_hex();
}

constexpr std::size_t kSize = 2'000'000;

struct fixture {
    fs::path dir;
    fs::path root;
    std::string blob;
    std::unique_ptr<redist_test::fault_server> server;

    fixture() {
        ::setenv("no_proxy", "127.0.0.1,localhost", 1);
        ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
        dir = fs::path(REDIST_TEST_SCRATCH) / ("server." + std::to_string(::getpid()));
        fs::remove_all(dir);
        root = dir / "root";
        fs::create_directories(root);
        blob = random_bytes(kSize, 7);
        redist_test::write(root / "blob.bin", blob);
        server = std::make_unique<redist_test::fault_server>(root, dir / "server");
    }
    ~fixture() {
        server.reset();
        std::error_code ignored;
        fs::remove_all(dir, ignored);
    }
    fixture(const fixture&) = delete;
    fixture& operator=(const fixture&) = delete;
};

fixture& shared_fixture() {
    static fixture f;
    f.server->set_faults("{}");
    // A test that failed on purpose may leave requests in flight (the server
    // still writing to a closed socket); log() waits for them, so they are
    // not logged after the reset, into the next test's log.
    (void)f.server->log();
    f.server->reset();
    return f;
}

redist::segment_options small_segments(int connections = 4) {
    redist::segment_options o;
    o.connections = connections;
    o.min_total_bytes = 1u << 20;
    o.min_segment_bytes = 128u << 10;
    o.max_segment_bytes = 512u << 10;
    return o;
}

redist::transfer_options fast_options() {
    redist::transfer_options o;
    o.connect_timeout_seconds = 5;
    o.stall_timeout_seconds = 10;
    return o;
}

// Hashes the in-order stream; can stop (like a killed process) after N bytes.
struct sink {
    redist::sha256_hasher hasher;
    std::uint64_t bytes = 0;
    int responses = 0;
    int restarts = 0;
    redist::response_info info;
    std::uint64_t stop_after = 0;
    redist::download_callbacks callbacks;

    sink() {
        callbacks.on_response = [this](const redist::response_info& i) -> redist::result<void> {
            ++responses;
            info = i;
            if (bytes > 0) {  // the download starts over from byte 0 (the file changed)
                ++restarts;
                bytes = 0;
                hasher = redist::sha256_hasher();
            }
            return {};
        };
        callbacks.on_data = [this](const std::byte* data, std::size_t n) -> redist::result<void> {
            hasher.update(data, n);
            bytes += n;
            if (stop_after > 0 && bytes >= stop_after)
                return redist::make_error(error_code::cancelled, "stopped by the test");
            return {};
        };
    }
    std::string hex() { return hasher.finish_hex(); }
};

redist::segment_retry_hook retry_transient(int max_attempts, int* calls = nullptr) {
    return
        [max_attempts, calls](int attempt, const redist::error&,
                              const redist::transfer_failure_info& info) -> std::optional<std::chrono::milliseconds> {
            if (calls != nullptr) ++*calls;
            if (!info.transient || attempt > max_attempts) return std::nullopt;
            return std::chrono::milliseconds(10);
        };
}

// <scratch>/<name>/blob.part: a resumable spool, as the cache gives one.
redist::spool_location part_spool(const std::string& name) {
    redist::spool_location spool;
    spool.part_file = redist_test::scratch(name) / "blob.part";
    return spool;
}

// The common call: /blob.bin, small segments, transient failures retried 3 times.
redist::result<redist::segmented_stats> fetch_blob(fixture& f, const redist::spool_location& spool, sink& s) {
    return redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                      s.callbacks, retry_transient(3));
}

std::uint64_t body_bytes(const std::vector<redist_test::request_log_entry>& log) {
    std::uint64_t total = 0;
    for (const auto& e : log) total += e.bytes_sent;
    return total;
}

}  // namespace

TEST_CASE("segments are fetched as ranges and delivered in order", "[segmented]") {
    auto& f = shared_fixture();
    sink s;
    const auto spool = part_spool("reassembly");
    auto r = fetch_blob(f, spool, s);
    REQUIRE(r.ok());
    CHECK(r->segmented);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(s.bytes == kSize);
    CHECK(s.responses == 1);
    CHECK(s.info.content_length == static_cast<std::int64_t>(kSize));
    CHECK(redist_test::slurp(spool.part_file) == f.blob);
    CHECK_FALSE(fs::exists(redist::segment_record_path(spool.part_file)));  // gone once complete
    const auto log = f.server->log();
    CHECK(log.size() > 4);
    CHECK(static_cast<int>(log.size()) == r->requests);
    for (const auto& e : log) {
        CHECK(e.status == 206);
        REQUIRE(e.range);
        CHECK(e.range->find('-') + 1 < e.range->size());  // bounded: "bytes=A-B"
    }
    CHECK(body_bytes(log) == kSize);  // every byte exactly once
}

TEST_CASE("a temp spool without a cache works the same", "[segmented]") {
    auto& f = shared_fixture();
    const fs::path dir = redist_test::scratch("temp");
    sink s;
    redist::spool_location spool;
    spool.temp_dir = dir;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3));
    REQUIRE(r.ok());
    CHECK(r->segmented);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(fs::is_empty(dir));  // unlinked
}

TEST_CASE("a server that ignores ranges falls back to one stream", "[segmented]") {
    auto& f = shared_fixture();
    f.server->set_faults(R"({"/blob.bin": {"ignore_range": true}})");
    sink s;
    const auto spool = part_spool("ignore-range");
    auto r = fetch_blob(f, spool, s);
    REQUIRE(r.ok());
    CHECK_FALSE(r->segmented);
    CHECK(s.bytes == kSize);  // no byte twice
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(s.responses == 1);
    CHECK(redist_test::slurp(spool.part_file) == f.blob);
    CHECK_FALSE(fs::exists(redist::segment_record_path(spool.part_file)));
    // The first request asked for a range and got the whole file: its body
    // is the download. No other connection was opened, nothing sent twice.
    const auto log = f.server->log();
    REQUIRE(log.size() == 1);
    CHECK(log[0].status == 200);
    CHECK(log[0].range.has_value());
    CHECK(body_bytes(log) == kSize);
    CHECK(r->requests == 1);
}

TEST_CASE("a server that ignores ranges, resuming a spool: the kept bytes of its 200 are skipped", "[segmented]") {
    auto& f = shared_fixture();
    f.server->set_faults(R"({"/blob.bin": {"ignore_range": true}})");
    const fs::path dir = redist_test::scratch("ignore-range-resume");
    redist::spool_location spool;
    spool.part_file = dir / "blob.part";
    // A prefix, and a finished segment beyond a hole, as a killed run leaves them.
    std::string kept = f.blob.substr(0, 300'000);
    kept.resize(900'000, 'x');
    kept.replace(600'000, 300'000, f.blob.substr(600'000, 300'000));
    redist_test::write(spool.part_file, kept);
    redist_test::write(redist::segment_record_path(spool.part_file),
                       "redist-segments 1\nsize 2000000\n0 300000\n600000 900000\n");
    sink s;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3));
    REQUIRE(r.ok());
    CHECK_FALSE(r->segmented);
    CHECK(s.bytes == kSize);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(redist_test::slurp(spool.part_file) == f.blob);
    CHECK_FALSE(fs::exists(redist::segment_record_path(spool.part_file)));
    const auto log = f.server->log();
    REQUIRE(log.size() == 1);
    CHECK(log[0].range.value_or("").starts_with("bytes=300000-"));  // the first missing byte
    CHECK(log[0].status == 200);
    CHECK(body_bytes(log) == kSize);  // the server sent all; the kept prefix was dropped, not delivered twice
}

TEST_CASE("a server that ignores ranges after a failed first request: the retry asks for the first byte again",
          "[segmented]") {
    auto& f = shared_fixture();
    // Attempt 1 of the first chunk: a 503. Attempt 2 must ask for the same
    // chunk (not skip to the next one), and its 200 becomes the stream.
    f.server->set_faults(R"({"/blob.bin": {"status": 503, "status_times": 1, "ignore_range": true}})");
    sink s;
    const auto spool = part_spool("first-retry-ignored");
    auto r = fetch_blob(f, spool, s);
    REQUIRE(r.ok());
    CHECK_FALSE(r->segmented);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(redist_test::slurp(spool.part_file) == f.blob);
    const auto log = f.server->log();
    REQUIRE(log.size() == 2);
    CHECK(log[0].status == 503);
    CHECK(log[1].status == 200);
    CHECK(log[0].range == log[1].range);
    CHECK(log[1].bytes_sent == kSize);
}

TEST_CASE("the other connections open only after the first request got a 206", "[segmented]") {
    auto& f = shared_fixture();
    // The first request waits, then fails before a byte. A run that opened
    // all its connections at once would start others while it waits.
    f.server->set_faults(R"({"/blob.bin": {"status": 503, "times": 1, "delay_seconds": 0.3}})");
    sink s;
    const auto spool = part_spool("first-alone");
    auto r = fetch_blob(f, spool, s);
    REQUIRE(r.ok());
    CHECK(r->segmented);
    CHECK(s.hex() == sha256_of(f.blob));
    const auto log = f.server->log();
    REQUIRE(log.size() > 3);
    const auto first = std::min_element(log.begin(), log.end(),
                                        [](const auto& a, const auto& b) { return a.began < b.began; });
    CHECK(first->status == 503);
    // Nothing began before the 503 was answered (a run that opened all its
    // connections at once starts them during the delay), and the next
    // request, alone, got the 206 that opened the others.
    std::vector<redist_test::request_log_entry> rest;
    for (const auto& e : log)
        if (&e != &*first) rest.push_back(e);
    std::sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.began < b.began; });
    REQUIRE(first->answered > 0);
    for (const auto& e : rest) CHECK(e.began > first->answered);
    CHECK(rest.front().status == 206);
    std::uint64_t sent = 0;
    for (const auto& e : rest) sent += e.bytes_sent;
    CHECK(sent == kSize);  // every byte once (the 503's body is not the file's)
}

TEST_CASE("a 206 for the wrong range is an error", "[segmented]") {
    auto& f = shared_fixture();
    f.server->set_faults(R"({"/blob.bin": {"range_shift": 10}})");
    const fs::path dir = redist_test::scratch("shift");
    sink s;
    redist::spool_location spool;
    spool.part_file = dir / "blob.part";
    int calls = 0;
    redist::transfer_failure_info failure;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3, &calls), &failure);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::network);
    CHECK(r.error_value().message.find("Content-Range") != std::string::npos);
    CHECK_FALSE(failure.transient);
    // The first chunk (range 0-...) is not shifted by the server; no later
    // chunk's bytes may reach the stream.
    CHECK(s.bytes < kSize);
}

TEST_CASE("a failed segment is retried alone, from where it stopped", "[segmented]") {
    auto& f = shared_fixture();
    // The first request of all is cut after 50000 bytes.
    f.server->set_faults(R"({"/blob.bin": {"drop_after": 50000, "times": 1}})");
    const fs::path dir = redist_test::scratch("retry");
    sink s;
    redist::spool_location spool;
    spool.part_file = dir / "blob.part";
    int calls = 0;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3, &calls));
    REQUIRE(r.ok());
    CHECK(r->segmented);
    CHECK(r->retries == 1);
    CHECK(calls == 1);
    CHECK(s.hex() == sha256_of(f.blob));
    const auto log = f.server->log();
    // One request more than segments, and the repeat asked only for the rest.
    CHECK(static_cast<int>(log.size()) == r->requests);
    CHECK(body_bytes(log) == kSize);
}

TEST_CASE("a retry hook that gives up fails the download and reports why", "[segmented]") {
    auto& f = shared_fixture();
    f.server->set_faults(R"({"/blob.bin": {"status": 503, "retry_after": 3}})");
    const fs::path dir = redist_test::scratch("give-up");
    sink s;
    redist::spool_location spool;
    spool.part_file = dir / "blob.part";
    redist::transfer_failure_info failure;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(2), &failure);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::network);
    CHECK(failure.transient);
    CHECK(failure.http_status == 503);
    CHECK(failure.retry_after_seconds == 3);
    CHECK(s.bytes == 0);
}

TEST_CASE("an interrupted segmented download resumes with fewer bytes", "[segmented]") {
    auto& f = shared_fixture();
    // The first request stalls after 1000 bytes while the others finish; the
    // caller stops (as a kill would) at the first bytes delivered: the spool
    // then holds a prefix, whole segments beyond it, and a hole.
    f.server->set_faults(R"({"/blob.bin": {"stall_after": 1000, "stall_seconds": 2, "times": 1}})");
    const fs::path dir = redist_test::scratch("resume");
    redist::spool_location spool;
    spool.part_file = dir / "blob.part";
    {
        sink s;
        s.stop_after = 1;
        auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                            s.callbacks, retry_transient(3));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::cancelled);
    }
    REQUIRE(fs::exists(redist::segment_record_path(spool.part_file)));
    // What a stopped run reports as kept is what the resume takes: the
    // record's ranges, not the sparse .part's size.
    const std::uint64_t kept = redist::resumable_bytes(spool.part_file, kSize);
    const auto record = redist::parse_segment_record(redist_test::slurp(redist::segment_record_path(spool.part_file)),
                                                     "record");
    REQUIRE_OK(record);
    CHECK(record->ranges.size() > 1);  // it keeps what came ahead of the delivered bytes too
    CHECK(kept >= 1000);
    CHECK(kept < kSize);
    CHECK(redist::resumable_bytes(spool.part_file, kSize + 1) == 0);  // a record for another size
    (void)f.server->log();                                            // waits for the requests cut short to be logged
    f.server->set_faults("{}");
    f.server->reset();
    sink s;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3));
    REQUIRE(r.ok());
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(s.bytes == kSize);
    CHECK(r->reused_bytes >= 1000);
    CHECK(r->reused_bytes == kept);
    const std::uint64_t sent = body_bytes(f.server->log());
    CHECK(sent + r->reused_bytes == kSize);  // nothing fetched twice
    CHECK(sent > 0);
    CHECK(sent < kSize);
    CHECK_FALSE(fs::exists(redist::segment_record_path(spool.part_file)));
}

TEST_CASE("a caller can stop a ranged download whose head of the line stalls", "[segmented]") {
    // The first request stalls after 1000 bytes for longer than the test
    // waits; the others finish. Nothing can be delivered, so only on_idle
    // can say "stop" (Ctrl-C): before, the ranged path never called it, and
    // the run went on until the stall detector retried the chunk.
    auto& f = shared_fixture();
    f.server->set_faults(R"({"/blob.bin": {"stall_after": 1000, "stall_seconds": 30, "times": 1}})");
    const fs::path dir = redist_test::scratch("stop-stalled");
    redist::spool_location spool;
    spool.part_file = dir / "blob.part";
    sink s;
    int idle_calls = 0;
    s.callbacks.on_idle = [&]() -> redist::result<void> {
        if (++idle_calls < 3) return {};
        return redist::make_error(error_code::cancelled, "stopped by the test");
    };
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::cancelled);
    CHECK(idle_calls == 3);
    CHECK(s.bytes < kSize);
    // What the connections wrote stays for a resume.
    CHECK(fs::exists(redist::segment_record_path(spool.part_file)));
    (void)f.server->log();  // waits for the request cut short to be logged
    f.server->set_faults("{}");
    f.server->reset();
}

TEST_CASE("the resume record follows the writes while the consumer is busy", "[segmented]") {
    // The consumer (the hash and the decoder, in fetch) takes its time over
    // the first bytes while the connections download the rest. A kill then
    // must lose no more than the stated bound (segmented_download.hpp): the
    // record on disk has to follow what was written, not what was delivered.
    // It was rewritten only by the delivering thread, so it lagged by all
    // the consumer had not taken yet (up to 216 MB seen).
    auto& f = shared_fixture();
    const redist::spool_location spool = part_spool("record-follows");
    const fs::path record = redist::segment_record_path(spool.part_file);
    sink s;
    auto hash = s.callbacks.on_data;
    std::uint64_t recorded = 0;  // bytes the record on disk claimed, at best, while the consumer waited
    s.callbacks.on_data = [&](const std::byte* data, std::size_t n) -> redist::result<void> {
        for (int i = 0; s.bytes == 0 && i < 200 && recorded < kSize; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            std::error_code ec;
            if (!fs::exists(record, ec)) continue;
            auto parsed = redist::parse_segment_record(redist_test::slurp(record), record.string());
            if (!parsed.ok()) continue;
            std::uint64_t claimed = 0;
            for (const auto& [a, b] : parsed->ranges) claimed += b - a;
            recorded = std::max(recorded, claimed);
        }
        return hash(data, n);
    };
    auto r = fetch_blob(f, spool, s);
    REQUIRE(r.ok());
    CHECK(s.hex() == sha256_of(f.blob));
    // Every chunk finished while the consumer held the first bytes, and each
    // finished chunk is recorded at once.
    CHECK(recorded == kSize);
    CHECK_FALSE(fs::exists(record));
}

namespace {
// A tmpfs of `size` mounted at `dir` for the test (root only), unmounted on destruction.
struct small_filesystem {
    fs::path dir;
    bool mounted = false;
    small_filesystem(fs::path d, const std::string& size) : dir(std::move(d)) {
        fs::create_directories(dir);
        mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("mode=0755,size=" + size).c_str()) == 0;
    }
    ~small_filesystem() {
        if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
    }
    small_filesystem(const small_filesystem&) = delete;
    small_filesystem& operator=(const small_filesystem&) = delete;
};
}  // namespace

TEST_CASE("a .part whose filesystem is full is given up, and the download goes on", "[segmented]") {
    // The cache's .part was the only spool: a full cache failed a download
    // that the prefix (where temp_dir lies) had room for. Ranges go on in a
    // temp spool; one stream goes on without a spool (its tee into a full
    // cache used to be dropped quietly). Either way the caller is told.
    auto& f = shared_fixture();
    const bool ranged = GENERATE(true, false);
    const bool at_once = GENERATE(true, false);
    CAPTURE(ranged, at_once);
    const fs::path dir = redist_test::scratch(ranged ? "full-spool" : "full-spool-one-stream");
    // At once: 1 MiB cannot hold the 2 MB download, which is seen before a
    // byte is written. Mid-way: 3 MiB could, until something else fills it
    // (2.5 MiB written when the download starts): the writes fail with ENOSPC.
    small_filesystem cache(dir / "cache", at_once ? "1m" : "3m");
    if (!cache.mounted) {
        WARN("cannot mount a tmpfs (not root?): skipped");
        return;
    }
    redist::spool_location spool;
    spool.part_file = cache.dir / "blob.part";
    spool.temp_dir = dir / "stage";
    fs::create_directories(spool.temp_dir);
    std::vector<redist::error> told;
    spool.on_fallback = [&](const redist::error& why) { told.push_back(why); };
    sink s;
    auto responded = s.callbacks.on_response;
    s.callbacks.on_response = [&](const redist::response_info& i) -> redist::result<void> {
        if (!at_once) redist_test::write(cache.dir / "filler", std::string(5u << 19, 'x'));
        return responded(i);
    };
    auto options = small_segments();
    if (!ranged) options.connections = 1;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), options, spool, s.callbacks,
                                        retry_transient(3));
    if (!r.ok()) FAIL(r.error_value().describe());
    CHECK(r->segmented == ranged);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(s.bytes == kSize);
    REQUIRE(told.size() == 1);
    CHECK(told[0].code == error_code::filesystem);
    INFO(told[0].describe());
    CHECK(told[0].path == spool.part_file.string());
    CHECK_FALSE(fs::exists(spool.part_file));
    CHECK_FALSE(fs::exists(redist::segment_record_path(spool.part_file)));
    CHECK(fs::is_empty(spool.temp_dir));  // a temp spool was unlinked
    const std::uint64_t sent = body_bytes(f.server->log());
    if (ranged) {
        if (at_once) CHECK(sent == kSize);
        CHECK(sent <= 2 * kSize);
    } else {
        CHECK(s.restarts == 0);
        CHECK(sent == kSize);  // one request, not one byte twice
        CHECK(f.server->log().size() == 1);
    }
}

TEST_CASE("a .part without a record resumes from its size", "[segmented]") {
    auto& f = shared_fixture();
    const fs::path dir = redist_test::scratch("legacy");
    redist::spool_location spool;
    spool.part_file = dir / "blob.part";
    redist_test::write(spool.part_file, f.blob.substr(0, 300'000));
    CHECK(redist::resumable_bytes(spool.part_file, kSize) == 300'000);
    CHECK(redist::resumable_bytes(dir / "missing.part", kSize) == 0);
    sink s;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3));
    REQUIRE(r.ok());
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(r->reused_bytes == 300'000);
    CHECK(body_bytes(f.server->log()) == kSize - 300'000);
}

TEST_CASE("a hostile record is ignored: everything is fetched again", "[segmented]") {
    auto& f = shared_fixture();
    const fs::path dir = redist_test::scratch("hostile-record");
    redist::spool_location spool;
    spool.part_file = dir / "blob.part";
    redist_test::write(spool.part_file, std::string(1000, 'x'));
    // Claims more than the file holds.
    redist_test::write(redist::segment_record_path(spool.part_file), "redist-segments 1\nsize 2000000\n0 1500000\n");
    CHECK(redist::resumable_bytes(spool.part_file, kSize) == 0);  // it would be started over
    sink s;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3));
    REQUIRE(r.ok());
    CHECK(r->reused_bytes == 0);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(body_bytes(f.server->log()) == kSize);
}

TEST_CASE("removing a record also removes the temp files a killed run left, and nothing else", "[segmented]") {
    const fs::path dir = redist_test::scratch("record-leftovers");
    const fs::path part = dir / "blob.part";
    const fs::path record = redist::segment_record_path(part);
    redist_test::write(part, "kept");
    redist_test::write(record, "redist-segments 1\nsize 10\n");
    redist_test::write(record.string() + ".tmp.4242.1", "a killed run's rewrite");
    redist_test::write(dir / "other.part.segments.tmp.4242.1", "another blob's");
    const fs::path victim = dir / "victim";
    redist_test::write(victim, "precious");
    fs::create_symlink(victim, record.string() + ".tmp.4242.2");
    redist::remove_segment_record(part);
    CHECK_FALSE(fs::exists(record));
    CHECK_FALSE(fs::exists(record.string() + ".tmp.4242.1"));
    CHECK_FALSE(fs::is_symlink(record.string() + ".tmp.4242.2"));
    CHECK(redist_test::slurp(victim) == "precious");  // the link went, not what it points to
    CHECK(fs::exists(part));
    CHECK(fs::exists(dir / "other.part.segments.tmp.4242.1"));
}

TEST_CASE("the spool is never opened through a symlink", "[segmented]") {
    auto& f = shared_fixture();
    const fs::path dir = redist_test::scratch("symlink");
    const fs::path victim = dir / "victim";
    redist_test::write(victim, "precious");
    redist::spool_location spool;
    spool.part_file = dir / "blob.part";
    fs::create_symlink(victim, spool.part_file);
    CHECK(redist::resumable_bytes(spool.part_file, kSize) == 0);  // not ours to resume
    sink s;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3));
    REQUIRE(r.ok());
    CHECK(redist_test::slurp(victim) == "precious");
    CHECK_FALSE(fs::is_symlink(spool.part_file));
    CHECK(s.hex() == sha256_of(f.blob));
}

TEST_CASE("one stream: a retry that finds the file changed starts over instead of mixing two versions", "[segmented]") {
    auto& f = shared_fixture();
    // The first request is cut short and carries another ETag than the retry's.
    f.server->set_faults(R"({"/blob.bin": {"drop_after": 300000, "etag": "\"v1\"", "times": 1}})");
    auto options = small_segments();
    options.connections = 1;
    const auto spool = part_spool("one-stream-changed");
    sink s;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), options, spool, s.callbacks,
                                        retry_transient(3));
    REQUIRE(r.ok());
    CHECK(s.restarts == 1);  // told before any byte of the second version
    CHECK(s.bytes == kSize);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(redist_test::slurp(spool.part_file) == f.blob);
    const auto log = f.server->log();
    REQUIRE(log.size() == 3);
    CHECK(log[1].range == std::optional<std::string>("bytes=300000-"));  // refused: another version
    CHECK_FALSE(log[2].range);                                           // from byte 0
    CHECK(log[2].bytes_sent == kSize);
}

TEST_CASE("ranges: a range of another version of the file starts the download over", "[segmented]") {
    auto& f = shared_fixture();
    // The first range carries another ETag than the ones after it.
    f.server->set_faults(R"({"/blob.bin": {"etag": "\"v1\"", "times": 1}})");
    sink s;
    const auto spool = part_spool("ranges-changed");
    int retries = 0;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), small_segments(), spool,
                                        s.callbacks, retry_transient(3, &retries));
    REQUIRE(r.ok());
    CHECK(r->segmented);
    CHECK(retries >= 1);  // the start over went through the retry hook
    CHECK(s.restarts <= 1);
    CHECK(s.bytes == kSize);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(redist_test::slurp(spool.part_file) == f.blob);
    CHECK_FALSE(fs::exists(redist::segment_record_path(spool.part_file)));
}

TEST_CASE("one stream: a Content-Length other than the size expected is refused before the body", "[segmented]") {
    auto& f = shared_fixture();
    redist_test::write(f.root / "short.bin", f.blob.substr(0, 100000));
    f.server->set_faults(R"({"/blob.bin": {"serve": "/short.bin"}})");
    auto options = small_segments();
    options.connections = 1;
    redist::spool_location spool;
    spool.temp_dir = redist_test::scratch("one-stream-length");
    sink s;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), options, spool, s.callbacks,
                                        retry_transient(3));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::integrity);
    CHECK(r.error_value().expected == std::to_string(kSize));
    CHECK(r.error_value().actual == "100000");
    CHECK(s.bytes == 0);                 // not one byte of the wrong file delivered
    CHECK(f.server->log().size() == 1);  // wrong bytes are not asked for again
}

namespace {

// Splits only once the stream is seen to starve its consumer, judged over short windows.
redist::segment_options split_when_starved(std::chrono::milliseconds window = std::chrono::milliseconds(100)) {
    auto o = small_segments();
    o.split_when_starved = true;
    o.starved_window = window;
    return o;
}

// "bytes=A-B" -> A.
std::uint64_t range_start(const std::string& range) {
    return std::stoull(range.substr(range.find('=') + 1, range.find('-') - range.find('=') - 1));
}

}  // namespace

TEST_CASE("split when starved: a link faster than its consumer stays one stream", "[segmented]") {
    auto& f = shared_fixture();
    sink s;
    // The consumer is the bottleneck: 10 ms per piece (at most 16 KiB), far
    // over the loopback's time for it, in windows of 300 ms.
    auto on_data = s.callbacks.on_data;
    s.callbacks.on_data = [&](const std::byte* data, std::size_t n) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return on_data(data, n);
    };
    const auto spool = part_spool("starved-never");
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(),
                                        split_when_starved(std::chrono::milliseconds(300)), spool, s.callbacks,
                                        retry_transient(3));
    REQUIRE_OK(r);
    CHECK_FALSE(r->segmented);
    CHECK(r->requests == 1);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(redist_test::slurp(spool.part_file) == f.blob);
    const auto log = f.server->log();
    REQUIRE(log.size() == 1);
    CHECK(log[0].status == 200);
    CHECK_FALSE(log[0].range);
}

TEST_CASE("split when starved: a slow link goes on in ranges from the first byte not delivered", "[segmented]") {
    auto& f = shared_fixture();
    // One connection gets 4 MB/s: half a second for the blob, five windows.
    f.server->set_faults(R"({"/blob.bin": {"rate": 4000000}})");
    const fs::path temp = redist_test::scratch("starved-temp");
    for (const bool cached : {true, false}) {
        DYNAMIC_SECTION((cached ? "into the cache's .part" : "into a temp spool opened for the ranges")) {
            (void)f.server->log();
            f.server->reset();
            redist::spool_location spool;
            if (cached) spool = part_spool("starved-part");
            else spool.temp_dir = temp;
            sink s;
            auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), split_when_starved(),
                                                spool, s.callbacks, retry_transient(3));
            REQUIRE_OK(r);
            CHECK(r->segmented);
            CHECK(s.responses == 1);  // one byte stream for the consumer, never restarted
            CHECK(s.bytes == kSize);
            CHECK(s.hex() == sha256_of(f.blob));
            if (cached) {
                CHECK(redist_test::slurp(spool.part_file) == f.blob);
                CHECK_FALSE(fs::exists(redist::segment_record_path(spool.part_file)));
            } else {
                CHECK(fs::is_empty(temp));
            }
            const auto log = f.server->log();
            REQUIRE(log.size() > 2);
            CHECK(log[0].status == 200);  // the stream, stopped part-way
            CHECK_FALSE(log[0].range);
            CHECK(log[0].bytes_sent < kSize);
            // The ranges ask for nothing the stream had delivered: they start where it stopped.
            std::uint64_t lowest = kSize;
            for (std::size_t i = 1; i < log.size(); ++i) {
                CHECK(log[i].status == 206);
                REQUIRE(log[i].range);
                lowest = std::min(lowest, range_start(*log[i].range));
            }
            CHECK(lowest > 0);
            CHECK(lowest <= log[0].bytes_sent);
        }
    }
}

TEST_CASE("split when starved: a run stopped after the switch resumes from its record", "[segmented]") {
    auto& f = shared_fixture();
    // 1 MB/s per connection: the chunks after the one being delivered are still on their way when the consumer stops.
    f.server->set_faults(R"({"/blob.bin": {"rate": 1000000}})");
    const auto spool = part_spool("starved-resume");
    {
        sink s;
        s.stop_after = 1000000;  // the stream stops after 0.1-0.2 s (100-200 kB): this is in the ranges
        auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), split_when_starved(),
                                            spool, s.callbacks, retry_transient(3));
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::cancelled);
        const auto log = f.server->log();
        REQUIRE(log.size() > 1);
        CHECK_FALSE(log[0].range);  // the stream came first
        CHECK(log[1].range);        // then ranges
    }
    // The record, written before the first byte out of order, keeps what the stream wrote.
    REQUIRE(fs::exists(redist::segment_record_path(spool.part_file)));
    const std::uint64_t kept = redist::resumable_bytes(spool.part_file, kSize);
    const auto record = redist::parse_segment_record(redist_test::slurp(redist::segment_record_path(spool.part_file)),
                                                     "record");
    REQUIRE_OK(record);
    CHECK(record->ranges.size() > 1);  // it keeps what came ahead of the delivered bytes too
    CHECK(kept >= 1000000);            // every byte delivered was written, and the stopped run records what it wrote
    CHECK(kept < kSize);
    f.server->set_faults("{}");
    f.server->reset();
    sink s;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), split_when_starved(), spool,
                                        s.callbacks, retry_transient(3));
    REQUIRE_OK(r);
    CHECK(r->segmented);  // bytes out of order in the spool: ranges at once
    CHECK(r->reused_bytes == kept);
    CHECK(s.hex() == sha256_of(f.blob));
    const std::uint64_t sent = body_bytes(f.server->log());
    CHECK(sent + r->reused_bytes == kSize);  // nothing fetched twice
    CHECK_FALSE(fs::exists(redist::segment_record_path(spool.part_file)));
}

TEST_CASE("split when starved: ranges of another version than the stream's start over", "[segmented]") {
    auto& f = shared_fixture();
    // The slow stream carries another ETag than the ranges after it.
    f.server->set_faults(R"({"/blob.bin": {"rate": 4000000, "etag": "\"v1\"", "times": 1}})");
    const auto spool = part_spool("starved-changed");
    sink s;
    auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), split_when_starved(), spool,
                                        s.callbacks, retry_transient(3));
    REQUIRE_OK(r);
    CHECK(r->segmented);
    CHECK(s.restarts == 1);  // told before any byte of the second version
    CHECK(s.bytes == kSize);
    CHECK(s.hex() == sha256_of(f.blob));
    CHECK(redist_test::slurp(spool.part_file) == f.blob);
}

TEST_CASE("file:// and small files use one stream", "[segmented]") {
    auto& f = shared_fixture();
    const fs::path dir = redist_test::scratch("one-stream");
    redist::spool_location spool;
    spool.temp_dir = dir;
    {
        sink s;
        auto r = redist::segmented_download("file://" + (f.root / "blob.bin").string(), kSize, fast_options(),
                                            small_segments(), spool, s.callbacks, retry_transient(3));
        REQUIRE(r.ok());
        CHECK_FALSE(r->segmented);
        CHECK(s.hex() == sha256_of(f.blob));
    }
    {
        auto options = small_segments();
        options.min_total_bytes = kSize + 1;
        sink s;
        auto r = redist::segmented_download(f.server->url("/blob.bin"), kSize, fast_options(), options, spool,
                                            s.callbacks, retry_transient(3));
        REQUIRE(r.ok());
        CHECK_FALSE(r->segmented);
        CHECK(r->requests == 1);
        CHECK(s.hex() == sha256_of(f.blob));
    }
}

TEST_CASE("the chunk plan: small at both ends, every byte once, present ranges kept", "[segmented]") {
    constexpr std::uint64_t MiB = 1u << 20;
    redist::segment_options o;  // 6 connections, chunks of 4..32 MiB
    const std::uint64_t size = 312 * MiB;
    const auto check_cover = [&](const std::vector<redist::segmenting::chunk>& plan, std::uint64_t from) {
        REQUIRE_FALSE(plan.empty());
        CHECK(plan.front().start == from);
        CHECK(plan.back().end == size);
        for (std::size_t i = 1; i < plan.size(); ++i) CHECK(plan[i].start == plan[i - 1].end);
    };
    const auto plan = redist::segmenting::plan_chunks(0, size, {}, o);
    check_cover(plan, 0);
    std::uint64_t largest = 0;
    for (const auto& c : plan) {
        largest = std::max(largest, c.end - c.start);
        CHECK(c.end - c.start >= o.min_segment_bytes);
        // Near either end a chunk is about the distance to that end over
        // the connections: the first bytes come quickly, and the last
        // chunks finish together instead of one running on alone.
        const std::uint64_t nearest_end = std::min(c.start, size - c.start);
        CHECK(c.end - c.start <= std::max(o.min_segment_bytes * 3 / 2, nearest_end / 6 + 1));
    }
    CHECK(plan.front().end - plan.front().start == o.min_segment_bytes);
    CHECK(plan.back().end - plan.back().start < 2 * o.min_segment_bytes);
    CHECK(largest <= o.max_segment_bytes);
    CHECK(largest > 16 * MiB);  // the middle still uses big requests
    // Whole multiples of 2 MiB (a server pacing in 2 MiB pieces makes a chunk just past one wait a pause).
    for (std::size_t i = 0; i + 1 < plan.size(); ++i) CHECK(plan[i].end % (2 * MiB) == 0);

    // From the middle (a stream that went on in ranges), around a range an earlier run wrote.
    redist::segment_record present;
    present.size = size;
    present.ranges = {{200 * MiB, 210 * MiB}};
    const auto resumed = redist::segmenting::plan_chunks(100 * MiB + 12345, size, present, o);
    check_cover(resumed, 100 * MiB + 12345);
    CHECK(resumed.front().end % (2 * MiB) == 0);  // a stream stopped anywhere: the ranges after it align
    std::uint64_t done = 0;
    for (const auto& c : resumed) {
        if (c.st == redist::segmenting::chunk::state::done) done += c.end - c.start;
        else CHECK(c.done == 0);
    }
    CHECK(done == 10 * MiB);
    CHECK(std::any_of(resumed.begin(), resumed.end(),
                      [&](const auto& c) { return c.start == 200 * MiB && c.end == 210 * MiB && c.done == 10 * MiB; }));
}

TEST_CASE("segment records: round trip and refusals", "[segmented]") {
    redist::segment_record rec;
    rec.size = 1000;
    rec.ranges = {{0, 10}, {20, 30}, {999, 1000}};
    auto back = redist::parse_segment_record(redist::segment_record_to_text(rec), "r");
    REQUIRE(back.ok());
    CHECK(back->size == 1000);
    CHECK(back->ranges == rec.ranges);
    for (const char* bad : {"", "redist-segments 2\nsize 10\n", "redist-segments 1\nsize 0\n",
                            "redist-segments 1\nsize 10\n0 11\n", "redist-segments 1\nsize 10\n5 5\n",
                            "redist-segments 1\nsize 10\n4 6\n0 2\n", "redist-segments 1\nsize 10\n0 2\n2 4\n",
                            "redist-segments 1\nsize 10\n0 2", "redist-segments 1\nsize 10\n-1 2\n",
                            "redist-segments 1\nsize 10\n01 2\n", "redist-segments 1\nsize 99999999999999999999\n"}) {
        auto r = redist::parse_segment_record(bad, "r");
        CHECK_FALSE(r.ok());
        if (!r.ok()) CHECK(r.error_value().code == error_code::bad_manifest);
    }
}
