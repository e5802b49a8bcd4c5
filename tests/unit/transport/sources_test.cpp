// sources_test.cpp — the one source driver and the artifact stream
// (lib/transport/sources.hpp): the retry policy with an injected jitter source and
// sleeper (no real sleeps), try_sources' offline rule, error ranking and
// events, and the artifact stream's resume / Range / validator / .part rules,
// in-process against tests/fixtures/fault_server.py.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "archive/sha256.hpp"
#include "fixtures/fault_server_support.hpp"
#include "support.hpp"
#include "transport/sources.hpp"

namespace fs = std::filesystem;
using namespace redist;
using action = retry_decision::action;
using std::chrono::milliseconds;

namespace {

source_policy policy_of(int attempts = 4, double initial = 0.5, double max_backoff = 20, long max_retry_after = 60) {
    source_policy p;
    p.attempts_per_source = attempts;
    p.initial_backoff_seconds = initial;
    p.max_backoff_seconds = max_backoff;
    p.max_retry_after_seconds = max_retry_after;
    return p;
}

attempt_failure transient_network(std::optional<long> retry_after = std::nullopt) {
    return {error_code::network, true, retry_after};
}

// Remembers every event.
struct recording_observer : run_observer {
    std::vector<retry_event> retries;
    std::vector<source_change_event> changes;
    void on_retry(const retry_event& e) override { retries.push_back(e); }
    void on_source_change(const source_change_event& e) override { changes.push_back(e); }
    std::vector<source_skip_event> skips;
    void on_source_skip(const source_skip_event& e) override { skips.push_back(e); }
};

}  // namespace

// ---- retry_policy ---------------------------------------------------------------------------

TEST_CASE("retry_policy: backoff doubles per attempt, times a jitter from 0.5 up to 1", "[retry_policy]") {
    const retry_policy low(policy_of(), [] { return 0.0; });
    CHECK(low.next(1, transient_network()) == retry_decision{action::retry, milliseconds(250)});
    CHECK(low.next(2, transient_network()) == retry_decision{action::retry, milliseconds(500)});
    CHECK(low.next(3, transient_network()) == retry_decision{action::retry, milliseconds(1000)});
    const retry_policy high(policy_of(), [] { return 0.999; });
    CHECK(high.next(3, transient_network()).delay == milliseconds(1999));
}

TEST_CASE("retry_policy: the backoff is capped at max_backoff_seconds", "[retry_policy]") {
    const retry_policy p(policy_of(40, 0.5, 3), [] { return 0.999; });
    CHECK(p.next(20, transient_network()).delay <= milliseconds(3000));
    CHECK(p.next(20, transient_network()).delay >= milliseconds(2990));
}

TEST_CASE("retry_policy: Retry-After is honoured as given, without jitter", "[retry_policy]") {
    const retry_policy p(policy_of(), [] { return 0.0; });
    CHECK(p.next(1, transient_network(7)) == retry_decision{action::retry, milliseconds(7000)});
    CHECK(p.next(1, transient_network(60)) == retry_decision{action::retry, milliseconds(60000)});
}

TEST_CASE("retry_policy: a Retry-After above the cap moves on to the next source", "[retry_policy]") {
    const retry_policy p(policy_of(4, 0.5, 20, 60), [] { return 0.0; });
    CHECK(p.next(1, transient_network(61)).what == action::next_source);
}

TEST_CASE("retry_policy: after attempts_per_source attempts the next source is tried", "[retry_policy]") {
    const retry_policy p(policy_of(3), [] { return 0.0; });
    CHECK(p.next(2, transient_network()).what == action::retry);
    CHECK(p.next(3, transient_network()).what == action::next_source);
}

TEST_CASE("retry_policy: wrong bytes, not found and permanent failures move on", "[retry_policy]") {
    const retry_policy p(policy_of(), [] { return 0.0; });
    CHECK(p.next(1, {error_code::integrity, false, {}}).what == action::next_source);
    CHECK(p.next(1, {error_code::not_found, false, {}}).what == action::next_source);
    CHECK(p.next(1, {error_code::network, false, {}}).what == action::next_source);
    // A transient flag on wrong bytes does not make the same source right.
    CHECK(p.next(1, {error_code::integrity, true, {}}).what == action::next_source);
}

TEST_CASE("retry_policy: local failures fail at once", "[retry_policy]") {
    const retry_policy p(policy_of(), [] { return 0.0; });
    for (auto code : {error_code::filesystem, error_code::cancelled, error_code::bad_archive,
                      error_code::unsafe_archive, error_code::bad_manifest})
        CHECK(p.next(1, {code, true, {}}).what == action::fail);
}

// ---- try_sources ----------------------------------------------------------------------------

namespace {

using step = std::pair<std::optional<error_code>, bool>;
struct scripted {
    // Per call, in order: the error to return (nullopt: success) and whether it is transient.
    explicit scripted(std::vector<step> steps) : script(std::move(steps)) {}
    std::vector<step> script;
    std::vector<std::string> urls_tried;
    attempt_function fn() {
        return [this](source_attempt& a) -> result<void> {
            const auto step = script.at(urls_tried.size());
            urls_tried.push_back(a.from.url());
            a.failure.transient = step.second;
            if (!step.first) return {};
            return make_error(*step.first, "scripted failure " + std::to_string(urls_tried.size()))
                .with_url(a.from.url());
        };
    }
};

source_run run_with(std::vector<milliseconds>& slept, run_observer* observer, int attempts = 3) {
    source_run run{retry_policy(policy_of(attempts, 1.0, 20), [] { return 0.0; })};
    run.sleep = [&slept](milliseconds d) { slept.push_back(d); };
    run.observer = observer;
    run.component = "libfoo";
    return run;
}

}  // namespace

TEST_CASE("try_sources: a transient failure is retried on the same source after the policy's delay", "[try_sources]") {
    std::vector<milliseconds> slept;
    recording_observer events;
    scripted s({{error_code::network, true}, {error_code::network, true}, {std::nullopt, false}});
    int requests = 0;
    auto done = try_sources(make_sources({"http://a/x", "http://b/x"}), run_with(slept, &events), s.fn(), &requests);
    REQUIRE(done.ok());
    CHECK(done->source == 0);
    CHECK(requests == 3);
    CHECK(s.urls_tried == std::vector<std::string>{"http://a/x", "http://a/x", "http://a/x"});
    CHECK(slept == std::vector<milliseconds>{milliseconds(500), milliseconds(1000)});
    REQUIRE(events.retries.size() == 2);
    CHECK(events.retries[0].component == "libfoo");
    CHECK(events.retries[0].next_attempt == 2);
    CHECK(events.retries[0].attempts == 3);
    CHECK(events.retries[0].delay_seconds == Approx(0.5));
    CHECK(events.retries[0].reason.code == error_code::network);
    CHECK(events.retries[0].reason.message == "scripted failure 1");
    CHECK(events.changes.empty());
}

TEST_CASE("try_sources: exhausted retries move on to the next source with a source-change event", "[try_sources]") {
    std::vector<milliseconds> slept;
    recording_observer events;
    scripted s({{error_code::network, true}, {error_code::network, true}, {std::nullopt, false}});
    auto done = try_sources(make_sources({"http://a/x", "http://b/x"}), run_with(slept, &events, 2), s.fn());
    REQUIRE(done.ok());
    CHECK(done->source == 1);
    CHECK(s.urls_tried == std::vector<std::string>{"http://a/x", "http://a/x", "http://b/x"});
    REQUIRE(events.changes.size() == 1);
    CHECK(events.changes[0].from_url == "http://a/x");
    CHECK(events.changes[0].to_url == "http://b/x");
    CHECK(events.changes[0].reason.message == "scripted failure 2");
}

TEST_CASE("try_sources: offline, only file:// sources are tried", "[try_sources]") {
    std::vector<milliseconds> slept;
    scripted s({{std::nullopt, false}});
    auto run = run_with(slept, nullptr);
    run.offline = true;
    auto done = try_sources(make_sources({"http://a/x", "file:///mirror/x"}), run, s.fn());
    REQUIRE(done.ok());
    CHECK(done->source == 1);
    CHECK(s.urls_tried == std::vector<std::string>{"file:///mirror/x"});

    scripted none({});
    auto failed = try_sources(make_sources({"http://a/x"}), run, none.fn());
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.error_value().code == error_code::not_found);
    CHECK(failed.error_value().message == "offline, and not in the cache");
    CHECK(none.urls_tried.empty());
}

TEST_CASE("try_sources: wrong bytes are reported over a later not-found or network failure", "[try_sources]") {
    std::vector<milliseconds> slept;
    scripted s({{error_code::integrity, false}, {error_code::not_found, false}, {error_code::network, false}});
    auto done = try_sources(make_sources({"http://a/x", "http://b/x", "http://c/x"}), run_with(slept, nullptr), s.fn());
    REQUIRE_FALSE(done.ok());
    CHECK(done.error_value().code == error_code::integrity);
    CHECK(done.error_value().url == "http://a/x");
    CHECK(slept.empty());
}

TEST_CASE("try_sources: a local failure stops at once, without trying other sources", "[try_sources]") {
    std::vector<milliseconds> slept;
    scripted s({{error_code::filesystem, false}});
    auto done = try_sources(make_sources({"http://a/x", "http://b/x"}), run_with(slept, nullptr), s.fn());
    REQUIRE_FALSE(done.ok());
    CHECK(done.error_value().code == error_code::filesystem);
    CHECK(s.urls_tried.size() == 1);
}

// ---- source_health ---------------------------------------------------------------------------

namespace {

// Every call fails as a source that does not answer (connection refused).
attempt_function unreachable_attempt(std::vector<std::string>& tried) {
    return [&tried](source_attempt& a) -> result<void> {
        tried.push_back(a.from.url());
        if (a.from.url().starts_with("http://base")) return {};
        a.failure.transient = true;
        a.failure.unreachable = true;
        return make_error(error_code::network, "Couldn't connect to server").with_url(a.from.url());
    };
}

}  // namespace

TEST_CASE("source_health: a source is named by its origin, and a local one has none", "[source_health]") {
    CHECK(url_origin("http://Mirror.Example:8080/a/b?x#y") == "http://mirror.example:8080");
    CHECK(url_origin("HTTPS://user:pw@h/x") == "https://h:443");
    CHECK(url_origin("https://h:443/y") == url_origin("https://h/x"));
    CHECK(url_origin("http://h:443/x") != url_origin("https://h/x"));
    CHECK(url_origin("http://[::1]/x") == "http://[::1]:80");
    // A registry's origin is its API's, so an oci+http:// registry and an https one on the same host are two.
    CHECK(url_origin("oci://Reg.Example/ns") == "https://reg.example:443");
    CHECK(url_origin("oci+http://127.0.0.1:5000/ns") == "http://127.0.0.1:5000");
    CHECK(url_origin("file:///srv/mirror/x").empty());
    CHECK(url_origin("oci-layout:/srv/layout").empty());
    CHECK(url_origin("ftp://h/x").empty());
    CHECK(url_origin("http:///x").empty());
    CHECK(url_has_user_info("https://u:p@h/x"));
    CHECK_FALSE(url_has_user_info("https://h/x@y"));
}

TEST_CASE("try_sources: a source unreachable twice is skipped for every later artifact, reported once",
          "[try_sources][source_health]") {
    struct mirror_case {
        const char* mirror;
        const char* origin;  // what the skip names: a registry's is its API's
    };
    for (const mirror_case m : {mirror_case{"http://dead:81", "http://dead:81"},
                                mirror_case{"oci+http://dead:5000/fleet", "http://dead:5000"}}) {
        DYNAMIC_SECTION(m.mirror) {
            std::vector<milliseconds> slept;
            recording_observer events;
            auto run = run_with(slept, &events, 4);
            run.health = make_source_health();
            run.mirrors = {m.mirror};
            std::vector<std::string> tried;
            const std::string dead = m.mirror;
            for (const char* name : {"a", "b", "c"}) {
                const std::string file = std::string("/") + name + ".tar.xz";
                auto done = try_sources(make_sources({dead + file, "http://base" + file}), run,
                                        unreachable_attempt(tried));
                REQUIRE(done.ok());
                CHECK(done->source == 1);
            }
            // Two attempts on the dead mirror (one retry), then never again.
            CHECK(tried == std::vector<std::string>{dead + "/a.tar.xz", dead + "/a.tar.xz", "http://base/a.tar.xz",
                                                    "http://base/b.tar.xz", "http://base/c.tar.xz"});
            CHECK(events.retries.size() == 1);
            REQUIRE(events.skips.size() == 1);
            CHECK(events.skips[0].source == m.origin);
            CHECK(events.skips[0].failures == 2);
            CHECK(events.skips[0].reason.message == "Couldn't connect to server");
        }
    }
}

TEST_CASE("try_sources: a skipped mirror fails at once, saying why", "[try_sources][source_health]") {
    std::vector<milliseconds> slept;
    auto run = run_with(slept, nullptr, 4);
    run.health = make_source_health();
    run.mirrors = {"http://dead:81/"};
    std::vector<std::string> tried;
    auto first = try_sources(make_sources({"http://dead:81/x"}), run, unreachable_attempt(tried));
    REQUIRE_FALSE(first.ok());
    CHECK(tried.size() == 2);
    auto second = try_sources(make_sources({"http://dead:81/y"}), run, unreachable_attempt(tried));
    REQUIRE_FALSE(second.ok());
    CHECK(tried.size() == 2);
    CHECK(second.error_value().code == error_code::network);
    CHECK(second.error_value().url == "http://dead:81/y");
    CHECK(second.error_value().message.starts_with("skipped for the rest of this run after 2 failures in a row"));
}

TEST_CASE("try_sources: the base, the last resort, gets every attempt with its backoff however often it is down",
          "[try_sources][source_health]") {
    std::vector<milliseconds> slept;
    recording_observer events;
    auto run = run_with(slept, &events, 10);
    run.health = make_source_health();
    run.mirrors = {"http://mirror:81"};
    std::vector<std::string> tried;
    // A mirror and the base, both restarting: the mirror is skipped after
    // two failures, the base is tried ten times, then again for the next artifact.
    auto first = try_sources(make_sources({"http://mirror:81/x", "http://dead:81/x"}), run, unreachable_attempt(tried));
    REQUIRE_FALSE(first.ok());
    CHECK(std::count(tried.begin(), tried.end(), "http://mirror:81/x") == 2);
    CHECK(std::count(tried.begin(), tried.end(), "http://dead:81/x") == 10);
    REQUIRE(slept.size() == 1 + 9);
    CHECK(slept.back() == milliseconds(10000));  // 2^8 s capped at max_backoff, times the jitter 0.5
    REQUIRE(events.skips.size() == 1);
    CHECK(events.skips[0].source == "http://mirror:81");
    tried.clear();
    auto second = try_sources(make_sources({"http://mirror:81/y", "http://dead:81/y"}), run,
                              unreachable_attempt(tried));
    REQUIRE_FALSE(second.ok());
    CHECK(tried == std::vector<std::string>(10, "http://dead:81/y"));
    // A mirror whose name is a prefix of another URL's host is not that URL's mirror.
    CHECK_FALSE(run.is_mirror("http://mirror:812/x"));
}

TEST_CASE("source_health: an answer in between starts the count over, and an HTTP error is an answer",
          "[source_health]") {
    std::vector<milliseconds> slept;
    auto run = run_with(slept, nullptr, 4);
    run.health = make_source_health();
    run.mirrors = {"http://h"};
    const error refused = make_error(error_code::network, "refused");
    transfer_failure_info down;
    down.transient = true;
    down.unreachable = true;
    transfer_failure_info busy;
    busy.transient = true;
    busy.http_status = 503;
    CHECK(decide_retry(run, "http://h/x", 1, refused, down).what == action::retry);
    CHECK(decide_retry(run, "http://h/x", 2, make_error(error_code::network, "HTTP 503"), busy).what == action::retry);
    CHECK(decide_retry(run, "http://h/x", 3, refused, down).what == action::retry);
    CHECK_FALSE(run.health->skipped("http://h/y"));
    CHECK(decide_retry(run, "http://h/x", 4, refused, down).what == action::next_source);
    CHECK(run.health->skipped("http://h/y"));
}

TEST_CASE("segment_retries: a retry inside a segmented download is decided and reported like any other",
          "[try_sources]") {
    std::vector<milliseconds> slept;
    recording_observer events;
    const auto run = run_with(slept, &events, 3);
    int requests = 0;
    const segment_retry_hook hook = segment_retries(run, "http://a/x.tar.xz", &requests);
    transfer_failure_info f;
    f.transient = true;
    const error e = make_error(error_code::network, "connection reset");
    CHECK(hook(1, e, f) == milliseconds(500));
    CHECK(hook(2, e, f) == milliseconds(1000));
    CHECK(hook(3, e, f) == std::nullopt);  // attempts_per_source reached
    CHECK(requests == 2);                  // one more request per retry
    REQUIRE(events.retries.size() == 2);
    CHECK(events.retries[0].component == "libfoo");
    CHECK(events.retries[0].url == "http://a/x.tar.xz");
    CHECK(events.retries[0].next_attempt == 2);
    CHECK(events.retries[1].reason.message == "connection reset");
}

TEST_CASE("try_sources: an attempt that retried inside is not retried again", "[try_sources]") {
    std::vector<milliseconds> slept;
    recording_observer events;
    std::vector<std::string> tried;
    auto done = try_sources(make_sources({"http://a/x", "http://b/x"}), run_with(slept, &events, 4),
                            [&](source_attempt& a) {
                                tried.push_back(a.from.url());
                                a.retried_inside = true;
                                a.failure.transient = true;
                                return result<void>(make_error(error_code::network, "gave up").with_url(a.from.url()));
                            });
    REQUIRE_FALSE(done.ok());
    CHECK(tried == std::vector<std::string>{"http://a/x", "http://b/x"});
    CHECK(events.retries.empty());
    CHECK(slept.empty());
}

// ---- artifact_stream -------------------------------------------------------------------------

namespace {

// Collects what the stream hands its sink.
struct memory_sink final : byte_sink {
    std::string bytes;
    int restarts = 0;
    result<void> restart() override {
        ++restarts;
        bytes.clear();
        return {};
    }
    result<void> write(const std::byte* data, std::size_t size) override {
        bytes.append(reinterpret_cast<const char*>(data), size);
        return {};
    }
};

std::string random_bytes(std::size_t size, unsigned seed) {
    std::mt19937 gen(seed);
    std::string out(size, '\0');
    for (auto& c : out) c = static_cast<char>(gen() & 0xff);
    return out;
}

result<void> feed(artifact_stream& s, std::string_view bytes) {
    return s.feed(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
}

// One fault server for the whole program (starting Python costs more than the transfers).
struct served {
    fs::path dir;
    std::string body = random_bytes(400'000, 7);
    std::string sha;
    std::unique_ptr<redist_test::fault_server> server;
    served() {
        ::setenv("no_proxy", "127.0.0.1,localhost", 1);
        ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
        dir = fs::path(REDIST_TEST_SCRATCH) / ("server." + std::to_string(::getpid()));
        fs::remove_all(dir);
        redist_test::write(dir / "root" / "a.bin", body);
        sha = sha256_hex(body);
        server = std::make_unique<redist_test::fault_server>(dir / "root", dir / "server");
    }
    ~served() {
        server.reset();
        std::error_code ignored;
        fs::remove_all(dir, ignored);
    }
    served(const served&) = delete;
    served& operator=(const served&) = delete;
    std::string url() const { return server->url("/a.bin"); }
    std::uint64_t bytes_sent() const {
        std::uint64_t n = 0;
        for (const auto& e : server->log())
            if (e.path == "/a.bin") n += e.bytes_sent;
        return n;
    }
};

served& server() {
    static served s;
    s.server->set_faults("{}");
    s.server->reset();
    return s;
}

// The test runs twice: hashing and the tee on the transfer thread, then on
// artifact_stream's hash worker (forced, as this machine may have few cores).
struct hash_thread_mode {
    explicit hash_thread_mode(bool on) { ::setenv("REDIST_HASH_THREAD", on ? "1" : "0", 1); }
    ~hash_thread_mode() { ::unsetenv("REDIST_HASH_THREAD"); }
    hash_thread_mode(const hash_thread_mode&) = delete;
    hash_thread_mode& operator=(const hash_thread_mode&) = delete;
};

transfer_options fast() {
    transfer_options o;
    o.connect_timeout_seconds = 5;
    o.stall_timeout_seconds = 10;
    return o;
}

}  // namespace

TEST_CASE("artifact_stream: more bytes than the manifest's size is an integrity failure", "[artifact_stream]") {
    const hash_thread_mode mode(GENERATE(false, true));
    memory_sink sink;
    artifact_stream s({4, sha256_hex("abcd")}, sink, 1);
    REQUIRE(s.restart().ok());
    REQUIRE(feed(s, "abc").ok());
    auto over = feed(s, "de");
    REQUIRE_FALSE(over.ok());
    CHECK(over.error_value().code == error_code::integrity);
}

namespace {

// The downloader's retry hook: never (each call is one request, as the
// assertions below about one attempt need), or transient failures at once.
const segment_retry_hook no_retry = [](int, const error&, const transfer_failure_info&) {
    return std::optional<milliseconds>();
};
const segment_retry_hook retry_now = [](int attempt, const error&, const transfer_failure_info& f) {
    return f.transient && attempt <= 3 ? std::optional<milliseconds>(milliseconds(1)) : std::nullopt;
};

segment_options one_stream() {
    segment_options o;
    o.connections = 1;
    return o;
}

// One stream without a spool, as redist mirror fetches (the sink holds the bytes).
result<void> fetch(artifact_stream& s, const std::string& url, transfer_failure_info& failure,
                   const segment_retry_hook& retry = no_retry) {
    return s.fetch_from(url, fast(), one_stream(), spool_location{}, retry, failure);
}

spool_location part_spool(const fs::path& part) {
    spool_location spool;
    spool.part_file = part;
    return spool;
}

}  // namespace

TEST_CASE("artifact_stream: a dropped connection is resumed with a Range request (server byte counts)",
          "[artifact_stream]") {
    const hash_thread_mode mode(GENERATE(false, true));
    auto& srv = server();
    srv.server->set_faults(R"({"/a.bin": {"drop_after": 150000, "times": 1}})");
    memory_sink sink;
    artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
    REQUIRE(s.restart().ok());
    transfer_failure_info failure;
    auto first = fetch(s, srv.url(), failure);
    REQUIRE_FALSE(first.ok());
    CHECK(first.error_value().code == error_code::network);
    CHECK(failure.transient);
    CHECK(s.received() == 150000);
    // The next attempt (another source, or this one again): a 206 of the
    // same version keeps the bytes so far.
    transfer_failure_info again;
    REQUIRE(fetch(s, srv.url(), again).ok());
    CHECK(s.verified());
    CHECK(sink.bytes == srv.body);
    CHECK(sink.restarts == 1);
    auto log = srv.server->log();  // in the order requests ended: the dropped one may be logged last
    std::sort(log.begin(), log.end(), [](const auto& a, const auto& b) { return a.began < b.began; });
    REQUIRE(log.size() == 2);
    CHECK(log[1].range == std::optional<std::string>("bytes=150000-"));
    CHECK(srv.bytes_sent() == srv.body.size());  // not one byte twice
}

TEST_CASE("artifact_stream: without a spool, the downloader's retry resumes a dropped connection itself",
          "[artifact_stream]") {
    const hash_thread_mode mode(GENERATE(false, true));
    auto& srv = server();
    srv.server->set_faults(R"({"/a.bin": {"drop_after": 150000, "times": 1}})");
    memory_sink sink;
    artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
    REQUIRE(s.restart().ok());
    transfer_failure_info failure;
    REQUIRE(fetch(s, srv.url(), failure, retry_now).ok());  // one call: the retry is inside
    CHECK(sink.bytes == srv.body);
    CHECK(sink.restarts == 1);
    const auto log = srv.server->log();
    REQUIRE(log.size() == 2);
    CHECK(log[1].range == std::optional<std::string>("bytes=150000-"));
    CHECK(srv.bytes_sent() == srv.body.size());
}

TEST_CASE("artifact_stream: attempts_per_source caps one stream's requests on a source, progress or not",
          "[artifact_stream]") {
    auto& srv = server();
    srv.server->set_faults(R"({"/a.bin": {"drop_after": 1000}})");  // every request: 1,000 bytes more, then a drop
    source_run run{retry_policy(policy_of(3, 0.001, 0.001), [] { return 0.0; })};
    recording_observer events;
    run.observer = &events;
    memory_sink sink;
    artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
    REQUIRE(s.restart().ok());
    int requests = 0;
    transfer_failure_info failure;
    auto done = fetch(s, srv.url(), failure, segment_retries(run, srv.url(), &requests));
    REQUIRE_FALSE(done.ok());
    CHECK(done.error_value().code == error_code::network);
    CHECK(srv.server->log().size() == 3);
    CHECK(events.retries.size() == 2);
    CHECK(requests == 2);
    CHECK(s.received() == 3000);  // kept for the next source
}

TEST_CASE("artifact_stream: the sink's bytes of an earlier process are resumed with a Range request",
          "[artifact_stream]") {
    auto& srv = server();
    const fs::path dir = redist_test::scratch("held-bytes");
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    redist_test::write(dir / ("a.bin.part." + std::to_string(child)), srv.body.substr(0, 123456));
    file_sink sink(dir / "a.bin");
    artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
    auto resumed = s.resume_or_restart();
    REQUIRE(resumed.ok());
    CHECK(*resumed);
    transfer_failure_info failure;
    REQUIRE(fetch(s, srv.url(), failure).ok());
    REQUIRE(sink.commit().ok());
    CHECK(redist_test::slurp(dir / "a.bin") == srv.body);
    const auto log = srv.server->log();
    REQUIRE(log.size() == 1);
    CHECK(log[0].range == std::optional<std::string>("bytes=123456-"));
}

TEST_CASE("artifact_stream: a server that ignores Range: the same version is skipped, another starts over",
          "[artifact_stream]") {
    const hash_thread_mode mode(GENERATE(false, true));
    const bool same_version = GENERATE(true, false);
    CAPTURE(same_version);
    auto& srv = server();
    srv.server->set_faults(R"({"/a.bin": {"drop_after": 100000, "times": 1, "etag": "\"v1\""}})");
    memory_sink sink;
    artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
    REQUIRE(s.restart().ok());
    // Between the two requests of the one call, the server stops honouring Range.
    const segment_retry_hook then_ignore_range = [&](int attempt, const error&, const transfer_failure_info&) {
        srv.server->set_faults(same_version ? R"({"/a.bin": {"ignore_range": true, "etag": "\"v1\""}})"
                                            : R"({"/a.bin": {"ignore_range": true}})");
        return attempt == 1 ? std::optional<milliseconds>(milliseconds(1)) : std::nullopt;
    };
    transfer_failure_info failure;
    REQUIRE(fetch(s, srv.url(), failure, then_ignore_range).ok());
    CHECK(sink.bytes == srv.body);
    // Skipped: not one byte delivered twice. Another (or an unknown)
    // version: its body from byte 0, without another request.
    CHECK(sink.restarts == (same_version ? 1 : 2));
    const auto log = srv.server->log();
    REQUIRE(log.size() == 2);
    CHECK(log[1].status == 200);
    CHECK(srv.bytes_sent() == 100000 + srv.body.size());
}

TEST_CASE("artifact_stream: an ETag that changes between attempts drops the bytes, transient", "[artifact_stream]") {
    const hash_thread_mode mode(GENERATE(false, true));
    auto& srv = server();
    srv.server->set_faults(R"({"/a.bin": {"drop_after": 100000, "times": 1, "etag": "\"v1\""}})");
    memory_sink sink;
    artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
    REQUIRE(s.restart().ok());
    std::vector<transfer_failure_info> asked;
    const segment_retry_hook then_v2 = [&](int, const error&, const transfer_failure_info& f) {
        asked.push_back(f);
        srv.server->set_faults(R"({"/a.bin": {"etag": "\"v2\""}})");
        return asked.size() == 1 ? std::optional<milliseconds>(milliseconds(1)) : std::nullopt;
    };
    transfer_failure_info changed;
    auto second = fetch(s, srv.url(), changed, then_v2);
    REQUIRE_FALSE(second.ok());
    CHECK(second.error_value().code == error_code::network);
    CHECK(second.error_value().message == "the file changed during the download");
    REQUIRE(asked.size() == 2);
    CHECK(asked[1].transient);  // the hook may retry it, from byte 0
    CHECK(changed.transient);
    CHECK(s.received() == 0);
    CHECK(srv.server->log().back().range == std::optional<std::string>("bytes=100000-"));
    transfer_failure_info third;
    REQUIRE(fetch(s, srv.url(), third).ok());
    CHECK(sink.bytes == srv.body);
    CHECK_FALSE(srv.server->log().back().range);
}

TEST_CASE("artifact_stream: a Content-Length other than what is left is an integrity failure", "[artifact_stream]") {
    auto& srv = server();
    srv.server->set_faults(R"({"/a.bin": {"drop_after": 100000, "times": 1, "etag": "\"v1\""}})");
    memory_sink sink;
    artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
    REQUIRE(s.restart().ok());
    transfer_failure_info failure;
    REQUIRE_FALSE(fetch(s, srv.url(), failure).ok());
    // The same version, says the server, but 100,000 bytes shorter.
    redist_test::write(srv.dir / "root" / "short.bin", srv.body.substr(0, 300000));
    srv.server->set_faults(R"({"/a.bin": {"serve": "/short.bin", "etag": "\"v1\""}})");
    transfer_failure_info again;
    auto bad = fetch(s, srv.url(), again);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error_value().code == error_code::integrity);
    CHECK(bad.error_value().expected == "300000");
    CHECK(bad.error_value().actual == "200000");
    CHECK(s.received() == 0);  // wrong bytes: the next source starts over
}

TEST_CASE("artifact_stream: the .part spool is kept after a network failure and resumed by the next stream",
          "[artifact_stream]") {
    const hash_thread_mode mode(GENERATE(false, true));
    auto& srv = server();
    const fs::path dir = redist_test::scratch("tee");
    const fs::path part = dir / "blob.part";
    srv.server->set_faults(R"({"/a.bin": {"drop_after": 120000, "times": 1}})");
    {
        memory_sink sink;
        artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
        REQUIRE(s.restart().ok());
        transfer_failure_info failure;
        REQUIRE_FALSE(s.fetch_from(srv.url(), fast(), one_stream(), part_spool(part), no_retry, failure).ok());
    }
    REQUIRE(fs::file_size(part) == 120000);  // every byte delivered, though fewer than one write's batch
    CHECK(redist_test::slurp(part) == srv.body.substr(0, 120000));

    // A later process: the .part goes through hash and sink, then is resumed.
    memory_sink sink;
    artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
    REQUIRE(s.restart().ok());
    spool_location spool = part_spool(part);
    std::uint64_t told = 0;
    spool.on_resume = [&](std::uint64_t present) { told = present; };
    transfer_failure_info failure;
    REQUIRE(s.fetch_from(srv.url(), fast(), one_stream(), spool, no_retry, failure).ok());
    CHECK(told == 120000);
    CHECK(sink.bytes == srv.body);
    CHECK(redist_test::slurp(part) == srv.body);
    const auto log = srv.server->log();
    REQUIRE(log.size() == 2);
    CHECK(log[1].range == std::optional<std::string>("bytes=120000-"));
}

TEST_CASE("artifact_stream: wrong bytes remove the .part spool", "[artifact_stream]") {
    const hash_thread_mode mode(GENERATE(false, true));
    auto& srv = server();
    const fs::path dir = redist_test::scratch("tee-corrupt");
    const fs::path part = dir / "blob.part";
    srv.server->set_faults(R"({"/a.bin": {"corrupt_byte_at": 5}})");
    memory_sink sink;
    artifact_stream s({srv.body.size(), srv.sha}, sink, 1);
    REQUIRE(s.restart().ok());
    transfer_failure_info failure;
    auto done = s.fetch_from(srv.url(), fast(), one_stream(), part_spool(part), no_retry, failure);
    REQUIRE_FALSE(done.ok());
    CHECK(done.error_value().code == error_code::integrity);
    CHECK(s.received() == 0);
    CHECK_FALSE(fs::exists(part));
}

// ---- file_sink -------------------------------------------------------------------------------

TEST_CASE("file_sink: nothing is under the final name before commit", "[file_sink]") {
    const fs::path dir = redist_test::scratch("file-sink");
    file_sink sink(dir / "a.bin");
    artifact_stream s({3, sha256_hex("xyz")}, sink, 1);
    REQUIRE(s.restart().ok());
    REQUIRE(feed(s, "xyz").ok());
    REQUIRE(s.verify("test").ok());
    CHECK_FALSE(fs::exists(dir / "a.bin"));
    REQUIRE(sink.commit().ok());
    CHECK(redist_test::slurp(dir / "a.bin") == "xyz");
    CHECK_FALSE(fs::exists(sink.part_path()));
}

TEST_CASE("file_sink: the .part file of a dead process is adopted and resumed", "[file_sink]") {
    const fs::path dir = redist_test::scratch("file-sink-adopt");
    const pid_t child = ::fork();
    if (child == 0) ::_exit(0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);  // its pid is now free: a dead process
    redist_test::write(dir / ("a.bin.part." + std::to_string(child)), "abc");

    file_sink sink(dir / "a.bin");
    artifact_stream s({6, sha256_hex("abcdef")}, sink, 1);
    auto resumed = s.resume_or_restart();
    REQUIRE(resumed.ok());
    CHECK(*resumed);
    CHECK(s.received() == 3);
    REQUIRE(feed(s, "def").ok());
    REQUIRE(s.verify("test").ok());
    REQUIRE(sink.commit().ok());
    CHECK(redist_test::slurp(dir / "a.bin") == "abcdef");
    CHECK_FALSE(fs::exists(dir / ("a.bin.part." + std::to_string(child))));
}
