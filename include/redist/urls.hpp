// redist/urls.hpp — where manifests, indexes and artifacts live.
//
//   <base>/<product>/redist/                        HTML index
//   <base>/<product>/redist/redistrib_<label>.json  manifest
//   <dir of manifest>/<relative_path>               artifact
#pragma once

#include <string>
#include <string_view>

namespace redist {

inline constexpr std::string_view default_base_url = "https://developer.download.nvidia.com/compute";

// Joins without doubling or dropping slashes.
std::string join_url(std::string_view base, std::string_view relative);

std::string index_url(std::string_view base, std::string_view product);
std::string manifest_url(std::string_view base, std::string_view product, std::string_view label);

// The directory part of a URL, with a trailing slash ("…/redist/").
std::string url_directory(std::string_view url);

// Turns a local path into a file:// URL (absolute), leaves URLs as they are.
std::string to_url(std::string_view path_or_url);

// True for file: URLs (case-insensitive scheme). The one test for them:
// download() reads these itself, everything else goes to libcurl.
bool is_file_url(std::string_view url) noexcept;

}  // namespace redist
