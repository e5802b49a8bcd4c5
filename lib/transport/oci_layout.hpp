// Internal: OCI image layouts on disk (oci-layout:DIR) as sources and mirror
// targets, for sites without a registry or a network.
//
// oci-layout:DIR is a base like oci://HOST/NAMESPACE: product P is the image
// layout DIR/P/ (OCI image-spec, image-layout.md):
//   DIR/P/oci-layout          {"imageLayoutVersion": "1.0.0"}
//   DIR/P/index.json          an image index: one image manifest per release,
//                             its "org.opencontainers.image.ref.name"
//                             annotation the release label
//   DIR/P/blobs/sha256/<hex>  every blob: the image manifests, the config
//                             "{}", the redistrib JSON, the archives
// An image manifest is oci_release_manifest's, the one a registry gets.
// URLs (urls.hpp): "oci-layout:/DIR/P/redist/" lists the labels,
// ".../P/redist/redistrib_<label>.json" is the JSON layer of that label,
// ".../P/blobs/sha256:<hex>" a blob.
//
// A layout is a source like a registry: it names bytes, it never vouches for
// them. index.json is read with a size cap and the strict JSON reader, the
// image manifest and the JSON layer are checked against their digests, an
// archive against the redistrib JSON. No symlink inside DIR is followed:
// DIR/P, blobs, blobs/sha256 and every file are opened with openat(2) and
// O_NOFOLLOW relative to their parent (the layout may sit on shared storage).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/transfer.hpp"
#include "support/posix_file.hpp"
#include "support/unique_fd.hpp"
#include "transport/oci.hpp"

namespace redist {

// One manifest of index.json.
struct oci_index_entry {
    std::string media_type, digest, ref_name;
    std::uint64_t size = 0;
    // The entry's JSON as read (empty for a new one): written back as it is
    // while the entry is kept, so that what other tools recorded
    // (platform, artifactType, their annotations) survives a rewrite.
    std::string raw{};
};
// index.json: {"schemaVersion": 2, "manifests": [{mediaType, digest, size,
// annotations: {"org.opencontainers.image.ref.name": …}}, …]}; every digest
// "sha256:<64 lower-case hex>". Fuzzed (tests/fuzz/oci_fuzz.cpp).
// `annotations` (if given) gets the index's own annotations as JSON ("" when
// none). Outcomes: ok | bad_manifest.
result<std::vector<oci_index_entry>> parse_oci_index(std::string_view body, std::string_view source,
                                                     std::string* annotations = nullptr);
// The index.json that lists `manifests` (in that order; a read entry as it
// was read), with the index's own `annotations` (JSON) when not empty.
std::string oci_index_document(const std::vector<oci_index_entry>& manifests, std::string_view annotations = {});

// download() of an oci-layout: URL (oci_download calls it): a blob with
// Range as asked, or the redistrib JSON of a label, checked against its
// digests before any byte reaches the callbacks. Same outcomes as download().
result<void> oci_layout_download(const std::string& url, const transfer_options& options, download_callbacks& callbacks,
                                 std::uint64_t resume_from, std::optional<std::uint64_t> range_last,
                                 transfer_failure_info* failure);

// The labels of <base>/<product>: the ref.name annotations of index.json
// that are valid tags. Outcomes: ok | not_found | network | bad_manifest.
result<std::vector<std::string>> oci_layout_list_tags(const std::string& base, const std::string& product);

// Writes releases into the layout <base>/<product>/ (created if needed).
// Every file is written under a temporary name and renamed into place
// (atomic_write, or the verified download's rename for archives), through
// directory descriptors opened without following symlinks; index.json is
// rewritten last, so a reader never sees a manifest whose blobs are missing.
class oci_layout_writer final : public oci_store {
public:
    // Outcomes: ok | usage (a bad URL or product) | filesystem (a symlink
    // or a non-directory where a layout directory belongs).
    static result<std::unique_ptr<oci_layout_writer>> open(const std::string& base, const std::string& product);
    ~oci_layout_writer() override;  // neither copied nor moved (oci_store; the destructor releases scratch())
    // Present as a regular file (not a symlink) with this size and SHA-256.
    result<bool> has_blob(const std::string& sha256, std::uint64_t size) override;
    // Moves the verified file (in scratch()) into blobs/sha256/.
    result<void> push_blob(const std::string& sha256, const std::filesystem::path& file) override;
    result<void> push_blob(const std::string& sha256, std::string_view bytes) override;
    // From index.json, when the manifest blob it names is present and intact.
    result<std::optional<std::string>> tag_digest(const std::string& tag) override;
    // The manifest blob, then index.json with this tag's entry replaced.
    result<void> put_manifest(const std::string& tag, const std::string& json, std::string_view media_type) override;
    // The run's directory in the layout (same filesystem as blobs/) where
    // verified downloads wait for push_blob: DIR/P/.redist-scratch-<random>,
    // a killed run's adopted (claim_scratch_dir: its partial downloads are
    // resumed). The destructor removes it, or keeps only the partial
    // downloads of a run that failed part-way.
    const std::filesystem::path& scratch() const { return scratch_.path(); }
    // DIR/P, as reports name it.
    const std::filesystem::path& where() const { return dir_; }

private:
    oci_layout_writer() = default;
    result<std::vector<oci_index_entry>> read_index(std::string* annotations = nullptr);
    // An exclusive flock on the product directory, for the index rewrite.
    // Outcomes: ok | filesystem.
    result<unique_fd> lock_index();
    std::filesystem::path dir_;
    scratch_dir scratch_;
    unique_fd dir_fd_, blobs_fd_;
};

}  // namespace redist
