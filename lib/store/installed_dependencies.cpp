// What a prefix's receipts hold of a dependency set (redist/dependencies.hpp).
#include <algorithm>
#include <charconv>

#include "redist/dependencies.hpp"
#include "redist/prefix.hpp"
#include "redist/version.hpp"

namespace redist {

namespace {

// A receipt of the dependency product from a release of the CUDA major: its
// label's first field (the cuda product's releases are CUDA versions).
bool of_major(const receipt& r, const dependency_set& deps) {
    if (r.product != deps.product) return false;
    const std::string_view label = r.release_label;
    const std::string_view field = label.substr(0, label.find('.'));
    int value = 0;
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    return ec == std::errc{} && end == field.data() + field.size() && value == deps.cuda_major;
}

}  // namespace

std::vector<std::string> missing_dependencies(const dependency_set& deps, const std::vector<receipt>& receipts) {
    std::vector<std::string> out;
    for (const auto& c : deps.components) {
        const bool present = std::any_of(receipts.begin(), receipts.end(),
                                         [&](const receipt& r) { return r.component == c && of_major(r, deps); });
        if (!present) out.push_back(c);
    }
    return out;
}

std::optional<std::string> installed_dependency_release(const dependency_set& deps,
                                                        const std::vector<receipt>& receipts) {
    std::optional<std::string> newest;
    for (const auto& r : receipts)
        if (of_major(r, deps) && (!newest || compare_versions(r.release_label, *newest) > 0)) newest = r.release_label;
    return newest;
}

}  // namespace redist
