// check_loader.cpp — the loader's search (see check_loader.hpp): the
// resolver, whether a path is inside the prefix, and where the system's
// libcuda and NVML are.
#include "features/check_loader.hpp"

#include <algorithm>
#include <system_error>

#include "features/check_versions.hpp"

namespace redist::checking {

namespace fs = std::filesystem;

// Whether `p` (resolved through every symlink) lies inside `dir` (canonical).
bool inside(const fs::path& p, const fs::path& dir) {
    if (dir.empty()) return false;
    std::error_code ec;
    const auto real = fs::weakly_canonical(p, ec);
    if (ec) return true;  // cannot tell: treat it as inside
    auto [d, r] = std::mismatch(dir.begin(), dir.end(), real.begin(), real.end());
    return d == dir.end();
}

fs::path canonical_prefix(const fs::path& prefix) {
    if (prefix.empty()) return {};
    std::error_code ec;
    auto p = fs::weakly_canonical(fs::absolute(prefix, ec), ec);
    return ec ? fs::absolute(prefix, ec) : p;
}

resolver::resolver(const check_options& o, std::vector<fs::path> prefix_dirs, fs::path shun)
    : prefix_dirs_(std::move(prefix_dirs)),
      default_dirs_(o.default_dirs),
      ld_cache_path_(o.ld_so_cache),
      shun_(std::move(shun)) {
    for (auto& d : elf::split_path_list(o.ld_library_path, ":;")) ld_library_path_.emplace_back(d);
}

std::string resolver::find(const std::string& name, int cls, unsigned machine, const fs::path& origin,
                           const std::vector<std::string>& rpath, const std::vector<std::string>& runpath,
                           std::string* via) {
    auto fits = [&](const fs::path& p) { return matches(p, cls, machine) && !inside(p, shun_); };
    if (name.find('/') != std::string::npos) return fits(name) ? name : "";
    auto try_dirs = [&](const std::vector<fs::path>& dirs, const char* how) -> std::string {
        for (const auto& d : dirs) {
            fs::path p = d / name;
            if (fits(p)) {
                if (via) *via = how;
                return p.string();
            }
        }
        return "";
    };
    auto expand = [&](const std::vector<std::string>& list) {
        std::vector<fs::path> out;
        for (const auto& e : list) {
            if (e.find("$LIB") != std::string::npos || e.find("${LIB}") != std::string::npos ||
                e.find("$PLATFORM") != std::string::npos)
                continue;  // rare; ld.so substitutes host-specific names we do not model
            out.emplace_back(replace_all(replace_all(e, "${ORIGIN}", origin.string()), "$ORIGIN", origin.string()));
        }
        return out;
    };
    std::string hit;
    if (runpath.empty() && !(hit = try_dirs(expand(rpath), "DT_RPATH")).empty()) return hit;
    if (!(hit = try_dirs(prefix_dirs_, "the prefix")).empty()) return hit;
    if (!(hit = try_dirs(ld_library_path_, "LD_LIBRARY_PATH")).empty()) return hit;
    if (!(hit = try_dirs(expand(runpath), "DT_RUNPATH")).empty()) return hit;
    for (const auto& e : cache_entries(name))
        if (fits(e)) {
            if (via) *via = "ld.so.cache";
            return e;
        }
    return try_dirs(default_dirs_, "the default directories");
}

std::vector<std::pair<std::string, std::string>> resolver::all_copies(const std::string& name, int cls,
                                                                      unsigned machine) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& d : ld_library_path_)
        if (matches(d / name, cls, machine)) out.emplace_back((d / name).string(), "LD_LIBRARY_PATH");
    for (const auto& e : cache_entries(name))
        if (matches(e, cls, machine)) out.emplace_back(e, "ld.so.cache");
    return out;
}

bool resolver::matches(const fs::path& p, int cls, unsigned machine) {
    auto it = idents_.find(p.string());
    if (it == idents_.end()) it = idents_.emplace(p.string(), elf::read_elf_ident(p)).first;
    return it->second.elf_class == cls && it->second.machine == machine;
}

std::vector<std::string> resolver::cache_entries(const std::string& name) {
    if (!cache_loaded_) {
        cache_loaded_ = true;
        const std::string bytes = read_small_file(ld_cache_path_, 64u << 20);
        auto parsed = elf::parse_ld_cache(bytes, elf::ld_cache_host_flags());
        if (parsed.ok())
            for (auto& e : *parsed) cache_.emplace(std::move(e.soname), std::move(e.path));
    }
    std::vector<std::string> out;
    auto [lo, hi] = cache_.equal_range(name);
    for (auto it = lo; it != hi; ++it) out.push_back(it->second);
    return out;
}

system_driver find_system_driver(const check_options& o, int cls, unsigned machine) {
    system_driver d;
    const auto prefix = canonical_prefix(o.prefix);
    for (const auto& dir : elf::split_path_list(o.ld_library_path, ":;"))
        if (!inside(dir, prefix)) d.ld_path += (d.ld_path.empty() ? "" : ":") + dir;
    check_options system = o;
    system.ld_library_path = d.ld_path;
    resolver res(system, {}, prefix);
    d.libcuda = res.find("libcuda.so.1", cls, machine, "/", {}, {});
    if (d.libcuda.empty()) return d;
    // The NVML of the same driver installation as libcuda, else the system's.
    const auto beside = fs::path(d.libcuda).parent_path() / "libnvidia-ml.so.1";
    d.nvml = res.find(beside.string(), cls, machine, "/", {}, {});
    if (d.nvml.empty()) d.nvml = res.find("libnvidia-ml.so.1", cls, machine, "/", {}, {});
    return d;
}

}  // namespace redist::checking
