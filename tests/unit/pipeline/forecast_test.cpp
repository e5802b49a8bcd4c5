// forecast_test.cpp — the dry run's forecast (lib/pipeline/forecast.cpp):
// forecast_install reads the archives whose files are unknown into the
// cache, and forecasts the commit's conflicts once, from every list known
// then.
#include <catch2/catch.hpp>

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "redist/install.hpp"
#include "redist/urls.hpp"
#include "support.hpp"
#include "support_archive.hpp"

namespace fs = std::filesystem;
using redist_test::scratch;

namespace {

// The archive of `component` written under `mirror`, and its artifact.
redist::artifact archive_in(const fs::path& mirror, const std::string& component, const std::string& path,
                            const std::string& content) {
    redist::artifact a;
    a.component = component;
    a.platform = "linux-x86_64";
    a.relative_path = component + "/" + component + "-archive.tar.xz";
    a.format = redist::archive_format::tar_xz;
    const std::string bytes = redist_test::tar_xz(component + "-archive", {{path, content}});
    redist_test::write(mirror / a.relative_path, bytes);
    a.sha256 = redist::sha256_hex(bytes);
    a.size = bytes.size();
    return a;
}

// Counts the opens of one file (inotify's IN_OPEN): how often it was read.
// Closes are watched too: inotify merges an event into an identical one
// still queued, so two opens in a row would read as one.
class open_counter {
public:
    explicit open_counter(const fs::path& file) : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
        REQUIRE(fd_ >= 0);
        REQUIRE(::inotify_add_watch(fd_, file.c_str(), IN_OPEN | IN_CLOSE) >= 0);
    }
    ~open_counter() { ::close(fd_); }
    open_counter(const open_counter&) = delete;
    open_counter& operator=(const open_counter&) = delete;

    // The opens since the last call (the events queued by then).
    int count() {
        int opens = 0;
        alignas(inotify_event) char buf[4096];
        for (;;) {
            const ssize_t n = ::read(fd_, buf, sizeof buf);
            if (n <= 0) break;  // EAGAIN: none left
            for (ssize_t at = 0; at < n;) {
                const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
                if (ev->mask & IN_OPEN) ++opens;
                at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
            }
        }
        return opens;
    }

private:
    int fd_;
};

}  // namespace

TEST_CASE("forecast_install: files in the way are hashed once, after the unknown archives are read", "[fetch]") {
    const fs::path dir = scratch("forecast_once");
    const fs::path mirror = dir / "mirror", prefix = dir / "prefix";
    const auto alpha = archive_in(mirror, "alpha", "lib/alpha.txt", "alpha's bytes\n");
    const auto beta = archive_in(mirror, "beta", "lib/beta.txt", "beta's bytes\n");
    redist::install_request req;
    req.prefix = prefix;
    req.releases = {{.product = "demo",
                     .label = "1.0.0",
                     .artifact_base_url = redist::to_url(mirror.string()) + "/",
                     .artifacts = {alpha},
                     .component_versions = {{"alpha", "1.0"}, {"beta", "1.0"}}}};
    req.sources.cache_dir = dir / "cache";

    // alpha's archive read into the cache: its files are known from now on.
    auto first = redist::forecast_install(req);
    REQUIRE_OK(first);
    CHECK(first->archives_read == 1);
    CHECK(first->conflicts.empty());

    // A file of the user's where alpha's goes, of the same size (so only its
    // hash tells whether it is alpha's); beta's files are not known yet.
    redist_test::write(prefix / "lib" / "alpha.txt", "user's bytes!\n");
    req.releases[0].artifacts = {alpha, beta};
    open_counter opens(prefix / "lib" / "alpha.txt");
    auto plan = redist::forecast_install(req);
    REQUIRE_OK(plan);
    CHECK(plan->archives_read == 1);  // beta's
    REQUIRE(plan->items.size() == 2);
    CHECK(plan->items[0].action == redist::plan_action::from_cached_tree);
    CHECK(plan->items[1].action == redist::plan_action::download);  // the plan from before beta was read
    CHECK((plan->items[0].files_known && plan->items[1].files_known));
    REQUIRE(plan->conflicts.size() == 1);
    CHECK(plan->conflicts[0].path == "lib/alpha.txt");
    // The conflicts were forecast once: the file in the way was hashed once,
    // not before beta was read and again after.
    CHECK(opens.count() == 1);
}
