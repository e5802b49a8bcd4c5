// Resolving a release: the index, the manifest (mirrors first, cached,
// retried) and the CUDA variant rule. See include/redist/resolve.hpp.
#include "redist/resolve.hpp"
#include "model/index_html.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "archive/sha256.hpp"
#include "archive/signing.hpp"
#include "model/recompressed_sidecar.hpp"
#include "model/urls.hpp"
#include "redist/cache.hpp"
#include "redist/observer.hpp"
#include "redist/select.hpp"
#include "redist/suggest.hpp"
#include "redist/version.hpp"
#include "support/hex.hpp"
#include "support/safe_path.hpp"
#include "support/suggest.hpp"
#include "transport/oci.hpp"
#include "transport/sources.hpp"

namespace fs = std::filesystem;

namespace redist {

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

// What a manifest or index URL names wherever it is served:
// ".../cudnn/redist/redistrib_9.19.0.json" -> "cudnn/redist/redistrib_9.19.0.json",
// ".../cudnn/redist/" -> "cudnn/redist/"; "" for any other document (a
// mirror's own records are that mirror's, not the release's).
std::string document_name(std::string_view url) {
    const auto redist = url.rfind("/redist/");
    if (redist == std::string_view::npos) return {};
    const std::string_view file = url.substr(redist + 8);
    const bool index = file.empty();
    if (!index && (!file.starts_with("redistrib_") || !file.ends_with(".json") || file.find('/') != file.npos))
        return {};
    const auto product_start = url.rfind('/', redist - 1);
    if (product_start == std::string_view::npos || product_start + 1 >= redist) return {};
    return std::string(url.substr(product_start + 1));
}

constexpr std::size_t kMaxManifestBytes = 64u << 20;
constexpr std::size_t kMaxIndexBytes = 16u << 20;

// Fetches a small document (index, manifest) through the source driver
// (transient failures retried). Online, a fetched document is remembered in
// the cache (a local source's is not), by its URL and by what it is
// (document_name); offline, only local sources and remembered documents are
// used: the one `url` served, else the same document as another source (a
// mirror) served it last, whose URL then goes to `served_by`. A document
// larger than max_bytes is a bad document ("manifest larger than 64 MiB"),
// not a network failure: retrying or another mirror would not make it right.
result<std::string> fetch_document(const std::string& url, const transfer_options& options,
                                   const source_policy& sources, const std::optional<blob_cache>& cache,
                                   run_observer* observer, const char* what = "manifest",
                                   std::size_t max_bytes = kMaxManifestBytes, std::string* served_by = nullptr) {
    const source from = make_source(url);
    if (offline_skips(from, sources.offline)) {
        if (cache) {
            if (auto doc = cache->load_document(url, max_bytes)) return std::move(*doc);  // sec-cache: bounded
            if (auto doc = cache->load_document_by_name(document_name(url), max_bytes)) {
                if (served_by) *served_by = std::move(doc->url);
                return std::move(doc->body);
            }
        }
        return make_error(error_code::not_found, "offline, and not in the cache").with_url(url);
    }
    std::string text;
    source_run run(sources);
    run.observer = observer;
    // A document is small: a server that does not send it at once is down (fail fast, see transfer.hpp).
    transfer_options short_timeouts = options;
    const auto cap = [](long& seconds, long most) { seconds = seconds <= 0 || seconds > most ? most : seconds; };
    cap(short_timeouts.connect_timeout_seconds, options.document_connect_timeout_seconds);
    cap(short_timeouts.stall_timeout_seconds, options.document_stall_timeout_seconds);
    auto fetched = try_sources({from}, run, [&](source_attempt& at) -> result<void> {
        auto got = fetch_text(at.from.url(), short_timeouts, max_bytes, &at.failure);
        if (got.ok()) {
            text = std::move(got).value();
            return {};
        }
        if (at.failure.too_large)
            return make_error(error_code::bad_manifest,
                              std::string(what) + " larger than " + std::to_string(max_bytes >> 20) + " MiB")
                .with_url(url);
        return std::move(got).error_value();
    });
    if (!fetched.ok()) return std::move(fetched).error_value();
    if (cache && !from.local()) cache->store_document(url, text, document_name(url));
    return text;
}

// The bases to try, in order: mirrors first, then the base URL, then the
// fallback bases (NVIDIA's bin-archive after its classic host).
std::vector<std::string> bases_in_order(const source_policy& sources, const std::string& base_url) {
    std::vector<std::string> out;
    for (const auto& m : sources.mirrors) out.push_back(to_url(m));
    out.push_back(base_url);
    for (const auto& b : sources.fallback_bases)
        if (std::find(out.begin() + static_cast<std::ptrdiff_t>(sources.mirrors.size()), out.end(), b) == out.end())
            out.push_back(b);
    return out;
}

// Every artifact's relative_path resolves against the directory its bytes
// come from (urls.hpp resolve_reference: it may not climb out of the
// origin). An OCI base names blobs by digest. Outcomes: ok | bad_manifest.
result<void> check_references(const resolved_release& release) {
    if (make_source(release.artifact_base_url).by_digest()) return {};
    for (const auto& c : release.parsed.components) {
        for (const auto& a : c.artifacts) {
            auto resolved = resolve_reference(release.artifact_base_url, a.relative_path);
            if (resolved.ok()) continue;
            return make_error(error_code::bad_manifest, resolved.error_value().message)
                .with_source(sanitize_url(release.manifest_url))
                .with_json_path(a.component + "." + a.platform + (a.variant ? "." + *a.variant : "") +
                                ".relative_path");
        }
    }
    return {};
}

// Why a record whose signature is `signature` (nullopt: none served) is not
// signed by a trusted key, or "" when it is (`signer` is then set).
std::string untrusted_because(const source_policy& sources, std::string_view record,
                              const std::optional<std::string>& signature, std::string& signer) {
    if (!signature) return "the record is not signed";
    if (sources.trusted_keys.empty()) return "no key is trusted (--trusted-key, REDIST_TRUSTED_KEYS, trusted-keys)";
    if (signature->size() != kRecompressedSignatureBytes) return "its signature is not 64 bytes";
    const trusted_key* key = find_signer(sources.trusted_keys, record, *signature);
    if (!key) return "its signature is by no trusted key";
    signer = key->fingerprint;
    return {};
}

// The mirror's recompressed-copy record beside the manifest and its
// signature, checked against the manifest and the trusted keys. Absent: no
// copies, silently; anything else wrong, or not signed by a trusted key: no
// copies, one observer event saying why. A copy is only ever an alternative
// to the original, and only on a trusted key's word: a mirror is transport.
void read_recompressed(const release_request& request, const transfer_options& options,
                       const std::optional<blob_cache>& cache, resolved_release& out) {
    const std::string dir = url_directory(out.manifest_url);
    std::string label = label_from_manifest_name(out.manifest_url);
    if (label.empty()) label = out.label;
    // A registry or image layout serves it as a titled layer of the tag (transport/oci.cpp).
    if (label.empty()) return;
    const std::string url = join_url(dir, recompressed_document_name(label));
    const auto give_up = [&](error why) {
        if (request.observer) request.observer->on_copy_failure({"", sanitize_url(url), std::move(why)});
    };
    auto text = fetch_document(url, options, request.sources, cache, request.observer, "recompressed-copy record",
                               kMaxRecompressedBytes);
    if (!text.ok()) {
        if (text.error_value().code != error_code::not_found) give_up(std::move(text).error_value());
        return;
    }
    auto record = parse_recompressed(*text, sanitize_url(url));
    if (!record.ok()) return give_up(std::move(record).error_value());
    auto belongs = check_recompressed_for(*record, out.parsed, out.manifest_sha256, sanitize_url(url));
    if (!belongs.ok()) return give_up(std::move(belongs).error_value());
    // The signature is read only now: a release without copies costs no request for it.
    std::optional<std::string> signature;
    const std::string sig_url = join_url(dir, recompressed_signature_name(label));
    auto sig = fetch_document(sig_url, options, request.sources, cache, request.observer, "recompressed-copy signature",
                              kRecompressedSignatureBytes);
    if (sig.ok()) signature = std::move(sig).value();
    else if (sig.error_value().code != error_code::not_found) return give_up(std::move(sig).error_value());
    std::string signer;
    if (const std::string why = untrusted_because(request.sources, *text, signature, signer); !why.empty())
        return give_up(make_error(error_code::integrity, why).with_url(sanitize_url(url)));
    out.recompressed = std::move(record).value();
    out.recompressed_base_url = dir;
    out.recompressed_signer = std::move(signer);
}

}  // namespace

result<std::vector<std::string>> list_versions(const std::string& base_url, const std::string& product,
                                               const transfer_options& options) {
    return list_versions(base_url, product, options, source_policy{});
}

namespace {

// A product that no source has (HTTP 404, no such directory) is most often a
// typo: `cudnnn` gets "(did you mean 'cudnn'?)" after the last source's error.
error with_product_hint(error e, const std::string& product) {
    if (e.code != error_code::not_found || e.message.find("(did you mean") != std::string::npos) return e;
    const auto& known = known_products();
    if (std::find(known.begin(), known.end(), product) == known.end()) e.message += did_you_mean(product, known);
    return e;
}

}  // namespace

namespace {

// The labels one base lists (a registry's tags, a directory, an HTML index),
// fetched under `sources` (its mirrors say which bases the run may skip).
// `fatal`: a file:// directory that cannot be listed stops the search (the
// other outcomes move on to the next base).
result<std::vector<std::string>> labels_at(const std::string& base, const std::string& product,
                                           const transfer_options& options, const source_policy& sources,
                                           const std::optional<blob_cache>& cache, run_observer* observer,
                                           bool& fatal) {
    const std::string url = index_url(base, product);
    const source from = make_source(url);
    std::vector<std::string> labels;
    if (from.by_digest()) {
        // A registry or an image layout: the repository's tags are the labels.
        if (offline_skips(from, sources.offline))
            return make_error(error_code::not_found, "offline, and not in the cache");
        REDIST_TRY(labels, oci_list_tags(base, product, options));
    } else if (from.lists_directory()) {
        // A directory mirror has no HTML index: list the directory itself.
        const fs::path dir = file_url_path(url);
        std::error_code ec;
        if (!fs::is_directory(dir, ec))
            return make_error(error_code::not_found, "no such product directory").with_url(url);
        std::string html;
        for (const auto& entry : fs::directory_iterator(dir, ec))
            html += "<a href=\"" + entry.path().filename().string() + "\"></a>\n";
        fatal = static_cast<bool>(ec);
        if (ec) return make_error(error_code::filesystem, "cannot list: " + ec.message()).with_path(dir.string());
        labels = parse_index_html(html);
    } else {
        REDIST_TRY(const auto html, fetch_document(url, options, sources, cache, observer, "index", kMaxIndexBytes));
        labels = parse_index_html(html);
    }
    if (labels.empty())
        return make_error(error_code::not_found, "the index lists no redistrib_<version>.json manifests").with_url(url);
    return labels;
}

}  // namespace

result<std::vector<std::string>> list_versions(const std::string& base_url, const std::string& product,
                                               const transfer_options& options, const source_policy& sources,
                                               run_observer* observer) {
    REDIST_TRY(const auto cache, blob_cache::open_if_possible(sources.cache_dir, sources.shared_cache));
    std::optional<error> last_error;
    std::optional<std::vector<std::string>> found;
    const auto bases = bases_in_order(sources, base_url);
    for (std::size_t i = 0; i < bases.size(); ++i) {
        // The first mirror or base that answers; a fallback base (NVIDIA's
        // second host) adds the labels it has besides.
        const bool fallback = i > sources.mirrors.size();
        if (found && !fallback) continue;
        bool fatal = false;
        auto labels = labels_at(bases[i], product, options, sources, cache, observer, fatal);
        if (fatal) return std::move(labels).error_value();
        if (!labels.ok()) {
            last_error = std::move(labels).error_value();
            continue;
        }
        if (!found) {
            found = std::move(labels).value();
            continue;
        }
        for (auto& label : *labels)
            if (std::find(found->begin(), found->end(), label) == found->end()) found->push_back(std::move(label));
    }
    if (found) return std::move(*found);
    return with_product_hint(*last_error, product);
}

namespace {

// With several bases of NVIDIA's (source_policy::fallback_bases): the label
// `spec` names over all of them (the newest match), or `spec` itself when
// none lists one (each base's own index then says why).
std::string label_over_bases(const release_request& request, const transfer_options& options, const std::string& spec) {
    source_policy index_sources = request.sources;
    index_sources.mirrors.clear();
    auto labels = list_versions(request.base_url, request.product, options, index_sources, request.observer);
    if (!labels.ok()) return spec;
    auto label = resolve_version_spec(spec, *labels);
    return label.ok() ? std::move(label).value() : spec;
}

}  // namespace

result<resolved_release> resolve_release(const release_request& request, const transfer_options& options) {
    REDIST_TRY(const auto cache, blob_cache::open_if_possible(request.sources.cache_dir, request.sources.shared_cache));
    resolved_release out;
    std::string text;
    std::string answered_base = request.base_url;
    if (!request.manifest_location.empty()) {
        out.manifest_url = to_url(request.manifest_location);
        REDIST_TRY(text, fetch_document(out.manifest_url, options, request.sources, cache, request.observer, "manifest",
                                        kMaxManifestBytes, &out.cached_from));
    } else {
        if (request.product.empty()) return make_error(error_code::usage, "a product is required");
        std::string spec = request.version_spec.empty() ? "latest" : request.version_spec;
        // One base: the spec as an exact label first (that skips the index
        // entirely), else the base's own index, with the run's retries,
        // timeouts and source health.
        const auto from_base = [&](const std::string& base) -> result<std::string> {
            if (spec != "latest") {
                out.manifest_url = manifest_url(base, request.product, spec);
                auto direct = fetch_document(out.manifest_url, options, request.sources, cache, request.observer,
                                             "manifest", kMaxManifestBytes, &out.cached_from);
                if (direct.ok() || direct.error_value().code != error_code::not_found) return direct;
            }
            bool unlistable = false;  // one base: every failure is this base's answer
            REDIST_TRY(const auto labels,
                       labels_at(base, request.product, options, request.sources, cache, request.observer, unlistable));
            auto label = resolve_version_spec(spec, labels);
            if (!label.ok()) return std::move(label).error_value().with_url(index_url(base, request.product));
            out.manifest_url = manifest_url(base, request.product, *label);
            return fetch_document(out.manifest_url, options, request.sources, cache, request.observer, "manifest",
                                  kMaxManifestBytes, &out.cached_from);
        };
        std::optional<error> last_error;
        const auto bases = bases_in_order(request.sources, request.base_url);
        // The manifest from the first base `attempt` gets it from.
        const auto first_answer = [&](const auto& attempt) {
            for (std::size_t i = 0; i < bases.size(); ++i) {
                auto fetched = attempt(bases[i]);
                if (fetched.ok()) {
                    text = std::move(fetched).value();
                    // A base (not a mirror) answered: its artifacts live beside it.
                    if (i >= request.sources.mirrors.size()) answered_base = bases[i];
                    last_error.reset();
                    return true;
                }
                last_error = std::move(fetched).error_value();
            }
            return false;
        };
        bool found = false;
        if (!request.sources.fallback_bases.empty()) {
            // Several bases of NVIDIA's: an exact label from the first that
            // has it (no index read), else the newest match over all of them.
            found = spec != "latest" && first_answer([&](const std::string& base) {
                        out.manifest_url = manifest_url(base, request.product, spec);
                        return fetch_document(out.manifest_url, options, request.sources, cache, request.observer,
                                              "manifest", kMaxManifestBytes, &out.cached_from);
                    });
            if (!found) spec = label_over_bases(request, options, spec);
        }
        if (!found) first_answer(from_base);
        if (last_error) return with_product_hint(*last_error, request.product);
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
        out.artifact_base_url = url_directory(manifest_url(answered_base, request.product, label_in_name));
    if (!request.product.empty() && !out.parsed.release_product.empty() &&
        out.parsed.release_product != request.product && request.manifest_location.empty()) {
        return make_error(error_code::bad_manifest,
                          "manifest is for product '" + out.parsed.release_product + "', not '" + request.product + "'")
            .with_source(sanitize_url(out.manifest_url))
            .with_json_path("release_product");
    }
    if (!label_in_name.empty() && !out.parsed.release_label.empty() && out.parsed.release_label != label_in_name &&
        request.manifest_location.empty()) {
        return make_error(error_code::bad_manifest,
                          "manifest is for release '" + out.parsed.release_label + "', not '" + label_in_name + "'")
            .with_source(sanitize_url(out.manifest_url))
            .with_json_path("release_label");
    }
    REDIST_TRY_VOID(check_references(out));
    if (request.recompressed) read_recompressed(request, options, cache, out);
    return out;
}

bool is_local_manifest(std::string_view manifest_location) {
    return !manifest_location.empty() && make_source(to_url(manifest_location)).kind() == source_kind::file;
}

// ---- CUDA variant ------------------------------------------------------------------------

namespace {

std::string majors_text(const std::vector<int>& majors) {
    std::string out;
    for (int major : majors) out += (out.empty() ? "" : ", ") + std::to_string(major);
    return out;
}

// No toolkit, and the system driver supports CUDA `driver`: the newest major
// it runs (at most its own) that every variant-only component offers. At its
// own major its minor is preferred, so a minor key above the driver's
// (cuda13.2 on a CUDA 13.0 driver) is taken only where the major has no
// other key (select.cpp variant_rank). None it runs: the newest, which the
// preflight then warns about.
template <typename Selects>
variant_choice driver_choice(const cuda_detection& driver, const std::vector<int>& offered, int newest,
                             const Selects& selects) {
    const std::string found = "no CUDA toolkit found; the system driver supports CUDA " + driver.version + " (" +
                              driver.reason + ")";
    for (auto it = offered.rbegin(); it != offered.rend(); ++it) {
        if (*it > driver.major || !selects(*it).ok()) continue;
        if (*it == driver.major) return {*it, driver.minor, found};
        return {*it, std::nullopt,
                found + "; using CUDA " + std::to_string(*it) +
                    ", the newest variant it runs that every selected component offers (offered: " +
                    majors_text(offered) + ")"};
    }
    return {newest, std::nullopt,
            found + ", but the selected components offer no variant it runs (offered: " + majors_text(offered) +
                "); using CUDA " + std::to_string(newest)};
}

}  // namespace

variant_choice choose_cuda_variant(const manifest& m, const std::string& platform,
                                   const std::vector<std::string>& components,
                                   const std::optional<cuda_version>& explicit_version,
                                   const std::optional<cuda_detection>& detected, std::string_view asked_by) {
    if (explicit_version)
        return {explicit_version->major, explicit_version->minor,
                std::string(asked_by) + " " + to_string(*explicit_version)};
    const std::vector<int> offered = available_cuda_majors(m, platform, components);
    if (offered.empty()) return {std::nullopt, std::nullopt, "the selected artifacts have no CUDA variants"};
    // The newest variant every variant-only component offers, as
    // select_artifacts() defaults (else the newest, which then fails there
    // naming the laggard): one lagging component does not break the default.
    const auto selects = [&](std::optional<int> major) { return select_artifacts(m, {platform, major, components}); };
    const auto common = selects(std::nullopt);
    const int newest = common.ok() && common->cuda_major ? *common->cuda_major : offered.back();
    const std::string offered_text = majors_text(offered);
    if (detected && detected->origin == cuda_origin::driver) return driver_choice(*detected, offered, newest, selects);
    if (detected) {
        const std::string found = "detected CUDA " + detected->version + " (" + detected->reason + ")";
        const bool has = std::find(offered.begin(), offered.end(), detected->major) != offered.end();
        if (has && selects(detected->major).ok()) return {detected->major, detected->minor, found};
        return {newest, std::nullopt,
                found + " but the selected components do not all offer it (offered: " + offered_text +
                    "); using CUDA " + std::to_string(newest)};
    }
    return {newest, std::nullopt,
            "no CUDA toolkit found; using the newest variant every selected component offers (offered: " +
                offered_text + ")"};
}

}  // namespace redist
