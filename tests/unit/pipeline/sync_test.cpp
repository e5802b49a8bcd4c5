// The project lock (version 2): writer and reader, refusals, the staleness
// check against redist.toml, the per-platform plans; the version 1 helpers
// moved out of the tool (plan_from_lock with an alias); exclude globs; the
// free-space check.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>

#include "model/lockfile.hpp"
#include "pipeline/install_rules.hpp"
#include "pipeline/sync.hpp"
#include "redist/lockfile.hpp"
#include "redist/sync.hpp"
#include "redist/urls.hpp"
#include "store/receipts.hpp"
#include "support.hpp"

using namespace redist;

namespace {

const std::string kHash(64, 'a');

locked_artifact make_artifact(const std::string& component, const std::string& platform,
                              std::optional<std::string> variant = std::nullopt) {
    locked_artifact a;
    a.entry.component = component;
    a.entry.platform = platform;
    a.entry.variant = std::move(variant);
    a.entry.relative_path = component + "/" + platform + "/" + component + "-archive.tar.xz";
    a.entry.sha256 = kHash;
    a.entry.size = 42;
    a.version = "1.2.3";
    a.url = "https://example.invalid/p/redist/" + a.entry.relative_path;
    return a;
}

project_lock sample_lock() {
    project_lock lock;
    lock.platforms = {"linux-x86_64", "linux-sbsa"};
    lock.cuda = 12;
    locked_product cudnn;
    cudnn.name = "cudnn";
    cudnn.version_spec = "9";
    cudnn.components = {"cudnn"};
    cudnn.release_label = "9.27.0";
    cudnn.manifest_url = "https://example.invalid/cudnn/redist/redistrib_9.27.0.json";
    cudnn.manifest_sha256 = std::string(64, 'b');
    cudnn.artifacts = {make_artifact("cudnn", "linux-x86_64", "cuda12"),
                       make_artifact("cudnn", "linux-sbsa", "cuda12")};
    locked_product cuda;
    cuda.name = "cuda";
    cuda.version_spec = "12.9";
    cuda.components = {"cuda_nvcc", "cuda_cccl"};
    cuda.release_label = "12.9.1";
    cuda.manifest_url = "https://example.invalid/cuda/redist/redistrib_12.9.1.json";
    cuda.manifest_sha256 = std::string(64, 'c');
    cuda.artifacts = {make_artifact("cuda_nvcc", "linux-sbsa"), make_artifact("cuda_nvcc", "linux-x86_64"),
                      make_artifact("cuda_cccl", "linux-x86_64"), make_artifact("cuda_cccl", "linux-sbsa")};
    lock.products = {cudnn, cuda};  // unsorted on purpose
    return lock;
}

// The project sample_lock() is up to date with.
const char* const kSampleProject = R"([project]
prefix = "nvidia"
platforms = ["linux-x86_64", "linux-sbsa"]
cuda = "12"

[products.cuda]
version = "12.9"
components = ["cuda_nvcc", "cuda_cccl"]

[products.cudnn]
version = "9"
components = ["cudnn"]
)";

project_file sample_project() {
    auto p = parse_project(kSampleProject, "/work/app/redist.toml");
    REQUIRE(p.ok());
    return *p;
}

error read_error(const std::string& text) {
    auto lock = project_lock_from_json(text, "redist.lock");
    REQUIRE_FALSE(lock.ok());
    CHECK(lock.error_value().code == error_code::bad_manifest);
    CHECK(lock.error_value().source == "redist.lock");
    return lock.error_value();
}

}  // namespace

TEST_CASE("project lock: written sorted, read back identical") {
    const std::string text = project_lock_to_json(sample_lock());
    CHECK(text.find("\"lock_version\": 2") != std::string::npos);
    CHECK(text.find("\"cuda\"") < text.find("\"cudnn\""));       // products sorted by name
    CHECK(text.find("linux-sbsa") < text.find("linux-x86_64"));  // platforms sorted
    auto lock = project_lock_from_json(text, "redist.lock");
    REQUIRE(lock.ok());
    REQUIRE(lock->products.size() == 2);
    CHECK(lock->products[0].name == "cuda");
    CHECK(lock->products[0].components == std::vector<std::string>{"cuda_nvcc", "cuda_cccl"});
    CHECK(lock->products[0].artifacts.size() == 4);
    CHECK(lock->products[1].artifacts[0].entry.variant == std::optional<std::string>("cuda12"));
    CHECK(lock->cuda == 12);
    CHECK_FALSE(lock->products[0].cuda);
    CHECK(project_lock_to_json(*lock) == text);
    // A product's own cuda is kept, and read back.
    project_lock own = sample_lock();
    own.products[1].cuda = 13;
    auto again = project_lock_from_json(project_lock_to_json(own), "redist.lock");
    REQUIRE(again.ok());
    CHECK(again->products[0].cuda == 13);  // "cuda", sorted first
}

// Why each platform's CUDA variant was chosen is part of the lock; a lock
// written before it existed still reads, with no reasons.
TEST_CASE("project lock: the CUDA variant's reason per platform") {
    project_lock lock = sample_lock();
    const std::string old_text = project_lock_to_json(lock);
    CHECK(old_text.find("cuda_reasons") == std::string::npos);
    auto old = project_lock_from_json(old_text, "redist.lock");
    REQUIRE(old.ok());
    CHECK(old->products[0].cuda_reasons.empty());

    lock.products[1].cuda_reasons["linux-x86_64"] = "cuda12: detected CUDA 12.4.1 (CUDA_HOME=/opt/cuda, version.json)";
    lock.products[1].cuda_reasons["linux-sbsa"] = "cuda12: project.cuda 12";
    const std::string text = project_lock_to_json(lock);
    CHECK(text.find("\"cuda_reasons\"") != std::string::npos);
    auto back = project_lock_from_json(text, "redist.lock");
    REQUIRE(back.ok());
    CHECK(back->products[0].cuda_reasons == lock.products[1].cuda_reasons);  // "cuda", sorted first
    CHECK(project_lock_to_json(*back) == text);
    // A platform given twice is refused, naming where.
    std::string twice = text;
    const std::string key = "\"platform\": ";
    twice.replace(twice.find(key + "\"linux-x86_64\"") + key.size(), 14, "\"linux-sbsa\"");
    const auto e = read_error(twice);
    CHECK(e.message.find("two CUDA reasons") != std::string::npos);
    CHECK(e.json_path.find("cuda_reasons[1]") != std::string::npos);
}

TEST_CASE("project lock: hostile or wrong documents are refused with their JSON path") {
    const std::string good = project_lock_to_json(sample_lock());
    CHECK(read_error("{\"lock_version\": 2, \"platforms\": [], \"products\": [], \"products\": []}")
              .message.find("duplicate") != std::string::npos);
    auto e = read_error(std::string(good).replace(good.find("\"name\": \"cudnn\""), 15, "\"name\": \"../x\""));
    CHECK(e.json_path == "products[1].name");
    e = read_error(std::string(good).replace(good.find("\"name\": \"cudnn\""), 15, "\"name\": \"cuda\""));
    CHECK(e.message.find("locked twice") != std::string::npos);
    e = read_error(std::string(good).replace(good.find(kHash), 64, "zz"));
    CHECK(e.json_path == "products[0].artifacts[0].sha256");
    e = read_error("{\"lock_version\": 1, \"product\": \"cudnn\", \"artifacts\": []}");
    CHECK(e.message.find("redist fetch --locked") != std::string::npos);
    e = read_error("{\"lock_version\": 2, \"platforms\": [\"linux-x86_64\"], \"cuda\": 0, \"products\": []}");
    CHECK(e.json_path == "cuda");
    read_error("{\"lock_version\": 2, \"platforms\": [\"a b\"], \"products\": []}");
    read_error("[]");
    // And the version 1 reader points a version 2 lock at `redist sync --locked`.
    auto v1 = lockfile_from_json(good, "redist.lock");
    REQUIRE_FALSE(v1.ok());
    CHECK(v1.error_value().message.find("redist sync --locked") != std::string::npos);
}

TEST_CASE("project lock: stale when an input of redist.toml changed, not otherwise") {
    const project_lock lock = sample_lock();
    project_file project = sample_project();
    CHECK_FALSE(lock_staleness(lock, project));
    project.prefix = "/elsewhere";  // not an input of the resolution
    project.exclude = {"lib/*.a"};
    CHECK_FALSE(lock_staleness(lock, project));

    auto changed = project;
    changed.products[0].version = "12.8";
    CHECK(lock_staleness(lock, changed) ==
          std::optional<std::string>("products.cuda.version is 12.8 in the project file, 12.9 in the lock"));
    changed = project;
    changed.products[1].components.push_back("cudnn_jit");
    CHECK(lock_staleness(lock, changed)->find("products.cudnn.components") != std::string::npos);
    changed = project;
    changed.products.pop_back();
    CHECK(lock_staleness(lock, changed)->find("no longer in the project file") != std::string::npos);
    changed = project;
    changed.products.push_back({"nccl", "2", {}, std::nullopt, 0});
    CHECK(lock_staleness(lock, changed) == std::optional<std::string>("products.nccl is not in the lock"));
    changed = project;
    changed.platforms = {"linux-x86_64"};
    CHECK(lock_staleness(lock, changed)->find("project.platforms") != std::string::npos);
    changed = project;
    changed.platforms = {"linux-sbsa", "linux-x86_64"};  // order does not matter
    CHECK_FALSE(lock_staleness(lock, changed));
    changed.cuda = 13;
    CHECK(lock_staleness(lock, changed)->find("project.cuda is 13") != std::string::npos);
    changed = project;
    changed.products[0].cuda = 12;
    CHECK(lock_staleness(lock, changed) ==
          std::optional<std::string>("products.cuda.cuda is 12 in the project file, unset in the lock"));
}

TEST_CASE("resolve_project: the lock is authoritative, only what changed is resolved") {
    const project_lock lock = sample_lock();
    project_file project = sample_project();
    project_resolve_options o;
    o.base_url = "http://127.0.0.1:9/";
    o.sources.offline = true;  // any index or manifest request fails
    o.previous = &lock;
    auto kept = resolve_project(project, o);
    REQUIRE(kept.ok());
    CHECK(project_lock_to_json(kept->lock) == project_lock_to_json(lock));
    CHECK(kept->notes.empty());

    project.products.pop_back();  // cudnn leaves the project: dropped, no request
    kept = resolve_project(project, o);
    REQUIRE(kept.ok());
    REQUIRE(kept->lock.products.size() == 1);
    CHECK(kept->lock.products[0].name == "cuda");

    project = sample_project();
    for (const auto& change : {0, 1, 2}) {
        auto changed = project;
        auto opts = o;
        if (change == 0) opts.upgrade = {"cudnn"};
        if (change == 1) changed.products[1].components.push_back("cudnn_jit");
        if (change == 2) opts.upgrade_all = true;
        auto asked = resolve_project(changed, opts);
        REQUIRE_FALSE(asked.ok());  // it had to ask: offline, nothing cached
        CHECK(asked.error_value().message.starts_with(change == 2 ? "products.cuda: " : "products.cudnn: "));
    }
}

TEST_CASE("project lock: the plans for one platform") {
    auto plans = plans_for_platform(sample_lock(), "linux-sbsa");
    REQUIRE(plans.ok());
    REQUIRE(plans->size() == 2);
    CHECK((*plans)[0].product == "cudnn");
    CHECK((*plans)[0].artifact_base_url == "https://example.invalid/cudnn/redist/");
    REQUIRE((*plans)[1].artifacts.size() == 2);
    for (const auto& p : *plans)
        for (const auto& a : p.artifacts) CHECK(a.platform == "linux-sbsa");
    CHECK((*plans)[1].component_versions.at("cuda_nvcc") == "1.2.3");
    auto missing = plans_for_platform(sample_lock(), "windows-x86_64");
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error_value().code == error_code::not_found);
    CHECK(missing.error_value().message.find("(it locks: linux-x86_64, linux-sbsa)") != std::string::npos);
}

TEST_CASE("version 1 lock: plan_from_lock follows the alias table, with a note") {
    lockfile lock;
    lock.product = "cuda";
    lock.release_label = "13.0.0";
    lock.manifest_url = "https://example.invalid/cuda/redist/redistrib_13.0.0.json";
    lock.artifacts = {make_artifact("cccl", "linux-x86_64"), make_artifact("cuda_nvcc", "linux-x86_64")};
    std::vector<std::string> notes;
    auto plan = plan_from_lock(lock, "linux-x86_64", std::nullopt, {"cuda_cccl"}, &notes);
    REQUIRE(plan.ok());
    REQUIRE(plan->artifacts.size() == 1);
    CHECK(plan->artifacts[0].component == "cccl");
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("'cuda_cccl' is called 'cccl'") != std::string::npos);
    CHECK(plan->artifact_base_url == "https://example.invalid/cuda/redist/");
    auto all = plan_from_lock(lock, "linux-x86_64", std::nullopt, {});
    REQUIRE(all.ok());
    CHECK(all->artifacts.size() == 2);
    auto missing = plan_from_lock(lock, "linux-x86_64", std::nullopt, {"libcublas"});
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error_value().code == error_code::not_found);
}

TEST_CASE("exclude globs: fnmatch with FNM_PATHNAME, a directory excludes what is below it") {
    const std::vector<std::string> globs{"lib/*_static*.a", "share/doc"};
    CHECK(path_excluded("lib/libcublas_static.a", globs));
    CHECK_FALSE(path_excluded("lib/libcublas.so.12", globs));
    CHECK_FALSE(path_excluded("lib/stubs/libcuda_static.a", globs));  // '*' does not cross '/'
    CHECK(path_excluded("share/doc/README", globs));
    CHECK(path_excluded("share/doc", globs));
    CHECK_FALSE(path_excluded("share/documents/x", globs));
    CHECK_FALSE(path_excluded("lib/libx_static.a", {}));
}

TEST_CASE("receipt_current compares the exclude globs too") {
    receipt r;
    r.product = "cuda";
    r.component = "cuda_nvcc";
    r.platform = "linux-x86_64";
    r.archive_sha256 = kHash;
    r.archive_size = 42;
    const artifact a = make_artifact("cuda_nvcc", "linux-x86_64").entry;
    CHECK(receipt_current(r, "cuda", a, {}));
    CHECK_FALSE(receipt_current(r, "cudnn", a, {}));
    CHECK_FALSE(receipt_current(r, "cuda", a, {"lib/*.a"}));
    r.exclude = {"lib/*.a"};
    CHECK(receipt_current(r, "cuda", a, {"lib/*.a"}));
}

TEST_CASE("receipts keep the exclude globs and the skipped paths") {
    receipt r;
    r.product = "nccl";
    r.component = "nccl";
    r.exclude = {"lib/*.a"};
    r.excluded = {"lib/libnccl_static.a"};
    auto back = receipt_from_json(receipt_to_json(r), "r.json");
    REQUIRE(back.ok());
    CHECK(back->exclude == r.exclude);
    CHECK(back->excluded == r.excluded);
    auto hostile = receipt_from_json(
        "{\"product\": \"p\", \"component\": \"c\", \"exclude\": [\"x\"], \"excluded\": [\"../etc/passwd\"]}",
        "r.json");
    REQUIRE_FALSE(hostile.ok());
    CHECK(hostile.error_value().json_path == "excluded[0]");
    // Receipts without the fields (every older one) read as "nothing excluded".
    auto plain = receipt_from_json("{\"product\": \"p\", \"component\": \"c\"}", "r.json");
    REQUIRE(plain.ok());
    CHECK(plain->excluded.empty());
    CHECK(receipt_to_json(*plain).find("excluded") == std::string::npos);
}

TEST_CASE("free-space check: names the directory and both numbers") {
    const auto dir = redist_test::scratch("free_space");
    CHECK(check_free_space(dir / "not-yet" / "prefix", 1, {}, 0).ok());  // measured at the nearest existing parent
    auto full = check_free_space(dir, UINT64_MAX / 2, {}, 0);
    REQUIRE_FALSE(full.ok());
    CHECK(full.error_value().code == error_code::filesystem);
    CHECK(full.error_value().message.find("not enough free space") != std::string::npos);
    CHECK(full.error_value().message.find("free") != std::string::npos);
    CHECK(full.error_value().path == dir.lexically_normal().string());
    // Prefix and cache on one filesystem: their sum must fit.
    ::setenv("REDIST_TEST_FREE_BYTES", "1000", 1);
    CHECK(check_free_space(dir, 600, dir, 300).ok());
    auto both = check_free_space(dir, 600, dir, 500);
    ::unsetenv("REDIST_TEST_FREE_BYTES");
    REQUIRE_FALSE(both.ok());
    CHECK(both.error_value().message.find("1100 bytes") != std::string::npos);
}

TEST_CASE("free-space preflight: the prefix must hold what unpacking needs, not the archives' size") {
    CHECK(unpacked_size_estimate(1000) == 1500);
    CHECK(unpacked_size_estimate(1) == 2);
    CHECK(unpacked_size_estimate(UINT64_MAX - 1) == UINT64_MAX);  // hostile sizes saturate
    const auto dir = redist_test::scratch("space_preflight");
    artifact a = make_artifact("nccl", "linux-x86_64").entry;
    a.size = 1000;
    install_request req;  // no cache: the download streams, only the unpacked bytes land
    req.releases.push_back({"nccl", "2.0", "file:///x", {a}, {}});
    const auto plan = plan_install(req, {}, nullptr);
    CHECK(plan.unpack_bytes == 1500);
    ::setenv("REDIST_TEST_FREE_BYTES", "1200", 1);  // holds the archive, not its unpacked contents
    auto refused = check_free_space(dir, plan.unpack_bytes, {}, plan.download_bytes);
    ::setenv("REDIST_TEST_FREE_BYTES", "1500", 1);
    auto fits = check_free_space(dir, plan.unpack_bytes, {}, plan.download_bytes);
    ::unsetenv("REDIST_TEST_FREE_BYTES");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().code == error_code::filesystem);
    CHECK(refused.error_value().message.find("1500 bytes") != std::string::npos);
    CHECK(fits.ok());
}

TEST_CASE("project prefix: inside the project's directory, lexically and through symlinks") {
    const auto dir = redist_test::scratch("project_prefix");
    const auto parse = [&](const std::string& prefix) {
        auto p = parse_project("[project]\nprefix = \"" + prefix +
                                   "\"\nplatforms = [\"linux-x86_64\"]\n[products.nccl]\nversion = \"2\"\n",
                               dir / "redist.toml");
        REQUIRE(p.ok());
        return *p;
    };
    CHECK(check_project_prefix(parse("nvidia")).ok());
    CHECK(check_project_prefix(parse("a/../nvidia")).ok());
    CHECK(check_project_prefix(parse((dir / "abs").string())).ok());
    for (const std::string outside : {"../outside", "/tmp/x", "nvidia/../../x"}) {
        auto refused = check_project_prefix(parse(outside));
        REQUIRE_FALSE(refused.ok());
        CHECK(refused.error_value().code == error_code::bad_manifest);
        CHECK(refused.error_value().json_path == "project.prefix");
        CHECK(refused.error_value().message.find("outside the project's directory") != std::string::npos);
    }
    std::filesystem::create_directory_symlink("/tmp", dir / "link");
    auto linked = check_project_prefix(parse("link/prefix"));
    REQUIRE_FALSE(linked.ok());
    CHECK(linked.error_value().message.find("symlink") != std::string::npos);
}

TEST_CASE("lock sources: http(s), or file:// only under a local root the user named") {
    const auto dir = redist_test::scratch("lock_sources");
    std::filesystem::create_directories(dir / "mirror" / "cudnn" / "redist");
    std::filesystem::create_directory_symlink("/etc", dir / "mirror" / "etc");
    const std::vector<std::filesystem::path> roots = local_roots(
        {"https://example.invalid", (dir / "mirror").string()});
    REQUIRE(roots.size() == 1);
    project_lock lock = sample_lock();
    CHECK(check_lock_sources(lock, "redist.lock", roots).ok());
    const auto refused = [&](const std::string& url, const char* json_path) {
        project_lock bad = sample_lock();
        bad.products[1].manifest_url = url;
        auto checked = check_lock_sources(bad, "redist.lock", roots);
        REQUIRE_FALSE(checked.ok());
        CHECK(checked.error_value().code == error_code::bad_manifest);
        CHECK(checked.error_value().source == "redist.lock");
        CHECK(checked.error_value().json_path == json_path);
    };
    refused("file:///etc/shadow", "products[1].manifest_url");
    refused("file://" + (dir / "mirror" / "etc" / "shadow").string(), "products[1].manifest_url");  // a symlink out
    refused("file://" + (dir / "mirror" / "..%2fsecret").string(), "products[1].manifest_url");
    refused("ftp://example.invalid/x.json", "products[1].manifest_url");
    refused("/etc/shadow", "products[1].manifest_url");
    project_lock local = sample_lock();
    local.products[1].manifest_url = "file://" + (dir / "mirror" / "cudnn" / "redist" / "redistrib_9.json").string();
    CHECK(check_lock_sources(local, "redist.lock", roots).ok());
    CHECK_FALSE(check_lock_sources(local, "redist.lock", {}).ok());
    local.products[1].artifacts[0].url = "file:///etc/passwd";
    auto artifact_url = check_lock_sources(local, "redist.lock", roots);
    REQUIRE_FALSE(artifact_url.ok());
    CHECK(artifact_url.error_value().json_path == "products[1].artifacts[0].url");
}

TEST_CASE("project lock: deps and dependency_of round-trip, and take part in staleness") {
    // The project asks for cudnn's dependencies and names no cuda product:
    // the lock holds the cuda release they come from, marked as theirs.
    project_lock lock = sample_lock();
    lock.products[0].deps = true;  // cudnn
    lock.products[1].version_spec = "12";
    lock.products[1].components = {"cuda_cudart", "libcublas", "cuda_nvrtc"};
    lock.products[1].dependency_of = {"cudnn"};
    const std::string text = project_lock_to_json(lock);
    CHECK(text.find("\"deps\": true") != std::string::npos);
    CHECK(text.find("\"dependency_of\": [") != std::string::npos);
    auto read = project_lock_from_json(text, "redist.lock");
    REQUIRE(read.ok());
    CHECK(read->products[0].name == "cuda");
    CHECK(read->products[0].dependency_of == std::vector<std::string>{"cudnn"});
    CHECK_FALSE(read->products[0].deps);
    CHECK(read->products[1].deps);
    CHECK(read->products[1].dependency_of.empty());
    CHECK(project_lock_to_json(*read) == text);
    // Without them nothing is written: older locks read the same.
    CHECK(project_lock_to_json(sample_lock()).find("deps") == std::string::npos);
    CHECK(
        read_error(std::string(text).replace(text.find("\"deps\": true"), 12, "\"deps\": 1")).json_path.find("deps") !=
        std::string::npos);

    project_file project = sample_project();
    project.products.erase(project.products.begin());  // no [products.cuda]
    project.products[0].deps = true;
    CHECK_FALSE(lock_staleness(*read, project));
    auto changed = project;
    changed.products[0].deps = false;
    CHECK(lock_staleness(*read, changed) ==
          std::optional<std::string>("products.cudnn.deps is false in the project file, true in the lock"));
    // A lock made before deps = true was set is stale too.
    CHECK(lock_staleness(sample_lock(), sample_project()) == std::nullopt);
    auto asks = sample_project();
    asks.products[1].deps = true;
    CHECK(lock_staleness(sample_lock(), asks) ==
          std::optional<std::string>("products.cudnn.deps is true in the project file, false in the lock"));
    // A dependency product whose dependent no longer asks: stale, by name.
    auto dependent_gone = *read;
    dependent_gone.products[1].deps = false;
    changed = project;
    changed.products[0].deps = false;
    CHECK(lock_staleness(dependent_gone, changed)->find("for the dependencies of [cudnn]") != std::string::npos);
}

// ---- the workflow: finding the project, the lock modes, the plan --------------------

namespace {

namespace fs = std::filesystem;

// A project directory holding kSampleProject and, unless `lock` is empty, that lock.
fs::path sample_checkout(const std::string& name, const std::string& lock) {
    const fs::path dir = redist_test::scratch(name) / "app";
    redist_test::write(dir / "redist.toml", kSampleProject);
    if (!lock.empty()) redist_test::write(dir / "redist.lock", lock);
    return dir;
}

opened_project open_sample(const fs::path& dir) {
    auto p = open_project({.file = dir / "redist.toml"});
    REQUIRE(p.ok());
    return std::move(p).value();
}

// Offline, nothing cached: any index or manifest request fails.
project_lock_request offline_request(lock_mode mode) {
    project_lock_request r{.mode = mode};
    r.resolve.base_url = "http://127.0.0.1:9/";
    r.resolve.sources.offline = true;
    return r;
}

}  // namespace

TEST_CASE("find_project: the nearest redist.toml upward, stopping at the repository root") {
    const fs::path top = redist_test::scratch("find_project");
    const fs::path repo = top / "repo";
    const fs::path below = repo / "src" / "build";
    fs::create_directories(below);
    fs::create_directories(repo / ".git");

    SECTION("in the start directory") {
        redist_test::write(below / "redist.toml", "");
        auto found = find_project(below);
        REQUIRE(found.ok());
        CHECK(*found == below / "redist.toml");
    }
    SECTION("in a parent, up to the repository root itself") {
        redist_test::write(repo / "redist.toml", "");
        auto found = find_project(below);
        REQUIRE(found.ok());
        CHECK(*found == repo / "redist.toml");
        redist_test::write(repo / "src" / "redist.toml", "");  // the nearest wins
        found = find_project(below);
        REQUIRE(found.ok());
        CHECK(*found == repo / "src" / "redist.toml");
    }
    SECTION("never above the repository root, whose .git may be a file (a worktree)") {
        redist_test::write(top / "redist.toml", "");
        auto missing = find_project(below);
        REQUIRE_FALSE(missing.ok());
        CHECK(missing.error_value().code == error_code::not_found);
        CHECK(missing.error_value().path == below.string());
        CHECK(missing.error_value().message.find("no redist.toml") != std::string::npos);
        fs::remove(repo / ".git");
        redist_test::write(repo / ".git", "gitdir: /elsewhere\n");
        CHECK_FALSE(find_project(below).ok());
        fs::remove(repo / ".git");  // no repository: the search goes on up
        auto above = find_project(below);
        REQUIRE(above.ok());
        CHECK(*above == top / "redist.toml");
    }
    SECTION("another user's file above the start directory is refused") {
        if (::geteuid() != 0) {
            WARN("needs root to give the file to another user; skipped");
            return;
        }
        redist_test::write(repo / "redist.toml", "");
        REQUIRE(::chown((repo / "redist.toml").c_str(), 65534, 65534) == 0);
        auto refused = find_project(below);
        REQUIRE_FALSE(refused.ok());
        CHECK(refused.error_value().code == error_code::bad_manifest);
        CHECK(refused.error_value().path == (repo / "redist.toml").string());
        CHECK(refused.error_value().message.find("belongs to another user (uid 65534)") != std::string::npos);
        auto own_dir = find_project(repo);  // where the user stands: theirs to use
        REQUIRE(own_dir.ok());
        CHECK(*own_dir == repo / "redist.toml");
    }
}

TEST_CASE("open_project: the file found or given, parsed, its lock beside it, named products checked") {
    const fs::path dir = sample_checkout("open_project", "");
    fs::create_directories(dir / "sub");
    auto found = open_project({.start_dir = dir / "sub"});
    REQUIRE(found.ok());
    CHECK(found->file == dir / "redist.toml");
    CHECK(found->lock_path == dir / "redist.lock");
    CHECK(found->project.prefix == dir / "nvidia");
    REQUIRE(found->project.products.size() == 2);

    auto other_lock = open_project({.file = dir / "redist.toml", .lock_file = dir / "other.lock"});
    REQUIRE(other_lock.ok());
    CHECK(other_lock->lock_path == dir / "other.lock");

    auto typo = open_project({.file = dir / "redist.toml", .products = {"cudnn", "cudnnn"}});
    REQUIRE_FALSE(typo.ok());
    CHECK(typo.error_value().code == error_code::usage);
    CHECK(typo.error_value().message.starts_with("--product cudnnn: not a product of the project"));
    CHECK(typo.error_value().message.find("did you mean 'cudnn'") != std::string::npos);

    fs::create_directory(dir / "a_directory");
    auto not_a_file = open_project({.file = dir / "a_directory"});
    REQUIRE_FALSE(not_a_file.ok());
    CHECK(not_a_file.error_value().code == error_code::filesystem);
}

TEST_CASE("lock_project: frozen installs the lock as it is, locked refuses a stale one") {
    const std::string lock_text = project_lock_to_json(sample_lock());
    const fs::path dir = sample_checkout("lock_modes", lock_text);
    opened_project p = open_sample(dir);

    for (const auto mode : {lock_mode::frozen, lock_mode::locked}) {
        auto fresh = lock_project(p, offline_request(mode));
        REQUIRE(fresh.ok());
        CHECK(project_lock_to_json(fresh->lock) == lock_text);
        CHECK_FALSE(fresh->written);
    }

    p.project.products[0].version = "12.8";  // the lock is now stale
    auto frozen = lock_project(p, offline_request(lock_mode::frozen));
    REQUIRE(frozen.ok());  // unchecked, as uv's and pixi's --frozen
    CHECK(project_lock_to_json(frozen->lock) == lock_text);
    auto locked = lock_project(p, offline_request(lock_mode::locked));
    REQUIRE_FALSE(locked.ok());
    CHECK(locked.error_value().code == error_code::bad_manifest);
    CHECK(locked.error_value().source == (dir / "redist.lock").string());
    CHECK(locked.error_value().message.starts_with("the lock file is out of date with " +
                                                   (dir / "redist.toml").string() + " (products.cuda.version is 12.8"));
    CHECK(redist_test::slurp(dir / "redist.lock") == lock_text);  // neither writes it

    for (const auto mode : {lock_mode::frozen, lock_mode::locked}) {
        auto upgrade = offline_request(mode);
        upgrade.upgrade = {"cudnn"};
        auto refused = lock_project(p, upgrade);
        REQUIRE_FALSE(refused.ok());
        CHECK(refused.error_value().code == error_code::usage);
        CHECK(refused.error_value().message == std::string("--upgrade changes the lock; it cannot be used with ") +
                                                   (mode == lock_mode::frozen ? "--frozen" : "--locked"));
    }
}

TEST_CASE("lock_project: locked and frozen need a lock that is a regular file") {
    const fs::path dir = sample_checkout("lock_modes_missing", "");
    const opened_project p = open_sample(dir);
    for (const auto mode : {lock_mode::frozen, lock_mode::locked}) {
        auto missing = lock_project(p, offline_request(mode));
        REQUIRE_FALSE(missing.ok());
        CHECK(missing.error_value().code == error_code::bad_manifest);
        CHECK(missing.error_value().message.starts_with("no lock file to install with --"));
        CHECK(missing.error_value().path == (dir / "redist.lock").string());
    }
    redist_test::write(dir / "victim", project_lock_to_json(sample_lock()));
    fs::create_symlink(dir / "victim", dir / "redist.lock");
    for (const auto mode : {lock_mode::frozen, lock_mode::locked}) {
        auto linked = lock_project(p, offline_request(mode));
        REQUIRE_FALSE(linked.ok());
        CHECK(linked.error_value().message == "the lock file is not a regular file");
    }
}

TEST_CASE("lock_project: update keeps a current lock and rewrites one the project changed") {
    const std::string lock_text = project_lock_to_json(sample_lock());
    const fs::path dir = sample_checkout("lock_update", lock_text);
    opened_project p = open_sample(dir);

    auto kept = lock_project(p, offline_request(lock_mode::update));  // authoritative: no request
    REQUIRE(kept.ok());
    CHECK_FALSE(kept->written);
    CHECK(redist_test::slurp(dir / "redist.lock") == lock_text);

    p.project.products.pop_back();  // cudnn leaves the project: dropped from the lock, no request
    auto dry = offline_request(lock_mode::update);
    dry.write = false;
    auto dry_run = lock_project(p, dry);
    REQUIRE(dry_run.ok());
    CHECK_FALSE(dry_run->written);
    REQUIRE(dry_run->lock.products.size() == 1);
    CHECK(redist_test::slurp(dir / "redist.lock") == lock_text);

    auto rewritten = lock_project(p, offline_request(lock_mode::update));
    REQUIRE(rewritten.ok());
    CHECK(rewritten->written);
    REQUIRE(rewritten->lock.products.size() == 1);
    CHECK(rewritten->lock.products[0].name == "cuda");
    CHECK(redist_test::slurp(dir / "redist.lock") == project_lock_to_json(rewritten->lock));
    CHECK_FALSE(lock_staleness(rewritten->lock, p.project));

    p.project.products[0].version = "12.8";  // a changed spec must be resolved: offline, it fails
    auto asked = lock_project(p, offline_request(lock_mode::update));
    REQUIRE_FALSE(asked.ok());
    CHECK(asked.error_value().message.starts_with("products.cuda: "));
    CHECK(redist_test::slurp(dir / "redist.lock") == project_lock_to_json(rewritten->lock));
}

TEST_CASE("plan_sync: the platform listed, the prefix inside, the lock's plans") {
    const fs::path dir = sample_checkout("plan_sync", project_lock_to_json(sample_lock()));
    opened_project p = open_sample(dir);
    sync_request request{.lock = offline_request(lock_mode::frozen), .platform = "linux-sbsa", .exclude = {"lib/*.a"}};
    p.project.exclude = {"bin/*"};
    auto plan = plan_sync(p, request);
    REQUIRE(plan.ok());
    CHECK(plan->platform == "linux-sbsa");
    CHECK(plan->install.prefix == dir / "nvidia");
    REQUIRE(plan->install.releases.size() == 2);
    CHECK(plan->install.exclude == std::vector<std::string>{"bin/*", "lib/*.a"});
    CHECK_FALSE(plan->install.keep_unlisted);
    CHECK(plan->install.sources.offline);

    request.platform = "windows-x86_64";
    auto unlisted = plan_sync(p, request);
    REQUIRE_FALSE(unlisted.ok());
    CHECK(unlisted.error_value().code == error_code::usage);
    CHECK(unlisted.error_value().message == "platform windows-x86_64 is not in project.platforms");

    request.platform = "linux-x86_64";
    p.project.prefix = dir.parent_path() / "outside";
    auto outside = plan_sync(p, request);
    REQUIRE_FALSE(outside.ok());
    CHECK(outside.error_value().json_path == "project.prefix");
    request.allow_outside_prefix = true;
    auto allowed = plan_sync(p, request);
    REQUIRE(allowed.ok());
    CHECK(allowed->install.prefix == dir.parent_path() / "outside");
    request.allow_outside_prefix = false;
    request.prefix = dir.parent_path() / "given";  // the caller's prefix: not the project's to check
    auto given = plan_sync(p, request);
    REQUIRE(given.ok());
    CHECK(given->install.prefix == dir.parent_path() / "given");
}

TEST_CASE("plan_sync: the caller's sources are made only once the project, the prefix and the lock are good") {
    const fs::path dir = sample_checkout("plan_sync_sources", "");
    opened_project p = open_sample(dir);
    int made = 0;
    sync_request request{.lock = offline_request(lock_mode::frozen), .platform = "linux-x86_64"};
    request.lock.make_resolve = [&made] {
        ++made;
        project_resolve_options o;
        o.sources.offline = true;
        o.base_url = "http://127.0.0.1:9/";
        return o;
    };
    request.platform = "linux-aarch64";  // not listed
    CHECK_FALSE(plan_sync(p, request).ok());
    request.platform = "linux-x86_64";
    p.project.prefix = "/elsewhere";
    CHECK_FALSE(plan_sync(p, request).ok());
    p.project.prefix = dir / "nvidia";
    CHECK_FALSE(plan_sync(p, request).ok());  // frozen: no lock
    CHECK(made == 0);

    redist_test::write(dir / "redist.lock", project_lock_to_json(sample_lock()));
    auto plan = plan_sync(p, request);
    REQUIRE(plan.ok());
    CHECK(made == 1);  // for the install, not for the lock
    CHECK(plan->install.sources.offline);
}

TEST_CASE("explain_lock_mismatch: an integrity error names the locked artifact and how to accept it") {
    const project_lock lock = sample_lock();
    const locked_artifact& pinned = lock.products[0].artifacts[0];  // cudnn linux-x86_64 cuda12
    error e = make_error(error_code::integrity, "archive hash mismatch")
                  .with_url("https://mirror.invalid/cudnn/redist/" + pinned.entry.relative_path);
    const error explained = explain_lock_mismatch(e, lock, "linux-x86_64");
    CHECK(explained.message ==
          "archive hash mismatch; the lock pins cudnn cudnn linux-x86_64 cuda12 at sha256 " + kHash +
              " (42 bytes): if upstream replaced it, accept the new bytes with `redist sync --upgrade --product "
              "cudnn`");
    CHECK(explain_lock_mismatch(e, lock, "linux-sbsa").message == e.message);  // not this platform's
    error by_hash = make_error(error_code::integrity, "size mismatch").with_expected_actual(kHash, "other");
    CHECK(explain_lock_mismatch(by_hash, lock, "linux-sbsa").message.find("the lock pins") != std::string::npos);
    error network = make_error(error_code::network, "timeout").with_url(e.url);
    CHECK(explain_lock_mismatch(network, lock, "linux-x86_64").message == "timeout");
}
