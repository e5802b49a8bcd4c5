// redist/manifest.hpp — the typed model of a redistrib_<label>.json manifest.
//
// Shapes seen in published manifests (see ../shared/manifests/):
//   component.platform = { relative_path, sha256, md5, size }             one artifact
//   component.platform = { cuda12: {...}, cuda13: {...} }                 variants
//   component.platform = { cuda13: {...}, relative_path, sha256, ... }    both at once
// Component, platform and variant keys are open-ended: at the top level every
// object is a component, in a component every object is a platform, in a
// platform every object is a variant. Unknown non-object values (strings,
// numbers, arrays) are ignored at every level so that newer manifests keep
// working; so are unknown keys inside an artifact.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/recompressed.hpp"

namespace redist {
REDIST_API_BEGIN

enum class archive_format : std::uint8_t { tar_xz, tar_gz, tar_zst, zip, unknown };

// "tar.xz", "tar.gz", "tar.zst", "zip", "unknown".
const char* to_string(archive_format format) noexcept;

// A CUDA version as a variant key, --cuda or a toolkit names it: a major
// (12) and, where given, a minor (12.4).
struct cuda_version {
    int major = 0;
    std::optional<int> minor;
    bool operator==(const cuda_version&) const = default;
};

// "12" -> 12, "12.4" -> 12.4, "12.4.1" -> 12.4 (the patch level names no
// variant); nullopt for anything else (at most 3 digits a number, no sign,
// no empty part, nothing after the patch).
std::optional<cuda_version> parse_cuda_version(std::string_view text) noexcept;

// "12", "12.4".
std::string to_string(const cuda_version& version);

struct artifact {
    std::string component;               // key of the component ("cudnn")
    std::string platform;                // "linux-x86_64", "windows-x86_64", "source", ...
    std::optional<std::string> variant;  // "cuda12", "cuda13.2", or none for a plain platform artifact
    std::string relative_path;           // validated by parse_manifest(): a URL reference
                                         // (no leading "/", "//", "scheme:" or drive prefix, '?' or
                                         // '#'), ".." only as a leading run of at most three, no
                                         // "." or empty segment, no backslash, no control
                                         // character, no percent-escape of a path character
    std::string sha256;                  // 64 lower-case hex digits
    std::string md5;                     // 32 lower-case hex digits, or empty if absent
    std::uint64_t size = 0;              // bytes
    // From relative_path's extension (".tar.xz", ".txz", ".tar.gz", ".tgz",
    // ".tar.zst", ".zip"); anything else is unknown.
    archive_format format = archive_format::unknown;

    // The CUDA version a variant key names: "cuda12" -> 12, "cuda13.2" ->
    // 13.2; nullopt when there is no variant or it is neither "cuda<N>" nor
    // "cuda<N>.<M>".
    std::optional<cuda_version> cuda_variant() const;
    // cuda_variant()'s major: "cuda12" -> 12, "cuda13.2" -> 13.
    std::optional<int> cuda_major() const;
};

struct component {
    std::string key;   // "cudnn", "cuda_nvcc", ... (a valid name, see below)
    std::string name;  // human-readable; may be empty in old manifests
    std::string license;
    std::string license_path;                // may be empty
    std::string version;                     // "9.27.0.42"
    std::vector<std::string> cuda_variants;  // the optional "cuda_variant" list, e.g. {"12","13"}
    std::vector<artifact> artifacts;         // in manifest order
};

struct manifest {
    std::string release_label;  // may be empty in old manifests
    std::string release_date;
    std::string release_product;        // may be empty; may differ from the directory name
    std::vector<component> components;  // in manifest order

    std::size_t artifact_count() const noexcept;
    const component* find_component(std::string_view key) const noexcept;
};

// Parses manifest JSON. `source` (a file path or URL) is only used in errors.
// Outcomes:
//   ok                       the typed model; every artifact validated
//   bad_manifest             broken JSON or a top level that is not an object;
//                            a known key of the wrong type (release_*, name,
//                            license, license_path, version: strings;
//                            cuda_variant: array of strings); a missing or
//                            malformed relative_path/sha256/size (md5 is optional
//                            but must be 32 hex digits when present; size is a
//                            decimal string or JSON integer that fits 64 bits);
//                            an unsafe relative_path (see artifact::relative_path;
//                            it is also checked after percent-decoding);
//                            a component, platform or variant key, release_label
//                            or release_product that is not a valid name (1-128
//                            of [A-Za-z0-9._+-], not "." or ".."; labels and
//                            product may be empty); a platform with neither an
//                            artifact nor variants; a duplicate key among those
//                            the parser reads (two readings of one hash).
//                            error.source = source, error.json_path names the
//                            offending value, e.g. "cudnn.linux-x86_64.cuda12.sha256",
//                            array elements as "cudnn.cuda_variant[1]"; for broken
//                            JSON the message carries simdjson's reason and, when
//                            known, the byte offset and line.
// Values under unknown keys are skipped unread (On-Demand), so a malformed
// literal there (e.g. `tru`) is not reported; structure and UTF-8 always are.
// Never throws, never crashes on any input (fuzzed: tests/fuzz/).
result<manifest> parse_manifest(std::string_view json, std::string_view source);

// A release as fetched (resolve.hpp resolve_release): its manifest's bytes,
// their SHA-256 and where they came from, and the parsed manifest.
struct resolved_release {
    std::string product;
    std::string label;
    std::string manifest_url;
    std::string manifest_sha256;    // of the manifest bytes as fetched
    std::string manifest_text;      // the manifest bytes as fetched
    std::string artifact_base_url;  // the manifest's directory
    manifest parsed;
    // The copies of the sidecar read beside the manifest (release_request::
    // recompressed), checked against it (its manifest_sha256, label and
    // sizes) and signed by a trusted key (source_policy::trusted_keys); none
    // when there is none, it is unusable or not so signed, or it was not
    // asked for.
    recompressed_record recompressed;
    std::string recompressed_base_url;  // the directory the sidecar came from (the manifest's, a mirror's)
    std::string recompressed_signer;    // the fingerprint of the trusted key that signed it (signing.hpp)
    // Offline: the URL (without credentials) that served the cached manifest
    // when that is another source than manifest_url (a mirror used before);
    // empty otherwise.
    std::string cached_from{};
};

// What to install from one release: its artifacts (from select_artifacts or
// a lock) and where they come from. fetch and sync hand install() one each
// per release (install.hpp); a lock makes them too (lockfile.hpp).
struct release_plan {
    std::string product;
    std::string label;
    std::string artifact_base_url;  // the manifest's directory
    std::vector<artifact> artifacts;
    std::map<std::string, std::string> component_versions;  // component key -> version, for receipts
    // A mirror's recompressed copies (recompressed.hpp), fetched from
    // artifact_url(copy_base_url, copy.relative_path, copy.sha256). An
    // artifact whose sha256 is some copy's original_sha256 may be installed
    // from it (install_request::use_recompressed).
    // ({}: plans brace-initialized without these fields stay warning-free)
    std::vector<recompressed_copy> copies{};
    std::string copy_base_url{};
    // A lock's tar_sha256 per original archive (sha256 -> tar_sha256): a copy
    // is used only when it decodes to exactly this tar.
    std::map<std::string, std::string> locked_tar_sha256{};
    // And its hash list (sha256 -> tar_list_sha256), where the lock pins one.
    std::map<std::string, std::string> locked_tar_list_sha256{};
    // And the tree it unpacks to (sha256 -> tree_sha256), where the lock pins one.
    std::map<std::string, std::string> locked_tree_sha256{};
    // A lock's URL per relative_path: where the base's bytes are, as resolved
    // when the lock was made (a locked install never resolves again).
    std::map<std::string, std::string> locked_urls{};
    // Made from a lock (plan_from_lock, plan_sync): an artifact the
    // lock pins no tar_sha256 for is installed from its original only.
    bool from_lock = false;
};

REDIST_API_END
}  // namespace redist
