#include "redist/suggest.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "redist/printable.hpp"
#include "support/suggest.hpp"

namespace redist {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Optimal string alignment distance: Levenshtein plus a swap of two
// neighbouring characters ("fecth" is one edit from "fetch").
std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    }
    return d[a.size()][b.size()];
}

// The one candidate satisfying `pred`, or nothing when none or several do.
template <class Pred>
std::optional<std::string> unique_candidate(const std::vector<std::string>& candidates, Pred pred) {
    std::optional<std::string> found;
    for (const auto& c : candidates) {
        if (!pred(c)) continue;
        if (found && *found != c) return std::nullopt;
        found = c;
    }
    return found;
}

// What people call a platform, and the manifest's name for it. `aarch64`
// means a server Arm machine (SBSA); Jetson users know `linux-aarch64`.
constexpr std::array<std::pair<std::string_view, std::string_view>, 10> platform_aliases{{
    {"aarch64", "linux-sbsa"},
    {"arm64", "linux-sbsa"},
    {"sbsa", "linux-sbsa"},
    {"x86_64", "linux-x86_64"},
    {"x86-64", "linux-x86_64"},
    {"amd64", "linux-x86_64"},
    {"linux", "linux-x86_64"},
    {"linux-x86-64", "linux-x86_64"},
    {"windows", "windows-x86_64"},
    {"win64", "windows-x86_64"},
}};

// Prefixes that manifests put in front of the name a person types.
constexpr std::array<std::string_view, 4> name_prefixes{"lib", "cuda_", "linux-", "windows-"};

}  // namespace

std::optional<std::string> closest_match(std::string_view typed, const std::vector<std::string>& candidates) {
    if (typed.empty() || candidates.empty()) return std::nullopt;
    const std::string want = lower(typed);
    const auto not_typed = [&](const std::optional<std::string>& s) {
        return s && *s != typed ? s : std::optional<std::string>{};
    };
    if (auto same = unique_candidate(candidates, [&](const std::string& c) { return lower(c) == want; }))
        return not_typed(same);
    for (const auto& [alias, platform] : platform_aliases) {
        if (want != alias) continue;
        if (std::find(candidates.begin(), candidates.end(), platform) != candidates.end()) return std::string(platform);
    }
    if (auto prefixed = unique_candidate(candidates, [&](const std::string& c) {
            const std::string l = lower(c);
            return std::any_of(name_prefixes.begin(), name_prefixes.end(), [&](std::string_view p) {
                return l.size() == p.size() + want.size() && l.compare(0, p.size(), p) == 0 &&
                       l.compare(p.size(), std::string::npos, want) == 0;
            });
        }))
        return not_typed(prefixed);
    const std::size_t limit = std::max<std::size_t>(1, want.size() / 3);
    std::size_t best = limit + 1;
    std::optional<std::string> best_name;
    bool tie = false;
    for (const auto& c : candidates) {
        const std::size_t d = edit_distance(want, lower(c));
        if (d < best) {
            best = d;
            best_name = c;
            tie = false;
        } else if (d == best && best_name && *best_name != c) {
            tie = true;
        }
    }
    if (tie) return std::nullopt;
    return not_typed(best_name);
}

std::string did_you_mean(std::string_view typed, const std::vector<std::string>& candidates) {
    const auto match = closest_match(typed, candidates);
    return match ? " (did you mean '" + printable(*match) + "'?)" : std::string();
}

const std::vector<std::string>& known_products() {
    static const std::vector<std::string> products{"cublasmp",   "cuda",       "cudnn",    "cudss",   "cuquantum",
                                                   "cusolvermp", "cusparselt", "cutensor", "nppplus", "nvcomp",
                                                   "nvjpeg2000", "nvpl",       "nvtiff",   "tensorrt"};
    return products;
}

}  // namespace redist
