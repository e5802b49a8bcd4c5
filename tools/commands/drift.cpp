// Drift watching for `redist fetch`: after a manifest is resolved, compare
// its SHA-256 with what the same URL served last time (the cache's history),
// print a short structured diff when it changed, and fail under --strict or
// a lock file. After an install, remember every artifact's URL and hash.
#include <cstdio>

#include "commands/project_commands.hpp"
#include "common/printable.hpp"
#include "redist/cache.hpp"
#include "redist/drift.hpp"
#include "redist/install.hpp"
#include "redist/urls.hpp"

namespace redist_tools {

namespace {

// Every line this file prints goes through here: URLs, hashes, timestamps
// and messages come from servers and the cache, so the whole line is escaped.
void say(const std::string& text) { std::fprintf(stderr, "%s: %s\n", tool_name.c_str(), printable(text).c_str()); }

void warn(bool quiet, const redist::error& e) {
    if (!quiet) say("warning: drift history: " + e.describe());
}

// The history lives in the cache, so it is opened through the cache: a cache
// refused as another user's (or with a symlinked directory) gets no history.
// Nothing is printed then: the install opens the same cache and reports the
// refusal as its error (one line), and a cache that cannot be created is no
// cache at all.
std::optional<redist::drift_store> open_store(const source_options& source) {
    const auto policy = source.policy();
    if (!policy.cache_dir) return std::nullopt;  // --no-cache: nothing is remembered
    auto cache = redist::blob_cache::open_if_possible(*policy.cache_dir, policy.shared_cache);
    if (!cache.ok() || !*cache) return std::nullopt;
    return redist::drift_store(std::move(**cache));
}

// The diff between the manifest kept for `previous_sha256` and `text`, or a
// line saying why there is none.
void print_drift_details(const redist::drift_store& store, const std::string& previous_sha256,
                         const redist::manifest& current, const std::string& shown) {
    const auto old_text = store.load_document(previous_sha256);
    auto old_manifest = old_text ? redist::parse_manifest(*old_text, shown)
                                 : redist::result<redist::manifest>(
                                       redist::make_error(redist::error_code::not_found, "not kept"));
    if (!old_manifest.ok()) {
        std::fprintf(stderr, "  (the previous manifest's bytes are not in the cache; no detailed diff)\n");
        return;
    }
    const auto d = redist::diff_manifests(*old_manifest, current);
    if (d.empty()) std::fprintf(stderr, "  no component, version or artifact differs (other fields changed)\n");
    print_manifest_diff(stderr, d, "  ");
}

}  // namespace

redist::result<void> watch_manifest_drift(const source_options& source, bool strict, bool quiet,
                                          const redist::resolved_release& release) {
    const std::string& url = release.manifest_url;
    const std::string& sha256 = release.manifest_sha256;
    const std::string& text = release.manifest_text;  // parsed and validated: release.parsed
    auto store = open_store(source);
    if (!store) return {};
    const std::string shown = redist::sanitize_url(url);
    auto check = store->check(url, sha256);
    if (!check.ok()) {
        warn(quiet, check.error_value());
        return {};
    }
    if (check->corrupt_history && !quiet)
        say("warning: the drift history of " + shown + " was unreadable; starting it over");
    if (check->changed) {
        const auto& prev = *check->previous;
        say(std::string(strict ? "error" : "warning") + ": upstream drift: the manifest at " + shown +
            " changed since " + prev.last_seen + " (sha256 " + prev.sha256 + " -> " + sha256 + ")");
        print_drift_details(*store, prev.sha256, release.parsed, shown);
        if (strict)
            // Not recorded: a strict run keeps failing until a non-strict run accepts the new manifest.
            return redist::make_error(redist::error_code::integrity,
                                      "upstream manifest drifted (an error under --strict or with a lock file)")
                .with_url(shown)
                .with_expected_actual(prev.sha256, sha256);
    }
    if (auto rec = store->record_manifest(url, text); !rec.ok()) warn(quiet, rec.error_value());
    return {};
}

void record_artifacts(const source_options& source, bool quiet, const redist::install_report& report) {
    auto store = open_store(source);
    if (!store) return;
    for (const auto& r : report.releases)
        for (const auto& c : r.components) {
            if (c.url.empty() || c.unchanged) continue;
            auto check = store->check(c.url, c.sha256);
            if (check.ok() && check->changed && !quiet)
                // The manifest vouched for the new bytes (the install verified them), so this is
                // a note: the file at this URL was replaced since it was last fetched.
                say("warning: upstream drift: " + redist::sanitize_url(c.url) + " now serves sha256 " + c.sha256 +
                    " (was " + check->previous->sha256 + ", last seen " + check->previous->last_seen + ")");
            if (auto rec = store->record(c.url, c.sha256, c.size); !rec.ok()) warn(quiet, rec.error_value());
        }
}

}  // namespace redist_tools
