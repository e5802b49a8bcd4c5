// mirror_targets.cpp — the places a mirror writes to, behind mirror_target
// (mirror_target.hpp): a directory with the upstream layout, and the OCI
// form (a registry, or an image layout on disk); open_target() picks one
// from the destination. The mirror loop that drives them is mirror.cpp.
//
// Hazards that shape this file:
// - A directory mirror is served to other machines as it stands: every file
//   it writes for itself (a manifest, a sidecar and its signature,
//   index.html) goes through the one atomic writer; a manifest or sidecar
//   that already holds the bytes is left alone. An artifact's file is named by
//   mirror_artifact_path() (urls.hpp), the path relative to the mirror's base
//   ("../../../pool/..." of NVIDIA's bin-archive is "pool/..."), joined under
//   it by confined_join -- never the manifest's text itself.
// - index.html (what `redist versions` reads) is rewritten only after a
//   manifest lands; a sidecar is written before its manifest, and a
//   signature of an older sidecar is replaced or removed (it would only fail
//   on clients).
// - In the OCI form blobs are named by NVIDIA's SHA-256, so one release
//   cannot replace another's; one tag points at every layer of a release
//   (archives, copies, sidecar, signature) or at none, and is put last. A
//   layer's title is a file name to other tools: never a "..".
// - A registry's downloads wait in a run directory the target holds: a
//   killed run's partial downloads are resumed by the next run into the same
//   target. An image layout moves a stored file into its blobs, so an
//   original that a copy is made from is kept by a second link.
#include "features/mirror_target.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <set>
#include <utility>

#include "archive/sha256.hpp"
#include "model/recompressed_sidecar.hpp"
#include "model/urls.hpp"
#include "redist/cache.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"
#include "transport/oci.hpp"
#include "transport/oci_layout.hpp"
#include "transport/source.hpp"

namespace redist {

namespace fs = std::filesystem;
using namespace mirroring;

namespace {

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

result<void> mirroring::write_mirror_index(const fs::path& redist_dir) {
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

namespace mirroring {

result<scratch_dir> claim_mirror_scratch(const mirror_request& request, const std::string& prefix) {
    REDIST_TRY(const auto cache, blob_cache::open_if_possible(request.scratch_cache_dir, request.sources.shared_cache));
    const fs::path parent = cache ? cache->scratch_root() : fs::temp_directory_path();
    const unique_fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!parent_fd) return errno_error("cannot open directory", parent, errno);
    return claim_scratch_dir(parent_fd.get(), parent, cache ? prefix : "redist-" + prefix);
}

namespace {

// Where a push to a registry keeps its verified downloads until they are
// uploaded, one run directory per target. A killed or failed run's partial
// downloads are resumed by the next run into the same target; the run that
// finishes removes them.
result<scratch_dir> registry_scratch(const mirror_request& request) {
    return claim_mirror_scratch(
        request,
        "mirror-" + sha256_hex(sanitize_url(join_url(request.dest.string(), request.product))).substr(0, 16) + "-");
}

}  // namespace

result<std::unique_ptr<mirror_target>> open_target(const mirror_request& request, mirror_report& report) {
    // The kind of a source (transport/source.hpp): an image layout, a
    // registry, else a directory (a path).
    const source_kind kind = source_kind_of(request.dest.string());
    if (kind == source_kind::layout) {
        if (!request.mount_from.empty())
            return make_error(error_code::usage, "--mount-from needs a registry (oci://) target, not an image layout");
        REDIST_TRY(auto writer, oci_layout_writer::open(request.dest.string(), request.product));
        report.redist_dir = writer->where();
        fs::path scratch = writer->scratch();  // the layout's own (same filesystem as its blobs)
        return std::unique_ptr<mirror_target>(std::make_unique<oci_target>(
            std::move(writer), scratch, to_url(request.dest.string()), std::vector<std::string>{}, request));
    }
    if (kind == source_kind::registry) {
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

}  // namespace mirroring

}  // namespace redist
