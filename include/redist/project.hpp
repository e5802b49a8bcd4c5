// redist/project.hpp — the project file, redist.toml: one file naming the set
// of products (and their versions and components) a build needs, for which
// platforms and CUDA variant, and where they go.
//
//   [project]
//   prefix = "nvidia"                       # relative to the file's directory, inside it (check_project_prefix)
//   platforms = ["linux-x86_64", "linux-sbsa"]
//   cuda = "12"                             # the CUDA variant, for products that have variants
//   base-url = "https://developer.download.nvidia.com/compute"   # optional
//   mirrors = ["https://mirror.example/compute"]                 # optional
//   exclude = ["lib/*_static*.a"]           # optional
//
//   [products.cuda]
//   version = "12.9"
//   components = ["cuda_nvcc", "cuda_cudart", "libcublas"]
//
//   [products.cudnn]
//   version = "9"                           # components: optional, default every component
//
// base-url and mirrors are http(s):// URLs, or local directories (paths
// relative to the file's directory, or file:// URLs) inside the project's
// directory, kept as file:// URLs; anything else is refused.
//
// The file is parsed with toml++ and validated strictly: unknown keys (typos),
// wrong types, empty or duplicate values are errors that name the file, the
// line and column, and the key ("redist.toml:12:11: products.cuda.version:
// expected a string").
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"

namespace redist {

struct project_product {
    std::string name;                     // "cuda": the product directory upstream
    std::string version;                  // a version spec: "12.9", "9", "9.27.0", "latest"
    std::vector<std::string> components;  // empty: every component
    std::optional<int> cuda;              // `cuda = 12` in its table: overrides the project's for this product
    std::size_t line = 0;                 // of its [products.<name>] header, for messages
};

struct project_file {
    std::filesystem::path path;          // the file, as given
    std::filesystem::path prefix;        // absolute when `path` is (relative prefixes resolve against its directory)
    std::vector<std::string> platforms;  // at least one, no duplicates
    std::optional<int> cuda;             // the CUDA major for products with variants; nullopt: decide per product
    std::string base_url;                // empty: the default (or $REDIST_BASE_URL); a local one as file://
    std::vector<std::string> mirrors;
    std::vector<std::string> exclude;       // archive-relative globs
    std::vector<project_product> products;  // at least one, sorted by name
};

inline constexpr std::size_t kMaxProjectFileBytes = 1u << 20;

// Parses and validates redist.toml text; `path` names the file in errors and
// anchors a relative prefix. Outcomes: ok | bad_manifest (error.source =
// "<path>:<line>:<column>", error.json_path = the dotted key, e.g.
// "products.cuda.components[1]", empty for TOML syntax errors; message =
// what is wrong). Never throws, never crashes on any input (fuzzed:
// tests/fuzz/project_fuzz.cpp).
result<project_file> parse_project(std::string_view text, const std::filesystem::path& path);

// The commented starter file `redist init` writes, listing `platforms`.
std::string starter_project(const std::vector<std::string>& platforms);

}  // namespace redist
