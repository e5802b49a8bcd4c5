// sync.cpp — a project into a prefix. See include/redist/sync.hpp.
#include "redist/sync.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "model/diff.hpp"
#include "model/lockfile.hpp"
#include "model/urls.hpp"
#include "pipeline/sync.hpp"
#include "redist/atomic_write.hpp"
#include "redist/dependencies.hpp"
#include "redist/observer.hpp"
#include "redist/platform.hpp"
#include "redist/select.hpp"
#include "redist/suggest.hpp"
#include "support/safe_path.hpp"
#include "transport/source.hpp"

namespace redist {

namespace fs = std::filesystem;

// ---- resolving ---------------------------------------------------------------------

namespace {

// A product's CUDA major: its own `cuda`, else the project's.
std::optional<int> cuda_of(const project_file& project, const project_product& p) {
    return p.cuda ? p.cuda : project.cuda;
}

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

// One product's artifacts on one platform, in the CUDA variant the one rule
// picks (choose_cuda_variant, as fetch): the product's (else the project's)
// `cuda`, else the toolkit found on this machine, else what its driver
// supports, else the newest every component offers. The lock records why
// (locked_product::cuda_reasons).
result<void> lock_platform(const project_file& project, const project_product& p, const resolved_release& release,
                           const std::vector<std::string>& components, const std::string& platform,
                           const project_resolve_options& options, locked_product& out,
                           std::vector<std::string>& notes) {
    const std::optional<int> wanted = cuda_of(project, p);
    std::optional<cuda_detection> detected = options.detected_cuda;
    if (!wanted && !detected && options.driver_cuda &&
        !available_cuda_majors(release.parsed, platform, components).empty())
        detected = options.driver_cuda();
    const std::optional<cuda_version> asked = wanted ? std::optional<cuda_version>(cuda_version{*wanted, {}})
                                                     : std::nullopt;
    const auto choice = choose_cuda_variant(release.parsed, platform, components, asked, detected,
                                            p.cuda ? "products." + p.name + ".cuda" : std::string("project.cuda"));
    selection_request request{platform, choice.cuda_major, components};
    request.cuda_minor = choice.cuda_minor;
    auto selection = select_artifacts(release.parsed, request);
    if (!selection.ok()) {
        error e = std::move(selection).error_value();
        e.message = "products." + p.name + " on " + platform + ": " + e.message;
        return std::move(e).with_source(sanitize_url(release.manifest_url));
    }
    if (choice.cuda_major) {
        const std::string keys = variant_list(selection->artifacts);
        out.cuda_reasons[platform] = (keys.empty() ? "no variant" : keys) + ": " + choice.reason;
        if (!wanted && !keys.empty())
            notes.push_back("products." + p.name + ": locking " + keys + " for " + platform + " (" + choice.reason +
                            ")");
    }
    for (const auto& a : selection->artifacts) {
        out.artifacts.push_back(lock_artifact(release, a));
    }
    return {};
}

// Resolves `spec` for `p` and locks its artifacts on every listed platform.
result<locked_product> resolve_product(const project_file& project, const project_product& p, const std::string& spec,
                                       const project_resolve_options& options, std::vector<std::string>& notes) {
    // The cuda product's releases are CUDA versions: with a CUDA major,
    // "latest" is the newest N.x, as `fetch cuda --cuda N` (one rule).
    auto for_cuda = release_spec_for_cuda(p.name, spec, cuda_of(project, p), "cuda =");
    if (!for_cuda.ok()) {
        error e = std::move(for_cuda).error_value();  // the project file contradicts itself
        e.code = error_code::bad_manifest;
        return std::move(e).with_source(project.path.string()).with_json_path("products." + p.name + ".version");
    }
    release_request req;
    req.product = p.name;
    req.version_spec = *for_cuda;
    req.base_url = options.base_url;
    req.sources = options.sources;
    req.observer = options.observer;
    req.recompressed = true;  // the lock pins each copy's decoded tar (lock_platform)
    auto release = resolve_release(req, options.transfer);
    if (!release.ok()) {
        error e = std::move(release).error_value();
        e.message = "products." + p.name + ": " + e.message;
        return e;
    }
    if (options.on_manifest) REDIST_TRY_VOID(options.on_manifest(*release));
    REDIST_TRY(const auto components, manifest_components(p, *release, notes));
    locked_product locked;
    locked.name = p.name;
    locked.version_spec = p.version;
    locked.components = p.components;
    locked.cuda = p.cuda;
    locked.deps = p.deps;
    locked.release_label = release->label;
    locked.manifest_url = locked_manifest_url(*release);
    locked.manifest_sha256 = release->manifest_sha256;
    std::vector<std::string> platforms = project.platforms;
    std::sort(platforms.begin(), platforms.end());
    for (const auto& platform : platforms)
        REDIST_TRY_VOID(lock_platform(project, p, *release, components, platform, options, locked, notes));
    return locked;
}

// The same release resolved again: an artifact the lock pins (same platform,
// variant and component) must still have its locked bytes. Upstream replacing
// it in place is an integrity failure, unless the product is being upgraded.
result<void> check_replaced(const locked_product& before, const locked_product& now, bool upgrading,
                            std::vector<std::string>& notes) {
    if (before.release_label != now.release_label) return {};
    for (const auto& a : now.artifacts) {
        for (const auto& old : before.artifacts) {
            const artifact& x = old.entry;
            if (x.platform != a.entry.platform || x.variant != a.entry.variant || x.component != a.entry.component)
                continue;
            if (x.sha256 == a.entry.sha256 && x.size == a.entry.size) break;
            const std::string what = now.name + " " + x.component + " " + x.platform +
                                     (x.variant ? " " + *x.variant : "") + " (" + now.name + " " + now.release_label +
                                     ")";
            if (upgrading) {
                notes.push_back("products." + now.name + ": " + what +
                                " was replaced upstream since it was locked; locking the new sha256 " + a.entry.sha256);
                break;
            }
            return make_error(error_code::integrity,
                              "products." + now.name + ": " + what +
                                  " was replaced upstream since it was locked; if that is intended, accept it with "
                                  "`redist sync --upgrade --product " +
                                  now.name + "`")
                .with_url(now.manifest_url)
                .with_expected_actual(x.sha256 + " (" + std::to_string(x.size) + " bytes)",
                                      a.entry.sha256 + " (" + std::to_string(a.entry.size) + " bytes)");
        }
    }
    return {};
}

const locked_product* find_locked(const project_lock* lock, const std::string& name) {
    if (!lock) return nullptr;
    for (const auto& l : lock->products)
        if (l.name == name) return &l;
    return nullptr;
}

// One product of the project into the lock: its previous entry kept as it
// is when nothing it depends on changed (the lock is authoritative), else
// resolved again (at its locked release where that still stands).
result<locked_product> lock_product(const project_file& project, const project_product& p,
                                    const project_resolve_options& options, bool same_targets,
                                    std::vector<std::string>& notes) {
    const locked_product* before = find_locked(options.previous, p.name);
    const bool upgrading = options.upgrade_all ||
                           std::find(options.upgrade.begin(), options.upgrade.end(), p.name) != options.upgrade.end();
    const bool same_spec = before && before->version_spec == p.version && before->cuda == p.cuda;
    if (same_spec && !upgrading && same_targets && before->components == p.components) {
        locked_product kept = *before;  // authoritative: no request
        kept.deps = p.deps;
        return kept;
    }
    // Components or targets changed: the locked release still stands,
    // unless it is no release of the CUDA major now asked for (cuda).
    const bool keep_release = same_spec && !upgrading && !before->release_label.empty() &&
                              release_spec_for_cuda(p.name, before->release_label, cuda_of(project, p)).ok();
    REDIST_TRY(auto locked,
               resolve_product(project, p, keep_release ? before->release_label : p.version, options, notes));
    if (before) REDIST_TRY_VOID(check_replaced(*before, locked, upgrading, notes));
    return locked;
}

void add_unique(std::vector<std::string>& list, const std::string& value) {
    if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

// What the products with `deps = true` need (dependencies_of, at the CUDA
// major of each locked artifact's variant), as one product of the `cuda`
// release to lock; nullopt when the table names nothing for them. Outcomes:
// ok | bad_manifest (two CUDA majors: one prefix holds one cuda release).
result<std::optional<project_product>> dependency_request(const project_file& project, const project_lock& lock,
                                                          std::vector<std::string>& asking,
                                                          std::vector<std::string>& notes) {
    std::optional<int> major;
    std::string major_of;
    std::vector<std::string> components;
    for (const auto& p : project.products) {
        if (!p.deps) continue;
        const locked_product* l = find_locked(&lock, p.name);
        bool any = false;
        for (const auto& a : l->artifacts) {
            const auto m = a.entry.cuda_major();
            const auto deps = m ? dependencies_of(p.name, l->release_label, *m) : std::nullopt;
            if (!deps) continue;
            if (major && *major != *m)
                return make_error(error_code::bad_manifest,
                                  "deps = true needs CUDA " + std::to_string(*major) + " for " + major_of +
                                      " and CUDA " + std::to_string(*m) + " for " + p.name +
                                      " (one prefix holds one cuda release): set project.cuda")
                    .with_source(project.path.string())
                    .with_json_path("products." + p.name + ".deps");
            major = m;
            major_of = p.name;
            any = true;
            for (const auto& c : deps->components) add_unique(components, c);
        }
        if (any) {
            asking.push_back(p.name);
        } else {
            notes.push_back("products." + p.name + ".deps: redist's table names no dependencies for " + p.name + " " +
                            l->release_label);
        }
    }
    if (!major) return std::optional<project_product>();
    project_product dep;
    dep.name = std::string(dependency_product);
    dep.version = std::to_string(*major);
    dep.components = std::move(components);
    dep.cuda = major;  // its releases are CUDA versions: of this major, whatever project.cuda says
    return std::optional<project_product>(std::move(dep));
}

// deps = true: the `cuda` release the dependencies come from, into the lock.
// A project that names `cuda` itself must list them there (it decides that
// release); otherwise the newest release of the CUDA major is locked (kept
// while the request is the lock's) as a product with dependency_of set.
result<void> lock_dependencies(const project_file& project, const project_resolve_options& options, bool same_targets,
                               project_resolution& out) {
    std::vector<std::string> asking;
    REDIST_TRY(auto request, dependency_request(project, out.lock, asking, out.notes));
    if (!request) return {};
    const auto named = std::find_if(project.products.begin(), project.products.end(),
                                    [&](const project_product& p) { return p.name == request->name; });
    if (named != project.products.end()) {
        std::string lacking;
        if (!named->components.empty())
            for (const auto& c : request->components)
                if (std::find(named->components.begin(), named->components.end(), c) == named->components.end())
                    lacking += (lacking.empty() ? "" : ", ") + c;
        const locked_product* l = find_locked(&out.lock, named->name);
        const bool same_major = release_spec_for_cuda(named->name, l->release_label, std::stoi(request->version)).ok();
        if (lacking.empty() && same_major) return {};
        return make_error(error_code::bad_manifest,
                          "deps = true of " + asking.front() + " needs " +
                              (lacking.empty()
                                   ? "CUDA " + request->version + ".x of products." + named->name
                                   : lacking + " from products." + named->name + ": add them to its components") +
                              " (products." + named->name + " locks " + l->release_label + ")")
            .with_source(project.path.string())
            .with_json_path("products." + named->name);
    }
    REDIST_TRY(auto locked, lock_product(project, *request, options, same_targets, out.notes));
    locked.dependency_of = asking;
    const auto at = std::find_if(out.lock.products.begin(), out.lock.products.end(),
                                 [&](const locked_product& p) { return p.name > locked.name; });
    out.lock.products.insert(at, std::move(locked));
    return {};
}

}  // namespace

result<project_resolution> resolve_project(const project_file& project, const project_resolve_options& options) {
    project_resolution out;
    out.lock.platforms = project.platforms;
    std::sort(out.lock.platforms.begin(), out.lock.platforms.end());
    out.lock.cuda = project.cuda;
    // The lock's selections hold for the project's platforms and CUDA major only.
    bool same_targets = false;
    if (options.previous) {
        std::vector<std::string> locked = options.previous->platforms;
        std::sort(locked.begin(), locked.end());
        same_targets = locked == out.lock.platforms && options.previous->cuda == project.cuda;
    }
    for (const auto& p : project.products) {
        REDIST_TRY(auto locked, lock_product(project, p, options, same_targets, out.notes));
        out.lock.products.push_back(std::move(locked));
    }
    REDIST_TRY_VOID(lock_dependencies(project, options, same_targets, out));
    return out;
}

result<resolved_release> reread_locked_manifest(const std::string& product, const std::string& release_label,
                                                const std::string& manifest_url, release_request request,
                                                const transfer_options& transfer) {
    request.product = product;
    request.version_spec = release_label;
    request.manifest_location.clear();
    if (auto base = base_of_manifest_url(manifest_url, product, release_label)) {
        request.base_url = *base;
    } else {
        request.manifest_location = manifest_url;
        request.product.clear();
    }
    return resolve_release(request, transfer);
}

void attach_locked_copies(const project_lock& lock, std::vector<release_plan>& plans,
                          const project_resolve_options& options) {
    for (auto& plan : plans) {
        if (plan.locked_tar_sha256.empty()) continue;  // nothing a copy could be checked against
        const locked_product* p = find_locked(&lock, plan.product);
        if (!p) continue;
        release_request req;
        req.manifest_sha256 = p->manifest_sha256;  // the record must belong to the locked manifest
        req.sources = options.sources;
        req.observer = options.observer;
        req.recompressed = true;
        auto release = reread_locked_manifest(p->name, p->release_label, p->manifest_url, req, options.transfer);
        if (!release.ok()) {
            if (options.observer)
                options.observer->on_copy_failure(
                    {"", sanitize_url(p->manifest_url), std::move(release).error_value()});
            continue;
        }
        plan.copies = std::move(release->recompressed.copies);
        plan.copy_base_url = std::move(release->recompressed_base_url);
    }
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
        if (make_source(url).kind() != source_kind::file) continue;
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

// ---- opening a project --------------------------------------------------------------

namespace {

bool exists_at(const fs::path& p) {
    std::error_code ec;
    return fs::exists(fs::symlink_status(p, ec));
}

// Whether `path` is a regular file, not followed through a symlink.
bool regular_file_at(const fs::path& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

result<fs::path> find_project(const fs::path& start_dir) {
    for (fs::path dir = start_dir;; dir = dir.parent_path()) {
        const fs::path candidate = dir / "redist.toml";
        struct stat st {};
        if (::lstat(candidate.c_str(), &st) == 0) {
            if (dir != start_dir && st.st_uid != ::geteuid() && st.st_uid != 0)
                return make_error(error_code::bad_manifest,
                                  "this project file in a parent directory belongs to another user (uid " +
                                      std::to_string(st.st_uid) + "); pass --file to use it")
                    .with_path(candidate.string());
            return candidate;
        }
        if (exists_at(dir / ".git") || dir == dir.root_path() || dir == dir.parent_path()) break;
    }
    return make_error(error_code::not_found,
                      "no redist.toml here or in a parent directory (up to the repository root); "
                      "run `redist init` or pass --file")
        .with_path(start_dir.string());
}

result<opened_project> open_project(const project_open_request& request) {
    opened_project out;
    if (!request.file.empty()) {
        out.file = request.file;
    } else {
        fs::path start = request.start_dir;
        if (start.empty()) {
            std::error_code ec;
            start = fs::current_path(ec);
            if (ec) return make_error(error_code::filesystem, "cannot read the current directory");
        }
        REDIST_TRY(out.file, find_project(start));
    }
    REDIST_TRY(const std::string text, read_project_document(out.file, kMaxProjectFileBytes, "project file"));
    const fs::path file = fs::absolute(out.file);
    REDIST_TRY(out.project, parse_project(text, file));
    out.lock_path = request.lock_file.empty() ? file.parent_path() / "redist.lock" : request.lock_file;
    REDIST_TRY(auto project_roots, project_local_roots(out.project));
    out.roots = request.local_roots;
    out.roots.insert(out.roots.end(), project_roots.begin(), project_roots.end());
    std::vector<std::string> names;
    for (const auto& p : out.project.products) names.push_back(p.name);
    for (const auto& name : request.products)
        if (std::find(names.begin(), names.end(), name) == names.end())
            return make_error(error_code::usage,
                              "--product " + name + ": not a product of the project" + did_you_mean(name, names))
                .with_source(out.file.string());
    return out;
}

// ---- locking it ------------------------------------------------------------------

namespace {

// The lock as written, with its text; nullopt when there is none.
struct lock_on_disk {
    project_lock lock;
    std::string text;
};

// A lock is a regular file: what a checkout holds at its name otherwise (a
// symlink to /etc/shadow) is never read; installing the lock (`as_is`)
// then fails, resolving replaces it (a warning).
result<std::optional<lock_on_disk>> read_lock(const opened_project& p, bool as_is, std::vector<std::string>& warnings) {
    if (!exists_at(p.lock_path)) return std::optional<lock_on_disk>();
    if (!regular_file_at(p.lock_path)) {
        if (as_is)
            return make_error(error_code::bad_manifest, "the lock file is not a regular file")
                .with_path(p.lock_path.string());
        warnings.push_back(p.lock_path.string() + " is not a regular file; it is no lock, and is replaced");
        return std::optional<lock_on_disk>();
    }
    lock_on_disk out;
    REDIST_TRY(out.text, read_project_document(p.lock_path, kMaxLockFileBytes, "lock file"));
    REDIST_TRY(out.lock, project_lock_from_json(out.text, p.lock_path.string()));
    REDIST_TRY_VOID(check_lock_sources(out.lock, p.lock_path.string(), p.roots));
    return std::optional<lock_on_disk>(std::move(out));
}

// The caller's sources (asked for now: make_resolve), with the project's
// where the caller names none.
project_resolve_options sources_for(const project_file& project, const project_lock_request& request) {
    project_resolve_options o = request.make_resolve ? request.make_resolve() : request.resolve;
    if (o.base_url.empty()) o.base_url = project.base_url.empty() ? std::string(default_base_url) : project.base_url;
    if (o.sources.mirrors.empty()) o.sources.mirrors = project.mirrors;
    o.upgrade_all = request.upgrade_all;
    o.upgrade = request.upgrade;
    return o;
}

// update: keeps what the lock pins, resolves what changed in the project
// file (or what is upgraded), and rewrites the lock only when that changed it.
result<project_lock_report> update_lock(const opened_project& p, const project_lock_request& request) {
    project_lock_report out;
    REDIST_TRY(const auto previous, read_lock(p, false, out.warnings));
    project_resolve_options r = sources_for(p.project, request);
    r.previous = previous ? &previous->lock : nullptr;
    REDIST_TRY(auto resolved, resolve_project(p.project, r));
    out.notes = std::move(resolved.notes);
    out.lock = std::move(resolved.lock);
    const std::string text = project_lock_to_json(out.lock);
    if ((!previous || previous->text != text) && request.write) {
        // Atomically: a reader (or a crash) sees the old lock or the new one, and
        // nothing a checkout holds at the name (or at a temp name) is written through.
        REDIST_TRY_VOID(atomic_write(p.lock_path, text, durability::full));
        out.written = true;
    }
    return out;
}

}  // namespace

result<project_lock_report> lock_project(const opened_project& p, const project_lock_request& request) {
    if (request.mode == lock_mode::update) return update_lock(p, request);
    const std::string flag = request.mode == lock_mode::frozen ? "--frozen" : "--locked";
    if (request.upgrade_all || !request.upgrade.empty())
        return make_error(error_code::usage, "--upgrade changes the lock; it cannot be used with " + flag);
    project_lock_report out;
    REDIST_TRY(auto lock, read_lock(p, true, out.warnings));
    if (!lock)
        return make_error(error_code::bad_manifest, "no lock file to install with " + flag +
                                                        "; run `redist lock` (or a plain `redist sync`) to make it")
            .with_path(p.lock_path.string());
    // frozen: as it is, unchecked (uv's and pixi's --frozen).
    if (request.mode == lock_mode::locked)
        if (auto stale = lock_staleness(lock->lock, p.project))
            return make_error(error_code::bad_manifest,
                              "the lock file is out of date with " + p.file.string() + " (" + *stale +
                                  "); run `redist lock` (or a plain `redist sync`) to update it")
                .with_source(p.lock_path.string());
    out.lock = std::move(lock->lock);
    return out;
}

// ---- syncing it ------------------------------------------------------------------

result<sync_plan> plan_sync(const opened_project& p, const sync_request& request) {
    sync_plan out;
    if (!request.platform.empty()) {
        out.platform = request.platform;
    } else {
        REDIST_TRY(out.platform, detect_host_platform(host_probe::system()));
    }
    const project_file& project = p.project;
    if (std::find(project.platforms.begin(), project.platforms.end(), out.platform) == project.platforms.end())
        return make_error(error_code::usage, "platform " + out.platform + " is not in project.platforms")
            .with_source(p.file.string());
    // The project's prefix stays inside its directory unless the caller says otherwise.
    if (!request.prefix.empty()) {
        out.install.prefix = fs::absolute(request.prefix).lexically_normal();
    } else {
        if (!request.allow_outside_prefix) REDIST_TRY_VOID(check_project_prefix(project));
        out.install.prefix = project.prefix;
    }
    REDIST_TRY(out.lock, lock_project(p, request.lock));
    auto plans = plans_for_platform(out.lock.lock, out.platform);
    if (!plans.ok()) return std::move(plans).error_value().with_source(p.lock_path.string());
    const project_resolve_options sources = sources_for(project, request.lock);
    // A mirror's recompressed copies, each used only where the lock pins its tar.
    if (request.use_recompressed) attach_locked_copies(out.lock.lock, *plans, sources);
    out.install.releases = std::move(plans).value();
    out.install.exclude = project.exclude;
    for (const auto& g : request.exclude)
        if (std::find(out.install.exclude.begin(), out.install.exclude.end(), g) == out.install.exclude.end())
            out.install.exclude.push_back(g);
    out.install.keep_unlisted = request.keep_unlisted;
    out.install.transfer = sources.transfer;
    out.install.sources = sources.sources;
    return out;
}

error explain_lock_mismatch(error e, const project_lock& lock, const std::string& platform) {
    if (e.code != error_code::integrity) return e;
    for (const auto& p : lock.products) {
        for (const auto& a : p.artifacts) {
            const auto& x = a.entry;
            const bool same_url = !e.url.empty() && e.url.ends_with("/" + x.relative_path);
            if (x.platform != platform || !(same_url || e.expected.starts_with(x.sha256))) continue;
            e.message += "; the lock pins " + p.name + " " + x.component + " " + x.platform +
                         (x.variant ? " " + *x.variant : "") + " at sha256 " + x.sha256 + " (" +
                         std::to_string(x.size) +
                         " bytes): if upstream replaced it, accept the new bytes with "
                         "`redist sync --upgrade --product " +
                         p.name + "`";
            return e;
        }
    }
    return e;
}

result<sync_report> sync_project(const opened_project& p, const sync_request& request) {
    REDIST_TRY(auto plan, plan_sync(p, request));
    auto report = install(plan.install);
    if (!report.ok()) return explain_lock_mismatch(std::move(report).error_value(), plan.lock.lock, plan.platform);
    return sync_report{std::move(plan.lock), std::move(plan.platform), std::move(report).value()};
}

}  // namespace redist
