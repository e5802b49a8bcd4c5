// The pipeline, end to end. See include/redist/fetch.hpp.
#include "redist/fetch.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include "redist/install.hpp"
#include "redist/unpack.hpp"
#include "redist/urls.hpp"
#include "redist/verify.hpp"
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

}  // namespace

result<std::vector<std::string>> list_versions(const std::string& base_url, const std::string& product,
                                               const transfer_options& options) {
    const std::string url = index_url(base_url, product);
    std::vector<std::string> labels;
    if (is_file_url(url)) {
        // A file:// base has no HTML index: list the directory itself.
        const fs::path dir = file_url_path(url);
        std::error_code ec;
        if (!fs::is_directory(dir, ec))
            return make_error(error_code::not_found, "no such product directory").with_url(url);
        std::string html;
        for (const auto& entry : fs::directory_iterator(dir, ec))
            html += "<a href=\"" + entry.path().filename().string() + "\"></a>\n";
        if (ec) return make_error(error_code::filesystem, "cannot list: " + ec.message()).with_path(dir.string());
        labels = parse_index_html(html);
    } else {
        REDIST_TRY(const std::string html, fetch_text(url, options, 16u << 20));
        labels = parse_index_html(html);
    }
    if (labels.empty())
        return make_error(error_code::not_found, "the index lists no redistrib_<version>.json manifests").with_url(url);
    return labels;
}

result<resolved_release> resolve_release(const release_request& request, const transfer_options& options) {
    resolved_release out;
    std::string text;
    if (!request.manifest_location.empty()) {
        out.manifest_url = to_url(request.manifest_location);
        REDIST_TRY(text, fetch_text(out.manifest_url, options));
    } else {
        if (request.product.empty()) return make_error(error_code::usage, "a product is required");
        const std::string& spec = request.version_spec;
        bool fetched = false;
        if (spec != "latest" && !spec.empty()) {
            // Try the spec as an exact label first: that skips the index entirely.
            out.manifest_url = manifest_url(request.base_url, request.product, spec);
            auto direct = fetch_text(out.manifest_url, options);
            if (direct.ok()) {
                text = std::move(direct).value();
                fetched = true;
            } else if (direct.error_value().code != error_code::not_found) {
                return std::move(direct).error_value();
            }
        }
        if (!fetched) {
            REDIST_TRY(const auto labels, list_versions(request.base_url, request.product, options));
            auto label = resolve_version_spec(spec.empty() ? "latest" : spec, labels);
            if (!label.ok()) return std::move(label).error_value().with_url(index_url(request.base_url, request.product));
            out.manifest_url = manifest_url(request.base_url, request.product, *label);
            REDIST_TRY(text, fetch_text(out.manifest_url, options));
        }
    }
    REDIST_TRY(out.parsed, parse_manifest(text, sanitize_url(out.manifest_url)));
    out.manifest_sha256 = sha256_hex(text);
    out.artifact_base_url = url_directory(out.manifest_url);

    const std::string label_in_name = label_from_manifest_name(out.manifest_url);
    out.label = !out.parsed.release_label.empty() ? out.parsed.release_label : label_in_name;
    out.product = !request.product.empty() ? request.product : out.parsed.release_product;
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

// Downloads one artifact through hash + size accounting into a streaming
// unpacker writing the stage. The archive bytes are read exactly once.
void run_job(const install_request& request, const prefix_lock& lock, const artifact& a,
             std::atomic<bool>& abort_all, job_result& out) {
    const auto started = std::chrono::steady_clock::now();
    const std::string url = join_url(request.artifact_base_url, a.relative_path);
    out.report.url = sanitize_url(url);
    auto fail = [&](error e) {
        out.failure = std::move(e);
        abort_all = true;
        if (request.on_progress) request.on_progress({a.component, fetch_stage::failed, 0, a.size});
    };

    auto stage = make_stage(lock.prefix(), a.component);
    if (!stage.ok()) return fail(std::move(stage).error_value());

    unpack_options options;
    options.format = a.format;
    options.source = sanitize_url(url);
    auto unpacker_result = stream_unpacker::start(*stage, options);
    if (!unpacker_result.ok()) return fail(std::move(unpacker_result).error_value());
    std::unique_ptr<stream_unpacker> unpacker = std::move(unpacker_result).value();

    sha256_hasher hasher;
    std::uint64_t received = 0;
    std::optional<error> unpack_failure;  // unpacking stopped early; hashing goes on to tell why
    auto last_report = std::chrono::steady_clock::now();

    download_callbacks callbacks;
    callbacks.on_response = [&](const response_info& info) -> result<void> {
        // A Content-Length that disagrees with the manifest fails before the body is read.
        if (info.content_length >= 0 && static_cast<std::uint64_t>(info.content_length) != a.size) {
            return make_error(error_code::integrity, "Content-Length disagrees with the manifest's size")
                .with_url(url)
                .with_expected_actual(std::to_string(a.size), std::to_string(info.content_length));
        }
        if (request.on_progress) request.on_progress({a.component, fetch_stage::downloading, 0, a.size});
        return {};
    };
    callbacks.on_data = [&](const std::byte* data, std::size_t size) -> result<void> {
        if (abort_all) return make_error(error_code::cancelled, "cancelled because another artifact failed");
        received += size;
        if (received > a.size) {
            return make_error(error_code::integrity, "server sent more bytes than the manifest's size")
                .with_url(url)
                .with_expected_actual(std::to_string(a.size), "at least " + std::to_string(received));
        }
        hasher.update(data, size);
        if (!unpack_failure) {
            auto written = unpacker->write(data, size);
            if (!written.ok()) {
                unpack_failure = std::move(written).error_value();
                unpacker->cancel();
            }
        }
        if (request.on_progress) {
            const auto now = std::chrono::steady_clock::now();
            if (now - last_report > std::chrono::milliseconds(200) || received == a.size) {
                last_report = now;
                request.on_progress({a.component, fetch_stage::downloading, received, a.size});
            }
        }
        return {};
    };

    auto downloaded = download(url, request.transfer, callbacks);
    if (!downloaded.ok()) {
        unpacker->cancel();
        return fail(std::move(downloaded).error_value());
    }
    // Integrity first: a corrupt download is reported as such, even when the
    // decoder noticed it before the hash did.
    auto integrity = check_integrity(a.size, a.sha256, received, hasher.finish_hex(), sanitize_url(url));
    if (!integrity.ok()) {
        unpacker->cancel();
        return fail(std::move(integrity).error_value());
    }
    if (unpack_failure) return fail(std::move(*unpack_failure));
    auto entries = unpacker->finish();
    if (!entries.ok()) return fail(std::move(entries).error_value());

    staged_component staged;
    staged.stage_dir = *stage;
    receipt& r = staged.new_receipt;
    r.product = request.product;
    r.release_label = request.release_label;
    r.component = a.component;
    if (auto v = request.component_versions.find(a.component); v != request.component_versions.end())
        r.component_version = v->second;
    r.platform = a.platform;
    r.variant = a.variant;
    r.url = sanitize_url(url);
    r.archive_sha256 = a.sha256;
    r.archive_size = a.size;
    auto prepared = prepare_stage(staged, *entries);
    if (!prepared.ok()) return fail(std::move(prepared).error_value());

    out.report.files = r.files.size();
    out.report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
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
                run_job(request, lock, request.artifacts[i], abort_all, results[i]);
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
        REDIST_TRY_VOID(commit_stages(lock, std::move(staged)));
        for (const std::size_t i : todo)
            if (request.on_progress)
                request.on_progress({results[i].report.component, fetch_stage::done, results[i].report.size,
                                     results[i].report.size});
    }
    for (auto& r : results) report.components.push_back(std::move(r.report));
    return report;
}

}  // namespace redist
