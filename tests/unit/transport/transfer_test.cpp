// transfer_test.cpp — download()/fetch_text() against a misbehaving loopback
// server (tests/fixtures/fault_server.py) and file:// URLs.
#include "redist/transfer.hpp"
#include "archive/sha256.hpp"
#include "transport/http_request.hpp"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include "fixtures/fault_server_support.hpp"

namespace fs = std::filesystem;
using redist::error_code;

namespace {

std::string random_bytes(std::size_t size, unsigned seed) {
    std::mt19937 gen(seed);
    std::string out(size, '\0');
    for (auto& c : out) c = static_cast<char>(gen() & 0xff);
    return out;
}

void write_file(const fs::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

// A scratch dir with a served root holding a few generated files, and one
// fault server for the whole file (starting Python costs more than all the
// transfers together). Each test case gets it back reset: no faults, empty log.
struct fixture {
    fs::path dir;
    fs::path root;
    std::string blob;  // 300 KB: several curl buffers
    std::string big;   // 3 MB: many callbacks
    std::unique_ptr<redist_test::fault_server> server;

    fixture() {
        // Never send the loopback traffic through a proxy from the environment.
        ::setenv("no_proxy", "127.0.0.1,localhost", 1);
        ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
        // Per process: ctest runs each test case as its own process, maybe in parallel.
        dir = fs::path(REDIST_TEST_SCRATCH) / ("server." + std::to_string(::getpid()));
        fs::remove_all(dir);
        root = dir / "root";
        fs::create_directories(root);
        blob = random_bytes(300'000, 1);
        big = random_bytes(3'000'000, 2);
        write_file(root / "blob.bin", blob);
        write_file(root / "big.bin", big);
        write_file(root / "empty.bin", "");
        server = std::make_unique<redist_test::fault_server>(root, dir / "server");
    }
    ~fixture() {
        server.reset();  // stops the server before its files go away
        std::error_code ignored;
        fs::remove_all(dir, ignored);
    }
    fixture(const fixture&) = delete;
    fixture& operator=(const fixture&) = delete;
};

fixture& shared_fixture() {
    static fixture f;  // destroyed at exit, which stops the server
    f.server->set_faults("{}");
    f.server->reset();
    return f;
}

// Collects what download() hands to the callbacks.
struct collector {
    int responses = 0;
    redist::response_info info;
    std::string body;
    std::size_t chunks = 0;
    redist::download_callbacks callbacks;

    collector() {
        callbacks.on_response = [this](const redist::response_info& i) -> redist::result<void> {
            ++responses;
            info = i;
            return {};
        };
        callbacks.on_data = [this](const std::byte* data, std::size_t size) -> redist::result<void> {
            ++chunks;
            body.append(reinterpret_cast<const char*>(data), size);
            return {};
        };
    }
};

redist::transfer_options fast_options() {
    redist::transfer_options o;
    o.connect_timeout_seconds = 5;
    o.stall_timeout_seconds = 10;
    return o;
}

// A loopback port with nobody listening (bound, then released).
int unused_port() {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(s >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    ::close(s);
    return ntohs(addr.sin_port);
}

bool one_line(const std::string& s) { return s.find('\n') == std::string::npos && s.find('\r') == std::string::npos; }

}  // namespace

TEST_CASE("full download delivers exactly the file's bytes", "[transfer]") {
    fixture& f = shared_fixture();
    collector c;
    redist::transfer_failure_info failure;
    auto r = redist::download(f.server->url("/blob.bin"), fast_options(), c.callbacks, 0, &failure);
    REQUIRE(r.ok());
    CHECK(c.responses == 1);
    CHECK(c.info.status == 200);
    CHECK(c.info.content_length == static_cast<std::int64_t>(f.blob.size()));
    CHECK_FALSE(c.info.partial);
    CHECK(c.info.etag.size() > 2);
    CHECK(c.info.etag.front() == '"');
    CHECK(c.info.last_modified.find("GMT") != std::string::npos);
    CHECK(c.body.size() == f.blob.size());
    CHECK(redist::sha256_hex(c.body) == redist::sha256_file(f.root / "blob.bin").value());

    // The request asked for no content coding.
    const auto log = f.server->log();
    REQUIRE(log.size() == 1);
    CHECK(log[0].method == "GET");
    CHECK_FALSE(log[0].range.has_value());
    CHECK(log[0].bytes_sent == f.blob.size());
}

TEST_CASE("a large body arrives in many chunks, in order", "[transfer]") {
    fixture& f = shared_fixture();
    collector c;
    REQUIRE(redist::download(f.server->url("/big.bin"), fast_options(), c.callbacks).ok());
    CHECK(c.chunks > 1);
    CHECK(c.body == f.big);
}

TEST_CASE("an empty 2xx body still reports the response", "[transfer]") {
    fixture& f = shared_fixture();
    collector c;
    REQUIRE(redist::download(f.server->url("/empty.bin"), fast_options(), c.callbacks).ok());
    CHECK(c.responses == 1);
    CHECK(c.info.status == 200);
    CHECK(c.info.content_length == 0);
    CHECK(c.body.empty());
}

TEST_CASE("the system CA bundle: libcurl's default, else where the distribution keeps it", "[transfer]") {
    std::set<std::string> files;
    const auto is_file = [&](const std::string& p) { return files.count(p) != 0; };
    const std::string debian = "/etc/ssl/certs/ca-certificates.crt";
    // Debian: libcurl's built-in default exists, nothing is set.
    files = {debian};
    CHECK(redist::system_ca_bundle(debian, is_file).empty());
    // RHEL 9: the Debian path is missing, RHEL's bundle is used.
    files = {"/etc/pki/tls/certs/ca-bundle.crt", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"};
    CHECK(redist::system_ca_bundle(debian, is_file) == "/etc/pki/tls/certs/ca-bundle.crt");
    files = {"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"};
    CHECK(redist::system_ca_bundle(debian, is_file) == "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem");
    // Alpine; and a libcurl built without a default.
    files = {"/etc/ssl/cert.pem"};
    CHECK(redist::system_ca_bundle(debian, is_file) == "/etc/ssl/cert.pem");
    files = {debian};
    CHECK(redist::system_ca_bundle("", is_file) == debian);
    // Nothing anywhere: libcurl's default stays, and its error names it.
    files = {};
    CHECK(redist::system_ca_bundle(debian, is_file).empty());
}

TEST_CASE("HTTP status classification", "[transfer]") {
    fixture& f = shared_fixture();
    redist::transfer_options o = fast_options();

    SECTION("missing file: 404 -> not_found") {
        collector c;
        redist::transfer_failure_info failure;
        auto r = redist::download(f.server->url("/nope.bin"), o, c.callbacks, 0, &failure);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::not_found);
        CHECK(r.error_value().url == f.server->url("/nope.bin"));
        CHECK(r.error_value().message.find("404") != std::string::npos);
        CHECK(failure.http_status == 404);
        CHECK_FALSE(failure.transient);
        CHECK(c.responses == 0);
        CHECK(c.chunks == 0);  // the error page is never delivered
    }
    SECTION("410 -> not_found") {
        f.server->set_faults(R"({"/blob.bin": {"status": 410}})");
        collector c;
        auto r = redist::download(f.server->url("/blob.bin"), o, c.callbacks);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::not_found);
    }
    SECTION("503 -> transient network error, body not delivered") {
        f.server->set_faults(R"({"/blob.bin": {"status": 503}})");
        collector c;
        redist::transfer_failure_info failure;
        auto r = redist::download(f.server->url("/blob.bin"), o, c.callbacks, 0, &failure);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::network);
        CHECK(r.error_value().message.find("503") != std::string::npos);
        CHECK(one_line(r.error_value().message));
        CHECK(failure.transient);
        CHECK(failure.http_status == 503);
        CHECK_FALSE(failure.retry_after_seconds.has_value());
        CHECK(c.responses == 0);
        CHECK(c.chunks == 0);
    }
    SECTION("408 -> transient") {
        f.server->set_faults(R"({"/blob.bin": {"status": 408}})");
        collector c;
        redist::transfer_failure_info failure;
        REQUIRE_FALSE(redist::download(f.server->url("/blob.bin"), o, c.callbacks, 0, &failure).ok());
        CHECK(failure.transient);
    }
    SECTION("403 -> permanent network error") {
        f.server->set_faults(R"({"/blob.bin": {"status": 403}})");
        collector c;
        redist::transfer_failure_info failure;
        auto r = redist::download(f.server->url("/blob.bin"), o, c.callbacks, 0, &failure);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::network);
        CHECK_FALSE(failure.transient);
        CHECK(failure.http_status == 403);
    }
    SECTION("429 with Retry-After seconds") {
        f.server->set_faults(R"({"/blob.bin": {"status": 429, "retry_after": 7}})");
        collector c;
        redist::transfer_failure_info failure;
        auto r = redist::download(f.server->url("/blob.bin"), o, c.callbacks, 0, &failure);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::network);
        CHECK(failure.transient);
        CHECK(failure.http_status == 429);
        REQUIRE(failure.retry_after_seconds.has_value());
        CHECK(*failure.retry_after_seconds == 7);
    }
    SECTION("503 with Retry-After as an HTTP-date") {
        char date[64];
        const std::time_t when = std::time(nullptr) + 30;
        std::tm tm{};
        gmtime_r(&when, &tm);
        std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        f.server->set_faults(std::string(R"({"/blob.bin": {"status": 503, "retry_after": ")") + date + "\"}}");
        collector c;
        redist::transfer_failure_info failure;
        REQUIRE_FALSE(redist::download(f.server->url("/blob.bin"), o, c.callbacks, 0, &failure).ok());
        REQUIRE(failure.retry_after_seconds.has_value());
        CHECK(*failure.retry_after_seconds >= 27);
        CHECK(*failure.retry_after_seconds <= 30);
    }
    SECTION("a fault limited to the first request: the second succeeds") {
        f.server->set_faults(R"({"/blob.bin": {"status": 503, "times": 1}})");
        collector first;
        REQUIRE_FALSE(redist::download(f.server->url("/blob.bin"), o, first.callbacks).ok());
        collector second;
        REQUIRE(redist::download(f.server->url("/blob.bin"), o, second.callbacks).ok());
        CHECK(second.body == f.blob);
    }
}

TEST_CASE("credentials never appear in errors", "[transfer]") {
    fixture& f = shared_fixture();
    collector c;
    const std::string url = "http://user:s3cret@127.0.0.1:" + std::to_string(f.server->port()) + "/nope.bin";
    auto r = redist::download(url, fast_options(), c.callbacks);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().describe().find("s3cret") == std::string::npos);
    CHECK(r.error_value().url.find("127.0.0.1") != std::string::npos);
}

TEST_CASE("redirects are followed, but never to file://", "[transfer]") {
    fixture& f = shared_fixture();
    f.server->set_faults(R"({"/old.bin": {"status": 302, "location": "/blob.bin"},
                             "/evil.bin": {"status": 302, "location": "file:///etc/passwd"}})");
    collector c;
    REQUIRE(redist::download(f.server->url("/old.bin"), fast_options(), c.callbacks).ok());
    CHECK(c.responses == 1);
    CHECK(c.info.status == 200);
    CHECK(c.body == f.blob);

    collector evil;
    redist::transfer_failure_info failure;
    auto r = redist::download(f.server->url("/evil.bin"), fast_options(), evil.callbacks, 0, &failure);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::network);
    CHECK_FALSE(failure.transient);
    CHECK(evil.chunks == 0);
}

TEST_CASE("connection dropped mid-body is transient, after exactly N bytes", "[transfer]") {
    fixture& f = shared_fixture();
    const std::size_t n = 100'000;
    for (const char* mode : {"fin", "rst"}) {
        f.server->set_faults(std::string(R"({"/blob.bin": {"drop_after": 100000, "drop_mode": ")") + mode + "\"}}");
        collector c;
        redist::transfer_failure_info failure;
        auto r = redist::download(f.server->url("/blob.bin"), fast_options(), c.callbacks, 0, &failure);
        INFO("drop mode " << mode);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::network);
        CHECK(failure.transient);
        CHECK(one_line(r.error_value().message));
        CHECK(c.responses == 1);
        if (std::string(mode) == "fin") {
            // A clean close: everything the server sent arrived.
            CHECK(c.body.size() == n);
        } else {
            // A reset may discard data still in flight; never more than sent.
            CHECK(c.body.size() <= n);
        }
        CHECK(c.body == f.blob.substr(0, c.body.size()));
    }
}

TEST_CASE("resume asks for the rest and reports partial", "[transfer]") {
    fixture& f = shared_fixture();
    const std::uint64_t n = 123'457;
    collector c;
    auto r = redist::download(f.server->url("/blob.bin"), fast_options(), c.callbacks, n);
    REQUIRE(r.ok());
    CHECK(c.info.status == 206);
    CHECK(c.info.partial);
    CHECK(c.info.content_length == static_cast<std::int64_t>(f.blob.size() - n));
    CHECK(c.body == f.blob.substr(n));

    const auto log = f.server->log();
    REQUIRE(log.size() == 1);
    REQUIRE(log[0].range.has_value());
    CHECK(*log[0].range == "bytes=123457-");
    CHECK(log[0].status == 206);
    CHECK(log[0].bytes_sent == f.blob.size() - n);

    SECTION("drop, then resume from what arrived: the pieces make the file") {
        f.server->reset();
        f.server->set_faults(R"({"/blob.bin": {"drop_after": 50000, "times": 1}})");
        collector first;
        REQUIRE_FALSE(redist::download(f.server->url("/blob.bin"), fast_options(), first.callbacks).ok());
        REQUIRE(first.body.size() == 50'000);
        collector rest;
        REQUIRE(redist::download(f.server->url("/blob.bin"), fast_options(), rest.callbacks, first.body.size()).ok());
        CHECK(rest.info.partial);
        CHECK(redist::sha256_hex(first.body + rest.body) == redist::sha256_hex(f.blob));
    }
    SECTION("resuming past the end is a permanent error (416)") {
        collector past;
        redist::transfer_failure_info failure;
        auto past_r = redist::download(f.server->url("/blob.bin"), fast_options(), past.callbacks, f.blob.size() + 10,
                                       &failure);
        REQUIRE_FALSE(past_r.ok());
        CHECK(past_r.error_value().code == error_code::network);
        CHECK(failure.http_status == 416);
        CHECK_FALSE(failure.transient);
    }
}

TEST_CASE("a 206 for a different range than asked is refused", "[transfer]") {
    fixture& f = shared_fixture();
    f.server->set_faults(R"({"/blob.bin": {"range_shift": 10}})");
    collector c;
    redist::transfer_failure_info failure;
    auto r = redist::download(f.server->url("/blob.bin"), fast_options(), c.callbacks, 1000, &failure);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::network);
    CHECK(r.error_value().message.find("Content-Range") != std::string::npos);
    CHECK(r.error_value().url == f.server->url("/blob.bin"));
    CHECK_FALSE(failure.transient);
    CHECK(c.responses == 0);
    CHECK(c.chunks == 0);
}

TEST_CASE("the CA bundle comes from options, else SSL_CERT_FILE", "[transfer]") {
    // No TLS server here: a CA file that does not exist fails while curl sets
    // up TLS, before any byte is exchanged, which proves the setting is used.
    fixture& f = shared_fixture();
    const std::string url = "https://127.0.0.1:" + std::to_string(f.server->port()) + "/blob.bin";
    const std::string missing_ca = (f.dir / "no-such-ca.pem").string();

    redist::transfer_options o = fast_options();
    o.ca_file = missing_ca;
    collector c;
    redist::transfer_failure_info failure;
    auto r = redist::download(url, o, c.callbacks, 0, &failure);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::network);
    CHECK_FALSE(failure.transient);  // a broken CA setup does not heal by retrying
    CHECK(c.chunks == 0);

    ::setenv("SSL_CERT_FILE", missing_ca.c_str(), 1);
    collector env;
    redist::transfer_failure_info env_failure;
    auto env_r = redist::download(url, fast_options(), env.callbacks, 0, &env_failure);
    ::unsetenv("SSL_CERT_FILE");
    REQUIRE_FALSE(env_r.ok());
    CHECK(env_r.error_value().message == r.error_value().message);
    CHECK_FALSE(env_failure.transient);
}

TEST_CASE("a server ignoring Range gets partial=false and the whole body", "[transfer]") {
    fixture& f = shared_fixture();
    f.server->set_faults(R"({"/blob.bin": {"ignore_range": true}})");
    collector c;
    auto r = redist::download(f.server->url("/blob.bin"), fast_options(), c.callbacks, 1000);
    REQUIRE(r.ok());
    CHECK(c.info.status == 200);
    CHECK_FALSE(c.info.partial);
    CHECK(c.info.content_length == static_cast<std::int64_t>(f.blob.size()));
    CHECK(c.body == f.blob);
}

TEST_CASE("the ETag and corrupt bytes reach the caller as served", "[transfer]") {
    fixture& f = shared_fixture();
    collector before;
    REQUIRE(redist::download(f.server->url("/blob.bin"), fast_options(), before.callbacks).ok());
    f.server->set_faults(R"({"/blob.bin": {"etag": "\"v2\"", "corrupt_byte_at": 777}})");
    collector after;
    REQUIRE(redist::download(f.server->url("/blob.bin"), fast_options(), after.callbacks).ok());
    CHECK(after.info.etag == "\"v2\"");
    CHECK(after.info.etag != before.info.etag);
    REQUIRE(after.body.size() == f.blob.size());
    CHECK(after.body != f.blob);
    CHECK(after.body.substr(0, 777) == f.blob.substr(0, 777));
    CHECK(after.body.substr(778) == f.blob.substr(778));
    CHECK(redist::check_integrity(f.blob.size(), redist::sha256_hex(f.blob), after.body.size(),
                                  redist::sha256_hex(after.body), "x")
              .error_value()
              .message == "sha256 mismatch");
}

TEST_CASE("a stalled transfer fails as transient within the stall timeout", "[transfer]") {
    fixture& f = shared_fixture();
    f.server->set_faults(R"({"/blob.bin": {"stall_after": 1000, "stall_seconds": 15}})");
    redist::transfer_options o = fast_options();
    o.stall_timeout_seconds = 1;
    collector c;
    redist::transfer_failure_info failure;
    const auto start = std::chrono::steady_clock::now();
    auto r = redist::download(f.server->url("/blob.bin"), o, c.callbacks, 0, &failure);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::network);
    CHECK(r.error_value().message == "stalled: no data for 1 s");
    CHECK(failure.transient);
    CHECK_FALSE(failure.unreachable);  // it answered, then went quiet
    CHECK(c.body.size() == 1000);
    CHECK(elapsed >= std::chrono::milliseconds(900));
    CHECK(elapsed < std::chrono::milliseconds(3500));
}

TEST_CASE("a refused connection is transient", "[transfer]") {
    collector c;
    redist::transfer_failure_info failure;
    const std::string url = "http://127.0.0.1:" + std::to_string(unused_port()) + "/x";
    auto r = redist::download(url, fast_options(), c.callbacks, 0, &failure);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::network);
    CHECK(failure.transient);
    CHECK(failure.unreachable);
    CHECK(r.error_value().url == url);
    CHECK(one_line(r.error_value().message));
    CHECK(c.responses == 0);
}

TEST_CASE("a server that accepts and never answers is unreachable, and an HTTP error is not", "[transfer]") {
    fixture& f = shared_fixture();
    f.server->set_faults(R"({"/blob.bin": {"delay_seconds": 15}})");
    redist::transfer_options o = fast_options();
    o.stall_timeout_seconds = 1;
    collector c;
    redist::transfer_failure_info failure;
    auto r = redist::download(f.server->url("/blob.bin"), o, c.callbacks, 0, &failure);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().message == "stalled: no data for 1 s");
    CHECK(failure.transient);
    CHECK(failure.unreachable);
    CHECK(c.responses == 0);

    f.server->set_faults(R"({"/blob.bin": {"status": 503}})");
    collector busy;
    r = redist::download(f.server->url("/blob.bin"), fast_options(), busy.callbacks, 0, &failure);
    REQUIRE_FALSE(r.ok());
    CHECK(failure.transient);
    CHECK_FALSE(failure.unreachable);
    CHECK(failure.http_status == 503);
    f.server->set_faults("{}");
}

TEST_CASE("a callback's error propagates unchanged and stops the transfer", "[transfer]") {
    fixture& f = shared_fixture();
    const auto marker = redist::make_error(error_code::integrity, "content-length disagrees with the manifest")
                            .with_path("/some/where")
                            .with_expected_actual("1", "2");

    SECTION("from on_data") {
        std::size_t calls = 0;
        bool called_after_error = false;
        bool failed = false;
        redist::download_callbacks cb;
        cb.on_data = [&](const std::byte*, std::size_t) -> redist::result<void> {
            if (failed) called_after_error = true;
            if (++calls == 2) {
                failed = true;
                return redist::error(marker);
            }
            return {};
        };
        redist::transfer_failure_info failure;
        auto r = redist::download(f.server->url("/big.bin"), fast_options(), cb, 0, &failure);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == marker.code);
        CHECK(r.error_value().message == marker.message);
        CHECK(r.error_value().path == marker.path);
        CHECK(r.error_value().url.empty());  // unchanged: download() adds nothing
        CHECK(r.error_value().expected == "1");
        CHECK(calls == 2);
        CHECK_FALSE(called_after_error);
        CHECK_FALSE(failure.transient);
    }
    SECTION("from on_response: no body byte is delivered") {
        collector c;
        c.callbacks.on_response = [&](const redist::response_info&) -> redist::result<void> {
            return redist::error(marker);
        };
        auto r = redist::download(f.server->url("/big.bin"), fast_options(), c.callbacks);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().message == marker.message);
        CHECK(c.chunks == 0);
    }
    SECTION("an exception in a callback becomes an internal error") {
        redist::download_callbacks cb;
        cb.on_data = [](const std::byte*, std::size_t) -> redist::result<void> { throw std::runtime_error("boom"); };
        auto r = redist::download(f.server->url("/blob.bin"), fast_options(), cb);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::internal);
        CHECK(r.error_value().message.find("boom") != std::string::npos);
    }
}

TEST_CASE("file:// downloads", "[transfer]") {
    const fs::path dir = fs::path(REDIST_TEST_SCRATCH) / ("file_url." + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string data = random_bytes(200'001, 3);
    write_file(dir / "a.bin", data);
    const std::string url = "file://" + (dir / "a.bin").string();

    collector c;
    REQUIRE(redist::download(url, fast_options(), c.callbacks).ok());
    CHECK(c.responses == 1);
    CHECK(c.info.status == 0);
    CHECK(c.info.content_length == static_cast<std::int64_t>(data.size()));
    CHECK_FALSE(c.info.partial);
    CHECK(c.body == data);

    collector resumed;
    REQUIRE(redist::download(url, fast_options(), resumed.callbacks, 1000).ok());
    CHECK(resumed.info.partial);
    CHECK(resumed.info.content_length == static_cast<std::int64_t>(data.size() - 1000));
    CHECK(resumed.body == data.substr(1000));

    collector missing;
    redist::transfer_failure_info failure;
    auto r = redist::download("file://" + (dir / "missing.bin").string(), fast_options(), missing.callbacks, 0,
                              &failure);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::not_found);
    CHECK_FALSE(failure.transient);
    CHECK(missing.responses == 0);
    fs::remove_all(dir);
}

TEST_CASE("fetch_text caps the body size", "[transfer]") {
    fixture& f = shared_fixture();
    write_file(f.root / "index.html", "<html>cudnn 9.27.0</html>\n");

    auto ok = redist::fetch_text(f.server->url("/index.html"), fast_options());
    REQUIRE(ok.ok());
    CHECK(*ok == "<html>cudnn 9.27.0</html>\n");

    auto exact = redist::fetch_text(f.server->url("/index.html"), fast_options(), 26);
    REQUIRE(exact.ok());
    CHECK(exact->size() == 26);

    redist::transfer_failure_info failure;
    auto capped = redist::fetch_text(f.server->url("/blob.bin"), fast_options(), 1000, &failure);
    REQUIRE_FALSE(capped.ok());
    CHECK(capped.error_value().code == error_code::network);
    CHECK(capped.error_value().message.find("larger than 1000 bytes") != std::string::npos);
    CHECK_FALSE(failure.transient);

    auto missing = redist::fetch_text(f.server->url("/nope"), fast_options());
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error_value().code == error_code::not_found);

    // The cap also holds when no Content-Length announces the size up front,
    // while the body streams in.
    f.server->set_faults(R"({"/big.bin": {"no_content_length": true}})");
    auto big = redist::fetch_text(f.server->url("/big.bin"), fast_options(), 2'000'000);
    REQUIRE_FALSE(big.ok());
    CHECK(big.error_value().message.find("larger than 2000000 bytes") != std::string::npos);
    auto unannounced = redist::fetch_text(f.server->url("/big.bin"), fast_options(), 3'000'000);
    REQUIRE(unannounced.ok());
    CHECK(*unannounced == f.big);
}

// ---- file:// sources are regular files, read as named -------------------------

namespace {

struct file_dir {
    fs::path dir;
    explicit file_dir(const std::string& name) {
        dir = fs::path(REDIST_TEST_SCRATCH) / (name + "." + std::to_string(::getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir / "mirror" / "sub");
    }
    ~file_dir() {
        std::error_code ignored;
        fs::remove_all(dir, ignored);
    }
    std::string url(const std::string& rel) const { return "file://" + (dir / rel).string(); }
};

// A refusal: a permanent network error naming the URL, with no callback run.
void check_refused(const std::string& url, const collector& c, const redist::result<void>& r,
                   const redist::transfer_failure_info& failure, const std::string& needle) {
    REQUIRE_FALSE(r.ok());
    INFO(r.error_value().describe());
    CHECK(r.error_value().code == error_code::network);
    CHECK(r.error_value().url == url);
    CHECK(r.error_value().message.find(needle) != std::string::npos);
    CHECK_FALSE(failure.transient);
    CHECK(c.responses == 0);
    CHECK(c.chunks == 0);
}

}  // namespace

TEST_CASE("file://: a FIFO, a device, a directory or a symlink is refused at once", "[transfer]") {
    file_dir d("file_kinds");
    write_file(d.dir / "real.bin", "secret bytes");
    REQUIRE(::mkfifo((d.dir / "fifo").c_str(), 0600) == 0);
    fs::create_symlink(d.dir / "real.bin", d.dir / "link.bin");

    struct kind_case {
        std::string url;
        std::string needle;
    };
    for (const auto& k :
         {kind_case{d.url("fifo"), "refusing a FIFO"}, kind_case{"file:///dev/zero", "refusing a character device"},
          kind_case{d.url("sub/.."), "'..'"}, kind_case{d.url("mirror"), "refusing a directory"},
          kind_case{d.url("link.bin"), "refusing a symlink"}}) {
        INFO(k.url);
        collector c;
        redist::transfer_failure_info failure;
        const auto start = std::chrono::steady_clock::now();
        auto r = redist::download(k.url, fast_options(), c.callbacks, 0, &failure);
        CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));  // no hang on the FIFO
        check_refused(k.url, c, r, failure, k.needle);
        // Nothing about the file leaks into the message.
        CHECK(r.error_value().describe().find("secret") == std::string::npos);
        CHECK(r.error_value().expected.empty());
        CHECK(r.error_value().actual.empty());
    }
    // fetch_text goes the same way.
    auto text = redist::fetch_text(d.url("fifo"), fast_options());
    REQUIRE_FALSE(text.ok());
    CHECK(text.error_value().message.find("FIFO") != std::string::npos);
}

TEST_CASE("file://: escapes that change the path are refused, others decoded", "[transfer]") {
    file_dir d("file_escapes");
    write_file(d.dir / "outside.bin", "outside");
    write_file(d.dir / "mirror" / "with space.bin", "spaced");
    write_file(d.dir / "mirror" / "100%.bin", "percent");

    for (const std::string rel : {"mirror/sub/..%2f..%2foutside.bin", "mirror/sub/%2e%2e/%2e%2e/outside.bin",
                                  "mirror/sub/..%2Foutside.bin", "mirror/x%00.bin", "mirror/sub/../../outside.bin"}) {
        INFO(rel);
        collector c;
        redist::transfer_failure_info failure;
        auto r = redist::download(d.url(rel), fast_options(), c.callbacks, 0, &failure);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::network);
        CHECK(c.responses == 0);
        CHECK(c.body.empty());
    }

    collector spaced;
    REQUIRE(redist::download(d.url("mirror/with%20space.bin"), fast_options(), spaced.callbacks).ok());
    CHECK(spaced.body == "spaced");
    collector percent;  // a '%' that starts no escape is itself (to_url() does not encode)
    REQUIRE(redist::download(d.url("mirror/100%.bin"), fast_options(), percent.callbacks).ok());
    CHECK(percent.body == "percent");
    collector localhost;
    REQUIRE(redist::download("file://localhost" + (d.dir / "outside.bin").string(), fast_options(), localhost.callbacks)
                .ok());
    CHECK(localhost.body == "outside");

    collector remote;
    redist::transfer_failure_info failure;
    auto r = redist::download("file://example.com" + (d.dir / "outside.bin").string(), fast_options(), remote.callbacks,
                              0, &failure);
    check_refused("file://example.com" + (d.dir / "outside.bin").string(), remote, r, failure, "host");
}

TEST_CASE("file://: resuming beyond the end fails, and the body stops at the size seen at open", "[transfer]") {
    file_dir d("file_resume");
    write_file(d.dir / "a.bin", "0123456789");
    collector c;
    auto r = redist::download(d.url("a.bin"), fast_options(), c.callbacks, 11);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::network);
    CHECK(c.responses == 0);

    collector end;
    REQUIRE(redist::download(d.url("a.bin"), fast_options(), end.callbacks, 10).ok());
    CHECK(end.info.partial);
    CHECK(end.info.content_length == 0);
    CHECK(end.body.empty());
}

TEST_CASE("fetch_text marks an oversized body as too_large", "[transfer]") {
    fixture& f = shared_fixture();
    redist::transfer_failure_info failure;
    auto capped = redist::fetch_text(f.server->url("/blob.bin"), fast_options(), 1000, &failure);
    REQUIRE_FALSE(capped.ok());
    CHECK(failure.too_large);

    auto missing = redist::fetch_text(f.server->url("/nope"), fast_options(), 1000, &failure);
    REQUIRE_FALSE(missing.ok());
    CHECK_FALSE(failure.too_large);

    file_dir d("file_too_large");
    write_file(d.dir / "big.json", std::string(5000, ' '));
    auto local = redist::fetch_text(d.url("big.json"), fast_options(), 1000, &failure);
    REQUIRE_FALSE(local.ok());
    CHECK(failure.too_large);
}

TEST_CASE("http redirects may upgrade to https but never reach file://", "[transfer]") {
    fixture& f = shared_fixture();
    // Nobody speaks TLS on this port: the point is that the redirect is
    // followed at all (a TLS failure), not refused by the protocol policy.
    f.server->set_faults(R"({"/up.bin": {"status": 301, "location": "https://127.0.0.1:1/blob.bin"},
                             "/file.bin": {"status": 302, "location": "file:///etc/hostname"}})");
    collector up;
    auto r = redist::download(f.server->url("/up.bin"), fast_options(), up.callbacks);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().message.find("refusing a redirect") == std::string::npos);

    collector file;
    auto refused = redist::download(f.server->url("/file.bin"), fast_options(), file.callbacks);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().code == error_code::network);
    CHECK(refused.error_value().message.find("refusing a redirect to file:///etc/hostname") != std::string::npos);
    CHECK(file.chunks == 0);
}
