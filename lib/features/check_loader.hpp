// check_loader.hpp (internal) — the loader's search as ld.so does it
// (DT_RPATH, the prefix, LD_LIBRARY_PATH, DT_RUNPATH, ld.so.cache, the
// default directories), and where the system's driver libraries are: what
// `redist check` resolves every DT_NEEDED with, without loading anything.
// Apart from the checks (check.cpp) because it models the loader, not what
// is judged of its answers.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "features/elf.hpp"
#include "redist/check.hpp"

namespace redist::checking {

// Whether `p` (resolved through every symlink) lies inside `dir` (canonical).
bool inside(const std::filesystem::path& p, const std::filesystem::path& dir);
std::filesystem::path canonical_prefix(const std::filesystem::path& prefix);

class resolver {
public:
    // `shun`: when set, nothing inside it is ever found (the driver's
    // libraries are asked of the system, never of the prefix).
    resolver(const check_options& o, std::vector<std::filesystem::path> prefix_dirs, std::filesystem::path shun = {});

    // Where `name`, needed by an object of `cls`/`machine` in `origin` with
    // these RPATH/RUNPATH entries, is found; empty when nowhere.
    std::string find(const std::string& name, int cls, unsigned machine, const std::filesystem::path& origin,
                     const std::vector<std::string>& rpath, const std::vector<std::string>& runpath,
                     std::string* via = nullptr);

    // Every copy of `name` in LD_LIBRARY_PATH and ld.so.cache, with where it was seen.
    std::vector<std::pair<std::string, std::string>> all_copies(const std::string& name, int cls, unsigned machine);

    const std::vector<std::filesystem::path>& ld_library_path() const { return ld_library_path_; }

private:
    // Whether `p` is an ELF file of this class and machine (read once per path).
    bool matches(const std::filesystem::path& p, int cls, unsigned machine);
    std::vector<std::string> cache_entries(const std::string& name);

    std::vector<std::filesystem::path> prefix_dirs_;
    std::vector<std::filesystem::path> ld_library_path_;
    std::vector<std::filesystem::path> default_dirs_;
    std::filesystem::path ld_cache_path_;
    std::filesystem::path shun_;
    bool cache_loaded_ = false;
    std::multimap<std::string, std::string> cache_;
    std::map<std::string, elf::elf_ident> idents_;
};

// The driver's libraries as the system has them. libcuda.so.1 and
// libnvidia-ml.so.1 are never taken from inside the prefix, by any path (a
// directory of LD_LIBRARY_PATH, ld.so.cache, a symlink): the install must
// not run what it installed, and the check asks the machine's driver.
struct system_driver {
    std::string libcuda;  // empty: none found
    std::string nvml;     // empty: none (the GPUs are then asked of CUDA)
    std::string ld_path;  // the loader path of the driver's child: $LD_LIBRARY_PATH without the prefix
};

system_driver find_system_driver(const check_options& o, int cls, unsigned machine);

}  // namespace redist::checking
