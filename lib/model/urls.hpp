// Internal: the URL helpers the library uses (building and taking apart
// manifest, index and artifact URLs, a relative_path as a URL reference,
// where a mirror keeps an artifact, file:// URLs, whether a lock's URL may
// be used), and what kind of source a URL names, read from its scheme.
// redist/urls.hpp holds the few a program needs.
//
// source_kind_of() is the one reading of a source URL's scheme, with the rest of the URL parser
// (urls.cpp). transport/source.hpp builds a source on it
// (make_source), and mirror targets choose their kind by it; the model layer
// (project.cpp, below the transport) uses it where it must know a layout's
// directory to take it relative to the project file. Nothing else looks at a
// scheme: scripts/check-layers.py fails on a scheme test outside lib/transport/
// and lib/model/urls.*.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/urls.hpp"

namespace redist {

// Joins without doubling or dropping slashes.
std::string join_url(std::string_view base, std::string_view relative);

std::string index_url(std::string_view base, std::string_view product);
std::string manifest_url(std::string_view base, std::string_view product, std::string_view label);

// The base of a manifest URL made by manifest_url(base, product, label), or
// nullopt when `url` does not have that form.
std::optional<std::string> base_of_manifest_url(std::string_view url, std::string_view product, std::string_view label);

// OCI registries as bases (transport/oci.hpp talks to them; the URL forms
// are in redist/urls.hpp):
//   oci://HOST[:PORT]/NAMESPACE       over https
//   oci+http://HOST[:PORT]/NAMESPACE  over plain http (loopback, tests)
// The usual layout maps onto them: "<base>/<product>/redist/" is the tag list
// of the repository <namespace>/<product>, "<dir>/redistrib_<label>.json" is
// the redistrib JSON layer of its tag <label>, and an artifact is the blob
// "<base>/<product>/blobs/sha256:<hex>" named by its manifest SHA-256.
//   oci-layout:/DIR                   OCI image layouts on disk, one per
//                                     product: DIR/<product>/{oci-layout,
//                                     index.json,blobs/sha256/<hex>}, a tag
//                                     being a manifest's ref.name annotation
// is_oci_url() is true for all three (the same URL mapping); the layout is
// read from disk (transport/oci_layout.hpp), never over the network.
bool is_oci_url(std::string_view url) noexcept;
bool is_oci_layout_url(std::string_view url) noexcept;

// A relative_path (already valid by artifact_path_problem(): no scheme,
// host, query, fragment, backslash or escaped dot or slash; ".." only as a
// leading run) resolved as a URL reference (RFC 3986 5.2: merge, then
// remove_dot_segments) against `directory`, the manifest's directory URL.
// The result keeps the directory's scheme, host and port. Where a ".." may
// climb to:
//   http(s) and other network URLs  the root of the origin: a ".." above "/"
//                                   is refused (RFC 3986 would drop it)
//   file://                         the directory two above `directory`
//                                   (<base> of "<base>/<product>/redist/"),
//                                   the tree a directory mirror holds; a ".."
//                                   above it is dropped there, as RFC 3986
//                                   drops one at a root, so a mirror's pool
//                                   is "<base>/pool/..." (mirror_artifact_path)
// Returns why it cannot be resolved: a directory that is not an absolute
// URL ending in '/', or a climb above the origin's root.
result<std::string> resolve_reference(std::string_view directory, std::string_view relative_path);

// Where a mirror keeps an artifact of `product`, relative to its base (a
// directory mirror's files, an image layout's layer titles):
// "<product>/redist/<relative_path>" after remove_dot_segments, a ".." above
// the base being dropped (RFC 3986 5.2.4 at a root). So
// "../../../pool/p/u/f.tar.xz" is "pool/p/u/f.tar.xz": the mirror's manifest
// stays byte for byte and resolves there. Never empty, never absolute, no ".."
// (for a relative_path that artifact_path_problem() accepts).
std::string mirror_artifact_path(std::string_view product, std::string_view relative_path);

// The same for a mirror (a base URL or a local path) that has `product`: the
// mirror's base joined with mirror_artifact_path(), or an OCI blob.
std::string mirror_artifact_url(std::string_view mirror, std::string_view product, std::string_view relative_path,
                                std::string_view sha256);

// The directory part of a URL, with a trailing slash ("…/redist/").
std::string url_directory(std::string_view url);

// True for file: URLs (case-insensitive scheme). The one test for them:
// download() reads these itself, everything else goes to libcurl.
bool is_file_url(std::string_view url) noexcept;

// True for the sources read from this machine's disk, never the network:
// file: and oci-layout: URLs (what --offline still reads).
bool is_local_url(std::string_view url) noexcept;

// The one decoder of file:// URLs (download() reads them with it).
// "file:///a/b%20c" (or "file://localhost/...") -> "/a/b c". Returns why the
// URL is refused: not a local absolute path, or an escape that would change
// the path's structure (an encoded '/' or NUL), or a ".." segment after
// decoding -- "..%2f..%2fx" must never walk out of a mirror directory. A '%'
// that starts no escape is kept as is (to_url() does not encode paths).
std::optional<std::string> file_url_to_path(std::string_view url, std::string& path);

// Why a URL read from a lock or project file (input, like a manifest) may
// not be used as a source, or nullopt when it may: it must be http://,
// https://, oci:// or oci+http://, or a file:// or oci-layout: URL whose path lies at or under one of
// `local_roots`, lexically and again after resolving the symlinks of the
// parts that exist (a "mirror -> /etc" link in a checkout does not widen a
// root). A lock must not make redist read /etc/shadow as root.
std::optional<std::string> source_url_problem(std::string_view url, const std::vector<std::filesystem::path>& roots);

enum class source_kind : std::uint8_t {
    http,      // http:// or https://: NVIDIA's hosts, a web mirror (and any URL that is none of the others)
    file,      // file: a directory mirror on this machine
    registry,  // oci:// or oci+http://: an OCI registry
    layout,    // oci-layout:DIR: OCI image layouts on this machine's disk
};

// The kind `url` names (schemes are case-insensitive). `url` is a URL:
// to_url() makes one of a local path (a file: URL).
source_kind source_kind_of(std::string_view url) noexcept;

// Where `url`'s requests go, as "scheme://host:port": lower-case, the port
// always written (80, 443 by default), so that "https://h" and
// "https://h:443" are one origin and "http://h:443" another. A registry's
// is its API's: oci://h is https://h:443, oci+http://h is http://h:80. User
// info is not part of it (what it sends is the URL's own business). Empty
// for a local URL (file://, oci-layout:) and anything else. The one scope of
// credentials, tokens and a source's health.
std::string url_origin(std::string_view url);
// Whether the URL's authority holds user info ("user[:password]@").
bool url_has_user_info(std::string_view url) noexcept;

// True for a URL ("<scheme>://..." or "oci-layout:DIR"), false for a local
// path (to_url() makes it a file:// URL).
bool names_url(std::string_view text) noexcept;

// The DIR of "oci-layout:DIR" as written (relative or absolute, possibly
// empty), or nullopt when `text` is not an image layout's URL.
std::optional<std::string_view> oci_layout_dir(std::string_view text) noexcept;

// "oci-layout:DIR" for a local directory: DIR made absolute, as to_url() does.
std::string oci_layout_url(std::string_view dir);

}  // namespace redist
