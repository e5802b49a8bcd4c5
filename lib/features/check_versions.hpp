// check_versions.hpp (internal) — what `redist check` reads version numbers
// and library names from: version strings ("9.19.0"), library file names
// ("libcudnn.so.9.19.0"), C headers (#define), receipts (their CUDA major),
// small machine files (the driver's kernel module), and CUDA's version
// encoding. Shared by the checks (check.cpp), the loader's search
// (check_loader.cpp), the driver's side (check_driver.cpp) and the child's
// probes (check_probe.cpp).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redist/prefix.hpp"

namespace redist {

// "12.4" for 12040 (the CUDA driver/runtime version encoding).
std::string cuda_version_string(int encoded);

// The value of `#define NAME <decimal>` in C header text (the first such
// line), or nullopt. Header text comes from archives: bounded, never evaluated.
std::optional<long> header_define(std::string_view text, std::string_view name);

}  // namespace redist

namespace redist::checking {

// "9.19.0" -> {9, 19, 0}; {} for anything else.
std::vector<int> version_parts(std::string_view v);
// Equal on the parts both have ("9.19.0" and "9.19.0.56" agree).
bool versions_agree(const std::vector<int>& a, const std::vector<int>& b);
// -1, 0, 1; missing parts count as 0.
int compare_versions(const std::vector<int>& a, const std::vector<int>& b);
// "libcudnn.so.9.19.0" -> {"libcudnn.so", "9.19.0"}; names without ".so." -> {name, ""}.
std::pair<std::string, std::string> split_so_name(const std::string& name);
// libcuda.so*, libnvidia-ml.so*: never loaded from the prefix.
bool is_driver_library(const std::string& filename);
std::string replace_all(std::string s, std::string_view from, std::string_view to);
// The CUDA major of a receipt: its variant's ("cuda12"), else the cuda product's release.
std::optional<int> cuda_major_of(const receipt& r);
// A machine file of at most `limit` bytes, or "" when it cannot be read.
std::string read_small_file(const std::filesystem::path& p, std::size_t limit);
// The version in /proc/driver/nvidia/version ("580.65.06"), if any.
std::optional<std::string> kernel_module_version(const std::filesystem::path& file);

}  // namespace redist::checking
