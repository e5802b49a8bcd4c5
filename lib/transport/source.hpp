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
// How it is read: read(), one request through the reader of its kind
// (source_reader: libcurl for http, the disk for file, oci.hpp for a
// registry or a layout), under the one downloader and the one retry policy
// (sources.hpp try_sources, transfer.hpp download/fetch_text, which call
// read()), reported to the observer. Its credentials: credentials(), scoped
// by its origin() (scheme, host and port), as its tokens are. Its scratch:
// where its bytes wait belongs to what they are for, in the cache, so that
// the next run resumes or removes what a killed one left: the artifact's
// .part (segmented_download.hpp spool_location; without a cache an
// unlinked temp file, which a kill cannot leave behind) and a mirror
// target's scratch (features/mirror_target.hpp claim_mirror_scratch). What it
// vouches for: nothing. Every source is transport; NVIDIA's
// manifest (or a pin of it) vouches for bytes, and a recompressed copy only
// under a trusted key's signature (resolve.cpp read_recompressed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/urls.hpp"
#include "redist/error.hpp"
#include "redist/transfer.hpp"

namespace redist {

// One request to a source: its body from resume_from (with range_last, the
// bytes resume_from..range_last) to `callbacks`, as download() describes
// (transfer.hpp); `headers` go with an http request (a registry's token).
struct read_request {
    const std::vector<std::string>& headers;
    const transfer_options& options;
    download_callbacks& callbacks;
    std::uint64_t resume_from = 0;
    std::optional<std::uint64_t> range_last;
    transfer_failure_info* failure = nullptr;  // filled as download() does; may be null
};

class source;

// How one kind of source is read. Outcomes: as download().
class source_reader {
public:
    source_reader() = default;
    source_reader(const source_reader&) = delete;
    source_reader& operator=(const source_reader&) = delete;
    virtual ~source_reader() = default;
    virtual result<void> read(const source& from, const read_request& request) const = 0;
};

// The reader of each kind: http by libcurl and file from disk (transfer.cpp),
// registry and layout by the OCI client (oci.cpp).
const source_reader& builtin_reader(source_kind kind) noexcept;

class source {
public:
    source(source_kind kind, std::string url) : kind_(kind), url_(std::move(url)) {}

    source_kind kind() const noexcept { return kind_; }
    const std::string& url() const noexcept { return url_; }

    // One request to this source, through the reader of its kind (a test
    // build's scoped_source_reader, else builtin_reader).
    result<void> read(const read_request& request) const;

    // Where its requests go, "scheme://host:port" (model/urls.hpp
    // url_origin; a registry's is its API's): what its credentials, its
    // tokens and its health (sources.hpp source_health) are scoped by.
    // Empty for a local source.
    std::string origin() const { return url_origin(url_); }
    // The user's credentials for it (base64 "user:password"), or nullopt:
    // for a registry, what REDIST_OCI_AUTH or `docker login` keeps for its
    // scheme, host and port (oci.hpp registry_credentials), sent only to its
    // origin (a token realm elsewhere gets none); none for the other kinds
    // (an http(s) URL's own "user:password@" is libcurl's, for that origin
    // only, and never written anywhere: sanitize_url).
    // Outcomes: ok | bad_manifest (the docker config) | filesystem.
    result<std::optional<std::string>> credentials() const;

    bool local() const noexcept { return kind_ == source_kind::file || kind_ == source_kind::layout; }
    bool by_digest() const noexcept { return kind_ == source_kind::registry || kind_ == source_kind::layout; }
    bool lists_directory() const noexcept { return kind_ == source_kind::file; }

private:
    source_kind kind_;
    std::string url_;
};

// The source `url` names (a URL: to_url() makes one of a local path).
source make_source(std::string url);
// The same for each URL, in order: the list try_sources walks.
std::vector<source> make_sources(const std::vector<std::string>& urls);

// The one offline rule: offline, a source that is not local() is not read
// (only the cache stands in for it).
bool offline_skips(const source& s, bool offline) noexcept;

// Test builds only (REDIST_TEST_HOOKS; a release defines none of this): while
// one lives, every source of `kind` is read by `reader` (not owned), so that
// a unit test runs install() in process against a source it scripts (its
// faults, its bytes, what each request asked for) with no server. One per
// kind at a time; they nest, the innermost wins, and each restores the one
// before it when it goes.
class scoped_source_reader {
public:
    scoped_source_reader(source_kind kind, const source_reader& reader);
    ~scoped_source_reader();
    scoped_source_reader(const scoped_source_reader&) = delete;
    scoped_source_reader& operator=(const scoped_source_reader&) = delete;

private:
    source_kind kind_;
    const source_reader* previous_;
};

}  // namespace redist
