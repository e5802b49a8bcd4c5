#include "redist/lockfile.hpp"

#include <algorithm>
#include <simdjson.h>

#include "redist/json_writer.hpp"
#include "redist/verify.hpp"

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

result<lockfile> lockfile_from_json(std::string_view json, std::string_view source) {
    auto fail = [&](const std::string& path, const std::string& what) {
        return make_error(error_code::bad_manifest, what).with_source(std::string(source)).with_json_path(path);
    };
    simdjson::ondemand::parser parser;
    simdjson::padded_string padded(json);
    simdjson::ondemand::document doc;
    if (parser.iterate(padded).get(doc)) return fail("", "lock file is not JSON");
    simdjson::ondemand::object root;
    if (doc.get_object().get(root)) return fail("", "lock file is not a JSON object");
    lockfile lock;
    std::uint64_t version = 0;
    for (auto field : root) {
        std::string_view key;
        if (field.unescaped_key().get(key)) return fail("", "malformed lock file");
        const std::string k(key);
        auto value = field.value();
        std::string_view s;
        if (k == "lock_version") {
            if (value.get_uint64().get(version)) return fail(k, "expected an integer");
        } else if (k == "product" || k == "release_label" || k == "manifest_url" || k == "manifest_sha256") {
            if (value.get_string().get(s)) return fail(k, "expected a string");
            (k == "product" ? lock.product : k == "release_label" ? lock.release_label
                             : k == "manifest_url" ? lock.manifest_url : lock.manifest_sha256) = std::string(s);
        } else if (k == "artifacts") {
            simdjson::ondemand::array items;
            if (value.get_array().get(items)) return fail(k, "expected an array");
            std::size_t index = 0;
            for (auto item : items) {
                const std::string path = "artifacts[" + std::to_string(index++) + "]";
                simdjson::ondemand::object obj;
                if (item.get_object().get(obj)) return fail(path, "expected an object");
                locked_artifact a;
                for (auto af : obj) {
                    std::string_view ak;
                    if (af.unescaped_key().get(ak)) return fail(path, "malformed");
                    const std::string fpath = path + "." + std::string(ak);
                    auto av = af.value();
                    if (ak == "size") {
                        if (av.get_uint64().get(a.entry.size)) return fail(fpath, "expected an integer");
                        continue;
                    }
                    if (ak == "variant") {
                        bool is_null = false;
                        if (av.is_null().get(is_null)) return fail(fpath, "expected a string or null");
                        if (is_null) continue;
                    }
                    if (av.get_string().get(s)) return fail(fpath, "expected a string");
                    const std::string v(s);
                    if (ak == "component") a.entry.component = v;
                    else if (ak == "version") a.version = v;
                    else if (ak == "platform") a.entry.platform = v;
                    else if (ak == "variant") a.entry.variant = v;
                    else if (ak == "relative_path") a.entry.relative_path = v;
                    else if (ak == "url") a.url = v;
                    else if (ak == "sha256") a.entry.sha256 = v;
                }
                if (a.entry.component.empty()) return fail(path + ".component", "missing");
                if (a.url.empty()) return fail(path + ".url", "missing");
                if (!is_sha256_hex(a.entry.sha256)) return fail(path + ".sha256", "not a SHA-256");
                if (a.entry.platform.empty()) return fail(path + ".platform", "missing");
                a.entry.format = archive_format_from_path(a.entry.relative_path.empty() ? a.url : a.entry.relative_path);
                lock.artifacts.push_back(std::move(a));
            }
        }
    }
    if (version != 1) return fail("lock_version", "unsupported lock file version " + std::to_string(version));
    if (lock.product.empty()) return fail("product", "missing");
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
