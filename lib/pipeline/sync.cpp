// sync.cpp — a project into a prefix. See include/redist/sync.hpp.
#include "redist/sync.hpp"

#include <fnmatch.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "redist/cache.hpp"
#include "redist/diff.hpp"
#include "redist/select.hpp"
#include "redist/urls.hpp"
#include "support/safe_path.hpp"

namespace redist {

namespace fs = std::filesystem;

// ---- resolving ---------------------------------------------------------------------

namespace {

// The manifest's names for the requested components (aliases followed), with notes.
result<std::vector<std::string>> manifest_components(const project_product& p, const resolved_release& release,
                                                     std::vector<std::string>& notes) {
    std::vector<std::string> out;
    for (const auto& wanted : p.components) {
        const component* c = find_component_or_alias(release.parsed, wanted);
        if (!c) {
            auto e = unknown_component(release.parsed, wanted);
            e.message = "products." + p.name + " (" + p.name + " " + release.label + "): " + e.message;
            return std::move(e).with_source(sanitize_url(release.manifest_url));
        }
        if (c->key != wanted)
            notes.push_back("products." + p.name + ": '" + wanted + "' is called '" + c->key + "' in " + p.name + " " +
                            release.label + "; locking '" + c->key + "'");
        out.push_back(c->key);
    }
    return out;
}

// One product's artifacts on one platform, in the project's CUDA variant
// when the product has variants there (else the newest it offers).
result<void> lock_platform(const project_file& project, const project_product& p, const resolved_release& release,
                           const std::vector<std::string>& components, const std::string& platform, locked_product& out,
                           std::vector<std::string>& notes) {
    std::optional<int> major;
    const auto offered = available_cuda_majors(release.parsed, platform, components);
    if (!offered.empty()) {
        if (project.cuda && std::find(offered.begin(), offered.end(), *project.cuda) != offered.end()) {
            major = project.cuda;
        } else if (project.cuda) {
            return make_error(error_code::not_found, "products." + p.name + ": " + p.name + " " + release.label +
                                                         " has no CUDA " + std::to_string(*project.cuda) +
                                                         " variant for " + platform)
                .with_source(sanitize_url(release.manifest_url));
        } else {
            major = offered.back();
            notes.push_back("products." + p.name + ": no project.cuda; locking the newest variant for " + platform +
                            ", CUDA " + std::to_string(*major));
        }
    }
    auto selection = select_artifacts(release.parsed, {platform, major, components});
    if (!selection.ok()) {
        error e = std::move(selection).error_value();
        e.message = "products." + p.name + " on " + platform + ": " + e.message;
        return std::move(e).with_source(sanitize_url(release.manifest_url));
    }
    for (const auto& a : selection->artifacts) {
        locked_artifact locked;
        locked.entry = a;
        if (const auto* c = release.parsed.find_component(a.component)) locked.version = c->version;
        locked.url = sanitize_url(artifact_url(release.artifact_base_url, a.relative_path, a.sha256));
        out.artifacts.push_back(std::move(locked));
    }
    return {};
}

}  // namespace

result<project_resolution> resolve_project(const project_file& project, const project_resolve_options& options) {
    project_resolution out;
    out.lock.platforms = project.platforms;
    std::sort(out.lock.platforms.begin(), out.lock.platforms.end());
    out.lock.cuda = project.cuda;
    for (const auto& p : project.products) {
        release_request req;
        req.product = p.name;
        req.version_spec = p.version;
        req.base_url = options.base_url;
        req.sources = options.sources;
        auto release = resolve_release(req, options.transfer);
        if (!release.ok()) {
            error e = std::move(release).error_value();
            e.message = "products." + p.name + ": " + e.message;
            return e;
        }
        if (options.on_manifest) REDIST_TRY_VOID(options.on_manifest(*release));
        REDIST_TRY(const auto components, manifest_components(p, *release, out.notes));
        locked_product locked;
        locked.name = p.name;
        locked.version_spec = p.version;
        locked.components = p.components;
        locked.release_label = release->label;
        locked.manifest_url = locked_manifest_url(*release);
        locked.manifest_sha256 = release->manifest_sha256;
        for (const auto& platform : out.lock.platforms)
            REDIST_TRY_VOID(lock_platform(project, p, *release, components, platform, locked, out.notes));
        out.lock.products.push_back(std::move(locked));
    }
    return out;
}

// ---- the project's prefix ----------------------------------------------------------

namespace {

bool at_or_under(const fs::path& root, const fs::path& path) { return path == root || is_strictly_under(root, path); }

}  // namespace

result<void> check_project_prefix(const project_file& project) {
    const fs::path dir = fs::absolute(project.path).parent_path().lexically_normal();
    const fs::path prefix = fs::absolute(project.prefix).lexically_normal();
    const auto refuse = [&](const std::string& how) {
        return make_error(error_code::bad_manifest,
                          "the prefix " + prefix.string() + " " + how + " " + dir.string() +
                              "; pass --prefix DIR or --allow-outside-prefix to install there")
            .with_source(project.path.string())
            .with_json_path("project.prefix");
    };
    if (!at_or_under(dir, prefix)) return refuse("lies outside the project's directory");
    std::error_code ec_dir, ec_prefix;
    const fs::path real_dir = fs::weakly_canonical(dir, ec_dir);
    const fs::path real_prefix = fs::weakly_canonical(prefix, ec_prefix);
    if (ec_dir || ec_prefix || !at_or_under(real_dir, real_prefix))
        return refuse("resolves (through a symlink) outside the project's directory");
    // weakly_canonical() stops at a dangling symlink and keeps it as a name,
    // but creating the prefix would follow it wherever it points.
    for (fs::path p = prefix; p != dir && is_strictly_under(dir, p); p = p.parent_path()) {
        std::error_code ec;
        if (fs::is_symlink(fs::symlink_status(p, ec)) && !fs::exists(p, ec))
            return refuse("has a dangling symlink in its path, which may lead outside the project's directory");
    }
    return {};
}

result<std::vector<fs::path>> project_local_roots(const project_file& project) {
    const std::vector<fs::path> dir{fs::absolute(project.path).parent_path().lexically_normal()};
    std::vector<std::pair<std::string, std::string>> named;  // (JSON path, URL)
    if (!project.base_url.empty()) named.emplace_back("project.base-url", project.base_url);
    for (std::size_t i = 0; i < project.mirrors.size(); ++i)
        named.emplace_back("project.mirrors[" + std::to_string(i) + "]", project.mirrors[i]);
    std::vector<std::string> local;
    for (const auto& [json_path, url] : named) {
        if (!is_file_url(url)) continue;
        if (source_url_problem(url, dir))
            return make_error(error_code::bad_manifest,
                              "a local directory that resolves outside the project's directory (name it with "
                              "--mirror or --base-url): " +
                                  url)
                .with_source(project.path.string())
                .with_json_path(json_path);
        local.push_back(url);
    }
    return local_roots(local);
}

// ---- excluding ---------------------------------------------------------------------

bool path_excluded(std::string_view path, const std::vector<std::string>& globs) {
    if (globs.empty()) return false;
    const std::string p(path);
    for (std::size_t end = p.find('/');; end = p.find('/', end + 1)) {
        const std::string head = p.substr(0, end);  // each parent directory, then the path itself
        for (const auto& g : globs)
            if (::fnmatch(g.c_str(), head.c_str(), FNM_PATHNAME) == 0) return true;
        if (end == std::string::npos) return false;
    }
}

bool receipt_current(const receipt& r, const std::string& product, const artifact& a,
                     const std::vector<std::string>& exclude) {
    return r.component == a.component && r.archive_sha256 == a.sha256 && r.archive_size == a.size &&
           r.platform == a.platform && r.variant == a.variant && r.product == product && r.exclude == exclude;
}

// ---- free space ----------------------------------------------------------------------

namespace {

struct fs_space {
    dev_t device = 0;
    std::uint64_t free = 0;
    fs::path where;  // the directory measured
};

// The nearest existing directory at or above `dir` (the prefix may not exist yet).
result<fs_space> space_of(const fs::path& dir) {
    fs::path p = dir.lexically_normal();
    struct stat st {};
    while (::stat(p.c_str(), &st) != 0) {
        if (!p.has_relative_path()) break;
        p = p.parent_path();
    }
    struct statvfs vfs {};
    if (::statvfs(p.c_str(), &vfs) != 0)
        return make_error(error_code::filesystem, "cannot measure the free space").with_path(p.string());
    fs_space out;
    out.device = st.st_dev;
    out.free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    out.where = p;
    // Tests only: a pretend amount of free space (documented in sync.hpp).
    if (const char* fake = std::getenv("REDIST_TEST_FREE_BYTES"); fake && *fake)
        out.free = std::strtoull(fake, nullptr, 10);
    return out;
}

std::string mib(std::uint64_t bytes) {
    return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

result<void> check_free_space(const fs::path& prefix, std::uint64_t needed_prefix, const fs::path& cache_dir,
                              std::uint64_t needed_cache) {
    REDIST_TRY(const fs_space at_prefix, space_of(prefix));
    std::uint64_t on_prefix_fs = needed_prefix;
    if (!cache_dir.empty() && needed_cache) {
        REDIST_TRY(const fs_space at_cache, space_of(cache_dir));
        // A cache on its own file system that cannot hold the downloads is
        // bypassed (the download spools beside the stage, with a warning),
        // so those bytes then count against the prefix's file system.
        if (at_cache.device == at_prefix.device || needed_cache > at_cache.free) on_prefix_fs += needed_cache;
    }
    if (on_prefix_fs > at_prefix.free)
        return make_error(error_code::filesystem, "not enough free space: " + mib(on_prefix_fs) + " needed (archives " +
                                                      "and their unpacked contents, at least), " + mib(at_prefix.free) +
                                                      " free")
            .with_path(at_prefix.where.string());
    return {};
}

// ---- installing ------------------------------------------------------------------------

namespace {

install_request product_request(const multi_install_request& request, const product_install& p) {
    install_request req = request.options;
    req.prefix = request.prefix;
    req.product = p.product;
    req.release_label = p.label;
    req.artifact_base_url = p.artifact_base_url;
    req.artifacts = p.artifacts;
    req.component_versions = p.component_versions;
    return req;
}

}  // namespace

std::uint64_t unpacked_size_estimate(std::uint64_t archive_size) noexcept {
    const std::uint64_t half = archive_size / 2 + archive_size % 2;
    return archive_size > UINT64_MAX - half ? UINT64_MAX : archive_size + half;
}

result<void> space_preflight(const fs::path& prefix, const std::vector<product_install>& products,
                             const install_request& options, const std::vector<receipt>& receipts,
                             const std::vector<std::string>& exclude) {
    std::optional<blob_cache> cache;
    if (options.sources.cache_dir) {
        auto opened = blob_cache::open_if_possible(*options.sources.cache_dir, options.sources.shared_cache);
        if (opened.ok()) cache = std::move(*opened);
    }
    const auto add = [](std::uint64_t& sum, std::uint64_t n) { sum = n > UINT64_MAX - sum ? UINT64_MAX : sum + n; };
    std::uint64_t download = 0;
    std::uint64_t unpack = 0;
    for (const auto& p : products) {
        for (const auto& a : p.artifacts) {
            const bool current = std::any_of(receipts.begin(), receipts.end(), [&](const receipt& r) {
                return receipt_current(r, p.product, a, exclude);
            });
            if (current && !options.force) continue;
            add(unpack, unpacked_size_estimate(a.size));
            if (!cache || !cache->has_blob(a.sha256)) add(download, a.size);
        }
    }
    // Without a cache the download streams: only the unpacked bytes land on disk.
    return check_free_space(prefix, unpack, cache ? cache->root() : fs::path(), download);
}

namespace {

// The prefix's components that no product of the request names: the request's
// (product, component) pairs are its artifacts', so a component with no
// artifact for this platform is not named either.
std::vector<removed_component> unlisted(const multi_install_request& request, const std::vector<receipt>& receipts) {
    std::set<std::pair<std::string, std::string>> named;
    for (const auto& p : request.products)
        for (const auto& a : p.artifacts) named.emplace(p.product, a.component);
    std::vector<removed_component> out;
    for (const auto& r : receipts)  // sorted by (product, component): so is `out`
        if (!named.count({r.product, r.component}))
            out.push_back({r.product, r.component, r.component_version, r.release_label, r.files.size()});
    return out;
}

}  // namespace

result<multi_install_report> install_all(const multi_install_request& request) {
    REDIST_TRY(prefix_lock lock, prefix_lock::acquire(request.prefix, [&] {
                   if (request.options.observer) request.options.observer->on_lock_wait({request.prefix});
               }));
    REDIST_TRY(const std::vector<receipt> receipts, read_receipts(lock.prefix()));
    if (request.check_free_space)
        REDIST_TRY_VOID(space_preflight(request.prefix, request.products, request.options, receipts, request.exclude));

    multi_install_report out;
    if (!request.keep_unlisted) out.removed = unlisted(request, receipts);
    std::vector<staged_component> staged;
    for (const auto& p : request.products) {
        const install_request req = product_request(request, p);
        auto done = stage_install(req, lock, receipts, request.exclude);
        if (!done.ok()) return std::move(done).error_value();  // stage_install discarded every stage
        for (auto& s : done->staged) staged.push_back(std::move(s));
        out.products.push_back(std::move(done->report));
    }
    if (staged.empty() && out.removed.empty()) return out;
    auto notify = [&](fetch_stage stage) {
        if (!request.options.observer) return;
        for (const auto& r : out.products)
            for (const auto& c : r.components)
                if (!c.unchanged)
                    request.options.observer->on_progress(
                        {c.component, stage, stage == fetch_stage::done ? c.size : 0, c.size});
    };
    std::vector<component_ref> remove;
    for (const auto& r : out.removed) remove.push_back({r.product, r.component});
    notify(fetch_stage::committing);
    REDIST_TRY_VOID(commit_stages_removing(lock, std::move(staged), remove, request.options.force));
    notify(fetch_stage::done);
    return out;
}

}  // namespace redist
