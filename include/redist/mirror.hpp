// redist/mirror.hpp — copying releases into a local mirror (the cache warmer).
//
// The mirror has the upstream layout, so any tool can use it as --base-url
// (over HTTP behind any static file server, or as file://):
//   <dest>/<product>/redist/redistrib_<label>.json   the manifest, byte for byte as fetched
//   <dest>/<product>/redist/<relative_path>          each selected artifact, verified
//   <dest>/<product>/redist/index.html               NVIDIA-style listing of every
//                                                    redistrib_*.json present
// With recompress = zstd, also (docs/fleet.md; the sidecar's format is the
// one the client reads: one entry per original sha256):
//   <dest>/<product>/redist/<path>.tar.zst           a multi-frame zstd copy of the tar
//                                                    stream of each selected .tar.xz/.txz
//   <dest>/<product>/redist/recompressed_<label>.json the sidecar: per original
//                                                    (by its sha256) the copy's path,
//                                                    sha256 and size, and the tar's
//                                                    sha256 and size
// A registry gets the copies as blobs and the sidecar as one more layer of
// the tag's image manifest (title recompressed_<label>.json).
//
// Guarantees:
//   - Nothing unverified sits under a final name: every artifact is written to
//     "<file>.part.<pid>", checked (size + SHA-256, hashed while streaming),
//     fsync'ed, then renamed. A download interrupted by a network failure
//     resumes (Range) on the next attempt or source; its .part file stays
//     when the run fails, and the next run adopts the .part file of a dead
//     process and resumes it (the hash decides at the end).
//   - A release's manifest is written only after all of its selected
//     artifacts are in place, and index.html is rewritten after each
//     manifest: the mirror never advertises a release whose selected
//     artifacts are missing.
//   - Incremental: a file already present with the right size and SHA-256 is
//     not fetched again ("up to date"); one that differs is replaced, unless
//     another release's manifest in the mirror lists that path with other
//     content: then the release is refused and the file stays.
//   - Copies are made from the verified original, written to a .part file
//     and renamed (a registry: uploaded by digest) before the sidecar that
//     lists them, and the sidecar is written before the manifest: the mirror
//     never advertises a copy that is not in place. A copy that an existing
//     sidecar records and that is present with its size and SHA-256 is not
//     made again (recompressing costs about a minute per 300 MiB). A copy is
//     not made when its path is an artifact path of a manifest.
//   - Mirroring adds, never replaces: in a registry or an image layout, a
//     release's tag lists what this run selected plus every artifact of the
//     release that the store already holds (an earlier run's other
//     platforms, variants or components; blobs are named by NVIDIA's
//     SHA-256), and the sidecar keeps the copies of those that the run's
//     own key signed before. A directory mirror keeps every file anyway.
//   - One release never overwrites another's files: an artifact's path must
//     be an archive's (.tar.xz, .txz, .tar.gz, .tgz, .tar.zst, .zip), and no
//     segment of it may be index.html, a redistrib_*.json name or a temp
//     name (".part.", ".tmp.").
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/install.hpp"
#include "redist/transfer.hpp"

namespace redist {
REDIST_API_BEGIN

enum class mirror_status : std::uint8_t {
    downloaded,  // was absent, now present
    replaced,    // was present with the wrong size or SHA-256 (or other bytes), now correct
    up_to_date,  // was present and correct: not fetched
    mounted,     // a registry: was absent, mounted from another repository of the registry (mount_from)
};
// "downloaded", "replaced", "up_to_date", "mounted".
const char* to_string(mirror_status status) noexcept;

enum class mirror_step : std::uint8_t {
    resolving,      // fetching a release's manifest (label = the version spec)
    checking,       // hashing a file already present
    downloading,    // bytes_done/bytes_total advance
    recompressing,  // making the zstd copy (relative_path = the copy's)
    finished,       // the file is in place: see status
};

struct mirror_event {
    std::string label;          // release label (the spec while resolving)
    std::string relative_path;  // artifact; "redistrib_<label>.json" for the manifest; empty while resolving
    mirror_step step = mirror_step::resolving;
    mirror_status status = mirror_status::downloaded;  // meaningful when step == finished
    std::uint64_t bytes_done = 0;
    std::uint64_t bytes_total = 0;
    bool copy = false;  // relative_path is a recompressed copy (made, not downloaded)
};
// Reported through run_observer::on_mirror. With jobs > 1 the events of
// several artifacts interleave and come from worker threads.

enum class recompression : std::uint8_t {
    none,
    zstd,  // a zstd copy beside each .tar.xz/.txz original (see above)
};

// What a lock pins of one release (`redist mirror --from-lock`): exactly
// these artifacts of the release whose manifest has this SHA-256; the
// request's platforms, CUDA variants and components are not used then.
struct mirror_pin {
    std::string manifest_sha256;
    struct pinned_artifact {
        std::string relative_path, sha256;
        std::uint64_t size = 0;
    };
    std::vector<pinned_artifact> artifacts;
};

struct mirror_request {
    std::filesystem::path dest;           // the mirror root (created if needed), or a registry:
                                          // oci://HOST[:PORT]/NAMESPACE, oci+http://... (see urls.hpp)
    std::string product;                  // "cudnn": 1-128 of [A-Za-z0-9._+-], not "." or ".."
    std::vector<std::string> versions;    // specs, each "9.27.0", "9.27", "9" or "latest"
    std::vector<std::string> platforms;   // at least one, e.g. "linux-x86_64", "linux-sbsa"
    std::vector<int> cuda_majors;         // empty: every variant offered; else only these
                                          // (artifacts without a variant are always taken)
    std::vector<std::string> components;  // empty: every component offered on the platforms
    std::string base_url;                 // upstream <base>; see urls.hpp
    transfer_options transfer;
    // With a cache_dir: archives already verified in that cache (see
    // cache.hpp) are copied from it instead of downloaded (re-verified as
    // they stream). With offline too (--from-cache), nothing but the cache and
    // file:// sources is used.
    // Retries (attempts_per_source, backoff with jitter, Retry-After) and
    // mirrors tried before the base for artifacts (the manifest always comes
    // from the base), as for fetch: the same source driver.
    source_policy sources;
    // The cache whose scratch/ holds a push to a registry's downloads until
    // they are uploaded (a killed run's are resumed by the next run into the
    // same registry); none: $TMPDIR. Independent of sources.cache_dir (which
    // makes the cache a source).
    std::optional<std::filesystem::path> scratch_cache_dir;
    recompression recompress = recompression::none;
    // With recompress: the operator's Ed25519 private key (PEM, signing.hpp)
    // that signs each release's sidecar. Clients install a copy only under a
    // signature by a key they trust; without one, copies are made and
    // recorded, but no client uses them. Read before anything is fetched.
    std::optional<std::filesystem::path> sign_key;
    // A registry target: other products under the same namespace whose
    // repositories a missing blob is mounted from (no download, no upload)
    // before it is fetched. Products as `product` (plain names).
    std::vector<std::string> mount_from;
    unsigned jobs = 1;                 // artifacts in flight at once (at least 1)
    run_observer* observer = nullptr;  // on_mirror steps, retries, source changes; not owned
    // Set: `versions` is the one pinned label, and the pin decides what is mirrored.
    std::optional<mirror_pin> pin;
};

struct mirrored_file {
    std::string component;
    std::string platform;
    std::optional<std::string> variant;
    std::string relative_path;
    std::filesystem::path path;  // where it is in the mirror
    std::string url;             // upstream URL (sanitized)
    std::string sha256;
    std::uint64_t size = 0;
    mirror_status status = mirror_status::downloaded;
};

// One recompressed copy, as its sidecar records it.
struct mirrored_copy {
    std::string original_sha256;      // the manifest's sha256 of the original
    std::uint64_t original_size = 0;  // and its size
    std::string relative_path;        // the original's with .tar.zst for .tar.xz/.txz
    std::filesystem::path path;       // where it is in the mirror (empty for a registry)
    std::string compression = "zstd";
    std::string sha256;  // of the copy
    std::uint64_t size = 0;
    std::string tar_sha256;  // of the decoded tar stream
    std::uint64_t tar_size = 0;
    std::uint64_t tar_piece_bytes = 0;  // its hash list (recompressed.hpp); 0 and "": none recorded
    std::string tar_list_sha256;
    std::string tree_sha256;                           // of the tree it unpacks to (recompressed_copy::tree_sha256)
    mirror_status status = mirror_status::downloaded;  // downloaded = made in this run
};

struct mirrored_release {
    std::string label;
    std::string manifest_url;             // upstream (sanitized)
    std::filesystem::path manifest_path;  // in the mirror
    std::string manifest_sha256;
    mirror_status manifest_status = mirror_status::downloaded;
    std::vector<mirrored_file> files;    // manifest order; a path shared by two
                                         // selections appears once
    std::vector<mirrored_copy> copies;   // with recompress: one per .tar.xz/.txz original (sha256), in order
    std::filesystem::path sidecar_path;  // recompressed_<label>.json in the mirror (empty: none, or a registry)
    std::string signed_by;               // the sidecar's signer (signing.hpp fingerprint); "": unsigned or none
    // Requested platforms the release has nothing for: it is mirrored for
    // the others (a release with none of them fails, not_found).
    std::vector<std::string> missing_platforms;
    // Artifacts of the release that earlier runs put in the target and that
    // stay listed in its tag (a registry or an image layout): mirroring
    // adds, it never replaces what a tag holds.
    std::size_t kept_from_earlier = 0;
};

struct mirror_report {
    std::string product;
    std::filesystem::path redist_dir;        // <dest>/<product>/redist
    std::filesystem::path index_path;        // <redist_dir>/index.html
    std::vector<mirrored_release> releases;  // in request order
    std::uint64_t bytes_downloaded = 0;      // artifact bytes fetched in this run
    std::size_t copies_made = 0;             // recompressed copies made in this run
};

// Mirrors each requested release, in order: resolve the release, select the
// artifacts (every requested platform x CUDA variant; artifacts without a
// variant are taken whatever --cuda says), fetch what is missing or wrong,
// then write the manifest and index.html. Releases finished before a failure
// stay mirrored (complete and listed); the failing one is not listed. A
// release that lacks some of the requested platforms is mirrored for the
// others (mirrored_release::missing_platforms says which).
// Outcomes:
//   ok            every selected file is in place and verified
//   usage         no versions or platforms, or a product name that is not a
//                 plain directory name
//   not_found     version, manifest or artifact missing (404); a requested
//                 component or CUDA variant the release does not offer, or
//                 none of the requested platforms (the message lists what it
//                 offers); a pinned artifact the manifest does not list
//   integrity     (also) the manifest is not the one a pin names
//   bad_manifest  malformed manifest or index; an unsafe release label; one
//                 relative_path with two different hashes; a relative_path
//                 that is not an archive's or names a file the mirror keeps
//                 for itself, or that another release's manifest in the
//                 mirror lists with other content (source = the manifest URL,
//                 json_path = "<component>.<platform>[.<variant>].relative_path");
//                 a manifest already in the mirror that does not parse
//   integrity     an artifact's size or SHA-256 differs from the manifest
//                 (url, path, expected and actual set); nothing is left under
//                 the final name
//   network       transport failures (after sources.attempts_per_source for
//                 transient ones, on every source)
//   filesystem    cannot create, write or rename under dest
//   bad_archive   with recompress: an original (verified against its
//                 manifest) that is not a valid xz stream
result<mirror_report> mirror_releases(const mirror_request& request);

REDIST_API_END
}  // namespace redist
