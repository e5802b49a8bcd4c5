// install() in process against scripted sources (transport/source.hpp
// scoped_source_reader): no server, every request seen. What the install
// path promises whatever its sources do: a transient failure is retried,
// a body cut off part-way resumes from the bytes received, wrong bytes
// move on to the next source, and nothing lands in the prefix that the
// manifest does not vouch for.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "archive/sha256.hpp"
#include "redist/install.hpp"
#include "support.hpp"
#include "support_archive.hpp"
#include "transport/source.hpp"

namespace fs = std::filesystem;
using namespace redist;

namespace {

constexpr const char* kTop = "pkg-linux-x86_64-1.0.0-archive";
constexpr const char* kRelativePath = "pkg/linux-x86_64/pkg-linux-x86_64-1.0.0-archive.tar.xz";
constexpr const char* kBase = "http://base.test/compute/pkg/redist/";
constexpr const char* kMirror = "http://mirror.test/compute";

// Bytes that xz cannot shrink much, so that the archive spans many chunks.
std::string noise(std::size_t size, unsigned seed) {
    std::string s(size, '\0');
    unsigned x = seed * 2654435761u + 1;
    for (char& c : s) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        c = static_cast<char>(x & 0xFF);
    }
    return s;
}

enum class fault {
    none,
    http_503,     // a transient HTTP failure before any byte
    cut_in_half,  // half of the body, then the connection drops
    wrong_byte,   // the whole body, one byte changed
};

// Serves one archive from every host it is told about; each host answers
// its scripted faults in order, one per request, then serves the bytes.
class scripted_source final : public source_reader {
public:
    struct request_seen {
        std::string url;
        std::uint64_t resume_from = 0;
    };

    explicit scripted_source(std::string bytes) : bytes_(std::move(bytes)) {}

    void script(const std::string& host_prefix, std::vector<fault> faults) {
        hosts_[host_prefix] = std::deque<fault>(faults.begin(), faults.end());
    }

    std::vector<request_seen> requests() const {
        const std::lock_guard lock(mutex_);
        return requests_;
    }
    std::size_t requests_to(const std::string& host_prefix) const {
        const auto seen = requests();
        return static_cast<std::size_t>(std::count_if(
            seen.begin(), seen.end(), [&](const request_seen& r) { return r.url.rfind(host_prefix, 0) == 0; }));
    }

    result<void> read(const source& asked, const read_request& request) const override {
        const std::string& url = asked.url();
        fault next = fault::none;
        {
            const std::lock_guard lock(mutex_);
            requests_.push_back({url, request.resume_from});
            auto host = std::find_if(hosts_.begin(), hosts_.end(),
                                     [&](const auto& h) { return url.rfind(h.first, 0) == 0; });
            if (host == hosts_.end() || url.size() < std::string(kRelativePath).size() ||
                url.compare(url.size() - std::string(kRelativePath).size(), std::string::npos, kRelativePath) != 0) {
                if (request.failure) request.failure->http_status = 404;
                return make_error(error_code::not_found, "HTTP 404").with_url(url);
            }
            if (!host->second.empty()) {
                next = host->second.front();
                host->second.pop_front();
            }
        }
        if (next == fault::http_503) {
            if (request.failure) {
                request.failure->transient = true;
                request.failure->http_status = 503;
            }
            return make_error(error_code::network, "HTTP 503").with_url(url);
        }
        const std::uint64_t from = std::min<std::uint64_t>(request.resume_from, bytes_.size());
        std::string body = bytes_.substr(from);
        if (next == fault::wrong_byte && !body.empty())
            body[body.size() / 2] = static_cast<char>(body[body.size() / 2] ^ 0x5A);
        response_info info;
        info.status = from > 0 ? 206 : 200;
        info.content_length = static_cast<std::int64_t>(body.size());
        info.partial = from > 0;
        if (request.callbacks.on_response) REDIST_TRY_VOID(request.callbacks.on_response(info));
        const std::size_t end = next == fault::cut_in_half ? body.size() / 2 : body.size();
        for (std::size_t at = 0; at < end; at += 64 << 10) {
            const std::size_t n = std::min<std::size_t>(64 << 10, end - at);
            REDIST_TRY_VOID(request.callbacks.on_data(reinterpret_cast<const std::byte*>(body.data() + at), n));
        }
        if (next == fault::cut_in_half) {
            if (request.failure) request.failure->transient = true;
            return make_error(error_code::network, "connection reset by peer").with_url(url);
        }
        return {};
    }

private:
    std::string bytes_;
    mutable std::mutex mutex_;
    mutable std::map<std::string, std::deque<fault>> hosts_;  // guarded by mutex_
    mutable std::vector<request_seen> requests_;
};

struct fixture {
    std::string library = noise(3u << 20, 7);
    std::string header = "#define PKG_VERSION 1\n";
    std::string archive = redist_test::tar_xz(
        kTop, {{"include/pkg.h", header}, {"lib/libpkg.so.1", library}, {"LICENSE", "license\n"}});
    fs::path prefix;

    explicit fixture(const std::string& name) : prefix(redist_test::scratch(name) / "prefix") {}

    install_request request(std::vector<std::string> mirrors = {}) const {
        artifact a;
        a.component = "pkg";
        a.platform = "linux-x86_64";
        a.relative_path = kRelativePath;
        a.sha256 = sha256_hex(archive);
        a.size = archive.size();
        a.format = archive_format::tar_xz;
        install_request r;
        r.prefix = prefix;
        r.releases = {release_plan{.product = "pkg",
                                   .label = "1.0.0",
                                   .artifact_base_url = kBase,
                                   .artifacts = {a},
                                   .component_versions = {{"pkg", "1.0.0"}}}};
        r.connections = 1;  // one stream: the requests are the script's
        r.sources.mirrors = std::move(mirrors);
        r.sources.cache_dir = std::nullopt;
        r.sources.initial_backoff_seconds = 0.001;
        r.sources.max_backoff_seconds = 0.01;
        return r;
    }

    bool installed() const {
        return fs::exists(prefix / "lib/libpkg.so.1") && redist_test::slurp(prefix / "lib/libpkg.so.1") == library &&
               redist_test::slurp(prefix / "include/pkg.h") == header;
    }
    // Nothing of the archive, and no receipt.
    bool untouched() const {
        return !fs::exists(prefix / "lib/libpkg.so.1") && !fs::exists(prefix / "include/pkg.h") &&
               !fs::exists(prefix / ".redist/receipts/pkg/pkg.json");
    }
};

}  // namespace

TEST_CASE("install from scripted sources: a 503 is retried on the same source", "[install][sources]") {
    const fixture f("retry_503");
    scripted_source base(f.archive);
    base.script("http://base.test/", {fault::http_503, fault::http_503});
    const scoped_source_reader scripted(source_kind::http, base);
    auto report = install(f.request());
    REQUIRE(report.ok());
    CHECK(f.installed());
    CHECK(base.requests_to("http://base.test/") == 3);
    REQUIRE(report->releases.size() == 1);
    CHECK(report->releases[0].components.at(0).requests == 3);
    CHECK(report->releases[0].components.at(0).url == std::string(kBase) + kRelativePath);
}

TEST_CASE("install from scripted sources: a body cut off part-way resumes from the bytes received",
          "[install][sources]") {
    const fixture f("resume");
    scripted_source base(f.archive);
    base.script("http://base.test/", {fault::cut_in_half});
    const scoped_source_reader scripted(source_kind::http, base);
    auto report = install(f.request());
    REQUIRE(report.ok());
    CHECK(f.installed());
    const auto seen = base.requests();
    REQUIRE(seen.size() == 2);
    CHECK(seen[0].resume_from == 0);
    CHECK(seen[1].resume_from == f.archive.size() / 2);  // "Range: bytes=<half>-"
}

TEST_CASE("install from scripted sources: a mirror's wrong bytes move on to the base", "[install][sources]") {
    const fixture f("wrong_mirror");
    scripted_source both(f.archive);
    both.script("http://mirror.test/", {fault::wrong_byte});
    both.script("http://base.test/", {});
    const scoped_source_reader scripted(source_kind::http, both);
    auto report = install(f.request({kMirror}));
    REQUIRE(report.ok());
    CHECK(f.installed());
    // The mirror was asked once: wrong bytes are not retried there, they are worthless.
    CHECK(both.requests_to("http://mirror.test/") == 1);
    CHECK(both.requests_to("http://base.test/") == 1);
    CHECK(report->releases[0].components.at(0).url == std::string(kBase) + kRelativePath);
}

TEST_CASE("install from scripted sources: when every source serves wrong bytes, nothing lands", "[install][sources]") {
    const fixture f("all_wrong");
    scripted_source both(f.archive);
    both.script("http://mirror.test/", {fault::wrong_byte});
    both.script("http://base.test/", {fault::wrong_byte});
    const scoped_source_reader scripted(source_kind::http, both);
    auto report = install(f.request({kMirror}));
    REQUIRE_FALSE(report.ok());
    CHECK(report.error_value().code == error_code::integrity);
    CHECK(f.untouched());
    CHECK(both.requests_to("http://mirror.test/") == 1);
    CHECK(both.requests_to("http://base.test/") == 1);
}

TEST_CASE("install from scripted sources: a source that has no such file is not_found, the next is tried",
          "[install][sources]") {
    const fixture f("not_found");
    scripted_source base_only(f.archive);
    base_only.script("http://base.test/", {});
    const scoped_source_reader scripted(source_kind::http, base_only);
    auto report = install(f.request({kMirror}));
    REQUIRE(report.ok());
    CHECK(f.installed());
    CHECK(base_only.requests_to("http://mirror.test/") == 1);
    CHECK(base_only.requests_to("http://base.test/") == 1);
}
