// mirror.cpp — copies releases into a local mirror with the upstream layout:
// the mirror loop (resolve a release, select its artifacts, check and fetch
// each, make its recompressed copies, publish it), run over a mirror_target.
// The targets themselves (a directory, a registry, an image layout) are in
// mirror_targets.cpp; what both files use is in mirror_target.hpp.
//
// Hazards that shape this file:
// - A mirror is served to other machines: a file under its final name must
//   be complete and verified. Everything goes through "<file>.part.<pid>",
//   is hashed while it streams, fsync'ed, then renamed (atomic on one
//   filesystem). A crash leaves at most a .part file, swept by the next run.
// - The manifest decides what "complete" means for a release, so it is
//   published last, after every artifact (and copy) is in place.
// - Release labels and the product name become file names: they are checked
//   to be plain names, so a hostile manifest cannot write outside the mirror.
//   relative_path values are already validated by the manifest parser.
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
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "archive/recompress.hpp"
#include "archive/sha256.hpp"
#include "archive/signing.hpp"
#include "features/mirror_target.hpp"
#include "model/manifest.hpp"
#include "model/recompressed_sidecar.hpp"
#include "model/select_rules.hpp"
#include "model/urls.hpp"
#include "redist/cache.hpp"
#include "redist/install.hpp"
#include "redist/select.hpp"
#include "redist/signing.hpp"
#include "support/budget.hpp"
#include "support/debug_pause.hpp"
#include "support/parallel.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"
#include "transport/sources.hpp"

namespace redist {

namespace fs = std::filesystem;
using namespace mirroring;

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

void emit(const mirror_request& request, const mirror_event& event) {
    if (request.observer) request.observer->on_mirror(event);
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

}  // namespace

namespace mirroring {

result<void> create_parent(const fs::path& path) {
    std::error_code ec;
    create_directories_masked(path.parent_path(), ec);
    if (ec) return errno_error("cannot create directory", path.parent_path(), ec.value());
    return {};
}

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
    auto fetched = try_sources(make_sources(t.urls), run, [&](source_attempt& at) {
        at.retried_inside = true;
        return stream.fetch_from(at.from.url(), request.transfer, one_stream, no_spool,
                                 segment_retries(run, at.from.url()), at.failure);
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

void add_claims(claim_map& claims, const std::string& product, const std::string& manifest_name, const manifest& m) {
    for (const auto& c : m.components)
        for (const auto& a : c.artifacts)
            claims[mirror_artifact_path(product, a.relative_path)].push_back(
                {product + "/redist/" + manifest_name, a.sha256, a.size});
}

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

}  // namespace mirroring

namespace {

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

// Where `a` stands in the manifest: its component's index, then its own
// index among the component's artifacts.
std::pair<std::size_t, std::size_t> manifest_position(const manifest& m, const artifact& a) {
    const component* c = m.find_component(a.component);
    if (c == nullptr) return {m.components.size(), 0};
    const auto same = [&](const artifact& b) { return b.platform == a.platform && b.variant == a.variant; };
    const auto it = std::find_if(c->artifacts.begin(), c->artifacts.end(), same);
    return {static_cast<std::size_t>(c - m.components.data()), static_cast<std::size_t>(it - c->artifacts.begin())};
}

// `chosen` in manifest order, each artifact once (select_artifacts chose a
// plain one for every variant asked for).
std::vector<artifact> in_manifest_order(const manifest& m, std::vector<artifact> chosen) {
    const auto before = [&](const artifact& x, const artifact& y) {
        return manifest_position(m, x) < manifest_position(m, y);
    };
    const auto same = [&](const artifact& x, const artifact& y) {
        return manifest_position(m, x) == manifest_position(m, y);
    };
    std::stable_sort(chosen.begin(), chosen.end(), before);
    chosen.erase(std::unique(chosen.begin(), chosen.end(), same), chosen.end());
    return chosen;
}

// One artifact per file the mirror keeps (mirror_artifact_path): two that
// name one file must be one archive. Outcomes: ok | bad_manifest.
result<std::vector<artifact>> one_per_mirror_path(const resolved_release& release, std::vector<artifact> chosen) {
    std::vector<artifact> out;
    std::map<std::string, std::size_t> by_path;
    for (auto& a : chosen) {
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
        out.push_back(std::move(a));
    }
    return out;
}

// What to mirror of a release: every artifact of the requested components
// on the requested platforms and CUDA variants (select_artifacts with
// artifact_choice::every_variant, per platform and variant), in manifest
// order, deduplicated by where the mirror keeps it. A platform the release
// has nothing for goes to `missing_platforms` (none at all: not_found).
result<std::vector<artifact>> select_for_mirror(const resolved_release& release, const mirror_request& request,
                                                std::vector<std::string>& missing_platforms) {
    if (request.pin) return select_pinned(release, *request.pin);
    const manifest& m = release.parsed;
    const std::string what = release.product + " " + release.label;
    const std::set<int> majors(request.cuda_majors.begin(), request.cuda_majors.end());

    for (const auto& name : std::set<std::string>(request.components.begin(), request.components.end())) {
        if (m.find_component(name)) continue;
        auto e = unknown_component(m, name);
        e.message = what + ": " + e.message;
        return std::move(e).with_source(sanitize_url(release.manifest_url));
    }

    std::vector<std::optional<int>> variants(majors.begin(), majors.end());
    if (variants.empty()) variants.emplace_back(std::nullopt);  // every variant
    std::vector<artifact> chosen;
    std::set<std::string> platforms_hit;
    std::set<int> majors_hit;
    std::set<int> majors_offered;
    for (const auto& platform : std::set<std::string>(request.platforms.begin(), request.platforms.end())) {
        if (platform.empty()) continue;  // names nothing: missing below
        for (int major : available_cuda_majors(m, platform, request.components)) majors_offered.insert(major);
        for (const auto& major : variants) {
            auto picked = select_artifacts(m, {.platform = platform,
                                               .cuda_major = major,
                                               .components = request.components,
                                               .unnamed = unnamed_components::every,
                                               .choice = artifact_choice::every_variant});
            if (!picked.ok() && picked.error_value().code == error_code::not_found) continue;  // nothing here
            if (!picked.ok()) return std::move(picked).error_value().with_source(sanitize_url(release.manifest_url));
            platforms_hit.insert(platform);
            for (auto& a : picked->artifacts) {
                if (major && a.variant) majors_hit.insert(*major);
                chosen.push_back(std::move(a));
            }
        }
    }
    REDIST_TRY(std::vector<artifact> out, one_per_mirror_path(release, in_manifest_order(m, std::move(chosen))));

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
                              (majors.empty() ? "" : " and the requested CUDA variants") + " (platforms: " +
                              join(available_platforms(m, request.components), [](const std::string& s) { return s; }) +
                              ")")
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

}  // namespace

// ---- recompressed copies -----------------------------------------------------------------

namespace mirroring {

std::optional<std::string> copy_path_of(std::string_view rel) {
    std::string copy = recompressed_copy_path(rel);
    if (copy.empty() || artifact_path_problem(copy) != nullptr || mirror_path_problem(copy) != nullptr)
        return std::nullopt;
    return copy;
}

result<sidecar_documents> make_sidecar(const resolved_release& release, const std::vector<mirrored_copy>& copies,
                                       const signing_key* signer) {
    recompressed_record record;
    record.release_label = release.label;
    record.manifest_sha256 = release.manifest_sha256;
    record.copies.reserve(copies.size());
    for (const auto& c : copies)
        record.copies.push_back({c.original_sha256, c.original_size, c.relative_path, c.sha256, c.size, c.tar_sha256,
                                 c.tar_size, c.tar_piece_bytes, c.tar_list_sha256, c.tree_sha256});
    sidecar_documents out{recompressed_to_json(record), std::nullopt};
    if (signer) {
        REDIST_TRY(out.signature, signer->sign(out.record));
    }
    return out;
}

}  // namespace mirroring

namespace {

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
        c.tree_sha256 = std::move(r.tree_sha256);
        out.emplace(c.original_sha256, std::move(c));
    }
}

// The digest of the tree a copy just made unpacks to (copy_tree_digest),
// unpacked once as a client would, in a scratch directory of its own: what
// a killed run left there goes when it is adopted, and the tree when this
// returns (scratch_dir keeps only .part files).
result<std::string> made_copy_tree(const mirror_request& request, const fs::path& copy, const recompressed& made) {
    REDIST_TRY(const scratch_dir scratch, claim_mirror_scratch(request, "copy-tree-"));
    const fs::path stage = scratch.path() / "tree";
    if (::mkdirat(scratch.fd(), "tree", 0700) != 0) return errno_error("cannot create directory", stage, errno);
    auto digest = copy_tree_digest(copy, stage, made);
    debug_pause("copy-tree");
    return digest;
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
    // A copy recorded without its tar's hash list or its tree's digest (by an
    // older redist) is made again, once: clients verify such a copy by what
    // lands, hashing no byte twice.
    if (const auto it = previous.find(original.sha256);
        it != previous.end() && it->second.relative_path == copy_path && it->second.original_size == original.size &&
        it->second.tar_piece_bytes != 0 && !it->second.tree_sha256.empty()) {
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
    if (made.ok() && cancel) made = make_error(error_code::cancelled, "cancelled");
    if (made.ok()) {
        auto tree = made_copy_tree(request, staged, *made);
        if (tree.ok()) c.tree_sha256 = std::move(tree).value();
        else made = std::move(tree).error_value();
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
        if (offline_skips(make_source(t.urls.front()), request.sources.offline))
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
