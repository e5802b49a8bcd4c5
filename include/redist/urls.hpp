// redist/urls.hpp — where manifests, indexes and artifacts live.
//
//   <base>/<product>/redist/                        HTML index
//   <base>/<product>/redist/redistrib_<label>.json  manifest
//   <dir of manifest>/<relative_path>               artifact (a URL reference,
//                                                   RFC 3986, on the manifest's
//                                                   scheme, host and port)
//
// A base is an http(s) URL, a local directory (a file:// URL or a path),
// or one of:
//   oci://HOST[:PORT]/NAMESPACE       an OCI registry over https
//   oci+http://HOST[:PORT]/NAMESPACE  over plain http (loopback, tests)
//   oci-layout:/DIR                   OCI image layouts on disk, one per
//                                     product: DIR/<product>/{oci-layout,
//                                     index.json,blobs/sha256/<hex>}
// The usual layout maps onto them: "<base>/<product>/redist/" is the tag list
// of the repository <namespace>/<product>, "<dir>/redistrib_<label>.json" is
// the redistrib JSON layer of its tag <label> (in a layout, a manifest's
// ref.name annotation), and an artifact is the blob named by its manifest
// SHA-256.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

inline constexpr std::string_view default_base_url = "https://developer.download.nvidia.com/compute";
// NVIDIA's second host: classic-shaped manifests whose relative_paths climb
// into a content-addressed pool ("../../../pool/<platform>/<uuid>/<file>",
// i.e. https://packages.nvidia.com/bin-archive/pool/...). Tried after
// default_base_url when no base is named (--base-url, $REDIST_BASE_URL).
inline constexpr std::string_view bin_archive_base_url = "https://packages.nvidia.com/bin-archive/release";

// The base of an artifact URL under <base>/<product>/redist/ (what a receipt
// records), or nullopt when `url` has no "/<product>/redist/" segment. The
// last such segment decides, so a base that itself contains one stays whole.
std::optional<std::string> base_of_artifact_url(std::string_view url, std::string_view product);

// Where an artifact listed in the manifest whose directory URL is `directory`
// ("<base>/<product>/redist/") is fetched from: relative_path resolved as a
// URL reference against it, or for an OCI base the blob named by `sha256`. A path that
// cannot be resolved gives "" (resolve_release refuses such a manifest first).
std::string artifact_url(std::string_view directory, std::string_view relative_path, std::string_view sha256);

// Turns a local path into a file:// URL (absolute), and the DIR of
// "oci-layout:DIR" into an absolute one; leaves URLs as they are.
std::string to_url(std::string_view path_or_url);

// The local directories among `urls` (base URLs and mirrors, as URLs or
// paths): the decoded paths of the file:// ones and the DIRs of the
// oci-layout: ones. What the user named on the command line, so that a URL
// from a lock or project file (a source like any other: http(s)://, oci://,
// oci+http://, or file:// and oci-layout: only at or under one of these)
// may point there.
std::vector<std::filesystem::path> local_roots(const std::vector<std::string>& urls);

REDIST_API_END
}  // namespace redist
