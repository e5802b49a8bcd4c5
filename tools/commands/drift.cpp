// Drift watching for `redist fetch`: after a manifest is resolved, compare
// its SHA-256 with what the same URL served last time (the cache's history),
// print a short structured diff when it changed, and fail under --strict or
// a lock file. After an install, remember every artifact's URL and hash.
#include <cstdio>

#include "commands/project_commands.hpp"
#include "redist/drift.hpp"
#include "redist/fetch.hpp"
#include "redist/urls.hpp"

namespace redist_tools {

namespace {

std::optional<redist::drift_store> open_store(const source_options& source, bool quiet) {
    const auto policy = source.policy();
    if (!policy.cache_dir) return std::nullopt;  // --no-cache: nothing is remembered
    auto store = redist::drift_store::open(*policy.cache_dir);
    if (!store.ok()) {
        if (!quiet)
            std::fprintf(stderr, "%s: warning: drift history unavailable: %s\n", tool_name.c_str(),
                         store.error_value().describe().c_str());
        return std::nullopt;
    }
    return std::move(*store);
}

void warn(bool quiet, const redist::error& e) {
    if (!quiet) std::fprintf(stderr, "%s: warning: drift history: %s\n", tool_name.c_str(), e.describe().c_str());
}

}  // namespace

redist::result<void> watch_manifest_drift(const source_options& source, bool strict, bool quiet,
                                          const redist::resolved_release& release) {
    const std::string& url = release.manifest_url;
    const std::string& sha256 = release.manifest_sha256;
    const std::string& text = release.manifest_text;  // parsed and validated: release.parsed
    auto store = open_store(source, quiet);
    if (!store) return {};
    const std::string shown = redist::sanitize_url(url);
    auto check = store->check(url, sha256);
    if (!check.ok()) {
        warn(quiet, check.error_value());
        return {};
    }
    if (check->corrupt_history && !quiet)
        std::fprintf(stderr, "%s: warning: the drift history of %s was unreadable; starting it over\n",
                     tool_name.c_str(), shown.c_str());
    if (check->changed) {
        const auto& prev = *check->previous;
        std::fprintf(stderr, "%s: %s: upstream drift: the manifest at %s changed since %s (sha256 %s -> %s)\n",
                     tool_name.c_str(), strict ? "error" : "warning", shown.c_str(), prev.last_seen.c_str(),
                     prev.sha256.c_str(), sha256.c_str());
        const auto old_text = store->load_document(prev.sha256);
        auto old_manifest = old_text ? redist::parse_manifest(*old_text, shown)
                                     : redist::result<redist::manifest>(
                                           redist::make_error(redist::error_code::not_found, "not kept"));
        if (old_manifest.ok()) {
            const auto d = redist::diff_manifests(*old_manifest, release.parsed);
            if (d.empty()) std::fprintf(stderr, "  no component, version or artifact differs (other fields changed)\n");
            print_manifest_diff(stderr, d, "  ");
        } else {
            std::fprintf(stderr, "  (the previous manifest's bytes are not in the cache; no detailed diff)\n");
        }
        if (strict)
            // Not recorded: a strict run keeps failing until a non-strict run accepts the new manifest.
            return redist::make_error(redist::error_code::integrity,
                                      "upstream manifest drifted (an error under --strict or with a lock file)")
                .with_url(shown)
                .with_expected_actual(prev.sha256, sha256);
    }
    if (auto kept = store->keep_document(text); !kept.ok()) warn(quiet, kept.error_value());
    if (auto rec = store->record(url, sha256, text.size()); !rec.ok()) warn(quiet, rec.error_value());
    return {};
}

void record_artifacts(const source_options& source, bool quiet, const redist::install_report& report) {
    auto store = open_store(source, quiet);
    if (!store) return;
    for (const auto& c : report.components) {
        if (c.url.empty() || c.unchanged) continue;
        auto check = store->check(c.url, c.sha256);
        if (check.ok() && check->changed && !quiet)
            // The manifest vouched for the new bytes (the install verified them), so this is
            // a note: the file at this URL was replaced since it was last fetched.
            std::fprintf(stderr, "%s: warning: upstream drift: %s now serves sha256 %s (was %s, last seen %s)\n",
                         tool_name.c_str(), redist::sanitize_url(c.url).c_str(), c.sha256.c_str(),
                         check->previous->sha256.c_str(), check->previous->last_seen.c_str());
        if (auto rec = store->record(c.url, c.sha256, c.size); !rec.ok()) warn(quiet, rec.error_value());
    }
}

}  // namespace redist_tools
