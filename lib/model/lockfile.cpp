#include "redist/lockfile.hpp"

#include <algorithm>
#include <set>
#include <simdjson.h>

#include "model/diff.hpp"
#include "model/lockfile.hpp"
#include "model/manifest.hpp"
#include "model/urls.hpp"
#include "redist/json_writer.hpp"
#include "redist/manifest.hpp"
#include "redist/select.hpp"
#include "support/json_reader.hpp"
#include "support/safe_path.hpp"

namespace redist {

namespace {

// Sorted (platform, variant, component): a re-lock gives the same bytes.
void write_artifacts(json_writer& w, const std::vector<locked_artifact>& artifacts) {
    std::vector<const locked_artifact*> sorted;
    sorted.reserve(artifacts.size());
    for (const auto& a : artifacts) sorted.push_back(&a);
    std::sort(sorted.begin(), sorted.end(), [](const locked_artifact* x, const locked_artifact* y) {
        return std::tie(x->entry.platform, x->entry.variant, x->entry.component) <
               std::tie(y->entry.platform, y->entry.variant, y->entry.component);
    });
    w.key("artifacts").begin_array();
    for (const auto* a : sorted) {
        w.begin_object();
        w.field("component", a->entry.component);
        w.field("version", a->version);
        w.field("platform", a->entry.platform);
        w.field("variant", a->entry.variant);
        w.field("relative_path", a->entry.relative_path);
        w.field("url", sanitize_url(a->url));  // a lock never holds credentials
        w.field("sha256", a->entry.sha256);
        w.field("size", a->entry.size);
        if (!a->tar_sha256.empty()) w.field("tar_sha256", a->tar_sha256);
        if (!a->tar_list_sha256.empty()) w.field("tar_list_sha256", a->tar_list_sha256);
        if (!a->tree_sha256.empty()) w.field("tree_sha256", a->tree_sha256);
        if (!a->copy_key.empty()) w.field("copy_key", a->copy_key);
        w.end_object();
    }
    w.end_array();
}

}  // namespace

locked_artifact lock_artifact(const resolved_release& release, const artifact& a) {
    locked_artifact locked;
    locked.entry = a;
    if (const auto* c = release.parsed.find_component(a.component)) locked.version = c->version;
    locked.url = sanitize_url(artifact_url(release.artifact_base_url, a.relative_path, a.sha256));
    // resolve_release keeps a mirror's copies only when a trusted key signed them.
    if (const auto* copy = release.recompressed.find(a.sha256); copy && !release.recompressed_signer.empty()) {
        locked.tar_sha256 = copy->tar_sha256;
        locked.tar_list_sha256 = copy->tar_list_sha256;
        locked.tree_sha256 = copy->tree_sha256;
        locked.copy_key = release.recompressed_signer;
    }
    return locked;
}

std::string lockfile_to_json(const lockfile& lock) {
    json_writer w(2);
    w.begin_object();
    w.field("lock_version", 1);
    w.field("product", lock.product);
    w.field("release_label", lock.release_label);
    w.field("manifest_url", sanitize_url(lock.manifest_url));
    w.field("manifest_sha256", lock.manifest_sha256);
    write_artifacts(w, lock.artifacts);
    w.end_object();
    return w.str() + "\n";
}

namespace {

json::value_fn str(std::string& out) {
    return [&out](json::value& v) -> result<void> { return v.get(out); };
}

// A SHA-256 field, kept as written.
json::value_fn sha256_str(std::string& out) {
    return [&out](json::value& v) -> result<void> {
        REDIST_TRY_VOID(v.get(out));
        if (!is_sha256_hex(out)) return result<void>(v.bad("not a SHA-256"));
        return result<void>();
    };
}

result<void> read_artifact(json::value& item, locked_artifact& a) {
    auto read = item.read_object({
        {"component", [&](json::value& v) -> result<void> { return v.get_name(a.entry.component, "component"); }, true},
        {"version", str(a.version)},
        {"platform", [&](json::value& v) -> result<void> { return v.get_name(a.entry.platform, "platform"); }, true},
        {"variant", [&](json::value& v) -> result<void> { return v.get_optional_name(a.entry.variant, "variant"); }},
        {"relative_path",
         [&](json::value& v) -> result<void> {
             REDIST_TRY_VOID(v.get(a.entry.relative_path));
             if (const char* why = artifact_path_problem(a.entry.relative_path)) return result<void>(v.bad(why));
             return result<void>();
         },
         true},  // required: `redist lock` always writes it, and the archive format comes from it
        {"url", str(a.url), true},
        {"sha256", sha256_str(a.entry.sha256), true},
        {"size", [&](json::value& v) -> result<void> { return v.get(a.entry.size); }, true},
        {"tar_sha256", sha256_str(a.tar_sha256)},
        {"tar_list_sha256", sha256_str(a.tar_list_sha256)},
        {"tree_sha256", sha256_str(a.tree_sha256)},
        {"copy_key", sha256_str(a.copy_key)},
    });
    if (!read.ok()) return read;
    if (a.url.empty()) return item.bad("url is empty");
    a.entry.format = archive_format_from_path(a.entry.relative_path.empty() ? a.url : a.entry.relative_path);
    return {};
}

}  // namespace

result<lockfile> lockfile_from_json(std::string_view text, std::string_view source) {
    lockfile lock;
    std::uint64_t version = 0;
    auto read = json::read_document(
        text, source, "lock file",
        {{"lock_version", [&](json::value& v) -> result<void> { return v.get(version); }, true},
         // Checked after lock_version, so that a version 2 lock gets the message below.
         {"product", [&](json::value& v) -> result<void> { return v.get_name(lock.product, "product"); }},
         {"release_label",
          [&](json::value& v) -> result<void> { return v.get_name_or_empty(lock.release_label, "release label"); }},
         {"manifest_url", str(lock.manifest_url)},
         {"manifest_sha256", str(lock.manifest_sha256)},
         {"artifacts", [&](json::value& v) -> result<void> {
              return v.for_each([&](json::value& item) -> result<void> {
                  locked_artifact a;
                  REDIST_TRY_VOID(read_artifact(item, a));
                  lock.artifacts.push_back(std::move(a));
                  return result<void>();
              });
          }}});
    if (!read.ok()) return std::move(read).error_value();
    if (version != 1)
        return make_error(error_code::bad_manifest,
                          version == 2
                              ? std::string("a project lock (version 2): install it with `redist sync --locked`")
                              : "unsupported lock file version " + std::to_string(version))
            .with_source(std::string(source))
            .with_json_path("lock_version");
    if (lock.product.empty())
        return make_error(error_code::bad_manifest, "missing product")
            .with_source(std::string(source))
            .with_json_path("product");
    return lock;
}

result<std::vector<locked_artifact>> locked_for(const lockfile& lock, const std::string& platform,
                                                std::optional<int> cuda_major) {
    std::vector<locked_artifact> on_platform;
    std::vector<int> majors;
    for (const auto& a : lock.artifacts) {
        if (a.entry.platform != platform) continue;
        on_platform.push_back(a);
        if (auto m = a.entry.cuda_major()) majors.push_back(*m);
    }
    if (on_platform.empty()) {
        std::string have;
        for (const auto& a : lock.artifacts)
            if (have.find(a.entry.platform) == std::string::npos) have += (have.empty() ? "" : ", ") + a.entry.platform;
        return make_error(error_code::not_found,
                          "the lock file has nothing for platform " + platform + " (it locks: " + have + ")");
    }
    std::optional<int> major = cuda_major;
    if (!major && !majors.empty()) major = *std::max_element(majors.begin(), majors.end());
    std::vector<locked_artifact> out;
    for (const auto& a : on_platform)
        if (!a.entry.variant || a.entry.cuda_major() == major) out.push_back(a);
    if (out.empty())
        return make_error(error_code::not_found,
                          "the lock file has no CUDA " + std::to_string(*major) + " artifacts for " + platform);
    return out;
}

result<void> check_lock_against_manifest(const lockfile& lock, const manifest& m) {
    for (const auto& locked : lock.artifacts) {
        const component* c = m.find_component(locked.entry.component);
        const artifact* found = nullptr;
        if (c) {
            for (const auto& a : c->artifacts)
                if (a.platform == locked.entry.platform && a.variant == locked.entry.variant) found = &a;
        }
        const std::string what = locked.entry.component + " " + locked.entry.platform +
                                 (locked.entry.variant ? " " + *locked.entry.variant : "");
        if (!found)
            return make_error(error_code::integrity,
                              "the upstream manifest no longer lists the locked artifact " + what)
                .with_url(lock.manifest_url);
        if (found->sha256 != locked.entry.sha256 || found->size != locked.entry.size)
            return make_error(error_code::integrity, "the upstream manifest changed the locked artifact " + what)
                .with_url(lock.manifest_url)
                .with_expected_actual(locked.entry.sha256 + " (" + std::to_string(locked.entry.size) + " bytes)",
                                      found->sha256 + " (" + std::to_string(found->size) + " bytes)");
    }
    return {};
}

// ---- making and using a version 1 lock ---------------------------------------------

std::string locked_manifest_url(const resolved_release& release) {
    const std::string& served = release.manifest_url;
    return sanitize_url(join_url(release.artifact_base_url, served.substr(served.rfind('/') + 1)));
}

namespace {

result<void> check_url(const std::string& url, std::string_view source, const std::string& json_path,
                       const std::vector<std::filesystem::path>& roots) {
    if (auto why = source_url_problem(url, roots))
        return make_error(error_code::bad_manifest, *why + ": " + sanitize_url(url))
            .with_source(std::string(source))
            .with_json_path(json_path);
    return {};
}

result<void> check_artifact_urls(const std::vector<locked_artifact>& artifacts, std::string_view source,
                                 const std::string& at, const std::vector<std::filesystem::path>& roots) {
    for (std::size_t i = 0; i < artifacts.size(); ++i)
        REDIST_TRY_VOID(check_url(artifacts[i].url, source, at + "artifacts[" + std::to_string(i) + "].url", roots));
    return {};
}

}  // namespace

result<void> check_lock_sources(const lockfile& lock, std::string_view source,
                                const std::vector<std::filesystem::path>& local_roots) {
    if (!lock.manifest_url.empty()) REDIST_TRY_VOID(check_url(lock.manifest_url, source, "manifest_url", local_roots));
    return check_artifact_urls(lock.artifacts, source, "", local_roots);
}

result<void> check_lock_sources(const project_lock& lock, std::string_view source,
                                const std::vector<std::filesystem::path>& local_roots) {
    for (std::size_t i = 0; i < lock.products.size(); ++i) {
        const std::string at = "products[" + std::to_string(i) + "].";
        REDIST_TRY_VOID(check_url(lock.products[i].manifest_url, source, at + "manifest_url", local_roots));
        REDIST_TRY_VOID(check_artifact_urls(lock.products[i].artifacts, source, at, local_roots));
    }
    return {};
}

result<lockfile> make_lockfile(const resolved_release& release, const std::vector<std::string>& platforms,
                               const std::vector<int>& cuda_majors, const std::vector<std::string>& components) {
    lockfile lock;
    lock.product = release.product;
    lock.release_label = release.label;
    lock.manifest_url = locked_manifest_url(release);
    lock.manifest_sha256 = release.manifest_sha256;
    std::set<std::string> seen;  // platform/variant/component, so plain artifacts are locked once
    for (const auto& platform : platforms) {
        std::vector<std::optional<int>> majors(cuda_majors.begin(), cuda_majors.end());
        if (majors.empty()) {
            for (int m : available_cuda_majors(release.parsed, platform, components)) majors.emplace_back(m);
            if (majors.empty()) majors.emplace_back(std::nullopt);
        }
        for (const auto& major : majors) {
            auto selection = select_artifacts(release.parsed, {platform, major, components});
            if (!selection.ok())
                return std::move(selection).error_value().with_source(sanitize_url(release.manifest_url));
            for (const auto& a : selection->artifacts) {
                if (!seen.insert(a.platform + "/" + a.variant.value_or("") + "/" + a.component).second) continue;
                lock.artifacts.push_back(lock_artifact(release, a));
            }
        }
    }
    return lock;
}

namespace {

// The key the lock holds for `wanted`: itself, or its other name in the alias table.
std::optional<std::string> locked_key(const std::vector<locked_artifact>& artifacts, const std::string& wanted) {
    const auto has = [&](std::string_view key) {
        return std::any_of(artifacts.begin(), artifacts.end(),
                           [&](const locked_artifact& a) { return a.entry.component == key; });
    };
    if (has(wanted)) return wanted;
    for (const auto& alias : component_aliases()) {
        if (alias.old_key == wanted && has(alias.new_key)) return std::string(alias.new_key);
        if (alias.new_key == wanted && has(alias.old_key)) return std::string(alias.old_key);
    }
    return std::nullopt;
}

// The plan that installs the locked artifacts for `platform` as they are
// (never re-resolved), from the directory of the locked manifest.
release_plan locked_plan(const std::string& product, const std::string& label, const std::string& manifest_url,
                         const std::vector<locked_artifact>& artifacts, const std::string& platform) {
    release_plan plan;
    plan.product = product;
    plan.label = label;
    plan.artifact_base_url = url_directory(manifest_url);
    plan.from_lock = true;
    for (const auto& a : artifacts) {
        if (a.entry.platform != platform) continue;
        plan.component_versions[a.entry.component] = a.version;
        // A tar pinned without the key that signed it (a lock written before
        // copies needed a trusted signature) is not honoured: its copy is
        // not used, and the original is installed.
        if (!a.tar_sha256.empty() && !a.copy_key.empty()) {
            plan.locked_tar_sha256[a.entry.sha256] = a.tar_sha256;
            if (!a.tar_list_sha256.empty()) plan.locked_tar_list_sha256[a.entry.sha256] = a.tar_list_sha256;
            if (!a.tree_sha256.empty()) plan.locked_tree_sha256[a.entry.sha256] = a.tree_sha256;
        }
        plan.locked_urls[a.entry.relative_path] = a.url;
        plan.artifacts.push_back(a.entry);
    }
    return plan;
}

}  // namespace

result<release_plan> plan_from_lock(const lockfile& lock, const std::string& platform, std::optional<int> cuda_major,
                                    const std::vector<std::string>& components, std::vector<std::string>* notes) {
    REDIST_TRY(auto artifacts, locked_for(lock, platform, cuda_major));
    if (!components.empty()) {
        std::set<std::string> keys;
        for (const auto& wanted : components) {
            auto key = locked_key(artifacts, wanted);
            if (!key)
                return make_error(error_code::not_found,
                                  "component '" + printable(wanted, 64) + "' is not in the lock file for " + platform);
            if (*key != wanted && notes)
                notes->push_back("'" + wanted + "' is called '" + *key + "' in " + lock.product + " " +
                                 lock.release_label + "; using '" + *key + "'");
            keys.insert(*key);
        }
        std::erase_if(artifacts, [&](const locked_artifact& a) { return !keys.count(a.entry.component); });
    }
    return locked_plan(lock.product, lock.release_label, lock.manifest_url, artifacts, platform);
}

// ---- version 2: the project lock ------------------------------------------------------

std::string project_lock_to_json(const project_lock& lock) {
    std::vector<std::string> platforms = lock.platforms;
    std::sort(platforms.begin(), platforms.end());
    std::vector<const locked_product*> products;
    for (const auto& p : lock.products) products.push_back(&p);
    std::sort(products.begin(), products.end(),
              [](const locked_product* x, const locked_product* y) { return x->name < y->name; });
    json_writer w(2);
    w.begin_object();
    w.field("lock_version", 2);
    w.key("platforms").begin_array();
    for (const auto& p : platforms) w.value(p);
    w.end_array();
    if (lock.cuda) w.field("cuda", static_cast<std::uint64_t>(*lock.cuda));
    w.key("products").begin_array();
    for (const auto* p : products) {
        w.begin_object();
        w.field("name", p->name);
        w.field("version", p->version_spec);
        w.key("components").begin_array();
        for (const auto& c : p->components) w.value(c);
        w.end_array();
        if (p->cuda) w.field("cuda", static_cast<std::uint64_t>(*p->cuda));
        w.field("release_label", p->release_label);
        w.field("manifest_url", sanitize_url(p->manifest_url));
        w.field("manifest_sha256", p->manifest_sha256);
        if (!p->cuda_reasons.empty()) {
            w.key("cuda_reasons").begin_array();
            for (const auto& [platform, reason] : p->cuda_reasons) {
                w.begin_object();
                w.field("platform", platform);
                w.field("reason", reason);
                w.end_object();
            }
            w.end_array();
        }
        if (p->deps) w.field("deps", true);
        if (!p->dependency_of.empty()) {
            w.key("dependency_of").begin_array();
            for (const auto& d : p->dependency_of) w.value(d);
            w.end_array();
        }
        write_artifacts(w, p->artifacts);
        w.end_object();
    }
    w.end_array();
    w.end_object();
    return w.str() + "\n";
}

namespace {

result<void> read_names(json::value& v, std::vector<std::string>& out, std::string_view what) {
    return v.for_each([&](json::value& item) -> result<void> {
        std::string name;
        REDIST_TRY_VOID(item.get_name(name, what));
        out.push_back(std::move(name));
        return result<void>();
    });
}

// A lock's "cuda": a CUDA major, 1 to 1000.
result<void> read_cuda_major(json::value& v, std::optional<int>& out) {
    std::uint64_t n = 0;
    REDIST_TRY_VOID(v.get(n));
    if (n == 0 || n > 1000) return result<void>(v.bad("not a CUDA major version"));
    out = static_cast<int>(n);
    return result<void>();
}

// "cuda_reasons": [{"platform": "linux-x86_64", "reason": "cuda12: --cuda 12"}, ...].
result<void> read_cuda_reasons(json::value& v, std::map<std::string, std::string>& out) {
    return v.for_each([&](json::value& item) -> result<void> {
        std::string platform, reason;
        REDIST_TRY_VOID(item.read_object({
            {"platform", [&](json::value& f) -> result<void> { return f.get_name(platform, "platform"); }, true},
            {"reason", [&](json::value& f) -> result<void> { return f.get(reason); }, true},
        }));
        if (!out.emplace(platform, std::move(reason)).second)
            return result<void>(item.bad("platform '" + platform + "' has two CUDA reasons"));
        return result<void>();
    });
}

result<void> read_locked_product(json::value& item, locked_product& p) {
    auto read = item.read_object({
        {"name", [&](json::value& v) -> result<void> { return v.get_name(p.name, "product"); }, true},
        {"version", [&](json::value& v) -> result<void> { return v.get_name(p.version_spec, "version"); }, true},
        {"components", [&](json::value& v) -> result<void> { return read_names(v, p.components, "component"); }},
        {"cuda", [&](json::value& v) -> result<void> { return read_cuda_major(v, p.cuda); }},
        {"release_label",
         [&](json::value& v) -> result<void> { return v.get_name_or_empty(p.release_label, "release label"); }},
        {"manifest_url", str(p.manifest_url), true},
        {"manifest_sha256", sha256_str(p.manifest_sha256), true},
        {"cuda_reasons", [&](json::value& v) -> result<void> { return read_cuda_reasons(v, p.cuda_reasons); }},
        {"deps", [&](json::value& v) -> result<void> { return v.get(p.deps); }},
        {"dependency_of", [&](json::value& v) -> result<void> { return read_names(v, p.dependency_of, "product"); }},
        {"artifacts",
         [&](json::value& v) -> result<void> {
             return v.for_each([&](json::value& a) -> result<void> {
                 locked_artifact locked;
                 REDIST_TRY_VOID(read_artifact(a, locked));
                 p.artifacts.push_back(std::move(locked));
                 return result<void>();
             });
         },
         true},
    });
    if (!read.ok()) return read;
    if (p.manifest_url.empty()) return item.bad("manifest_url is empty");
    return {};
}

}  // namespace

result<project_lock> project_lock_from_json(std::string_view text, std::string_view source) {
    project_lock lock;
    std::uint64_t version = 0;
    bool has_platforms = false, has_products = false;  // required, checked after lock_version
    auto read = json::read_document(
        text, source, "lock file",
        {{"lock_version", [&](json::value& v) -> result<void> { return v.get(version); }, true},
         {"platforms",
          [&](json::value& v) -> result<void> {
              has_platforms = true;
              return read_names(v, lock.platforms, "platform");
          }},
         {"cuda", [&](json::value& v) -> result<void> { return read_cuda_major(v, lock.cuda); }},
         {"products", [&](json::value& v) -> result<void> {
              has_products = true;
              return v.for_each([&](json::value& item) -> result<void> {
                  locked_product p;
                  REDIST_TRY_VOID(read_locked_product(item, p));
                  for (const auto& other : lock.products)
                      if (other.name == p.name)
                          return result<void>(item.bad("product '" + p.name + "' is locked twice"));
                  lock.products.push_back(std::move(p));
                  return result<void>();
              });
          }}});
    if (!read.ok()) return std::move(read).error_value();
    if (version != 2)
        return make_error(
                   error_code::bad_manifest,
                   version == 1
                       ? std::string("a single-product lock (version 1): install it with `redist fetch --locked`")
                       : "unsupported lock file version " + std::to_string(version))
            .with_source(std::string(source))
            .with_json_path("lock_version");
    if (!has_platforms || !has_products)
        return make_error(error_code::bad_manifest,
                          std::string("missing ") + (has_platforms ? "products" : "platforms"))
            .with_source(std::string(source))
            .with_json_path(has_platforms ? "products" : "platforms");
    return lock;
}

std::optional<std::string> lock_staleness(const project_lock& lock, const project_file& project) {
    std::vector<std::string> want = project.platforms, have = lock.platforms;
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    const auto list = [](const std::vector<std::string>& v) {
        std::string out;
        for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
        return "[" + out + "]";
    };
    if (want != have)
        return "project.platforms is " + list(want) + " in the project file, " + list(have) + " in the lock";
    const auto show = [](std::optional<int> c) { return c ? std::to_string(*c) : std::string("unset"); };
    if (project.cuda != lock.cuda)
        return "project.cuda is " + show(project.cuda) + " in the project file, " + show(lock.cuda) + " in the lock";
    for (const auto& p : project.products) {
        const auto it = std::find_if(lock.products.begin(), lock.products.end(),
                                     [&](const locked_product& l) { return l.name == p.name; });
        if (it == lock.products.end()) return "products." + p.name + " is not in the lock";
        if (it->version_spec != p.version)
            return "products." + p.name + ".version is " + p.version + " in the project file, " + it->version_spec +
                   " in the lock";
        if (it->components != p.components)
            return "products." + p.name + ".components is " + list(p.components) + " in the project file, " +
                   list(it->components) + " in the lock";
        if (it->cuda != p.cuda)
            return "products." + p.name + ".cuda is " + show(p.cuda) + " in the project file, " + show(it->cuda) +
                   " in the lock";
        if (it->deps != p.deps)
            return "products." + p.name + ".deps is " + (p.deps ? "true" : "false") + " in the project file, " +
                   (it->deps ? "true" : "false") + " in the lock";
    }
    const auto asks_deps = [&](const std::string& name) {
        return std::any_of(project.products.begin(), project.products.end(),
                           [&](const project_product& p) { return p.name == name && p.deps; });
    };
    for (const auto& l : lock.products) {
        if (std::any_of(project.products.begin(), project.products.end(),
                        [&](const project_product& p) { return p.name == l.name; }))
            continue;
        if (l.dependency_of.empty()) return "products." + l.name + " is in the lock but no longer in the project file";
        if (!std::all_of(l.dependency_of.begin(), l.dependency_of.end(), asks_deps))
            return "products." + l.name + " is in the lock for the dependencies of " + list(l.dependency_of) +
                   ", which the project file no longer asks for (deps = true)";
    }
    return std::nullopt;
}

result<std::vector<release_plan>> plans_for_platform(const project_lock& lock, const std::string& platform) {
    if (std::find(lock.platforms.begin(), lock.platforms.end(), platform) == lock.platforms.end()) {
        std::string have;
        for (const auto& p : lock.platforms) have += (have.empty() ? "" : ", ") + p;
        return make_error(error_code::not_found,
                          "the lock file has nothing for platform " + platform + " (it locks: " + have + ")");
    }
    std::vector<release_plan> plans;
    for (const auto& p : lock.products)
        plans.push_back(locked_plan(p.name, p.release_label, p.manifest_url, p.artifacts, platform));
    return plans;
}

result<std::vector<lockfile>> releases_of_lock(std::string_view json, std::string_view source) {
    auto project = project_lock_from_json(json, source);
    if (project.ok()) {
        std::vector<lockfile> out;
        for (auto& p : project.value().products)
            out.push_back({p.name, p.release_label, p.manifest_url, p.manifest_sha256, std::move(p.artifacts)});
        return out;
    }
    // Not a project lock: a version 1 lock, or the error of the version it claims.
    auto single = lockfile_from_json(json, source);
    if (single.ok()) return std::vector<lockfile>{std::move(single).value()};
    if (single.error_value().json_path == "lock_version" && single.error_value().message.starts_with("a project lock"))
        return std::move(project).error_value();
    return std::move(single).error_value();
}

}  // namespace redist
