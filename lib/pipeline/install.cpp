// The pipeline, end to end. See include/redist/install.hpp.
#include "redist/install.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <set>
#include <utility>

#include "archive/sha256.hpp"
#include "archive/unpack.hpp"
#include "model/urls.hpp"
#include "pipeline/install_rules.hpp"
#include "redist/cache.hpp"
#include "redist/prefix.hpp"
#include "redist/suggest.hpp"
#include "redist/version.hpp"
#include "store/stage.hpp"
#include "support/budget.hpp"
#include "support/debug_pause.hpp"
#include "support/hex.hpp"
#include "support/parallel.hpp"
#include "support/safe_path.hpp"
#include "transport/segmented_download.hpp"
#include "transport/sources.hpp"

namespace fs = std::filesystem;

namespace redist {

const char* to_string(fetch_stage stage) noexcept {
    switch (stage) {
        case fetch_stage::waiting: return "waiting";
        case fetch_stage::downloading: return "downloading";
        case fetch_stage::committing: return "committing";
        case fetch_stage::done: return "done";
        case fetch_stage::unchanged: return "unchanged";
        case fetch_stage::failed: return "failed";
        case fetch_stage::staged: return "staged";
        case fetch_stage::stopped: return "stopped";
    }
    return "waiting";
}

// ---- excluding ---------------------------------------------------------------------

bool path_excluded(std::string_view path, const std::vector<std::string>& globs) {
    if (globs.empty()) return false;
    const std::string p(path);
    for (std::size_t end = p.find('/');; end = p.find('/', end + 1)) {
        const std::string head = p.substr(0, end);  // each parent directory, then the path itself
        for (const auto& g : globs)
            if (::fnmatch(g.c_str(), head.c_str(), FNM_PATHNAME) == 0) return true;
        if (end == std::string::npos) return false;
    }
}

bool receipt_current(const receipt& r, const std::string& product, const artifact& a,
                     const std::vector<std::string>& exclude) {
    return r.component == a.component && r.archive_sha256 == a.sha256 && r.archive_size == a.size &&
           r.platform == a.platform && r.variant == a.variant && r.product == product && r.exclude == exclude;
}

// ---- free space ----------------------------------------------------------------------

namespace {

struct fs_space {
    dev_t device = 0;
    std::uint64_t free = 0;
    fs::path where;  // the directory measured
};

// The nearest existing directory at or above `dir` (the prefix may not exist yet).
result<fs_space> space_of(const fs::path& dir) {
    fs::path p = dir.lexically_normal();
    struct stat st {};
    while (::stat(p.c_str(), &st) != 0) {
        if (!p.has_relative_path()) break;
        p = p.parent_path();
    }
    struct statvfs vfs {};
    if (::statvfs(p.c_str(), &vfs) != 0)
        return make_error(error_code::filesystem, "cannot measure the free space").with_path(p.string());
    fs_space out;
    out.device = st.st_dev;
    out.free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    out.where = p;
    // Tests only: a pretend amount of free space (documented in sync.hpp).
    if (const char* fake = REDIST_TEST_OVERRIDE("REDIST_TEST_FREE_BYTES"); fake && *fake)
        out.free = std::strtoull(fake, nullptr, 10);
    return out;
}

std::string mib(std::uint64_t bytes) {
    return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

result<void> check_free_space(const fs::path& prefix, std::uint64_t needed_prefix, const fs::path& cache_dir,
                              std::uint64_t needed_cache) {
    REDIST_TRY(const fs_space at_prefix, space_of(prefix));
    std::uint64_t on_prefix_fs = needed_prefix;
    if (!cache_dir.empty() && needed_cache) {
        REDIST_TRY(const fs_space at_cache, space_of(cache_dir));
        // A cache on its own file system that cannot hold the downloads is
        // bypassed (the download spools beside the stage, with a warning),
        // so those bytes then count against the prefix's file system.
        if (at_cache.device == at_prefix.device || needed_cache > at_cache.free) on_prefix_fs += needed_cache;
    }
    if (on_prefix_fs > at_prefix.free)
        return make_error(error_code::filesystem, "not enough free space: " + mib(on_prefix_fs) + " needed (archives " +
                                                      "and their unpacked contents, at least), " + mib(at_prefix.free) +
                                                      " free")
            .with_path(at_prefix.where.string());
    return {};
}

std::uint64_t unpacked_size_estimate(std::uint64_t archive_size) noexcept {
    const std::uint64_t half = archive_size / 2 + archive_size % 2;
    return archive_size > UINT64_MAX - half ? UINT64_MAX : archive_size + half;
}

// ---- installing ------------------------------------------------------------------------------

namespace {

struct job_result {
    std::optional<staged_component> staged;
    std::optional<error> failure;
    component_report report;
};

// The byte sink of fetch: the unpacker writing a fresh stage. Its failures
// wait for the hash (see byte_sink::write): a corrupt download must be
// reported as an integrity failure, not as whatever the decoder tripped over.
class stage_sink final : public byte_sink {
public:
    // max_output: the unpacker's cap on decoded bytes (see install_request::max_expansion); 0 = none.
    // digest_tar: the decoded tar is digested (unpack_options), only for a
    // copy checked by its tar: by its hash list with tar_piece_bytes, else
    // by its SHA-256. Nothing else reads that digest.
    stage_sink(const prefix_lock& lock, const artifact& a, std::string source, std::uint64_t max_output,
               std::shared_ptr<run_budget> budget, bool digest_tar, std::uint64_t tar_piece_bytes)
        : lock_(lock),
          artifact_(a),
          source_(std::move(source)),
          max_output_(max_output),
          budget_(std::move(budget)),
          tar_piece_bytes_(tar_piece_bytes),
          digest_tar_(digest_tar) {}
    ~stage_sink() override { discard(); }

    result<void> restart() override {
        discard();
        REDIST_TRY(stage_, make_stage(lock_.prefix(), artifact_.component));
        unpack_options options;
        options.format = artifact_.format;
        options.source = source_;
        options.max_output_bytes = max_output_;
        options.budget = budget_;  // one thread/memory budget per run
        options.size_hint = artifact_.size;
        options.tar_piece_bytes = tar_piece_bytes_;
        options.digest_tar = digest_tar_;
        REDIST_TRY(unpacker_, stream_unpacker::start(stage_, options));
        failure_.reset();
        return {};
    }

    result<void> write(const std::byte* data, std::size_t size) override {
        if (failure_ || !unpacker_) return {};
        auto written = unpacker_->write(data, size);
        if (!written.ok()) {
            // Keep hashing: the hash decides what this failure means.
            failure_ = std::move(written).error_value();
            unpacker_->cancel();
        }
        return {};
    }

    // After the stream verified the bytes: the unpacker's result.
    result<std::vector<unpacked_entry>> finish() {
        if (failure_) return std::move(*failure_);
        if (!unpacker_) return make_error(error_code::internal, "unpacker not started");
        auto entries = unpacker_->finish();
        if (entries.ok()) {
            tar_digest_ = unpacker_->tar_digest();
            debug_pause("after-unpack");
        }
        return entries;
    }

    const fs::path& stage() const { return stage_; }
    // After a successful finish() of a tar.zst: the decoded tar's digest
    // (its SHA-256, or its hash list with tar_piece_bytes).
    const std::string& tar_digest() const { return tar_digest_; }
    void keep_stage() { stage_.clear(); }

private:
    void discard() noexcept {
        if (unpacker_) unpacker_->cancel();
        unpacker_.reset();
        if (!stage_.empty()) {
            std::error_code ec;
            fs::remove_all(stage_, ec);
            stage_.clear();
        }
    }

    const prefix_lock& lock_;
    const artifact& artifact_;
    std::string source_;
    std::uint64_t max_output_ = 0;
    std::shared_ptr<run_budget> budget_;
    std::uint64_t tar_piece_bytes_ = 0;
    bool digest_tar_ = false;
    fs::path stage_;
    std::unique_ptr<stream_unpacker> unpacker_;
    std::optional<error> failure_;
    std::string tar_digest_;
};

// The cap on an unverified archive's decoded output (see install_request::max_expansion).
std::uint64_t output_cap(const install_request& request, std::uint64_t compressed_size) {
    if (request.max_expansion == 0) return 0;
    const std::uint64_t ratio = request.max_expansion;
    const std::uint64_t scaled = compressed_size > UINT64_MAX / ratio ? UINT64_MAX : compressed_size * ratio;
    return std::max(scaled, request.min_expansion_bytes);
}

}  // namespace

void fill_receipt(const release_plan& release, const artifact& a, const std::string& url, receipt& r) {
    r.product = release.product;
    r.release_label = release.label;
    r.component = a.component;
    if (auto v = release.component_versions.find(a.component); v != release.component_versions.end())
        r.component_version = v->second;
    r.platform = a.platform;
    r.variant = a.variant;
    r.url = url;
    r.archive_sha256 = a.sha256;
    r.archive_size = a.size;
}

namespace {

// Where the base has an artifact: as the lock recorded it, else resolved
// against the manifest's directory.
std::string base_artifact_url(const release_plan& release, const artifact& a) {
    if (auto it = release.locked_urls.find(a.relative_path); it != release.locked_urls.end()) return it->second;
    return artifact_url(release.artifact_base_url, a.relative_path, a.sha256);
}

// The sources of an artifact, in the order they are tried: mirrors, then the base.
std::vector<source> artifact_sources(const install_request& request, const release_plan& release, const artifact& a) {
    std::vector<source> sources;
    for (const auto& m : request.sources.mirrors)
        sources.push_back(make_source(mirror_artifact_url(m, release.product, a.relative_path, a.sha256)));
    sources.push_back(make_source(base_artifact_url(release, a)));
    return sources;
}

// What the lock pins of `a`'s copy in `pins` (release_plan's
// locked_tar_sha256, locked_tar_list_sha256 or locked_tree_sha256), or ""
// when it pins none (or there is no lock).
std::string locked_pin(const std::map<std::string, std::string>& pins, const artifact& a) {
    for (const auto& [sha256, tar] : pins)
        if (equal_hex(sha256, a.sha256)) return tar;
    return {};
}

// The mirror's recompressed copy of `a` that may be installed instead of it
// (recompressed.hpp), or null: none, or --no-recompressed.
const recompressed_copy* usable_copy(const install_request& request, const release_plan& release, const artifact& a) {
    if (!request.use_recompressed || release.copy_base_url.empty()) return nullptr;
    // From a lock: only where the lock pins the decoded tar (the copy must match it).
    if (release.from_lock && locked_pin(release.locked_tar_sha256, a).empty()) return nullptr;
    for (const auto& c : release.copies)
        if (equal_hex(c.original_sha256, a.sha256)) return &c;
    return nullptr;
}

// One artifact, from its sources into a stage. The plan (plan_install) is
// the only classification: the job starts at the phase its planned_artifact
// names (cached tree, cached blob, download, with the mirror's copy first
// where from_copy says so) and only falls through, on runtime facts, to the
// next: a cached tree that cannot be trusted to the blob (where there is
// one, else the download), a blob that fails re-verification to the download.
class artifact_job {
public:
    artifact_job(const install_request& request, const release_plan& release, const prefix_lock& lock,
                 const std::optional<blob_cache>& cache, const artifact& a, const planned_artifact& planned,
                 std::atomic<bool>& abort_all, job_result& out, std::vector<source> sources)
        : request_(request),
          release_(release),
          lock_(lock),
          cache_(cache),
          a_(a),
          action_(planned.action),
          from_copy_(planned.from_copy),
          abort_all_(abort_all),
          out_(out),
          sources_(std::move(sources)) {}

    void progress(fetch_stage stage, std::uint64_t done) const {
        if (request_.observer) request_.observer->on_progress({a_.component, stage, done, a_.size});
    }

    // A cancellation is not this component's failure: it was stopped
    // (Ctrl-C, or another component failed first).
    void fail(error e) {
        const bool stopped = e.code == error_code::cancelled;
        out_.failure = std::move(e);
        abort_all_ = true;
        progress(stopped ? fetch_stage::stopped : fetch_stage::failed, 0);
    }

    // Single flight: one process per blob at a time; the others wait here and
    // then find the verified blob (or tree) in the cache.
    result<blob_lock> lock_blob() const {
        if (!cache_) return blob_lock();
        return cache_->lock_blob(a_.sha256, [&] {
            if (request_.observer) request_.observer->on_blob_wait({a_.component});
        });
    }

    // The plan was made before this job held the blob lock. Meanwhile the
    // process that held it (single flight) may have put this archive's
    // verified blob and extracted tree into the cache: a download plan then
    // takes what that process published (its tree, else its blob,
    // re-verified as any) instead of downloading the same bytes a second
    // time. That is the one thing looked up again, and it only saves work: a
    // plan of a cached tree or blob is followed as planned, with its fallbacks.
    plan_action action_under_lock() const {
        if (!cache_) return plan_action::download;
        if (action_ != plan_action::download) return action_;
        if (cache_->has_tree(a_.sha256)) return plan_action::from_cached_tree;
        if (cache_->has_blob(a_.sha256)) return plan_action::from_cached_blob;  // a regular file, not a planted link
        return plan_action::download;
    }

    // The extracted tree of this archive, from an earlier install: placed by
    // reflink/hardlink/copy. nullopt: no tree, or one that cannot be trusted.
    result<std::optional<staged_component>> place_cached_tree() {
        REDIST_TRY(const fs::path stage, make_stage(lock_.prefix(), a_.component));
        auto files = cache_->materialize_tree(a_.sha256, stage, request_.tree_link_mode);
        if (!files.ok() || !*files) {
            std::error_code ec;
            fs::remove_all(stage, ec);
            if (!files.ok()) return std::move(files).error_value();
            return std::optional<staged_component>();
        }
        staged_component staged;
        staged.stage_dir = stage;
        fill_receipt(release_, a_, sanitize_url(sources_.back().url()), staged.new_receipt);
        staged.new_receipt.files = std::move(**files);
        out_.report.from_cache = true;
        out_.report.from_tree = true;
        out_.report.url = sanitize_url(sources_.back().url());
        return std::optional<staged_component>(std::move(staged));
    }

    // The verified blob in the cache, re-verified while it is unpacked. A
    // corrupt blob is dropped (nullopt: download it again).
    result<std::optional<std::vector<unpacked_entry>>> unpack_cached_blob(artifact_stream& stream, stage_sink& sink) {
        const fs::path blob_file = cache_->blob_path(a_.sha256);
        progress(fetch_stage::downloading, 0);
        auto verified = stream.fetch_file(blob_file, "cache:" + blob_file.string());
        auto entries = verified.ok() ? sink.finish()
                                     : result<std::vector<unpacked_entry>>(std::move(verified).error_value());
        if (entries.ok()) {
            out_.report.from_cache = true;
            out_.report.url = sanitize_url(sources_.back().url());
            ::utimensat(AT_FDCWD, blob_file.c_str(), nullptr, 0);  // last used, for prune
            return std::optional(std::move(entries).value());
        }
        const error_code code = entries.error_value().code;
        if (code != error_code::integrity && code != error_code::bad_archive) return std::move(entries).error_value();
        std::error_code ec;
        fs::remove(blob_file, ec);  // a corrupt cache entry is dropped and fetched again
        return std::optional<std::vector<unpacked_entry>>();
    }

    // Mirrors first, then the base, through the one source driver and the
    // one downloader: transient failures retried with backoff, resuming
    // where the bytes so far are kept; wrong bytes or a 404 move on to the
    // next source. Large archives come over several ranged connections at
    // once where the link is slower than the decoder (a CDN caps each
    // connection): they start as one stream, which turns into ranges once it
    // is seen to starve the decoder; small ones, file:// and --connections 1
    // over one. An explicit --connections N splits anything of at least two
    // segments from the first request.
    segment_options split_options() const {
        segment_options segments;
        segments.split_when_starved = request_.connections == 0;
        if (request_.connections == 1) segments.connections = 1;
        if (request_.connections > 1) {
            segments.connections = request_.connections;
            segments.min_total_bytes = 2 * segments.min_segment_bytes;
        }
        return segments;
    }
    bool split_download() const {
        const segment_options segments = split_options();
        return segments.connections > 1 && a_.size >= segments.min_total_bytes;
    }

    result<std::vector<unpacked_entry>> download_archive(artifact_stream& stream, stage_sink& sink) {
        REDIST_TRY_VOID(stream.restart());
        // The spool: the cache's .part (resumable), for every download. A
        // cache that cannot hold it is bypassed with a warning: a split
        // download goes on in a temp spool beside the stage, one stream
        // without a spool. No cache: a temp spool for a split download only
        // (one stream needs none).
        spool_location spool;
        if (cache_) spool.part_file = cache_->partial_path(a_.sha256);
        if (cache_ || split_download()) spool.temp_dir = sink.stage().parent_path();  // the prefix's staging directory
        spool.on_fallback = [this](const error& why) {
            spooled_in_cache_ = false;
            if (request_.observer) request_.observer->on_cache_bypass({a_.component, why});
        };
        // The downloader finds what an earlier run kept (its .part and
        // "<part>.segments") only once it opens its spool: said then, once.
        spool.on_resume = [this, said = false](std::uint64_t present) mutable {
            if (!std::exchange(said, true) && request_.observer)
                request_.observer->on_resume({a_.component, present, a_.size});
        };
        const segment_options segments = split_options();
        source_run run(request_.sources);
        run.observer = request_.observer;
        run.component = a_.component;
        auto fetched = try_sources(
            sources_, run,
            [&](source_attempt& at) {
                progress(fetch_stage::downloading, stream.received());
                // The downloader retries each request itself, through the run's policy and observer.
                at.retried_inside = true;
                const std::string& url = at.from.url();
                return stream.fetch_from(url, request_.transfer, segments, spool,
                                         segment_retries(run, url, &out_.report.requests), at.failure);
            },
            &out_.report.requests);
        if (!fetched.ok()) {
            drop_part_unless_resumable(stream, fetched.error_value());
            error e = std::move(fetched).error_value();
            // A mirror holds only what was mirrored into it: say which archive it lacks.
            if (e.code == error_code::not_found)
                e.message = "no " + a_.platform + (a_.variant ? " " + *a_.variant : std::string()) + " archive of " +
                            a_.component +
                            " at this source (a mirror holds only the platforms and variants mirrored into "
                            "it): " +
                            e.message;
            return e;
        }
        out_.report.url = sanitize_url(sources_[fetched->source].url());
        // The archive is verified: keep it even if unpacking fails (disk full,
        // unsafe entry...), so that a retry needs no download.
        request_.budget->mark("downloaded");
        if (cache_ && spooled_in_cache_) {
            REDIST_TRY_VOID(cache_->publish(a_.sha256));
            published_ = true;
        }
        auto entries = sink.finish();
        request_.budget->mark("unpacked");
        return entries;
    }

    // After a failed download the .part file stays only when a later run can
    // resume it: a network failure part-way, or a run stopped (Ctrl-C).
    void drop_part_unless_resumable(const artifact_stream& stream, const error& e) const {
        const bool resumable = stream.received() < a_.size &&
                               (e.code == error_code::network || e.code == error_code::cancelled);
        if (!cache_ || resumable) return;
        std::error_code ec;
        fs::remove(cache_->partial_path(a_.sha256), ec);
        remove_segment_record(cache_->partial_path(a_.sha256));
    }

    // The unpacked entries become the receipt; the stage is kept for the commit.
    result<staged_component> stage_entries(stage_sink& sink, const std::vector<unpacked_entry>& entries,
                                           bool cacheable) {
        staged_component staged;
        staged.stage_dir = sink.stage();
        fill_receipt(release_, a_, out_.report.url, staged.new_receipt);
        REDIST_TRY_VOID(prepare_stage(staged, entries));
        // The extracted tree is kept the first time its blob is in the cache,
        // so that a cache saved after one cold install (CI) needs no decoding.
        // store_tree hard-links the stage where it can: free on the cold install.
        if (cache_ && cacheable) cache_->store_tree(a_.sha256, staged.stage_dir, staged.new_receipt.files);
        sink.keep_stage();
        return staged;
    }

    // From the archive (the cached blob when from_blob, falling back to the
    // download; else the download) into a stage.
    result<staged_component> unpack_archive(bool from_blob) {
        stage_sink sink(lock_, a_, sanitize_url(sources_.back().url()), output_cap(request_, a_.size), request_.budget,
                        !expected_tar_.empty(), tar_piece_bytes_);
        // Bytes taken on what they decode to must have a decoded digest to match.
        if (checked_by_content_ && expected_tar_.empty() && expected_tree_.empty())
            return make_error(error_code::integrity, "a copy checked by its content has no decoded digest")
                .with_url(sanitize_url(sources_.back().url()));
        artifact_stream stream({a_.size, a_.sha256, checked_by_content_}, sink, request_.budget->threads());
        stream.set_cancel(&abort_all_);
        stream.set_progress([&](std::uint64_t done) { progress(fetch_stage::downloading, done); });
        std::optional<std::vector<unpacked_entry>> entries;
        if (from_blob) {
            REDIST_TRY(entries, unpack_cached_blob(stream, sink));
        }
        if (!entries) {
            REDIST_TRY(entries, download_archive(stream, sink));
        }
        request_.budget->add_time(profile_stage::transfer, stream.hash_ns(), stream.sink_ns(), stream.received());
        if (!expected_tar_.empty())
            REDIST_TRY_VOID(check_decoded("its tar", sink.tar_digest(), expected_tar_, locked_tar_));
        if (!expected_tree_.empty())
            REDIST_TRY_VOID(
                check_decoded("the tree it unpacks to", tree_digest(*entries), expected_tree_, locked_tree_));
        return stage_entries(sink, *entries, out_.report.from_cache || published_);
    }

    // What a copy decodes to (`what`: its tar, or the tree it unpacks to),
    // before its stage may be committed: the digest the mirror recorded, and
    // the one the lock pins when it pins one.
    result<void> check_decoded(const char* what, const std::string& actual, const std::string& recorded,
                               const std::string& locked) const {
        for (const std::string* expected : {&recorded, &locked}) {
            if (expected->empty() || equal_hex(*expected, actual)) continue;
            return make_error(error_code::integrity,
                              std::string(what) + (expected == &locked ? " is not the one the lock pins"
                                                                       : " is not the one the mirror recorded"))
                .with_url(sanitize_url(sources_.back().url()))
                .with_expected_actual(*expected, actual.empty() ? "(none)" : actual);
        }
        return {};
    }

    // A mirror's recompressed copy instead of the original (recompressed.hpp):
    // downloaded as any archive (never through the cache: a copy is trusted on
    // one signed record), checked against its size and, when its record has
    // neither a tree digest nor a hash list, its own SHA-256, and unpacked
    // into its own stage, which is kept only when the tree it unpacks to (or
    // else its decoded tar) is the recorded (and locked) one. Any
    // failure discards that stage, is reported once, and gives nullopt: the
    // original is installed.
    result<std::optional<staged_component>> try_copy(const recompressed_copy& copy) {
        artifact bytes = a_;
        bytes.relative_path = copy.relative_path;
        bytes.sha256 = copy.sha256;
        bytes.size = copy.size;
        bytes.format = archive_format::tar_zst;
        const std::string url = artifact_url(release_.copy_base_url, copy.relative_path, copy.sha256);
        const std::string locked = locked_pin(release_.locked_tar_sha256, a_);
        const std::string locked_list = locked_pin(release_.locked_tar_list_sha256, a_);
        const std::string locked_tree = locked_pin(release_.locked_tree_sha256, a_);
        const std::optional<blob_cache> no_cache;
        job_result copy_out;
        artifact_job job(request_, release_, lock_, no_cache, bytes, planned_artifact{}, abort_all_, copy_out,
                         {make_source(url)});
        // What the copy is checked by, where the record states it and a lock,
        // if any, pins it as well (a lock pins what the record must state,
        // in every form it had): the tree it unpacks to, whose files are
        // digested for the receipt anyway, so no byte is hashed twice; else
        // the tar's hash list (its pieces hashed on all cores); else the
        // tar's SHA-256.
        const bool by_tree = !copy.tree_sha256.empty() && (locked.empty() || !locked_tree.empty());
        const bool by_list = !by_tree && copy.tar_piece_bytes != 0 && (locked.empty() || !locked_list.empty());
        if (by_tree) {
            job.expected_tree_ = copy.tree_sha256;
            job.locked_tree_ = locked_tree;
        } else {
            job.tar_piece_bytes_ = by_list ? copy.tar_piece_bytes : 0;
            job.expected_tar_ = by_list ? copy.tar_list_sha256 : copy.tar_sha256;
            job.locked_tar_ = by_list ? locked_list : locked;
        }
        // The tree or the list checks every byte that lands or is decoded:
        // the copy's own SHA-256, one sequential pass, would vouch for
        // nothing more.
        job.checked_by_content_ = by_tree || by_list;
        std::optional<std::pair<std::string, std::string>> unlike_lock;  // (pinned, recorded)
        for (const auto& [pin, recorded] : {std::pair{&locked, &copy.tar_sha256},
                                            {&locked_list, &copy.tar_list_sha256},
                                            {&locked_tree, &copy.tree_sha256}})
            if (!unlike_lock && !pin->empty() && !equal_hex(*pin, *recorded)) unlike_lock.emplace(*pin, *recorded);
        auto staged = unlike_lock ? result<staged_component>(
                                        make_error(error_code::integrity,
                                                   "the mirror records a tar or tree other than the locked one")
                                            .with_url(sanitize_url(url))
                                            .with_expected_actual(unlike_lock->first, unlike_lock->second))
                                  : job.unpack_archive(/*from_blob=*/false);
        out_.report.requests += copy_out.report.requests;
        if (!staged.ok()) {
            if (abort_all_.load() || staged.error_value().code == error_code::cancelled)
                return std::move(staged).error_value();
            if (request_.observer)
                request_.observer->on_copy_failure({a_.component, sanitize_url(url), std::move(staged).error_value()});
            return std::optional<staged_component>();
        }
        receipt& r = staged->new_receipt;
        r.archive_sha256 = a_.sha256;  // the original stays the archive's identity
        r.archive_size = a_.size;
        r.copy_sha256 = copy.sha256;
        r.tar_sha256 = copy.tar_sha256;
        out_.report.url = copy_out.report.url;
        out_.report.copy_sha256 = copy.sha256;
        return std::optional<staged_component>(std::move(staged).value());
    }

    result<staged_component> run() {
        REDIST_TRY(const blob_lock blob, lock_blob());
        plan_action action = action_under_lock();
        if (action == plan_action::from_cached_tree) {
            REDIST_TRY(auto placed, place_cached_tree());
            if (placed) return std::move(*placed);
            action = cache_->has_blob(a_.sha256) ? plan_action::from_cached_blob : plan_action::download;
        }
        // The copy only where the plan chose it and the download stands: the
        // original's verified bytes at hand beat any copy.
        if (action == plan_action::download && from_copy_) {
            if (const recompressed_copy* copy = usable_copy(request_, release_, a_)) {
                REDIST_TRY(auto staged, try_copy(*copy));
                if (staged) return std::move(*staged);
            }
        }
        return unpack_archive(action == plan_action::from_cached_blob);
    }

private:
    const install_request& request_;
    const release_plan& release_;
    const prefix_lock& lock_;
    const std::optional<blob_cache>& cache_;
    const artifact& a_;
    plan_action action_;  // the plan's: from_cached_tree, from_cached_blob or download
    bool from_copy_;      // the plan's: the mirror's recompressed copy is tried before the download
    std::atomic<bool>& abort_all_;
    job_result& out_;
    std::vector<source> sources_;               // mirrors, then the base (the last resort)
    std::atomic<bool> spooled_in_cache_{true};  // false once the cache was bypassed (on_cache_bypass)
    bool published_ = false;                    // the download is in the cache as a verified blob
    // A copy: how its decoded tar is checked (0: its SHA-256, else its hash
    // list with pieces of this size), the digest its record states, and the
    // one the lock pins ("": none).
    std::uint64_t tar_piece_bytes_ = 0;
    std::string expected_tar_;
    std::string locked_tar_;
    // A copy checked by the tree it unpacks to (tree_digest): the digest its
    // record states and the one the lock pins ("": none). Its tar is not digested.
    std::string expected_tree_;
    std::string locked_tree_;
    // A copy checked by its tree or its hash list: what it decodes to is
    // checked in full (check_decoded) before the stage may be
    // committed, so its own SHA-256 is not computed
    // (expected_artifact::checked_by_content).
    bool checked_by_content_ = false;
};

// Downloads one artifact (cache, then mirrors, then the base URL, with
// retries and resume) into a stage. The archive bytes are read exactly once
// per attempt.
void run_job(const install_request& request, const release_plan& release, const prefix_lock& lock,
             const std::optional<blob_cache>& cache, const planned_artifact& item, std::atomic<bool>& abort_all,
             job_result& out) {
    const auto started = std::chrono::steady_clock::now();
    const artifact& a = release.artifacts[item.artifact];
    artifact_job job(request, release, lock, cache, a, item, abort_all, out, artifact_sources(request, release, a));
    auto staged = job.run();
    if (!staged.ok()) return job.fail(std::move(staged).error_value());
    out.report.files = staged->new_receipt.files.size();
    out.report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    out.staged = std::move(staged).value();
    job.progress(fetch_stage::staged, a.size);  // its part is done: said now, not at the commit
}

// Removes the excluded files from a stage and records them in its receipt.
result<void> apply_exclude(staged_component& staged, const std::vector<std::string>& exclude) {
    staged.new_receipt.exclude = exclude;
    staged.new_receipt.excluded.clear();
    if (exclude.empty()) return {};
    std::vector<installed_file> kept;
    for (auto& f : staged.new_receipt.files) {
        if (!path_excluded(f.path, exclude)) {
            kept.push_back(std::move(f));
            continue;
        }
        // Files in the stage are ours (unpacked or placed there by this run).
        REDIST_TRY(const fs::path target, confined_join(staged.stage_dir, f.path));
        if (::unlink(target.c_str()) != 0 && errno != ENOENT)
            return errno_error("cannot remove an excluded file", target, errno);
        // Directories left empty go too (rmdir fails on the others).
        for (fs::path dir = target.parent_path(); dir != staged.stage_dir && is_strictly_under(staged.stage_dir, dir);
             dir = dir.parent_path())
            if (::rmdir(dir.c_str()) != 0) break;
        staged.new_receipt.excluded.push_back(f.path);
    }
    staged.new_receipt.files = std::move(kept);
    std::sort(staged.new_receipt.excluded.begin(), staged.new_receipt.excluded.end());
    return {};
}

}  // namespace

void add_saturating(std::uint64_t& sum, std::uint64_t n) { sum = n > UINT64_MAX - sum ? UINT64_MAX : sum + n; }

const receipt* current_receipt(const install_request& request, const release_plan& release, const artifact& a,
                               const std::vector<receipt>& receipts) {
    const auto it = std::find_if(receipts.begin(), receipts.end(), [&](const receipt& r) {
        return receipt_current(r, release.product, a, request.exclude);
    });
    return it == receipts.end() ? nullptr : &*it;
}

namespace {

// What the report says of an artifact before its job ran (or instead of it, when unchanged).
component_report initial_report(const release_plan& release, const artifact& a, const receipt* current) {
    component_report cr;
    cr.component = a.component;
    if (auto v = release.component_versions.find(a.component); v != release.component_versions.end())
        cr.version = v->second;
    cr.platform = a.platform;
    cr.variant = a.variant;
    cr.url = current ? current->url : sanitize_url(base_artifact_url(release, a));
    cr.sha256 = a.sha256;
    cr.size = a.size;
    cr.unchanged = current != nullptr;
    if (current) cr.files = current->files.size();
    return cr;
}

// Progress for every component this run (re)installs: committing, then done.
void notify_components(const install_request& request, const install_report& report, fetch_stage stage) {
    if (!request.observer) return;
    for (const auto& r : report.releases)
        for (const auto& c : r.components)
            if (!c.unchanged)
                request.observer->on_progress({c.component, stage, stage == fetch_stage::done ? c.size : 0, c.size});
}

// The first failure of the jobs, a real one before a cancellation.
std::optional<error> first_failure(const std::vector<job_result>& results, const std::vector<std::size_t>& todo) {
    std::optional<error> first;
    for (const std::size_t k : todo) {
        const auto& f = results[k].failure;
        if (f && (!first || first->code == error_code::cancelled)) first = *f;
        if (!f && !results[k].staged && !first) first = make_error(error_code::cancelled, "not installed");
    }
    return first;
}

// Runs the jobs of `todo` (indices into plan.items), largest archive first,
// under the request's budget, and returns their stages with the exclude
// globs applied. On failure every stage under the lock is discarded.
result<std::vector<staged_component>> run_jobs(const install_request& request, const prefix_lock& lock,
                                               const std::optional<blob_cache>& cache, const install_plan& plan,
                                               std::vector<std::size_t> todo, std::vector<job_result>& results) {
    // Largest archive first: with fewer job slots than artifacts (2 cores, 9
    // components) the longest download and decode starts at once instead of
    // after the small ones (longest-processing-time-first scheduling; the
    // decoder pool's bulk lane favours the largest archive the same way).
    std::stable_sort(todo.begin(), todo.end(),
                     [&](std::size_t x, std::size_t y) { return plan.items[x].size > plan.items[y].size; });
    std::vector<std::uint64_t> sizes;
    sizes.reserve(todo.size());
    for (const std::size_t k : todo) sizes.push_back(plan.items[k].size);
    // The run's thread budget (--threads), not every core of the machine.
    const unsigned workers = request.jobs ? request.jobs : default_jobs(sizes, request.budget->threads());
    // Ctrl-C in the tool (install_request::cancel) stops every job as a failed one would.
    std::atomic<bool> local_abort{false};
    std::atomic<bool>& abort_all = request.cancel ? *request.cancel : local_abort;
    for_each_index(todo.size(), workers, &abort_all, [&](std::size_t n) {
        const planned_artifact& item = plan.items[todo[n]];
        const release_plan& release = request.releases[item.release];
        run_job(request, release, lock, cache, item, abort_all, results[todo[n]]);
    });
    std::optional<error> failure = first_failure(results, todo);
    // Stopped from outside after every stage was made: still nothing is committed.
    if (!failure && abort_all.load()) failure = make_error(error_code::cancelled, "interrupted");
    for (const std::size_t k : todo) {
        if (failure) break;
        auto applied = apply_exclude(*results[k].staged, request.exclude);
        if (!applied.ok()) failure = std::move(applied).error_value();
        else results[k].report.files = results[k].staged->new_receipt.files.size();
    }
    if (failure) {
        discard_stages(lock);
        return *failure;
    }
    std::sort(todo.begin(), todo.end());  // the commit sees the request's order
    std::vector<staged_component> staged;
    staged.reserve(todo.size());
    for (const std::size_t k : todo) staged.push_back(std::move(*results[k].staged));
    return staged;
}

}  // namespace

const char* to_string(plan_action action) noexcept {
    switch (action) {
        case plan_action::unchanged: return "unchanged";
        case plan_action::from_cached_tree: return "cached-tree";
        case plan_action::from_cached_blob: return "cached-archive";
        case plan_action::download: return "download";
        case plan_action::remove: return "remove";
    }
    return "download";
}

unsigned default_jobs(const std::vector<std::uint64_t>& archive_sizes, unsigned cores) {
    const unsigned most = std::max(1u, cores);
    std::uint64_t total = 0;
    std::uint64_t largest = 0;
    for (const std::uint64_t size : archive_sizes) {
        add_saturating(total, size);  // hostile sizes saturate
        largest = std::max(largest, size);
    }
    if (largest == 0) return most;
    const std::uint64_t slots = total / largest + (total % largest != 0 ? 1 : 0);
    return static_cast<unsigned>(std::clamp<std::uint64_t>(slots, 1, most));
}

install_plan plan_install(const install_request& request, const std::vector<receipt>& receipts,
                          const blob_cache* cache) {
    install_plan plan;
    std::set<std::pair<std::string, std::string>> named;  // (product, component) the request names
    for (std::size_t r = 0; r < request.releases.size(); ++r) {
        const release_plan& release = request.releases[r];
        for (std::size_t i = 0; i < release.artifacts.size(); ++i) {
            const artifact& a = release.artifacts[i];
            named.emplace(release.product, a.component);
            planned_artifact item;
            item.product = release.product;
            item.component = a.component;
            if (auto v = release.component_versions.find(a.component); v != release.component_versions.end())
                item.version = v->second;
            item.size = a.size;
            item.release = r;
            item.artifact = i;
            item.variant = a.variant;
            for (const auto& old : receipts)
                if (old.product == release.product && old.component == a.component) {
                    item.previous_version = old.component_version;
                    item.previous_variant = old.variant;
                }
            if (!request.reinstall && current_receipt(request, release, a, receipts)) {
                item.action = plan_action::unchanged;
                item.files_known = true;  // it writes none
            } else if (cache && cache->has_tree(a.sha256)) item.action = plan_action::from_cached_tree;
            else if (cache && cache->has_blob(a.sha256)) item.action = plan_action::from_cached_blob;
            if (item.action != plan_action::unchanged)
                add_saturating(plan.unpack_bytes, unpacked_size_estimate(a.size));
            if (item.action == plan_action::download) {
                add_saturating(plan.download_bytes, a.size);
                item.from_copy = usable_copy(request, release, a) != nullptr;
            }
            plan.items.push_back(std::move(item));
        }
    }
    if (request.keep_unlisted) return plan;
    for (const auto& r : receipts) {  // sorted by (product, component): so are the removals
        if (named.count({r.product, r.component})) continue;
        planned_artifact item;
        item.action = plan_action::remove;
        item.product = r.product;
        item.component = r.component;
        item.version = r.component_version;
        item.variant = r.variant;
        item.release_label = r.release_label;
        item.files = r.files.size();
        item.files_known = true;
        plan.items.push_back(std::move(item));
    }
    return plan;
}

result<kept_downloads> kept_in_cache(const install_request& request) {
    REDIST_TRY(const auto cache, blob_cache::open_if_possible(request.sources.cache_dir, request.sources.shared_cache));
    if (!cache) return kept_downloads{};
    REDIST_TRY(const receipt_scan scan, scan_receipts(fs::absolute(request.prefix).lexically_normal()));
    kept_downloads kept;
    for (const auto& item : plan_install(request, scan.receipts, &*cache).items) {
        if (item.action == plan_action::unchanged || item.action == plan_action::remove) continue;
        const artifact& a = request.releases[item.release].artifacts[item.artifact];
        add_saturating(kept.total, a.size);
        if (item.action == plan_action::from_cached_tree || cache->has_blob(a.sha256)) {  // nothing to download
            add_saturating(kept.bytes, a.size);
            continue;
        }
        const std::uint64_t partial = resumable_bytes(cache->partial_path(a.sha256), a.size);
        add_saturating(kept.bytes, partial);
        add_saturating(kept.partial, partial);
    }
    return kept;
}

// install(), or (commit false) everything before the commit: the stages
// are made (and the cache keeps their trees) and then discarded.
result<install_report> install_stages(const install_request& request_in, bool commit) {
    install_request request = request_in;
    if (!request.budget) {
        REDIST_TRY(request.budget, make_run_budget());
    }
    REDIST_TRY(prefix_lock lock, prefix_lock::acquire(request.prefix, [&] {
                   if (request.observer) request.observer->on_lock_wait({request.prefix});
               }));
    // A receipt that cannot be read blocks only its own component: fetching
    // that one again replaces it (commit_stages), the others go on.
    REDIST_TRY(const receipt_scan scan, scan_receipts(lock.prefix()));
    REDIST_TRY(const auto cache, blob_cache::open_if_possible(request.sources.cache_dir, request.sources.shared_cache));
    const install_plan plan = plan_install(request, scan.receipts, cache ? &*cache : nullptr);
    // An exact install cannot tell whether a component it cannot read is named: as for remove, refused.
    for (const auto& u : scan.unreadable)
        if (!request.keep_unlisted && !std::any_of(plan.items.begin(), plan.items.end(), [&](const auto& item) {
                return item.component == u.component && (u.product.empty() || item.product == u.product);
            }))
            return u.why;
    // Without a cache the download streams: only the unpacked bytes land on disk.
    if (request.check_free_space)
        REDIST_TRY_VOID(check_free_space(request.prefix, plan.unpack_bytes, cache ? cache->root() : fs::path(),
                                         plan.download_bytes));

    install_report out;
    out.prefix = lock.prefix();
    std::vector<job_result> results(plan.items.size());
    std::vector<std::size_t> todo;
    std::vector<component_ref> remove;
    for (std::size_t k = 0; k < plan.items.size(); ++k) {
        const planned_artifact& item = plan.items[k];
        if (item.action == plan_action::remove) {
            out.removed.push_back({item.product, item.component, item.version, item.release_label, item.files});
            remove.push_back({item.product, item.component});
            continue;
        }
        const release_plan& release = request.releases[item.release];
        const artifact& a = release.artifacts[item.artifact];
        const receipt* current = item.action == plan_action::unchanged
                                     ? current_receipt(request, release, a, scan.receipts)
                                     : nullptr;
        results[k].report = initial_report(release, a, current);
        results[k].report.previous_version = item.previous_version;
        results[k].report.previous_variant = item.previous_variant;
        if (!current) {
            todo.push_back(k);
        } else if (request.observer) {
            request.observer->on_progress({a.component, fetch_stage::unchanged, a.size, a.size});
        }
    }
    REDIST_TRY(std::vector<staged_component> staged, run_jobs(request, lock, cache, plan, todo, results));
    if (!commit) {
        discard_stages(lock);
        return out;
    }
    for (const auto& release : request.releases) out.releases.push_back({release.product, release.label, {}});
    for (std::size_t k = 0; k < plan.items.size(); ++k)
        if (plan.items[k].action != plan_action::remove)
            out.releases[plan.items[k].release].components.push_back(std::move(results[k].report));
    if (staged.empty() && remove.empty()) return out;
    notify_components(request, out, fetch_stage::committing);
    debug_pause("before-commit");
    REDIST_TRY_VOID(commit_stages_removing(lock, std::move(staged), remove, request.overwrite_unowned));
    request.budget->mark("committed");
    notify_components(request, out, fetch_stage::done);
    return out;
}

result<install_report> install(const install_request& request) { return install_stages(request, true); }

}  // namespace redist
