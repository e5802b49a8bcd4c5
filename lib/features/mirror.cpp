// mirror.cpp — copies releases into a local mirror with the upstream layout.
//
// Hazards that shape this file:
// - A mirror is served to other machines: a file under its final name must
//   be complete and verified. Everything goes through "<file>.part.<pid>",
//   is hashed while it streams, fsync'ed, then renamed (atomic on one
//   filesystem). A crash leaves at most a .part file, swept by the next run.
// - The manifest decides what "complete" means for a release, so it is
//   written last; index.html (what `redist versions` reads) is rewritten only
//   after a manifest lands.
// - Release labels and the product name become file names: they are checked
//   to be plain names, so a hostile manifest cannot write outside the mirror.
//   relative_path values are already validated by the manifest parser; a
//   directory mirror names a file by mirror_artifact_path() (urls.hpp), the
//   path relative to the mirror's base ("../../../pool/..." of NVIDIA's
//   bin-archive is "pool/..."), joined under it by confined_join.
// - One directory holds every release, so one release's artifact must never
//   replace a file the mirror keeps for something else: an artifact's path
//   must be an archive's (mirror_path_problem), and a path that another
//   release's manifest in the mirror lists with other content is refused,
//   never overwritten (check_claims).
// - With --recompress, a copy is advertised by the release's sidecar
//   (recompressed_<label>.json), written after every copy is in place and
//   before the manifest; the copy is made from the verified original only.
//   With --sign-key the sidecar is signed (recompressed_<label>.json.sig):
//   the signature is what clients trust, so a record is signed only when
//   this run made its copies from verified originals, or when it was signed
//   by the same key before. A record merely found in the target (planted by
//   anyone who can write there) is never reused, let alone signed.
#include "redist/mirror.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

#include "archive/recompress.hpp"
#include "archive/sha256.hpp"
#include "redist/cache.hpp"
#include "redist/install.hpp"
#include "redist/recompressed.hpp"
#include "redist/select.hpp"
#include "redist/signing.hpp"
#include "redist/urls.hpp"
#include "support/budget.hpp"
#include "support/parallel.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"
#include "transport/oci.hpp"
#include "transport/oci_layout.hpp"
#include "transport/sources.hpp"

namespace redist {

namespace fs = std::filesystem;

const char* to_string(mirror_status status) noexcept {
    switch (status) {
        case mirror_status::downloaded: return "downloaded";
        case mirror_status::replaced: return "replaced";
        case mirror_status::up_to_date: return "up_to_date";
        case mirror_status::mounted: return "mounted";
    }
    return "unknown";
}

namespace {

// Creates the directories above `path`. Outcomes: ok | filesystem.
result<void> create_parent(const fs::path& path) {
    std::error_code ec;
    create_directories_masked(path.parent_path(), ec);
    if (ec) return errno_error("cannot create directory", path.parent_path(), ec.value());
    return {};
}

// Writes `bytes` to `final_path` atomically (temp file, fsync, rename).
result<void> write_file_atomically(const fs::path& final_path, std::string_view bytes) {
    REDIST_TRY_VOID(create_parent(final_path));
    return atomic_write(final_path, bytes, durability::contents);
}

// What is at `path` compared with the expected content: nullopt if absent
// (or not a regular file), else whether size and SHA-256 match.
std::optional<bool> existing_matches(const fs::path& path, std::uint64_t size, const std::string& sha256) {
    std::error_code ec;
    const auto st = fs::symlink_status(path, ec);
    if (ec || !fs::is_regular_file(st)) return std::nullopt;
    if (fs::file_size(path, ec) != size || ec) return false;
    auto digest = sha256_file(path);
    return digest.ok() && *digest == sha256;
}

// Writes `bytes` to `path` unless it holds them already.
result<void> write_if_changed(const fs::path& path, std::string_view bytes) {
    const auto same = existing_matches(path, bytes.size(), sha256_hex(bytes));
    return same && *same ? result<void>() : write_file_atomically(path, bytes);
}

void emit(const mirror_request& request, const mirror_event& event) {
    if (request.observer) request.observer->on_mirror(event);
}

// One artifact to put into the mirror.
struct download_target {
    std::vector<std::string> urls;  // in order: the cache's blob, mirrors, upstream
    fs::path final_path;
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
                               const std::atomic<bool>* cancel) {
    REDIST_TRY_VOID(create_parent(t.final_path));
    file_sink sink(t.final_path);
    // The machine's thread budget, shared by the artifacts in flight.
    const unsigned threads = run_budget::machine_limits().threads / std::max(1u, request.jobs);
    artifact_stream stream({t.size, t.sha256}, sink, threads);
    stream.set_cancel(cancel);
    stream.set_progress([&](std::uint64_t done) {
        emit(request, {t.label, t.relative_path, mirror_step::downloading, t.status, done, t.size});
    });
    REDIST_TRY_VOID(stream.resume_or_restart());
    source_run run(request.sources);
    run.observer = request.observer;
    run.component = t.relative_path;
    // One stream, no spool: the sink's file holds the bytes, and a retry
    // or the next source continues after them.
    segment_options one_stream;
    one_stream.connections = 1;
    const spool_location no_spool;
    auto fetched = try_sources(t.urls, run, [&](source_attempt& at) {
        at.retried_inside = true;
        return stream.fetch_from(at.url, request.transfer, one_stream, no_spool, segment_retries(run, at.url),
                                 at.failure);
    });
    if (fetched.ok()) {
        auto committed = sink.commit();
        if (!committed.ok()) sink.discard();
        return committed;
    }
    error e = std::move(fetched).error_value();
    // A network failure part-way keeps the .part file: the next run adopts and resumes it.
    if (!(e.code == error_code::network && stream.received() > 0 && stream.received() < t.size)) sink.discard();
    if (e.code == error_code::integrity && e.path.empty()) e.path = t.final_path.string();
    return e;
}

constexpr std::size_t max_mirrored_manifest_bytes = 64u << 20;  // as for a fetched manifest

bool is_manifest_name(std::string_view name) {
    return name.size() > 15 && name.starts_with("redistrib_") && name.ends_with(".json");
}

std::string artifact_json_path(const artifact& a) {
    return a.component + "." + a.platform + (a.variant ? "." + *a.variant : "");
}

// Why `rel` cannot name an artifact in the mirror, or nullptr. An artifact is
// an archive (a suffix fetch can unpack), and no segment of its path is a
// name the mirror writes for itself: a manifest (redistrib_*.json), the
// listing (index.html) or a temporary file (".part.", ".tmp."). Otherwise a
// release could replace another release's manifest, or block one with a
// directory.
const char* mirror_path_problem(std::string_view rel) {
    if (archive_format_from_path(rel) == archive_format::unknown)
        return "is not an archive path (.tar.xz, .txz, .tar.gz, .tgz, .tar.zst or .zip)";
    std::size_t start = 0;
    while (start <= rel.size()) {
        const auto end = std::min(rel.find('/', start), rel.size());
        const std::string_view segment = rel.substr(start, end - start);
        if (segment == "index.html" || is_manifest_name(segment) ||
            (segment.starts_with("recompressed_") && (segment.ends_with(".json") || segment.ends_with(".json.sig"))))
            return "names a file the mirror keeps for itself (index.html, a redistrib_*.json manifest or a "
                   "recompressed_*.json sidecar or its signature)";
        if (segment.find(".part.") != std::string_view::npos || is_atomic_write_temp(segment))
            return "names a temporary file (.part. or .tmp.)";
        start = end + 1;
    }
    return nullptr;
}

// What a manifest in the mirror says one path holds.
struct claim {
    std::string manifest;  // "redistrib_<label>.json"
    std::string sha256;
    std::uint64_t size = 0;
};
// The file an artifact of `product` is in the mirror, relative to its base
// (mirror_artifact_path) -> the manifests that list it.
using claim_map = std::map<std::string, std::vector<claim>>;

void add_claims(claim_map& claims, const std::string& product, const std::string& manifest_name, const manifest& m) {
    for (const auto& c : m.components)
        for (const auto& a : c.artifacts)
            claims[mirror_artifact_path(product, a.relative_path)].push_back(
                {product + "/redist/" + manifest_name, a.sha256, a.size});
}

// Every artifact path the manifests already in the mirror list, those of
// every product (NVIDIA's bin-archive pool is shared by all). A manifest
// there that cannot be read or parsed stops the run: without it, the mirror
// cannot tell which files are that release's. Outcomes: ok | bad_manifest |
// filesystem.
result<claim_map> read_claims(const fs::path& root) {
    claim_map claims;
    std::error_code ec;
    for (const auto& product_dir : fs::directory_iterator(root, ec)) {
        const std::string product = product_dir.path().filename().string();
        std::error_code type_ec;
        if (name_problem(product) || product_dir.is_symlink(type_ec) || !product_dir.is_directory(type_ec)) continue;
        const fs::path redist_dir = product_dir.path() / "redist";
        if (fs::is_symlink(redist_dir, type_ec) || !fs::is_directory(redist_dir, type_ec)) continue;
        for (const auto& entry : fs::directory_iterator(redist_dir, ec)) {
            const std::string name = entry.path().filename().string();
            if (!is_manifest_name(name) || !entry.is_regular_file(type_ec) || entry.is_symlink(type_ec)) continue;
            REDIST_TRY(const std::string text, read_file(entry.path(), max_mirrored_manifest_bytes));
            REDIST_TRY(const manifest m, parse_manifest(text, entry.path().string()));
            add_claims(claims, product, name, m);
        }
        if (ec) return errno_error("cannot list", redist_dir, ec.value());
    }
    if (ec) return errno_error("cannot list", root, ec.value());
    return claims;
}

// Refuses a picked artifact whose path is not an archive's, or that another
// release's manifest in the mirror lists with other content (a path listed
// only by this release's own manifest may be replaced: that is a repair).
// Outcomes: ok | bad_manifest (source = this release's manifest URL,
// json_path = the artifact's relative_path).
result<void> check_claims(const resolved_release& release, const std::vector<artifact>& picks,
                          const claim_map& claims) {
    const std::string own = release.product + "/redist/redistrib_" + release.label + ".json";
    for (const artifact& a : picks) {
        auto refuse = [&](const std::string& why) {
            return make_error(error_code::bad_manifest, "relative_path '" + a.relative_path + "' " + why)
                .with_source(sanitize_url(release.manifest_url))
                .with_json_path(artifact_json_path(a) + ".relative_path");
        };
        if (const char* problem = mirror_path_problem(a.relative_path)) return refuse(problem);
        const auto it = claims.find(mirror_artifact_path(release.product, a.relative_path));
        if (it == claims.end()) continue;
        for (const auto& c : it->second) {
            if (c.manifest == own || (c.sha256 == a.sha256 && c.size == a.size)) continue;
            return refuse("is a file of " + c.manifest + " in the mirror with other content (sha256 " + c.sha256 +
                          "); refusing to overwrite it");
        }
    }
    return {};
}

// The artifacts of one release that the request selects, deduplicated by
// relative_path. Outcomes: ok | not_found | bad_manifest.
// A lock's pins: exactly the pinned artifacts, each as the manifest lists it.
result<std::vector<artifact>> select_pinned(const resolved_release& release, const mirror_pin& pin) {
    std::vector<artifact> out;
    for (const auto& p : pin.artifacts) {
        const artifact* found = nullptr;
        for (const auto& c : release.parsed.components)
            for (const auto& a : c.artifacts)
                if (a.relative_path == p.relative_path && a.sha256 == p.sha256 && a.size == p.size) found = &a;
        if (!found)
            return make_error(error_code::not_found, release.product + " " + release.label +
                                                         ": the lock pins an artifact the manifest does not list: " +
                                                         p.relative_path + " (sha256 " + p.sha256 + ")")
                .with_source(sanitize_url(release.manifest_url));
        if (std::none_of(out.begin(), out.end(), [&](const artifact& a) { return a.relative_path == p.relative_path; }))
            out.push_back(*found);
    }
    return out;
}

// What to mirror of a release: every artifact of the requested components
// on the requested platforms and CUDA variants. A platform the release has
// nothing for goes to `missing_platforms` (none at all: not_found).
result<std::vector<artifact>> select_for_mirror(const resolved_release& release, const mirror_request& request,
                                                std::vector<std::string>& missing_platforms) {
    if (request.pin) return select_pinned(release, *request.pin);
    const manifest& m = release.parsed;
    const std::string what = release.product + " " + release.label;
    const std::set<std::string> wanted(request.components.begin(), request.components.end());
    const std::set<std::string> platforms(request.platforms.begin(), request.platforms.end());
    const std::set<int> majors(request.cuda_majors.begin(), request.cuda_majors.end());

    for (const auto& name : wanted) {
        if (m.find_component(name)) continue;
        auto e = unknown_component(m, name);
        e.message = what + ": " + e.message;
        return std::move(e).with_source(sanitize_url(release.manifest_url));
    }

    std::vector<artifact> out;
    std::map<std::string, std::size_t> by_path;
    std::set<std::string> platforms_hit;
    std::set<int> majors_hit;
    std::set<std::string> platforms_offered;
    std::set<int> majors_offered;
    for (const auto& c : m.components) {
        if (!wanted.empty() && !wanted.count(c.key)) continue;
        for (const auto& a : c.artifacts) {
            platforms_offered.insert(a.platform);
            if (!platforms.count(a.platform)) continue;
            if (auto major = a.cuda_major()) majors_offered.insert(*major);
            if (a.variant && !majors.empty()) {
                const auto major = a.cuda_major();
                if (!major || !majors.count(*major)) continue;
                majors_hit.insert(*major);
            }
            platforms_hit.insert(a.platform);
            const std::string key = mirror_artifact_path(release.product, a.relative_path);
            if (auto it = by_path.find(key); it != by_path.end()) {
                if (out[it->second].sha256 != a.sha256 || out[it->second].size != a.size)
                    return make_error(error_code::bad_manifest,
                                      "one relative_path with two different hashes or sizes: " + a.relative_path)
                        .with_source(sanitize_url(release.manifest_url))
                        .with_json_path(artifact_json_path(a));
                continue;
            }
            by_path.emplace(key, out.size());
            out.push_back(a);
        }
    }

    auto join = [](const auto& items, auto&& fmt) {
        std::string s;
        for (const auto& i : items) s += (s.empty() ? "" : ", ") + fmt(i);
        return s.empty() ? std::string("none") : s;
    };
    // The variant first: a missing variant also empties its platforms.
    for (int major : majors) {
        if (majors_hit.count(major)) continue;
        return make_error(error_code::not_found,
                          what + " offers no cuda" + std::to_string(major) + " variant on the requested platforms " +
                              "(offered: " + join(majors_offered, [](int v) { return "cuda" + std::to_string(v); }) +
                              ")")
            .with_source(sanitize_url(release.manifest_url));
    }
    for (const auto& p : request.platforms)
        if (!platforms_hit.count(p)) missing_platforms.push_back(p);
    if (platforms_hit.empty())
        return make_error(error_code::not_found,
                          what + " has nothing for platform " + join(missing_platforms, [](auto& p) { return p; }) +
                              (majors.empty() ? "" : " and the requested CUDA variants") +
                              " (platforms: " + join(platforms_offered, [](const std::string& s) { return s; }) + ")")
            .with_source(sanitize_url(release.manifest_url));
    return out;
}

// The URLs to try for one artifact: the cache's verified blob (re-verified
// as it streams), then the mirrors, then upstream.
std::vector<std::string> artifact_sources(const mirror_request& request, const std::optional<blob_cache>& cache,
                                          const resolved_release& release, const artifact& a) {
    std::vector<std::string> urls;
    if (cache && cache->has_blob(a.sha256)) urls.push_back(to_url(cache->blob_path(a.sha256).string()));
    for (const auto& m : request.sources.mirrors)
        urls.push_back(mirror_artifact_url(m, request.product, a.relative_path, a.sha256));
    urls.push_back(artifact_url(release.artifact_base_url, a.relative_path, a.sha256));
    return urls;
}

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
    virtual fs::path path_of(const artifact& a) const = 0;
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
        fs::path path;
        bool temporary = false;
    };
    virtual result<local_file> local_original(download_target& t, const mirror_request& request,
                                              const std::atomic<bool>* cancel) = 0;
    // Where a new copy is written (through a .part file renamed there):
    // its final place, or private scratch.
    virtual fs::path staging_path(const std::string& relative_path) = 0;
    // Makes the complete copy at `staged` available as `copy` (a registry
    // uploads it, then removes the file). Outcomes: ok | network | filesystem.
    virtual result<void> place(const artifact& copy, const fs::path& staged) = 0;
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

// ---- recompressed copies -----------------------------------------------------------------

// The copy's path (recompressed_copy_path: the original's with .tar.xz/.txz
// replaced by .tar.zst); nullopt for an original of another format, or when
// the result is not a path the mirror may write.
std::optional<std::string> copy_path_of(std::string_view rel) {
    std::string copy = recompressed_copy_path(rel);
    if (copy.empty() || artifact_path_problem(copy) != nullptr || mirror_path_problem(copy) != nullptr)
        return std::nullopt;
    return copy;
}

// The sidecar of a release (recompressed.hpp; the client reads it with the
// same model code) and, with a key, its signature.
struct sidecar_documents {
    std::string record;
    std::optional<std::string> signature;
};
result<sidecar_documents> make_sidecar(const resolved_release& release, const std::vector<mirrored_copy>& copies,
                                       const signing_key* signer) {
    recompressed_record record;
    record.release_label = release.label;
    record.manifest_sha256 = release.manifest_sha256;
    record.copies.reserve(copies.size());
    for (const auto& c : copies)
        record.copies.push_back({c.original_sha256, c.original_size, c.relative_path, c.sha256, c.size, c.tar_sha256,
                                 c.tar_size, c.tar_piece_bytes, c.tar_list_sha256});
    sidecar_documents out{recompressed_to_json(record), std::nullopt};
    if (signer) {
        REDIST_TRY(out.signature, signer->sign(out.record));
    }
    return out;
}

// The records of a sidecar already in the target, by original sha256, for
// not making a copy again: only those of a sidecar the run's own key signed
// (a previous run of this operator verified them), and only after checking
// the copy's size and SHA-256 against the record (present()). Anything else
// -- unsigned, signed by another key, not parsing -- gives nothing: its
// copies are made again from the verified originals.
void read_previous_copies(const mirror_target::found_sidecar& found, const signing_key* signer,
                          std::map<std::string, mirrored_copy>& out) {
    if (!signer || !find_signer({signer->public_key()}, found.record, found.signature)) return;
    auto record = parse_recompressed(found.record, "recompressed sidecar");
    if (!record.ok()) return;
    for (auto& r : record.value().copies) {
        mirrored_copy c;
        c.original_sha256 = std::move(r.original_sha256);
        c.original_size = r.original_size;
        c.relative_path = std::move(r.relative_path);
        c.sha256 = std::move(r.sha256);
        c.size = r.size;
        c.tar_sha256 = std::move(r.tar_sha256);
        c.tar_size = r.tar_size;
        c.tar_piece_bytes = r.tar_piece_bytes;
        c.tar_list_sha256 = std::move(r.tar_list_sha256);
        out.emplace(c.original_sha256, std::move(c));
    }
}

artifact as_artifact(const mirrored_copy& c) {
    artifact a;
    a.relative_path = c.relative_path;
    a.sha256 = c.sha256;
    a.size = c.size;
    return a;
}

// The zstd copy of one verified .tar.xz/.txz original: reused when a
// previous sidecar records it for this original and it is present with the
// recorded size and SHA-256; otherwise made from the original into a .part
// file, renamed, and placed. Outcomes: ok | bad_archive | filesystem |
// network | the original's download outcomes (a registry fetches it).
result<mirrored_copy> mirror_copy(const mirror_request& request, const std::map<std::string, mirrored_copy>& previous,
                                  mirror_target& target, download_target& original, const std::string& copy_path,
                                  const std::atomic<bool>& cancel) {
    const auto emit_copy = [&](mirror_step step, mirror_status status, std::uint64_t size) {
        mirror_event e{original.label, copy_path, step, status, size, size};
        e.copy = true;
        emit(request, e);
    };
    // Both keys are lower case: the manifest parser and parse_recompressed store them so.
    // A copy recorded without its tar's hash list (by an older redist) is made
    // again, once: clients verify a listed copy on many cores.
    if (const auto it = previous.find(original.sha256); it != previous.end() && it->second.relative_path == copy_path &&
                                                        it->second.original_size == original.size &&
                                                        it->second.tar_piece_bytes != 0) {
        mirrored_copy c = it->second;
        emit_copy(mirror_step::checking, mirror_status::downloaded, c.size);
        REDIST_TRY(const auto present, target.present(as_artifact(c)));
        if (present && *present) {
            c.status = mirror_status::up_to_date;
            emit_copy(mirror_step::finished, c.status, c.size);
            return c;
        }
    }
    if (cancel) return make_error(error_code::cancelled, "cancelled");
    mirrored_copy c;
    c.original_sha256 = original.sha256;
    c.original_size = original.size;
    c.relative_path = copy_path;
    REDIST_TRY(const mirror_target::local_file source, target.local_original(original, request, &cancel));
    emit_copy(mirror_step::recompressing, c.status, 0);
    const fs::path staged = target.staging_path(copy_path);
    REDIST_TRY_VOID(create_parent(staged));
    file_sink sink(staged);
    auto made = [&]() -> result<recompressed> {
        (void)sink.held_bytes(0);  // removes the .part files of killed runs; a copy is never resumed
        REDIST_TRY_VOID(sink.restart());
        return recompress_xz_to_zstd(source.path,
                                     [&](const std::byte* data, std::size_t size) { return sink.write(data, size); });
    }();
    if (made.ok()) {
        auto committed = sink.commit();
        if (!committed.ok()) made = std::move(committed).error_value();
    }
    if (std::error_code ec; source.temporary) fs::remove(source.path, ec);
    if (!made.ok()) {
        sink.discard();
        error e = std::move(made).error_value();
        if (e.path.empty()) e.path = source.path.string();
        return e;
    }
    c.sha256 = made->sha256;
    c.size = made->size;
    c.tar_sha256 = made->tar_sha256;
    c.tar_size = made->tar_size;
    c.tar_piece_bytes = made->tar_piece_bytes;
    c.tar_list_sha256 = made->tar_list_sha256;
    REDIST_TRY_VOID(target.place(as_artifact(c), staged));
    emit_copy(mirror_step::finished, c.status, c.size);
    return c;
}

// What mirror_file needs for copies: the records of the sidecars already in
// the target, and the paths the release's own manifest lists.
struct copy_context {
    std::map<std::string, mirrored_copy> previous;  // by original sha256
    std::set<std::string> listed;                   // every relative_path of the manifest
    // copy path -> the one pick that makes it: the first of a.tar.xz and
    // a.txz, and of two paths with one sha256 (the sidecar has one entry
    // per original).
    std::map<std::string, std::string> owner;
};

// One artifact mirrored, and its copy when one is made.
struct mirrored_pair {
    mirrored_file file;
    std::optional<mirrored_copy> copy;
};

// Checks one artifact in the mirror and fetches it when missing or wrong;
// with recompress, then its zstd copy (mirror_copy).
result<mirrored_pair> mirror_file(const mirror_request& request, const std::optional<blob_cache>& cache,
                                  const resolved_release& release, mirror_target& target, const artifact& a,
                                  const copy_context& copies, const std::atomic<bool>& cancel) {
    mirrored_pair out;
    mirrored_file& f = out.file;
    f.component = a.component;
    f.platform = a.platform;
    f.variant = a.variant;
    f.relative_path = a.relative_path;
    f.path = target.path_of(a);
    f.url = sanitize_url(artifact_url(release.artifact_base_url, a.relative_path, a.sha256));
    f.sha256 = a.sha256;
    f.size = a.size;

    emit(request, {release.label, a.relative_path, mirror_step::checking, mirror_status::downloaded, 0, a.size});
    REDIST_TRY(const auto present, target.present(a));
    f.status = !present                   ? mirror_status::downloaded
               : !*present                ? mirror_status::replaced
               : target.mounted(a.sha256) ? mirror_status::mounted
                                          : mirror_status::up_to_date;
    download_target t{
        artifact_sources(request, cache, release, a), {}, release.label, a.relative_path, f.status, a.size, a.sha256};
    if (f.status == mirror_status::downloaded || f.status == mirror_status::replaced) {
        if (request.sources.offline && !is_local_url(t.urls.front()))
            return make_error(error_code::not_found,
                              "not in the cache (" + (cache ? cache->blob_path(a.sha256).string() : a.sha256) + ")")
                .with_url(f.url);
        if (cache && cache->has_blob(a.sha256)) f.url = sanitize_url(t.urls.front());  // seeded from the cache
        emit(request, {release.label, a.relative_path, mirror_step::downloading, f.status, 0, a.size});
        REDIST_TRY_VOID(target.store(t, request, &cancel));
    }
    emit(request, {release.label, a.relative_path, mirror_step::finished, f.status, a.size, a.size});
    if (request.recompress == recompression::none) return out;
    const auto copy_path = copy_path_of(a.relative_path);
    const auto owner = copy_path ? copies.owner.find(*copy_path) : copies.owner.end();
    if (owner == copies.owner.end() || owner->second != a.relative_path || copies.listed.count(*copy_path) ||
        target.claimed_by_others(*copy_path, release.label))
        return out;
    t.status = mirror_status::downloaded;
    REDIST_TRY(out.copy, mirror_copy(request, copies.previous, target, t, *copy_path, cancel));
    out.copy->path = target.path_of(as_artifact(*out.copy));
    return out;
}

// Mirrors the picked artifacts (and their copies), `jobs` at a time. The
// first failure stops the others (cancelled) and is returned; files and
// copies come back in manifest order.
result<void> mirror_files(const mirror_request& request, const resolved_release& release, mirror_target& target,
                          const std::vector<artifact>& picks, const copy_context& copies, mirrored_release& out) {
    REDIST_TRY(const auto cache,
               request.sources.cache_dir
                   ? blob_cache::open_if_possible(*request.sources.cache_dir, request.sources.shared_cache)
                   : result<std::optional<blob_cache>>(std::optional<blob_cache>()));
    std::vector<std::optional<result<mirrored_pair>>> results(picks.size());
    std::atomic<bool> cancel{false};
    for_each_index(picks.size(), request.jobs, &cancel, [&](std::size_t i) {
        results[i] = mirror_file(request, cache, release, target, picks[i], copies, cancel);
        if (!results[i]->ok()) cancel = true;
    });

    // The first real failure, not the "cancelled because another failed" ones.
    std::optional<error> failure;
    for (auto& r : results) {
        if (r && !r->ok() && (!failure || failure->code == error_code::cancelled)) failure = r->error_value();
        if (!r || !r->ok()) continue;
        out.files.push_back(std::move((*r)->file));
        if ((*r)->copy) out.copies.push_back(std::move(*(*r)->copy));
    }
    if (failure) return *failure;
    return {};
}

// The copies of the release's originals beyond `picks` that a sidecar
// signed by the run's own key records (an earlier run of this operator
// made them from verified originals) and that are present as recorded:
// they stay in the release's new sidecar.
result<void> keep_earlier_copies(const resolved_release& release, const std::vector<artifact>& picks,
                                 const copy_context& copies, mirror_target& target, mirrored_release& out) {
    if (copies.previous.empty()) return {};
    std::set<std::string> have;
    for (const auto& p : picks) have.insert(p.sha256);
    for (const auto& c : out.copies) have.insert(c.original_sha256);
    for (const auto& c : release.parsed.components)
        for (const auto& a : c.artifacts) {
            const auto it = copies.previous.find(a.sha256);
            if (it == copies.previous.end() || it->second.original_size != a.size || !have.insert(a.sha256).second)
                continue;
            const auto copy_path = copy_path_of(a.relative_path);
            if (!copy_path || *copy_path != it->second.relative_path || copies.listed.count(*copy_path) ||
                target.claimed_by_others(*copy_path, release.label))
                continue;
            REDIST_TRY(const auto present, target.present(as_artifact(it->second)));
            if (!present || !*present) continue;
            mirrored_copy kept = it->second;
            kept.status = mirror_status::up_to_date;
            kept.path = target.path_of(as_artifact(kept));
            out.copies.push_back(std::move(kept));
        }
    return {};
}

result<mirrored_release> mirror_one(const mirror_request& request, const std::string& spec, mirror_target& target,
                                    std::uint64_t& bytes_downloaded, std::size_t& copies_made) {
    emit(request, {spec, {}, mirror_step::resolving, mirror_status::downloaded, 0, 0});
    release_request rr;
    rr.product = request.product;
    rr.version_spec = spec;
    rr.base_url = request.base_url;
    rr.sources = request.sources;
    // The manifest is recorded as upstream published it; offline, only a
    // cache key, so the mirrors' cached copies count too (--from-cache).
    if (!rr.sources.offline) rr.sources.mirrors.clear();
    rr.observer = request.observer;
    if (request.pin) rr.manifest_sha256 = request.pin->manifest_sha256;
    REDIST_TRY(const resolved_release release, resolve_release(rr, request.transfer));
    if (name_problem(release.label))
        return make_error(error_code::bad_manifest, "release label is not a plain file name: '" + release.label + "'")
            .with_source(sanitize_url(release.manifest_url));

    mirrored_release out;
    REDIST_TRY(const std::vector<artifact> picks, select_for_mirror(release, request, out.missing_platforms));
    REDIST_TRY_VOID(target.admit(release, picks));

    out.label = release.label;
    out.manifest_url = sanitize_url(release.manifest_url);
    out.manifest_sha256 = release.manifest_sha256;
    copy_context copies;
    if (request.recompress != recompression::none) {
        for (const auto& found : target.sidecars(release.label))
            read_previous_copies(found, target.signer, copies.previous);
        for (const auto& c : release.parsed.components)
            for (const auto& a : c.artifacts) copies.listed.insert(a.relative_path);
        std::set<std::string> originals;
        for (const auto& p : picks) {
            const auto copy = copy_path_of(p.relative_path);
            if (copy && !copies.owner.count(*copy) && originals.insert(p.sha256).second)
                copies.owner.emplace(*copy, p.relative_path);
        }
    }
    REDIST_TRY_VOID(mirror_files(request, release, target, picks, copies, out));
    for (const auto& f : out.files)
        if (f.status == mirror_status::downloaded || f.status == mirror_status::replaced) bytes_downloaded += f.size;
    for (const auto& c : out.copies) copies_made += c.status != mirror_status::up_to_date;

    // Mirroring adds, never replaces: what earlier runs put in the target
    // for this release stays listed, and so do their copies that the run's
    // own key signed (checked present, as a reused copy is).
    REDIST_TRY(const std::vector<artifact> kept, target.earlier_artifacts(release, picks));
    out.kept_from_earlier = kept.size();
    REDIST_TRY_VOID(keep_earlier_copies(release, picks, copies, target, out));
    std::vector<artifact> listed = picks;
    listed.insert(listed.end(), kept.begin(), kept.end());

    // Last: the manifest, so the release is advertised only when complete.
    REDIST_TRY_VOID(target.publish(release, listed, out));
    const std::size_t size = release.manifest_text.size();
    emit(request, {release.label, "redistrib_" + release.label + ".json", mirror_step::finished, out.manifest_status,
                   size, size});
    return out;
}

// A directory with the upstream layout (see mirror.hpp).
class directory_target final : public mirror_target {
public:
    directory_target(fs::path root, std::string product, claim_map claims)
        : root_(std::move(root)),
          product_(std::move(product)),
          redist_dir_(root_ / product_ / "redist"),
          claims_(std::move(claims)) {}
    result<void> admit(const resolved_release& release, const std::vector<artifact>& picks) override {
        for (const artifact& a : picks) REDIST_TRY_VOID(file_of(a.relative_path));
        return check_claims(release, picks, claims_);
    }
    fs::path path_of(const artifact& a) const override { return path_or_empty(a.relative_path); }
    result<std::optional<bool>> present(const artifact& a) override {
        REDIST_TRY(const fs::path path, file_of(a.relative_path));
        return existing_matches(path, a.size, a.sha256);
    }
    result<void> store(download_target& t, const mirror_request& request, const std::atomic<bool>* cancel) override {
        REDIST_TRY(t.final_path, file_of(t.relative_path));
        return download_verified(t, request, cancel);
    }
    result<void> publish(const resolved_release& release, const std::vector<artifact>& /*picks*/,
                         mirrored_release& out) override {
        if (!out.copies.empty()) {  // before the manifest; every copy it lists is in place
            REDIST_TRY(const sidecar_documents sidecar, make_sidecar(release, out.copies, signer));
            out.sidecar_path = redist_dir_ / recompressed_document_name(release.label);
            REDIST_TRY_VOID(write_if_changed(out.sidecar_path, sidecar.record));
            // A signature of an older record would only fail on clients: replaced, or removed.
            const fs::path sig = redist_dir_ / recompressed_signature_name(release.label);
            if (sidecar.signature) {
                REDIST_TRY_VOID(write_if_changed(sig, *sidecar.signature));
                out.signed_by = signer->public_key().fingerprint;
            } else if (std::error_code ec; !fs::remove(sig, ec) && ec) {
                return errno_error("cannot remove", sig, ec.value());
            }
        }
        const std::string& text = release.manifest_text;  // the bytes exactly as published
        const std::string manifest_name = "redistrib_" + release.label + ".json";
        out.manifest_path = redist_dir_ / manifest_name;
        const auto present = existing_matches(out.manifest_path, text.size(), release.manifest_sha256);
        if (present && *present) {
            out.manifest_status = mirror_status::up_to_date;
        } else {
            out.manifest_status = present ? mirror_status::replaced : mirror_status::downloaded;
            REDIST_TRY_VOID(write_file_atomically(out.manifest_path, text));
        }
        add_claims(claims_, product_, manifest_name, release.parsed);
        return write_mirror_index(redist_dir_);
    }

    std::vector<found_sidecar> sidecars(const std::string& /*label*/) override {
        // Every release's: a copy of an original two releases share is made once.
        std::vector<found_sidecar> found;
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(redist_dir_, ec)) {
            const std::string name = entry.path().filename().string();
            if (!name.starts_with("recompressed_") || !name.ends_with(".json")) continue;
            auto text = read_file(entry.path(), kMaxRecompressedBytes, follow_links::no);
            if (!text.ok()) continue;
            auto sig = read_file(redist_dir_ / (name + ".sig"), kRecompressedSignatureBytes, follow_links::no);
            found.push_back({std::move(text).value(), sig.ok() ? std::move(sig).value() : std::string()});
        }
        return found;
    }
    result<local_file> local_original(download_target& t, const mirror_request& /*request*/,
                                      const std::atomic<bool>* /*cancel*/) override {
        REDIST_TRY(fs::path path, file_of(t.relative_path));
        return local_file{std::move(path), false};  // in place and verified
    }
    fs::path staging_path(const std::string& relative_path) override { return path_or_empty(relative_path); }
    result<void> place(const artifact& /*copy*/, const fs::path& /*staged*/) override {
        return {};  // staged in its final place
    }
    bool claimed_by_others(const std::string& relative_path, const std::string& /*label*/) const override {
        return claims_.count(mirror_artifact_path(product_, relative_path)) > 0;
    }

private:
    // Where the mirror keeps an artifact: its path relative to the mirror's
    // base, under the base (never the manifest's text itself).
    result<fs::path> file_of(std::string_view relative_path) const {
        return confined_join(root_, mirror_artifact_path(product_, relative_path));
    }
    // For the report and a copy's staging: admit() refused the paths that have none.
    fs::path path_or_empty(std::string_view relative_path) const {
        auto path = file_of(relative_path);
        return path.ok() ? std::move(path).value() : fs::path();
    }

    fs::path root_;
    std::string product_;
    fs::path redist_dir_;
    claim_map claims_;
};

// OCI form: a registry (oci://, oci+http://; repository <namespace>/<product>,
// one tag per release, blobs by digest) or an image layout on disk
// (oci-layout:DIR; DIR/<product>/, one index.json entry per release) -- the
// oci_store decides which (transport/oci.hpp, oci_layout.hpp). An archive is
// downloaded verified into the store's scratch directory, then stored; a
// blob the store already has is not stored again, and one that a repository
// of the request's mount_from has (registries) is mounted from it instead;
// the release's image manifest (oci_release_manifest) goes last.
class oci_target final : public mirror_target {
public:
    // `documents`: the base URL the store is read back from (oci://…,
    // oci-layout:DIR); `mount_from`: "<namespace>/<product>" repositories.
    // `scratch`: where downloads wait for the store, the store's own (a
    // layout's) or a run directory the target holds (a registry's).
    oci_target(std::unique_ptr<oci_store> store, fs::path scratch, std::string documents,
               std::vector<std::string> mount_from, const mirror_request& request)
        : store_(std::move(store)),
          scratch_(std::move(scratch)),
          documents_(std::move(documents)),
          product_(request.product),
          mount_from_(std::move(mount_from)),
          transfer_(request.transfer) {}
    oci_target(std::unique_ptr<oci_store> store, scratch_dir scratch, std::string documents,
               std::vector<std::string> mount_from, const mirror_request& request)
        : oci_target(std::move(store), scratch.path(), std::move(documents), std::move(mount_from), request) {
        held_scratch_ = std::move(scratch);
    }
    ~oci_target() override = default;  // held_scratch_ keeps only partial downloads, for the next run
    oci_target(const oci_target&) = delete;
    oci_target& operator=(const oci_target&) = delete;
    result<void> admit(const resolved_release& /*release*/, const std::vector<artifact>& /*picks*/) override {
        return {};  // blobs are named by their digest: one release cannot replace another's
    }
    fs::path path_of(const artifact& /*a*/) const override { return {}; }
    // A blob missing here but present in a repository of mount_from is
    // mounted (no download, no upload).
    result<std::optional<bool>> present(const artifact& a) override {
        std::lock_guard lock(mutex_);
        REDIST_TRY(const bool has, store_->has_blob(a.sha256, a.size));
        if (has) return std::optional<bool>(true);
        for (const auto& from : mount_from_) {
            REDIST_TRY(const bool mounted, store_->mount_blob(a.sha256, from));
            if (!mounted) continue;
            REDIST_TRY(const bool now, store_->has_blob(a.sha256, a.size));  // the size, as for any blob
            if (!now) break;
            mounted_.insert(a.sha256);
            return std::optional<bool>(true);
        }
        return std::optional<bool>();
    }
    bool mounted(const std::string& sha256) const override {
        std::lock_guard lock(mutex_);
        return mounted_.count(sha256) > 0;
    }
    result<void> store(download_target& t, const mirror_request& request, const std::atomic<bool>* cancel) override {
        t.final_path = scratch_ / t.sha256;
        REDIST_TRY_VOID(download_verified(t, request, cancel));
        std::error_code ec;
        std::lock_guard lock(mutex_);
        // The copy (local_original) needs the original after the store took
        // it (an image layout moves the file into its blobs): a second link.
        if (request.recompress != recompression::none && copy_path_of(t.relative_path))
            fs::create_hard_link(t.final_path, kept_original(t.sha256), ec);
        auto pushed = store_->push_blob(t.sha256, t.final_path);
        fs::remove(t.final_path, ec);
        return pushed;
    }
    result<void> publish(const resolved_release& release, const std::vector<artifact>& picks,
                         mirrored_release& out) override;
    // Blobs are named by NVIDIA's SHA-256, so a blob of the release that the
    // store holds (with its size; a layout: and its digest) is that artifact,
    // whichever earlier run or other tool put it there.
    result<std::vector<artifact>> earlier_artifacts(const resolved_release& release,
                                                    const std::vector<artifact>& picks) override {
        std::set<std::string> listed;
        for (const auto& p : picks) listed.insert(p.relative_path);
        std::vector<artifact> out;
        std::lock_guard lock(mutex_);
        for (const auto& c : release.parsed.components)
            for (const auto& a : c.artifacts) {
                if (!listed.insert(a.relative_path).second) continue;
                REDIST_TRY(const bool has, store_->has_blob(a.sha256, a.size));
                if (has) out.push_back(a);
            }
        return out;
    }
    // The tag's own, then those of the same label in the repositories of
    // mount_from (their copies are mounted rather than made again).
    std::vector<found_sidecar> sidecars(const std::string& label) override {
        std::vector<std::string> products{product_};
        for (const auto& repo : mount_from_) products.push_back(repo.substr(repo.rfind('/') + 1));
        std::vector<found_sidecar> found;
        for (const auto& product : products) {
            const std::string url = join_url(join_url(documents_, product), "redist/") +
                                    recompressed_document_name(label);
            auto text = fetch_text(url, transfer_, kMaxRecompressedBytes);
            if (!text.ok()) continue;
            auto sig = fetch_text(url + ".sig", transfer_, kRecompressedSignatureBytes);
            found.push_back({std::move(text).value(), sig.ok() ? std::move(sig).value() : std::string()});
        }
        return found;
    }
    // The original this run stored, else the target's own (a blob an
    // earlier run stored, read back through the transport and verified as
    // it streams: upstream is not asked again), else upstream's.
    result<local_file> local_original(download_target& t, const mirror_request& request,
                                      const std::atomic<bool>* cancel) override {
        std::error_code ec;
        if (fs::is_regular_file(fs::symlink_status(kept_original(t.sha256), ec)))
            return local_file{kept_original(t.sha256), true};
        t.final_path = kept_original(t.sha256);
        bool held = false;
        {
            std::lock_guard lock(mutex_);
            REDIST_TRY(held, store_->has_blob(t.sha256, t.size));
        }
        if (held) {
            download_target own = t;
            own.urls = {mirror_artifact_url(documents_, product_, t.relative_path, t.sha256)};
            if (download_verified(own, request, cancel).ok()) return local_file{t.final_path, true};
        }
        REDIST_TRY_VOID(download_verified(t, request, cancel));
        return local_file{t.final_path, true};
    }
    fs::path staging_path(const std::string& relative_path) override {
        return scratch_ / (sha256_hex(relative_path) + ".tar.zst");
    }
    result<void> place(const artifact& copy, const fs::path& staged) override {
        std::lock_guard lock(mutex_);
        auto placed = [&]() -> result<void> {
            REDIST_TRY(const bool has, store_->has_blob(copy.sha256, copy.size));
            return has ? result<void>() : store_->push_blob(copy.sha256, staged);
        }();
        std::error_code ec;
        fs::remove(staged, ec);
        return placed;
    }

private:
    result<void> ensure_blob(const std::string& sha256, std::string_view bytes) {
        REDIST_TRY(const bool has, store_->has_blob(sha256, bytes.size()));
        return has ? result<void>() : store_->push_blob(sha256, bytes);
    }
    fs::path kept_original(const std::string& sha256) const { return scratch_ / (sha256 + ".original"); }
    std::unique_ptr<oci_store> store_;
    fs::path scratch_;
    scratch_dir held_scratch_;  // a registry's run directory (a layout's is the store's)
    std::string documents_;     // oci://…/<namespace>, oci-layout:DIR
    std::string product_;
    std::vector<std::string> mount_from_;  // "<namespace>/<product>"
    transfer_options transfer_;
    std::set<std::string> mounted_;  // blobs present() mounted
    mutable std::mutex mutex_;       // one request at a time on the store
};

result<void> oci_target::publish(const resolved_release& release, const std::vector<artifact>& picks,
                                 mirrored_release& out) {
    const std::lock_guard lock(mutex_);
    const std::string& text = release.manifest_text;  // stored verbatim: the trust comes from these bytes
    REDIST_TRY_VOID(ensure_blob(release.manifest_sha256, text));
    REDIST_TRY_VOID(ensure_blob(sha256_hex(oci_empty_config), oci_empty_config));
    const oci_release_layer json_layer{release.manifest_sha256, "redistrib_" + release.label + ".json", text.size()};
    std::vector<oci_release_layer> archives;
    archives.reserve(picks.size() + out.copies.size());
    // A layer's title is a file name to other tools (oras pull): never a "..".
    const auto title = [&](const std::string& rel) {
        return rel.starts_with("../") ? mirror_artifact_path(release.product, rel) : rel;
    };
    for (const auto& p : picks) archives.push_back({p.sha256, title(p.relative_path), p.size});
    // The copies, stored by mirror_copy, and the sidecar that lists them: one tag points at all or none.
    std::optional<oci_release_layer> sidecar_layer;
    std::optional<oci_release_layer> signature_layer;
    if (!out.copies.empty()) {
        for (const auto& c : out.copies) archives.push_back({c.sha256, title(c.relative_path), c.size});
        REDIST_TRY(const sidecar_documents sidecar, make_sidecar(release, out.copies, signer));
        sidecar_layer = oci_release_layer{sha256_hex(sidecar.record), recompressed_document_name(release.label),
                                          sidecar.record.size()};
        REDIST_TRY_VOID(ensure_blob(sidecar_layer->sha256, sidecar.record));
        if (sidecar.signature) {  // a layer of its own: skopeo copy keeps every layer of a tag
            signature_layer = oci_release_layer{sha256_hex(*sidecar.signature),
                                                recompressed_signature_name(release.label), sidecar.signature->size()};
            REDIST_TRY_VOID(ensure_blob(signature_layer->sha256, *sidecar.signature));
            out.signed_by = signer->public_key().fingerprint;
        }
    }
    REDIST_TRY(const auto tagged, store_->tag_digest(release.label));
    for (const bool standard_types : {false, true}) {
        const std::string manifest = oci_release_manifest(json_layer, archives, release.label, standard_types,
                                                          sidecar_layer, signature_layer);
        if (tagged && *tagged == "sha256:" + sha256_hex(manifest)) {
            out.manifest_status = mirror_status::up_to_date;
            return {};
        }
        auto put = store_->put_manifest(release.label, manifest, oci_manifest_media_type);
        // A registry that refuses our media types gets the image-spec's own.
        if (!put.ok() && put.error_value().code == error_code::bad_manifest && !standard_types) continue;
        REDIST_TRY_VOID(std::move(put));
        out.manifest_status = tagged ? mirror_status::replaced : mirror_status::downloaded;
        return {};
    }
    return make_error(error_code::internal, "unreachable");
}

std::string html_escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '\'': out += "&#39;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

}  // namespace

result<void> write_mirror_index(const fs::path& redist_dir) {
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(redist_dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || name[0] == '.' || name.find(".part.") != std::string::npos || is_atomic_write_temp(name))
            continue;
        std::error_code type_ec;
        if (entry.is_directory(type_ec)) {
            names.push_back(name + "/");
        } else if (name.starts_with("redistrib_") && name.ends_with(".json") && entry.is_regular_file(type_ec)) {
            names.push_back(name);
        }
    }
    if (ec) return errno_error("cannot list", redist_dir, ec.value());
    std::sort(names.begin(), names.end());

    // The shape of NVIDIA's listing, which list_versions() parses.
    std::string title = "Index of " + redist_dir.parent_path().filename().string() + "/redist";
    std::string html = "<html>\n<head><title>" + html_escape(title) + "</title></head>\n<body>\n<h1>" +
                       html_escape(title) + "</h1>\n<a href='../'>Parent Directory</a><br>\n";
    for (const auto& n : names) html += "<a href='" + html_escape(n) + "'>" + html_escape(n) + "</a><br>\n";
    html += "</body>\n</html>\n";
    return write_file_atomically(redist_dir / "index.html", html);
}

namespace {

// Where a push to a registry keeps its verified downloads until they are
// uploaded: a run directory in the cache's scratch/ (else in $TMPDIR), one
// per target. A killed or failed run's partial downloads are resumed by the
// next run into the same target; the run that finishes removes them.
result<scratch_dir> registry_scratch(const mirror_request& request) {
    const std::string prefix =
        "mirror-" + sha256_hex(sanitize_url(join_url(request.dest.string(), request.product))).substr(0, 16) + "-";
    REDIST_TRY(const auto cache, blob_cache::open_if_possible(request.scratch_cache_dir, request.sources.shared_cache));
    const fs::path parent = cache ? cache->scratch_root() : fs::temp_directory_path();
    const unique_fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!parent_fd) return errno_error("cannot open directory", parent, errno);
    return claim_scratch_dir(parent_fd.get(), parent, cache ? prefix : "redist-" + prefix);
}

// The target the request names, and where the report says it is.
result<std::unique_ptr<mirror_target>> open_target(const mirror_request& request, mirror_report& report) {
    if (is_oci_layout_url(request.dest.string())) {
        if (!request.mount_from.empty())
            return make_error(error_code::usage, "--mount-from needs a registry (oci://) target, not an image layout");
        REDIST_TRY(auto writer, oci_layout_writer::open(request.dest.string(), request.product));
        report.redist_dir = writer->where();
        fs::path scratch = writer->scratch();  // the layout's own (same filesystem as its blobs)
        return std::unique_ptr<mirror_target>(std::make_unique<oci_target>(
            std::move(writer), scratch, to_url(request.dest.string()), std::vector<std::string>{}, request));
    }
    if (is_oci_url(request.dest.string())) {
        REDIST_TRY(oci_pusher pusher, oci_pusher::open(request.dest.string(), request.product, request.transfer,
                                                       request.sources, request.observer));
        report.redist_dir = sanitize_url(join_url(request.dest.string(), request.product));
        REDIST_TRY(scratch_dir scratch, registry_scratch(request));
        const std::string& repo = pusher.where().repository;  // <namespace>/<product>
        std::vector<std::string> mount_from;
        for (const auto& product : request.mount_from)
            mount_from.push_back(repo.substr(0, repo.rfind('/')) + "/" + product);
        return std::unique_ptr<mirror_target>(
            std::make_unique<oci_target>(std::make_unique<oci_pusher>(std::move(pusher)), std::move(scratch),
                                         request.dest.string(), std::move(mount_from), request));
    }
    std::error_code ec;
    report.redist_dir = fs::absolute(request.dest, ec).lexically_normal() / request.product / "redist";
    report.index_path = report.redist_dir / "index.html";
    create_directories_masked(report.redist_dir, ec);
    if (ec) return errno_error("cannot create directory", report.redist_dir, ec.value());
    const fs::path root = report.redist_dir.parent_path().parent_path();
    REDIST_TRY(claim_map claims, read_claims(root));
    return std::unique_ptr<mirror_target>(std::make_unique<directory_target>(root, request.product, std::move(claims)));
}

}  // namespace

result<mirror_report> mirror_releases(const mirror_request& request) {
    if (name_problem(request.product))
        return make_error(error_code::usage,
                          "the product must be a plain name like 'cudnn', not '" + request.product + "'");
    if (request.versions.empty()) return make_error(error_code::usage, "no versions to mirror");
    if (request.platforms.empty()) return make_error(error_code::usage, "no platforms to mirror");
    if (request.dest.empty()) return make_error(error_code::usage, "no destination directory");
    for (const auto& p : request.mount_from)
        if (name_problem(p))
            return make_error(error_code::usage, "a product to mount from must be a plain name, not '" + p + "'");

    mirror_report report;
    report.product = request.product;
    // The key first: a run that cannot sign fails before it downloads anything.
    std::optional<signing_key> signer;
    if (request.sign_key) {
        if (request.recompress == recompression::none)
            return make_error(error_code::usage, "a signing key signs recompressed copies: it needs --recompress");
        REDIST_TRY(signer, signing_key::read(*request.sign_key));
    }
    REDIST_TRY(const std::unique_ptr<mirror_target> target, open_target(request, report));
    target->signer = signer ? &*signer : nullptr;
    for (const auto& spec : request.versions) {
        REDIST_TRY(mirrored_release r, mirror_one(request, spec, *target, report.bytes_downloaded, report.copies_made));
        report.releases.push_back(std::move(r));
    }
    return report;
}

}  // namespace redist
