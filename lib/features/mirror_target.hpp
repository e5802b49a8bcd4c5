// features/mirror_target.hpp (internal) — what the mirror loop (mirror.cpp)
// and the targets it writes to (mirror_targets.cpp: a directory with the
// upstream layout, a registry or an image layout) share: the target
// interface, the one verified download both use, the claims of the
// manifests already in a directory mirror, and the recompressed copies'
// paths and sidecar. The loop never looks at the kind of target again after
// open_target() chose it.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "archive/signing.hpp"
#include "model/urls.hpp"
#include "redist/error.hpp"
#include "redist/manifest.hpp"
#include "redist/mirror.hpp"
#include "redist/signing.hpp"
#include "support/posix_file.hpp"

namespace redist::mirroring {

// Creates the directories above `path`. Outcomes: ok | filesystem.
result<void> create_parent(const std::filesystem::path& path);

// ---- downloads -----------------------------------------------------------------------------

// One artifact to put into the mirror.
struct download_target {
    std::vector<std::string> urls;  // in order: the cache's blob, mirrors, upstream
    std::filesystem::path final_path;
    std::string label;
    std::string relative_path;
    mirror_status status = mirror_status::downloaded;
    std::uint64_t size = 0;
    std::string sha256;
};

// Downloads one artifact into place through the one source driver and
// artifact stream: verified (size and SHA-256) while the bytes stream into
// "<file>.part.<pid>", resumed across retries, sources and runs, renamed
// into place only once verified. Outcomes: ok | not_found | network |
// integrity | filesystem | cancelled.
result<void> download_verified(const download_target& t, const mirror_request& request,
                               const std::atomic<bool>* cancel);

// ---- claims: what the manifests already in a directory mirror list -------------------------

// What a manifest in the mirror says one path holds.
struct claim {
    std::string manifest;  // "redistrib_<label>.json"
    std::string sha256;
    std::uint64_t size = 0;
};
// The file an artifact of `product` is in the mirror, relative to its base
// (mirror_artifact_path) -> the manifests that list it.
using claim_map = std::map<std::string, std::vector<claim>>;

// Records that `manifest_name` of `product` lists each of `m`'s artifacts.
void add_claims(claim_map& claims, const std::string& product, const std::string& manifest_name, const manifest& m);

// Every artifact path the manifests already in the mirror list, those of
// every product (NVIDIA's bin-archive pool is shared by all). A manifest
// there that cannot be read or parsed stops the run: without it, the mirror
// cannot tell which files are that release's. Outcomes: ok | bad_manifest |
// filesystem.
result<claim_map> read_claims(const std::filesystem::path& root);

// Refuses a picked artifact whose path is not an archive's, or that another
// release's manifest in the mirror lists with other content (a path listed
// only by this release's own manifest may be replaced: that is a repair).
// Outcomes: ok | bad_manifest (source = this release's manifest URL,
// json_path = the artifact's relative_path).
result<void> check_claims(const resolved_release& release, const std::vector<artifact>& picks, const claim_map& claims);

// ---- targets -------------------------------------------------------------------------------

// Where a mirror keeps releases: a directory with the upstream layout, or
// a registry. One mirror loop (mirror_one, mirror_files, mirror_file) runs
// over either.
class mirror_target {
public:
    mirror_target() = default;
    mirror_target(const mirror_target&) = delete;
    mirror_target& operator=(const mirror_target&) = delete;
    virtual ~mirror_target() = default;
    // Refuses picks that would replace what the target keeps for another
    // release. Outcomes: ok | bad_manifest.
    virtual result<void> admit(const resolved_release& release, const std::vector<artifact>& picks) = 0;
    // Where the artifact is reported to be (a path in a directory; empty for a registry).
    virtual std::filesystem::path path_of(const artifact& a) const = 0;
    // nullopt: absent; true: present with the right size and SHA-256; false: present, wrong.
    virtual result<std::optional<bool>> present(const artifact& a) = 0;
    // Downloads the artifact, verified, and puts it in place. Outcomes as download_verified.
    virtual result<void> store(download_target& t, const mirror_request& request, const std::atomic<bool>* cancel) = 0;
    // After every artifact is in place: the release's sidecar when it has
    // copies (out.copies), then its manifest (and the listing), so that the
    // release and its copies are advertised only when complete.
    // Outcomes: ok | filesystem | network | bad_manifest.
    virtual result<void> publish(const resolved_release& release, const std::vector<artifact>& picks,
                                 mirrored_release& out) = 0;

    // ---- recompressed copies (the copy is an `artifact` named by its relative_path, size and sha256)
    // The sidecars the target holds now, each with its signature ("" when
    // it has none), whose records may be reused when signed by the run's own
    // key (a reused copy is then checked by present()); unreadable ones are
    // left out.
    struct found_sidecar {
        std::string record, signature;
    };
    virtual std::vector<found_sidecar> sidecars(const std::string& label) = 0;
    // A verified local file of the original `t` names, to make the copy from:
    // the one in place, or one fetched into private scratch (`temporary`: the
    // caller removes it). Outcomes as download_verified.
    struct local_file {
        std::filesystem::path path;
        bool temporary = false;
    };
    virtual result<local_file> local_original(download_target& t, const mirror_request& request,
                                              const std::atomic<bool>* cancel) = 0;
    // Where a new copy is written (through a .part file renamed there):
    // its final place, or private scratch.
    virtual std::filesystem::path staging_path(const std::string& relative_path) = 0;
    // Makes the complete copy at `staged` available as `copy` (a registry
    // uploads it, then removes the file). Outcomes: ok | network | filesystem.
    virtual result<void> place(const artifact& copy, const std::filesystem::path& staged) = 0;
    // Whether another release in the target lists `relative_path` as an
    // artifact (then no copy is written there).
    virtual bool claimed_by_others(const std::string& /*relative_path*/, const std::string& /*label*/) const {
        return false;
    }
    // Whether present() found the blob only by mounting it from another
    // repository (a registry).
    virtual bool mounted(const std::string& /*sha256*/) const { return false; }
    // The artifacts of `release` beyond `picks` that the target already
    // holds, verified, and that its listing of the release must keep (a
    // tag lists its layers; a directory's manifest lists everything anyway:
    // none). Outcomes: ok | network | filesystem.
    virtual result<std::vector<artifact>> earlier_artifacts(const resolved_release& /*release*/,
                                                            const std::vector<artifact>& /*picks*/) {
        return std::vector<artifact>{};
    }

    // The operator's key (--sign-key) that signs every sidecar, or null:
    // sidecars are then unsigned, and no client installs their copies.
    const signing_key* signer = nullptr;
};

// A run directory for a mirror's scratch (claim_scratch_dir): in the
// scratch/ of the request's scratch_cache_dir, else in $TMPDIR (named
// "redist-<prefix>..."). A killed run's is adopted or removed by the next
// run with the same prefix, and by `cache clean`. Outcomes: ok | filesystem.
result<scratch_dir> claim_mirror_scratch(const mirror_request& request, const std::string& prefix);

// The target the request names, and where the report says it is.
result<std::unique_ptr<mirror_target>> open_target(const mirror_request& request, mirror_report& report);

// A directory target's listing: (re)writes <redist_dir>/index.html listing
// every redistrib_*.json and every sub-directory present, sorted, as
// NVIDIA's listing does (<a href='name'>name</a><br>), atomically.
// Outcomes: ok | filesystem.
result<void> write_mirror_index(const std::filesystem::path& redist_dir);

// ---- recompressed copies -----------------------------------------------------------------

// The copy's path (recompressed_copy_path: the original's with .tar.xz/.txz
// replaced by .tar.zst); nullopt for an original of another format, or when
// the result is not a path the mirror may write.
std::optional<std::string> copy_path_of(std::string_view rel);

// The sidecar of a release (recompressed.hpp; the client reads it with the
// same model code) and, with a key, its signature.
struct sidecar_documents {
    std::string record;
    std::optional<std::string> signature;
};
result<sidecar_documents> make_sidecar(const resolved_release& release, const std::vector<mirrored_copy>& copies,
                                       const signing_key* signer);

}  // namespace redist::mirroring
