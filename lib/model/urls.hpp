// Internal: what kind of source a URL names, read from its scheme.
//
// The one reading of a source URL's scheme, with the rest of the URL parser
// (redist/urls.hpp, urls.cpp). transport/source.hpp builds a source on it
// (make_source), and mirror targets choose their kind by it; the model layer
// (project.cpp, below the transport) uses it where it must know a layout's
// directory to take it relative to the project file. Nothing else looks at a
// scheme: scripts/check-layers.py fails on a scheme test outside lib/transport/
// and lib/model/urls.*.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "redist/urls.hpp"

namespace redist {

enum class source_kind : std::uint8_t {
    http,      // http:// or https://: NVIDIA's hosts, a web mirror (and any URL that is none of the others)
    file,      // file: a directory mirror on this machine
    registry,  // oci:// or oci+http://: an OCI registry
    layout,    // oci-layout:DIR: OCI image layouts on this machine's disk
};

// The kind `url` names (schemes are case-insensitive). `url` is a URL:
// to_url() makes one of a local path (a file: URL).
source_kind source_kind_of(std::string_view url) noexcept;

// True for a URL ("<scheme>://..." or "oci-layout:DIR"), false for a local
// path (to_url() makes it a file:// URL).
bool names_url(std::string_view text) noexcept;

// The DIR of "oci-layout:DIR" as written (relative or absolute, possibly
// empty), or nullopt when `text` is not an image layout's URL.
std::optional<std::string_view> oci_layout_dir(std::string_view text) noexcept;

// "oci-layout:DIR" for a local directory: DIR made absolute, as to_url() does.
std::string oci_layout_url(std::string_view dir);

}  // namespace redist
