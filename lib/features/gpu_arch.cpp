// The `gpu-code` check: each installed file's fatbin against the GPUs here
// (see gpu_arch.hpp for the compatibility rules).
#include "features/gpu_arch.hpp"

#include <algorithm>
#include <map>

#include "features/check_data.hpp"
#include "redist/printable.hpp"
#include "redist/version.hpp"

namespace redist::gpu_arch {

namespace {

using flavor = elf::gpu_arch::flavor;

bool sass_runs(const elf::gpu_arch& a, int major, int minor) {
    if (a.kind == flavor::arch_specific) return a.major == major && a.minor == minor;
    return a.major == major && a.minor <= minor;
}

bool ptx_compiles(const elf::gpu_arch& a, int major, int minor) {
    if (a.kind == flavor::arch_specific) return a.major == major && a.minor == minor;
    if (a.kind == flavor::family) return a.major == major && a.minor <= minor;
    return a.major < major || (a.major == major && a.minor <= minor);
}

std::string names(const std::vector<elf::gpu_arch>& list, bool ptx) {
    std::string out;
    for (const auto& a : list) out += (out.empty() ? "" : ", ") + elf::arch_name(a, ptx);
    return out;
}

std::string cc(int major, int minor) { return std::to_string(major) + "." + std::to_string(minor); }

// The GPUs of one compute capability: "GPU 0 (NVIDIA H200, compute capability 9.0)",
// "GPUs 0, 1 (...)".
struct gpu_group {
    int major = 0, minor = 0;
    std::vector<int> indices;
    std::string name;
    std::string label() const {
        std::string out = indices.size() == 1 ? "GPU " : "GPUs ";
        for (std::size_t i = 0; i < indices.size(); ++i) out += (i ? ", " : "") + std::to_string(indices[i]);
        return out + " (" + (name.empty() ? "" : name + ", ") + "compute capability " + cc(major, minor) + ")";
    }
};

std::vector<gpu_group> group_gpus(const std::vector<driver_info::gpu>& gpus) {
    std::map<std::pair<int, int>, gpu_group> by_cc;
    for (const auto& g : gpus) {
        auto& group = by_cc[{g.major, g.minor}];
        group.major = g.major;
        group.minor = g.minor;
        group.indices.push_back(g.index);
        if (group.name.empty()) group.name = g.name;
    }
    std::vector<gpu_group> out;
    out.reserve(by_cc.size());
    for (auto& [key, group] : by_cc) out.push_back(std::move(group));
    return out;
}

// "9.10" for the releases before "9.11.0" ("8" before "9.0.0"): a version
// spec that picks the newest release of the older range.
std::string spec_before(std::string_view from) {
    const auto dot = from.find('.');
    const int major = std::atoi(std::string(from.substr(0, dot)).c_str());
    const int minor = dot == std::string_view::npos ? 0 : std::atoi(std::string(from.substr(dot + 1)).c_str());
    return minor > 0 ? std::to_string(major) + "." + std::to_string(minor - 1) : std::to_string(major - 1);
}

// What the architecture table (check_data::arch_supports) says would run on
// compute capability major.minor when the installed release does not: the
// newest range of releases that supports it, in a CUDA variant that does,
// as a command to run. Empty when the table has no such row, or when it says
// the installed release supports the GPU (then it cannot explain the gap).
std::string supported_elsewhere(const installed_library& lib, int major, int minor,
                                const std::filesystem::path& prefix) {
    const receipt& r = *lib.owner;
    const auto& rows = check_data::arch_supports;
    auto supports = [&](const check_data::arch_support& row) {
        return major > row.min_major || (major == row.min_major && minor >= row.min_minor);
    };
    const auto n = std::size(rows);
    for (std::size_t i = 0; i < n; ++i) {
        const auto& row = rows[i];
        if (row.product != r.product || !supports(row)) continue;
        // The releases newer than this row's range, and the variants whose own
        // (newer) rows do not support the GPU.
        std::string_view upper;
        std::vector<int> excluded;
        for (std::size_t j = 0; j < i; ++j) {
            if (rows[j].product != r.product) continue;
            if (rows[j].cuda_major) excluded.push_back(rows[j].cuda_major);
            else if (compare_versions(rows[j].from, row.from) > 0 &&
                     (upper.empty() || compare_versions(rows[j].from, upper) < 0))
                upper = rows[j].from;
        }
        if (upper.empty()) return "";  // the newest range supports it: the table cannot explain the gap
        int variant = row.cuda_major ? row.cuda_major : lib.cuda_major.value_or(0);
        if (!row.cuda_major && std::ranges::find(excluded, variant) != excluded.end()) {
            variant = 0;
            for (const auto& m : check_data::driver_minimums)
                if (std::ranges::find(excluded, m.cuda_major) == excluded.end())
                    variant = std::max(variant, m.cuda_major);
        }
        const bool installed_in_range = compare_versions(r.component_version, row.from) >= 0 &&
                                        compare_versions(r.component_version, upper) < 0 &&
                                        (!lib.cuda_major || *lib.cuda_major == variant);
        if (installed_in_range) return "";
        const std::string spec = spec_before(upper);
        std::string out = r.product + " " + spec + (variant ? " for CUDA " + std::to_string(variant) : "") +
                          " supports compute capability " + cc(major, minor) + " (" + std::string(row.source) +
                          "): redist fetch " + r.product + " " + spec;
        if (variant) out += " --cuda " + std::to_string(variant);
        return out + " --prefix " + shell_quote(prefix.string());
    }
    return "";
}

check_finding missing_code(const installed_library& lib, const elf::gpu_code& code, const gpu_group& g,
                           const std::filesystem::path& prefix) {
    const std::string target = std::to_string(g.major) + std::to_string(g.minor);
    const std::string sass = g.minor == 0 ? "sm_" + target : "sm_" + std::to_string(g.major) + "0 to sm_" + target;
    std::string msg = lib.rel + " has no code for " + g.label() + ": it carries " + describe(code) +
                      "; running there takes SASS " + sass + " (or sm_" + target + "a) or PTX compute_" + target +
                      " or older, else its kernels fail with \"no kernel image is available for execution on the "
                      "device\"";
    if (const auto elsewhere = supported_elsewhere(lib, g.major, g.minor, prefix); !elsewhere.empty())
        msg += "; " + elsewhere;
    else
        msg += " (a build of " + lib.owner->component + " " + lib.owner->component_version +
               " with that code is needed: an older release or another CUDA variant may have it)";
    return {"gpu-code", check_severity::failure, lib.owner->component, lib.rel, std::move(msg)};
}

}  // namespace

std::optional<usable_code> code_for(const elf::gpu_code& code, int major, int minor) {
    for (auto it = code.sass.rbegin(); it != code.sass.rend(); ++it)
        if (sass_runs(*it, major, minor)) return usable_code{*it, false};
    for (auto it = code.ptx.rbegin(); it != code.ptx.rend(); ++it)
        if (ptx_compiles(*it, major, minor)) return usable_code{*it, true};
    return std::nullopt;
}

std::string describe(const elf::gpu_code& code) {
    std::string out;
    if (!code.sass.empty()) out += "SASS " + names(code.sass, false);
    if (!code.ptx.empty()) out += (out.empty() ? "PTX " : "; PTX ") + names(code.ptx, true);
    if (out.empty()) out = "no SASS or PTX";
    if (code.ptx.empty() && !code.sass.empty()) out += " and no PTX";
    return out;
}

std::vector<check_finding> gpu_code_findings(const std::vector<installed_library>& files,
                                             const std::vector<driver_info::gpu>& gpus,
                                             const std::filesystem::path& prefix) {
    std::vector<check_finding> out;
    const auto groups = group_gpus(gpus);
    if (groups.empty()) return out;
    for (const auto& lib : files) {
        const std::string& component = lib.owner->component;
        auto code = elf::read_gpu_code(lib.abs);
        if (!code.ok()) {
            out.push_back({"gpu-code", check_severity::warning, component, lib.rel,
                           lib.rel + ": its GPU code cannot be listed: " + code.error_value().message});
            continue;
        }
        if (code->sections == 0 || code->entries == 0) continue;  // no GPU code: nothing to judge
        for (const auto& g : groups) {
            if (const auto use = code_for(*code, g.major, g.minor)) {
                out.push_back({"gpu-code", check_severity::info, component, lib.rel,
                               lib.rel + ": code for " + g.label() + ": " + (use->ptx ? "PTX " : "SASS ") +
                                   elf::arch_name(use->arch, use->ptx) +
                                   (use->ptx ? ", compiled by the driver at first use" : "") + " (carries " +
                                   describe(*code) + ")"});
            } else if (code->sass.empty() && code->ptx.empty()) {
                out.push_back({"gpu-code", check_severity::warning, component, lib.rel,
                               lib.rel + ": its " + std::to_string(code->other) +
                                   " GPU code entries are of kinds this check does not read: not judged"});
            } else {
                out.push_back(missing_code(lib, *code, g, prefix));
            }
        }
    }
    return out;
}

}  // namespace redist::gpu_arch
