// redist/resolve.hpp — from a version spec to a release: the product's
// index, the manifest (mirrors first, cached, retried), and the CUDA variant
// rule. Installing what was resolved is fetch.hpp's job.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/manifest.hpp"
#include "redist/platform.hpp"
#include "redist/transfer.hpp"

namespace redist {
REDIST_API_BEGIN

// ---- resolving ---------------------------------------------------------------

class run_observer;  // observer.hpp

// The release labels of a product, newest first. http(s): parses the HTML
// index at <base>/<product>/redist/; file://: lists that directory.
// Outcomes:
//   ok
//   not_found     no product directory (file://), an index that lists no
//                 manifests, or offline and not cached
//   network       the index could not be fetched
//   bad_manifest  an index larger than 16 MiB
//   filesystem    a file:// directory that cannot be listed, or a cache that
//                 cannot be trusted
result<std::vector<std::string>> list_versions(const std::string& base_url, const std::string& product,
                                               const transfer_options& options);

// As above, trying mirrors first, with retries, the document cache and --offline.
result<std::vector<std::string>> list_versions(const std::string& base_url, const std::string& product,
                                               const transfer_options& options, const source_policy& sources,
                                               run_observer* observer = nullptr);

struct release_request {
    std::string product;               // "cudnn"; may be empty with manifest_location
    std::string version_spec;          // "9.27.0", "9.27", "9", "latest"
    std::string base_url;              // <base>; see urls.hpp
    std::string manifest_location;     // --manifest PATH|URL: skips the index entirely
    std::string manifest_sha256;       // --manifest-sha256: pin the manifest's bytes (integrity error otherwise)
    source_policy sources;             // mirrors are tried first for the index and manifest too
    run_observer* observer = nullptr;  // retries of the index and manifest; not owned
    // Also read the mirror's recompressed-copy record (recompressed.hpp)
    // from the directory the manifest was read from, into
    // resolved_release::recompressed: absent = no copies, silently; one that
    // cannot be read, is invalid or is for another manifest = no copies, and
    // one observer on_copy_failure (component empty). Never fails the call.
    bool recompressed = false;
};

// Finds the label (exact specs skip the index), fetches and parses the
// manifest, and checks that release_product/release_label, when present,
// agree with the request.
// Outcomes:
//   ok
//   usage         neither a product nor a manifest was given
//   not_found     no such release (or offline and not cached)
//   network       the index or manifest could not be fetched
//   integrity     the manifest's SHA-256 is not request.manifest_sha256
//   bad_manifest  an empty, HTML or oversized (> 64 MiB) body, invalid JSON,
//                 or a manifest for another product or release
//   filesystem    the cache or a file:// manifest could not be read
result<resolved_release> resolve_release(const release_request& request, const transfer_options& options);

// True when `manifest_location` (release_request::manifest_location, a path
// or a URL) names a file on this machine (a path or a file:// URL): the
// user's own document, which drift watching leaves alone. False when empty.
bool is_local_manifest(std::string_view manifest_location);

// ---- choosing the CUDA variant --------------------------------------------------

struct variant_choice {
    std::optional<int> cuda_major;  // nullopt: the selection has no variants at all
    std::optional<int> cuda_minor;  // the minor preferred (--cuda N.M, the toolkit's or driver's), if any
    // Why: "--cuda 12", "project.cuda 12", "detected CUDA 12.4.1 (CUDA_HOME=/opt/cuda, version.json)",
    // "no CUDA toolkit found; the system driver supports CUDA 12.8 (/usr/lib/x86_64-linux-gnu/libcuda.so.1)",
    // "no CUDA toolkit found; using the newest variant every selected component offers (offered: 12, 13)".
    std::string reason;
};

// The one CUDA variant rule (fetch, `redist lock`, sync), pure (the caller
// read the toolkit's files and asked the system's driver): an explicit
// request (`asked_by`: --cuda, project.cuda) wins; next the detected toolkit
// (detect_cuda: its major, preferring its minor), if every selected
// component that has only variants offers that major; with no toolkit, what
// the system driver supports (`detected` of origin driver, cuda_from_driver):
// the newest major up to the driver's that every such component offers,
// preferring the driver's minor at its own major; otherwise the newest such
// major, as select_artifacts() defaults (else the newest offered, which
// select_artifacts() then refuses naming the laggard).
variant_choice choose_cuda_variant(const manifest& m, const std::string& platform,
                                   const std::vector<std::string>& components,
                                   const std::optional<cuda_version>& explicit_version,
                                   const std::optional<cuda_detection>& detected, std::string_view asked_by = "--cuda");

REDIST_API_END
}  // namespace redist
