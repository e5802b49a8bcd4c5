// redist/project.hpp — the project file, redist.toml: one file naming the set
// of products (and their versions and components) a build needs, for which
// platforms and CUDA variant, and where they go.
//
//   [project]
//   prefix = "nvidia"                       # relative to the file's directory, inside it (plan_sync checks it)
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
//   deps = true                             # optional: with what it needs of the cuda product
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
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

struct project_product {
    std::string name;                     // "cuda": the product directory upstream
    std::string version;                  // a version spec: "12.9", "9", "9.27.0", "latest"
    std::vector<std::string> components;  // empty: every component
    std::optional<int> cuda;              // `cuda = 12` in its table: overrides the project's for this product
    std::size_t line = 0;                 // of its [products.<name>] header, for messages
    // `deps = true`: also lock and install what redist's table
    // (dependencies.hpp) says it needs from the `cuda` product, at the CUDA
    // major of its variant; from products.cuda when the project names it.
    bool deps = false;
};

struct project_file {
    std::filesystem::path path;          // the file, as given
    std::filesystem::path prefix;        // absolute when `path` is (relative prefixes resolve against its directory)
    std::vector<std::string> platforms;  // at least one, no duplicates
    std::optional<int> cuda;             // the CUDA major for products with variants; nullopt: decide per product
    std::string base_url;                // empty: the default (or $REDIST_BASE_URL); a local one as file://
    std::vector<std::string> mirrors;
    // Public keys (PEM files inside the project's directory, absolute) that
    // sign a mirror's recompressed copies (signing.hpp); added to the user's.
    std::vector<std::filesystem::path> trusted_keys;
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

// The user's own defaults (as uv.toml or .condarc): config.toml in
// $XDG_CONFIG_HOME/redist/ (else ~/.config/redist/), every key optional:
//
//   base-url = "https://mirror.internal/compute"   # after --base-url, a project's, $REDIST_BASE_URL
//   mirrors = ["oci://registry.internal/nvidia"]   # after --mirror, a project's, $REDIST_MIRRORS
//   cache-dir = "/var/cache/redist"                # after --cache-dir, $REDIST_CACHE_DIR
//   retries = 6                                    # after --retries
//   trusted-keys = ["mirror.pub"]                  # added to --trusted-key, $REDIST_TRUSTED_KEYS
//
// A relative path (a local base-url or mirror, cache-dir, a key) is taken
// from the file's directory. The command line and the project file come
// before it, and so do the environment variables.
struct user_config {
    std::filesystem::path path;  // the file read ("" when there is none)
    std::string base_url;        // a URL (a local directory as file://); "" when unset
    std::vector<std::string> mirrors;
    std::filesystem::path cache_dir;  // "" when unset
    std::optional<int> retries;       // 1..100
    std::vector<std::filesystem::path> trusted_keys;
};

// Where the user's config file is: $XDG_CONFIG_HOME/redist/config.toml when
// XDG_CONFIG_HOME is absolute, else $HOME/.config/redist/config.toml; ""
// with neither.
std::filesystem::path user_config_path();

// Reads and parses the file at `path` (user_config_path()): a user_config
// with an empty path when there is no file. The file is read as every input
// is (a regular file, at most 1 MiB, a FIFO never blocks), then parsed and
// validated with the same TOML reader and limits as the project file.
// Outcomes: ok | filesystem (cannot read it) | bad_manifest (source
// "<path>:<line>:<column>", json_path the key; an unknown key is refused,
// naming the known ones).
result<user_config> read_user_config(const std::filesystem::path& path);

// Reads a project file or a lock file (`what` names it in errors) as every
// input is read: a regular file (the link's target, for a file the user
// named), at most max_bytes; a FIFO, a device or a directory fails at once,
// never blocks. Outcomes: ok | not_found ("cannot open the <what>": no such
// file) | filesystem (not a regular file, cannot read) | bad_manifest (larger
// than max_bytes).
result<std::string> read_project_document(const std::filesystem::path& path, std::uint64_t max_bytes, const char* what);

// The commented starter file `redist init` writes, listing `platforms`.
std::string starter_project(const std::vector<std::string>& platforms);

REDIST_API_END
}  // namespace redist
