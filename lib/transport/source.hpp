// Internal: a source, chosen once per URL.
//
// Where documents (indexes, manifests, records) and artifacts come from is
// one of four kinds (model/urls.hpp source_kind_of, the one reading of the
// scheme):
//   http      NVIDIA's hosts, a web mirror (http://, https://)
//   file      a directory mirror on this machine (file://)
//   registry  an OCI registry (oci://, oci+http://; transport/oci.hpp)
//   layout    OCI image layouts on this machine's disk (oci-layout:DIR;
//             transport/oci_layout.hpp)
// make_source(url) decides the kind once; the code above the transport asks
// the source, never the scheme:
//   local()      read from this machine's disk, never the network: what
//                --offline still reads (offline_skips, the one offline rule),
//                what the cache need not remember, what the downloader never
//                splits into ranges
//   by_digest()  an OCI source: an artifact is a blob named by its SHA-256
//                (urls.hpp artifact_url), a manifest's relative_path only a
//                layer's title, never a path to resolve
//   lists_directory()  a directory mirror: its labels are the directory's
//                entries (it has no HTML index); a registry or a layout lists
//                its tags (oci_list_tags), a web server serves an index
// How it is read: through the one downloader and the one retry policy
// (sources.hpp try_sources, transfer.hpp download/fetch_text, which read
// file:// themselves and hand OCI URLs to oci.hpp), reported to the
// observer. Credentials are the downloader's (scoped by scheme, host and
// port). What it vouches for: nothing. Every source is transport; NVIDIA's
// manifest (or a pin of it) vouches for bytes, and a recompressed copy only
// under a trusted key's signature (resolve.cpp read_recompressed).
#pragma once

#include <string>
#include <utility>

#include "model/urls.hpp"

namespace redist {

class source {
public:
    source(source_kind kind, std::string url) : kind_(kind), url_(std::move(url)) {}

    source_kind kind() const noexcept { return kind_; }
    const std::string& url() const noexcept { return url_; }

    bool local() const noexcept { return kind_ == source_kind::file || kind_ == source_kind::layout; }
    bool by_digest() const noexcept { return kind_ == source_kind::registry || kind_ == source_kind::layout; }
    bool lists_directory() const noexcept { return kind_ == source_kind::file; }

private:
    source_kind kind_;
    std::string url_;
};

// The source `url` names (a URL: to_url() makes one of a local path).
source make_source(std::string url);

// The one offline rule: offline, a source that is not local() is not read
// (only the cache stands in for it).
bool offline_skips(const source& s, bool offline) noexcept;

}  // namespace redist
