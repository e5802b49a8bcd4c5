// libFuzzer target for redist::parse_index_html (the release listing a mirror
// serves) and the version ordering it relies on.
//
// Contract checked on every input: every label is non-empty, starts with a
// letter or digit and holds only [A-Za-z0-9._+-] (labels are spliced back
// into URLs); the list is strictly ordered newest first by compare_versions
// (so de-duplicated), and compare_versions is antisymmetric on it;
// resolve_version_spec("latest") picks the first label.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "model/index_html.hpp"
#include "redist/version.hpp"

namespace {

bool is_label(std::string_view s) {
    if (s.empty()) return false;
    const auto alnum = [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    };
    if (!alnum(s.front())) return false;
    for (const char c : s)
        if (!alnum(c) && c != '.' && c != '_' && c != '+' && c != '-') return false;
    return true;
}

int sign(int v) { return (v > 0) - (v < 0); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view html(reinterpret_cast<const char*>(data), size);
    const std::vector<std::string> labels = redist::parse_index_html(html);
    for (std::size_t i = 0; i < labels.size(); ++i) {
        fuzz::require(is_label(labels[i]));
        fuzz::require(redist::compare_versions(labels[i], labels[i]) == 0);
        if (i == 0) continue;
        const int newer = redist::compare_versions(labels[i - 1], labels[i]);
        fuzz::require(newer > 0);
        fuzz::require(sign(redist::compare_versions(labels[i], labels[i - 1])) == -sign(newer));
        if (i >= 2) fuzz::require(redist::compare_versions(labels[i - 2], labels[i]) > 0);  // transitive
    }
    const auto latest = redist::resolve_version_spec("latest", labels);
    if (labels.empty()) {
        fuzz::require(!latest.ok());
    } else {
        fuzz::require(latest.ok() && latest.value() == labels.front());
    }
    return 0;
}
