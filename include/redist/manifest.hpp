// redist/manifest.hpp — the typed model of a redistrib_<label>.json manifest.
//
// Shapes seen in published manifests (see ../shared/manifests/):
//   component.platform = { relative_path, sha256, md5, size }             one artifact
//   component.platform = { cuda12: {...}, cuda13: {...} }                 variants
//   component.platform = { cuda13: {...}, relative_path, sha256, ... }    both at once
// Component, platform and variant keys are open-ended; unknown scalar keys are
// ignored so that newer manifests keep working.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"

namespace redist {

enum class archive_format : std::uint8_t { tar_xz, tar_gz, tar_zst, zip, unknown };

// "tar.xz", "tar.gz", "tar.zst", "zip", "unknown".
const char* to_string(archive_format format) noexcept;

// Derived from the file name's extension (".tar.xz", ".txz", ".tar.gz", ".tgz",
// ".tar.zst", ".zip"); anything else is unknown.
archive_format archive_format_from_path(std::string_view relative_path) noexcept;

struct artifact {
    std::string component;              // key of the component ("cudnn")
    std::string platform;               // "linux-x86_64", "windows-x86_64", "source", ...
    std::optional<std::string> variant; // "cuda12", or none for a plain platform artifact
    std::string relative_path;          // validated: relative, no "..", no backslash
    std::string sha256;                 // 64 lower-case hex digits
    std::string md5;                    // 32 lower-case hex digits, or empty if absent
    std::uint64_t size = 0;             // bytes
    archive_format format = archive_format::unknown;

    // "cuda12" -> 12; nullopt when there is no variant or it is not "cuda<N>".
    std::optional<int> cuda_major() const;
};

struct component {
    std::string key;           // "cudnn", "cuda_nvcc", ...
    std::string name;          // human-readable; may be empty in old manifests
    std::string license;
    std::string license_path;  // may be empty
    std::string version;       // "9.27.0.42"
    std::vector<std::string> cuda_variants;  // the optional "cuda_variant" list, e.g. {"12","13"}
    std::vector<artifact> artifacts;         // in manifest order
};

struct manifest {
    std::string release_label;    // may be empty in old manifests
    std::string release_date;
    std::string release_product;  // may be empty; may differ from the directory name
    std::vector<component> components;  // in manifest order

    std::size_t artifact_count() const noexcept;
    const component* find_component(std::string_view key) const noexcept;
};

// Parses manifest JSON. `source` (a file path or URL) is only used in errors.
// Outcomes:
//   ok                       the typed model; every artifact validated
//   bad_manifest             broken JSON, a wrong type, a missing or malformed
//                            relative_path/sha256/md5/size, or an unsafe
//                            relative_path (absolute, "..", backslash, empty).
//                            error.source = source, error.json_path names the
//                            offending value, e.g. "cudnn.linux-x86_64.cuda12.sha256".
// Never throws, never crashes on any input (fuzzed: tests/fuzz/).
result<manifest> parse_manifest(std::string_view json, std::string_view source);

}  // namespace redist
