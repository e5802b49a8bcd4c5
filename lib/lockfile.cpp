#include "redist/lockfile.hpp"

#include <algorithm>
#include <simdjson.h>

#include "json_reader.hpp"
#include "redist/json_writer.hpp"
#include "redist/verify.hpp"
#include "safe_path.hpp"

namespace redist {

std::string lockfile_to_json(const lockfile& lock) {
    std::vector<const locked_artifact*> sorted;
    for (const auto& a : lock.artifacts) sorted.push_back(&a);
    std::sort(sorted.begin(), sorted.end(), [](const locked_artifact* x, const locked_artifact* y) {
        return std::tie(x->entry.platform, x->entry.variant, x->entry.component) <
               std::tie(y->entry.platform, y->entry.variant, y->entry.component);
    });
    json_writer w(2);
    w.begin_object();
    w.field("lock_version", 1);
    w.field("product", lock.product);
    w.field("release_label", lock.release_label);
    w.field("manifest_url", lock.manifest_url);
    w.field("manifest_sha256", lock.manifest_sha256);
    w.key("artifacts").begin_array();
    for (const auto* a : sorted) {
        w.begin_object();
        w.field("component", a->entry.component);
        w.field("version", a->version);
        w.field("platform", a->entry.platform);
        w.field("variant", a->entry.variant);
        w.field("relative_path", a->entry.relative_path);
        w.field("url", a->url);
        w.field("sha256", a->entry.sha256);
        w.field("size", a->entry.size);
        w.end_object();
    }
    w.end_array();
    w.end_object();
    return w.str() + "\n";
}

namespace {

// A name that may be empty (labels of old manifests are).
result<void> read_optional_name(json::value& v, std::string& out, std::string_view what) {
    REDIST_TRY_VOID(v.get(out));
    if (out.empty()) return {};
    if (const char* why = name_problem(out))
        return v.bad(std::string(what) + " '" + printable(out, 64) + "' is not a valid name: " + why);
    return {};
}

result<void> read_artifact(json::value& item, locked_artifact& a) {
    const auto str = [](std::string& out) { return [&out](json::value& v) -> result<void> { return v.get(out); }; };
    auto read = item.read_object({
        {"component", [&](json::value& v) -> result<void> { return v.get_name(a.entry.component, "component"); }, true},
        {"version", str(a.version)},
        {"platform", [&](json::value& v) -> result<void> { return v.get_name(a.entry.platform, "platform"); }, true},
        {"variant",
         [&](json::value& v) -> result<void> {
             REDIST_TRY_VOID(v.get(a.entry.variant));
             if (a.entry.variant) REDIST_TRY_VOID(v.get_name(*a.entry.variant, "variant"));
             return result<void>();
         }},
        {"relative_path",
         [&](json::value& v) -> result<void> {
             REDIST_TRY_VOID(v.get(a.entry.relative_path));
             if (const char* why = artifact_path_problem(a.entry.relative_path)) return result<void>(v.bad(why));
             return result<void>();
         },
         true},  // required: `redist lock` always writes it, and the archive format comes from it
        {"url", str(a.url), true},
        {"sha256",
         [&](json::value& v) -> result<void> {
             REDIST_TRY_VOID(v.get(a.entry.sha256));
             if (!is_sha256_hex(a.entry.sha256)) return result<void>(v.bad("not a SHA-256"));
             return result<void>();
         },
         true},
        {"size", [&](json::value& v) -> result<void> { return v.get(a.entry.size); }, true},
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
    const auto str = [](std::string& out) { return [&out](json::value& v) -> result<void> { return v.get(out); }; };
    auto read = json::read_document(
        text, source, "lock file",
        {{"lock_version", [&](json::value& v) -> result<void> { return v.get(version); }, true},
         {"product", [&](json::value& v) -> result<void> { return v.get_name(lock.product, "product"); }, true},
         {"release_label", [&](json::value& v) -> result<void> { return read_optional_name(v, lock.release_label, "release label"); }},
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
        return make_error(error_code::bad_manifest, "unsupported lock file version " + std::to_string(version))
            .with_source(std::string(source))
            .with_json_path("lock_version");
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
        return make_error(error_code::not_found, "the lock file has nothing for platform " + platform +
                                                     " (it locks: " + have + ")");
    }
    std::optional<int> major = cuda_major;
    if (!major && !majors.empty()) major = *std::max_element(majors.begin(), majors.end());
    std::vector<locked_artifact> out;
    for (const auto& a : on_platform)
        if (!a.entry.variant || a.entry.cuda_major() == major) out.push_back(a);
    if (out.empty())
        return make_error(error_code::not_found, "the lock file has no CUDA " + std::to_string(*major) +
                                                     " artifacts for " + platform);
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
            return make_error(error_code::integrity, "the upstream manifest no longer lists the locked artifact " + what)
                .with_url(lock.manifest_url);
        if (found->sha256 != locked.entry.sha256 || found->size != locked.entry.size)
            return make_error(error_code::integrity, "the upstream manifest changed the locked artifact " + what)
                .with_url(lock.manifest_url)
                .with_expected_actual(locked.entry.sha256 + " (" + std::to_string(locked.entry.size) + " bytes)",
                                      found->sha256 + " (" + std::to_string(found->size) + " bytes)");
    }
    return {};
}

}  // namespace redist
