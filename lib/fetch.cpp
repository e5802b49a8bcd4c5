// The pipeline, end to end. See include/redist/fetch.hpp.
#include "redist/fetch.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "debug_pause.hpp"
#include "redist/cache.hpp"
#include "redist/install.hpp"
#include "redist/sync.hpp"
#include "redist/unpack.hpp"
#include "redist/urls.hpp"
#include "redist/verify.hpp"
#include "safe_path.hpp"
#include "redist/version.hpp"

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
    }
    return "waiting";
}

// ---- resolving ----------------------------------------------------------------------------

namespace {

// "file:///a/b" -> "/a/b" (percent-escapes are not expected in our paths).
std::string file_url_path(std::string_view url) { return std::string(url.substr(7)); }

std::string label_from_manifest_name(std::string_view url) {
    auto name = url.substr(url.rfind('/') + 1);
    constexpr std::string_view prefix = "redistrib_";
    constexpr std::string_view suffix = ".json";
    if (name.starts_with(prefix) && name.ends_with(suffix) && name.size() > prefix.size() + suffix.size())
        return std::string(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
    return {};
}

// A cache that cannot be created is no cache ("a broken cache must not break
// installs"); one that exists but cannot be trusted is an error.
result<std::optional<blob_cache>> open_cache(const source_policy& sources) {
    if (!sources.cache_dir) return std::optional<blob_cache>();
    return blob_cache::open_if_possible(*sources.cache_dir, sources.shared_cache);
}

// Sleeps before retry `attempt` (1-based): exponential backoff with jitter,
// or the server's Retry-After when it gave one.
void backoff(const source_policy& sources, int attempt, const transfer_failure_info& failure) {
    double seconds = sources.initial_backoff_seconds * static_cast<double>(1 << std::min(attempt - 1, 10));
    seconds = std::min(seconds, sources.max_backoff_seconds);
    static thread_local std::minstd_rand rng(static_cast<unsigned>(::getpid()) ^
                                             static_cast<unsigned>(std::hash<std::thread::id>{}(std::this_thread::get_id())));
    seconds *= std::uniform_real_distribution<double>(0.5, 1.0)(rng);
    if (failure.retry_after_seconds) seconds = static_cast<double>(*failure.retry_after_seconds);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

constexpr std::size_t kMaxManifestBytes = 64u << 20;
constexpr std::size_t kMaxIndexBytes = 16u << 20;

// Fetches a small document (index, manifest), retrying transient failures.
// Online, a fetched document is remembered in the cache; offline, only
// file:// URLs and remembered documents are used. A document larger than
// max_bytes is a bad document ("manifest larger than 64 MiB"), not a
// network failure: retrying or another mirror would not make it right.
result<std::string> fetch_document(const std::string& url, const transfer_options& options,
                                   const source_policy& sources, const std::optional<blob_cache>& cache,
                                   const char* what = "manifest", std::size_t max_bytes = kMaxManifestBytes) {
    if (sources.offline && !is_file_url(url)) {
        if (cache) {
            if (auto doc = cache->load_document(url, max_bytes)) return std::move(*doc);  // sec-cache: bounded
        }
        return make_error(error_code::not_found, "offline, and not in the cache").with_url(url);
    }
    for (int attempt = 1;; ++attempt) {
        transfer_failure_info failure;
        auto text = fetch_text(url, options, max_bytes, &failure);
        if (text.ok()) {
            if (cache && !is_file_url(url)) cache->store_document(url, *text);
            return text;
        }
        if (failure.too_large)
            return make_error(error_code::bad_manifest, std::string(what) + " larger than " +
                                                            std::to_string(max_bytes >> 20) + " MiB")
                .with_url(url);
        const bool retry = failure.transient && attempt < sources.attempts_per_source &&
                           (!failure.retry_after_seconds || *failure.retry_after_seconds <= sources.max_retry_after_seconds);
        if (!retry) return text;
        backoff(sources, attempt, failure);
    }
}

bool equal_hex(std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

// The bases to try, in order: mirrors first, then the base URL.
std::vector<std::string> bases_in_order(const source_policy& sources, const std::string& base_url) {
    std::vector<std::string> out;
    for (const auto& m : sources.mirrors) out.push_back(to_url(m));
    out.push_back(base_url);
    return out;
}

}  // namespace

result<std::vector<std::string>> list_versions(const std::string& base_url, const std::string& product,
                                               const transfer_options& options) {
    return list_versions(base_url, product, options, source_policy{});
}

result<std::vector<std::string>> list_versions(const std::string& base_url, const std::string& product,
                                               const transfer_options& options, const source_policy& sources) {
    REDIST_TRY(const auto cache, open_cache(sources));
    std::optional<error> last_error;
    for (const auto& base : bases_in_order(sources, base_url)) {
        const std::string url = index_url(base, product);
        std::vector<std::string> labels;
        if (is_file_url(url)) {
            // A file:// base has no HTML index: list the directory itself.
            const fs::path dir = file_url_path(url);
            std::error_code ec;
            if (!fs::is_directory(dir, ec)) {
                last_error = make_error(error_code::not_found, "no such product directory").with_url(url);
                continue;
            }
            std::string html;
            for (const auto& entry : fs::directory_iterator(dir, ec))
                html += "<a href=\"" + entry.path().filename().string() + "\"></a>\n";
            if (ec) return make_error(error_code::filesystem, "cannot list: " + ec.message()).with_path(dir.string());
            labels = parse_index_html(html);
        } else {
            auto html = fetch_document(url, options, sources, cache, "index", kMaxIndexBytes);
            if (!html.ok()) {
                last_error = std::move(html).error_value();
                continue;
            }
            labels = parse_index_html(*html);
        }
        if (labels.empty()) {
            last_error = make_error(error_code::not_found, "the index lists no redistrib_<version>.json manifests")
                             .with_url(url);
            continue;
        }
        return labels;
    }
    return *last_error;
}

result<resolved_release> resolve_release(const release_request& request, const transfer_options& options) {
    REDIST_TRY(const auto cache, open_cache(request.sources));
    resolved_release out;
    std::string text;
    if (!request.manifest_location.empty()) {
        out.manifest_url = to_url(request.manifest_location);
        REDIST_TRY(text, fetch_document(out.manifest_url, options, request.sources, cache));
    } else {
        if (request.product.empty()) return make_error(error_code::usage, "a product is required");
        const std::string spec = request.version_spec.empty() ? "latest" : request.version_spec;
        std::optional<error> last_error;
        bool fetched = false;
        for (const auto& base : bases_in_order(request.sources, request.base_url)) {
            if (spec != "latest") {
                // Try the spec as an exact label first: that skips the index entirely.
                out.manifest_url = manifest_url(base, request.product, spec);
                auto direct = fetch_document(out.manifest_url, options, request.sources, cache);
                if (direct.ok()) {
                    text = std::move(direct).value();
                    fetched = true;
                    break;
                }
                if (direct.error_value().code != error_code::not_found) {
                    last_error = std::move(direct).error_value();
                    continue;
                }
            }
            source_policy index_sources{{}, request.sources.cache_dir, request.sources.offline};
            index_sources.shared_cache = request.sources.shared_cache;
            auto labels = list_versions(base, request.product, options, index_sources);
            if (!labels.ok()) {
                last_error = std::move(labels).error_value();
                continue;
            }
            auto label = resolve_version_spec(spec, *labels);
            if (!label.ok()) {
                last_error = std::move(label).error_value().with_url(index_url(base, request.product));
                continue;
            }
            out.manifest_url = manifest_url(base, request.product, *label);
            auto manifest_text = fetch_document(out.manifest_url, options, request.sources, cache);
            if (!manifest_text.ok()) {
                last_error = std::move(manifest_text).error_value();
                continue;
            }
            text = std::move(manifest_text).value();
            fetched = true;
            break;
        }
        if (!fetched) return *last_error;
    }
    const auto first_char = text.find_first_not_of(" \t\r\n");
    if (first_char == std::string::npos)
        return make_error(error_code::bad_manifest, "empty manifest").with_source(sanitize_url(out.manifest_url));
    if (text[first_char] == '<')
        return make_error(error_code::bad_manifest, "expected a JSON manifest, got HTML (is the URL right?)")
            .with_source(sanitize_url(out.manifest_url));
    out.manifest_sha256 = sha256_hex(text);
    if (!request.manifest_sha256.empty() && !equal_hex(request.manifest_sha256, out.manifest_sha256)) {
        return make_error(error_code::integrity, "manifest does not match the pinned --manifest-sha256")
            .with_url(out.manifest_url)
            .with_expected_actual(request.manifest_sha256, out.manifest_sha256);
    }
    REDIST_TRY(out.parsed, parse_manifest(text, sanitize_url(out.manifest_url)));
    out.manifest_text = text;
    // Artifacts live beside the manifest -- on the base, even when a mirror
    // answered for the manifest: mirrors are tried first for artifacts anyway,
    // and the base must stay the last resort.
    out.artifact_base_url = url_directory(out.manifest_url);

    const std::string label_in_name = label_from_manifest_name(out.manifest_url);
    out.label = !out.parsed.release_label.empty() ? out.parsed.release_label : label_in_name;
    out.product = !request.product.empty() ? request.product : out.parsed.release_product;
    if (request.manifest_location.empty())
        out.artifact_base_url = url_directory(manifest_url(request.base_url, request.product, label_in_name));
    if (!request.product.empty() && !out.parsed.release_product.empty() &&
        out.parsed.release_product != request.product && request.manifest_location.empty()) {
        return make_error(error_code::bad_manifest, "manifest is for product '" + out.parsed.release_product +
                                                        "', not '" + request.product + "'")
            .with_source(sanitize_url(out.manifest_url))
            .with_json_path("release_product");
    }
    if (!label_in_name.empty() && !out.parsed.release_label.empty() && out.parsed.release_label != label_in_name &&
        request.manifest_location.empty()) {
        return make_error(error_code::bad_manifest, "manifest is for release '" + out.parsed.release_label +
                                                        "', not '" + label_in_name + "'")
            .with_source(sanitize_url(out.manifest_url))
            .with_json_path("release_label");
    }
    return out;
}

// ---- CUDA variant ------------------------------------------------------------------------

variant_choice choose_cuda_variant(const manifest& m, const std::string& platform,
                                   const std::vector<std::string>& components, std::optional<int> explicit_major,
                                   const std::optional<cuda_detection>& detected) {
    const std::vector<int> offered = available_cuda_majors(m, platform, components);
    if (explicit_major) return {explicit_major, "--cuda " + std::to_string(*explicit_major)};
    if (offered.empty()) return {std::nullopt, "the selected artifacts have no CUDA variants"};
    std::string offered_text;
    for (int major : offered) offered_text += (offered_text.empty() ? "" : ", ") + std::to_string(major);
    if (detected) {
        if (std::find(offered.begin(), offered.end(), detected->major) != offered.end())
            return {detected->major, "detected CUDA " + detected->version + " (" + detected->reason + ")"};
        return {offered.back(), "detected CUDA " + detected->version + " (" + detected->reason +
                                    ") but the manifest offers only " + offered_text + "; using the newest"};
    }
    return {offered.back(), "no CUDA toolkit found; using the newest variant in the manifest (offered: " +
                                offered_text + ")"};
}

// ---- installing ------------------------------------------------------------------------------

namespace {

bool receipt_matches(const receipt& r, const install_request& request, const artifact& a) {
    return r.component == a.component && r.archive_sha256 == a.sha256 && r.archive_size == a.size &&
           r.platform == a.platform && r.variant == a.variant && r.product == request.product;
}

struct job_result {
    std::optional<staged_component> staged;
    std::optional<error> failure;
    component_report report;
};

// The streaming state of one artifact: bytes are counted against the
// manifest's size, hashed, appended to the cache's .part file, and fed to the
// unpacker writing the stage -- all in one pass, as they arrive.
class artifact_pipeline {
public:
    // max_output: the unpacker's cap on decoded bytes (see install_request::max_expansion); 0 = none.
    artifact_pipeline(const prefix_lock& lock, const artifact& a, std::string source, std::uint64_t max_output)
        : lock_(lock), artifact_(a), source_(std::move(source)), max_output_(max_output) {}
    ~artifact_pipeline() { discard(); }

    // Starts over from byte 0: a fresh stage, unpacker and hasher, and an
    // empty .part file (when caching).
    result<void> restart() {
        discard();
        REDIST_TRY(stage_, make_stage(lock_.prefix(), artifact_.component));
        unpack_options options;
        options.format = artifact_.format;
        options.source = source_;
        options.max_output_bytes = max_output_;
        REDIST_TRY(unpacker_, stream_unpacker::start(stage_, options));
        hasher_ = sha256_hasher();
        received_ = 0;
        verified_ = false;
        unpack_failure_.reset();
        paused_mid_download_ = false;
        part_dropped_ = false;
        if (!part_path_.empty()) {
            // Never through a planted symlink: a new file of our own.
            REDIST_TRY(part_fd_, open_cache_file(part_path_, cache_file_access::create_fresh));
        }
        return {};
    }

    // Tee into the cache's .part file from now on.
    void set_part_file(const fs::path& path) { part_path_ = path; }

    // Continues from an existing .part file of a previous (killed) process:
    // its bytes go through hash and unpack first. Returns false when there is
    // nothing usable to resume.
    result<bool> resume_from_part_file() {
        // Only a regular file of ours, with one link, is resumed.
        if (part_path_.empty() || !resumable_cache_file(part_path_, artifact_.size)) return false;
        const std::string keep = part_path_.string();
        part_path_.clear();  // restart() must not truncate the bytes we are about to replay
        auto started = restart();
        part_path_ = keep;
        REDIST_TRY_VOID(started);
        REDIST_TRY_VOID(feed_file(part_path_, /*tee=*/false));
        REDIST_TRY(part_fd_, open_cache_file(part_path_, cache_file_access::append));
        return true;
    }

    // Streams a local file (a cached blob or a .part) through the pipeline.
    result<void> feed_file(const fs::path& path, bool tee) {
        // O_NOFOLLOW, regular files only. Anything else is not what we wrote
        // there: treated like corrupt bytes (dropped, fetched again).
        auto opened = open_cache_file(path, cache_file_access::read);
        if (!opened.ok())
            return make_error(error_code::integrity, "unusable cache entry: " + opened.error_value().message)
                .with_path(path.string());
        const int fd = *opened;
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        std::vector<std::byte> buffer(1u << 20);
        const int saved_part_fd = part_fd_;
        if (!tee) part_fd_ = -1;
        result<void> outcome;
        for (;;) {
            const ssize_t n = ::read(fd, buffer.data(), buffer.size());
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                outcome = make_error(error_code::filesystem, std::string("cannot read: ") + std::strerror(errno))
                              .with_path(path.string());
                break;
            }
            if (n == 0) break;
            outcome = feed(buffer.data(), static_cast<std::size_t>(n));
            if (!outcome.ok()) break;
        }
        ::close(fd);
        if (!tee) part_fd_ = saved_part_fd;
        return outcome;
    }

    result<void> feed(const std::byte* data, std::size_t size) {
        if (received_ + size > artifact_.size) {
            return make_error(error_code::integrity, "more bytes than the manifest's size")
                .with_url(source_)
                .with_expected_actual(std::to_string(artifact_.size), "at least " + std::to_string(received_ + size));
        }
        received_ += size;
        hasher_.update(data, size);
        if (part_fd_ >= 0) {
            std::size_t written = 0;
            while (written < size) {
                const ssize_t n = ::write(part_fd_, data + written, size - written);
                if (n < 0 && errno == EINTR) continue;
                if (n < 0) {
                    // Disk full (often because of what we are unpacking): the
                    // cache copy is given up, not the download -- the hash
                    // must still decide about these bytes.
                    drop_part_file();
                    break;
                }
                written += static_cast<std::size_t>(n);
            }
        }
        if (!unpack_failure_) {
            auto written = unpacker_->write(data, size);
            if (!written.ok()) {
                // Keep hashing: a corrupt download must be reported as an
                // integrity failure, not as whatever the decoder tripped over.
                unpack_failure_ = std::move(written).error_value();
                unpacker_->cancel();
            }
        }
        if (!paused_mid_download_ && received_ >= artifact_.size / 2) {
            paused_mid_download_ = true;
            debug_pause("mid-download");
        }
        return {};
    }

    std::uint64_t received() const { return received_; }
    // The cache's .part file holds every byte received (false after a failed write dropped it).
    bool cacheable() const { return !part_dropped_; }
    // The bytes matched the manifest's size and SHA-256 (even if unpacking failed).
    bool verified() const { return verified_; }
    std::uint64_t expected_size() const { return artifact_.size; }

    // After the last byte: size, hash, then the unpacker's result.
    result<std::vector<unpacked_entry>> finish(const std::string& url) {
        if (part_fd_ >= 0) {
            ::close(part_fd_);
            part_fd_ = -1;
        }
        REDIST_TRY_VOID(check_integrity(artifact_.size, artifact_.sha256, received_, hasher_.finish_hex(), url));
        verified_ = true;
        if (unpack_failure_) return std::move(*unpack_failure_);
        auto entries = unpacker_->finish();
        if (entries.ok()) debug_pause("after-unpack");
        return entries;
    }

    const fs::path& stage() const { return stage_; }
    void keep_stage() { stage_.clear(); }

private:
    void drop_part_file() {
        if (part_fd_ >= 0) ::close(part_fd_);
        part_fd_ = -1;
        ::unlink(part_path_.c_str());
        part_dropped_ = true;
    }

    void discard() {
        if (unpacker_) unpacker_->cancel();
        unpacker_.reset();
        if (part_fd_ >= 0) ::close(part_fd_);
        part_fd_ = -1;
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
    fs::path stage_;
    std::unique_ptr<stream_unpacker> unpacker_;
    sha256_hasher hasher_;
    std::uint64_t received_ = 0;
    std::optional<error> unpack_failure_;
    fs::path part_path_;
    int part_fd_ = -1;
    bool paused_mid_download_ = false;
    bool verified_ = false;
    bool part_dropped_ = false;
};

// The cap on an unverified archive's decoded output (see install_request::max_expansion).
std::uint64_t output_cap(const install_request& request, std::uint64_t compressed_size) {
    if (request.max_expansion == 0) return 0;
    const std::uint64_t ratio = request.max_expansion;
    const std::uint64_t scaled =
        compressed_size > UINT64_MAX / ratio ? UINT64_MAX : compressed_size * ratio;
    return std::max(scaled, request.min_expansion_bytes);
}

void fill_receipt(const install_request& request, const artifact& a, const std::string& url, receipt& r) {
    r.product = request.product;
    r.release_label = request.release_label;
    r.component = a.component;
    if (auto v = request.component_versions.find(a.component); v != request.component_versions.end())
        r.component_version = v->second;
    r.platform = a.platform;
    r.variant = a.variant;
    r.url = url;
    r.archive_sha256 = a.sha256;
    r.archive_size = a.size;
}

// Picks the error to report when every source failed: an integrity failure
// (somebody served wrong bytes) or not-found says more than a later transient one.
void remember_failure(std::optional<error>& kept, error e) {
    const auto rank = [](error_code c) {
        return c == error_code::integrity ? 3 : c == error_code::network ? 2 : c == error_code::not_found ? 1 : 4;
    };
    if (!kept || rank(e.code) >= rank(kept->code)) kept = std::move(e);
}

// Downloads one artifact (cache, then mirrors, then the base URL, with
// retries and resume) through the pipeline into a stage. The archive bytes
// are read exactly once per attempt.
void run_job(const install_request& request, const prefix_lock& lock, const std::optional<blob_cache>& cache,
             const artifact& a, std::atomic<bool>& abort_all, job_result& out) {
    const auto started = std::chrono::steady_clock::now();
    auto progress = [&](fetch_stage stage, std::uint64_t done) {
        if (request.on_progress) request.on_progress({a.component, stage, done, a.size});
    };
    auto fail = [&](error e) {
        out.failure = std::move(e);
        abort_all = true;
        progress(fetch_stage::failed, 0);
    };

    std::vector<std::string> urls;
    for (const auto& m : request.sources.mirrors)
        urls.push_back(join_url(join_url(join_url(to_url(m), request.product), "redist"), a.relative_path));
    urls.push_back(join_url(request.artifact_base_url, a.relative_path));

    // Single flight: one process per blob at a time; the others wait here and
    // then find the verified blob in the cache.
    blob_lock blob;
    if (cache) {
        auto locked = cache->lock_blob(a.sha256, [&] {
            if (request.on_blob_wait) request.on_blob_wait(a.component);
        });
        if (!locked.ok()) return fail(std::move(locked).error_value());
        blob = std::move(locked).value();
    }

    auto finish_report = [&] {
        out.report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    };

    // 0. The extracted tree of this archive, from an earlier install: placed
    //    by reflink/hardlink/copy, no decoding at all.
    if (cache) {
        auto stage = make_stage(lock.prefix(), a.component);
        if (!stage.ok()) return fail(std::move(stage).error_value());
        auto files = cache->materialize_tree(a.sha256, *stage, request.tree_link_mode);
        if (!files.ok()) {
            std::error_code ec;
            fs::remove_all(*stage, ec);
            return fail(std::move(files).error_value());
        }
        if (*files) {
            staged_component staged;
            staged.stage_dir = *stage;
            fill_receipt(request, a, sanitize_url(urls.back()), staged.new_receipt);
            staged.new_receipt.files = std::move(**files);
            staged.new_receipt.installed_at.clear();
            out.report.from_cache = true;
            out.report.url = sanitize_url(urls.back());
            out.report.files = staged.new_receipt.files.size();
            finish_report();
            out.staged = std::move(staged);
            return;
        }
        std::error_code ec;
        fs::remove_all(*stage, ec);
    }

    artifact_pipeline pipeline(lock, a, sanitize_url(urls.back()), output_cap(request, a.size));
    std::optional<std::vector<unpacked_entry>> entries;
    std::optional<error> last_error;

    // 1. A verified blob in the cache: re-verified while it is unpacked.
    if (cache && cache->has_blob(a.sha256)) {  // a regular file, not a planted symlink or FIFO
        const fs::path blob_file = cache->blob_path(a.sha256);
        auto restarted = pipeline.restart();
        if (!restarted.ok()) return fail(std::move(restarted).error_value());
        progress(fetch_stage::downloading, 0);
        auto fed = pipeline.feed_file(blob_file, false);
        auto done = fed.ok() ? pipeline.finish("cache:" + blob_file.string())
                             : result<std::vector<unpacked_entry>>(std::move(fed).error_value());
        if (done.ok()) {
            entries = std::move(done).value();
            out.report.from_cache = true;
            ::utimensat(AT_FDCWD, blob_file.c_str(), nullptr, 0);  // last used, for prune
        } else if (done.error_value().code == error_code::integrity || done.error_value().code == error_code::bad_archive) {
            std::error_code ec;
            fs::remove(blob_file, ec);  // a corrupt cache entry is dropped and fetched again
        } else {
            return fail(std::move(done).error_value());
        }
    }

    // 2. Download: mirrors first, then the base; transient failures retried
    //    with backoff, resuming with a Range request where the bytes so far
    //    are kept; wrong bytes or a 404 move on to the next source.
    if (!entries) {
        if (cache) pipeline.set_part_file(cache->partial_path(a.sha256));
        auto resumed = pipeline.resume_from_part_file();
        if (!resumed.ok()) return fail(std::move(resumed).error_value());
        if (!*resumed) {
            auto restarted = pipeline.restart();
            if (!restarted.ok()) return fail(std::move(restarted).error_value());
        }
        for (std::size_t source = 0; source < urls.size() && !entries; ++source) {
            const std::string& url = urls[source];
            if (request.sources.offline && !is_file_url(url)) {
                remember_failure(last_error, make_error(error_code::not_found, "offline, and not in the cache")
                                                 .with_url(url));
                continue;
            }
            std::string validator;  // ETag or Last-Modified of the response the bytes so far came from
            for (int attempt = 1; attempt <= request.sources.attempts_per_source; ++attempt) {
                if (abort_all) return fail(make_error(error_code::cancelled, "cancelled because another artifact failed"));
                const std::uint64_t resume_from = pipeline.received();
                if (resume_from == a.size && resume_from > 0) break;  // a complete .part: just verify it
                bool restart_needed = false;
                download_callbacks callbacks;
                callbacks.on_response = [&](const response_info& info) -> result<void> {
                    const std::string this_validator = !info.etag.empty() ? info.etag : info.last_modified;
                    if (resume_from > 0 && !info.partial) {
                        // The server ignored the Range: start over cleanly with this body.
                        REDIST_TRY_VOID(pipeline.restart());
                    } else if (resume_from > 0 && !validator.empty() && !this_validator.empty() &&
                               validator != this_validator) {
                        restart_needed = true;  // the file changed under us: the bytes so far are worthless
                        return make_error(error_code::network, "the file changed during the download").with_url(url);
                    }
                    validator = this_validator;
                    const std::uint64_t expected_body = a.size - (info.partial ? resume_from : 0);
                    if (info.content_length >= 0 && static_cast<std::uint64_t>(info.content_length) != expected_body) {
                        return make_error(error_code::integrity, "Content-Length disagrees with the manifest's size")
                            .with_url(url)
                            .with_expected_actual(std::to_string(expected_body), std::to_string(info.content_length));
                    }
                    progress(fetch_stage::downloading, pipeline.received());
                    return {};
                };
                auto last_report = std::chrono::steady_clock::now();
                callbacks.on_data = [&](const std::byte* data, std::size_t size) -> result<void> {
                    if (abort_all) return make_error(error_code::cancelled, "cancelled because another artifact failed");
                    REDIST_TRY_VOID(pipeline.feed(data, size));
                    const auto now = std::chrono::steady_clock::now();
                    if (now - last_report > std::chrono::milliseconds(200)) {
                        last_report = now;
                        progress(fetch_stage::downloading, pipeline.received());
                    }
                    return {};
                };
                transfer_failure_info failure;
                ++out.report.requests;
                auto downloaded = download(url, request.transfer, callbacks, resume_from, &failure);
                if (downloaded.ok()) {
                    if (pipeline.received() < a.size) {
                        // The body ended early without a transport error (no Content-Length).
                        remember_failure(last_error, make_error(error_code::integrity, "archive is truncated")
                                                         .with_url(url)
                                                         .with_expected_actual(std::to_string(a.size) + " bytes",
                                                                               std::to_string(pipeline.received()) + " bytes"));
                        auto restarted = pipeline.restart();
                        if (!restarted.ok()) return fail(std::move(restarted).error_value());
                    }
                    break;
                }
                error e = std::move(downloaded).error_value();
                if (e.code == error_code::cancelled) return fail(std::move(e));
                if (e.code == error_code::filesystem) return fail(std::move(e));
                if (restart_needed || e.code == error_code::integrity) {
                    auto restarted = pipeline.restart();
                    if (!restarted.ok()) return fail(std::move(restarted).error_value());
                }
                const bool retry = (failure.transient || restart_needed) && attempt < request.sources.attempts_per_source &&
                                   (!failure.retry_after_seconds ||
                                    *failure.retry_after_seconds <= request.sources.max_retry_after_seconds);
                remember_failure(last_error, e);
                if (!retry) {
                    validator.clear();
                    goto next_source;
                }
                if (request.on_retry)
                    request.on_retry(a.component, "retrying after " + e.describe() + " (attempt " +
                                                      std::to_string(attempt + 1) + " of " +
                                                      std::to_string(request.sources.attempts_per_source) + ")");
                backoff(request.sources, attempt, failure);
            }
            if (pipeline.received() == a.size) {
                auto done = pipeline.finish(sanitize_url(url));
                if (done.ok()) {
                    entries = std::move(done).value();
                    out.report.url = sanitize_url(url);
                    break;
                }
                if (pipeline.verified()) {
                    // The archive is good; unpacking failed (disk full, unsafe entry...).
                    // Keep the verified blob, so a retry needs no download.
                    if (cache && pipeline.cacheable()) (void)cache->publish(a.sha256);
                    return fail(std::move(done).error_value());
                }
                // Wrong bytes from this source: drop them and try the next one.
                remember_failure(last_error, std::move(done).error_value());
                if (last_error->code != error_code::integrity) return fail(std::move(*last_error));
                auto restarted = pipeline.restart();
                if (!restarted.ok()) return fail(std::move(restarted).error_value());
            }
            // A partial download is kept: the next source resumes it (the hash decides at the end).
        next_source:
            if (!entries && request.on_retry && source + 1 < urls.size())
                request.on_retry(a.component, "trying the next source after " +
                                                  (last_error ? last_error->describe() : std::string("a failure")));
        }
        if (!entries) {
            // After a network failure the .part file stays, so the next run resumes it.
            const bool resumable = pipeline.received() < a.size && last_error && last_error->code == error_code::network;
            if (cache && !resumable) {
                std::error_code ec;
                fs::remove(cache->partial_path(a.sha256), ec);
            }
            return fail(last_error ? std::move(*last_error)
                                   : make_error(error_code::not_found, "no source has this artifact"));
        }
        if (cache && pipeline.cacheable()) {
            auto published = cache->publish(a.sha256);
            if (!published.ok()) return fail(std::move(published).error_value());
        }
    } else {
        out.report.url = sanitize_url(urls.back());
    }

    staged_component staged;
    staged.stage_dir = pipeline.stage();
    fill_receipt(request, a, out.report.url, staged.new_receipt);
    auto prepared = prepare_stage(staged, *entries);
    if (!prepared.ok()) return fail(std::move(prepared).error_value());
    // The extracted tree is kept the second time a blob is installed (from
    // the cache), not when it is downloaded: it is a full copy (never hard
    // links to the prefix), which on the cold install would sit on the
    // critical path, and a blob installed once never needs it.
    if (cache && pipeline.cacheable() && out.report.from_cache)
        cache->store_tree(a.sha256, staged.stage_dir, staged.new_receipt.files);

    out.report.files = staged.new_receipt.files.size();
    finish_report();
    pipeline.keep_stage();
    out.staged = std::move(staged);
}

}  // namespace

result<install_report> install(const install_request& request) {
    REDIST_TRY(prefix_lock lock, prefix_lock::acquire(request.prefix, request.on_lock_wait));
    REDIST_TRY(const std::vector<receipt> receipts, read_receipts(lock.prefix()));

    install_report report;
    report.prefix = lock.prefix();
    report.product = request.product;
    report.release_label = request.release_label;

    std::vector<job_result> results(request.artifacts.size());
    std::vector<std::size_t> todo;
    for (std::size_t i = 0; i < request.artifacts.size(); ++i) {
        const artifact& a = request.artifacts[i];
        component_report& cr = results[i].report;
        cr.component = a.component;
        if (auto v = request.component_versions.find(a.component); v != request.component_versions.end())
            cr.version = v->second;
        cr.platform = a.platform;
        cr.variant = a.variant;
        cr.url = sanitize_url(join_url(request.artifact_base_url, a.relative_path));
        cr.sha256 = a.sha256;
        cr.size = a.size;
        const auto existing = std::find_if(receipts.begin(), receipts.end(),
                                           [&](const receipt& r) { return receipt_matches(r, request, a); });
        if (!request.force && existing != receipts.end()) {
            cr.unchanged = true;
            cr.files = existing->files.size();
            cr.url = existing->url;
            if (request.on_progress) request.on_progress({a.component, fetch_stage::unchanged, a.size, a.size});
            continue;
        }
        todo.push_back(i);
    }

    REDIST_TRY(const auto cache, open_cache(request.sources));

    // A small pool: each worker takes the next artifact. Each artifact's own
    // pipeline already runs on several threads (see unpack.hpp).
    std::atomic<bool> abort_all{false};
    std::atomic<std::size_t> next{0};
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const std::size_t workers = std::min<std::size_t>(todo.size(), request.jobs ? request.jobs : cores);
    std::vector<std::thread> pool;
    for (std::size_t w = 0; w < workers; ++w) {
        pool.emplace_back([&] {
            for (std::size_t k = next++; k < todo.size() && !abort_all; k = next++) {
                const std::size_t i = todo[k];
                run_job(request, lock, cache, request.artifacts[i], abort_all, results[i]);
            }
        });
    }
    for (auto& t : pool) t.join();

    // Report the first real failure (not the "cancelled because another failed" ones).
    std::optional<error> first_failure;
    for (const std::size_t i : todo) {
        auto& f = results[i].failure;
        if (f && (!first_failure || first_failure->code == error_code::cancelled)) first_failure = *f;
    }
    if (!first_failure) {
        for (const std::size_t i : todo)
            if (!results[i].staged) first_failure = make_error(error_code::cancelled, "not installed");
    }
    if (first_failure) {
        discard_stages(lock);
        return *first_failure;
    }

    std::vector<staged_component> staged;
    for (const std::size_t i : todo) staged.push_back(std::move(*results[i].staged));
    if (!staged.empty()) {
        for (const std::size_t i : todo)
            if (request.on_progress)
                request.on_progress({results[i].report.component, fetch_stage::committing, 0, results[i].report.size});
        debug_pause("before-commit");
        REDIST_TRY_VOID(commit_stages(lock, std::move(staged), request.force));
        for (const std::size_t i : todo)
            if (request.on_progress)
                request.on_progress({results[i].report.component, fetch_stage::done, results[i].report.size,
                                     results[i].report.size});
    }
    for (auto& r : results) report.components.push_back(std::move(r.report));
    return report;
}

// ---- staging without committing (install_all, lib/sync.cpp) -------------------------
// The first half of install(): the same jobs, under a lock the caller holds,
// with the stages handed back instead of committed; then the exclude globs
// are applied to the stages.

namespace {

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
            return make_error(error_code::filesystem, std::string("cannot remove an excluded file: ") +
                                                          std::strerror(errno))
                .with_path(target.string());
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

result<staged_install> stage_install(const install_request& request, const prefix_lock& lock,
                                     const std::vector<receipt>& receipts, const std::vector<std::string>& exclude) {
    staged_install out;
    out.report.prefix = lock.prefix();
    out.report.product = request.product;
    out.report.release_label = request.release_label;

    std::vector<job_result> results(request.artifacts.size());
    std::vector<std::size_t> todo;
    for (std::size_t i = 0; i < request.artifacts.size(); ++i) {
        const artifact& a = request.artifacts[i];
        component_report& cr = results[i].report;
        cr.component = a.component;
        if (auto v = request.component_versions.find(a.component); v != request.component_versions.end())
            cr.version = v->second;
        cr.platform = a.platform;
        cr.variant = a.variant;
        cr.url = sanitize_url(join_url(request.artifact_base_url, a.relative_path));
        cr.sha256 = a.sha256;
        cr.size = a.size;
        const auto existing = std::find_if(receipts.begin(), receipts.end(), [&](const receipt& r) {
            return receipt_current(r, request.product, a, exclude);
        });
        if (!request.force && existing != receipts.end()) {
            cr.unchanged = true;
            cr.files = existing->files.size();
            cr.url = existing->url;
            if (request.on_progress) request.on_progress({a.component, fetch_stage::unchanged, a.size, a.size});
            continue;
        }
        todo.push_back(i);
    }

    REDIST_TRY(const auto cache, open_cache(request.sources));
    std::atomic<bool> abort_all{false};
    std::atomic<std::size_t> next{0};
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const std::size_t workers = std::min<std::size_t>(todo.size(), request.jobs ? request.jobs : cores);
    std::vector<std::thread> pool;
    for (std::size_t w = 0; w < workers; ++w) {
        pool.emplace_back([&] {
            for (std::size_t k = next++; k < todo.size() && !abort_all; k = next++) {
                const std::size_t i = todo[k];
                run_job(request, lock, cache, request.artifacts[i], abort_all, results[i]);
            }
        });
    }
    for (auto& t : pool) t.join();

    std::optional<error> first_failure;
    for (const std::size_t i : todo) {
        auto& f = results[i].failure;
        if (f && (!first_failure || first_failure->code == error_code::cancelled)) first_failure = *f;
        if (!f && !results[i].staged && !first_failure) first_failure = make_error(error_code::cancelled, "not installed");
    }
    for (const std::size_t i : todo) {
        if (first_failure) break;
        auto applied = apply_exclude(*results[i].staged, exclude);
        if (!applied.ok()) first_failure = std::move(applied).error_value();
        else results[i].report.files = results[i].staged->new_receipt.files.size();
    }
    if (first_failure) {
        discard_stages(lock);
        return *first_failure;
    }
    for (const std::size_t i : todo) out.staged.push_back(std::move(*results[i].staged));
    for (auto& r : results) out.report.components.push_back(std::move(r.report));
    return out;
}

}  // namespace redist
