// install_test.cpp — the pure parts of lib/pipeline/install.cpp: how many
// artifacts an install runs at once by default (default_jobs), and the plan
// (plan_install) of each kind, with its byte totals.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "pipeline/install_rules.hpp"
#include "redist/install.hpp"
#include "support.hpp"

using redist::default_jobs;

TEST_CASE("default_jobs: enough slots for the others to finish beside the largest archive", "[fetch]") {
    constexpr std::uint64_t MiB = 1u << 20;
    // 14 components on 16 cores: 1322 MiB, the largest 373 MiB -> 4.
    const std::vector<std::uint64_t> cuda14 = {148 * MiB, 1,         5 * MiB, 1,        28 * MiB,  168 * MiB, 61 * MiB,
                                               155 * MiB, 131 * MiB, MiB,     41 * MiB, 373 * MiB, 178 * MiB, 32 * MiB};
    CHECK(default_jobs(cuda14, 16) == 4);
    // The 2-core bench's 9 cuDNN components (323 MiB, the largest 169 MiB): 2, which is also the cores.
    CHECK(default_jobs({169 * MiB, 90 * MiB, 32 * MiB, 16 * MiB, 12 * MiB, 1, MiB, MiB, 1}, 2) == 2);
    // Equal sizes: all at once, as far as the cores go.
    CHECK(default_jobs(std::vector<std::uint64_t>(10, 50 * MiB), 16) == 10);
    CHECK(default_jobs(std::vector<std::uint64_t>(10, 50 * MiB), 4) == 4);
    // A total just over a multiple of the largest rounds up.
    CHECK(default_jobs({100, 100, 1}, 16) == 3);
    CHECK(default_jobs({100, 60, 40}, 16) == 2);
}

TEST_CASE("default_jobs: edge cases stay within 1..cores", "[fetch]") {
    CHECK(default_jobs({}, 8) == 8);
    CHECK(default_jobs({0, 0}, 8) == 8);  // sizes unknown: the cores
    CHECK(default_jobs({42}, 8) == 1);
    CHECK(default_jobs({42}, 0) == 1);  // no core count: at least one
    // Hostile manifest sizes saturate instead of wrapping to a small total.
    CHECK(default_jobs({UINT64_MAX, UINT64_MAX, UINT64_MAX}, 8) == 1);
    CHECK(default_jobs({UINT64_MAX / 2, UINT64_MAX / 2, 5, UINT64_MAX / 2}, 8) == 3);
}

namespace {

redist::artifact make_artifact(const std::string& component, char hash, std::uint64_t size) {
    redist::artifact a;
    a.component = component;
    a.platform = "linux-x86_64";
    a.relative_path = component + "/" + component + "-archive.tar.xz";
    a.sha256 = std::string(64, hash);
    a.size = size;
    return a;
}

redist::receipt receipt_of(const std::string& product, const redist::artifact& a) {
    redist::receipt r;
    r.product = product;
    r.component = a.component;
    r.component_version = "1.0";
    r.release_label = "1.0.0";
    r.platform = a.platform;
    r.archive_sha256 = a.sha256;
    r.archive_size = a.size;
    r.files.resize(3);
    return r;
}

}  // namespace

TEST_CASE("plan_install: each artifact is unchanged, from the cache's tree or blob, downloaded, or removed",
          "[fetch]") {
    using redist::plan_action;
    const auto dir = redist_test::scratch("plan_install");
    auto opened = redist::blob_cache::open_if_possible(dir / "cache", false);
    REQUIRE(opened.ok());
    REQUIRE(opened->has_value());
    const redist::blob_cache& cache = **opened;

    redist::install_request req;
    req.prefix = dir / "prefix";
    redist::release_plan release{"cudnn", "9.1.0", "file:///nowhere/cudnn/redist", {}, {{"tree", "9.1"}}};
    release.artifacts = {make_artifact("same", 'a', 100), make_artifact("tree", 'b', 1000),
                         make_artifact("blob", 'c', 2000), make_artifact("fresh", 'd', 4000)};
    req.releases.push_back(release);
    redist_test::write(cache.root() / "trees" / std::string(64, 'b') / ".redist-tree.json", "{}");
    redist_test::write(cache.blob_path(std::string(64, 'c')), "archive");
    redist::artifact gone = make_artifact("gone", 'e', 10);
    const std::vector<redist::receipt> receipts = {receipt_of("cudnn", release.artifacts[0]),
                                                   receipt_of("cudnn", gone)};

    auto plan = redist::plan_install(req, receipts, &cache);  // fetch: unlisted components stay
    REQUIRE(plan.items.size() == 4);
    CHECK(plan.items[0].action == plan_action::unchanged);
    CHECK(plan.items[1].action == plan_action::from_cached_tree);
    CHECK(plan.items[1].version == "9.1");
    CHECK(plan.items[2].action == plan_action::from_cached_blob);
    CHECK(plan.items[3].action == plan_action::download);
    CHECK(plan.items[3].artifact == 3);
    CHECK(plan.download_bytes == 4000);  // only what no cache holds
    CHECK(plan.unpack_bytes == redist::unpacked_size_estimate(1000) + redist::unpacked_size_estimate(2000) +
                                   redist::unpacked_size_estimate(4000));

    req.keep_unlisted = false;  // sync: the prefix holds exactly what the request names
    plan = redist::plan_install(req, receipts, &cache);
    REQUIRE(plan.items.size() == 5);
    CHECK(plan.items[4].action == plan_action::remove);
    CHECK(plan.items[4].component == "gone");
    CHECK(plan.items[4].files == 3);
    CHECK(plan.download_bytes == 4000);

    req.reinstall = true;  // --force: a matching receipt is installed again, and no cache: all downloads
    plan = redist::plan_install(req, receipts, nullptr);
    CHECK(plan.items[0].action == plan_action::download);
    CHECK(plan.download_bytes == 7100);
    req.reinstall = false;
    req.exclude = {"lib/*.a"};  // a receipt made with other exclude globs is not current
    plan = redist::plan_install(req, receipts, nullptr);
    CHECK(plan.items[0].action == plan_action::download);
}

TEST_CASE("plan_install: several releases, in request order, each artifact naming its release", "[fetch]") {
    redist::install_request req;
    req.releases.push_back({"cuda", "12.9.1", "file:///x/cuda/redist", {make_artifact("cuda_nvcc", 'a', 5)}, {}});
    req.releases.push_back({"cudnn", "9.1.0", "file:///x/cudnn/redist", {make_artifact("cudnn", 'b', 7)}, {}});
    req.keep_unlisted = false;
    // The same component name under another product is another component: it is removed.
    const auto plan = redist::plan_install(req, {receipt_of("nccl", make_artifact("cudnn", 'b', 7))}, nullptr);
    REQUIRE(plan.items.size() == 3);
    CHECK(plan.items[0].product == "cuda");
    CHECK(plan.items[1].product == "cudnn");
    CHECK(plan.items[1].release == 1);
    CHECK(plan.items[2].action == redist::plan_action::remove);
    CHECK(plan.items[2].product == "nccl");
    CHECK(plan.download_bytes == 12);
}
