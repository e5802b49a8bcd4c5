#include "redist/select.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <set>
#include <utility>

#include "model/select_rules.hpp"
#include "redist/printable.hpp"
#include "redist/suggest.hpp"

namespace redist {

namespace {

std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
    return out.empty() ? std::string("none") : out;
}

// Adds `value` unless already present, keeping first-seen (manifest) order.
void add_unique(std::vector<std::string>& list, const std::string& value) {
    if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

// "4.9 GiB", "812 MiB", "24 KiB".
std::string size_text(std::uint64_t bytes) {
    const char* unit = "KiB";
    double value = static_cast<double>(bytes) / 1024;
    for (const char* next : {"MiB", "GiB"}) {
        if (value < 1024) break;
        value /= 1024;
        unit = next;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, value < 10 && unit[0] != 'K' ? "%.1f %s" : "%.0f %s", value, unit);
    return buf;
}

// Per component offered on `platform`: its largest artifact's size and its key.
std::vector<std::pair<std::uint64_t, std::string>> platform_sizes(const manifest& m, const std::string& platform) {
    std::vector<std::pair<std::uint64_t, std::string>> sizes;
    for (const auto& c : m.components) {
        std::uint64_t largest = 0;
        for (const auto& a : c.artifacts)
            if (a.platform == platform) largest = std::max(largest, a.size);
        if (largest != 0) sizes.emplace_back(largest, c.key);
    }
    return sizes;
}

// fetch_default on a release that is no library family: the refusal, with
// the largest components on the platform (one artifact each: the largest)
// and the two ways out.
error component_choice_needed(const manifest& m, const std::string& platform) {
    auto sizes = platform_sizes(m, platform);
    std::uint64_t total = 0;
    for (const auto& s : sizes) total += s.first;
    std::sort(sizes.begin(), sizes.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string largest;
    for (std::size_t i = 0; i < sizes.size() && i < 5; ++i)
        largest += (i ? ", " : "") + printable(sizes[i].second) + " " + size_text(sizes[i].first);
    return make_error(error_code::usage,
                      "this release has " + std::to_string(m.components.size()) + " components (up to " +
                          size_text(total) + " for " + printable(platform) + "; largest: " + largest +
                          "): name the ones you need with --component a,b, or pass --all for every component "
                          "but the driver's");
}

// A release that is no library family but is still cheap to take whole:
// no driver component, and at most kSmallBundleBytes of archives on the
// platform (a mirror's handful of CUDA libraries). Such a release installs
// whole by default; the toolkit (gigabytes, the driver among them) does not.
constexpr std::uint64_t kSmallBundleBytes = std::uint64_t{2} << 30;

bool small_bundle(const manifest& m, const std::string& platform) {
    std::uint64_t total = 0;
    for (const auto& [size, key] : platform_sizes(m, platform)) {
        if (is_driver_component(key)) return false;
        total += size;
    }
    return total <= kSmallBundleBytes;
}

// The components a request covers, in manifest order. Empty request: see
// unnamed_components.
result<std::vector<const component*>> requested_components(const manifest& m, const selection_request& request) {
    const std::vector<std::string>& wanted = request.components;
    std::vector<const component*> out;
    if (wanted.empty()) {
        const bool family = request.unnamed == unnamed_components::every || is_library_family(m);
        if (request.unnamed == unnamed_components::fetch_default && !family && !small_bundle(m, request.platform))
            return component_choice_needed(m, request.platform);
        for (const auto& c : m.components)
            if (family || !is_driver_component(c.key)) out.push_back(&c);
        return out;
    }
    for (const auto& name : wanted)
        if (!m.find_component(name)) return unknown_component(m, name);
    for (const auto& c : m.components)
        if (std::find(wanted.begin(), wanted.end(), c.key) != wanted.end()) out.push_back(&c);
    return out;
}

bool has_platform(const component& c, const std::string& platform) {
    return std::any_of(c.artifacts.begin(), c.artifacts.end(),
                       [&](const artifact& a) { return a.platform == platform; });
}

// How well a variant key matches a request for CUDA `major` (and `minor`):
// higher is better, 0 is no match. The exact minor, then the major's own key,
// then the nearest minor: the newest below the request (built against an
// older minor, it runs on this one), else the oldest above it.
int variant_rank(const cuda_version& v, int major, std::optional<int> minor) {
    if (v.major != major) return 0;
    if (!v.minor) return minor ? 4000 : 5000;
    if (minor && *v.minor == *minor) return 5000;
    if (!minor || *v.minor < *minor) return 2000 + *v.minor;
    return 2000 - *v.minor;
}

// With no major: the plain artifact. With one: the best-ranked variant of it.
const artifact* find_artifact(const component& c, const std::string& platform, std::optional<int> major,
                              std::optional<int> minor = std::nullopt) {
    const artifact* best = nullptr;
    int best_rank = 0;
    for (const auto& a : c.artifacts) {
        if (a.platform != platform) continue;
        if (!major) {
            if (!a.variant) return &a;
            continue;
        }
        const auto v = a.cuda_variant();
        const int rank = v ? variant_rank(*v, *major, minor) : 0;
        if (rank > best_rank) {
            best = &a;
            best_rank = rank;
        }
    }
    return best;
}

// What a component offers on a platform, for error messages: "cuda12, cuda13, plain".
std::string offered_variants(const component& c, const std::string& platform) {
    std::vector<std::string> variants;
    bool plain = false;
    for (const auto& a : c.artifacts) {
        if (a.platform != platform) continue;
        if (a.variant) add_unique(variants, *a.variant);
        else plain = true;
    }
    if (plain) variants.push_back("none (plain artifact)");
    return join(variants);
}

// The default CUDA major: the newest that every variant-only component can
// satisfy (components with a plain artifact fall back to it), so that
// "every component" still works when one lags behind; if no such variant
// exists, the newest offered, which then fails with the list of what each
// component has; nullopt when nothing has a CUDA variant.
std::optional<int> default_major(const std::vector<const component*>& on_platform, const std::string& platform) {
    std::set<int> offered;
    std::vector<const component*> variant_only;
    for (const component* c : on_platform) {
        bool plain = false;
        for (const auto& a : c->artifacts) {
            if (a.platform != platform) continue;
            if (const auto major = a.cuda_major()) offered.insert(*major);
            if (!a.variant) plain = true;
        }
        if (!plain) variant_only.push_back(c);
    }
    for (auto it = offered.rbegin(); it != offered.rend(); ++it) {
        const bool everyone = std::all_of(variant_only.begin(), variant_only.end(), [&](const component* c) {
            return find_artifact(*c, platform, *it) != nullptr;
        });
        if (everyone) return *it;
    }
    if (offered.empty()) return std::nullopt;
    return *offered.rbegin();
}

// A component without an artifact for the request: "has no cuda12 artifact",
// "has no cuda12.4 or other cuda12 artifact", "has no plain artifact".
error no_artifact(const component& c, const std::string& platform, std::optional<int> major, std::optional<int> minor) {
    std::string wanted = "plain";
    if (major) {
        const std::string key = "cuda" + std::to_string(*major);
        wanted = minor ? key + "." + std::to_string(*minor) + " or other " + key : key;
    }
    return make_error(error_code::not_found, "component '" + c.key + "' has no " + wanted + " artifact for platform '" +
                                                 platform + "' (available variants: " + offered_variants(c, platform) +
                                                 ")");
}

// artifact_choice::every_variant: every artifact of `on_platform` on the
// platform that has no variant or, with a cuda_major, a variant of it.
result<selection> every_variant_of(const std::vector<const component*>& on_platform, const selection_request& request,
                                   selection out) {
    out.cuda_major = request.cuda_major;
    std::vector<std::string> variants;
    for (const component* c : on_platform)
        for (const auto& a : c->artifacts) {
            if (a.platform != request.platform) continue;
            if (a.variant) add_unique(variants, *a.variant);
            if (a.variant && request.cuda_major && a.cuda_major() != request.cuda_major) continue;
            out.artifacts.push_back(a);
        }
    if (out.artifacts.empty())
        return make_error(error_code::not_found, "nothing for platform '" + request.platform + "' in a cuda" +
                                                     std::to_string(request.cuda_major.value_or(0)) +
                                                     " variant (available variants: " + join(variants) + ")");
    return out;
}

}  // namespace

bool is_library_family(const manifest& m) {
    if (m.components.size() <= 4) return true;
    const auto family = [](const std::string& key) { return key.substr(0, key.find('_')); };
    return std::all_of(m.components.begin(), m.components.end(),
                       [&](const component& c) { return family(c.key) == family(m.components.front().key); });
}

bool is_driver_component(std::string_view key) {
    static constexpr std::array<std::string_view, 6> driver{"nvidia_driver", "nvidia_fs",        "fabricmanager",
                                                            "imex",          "driver_assistant", "libnvidia_nscq"};
    // cuda_compat (and any cuda_compat_* of later releases) installs the
    // driver's forward-compatibility libraries: the driver's to choose.
    return std::find(driver.begin(), driver.end(), key) != driver.end() || key.starts_with("cuda_compat");
}

result<std::string> release_spec_for_cuda(std::string_view product, const std::string& spec,
                                          std::optional<int> cuda_major, std::string_view asked_by) {
    if (product != "cuda" || !cuda_major) return spec;
    const std::string major = std::to_string(*cuda_major);
    if (spec.empty() || spec == "latest") return major;
    if (spec.substr(0, spec.find('.')) == major) return spec;
    return make_error(error_code::usage, "version '" + printable(spec) + "' is not a CUDA " + major + " release, but " +
                                             std::string(asked_by) + " " + major +
                                             " asks for one (the cuda product's releases are CUDA versions)");
}

error unknown_component(const manifest& m, const std::string& name) {
    std::vector<std::string> keys;
    for (const auto& c : m.components) keys.push_back(c.key);
    // A likely intent replaces the whole list (cuda has 44 components).
    const std::string hint = did_you_mean(name, keys);
    return make_error(error_code::not_found, "unknown component '" + printable(name) + "'" +
                                                 (hint.empty() ? " (available components: " + join(keys) + ")" : hint));
}

std::vector<int> available_cuda_majors(const manifest& m, const std::string& platform,
                                       const std::vector<std::string>& components) {
    std::set<int> majors;
    for (const auto& c : m.components) {
        if (!components.empty() && std::ranges::find(components, c.key) == components.end()) continue;
        for (const auto& a : c.artifacts) {
            if (a.platform != platform) continue;
            if (const auto major = a.cuda_major()) majors.insert(*major);
        }
    }
    return {majors.begin(), majors.end()};
}

std::vector<std::string> available_platforms(const manifest& m, const std::vector<std::string>& components) {
    std::set<std::string> platforms;
    for (const auto& c : m.components) {
        if (!components.empty() && std::ranges::find(components, c.key) == components.end()) continue;
        for (const auto& a : c.artifacts) platforms.insert(a.platform);
    }
    return {platforms.begin(), platforms.end()};
}

std::string variant_list(const std::vector<artifact>& artifacts) {
    std::set<std::string> keys;
    for (const auto& a : artifacts)
        if (a.variant) keys.insert(*a.variant);
    std::string out;
    for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
    return out;
}

result<selection> select_artifacts(const manifest& m, const selection_request& request) {
    if (request.platform.empty()) return make_error(error_code::usage, "no platform given");
    REDIST_TRY(const auto candidates, requested_components(m, request));
    const bool every_variant = request.choice == artifact_choice::every_variant;
    const bool named_need_platform = !request.components.empty() && !every_variant;

    // Components that have something for the platform. Named components must
    // all have it (but for every_variant: a mirror of several platforms takes
    // what each has); with "every component", those without it (e.g. a
    // samples component that only ships "source") are simply not candidates.
    std::vector<const component*> on_platform;
    for (const component* c : candidates) {
        if (has_platform(*c, request.platform)) {
            on_platform.push_back(c);
            continue;
        }
        if (named_need_platform) {
            std::vector<std::string> platforms;
            for (const auto& a : c->artifacts) add_unique(platforms, a.platform);
            return make_error(error_code::not_found, "component '" + c->key + "' has nothing for platform '" +
                                                         request.platform + "'" +
                                                         did_you_mean(request.platform, platforms) +
                                                         " (available platforms: " + join(platforms) + ")");
        }
    }
    if (on_platform.empty()) {
        std::vector<std::string> platforms;
        for (const component* c : candidates)
            for (const auto& a : c->artifacts) add_unique(platforms, a.platform);
        return make_error(error_code::not_found, "nothing for platform '" + request.platform + "'" +
                                                     did_you_mean(request.platform, platforms) +
                                                     " (available platforms: " + join(platforms) + ")");
    }

    selection out;
    if (request.components.empty() && request.unnamed == unnamed_components::all)
        for (const auto& c : m.components)
            if (is_driver_component(c.key) && has_platform(c, request.platform)) out.left_out.push_back(c.key);
    if (every_variant) return every_variant_of(on_platform, request, std::move(out));
    out.cuda_major = request.cuda_major;
    if (out.cuda_major) out.cuda_minor = request.cuda_minor;
    if (!out.cuda_major) {
        out.cuda_major = default_major(on_platform, request.platform);
        out.cuda_major_defaulted = out.cuda_major.has_value();
    }

    for (const component* c : on_platform) {
        const artifact* chosen = nullptr;
        if (out.cuda_major) chosen = find_artifact(*c, request.platform, out.cuda_major, out.cuda_minor);
        if (chosen == nullptr) chosen = find_artifact(*c, request.platform, std::nullopt);
        if (chosen == nullptr) return no_artifact(*c, request.platform, out.cuda_major, out.cuda_minor);
        out.artifacts.push_back(*chosen);
    }
    return out;
}

}  // namespace redist
