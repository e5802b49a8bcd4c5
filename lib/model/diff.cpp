// diff.cpp — differences between two parsed manifests, and the alias table.
#include "redist/diff.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <tuple>

#include "model/diff.hpp"
#include "redist/json_writer.hpp"

namespace redist {

namespace {

constexpr std::array<component_alias, 1> kAliases = {{
    {"cuda_cccl", "cccl", "CUDA 13.0"},
}};

// The other name of `key` in the alias table, if it has one.
std::optional<std::string_view> other_name(std::string_view key) noexcept {
    for (const auto& a : kAliases) {
        if (a.old_key == key) return a.new_key;
        if (a.new_key == key) return a.old_key;
    }
    return std::nullopt;
}

using artifact_key = std::tuple<std::string, std::string>;  // platform, variant ("" for none)

std::map<artifact_key, const artifact*> artifacts_by_key(const component& c) {
    std::map<artifact_key, const artifact*> out;
    for (const auto& a : c.artifacts) out.emplace(artifact_key{a.platform, a.variant.value_or("")}, &a);
    return out;
}

void diff_artifacts(const component& old_c, const component& new_c, std::vector<artifact_change>& out) {
    const auto before = artifacts_by_key(old_c);
    const auto after = artifacts_by_key(new_c);
    // One change; platform and variant are the newer artifact's where there is one.
    const auto change = [&](artifact_change_kind kind, const std::string& key, const artifact* was,
                            const artifact* now) {
        artifact_change ch;
        ch.kind = kind;
        ch.component = key;
        ch.platform = (now ? now : was)->platform;
        ch.variant = (now ? now : was)->variant;
        if (was) {
            ch.old_relative_path = was->relative_path;
            ch.old_sha256 = was->sha256;
            ch.old_size = was->size;
        }
        if (now) {
            ch.new_relative_path = now->relative_path;
            ch.new_sha256 = now->sha256;
            ch.new_size = now->size;
        }
        out.push_back(std::move(ch));
    };
    for (const auto& [k, a] : before) {
        const auto it = after.find(k);
        if (it == after.end()) {
            change(artifact_change_kind::removed, old_c.key, a, nullptr);
            continue;
        }
        const artifact& b = *it->second;
        if (a->relative_path == b.relative_path && a->sha256 == b.sha256 && a->size == b.size) continue;
        change(a->relative_path == b.relative_path ? artifact_change_kind::replaced_in_place
                                                   : artifact_change_kind::rebuilt,
               new_c.key, a, &b);
    }
    for (const auto& [k, b] : after)
        if (!before.count(k)) change(artifact_change_kind::added, new_c.key, nullptr, b);
}

struct facets {
    std::set<std::string> platforms, variants;
    std::uint64_t total = 0;
};

facets facets_of(const manifest& m) {
    facets f;
    for (const auto& c : m.components)
        for (const auto& a : c.artifacts) {
            f.platforms.insert(a.platform);
            if (a.variant) f.variants.insert(*a.variant);
            f.total += a.size;
        }
    return f;
}

std::vector<std::string> minus(const std::set<std::string>& a, const std::set<std::string>& b) {
    std::vector<std::string> out;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
    return out;
}

}  // namespace

std::span<const component_alias> component_aliases() noexcept { return kAliases; }

const component* find_component_or_alias(const manifest& m, std::string_view key) noexcept {
    if (const auto* c = m.find_component(key)) return c;
    if (auto other = other_name(key)) return m.find_component(*other);
    return nullptr;
}

const char* to_string(artifact_change_kind kind) noexcept {
    switch (kind) {
        case artifact_change_kind::added: return "added";
        case artifact_change_kind::removed: return "removed";
        case artifact_change_kind::rebuilt: return "rebuilt";
        case artifact_change_kind::replaced_in_place: return "replaced_in_place";
    }
    return "unknown";
}

bool manifest_diff::empty() const noexcept {
    return added.empty() && removed.empty() && renamed.empty() && versions.empty() && artifacts.empty();
}

bool manifest_diff::has_replacement() const noexcept {
    return std::any_of(artifacts.begin(), artifacts.end(),
                       [](const auto& a) { return a.kind == artifact_change_kind::replaced_in_place; });
}

manifest_diff diff_manifests(const manifest& from, const manifest& to) {
    manifest_diff d;
    d.old_label = from.release_label;
    d.new_label = to.release_label;
    std::set<std::string> matched_new;  // keys of `to` already paired with a component of `from`
    for (const auto& old_c : from.components) {
        const component* new_c = to.find_component(old_c.key);
        if (!new_c) {
            // Renamed only when the other name is new in `to` (not when both
            // names exist in both manifests).
            auto other = other_name(old_c.key);
            if (other && !from.find_component(*other)) new_c = to.find_component(*other);
            if (new_c) d.renamed.push_back({old_c.key, new_c->key});
        }
        if (!new_c) {
            d.removed.push_back(old_c.key);
            continue;
        }
        matched_new.insert(new_c->key);
        if (old_c.version != new_c->version) d.versions.push_back({new_c->key, old_c.version, new_c->version});
        diff_artifacts(old_c, *new_c, d.artifacts);
    }
    for (const auto& c : to.components)
        if (!matched_new.count(c.key)) d.added.push_back(c.key);

    const facets a = facets_of(from), b = facets_of(to);
    d.platforms_added = minus(b.platforms, a.platforms);
    d.platforms_removed = minus(a.platforms, b.platforms);
    d.variants_added = minus(b.variants, a.variants);
    d.variants_removed = minus(a.variants, b.variants);
    d.old_total_size = a.total;
    d.new_total_size = b.total;
    return d;
}

std::string manifest_diff_to_json(const manifest_diff& d, int indent) {
    json_writer w(indent);
    auto strings = [&](std::string_view name, const std::vector<std::string>& values) {
        w.key(name).begin_array();
        for (const auto& v : values) w.value(v);
        w.end_array();
    };
    w.begin_object();
    w.field("old_label", d.old_label);
    w.field("new_label", d.new_label);
    w.field("changed", !d.empty());
    strings("components_added", d.added);
    strings("components_removed", d.removed);
    w.key("components_renamed").begin_array();
    for (const auto& r : d.renamed) w.begin_object().field("from", r.from).field("to", r.to).end_object();
    w.end_array();
    w.key("versions_changed").begin_array();
    for (const auto& v : d.versions)
        w.begin_object().field("component", v.component).field("from", v.from).field("to", v.to).end_object();
    w.end_array();
    strings("platforms_added", d.platforms_added);
    strings("platforms_removed", d.platforms_removed);
    strings("variants_added", d.variants_added);
    strings("variants_removed", d.variants_removed);
    w.key("artifacts").begin_array();
    for (const auto& a : d.artifacts) {
        w.begin_object();
        w.field("change", to_string(a.kind));
        w.field("component", a.component);
        w.field("platform", a.platform);
        w.field("variant", a.variant);
        w.field("old_relative_path", a.old_relative_path);
        w.field("new_relative_path", a.new_relative_path);
        w.field("old_sha256", a.old_sha256);
        w.field("new_sha256", a.new_sha256);
        w.field("old_size", a.old_size);
        w.field("new_size", a.new_size);
        w.end_object();
    }
    w.end_array();
    w.field("old_total_size", d.old_total_size);
    w.field("new_total_size", d.new_total_size);
    w.end_object();
    return w.str();
}

}  // namespace redist
