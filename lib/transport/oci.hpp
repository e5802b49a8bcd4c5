// Internal: OCI distribution registries as sources and mirror targets.
//
// The layout (urls.hpp names the URL forms):
//   repository   <namespace>/<product>
//   tag          the release label; its image manifest lists
//   layers       the redistrib JSON (title annotation "redistrib_<label>.json"),
//                then one layer per archive whose digest is the manifest's
//                SHA-256 (title annotation: its relative_path), then with
//                `mirror --recompress zstd` one per zstd copy (title: the
//                copy's relative_path) and the sidecar describing them
//                (title "recompressed_<label>.json")
//   config       the empty JSON object "{}" (application/vnd.oci.image.config.v1+json)
// Nothing a registry says is trusted: an archive is checked against the
// redistrib JSON's size and SHA-256 like any other download, and the JSON
// layer against its digest. A tag is a name, not a promise: resolve checks
// that the JSON's release_label is the tag's.
//
// Credentials (never printed; errors carry URLs without them):
//   REDIST_OCI_AUTH="REGISTRY=user:password" (REGISTRY as in the URL:
//   host[:port]; no other registry gets it), else the registry's "auths" entry in
//   $DOCKER_CONFIG/config.json or ~/.docker/config.json. They go to the
//   registry (Basic) or to its token realm (Bearer flow), and a realm gets
//   them only over https or on the registry's own host. Authorization
//   headers are never forwarded by a redirect to another host (libcurl).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/transfer.hpp"
#include "transport/sources.hpp"

namespace redist {

struct oci_url {
    enum class kind : std::uint8_t { base, tags, document, blob };
    bool https = true;
    std::string registry;    // host[:port]
    std::string repository;  // base: the namespace; else <namespace>/<product>
    kind what = kind::base;
    std::string reference;  // document: the label (a tag); blob: "sha256:<hex>"
    std::string title;      // document: the layer's title, "redistrib_<label>.json" or "recompressed_<label>.json"
    // "<scheme>://<registry>/v2/<repository>/<tail>"
    std::string api(std::string_view tail) const;
};

// Parses oci:// and oci+http:// URLs of the forms in urls.hpp; a document is
// <base>/<product>/redist/redistrib_<label>.json or, for a mirror's
// recompressed copies, .../recompressed_<label>.json (the layer so titled in
// tag <label>; a tag without it: not_found). The host is
// [A-Za-z0-9.-] with an optional :port (or a [v6] literal); repository path
// components follow the distribution spec ([a-z0-9] separated by '.', '_',
// '__' or '-'); a tag is [A-Za-z0-9_][A-Za-z0-9._-]{0,127}; no userinfo,
// query or fragment. Outcomes: ok | usage (why, with the URL).
result<oci_url> parse_oci_url(std::string_view url);

// ---- readers of registry bytes (each fuzzed: tests/fuzz/oci_fuzz.cpp) ----------------------

struct auth_challenge {
    std::string scheme;  // "bearer" or "basic" (lower case)
    std::string realm, service, scope;
};
// WWW-Authenticate: Bearer realm="…",service="…",scope="…" (or Basic
// realm="…"). nullopt when unparsable.
std::optional<auth_challenge> parse_www_authenticate(std::string_view header);
// {"token": "…"} or {"access_token": "…"}. Outcomes: ok | bad_manifest.
result<std::string> parse_token_response(std::string_view body, std::string_view source);
// {"name": "…", "tags": ["…", …]}; every tag a valid tag. Outcomes: ok | bad_manifest.
result<std::vector<std::string>> parse_tags_list(std::string_view body, std::string_view source);
// An image manifest's layers: {mediaType, digest, size, annotations.title}.
struct oci_layer {
    std::string media_type, digest, title;
    std::uint64_t size = 0;
};
// Outcomes: ok | bad_manifest (not an image manifest, a digest that is not
// "sha256:<64 hex>").
result<std::vector<oci_layer>> parse_image_manifest(std::string_view body, std::string_view source);
// The base64 "user:password" of `registry` ("host[:port]") in a docker
// config.json, or nullopt. For an https registry: "auths": {"<registry>",
// "https://<registry>" or "https://<registry>/v1/": {"auth": "…"}}; for a
// plain-http one only "http://<registry>[/v1/]": what `docker login`
// stored for https never goes over plain http. Outcomes: ok | bad_manifest.
result<std::optional<std::string>> docker_config_auth(std::string_view json, std::string_view registry, bool https,
                                                      std::string_view source);
// The user's credentials for the registry a registry URL (oci://,
// oci+http://) names, looked up by its scheme, host and port: the entry of
// REDIST_OCI_AUTH ("REGISTRY=USER:PASSWORD") that names it, else `docker
// login`'s ($DOCKER_CONFIG/config.json, else ~/.docker/config.json), as
// base64 "user:password"; nullopt: none. source::credentials() is its one
// caller. Outcomes: ok | bad_manifest (the docker config) | filesystem.
result<std::optional<std::string>> registry_credentials(std::string_view url);
// The next page of a tags list from a Link header (`</v2/…?last=…>;
// rel="next"`): a path on the same registry, or nullopt.
std::optional<std::string> next_page_path(std::string_view link);

// ---- pulling ---------------------------------------------------------------------------------

// Whether `bytes` are the blob `digest` ("sha256:<hex>") of `size` bytes.
// Outcomes: ok | integrity (url = shown, expected/actual set).
result<void> check_oci_blob(std::string_view bytes, const std::string& digest, std::uint64_t size,
                            const std::string& shown);
// A document of a tag from its image manifest: the layer titled `title`
// (redistrib_<label>.json, recompressed_<label>.json; at most 64 MiB),
// fetched by `blob`, which checks it against the layer digest
// (check_oci_blob). `source` names the manifest.
// Outcomes: ok | bad_manifest | not_found | what `blob` returns.
result<std::string> oci_release_document(std::string_view manifest, const std::string& title, const std::string& source,
                                         const std::function<result<std::string>(const oci_layer&)>& blob);
// A document held in memory (a release's manifest or copy record) to
// `callbacks` as download() would send it: from resume_from, partial when
// resuming. The one delivery for registries and image layouts.
// Outcomes: ok | network (resume_from past the end) | a callback's error.
result<void> deliver_document(const std::string& body, download_callbacks& callbacks, std::uint64_t resume_from);
// The label of a document name ("redistrib_<label>.json",
// "recompressed_<label>.json" or its signature "recompressed_<label>.json.sig";
// the label a valid tag), or nullopt: the one
// rule for registry and image-layout URLs.
std::optional<std::string> oci_document_label(std::string_view name);
inline constexpr std::size_t oci_max_manifest_bytes = 4u << 20;

// The tail of a registry or image-layout URL's path: "<head>/redist/" (the
// tags), "<head>/redist/<document>" or "<head>/blobs/sha256:<hex>"; `head`
// is what comes before (a repository, or DIR/<product>). Only the last two
// segments decide: a "redist" or "blobs" segment inside `head` is a name
// like any other. nullopt: neither form. Outcomes: ok | usage (a name that is no document or no digest; `store`
// says "a registry" or "a layout" in the message).
struct oci_path_tail {
    std::string_view head;
    oci_url::kind what = oci_url::kind::tags;
    std::string reference;  // document: the label; blob: "sha256:<hex>"
    std::string title;      // document: its name, the layer's title
};
result<std::optional<oci_path_tail>> split_oci_path(std::string_view path, std::string_view store);

// download() of a registry or layout source (its reader in transfer.cpp
// calls it; a layout goes to oci_layout_download), with the source's
// credentials (source::credentials): a blob with Range as asked; a document (a titled
// layer of a tag: the redistrib JSON or the recompressed sidecar) checked
// against its layer digest before any byte reaches the callbacks. Same
// outcomes as download().
result<void> oci_download(const source& from, const transfer_options& options, download_callbacks& callbacks,
                          std::uint64_t resume_from, std::optional<std::uint64_t> range_last,
                          transfer_failure_info* failure);

// The tags of <base>/<product> (paginated; an image layout's from its
// index.json), as list_versions() returns
// labels. Outcomes: ok | not_found | network | bad_manifest.
result<std::vector<std::string>> oci_list_tags(const std::string& base, const std::string& product,
                                               const transfer_options& options);

// ---- pushing ---------------------------------------------------------------------------------

// Where the mirror puts a release in OCI form: a registry (oci_pusher) or an
// image layout on disk (oci_layout_writer, transport/oci_layout.hpp). One
// mirror target drives either through this interface.
class oci_store {
public:
    oci_store() = default;
    oci_store(const oci_store&) = delete;
    oci_store& operator=(const oci_store&) = delete;
    oci_store(oci_store&&) = default;
    oci_store& operator=(oci_store&&) = delete;
    virtual ~oci_store() = default;
    // Whether the store has the blob with this size (a layout: and this
    // SHA-256). Outcomes: ok | network | filesystem.
    virtual result<bool> has_blob(const std::string& sha256, std::uint64_t size) = 0;
    // Stores a blob from a verified file (a layout moves it into place; the
    // file may be gone afterwards) or from memory.
    // Outcomes: ok | network | filesystem.
    virtual result<void> push_blob(const std::string& sha256, const std::filesystem::path& file) = 0;
    virtual result<void> push_blob(const std::string& sha256, std::string_view bytes) = 0;
    // The digest the tag points at now, or nullopt. Outcomes: ok | network |
    // filesystem | bad_manifest.
    virtual result<std::optional<std::string>> tag_digest(const std::string& tag) = 0;
    // Points the tag at this image manifest, after every blob it lists is
    // stored. Outcomes: ok | network | filesystem | bad_manifest (refused).
    virtual result<void> put_manifest(const std::string& tag, const std::string& json, std::string_view media_type) = 0;
    // Makes a blob of another repository of the same store present here
    // without sending it (a registry's cross-repository mount); true when it
    // did. A store without such a thing (an image layout) says false.
    virtual result<bool> mount_blob(const std::string& /*sha256*/, const std::string& /*from*/) { return false; }
};

// A registry as a mirror target. Every request (a HEAD, an upload session
// and its PUT, a manifest) is retried under the run's one policy
// (sources.hpp try_sources): 408, 429 and 5xx answers, resets and stalls
// (--stall-timeout, bytes moving either way) are transient, a Retry-After
// is honoured, and --retries bounds the attempts. The registry is the only
// source of its own requests: never skipped, offline or not.
class oci_pusher final : public oci_store {
public:
    // Outcomes: ok | usage (a bad URL) | network (no push access).
    // `observer` (may be null) is told of each retry.
    static result<oci_pusher> open(const std::string& base, const std::string& product, const transfer_options& options,
                                   const source_policy& sources = {}, run_observer* observer = nullptr);
    // HEAD of the blob.
    result<bool> has_blob(const std::string& sha256, std::uint64_t size) override;
    // Uploads a blob (POST, then PUT ?digest=) from a file or from memory.
    result<void> push_blob(const std::string& sha256, const std::filesystem::path& file) override;
    result<void> push_blob(const std::string& sha256, std::string_view bytes) override;
    // Asks the registry to mount a blob from another repository of it
    // (`from`: "<namespace>/<product>"; distribution spec: POST
    // blobs/uploads/?mount=&from=): true when it answered 201 (mounted);
    // false otherwise, e.g. 202, an upload session that is cancelled
    // (DELETE) since the caller uploads on its own, or a request that still
    // failed after its retries (the upload then says why). Outcomes: ok.
    result<bool> mount_blob(const std::string& sha256, const std::string& from) override;
    // HEAD of the tag's manifest.
    result<std::optional<std::string>> tag_digest(const std::string& tag) override;
    // PUT /v2/<repo>/manifests/<tag>.
    result<void> put_manifest(const std::string& tag, const std::string& json, std::string_view media_type) override;
    const oci_url& where() const { return url_; }

private:
    oci_pusher(source target, oci_url url, transfer_options options, source_run run)
        : target_(std::move(target)), url_(std::move(url)), options_(std::move(options)), run_(std::move(run)) {}
    result<std::vector<std::string>> headers(transfer_failure_info* failure);
    result<void> upload(const std::string& sha256, const std::filesystem::path& file, std::string_view bytes);
    // Runs `op` (one attempt, filling the failure as send_request does) on
    // `url` under the run's policy. Outcomes: ok | op's last error.
    result<void> retried(const std::string& url, const std::function<result<void>(transfer_failure_info&)>& op);
    source target_;  // the registry as a source: its credentials and the origin its tokens are kept by
    oci_url url_;
    transfer_options options_;
    source_run run_;
};

// The image manifest of a release: config "{}", the JSON layer first, then
// the archives (and recompressed copies), then the recompressed sidecar and
// its signature when given. standard_types: only the image-spec's own media types (for
// registries that refuse others).
struct oci_release_layer {
    std::string sha256, title;
    std::uint64_t size = 0;
};
std::string oci_release_manifest(const oci_release_layer& json_layer, const std::vector<oci_release_layer>& archives,
                                 const std::string& label, bool standard_types,
                                 const std::optional<oci_release_layer>& recompressed = std::nullopt,
                                 const std::optional<oci_release_layer>& signature = std::nullopt);
inline constexpr std::string_view oci_manifest_media_type = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view oci_empty_config = "{}";

// A blob digest "sha256:<64 lower-case hex>".
bool valid_oci_digest(std::string_view digest);
// A tag: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}.
bool valid_oci_tag(std::string_view tag);

}  // namespace redist
