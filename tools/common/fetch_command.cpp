// `redist fetch` and `cudnn-fetch`: resolve, select, install, render.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

#include "commands/check.hpp"
#include "commands/project_commands.hpp"
#include "common/cli.hpp"
#include "common/observer.hpp"
#include "common/printable.hpp"
#include "redist/dependencies.hpp"
#include "redist/json_writer.hpp"
#include "redist/lockfile.hpp"
#include "redist/platform.hpp"
#include "redist/prefix.hpp"
#include "redist/select.hpp"
#include "redist/sync.hpp"
#include "redist/urls.hpp"
#include "redist/version.hpp"

namespace redist_tools {
namespace {

// One release's components, as fetch --json writes them.
void write_components_json(redist::json_writer& w, const redist::release_report& release) {
    w.key("components").begin_array();
    for (const auto& c : release.components) {
        w.begin_object();
        w.field("component", c.component);
        w.field("version", c.version);
        w.field("platform", c.platform);
        w.field("variant", c.variant);
        w.field("url", c.url);
        w.field("sha256", c.sha256);
        w.field("size", c.size);
        if (!c.copy_sha256.empty()) w.field("copy_sha256", c.copy_sha256);
        w.field("files", static_cast<std::uint64_t>(c.files));
        w.field("seconds", c.seconds);
        w.field("from_cache", c.from_cache);
        w.field("from_tree", c.from_tree);
        w.field("requests", c.requests);
        w.field("status", c.unchanged ? "unchanged" : "installed");
        w.end_object();
    }
    w.end_array();
}

// What the release needs from the CUDA toolkit (redist/dependencies.hpp)
// and the prefix lacks after the run; empty components: nothing is missing.
struct missing_deps {
    redist::dependency_set deps;
    std::vector<std::string> components;           // of deps.components, those the prefix lacks
    std::optional<std::string> installed_release;  // the deps' product's release already in the prefix
};

// fetch --json: its release, then the releases --with-deps added
// ("dependencies") and what is still missing ("missing_dependencies").
void print_json_report(const redist::install_report& report, const std::optional<redist::check_report>& check,
                       const std::optional<missing_deps>& missing) {
    const redist::release_report& release = report.releases.front();
    redist::json_writer w(2);
    w.begin_object();
    w.field("prefix", report.prefix.string());
    w.field("product", release.product);
    w.field("release_label", release.release_label);
    write_components_json(w, release);
    if (report.releases.size() > 1) {
        w.key("dependencies").begin_array();
        for (std::size_t i = 1; i < report.releases.size(); ++i) {
            w.begin_object();
            w.field("product", report.releases[i].product);
            w.field("release_label", report.releases[i].release_label);
            write_components_json(w, report.releases[i]);
            w.end_object();
        }
        w.end_array();
    }
    if (missing && !missing->components.empty()) {
        w.key("missing_dependencies").begin_object();
        w.field("product", missing->deps.product);
        w.field("cuda_major", missing->deps.cuda_major);
        w.key("components").begin_array();
        for (const auto& c : missing->components) w.value(c);
        w.end_array();
        w.end_object();
    }
    if (check) {
        w.key("check").begin_object();
        write_check_json(w, *check, false);
        w.end_object();
    }
    w.end_object();
    std::printf("%s\n", w.str().c_str());
}

// --cuda's major, for what takes a major only (a lock's variants, a cuda release).
std::optional<int> cuda_major(const selection_options& selection) {
    if (!selection.cuda) return std::nullopt;
    return selection.cuda->major;
}

// VERSION beside --manifest or --locked must name the release they hold
// (it is not used to resolve anything). Outcomes: ok | usage.
redist::result<void> check_version_agrees(const fetch_options& options, const std::string& label,
                                          const std::string& holder) {
    if (options.version == "latest" || redist::resolve_version_spec(options.version, {label}).ok()) return {};
    return redist::make_error(redist::error_code::usage, "VERSION " + options.version + " disagrees with " + holder +
                                                             ", which holds release " + label);
}

// What install() takes of a resolved release and the artifacts selected from it.
redist::release_plan release_plan_of(const redist::resolved_release& release, std::vector<redist::artifact> artifacts) {
    redist::release_plan plan;
    plan.product = release.product;
    plan.label = release.label;
    plan.artifact_base_url = release.artifact_base_url;
    plan.artifacts = std::move(artifacts);
    for (const auto& c : release.parsed.components) plan.component_versions[c.key] = c.version;
    plan.copies = release.recompressed.copies;
    plan.copy_base_url = release.recompressed_base_url;
    return plan;
}

// Resolves PRODUCT VERSION (or --manifest) and selects artifacts.
// `driver_query`: the driver's answer fetch asks ahead, if it does.
redist::result<redist::release_plan> plan_from_manifest(const fetch_options& options, const std::string& platform,
                                                        bool chatty, redist::driver_query* driver_query) {
    REDIST_TRY(const std::string spec,
               redist::release_spec_for_cuda(options.product, options.version, cuda_major(options.selection)));
    auto release_req = make_release_request(options.source, options.product, spec);
    console_observer observer(options.install.quiet);  // retries of the index and manifest
    release_req.observer = &observer;
    release_req.recompressed = !options.install.no_recompressed;
    REDIST_TRY(const auto release, redist::resolve_release(release_req, options.source.transfer()));
    if (!release.cached_from.empty() && !options.install.quiet)
        std::fprintf(stderr, "%s: offline: using %s %s's manifest as %s served it (cached)\n", tool_name.c_str(),
                     printable(release.product).c_str(), printable(release.label).c_str(),
                     printable(release.cached_from).c_str());
    if (!options.source.manifest.empty())
        REDIST_TRY_VOID(check_version_agrees(options, release.label, "--manifest " + options.source.manifest));
    // Drift watching: a manifest that differs from the one this URL served before
    // (not for a local file given with --manifest: that is the user's own document).
    if (!redist::is_local_manifest(options.source.manifest))
        REDIST_TRY_VOID(watch_manifest_drift(options.source, options.install.strict, options.install.quiet, release));
    const redist::manifest& m = release.parsed;
    // The one CUDA variant rule: the toolkit found from its files, else
    // (where there are variants to choose from) what the system's driver
    // supports, asked of the query started ahead when there is one.
    std::optional<redist::cuda_detection> detected;
    if (!options.selection.cuda) {
        detected = redist::detect_cuda(redist::host_probe::system());
        if (!detected && !redist::available_cuda_majors(m, platform, options.selection.components).empty())
            detected = system_driver_cuda(options.prefix, driver_query);
    }
    const auto choice = redist::choose_cuda_variant(m, platform, options.selection.components, options.selection.cuda,
                                                    detected);
    redist::selection_request sel_req;
    sel_req.platform = platform;
    sel_req.cuda_major = choice.cuda_major;
    sel_req.cuda_minor = choice.cuda_minor;
    sel_req.components = options.selection.components;
    sel_req.unnamed = options.all ? redist::unnamed_components::all : redist::unnamed_components::fetch_default;
    auto selection = redist::select_artifacts(m, sel_req);
    if (!selection.ok()) return std::move(selection).error_value().with_source(release.manifest_url);
    if (!selection->left_out.empty() && !options.install.quiet) {
        std::string names;
        for (const auto& key : selection->left_out) names += (names.empty() ? "" : ", ") + key;
        std::fprintf(stderr, "%s: note: --all leaves out the driver's components (%s); name them with --component\n",
                     tool_name.c_str(), printable(names).c_str());
    }

    if (chatty) {
        std::printf("%s %s (%s) for %s", printable(release.product).c_str(), printable(release.label).c_str(),
                    printable(redist::sanitize_url(release.manifest_url)).c_str(), printable(platform).c_str());
        if (choice.cuda_major) {
            // The variant keys as keyed (cuda12, cuda13.2); plain artifacts only: the CUDA version asked.
            std::string keys = redist::variant_list(selection->artifacts);
            if (keys.empty())
                keys = "CUDA " + redist::to_string(redist::cuda_version{*choice.cuda_major, choice.cuda_minor});
            std::printf(", %s: %s", printable(keys).c_str(), printable(choice.reason).c_str());
        }
        std::printf("\n");
        if (options.selection.components.empty()) {
            std::uint64_t total = 0;
            for (const auto& a : selection->artifacts) total += a.size;
            std::printf("Fetching every component (%zu, %s in all):\n", selection->artifacts.size(),
                        human_size(total).c_str());
            for (const auto& a : selection->artifacts)
                std::printf("  %-28s %10s  %s\n", printable(a.component).c_str(), human_size(a.size).c_str(),
                            printable(a.relative_path).c_str());
        }
        std::fflush(stdout);
    }
    return release_plan_of(release, std::move(selection->artifacts));
}

// ---- --with-deps ----------------------------------------------------------------

// The table's dependencies of what `plan` installs: of its product, release
// and the CUDA major of its variant. nullopt for plain artifacts only, or a
// release the table does not know.
std::optional<redist::dependency_set> dependencies_of_plan(const redist::release_plan& plan) {
    for (const auto& a : plan.artifacts)
        if (const auto major = a.cuda_major()) return redist::dependencies_of(plan.product, plan.label, *major);
    return std::nullopt;
}

// What the prefix holds and lacks of them (a prefix that does not exist yet
// or whose receipts cannot be read holds nothing: install() says why).
missing_deps find_missing_deps(const redist::dependency_set& deps, const std::string& prefix) {
    std::vector<redist::receipt> receipts;
    if (auto scan = redist::scan_receipts(prefix); scan.ok()) receipts = std::move(scan->receipts);
    return {deps, redist::missing_dependencies(deps, receipts), redist::installed_dependency_release(deps, receipts)};
}

// The release the missing dependencies come from, and why: --deps-cuda-version;
// else the one of that CUDA major already in the prefix (one CUDA release
// there); else the newest of the major that the source lists (the spec "12",
// as `redist fetch cuda --cuda 12` resolves it). Outcomes: ok | usage (a
// --deps-cuda-version of another CUDA major).
redist::result<std::pair<std::string, std::string>> dependency_release_spec(const fetch_options& options,
                                                                            const missing_deps& missing,
                                                                            const redist::release_plan& plan) {
    const std::string major = std::to_string(missing.deps.cuda_major);
    const std::string& asked = options.deps_cuda_version;
    if (!asked.empty()) {
        if (asked.substr(0, asked.find('.')) != major)
            return redist::make_error(redist::error_code::usage,
                                      "--deps-cuda-version " + printable(asked) + " is not a CUDA " + major +
                                          " release, but " + printable(plan.product) + " " + printable(plan.label) +
                                          " was chosen for CUDA " + major);
        return std::pair{asked, "--deps-cuda-version " + asked};
    }
    if (missing.installed_release)
        return std::pair{*missing.installed_release, std::string("the cuda release in the prefix")};
    return std::pair{major, "the newest CUDA " + major + ".x release"};
}

// --with-deps: the plan of the missing dependencies, from one release of
// their product through the same sources as the release itself (never
// --manifest, which is that release's), drift watched as any manifest.
redist::result<redist::release_plan> plan_dependencies(const fetch_options& options, const std::string& platform,
                                                       const missing_deps& missing, const redist::release_plan& of,
                                                       bool chatty) {
    REDIST_TRY(const auto spec, dependency_release_spec(options, missing, of));
    auto req = make_release_request(options.source, missing.deps.product, spec.first);
    req.manifest_location.clear();
    req.manifest_sha256.clear();
    console_observer observer(options.install.quiet);
    req.observer = &observer;
    req.recompressed = !options.install.no_recompressed;
    auto release = redist::resolve_release(req, options.source.transfer());
    const std::string what = "the dependencies of " + of.product + " " + of.label + " (" + missing.deps.product + " " +
                             spec.first + ")";
    if (!release.ok()) {
        auto e = std::move(release).error_value();
        e.message = what + ": " + e.message;
        return e;
    }
    REDIST_TRY_VOID(watch_manifest_drift(options.source, options.install.strict, options.install.quiet, *release));
    redist::selection_request sel;
    sel.platform = platform;
    sel.cuda_major = missing.deps.cuda_major;
    sel.components = missing.components;
    auto selection = redist::select_artifacts(release->parsed, sel);
    if (!selection.ok()) {
        auto e = std::move(selection).error_value().with_source(release->manifest_url);
        e.message = what + ": " + e.message;
        return e;
    }
    if (chatty) {
        std::string names;
        for (const auto& c : missing.components) names += (names.empty() ? "" : ", ") + c;
        std::printf("with its dependencies: %s %s (%s): %s\n", printable(release->product).c_str(),
                    printable(release->label).c_str(), printable(spec.second).c_str(), printable(names).c_str());
        std::fflush(stdout);
    }
    return release_plan_of(*release, std::move(selection->artifacts));
}

// Without --with-deps: what the prefix still lacks, and the command that adds it.
void print_missing_deps(const fetch_options& options, const redist::release_plan& of, const missing_deps& missing) {
    std::string names, csv;
    for (const auto& c : missing.components) {
        names += (names.empty() ? "" : ", ") + c;
        csv += (csv.empty() ? "" : ",") + c;
    }
    const std::string release = missing.installed_release.value_or(std::to_string(missing.deps.cuda_major));
    std::string command = "redist fetch " + missing.deps.product + " " + release + " --component " + csv +
                          " --prefix " + options.prefix;
    // Sanitized: credentials in a URL never reach an output.
    if (!options.source.base_url.empty()) command += " --base-url " + redist::sanitize_url(options.source.base_url);
    std::printf(
        "missing dependencies: %s %s (CUDA %d) needs %s of the %s product, which %s lacks; add them with "
        "`%s`, or run this command again with --with-deps\n",
        printable(of.product).c_str(), printable(of.label).c_str(), missing.deps.cuda_major, printable(names).c_str(),
        printable(missing.deps.product).c_str(), redist::escape_for_display(options.prefix).c_str(),
        redist::escape_for_display(command).c_str());
}

// The locked manifest, read again from the sources the command line names
// (redist::reread_locked_manifest: mirrors, then the lock's base).
redist::result<redist::resolved_release> reread_locked_manifest(const fetch_options& options,
                                                                const redist::lockfile& lock) {
    auto req = make_release_request(options.source, lock.product, lock.release_label);
    req.manifest_sha256.clear();                       // unpinned: a changed manifest is drift, reported by the caller
    console_observer observer(options.install.quiet);  // retries and source changes
    req.observer = &observer;
    req.recompressed = !options.install.no_recompressed;
    return redist::reread_locked_manifest(lock.product, lock.release_label, lock.manifest_url, req,
                                          options.source.transfer());
}

// --locked FILE: the lock's artifacts for this platform and CUDA variant. The
// upstream manifest is re-read only to warn about drift; a locked artifact
// that changed upstream is a hard error. Every URL in the lock is checked as
// a source first (check_lock_sources): a file:// URL only under a local
// mirror or base the user named.
redist::result<redist::release_plan> plan_from_lock(const fetch_options& options, const std::string& platform,
                                                    bool chatty) {
    REDIST_TRY(const std::string text,
               redist::fetch_text(redist::to_url(options.locked), options.source.transfer(), 16u << 20));
    REDIST_TRY(const auto lock, redist::lockfile_from_json(text, options.locked));
    REDIST_TRY_VOID(redist::check_lock_sources(lock, options.locked, options.source.local_roots()));
    REDIST_TRY_VOID(check_version_agrees(options, lock.release_label, "--locked " + options.locked));
    if (!options.product.empty() && options.product != lock.product)
        return redist::make_error(redist::error_code::usage, options.product + " disagrees with --locked " +
                                                                 options.locked + ", which holds " + lock.product);
    std::vector<std::string> notes;
    REDIST_TRY(auto locked, redist::plan_from_lock(lock, platform, cuda_major(options.selection),
                                                   options.selection.components, &notes));
    if (!options.install.quiet)
        for (const auto& note : notes)
            std::fprintf(stderr, "%s: note: %s\n", tool_name.c_str(), printable(note).c_str());
    const auto upstream = reread_locked_manifest(options, lock);
    if (!upstream.ok() && !options.install.quiet)
        std::fprintf(stderr, "%s: warning: cannot re-read the locked manifest (%s); installing the locked hashes\n",
                     tool_name.c_str(), printable(upstream.error_value().describe()).c_str());
    // Drift watching: with a lock file, upstream drift is an error.
    if (upstream.ok()) REDIST_TRY_VOID(watch_manifest_drift(options.source, true, options.install.quiet, *upstream));
    if (upstream.ok() && upstream->manifest_sha256 != lock.manifest_sha256) {
        if (!options.install.quiet)
            std::fprintf(stderr,
                         "%s: warning: the upstream manifest changed since it was locked (%s); "
                         "installing the locked hashes\n",
                         tool_name.c_str(), printable(redist::sanitize_url(upstream->manifest_url)).c_str());
        redist::lockfile relevant = lock;
        std::erase_if(relevant.artifacts, [&](const redist::locked_artifact& a) {
            return std::none_of(locked.artifacts.begin(), locked.artifacts.end(), [&](const redist::artifact& b) {
                return a.entry.component == b.component && a.entry.platform == b.platform &&
                       a.entry.variant == b.variant;
            });
        });
        REDIST_TRY_VOID(redist::check_lock_against_manifest(relevant, upstream->parsed));
    }
    // The copies the mirror records; each is used only where the lock pins its tar (install_request).
    if (upstream.ok()) {
        locked.copies = upstream->recompressed.copies;
        locked.copy_base_url = upstream->recompressed_base_url;
    }
    if (chatty) {
        const std::string variants = redist::variant_list(locked.artifacts);
        std::printf("%s %s from lock file %s for %s%s%s\n", printable(lock.product).c_str(),
                    printable(lock.release_label).c_str(), printable(options.locked).c_str(),
                    printable(platform).c_str(), variants.empty() ? "" : ", ", printable(variants).c_str());
        std::fflush(stdout);
    }
    return locked;
}

// REDIST_PROFILE=1 asks for --profile without changing the command line (CI).
bool profile_requested() {
    const char* env = std::getenv("REDIST_PROFILE");
    return env && *env && std::string_view(env) != "0";
}

// --profile: one line per stage. busy and wait are summed over the stage's
// threads and the run's artifacts, so busy can exceed the wall time.
void print_profile(const redist::run_profile& p) {
    std::fprintf(stderr, "profile: %u threads, memory budget %s, peak RSS %s\n", p.threads,
                 human_size(p.max_memory).c_str(), p.peak_rss ? human_size(p.peak_rss).c_str() : "unknown");
    for (const auto& s : p.stages) {
        std::fprintf(stderr, "profile: %-16s busy %7.2f s  wait %7.2f s", s.stage.c_str(), s.busy_seconds,
                     s.wait_seconds);
        if (s.bytes)
            std::fprintf(stderr, "  %s%s", human_size(s.bytes).c_str(), s.stage == "extractor" ? " copied" : "");
        std::fprintf(stderr, "\n");
    }
    for (const auto& m : p.marks) {
        std::fprintf(stderr, "profile: %-16s at %6.2f s", m.event.c_str(), m.first_seconds);
        if (m.count > 1) std::fprintf(stderr, " (first of %u) to %.2f s (last)", m.count, m.last_seconds);
        std::fprintf(stderr, "\n");
    }
}

// Before downloading: warn when the driver or a GPU here cannot run the
// chosen CUDA variant, so that nobody waits for 800 MB they cannot use.
void preflight(const redist::release_plan& plan, redist::driver_query& driver_query) {
    std::optional<int> major;
    std::string version = plan.label;
    for (const auto& a : plan.artifacts) {
        if (!a.variant) continue;
        major = a.cuda_major();
        if (auto it = plan.component_versions.find(a.component); it != plan.component_versions.end())
            version = it->second;
        break;
    }
    if (!major) return;
    const auto& driver = driver_query.wait();
    for (const auto& f : redist::preflight_findings(driver, plan.product, version, major))
        std::fprintf(stderr, "%s: warning: %s (checked before downloading)\n", tool_name.c_str(),
                     redist::escape_for_display(f.message).c_str());
}

// After installing: the CPU-only checks of `redist check` on what was just
// installed (run before the summary so that --json carries them).
std::optional<redist::check_report> post_install_check(const fetch_options& options,
                                                       const redist::install_report& report,
                                                       redist::driver_query* driver_query) {
    // Only what this run installed: a no-op re-run (every receipt already
    // matched) must stay a few milliseconds. An explicit --check still checks
    // the unchanged components.
    auto o = default_check_options(options.prefix);
    // After every install, the quick depth: it reads files only (ELF
    // resolution, versions from file names and headers, shadowing) and asks
    // the system's driver; nothing installed is loaded or run. --check asks
    // for everything `redist check` does, loading the libraries in children.
    o.depth = options.check ? redist::check_depth::full : redist::check_depth::quick;
    for (const auto& r : report.releases)
        for (const auto& c : r.components)
            if (!c.unchanged || options.check) o.components.push_back(c.component);
    if (o.components.empty()) return std::nullopt;
    if (driver_query) o.driver_asked = &driver_query->wait();
    auto result = redist::run_checks(o);
    if (!result.ok()) {
        if (!options.install.quiet)
            std::fprintf(stderr, "%s: warning: the post-install check could not run: %s\n", tool_name.c_str(),
                         printable(result.error_value().describe()).c_str());
        return std::nullopt;
    }
    return std::move(*result);
}

// A failure is one warning line, or with --check every failure and exit 11.
int render_post_install_check(const fetch_options& options, const redist::check_report& checked) {
    const auto failures = checked.count(redist::check_severity::failure);
    if (failures == 0) {
        if (options.install.quiet || options.install.json || checked.elf_files == 0) return 0;
        if (checked.depth == redist::check_depth::full)
            std::printf("checked: %zu libraries resolve and load (%.2f s; details: redist check --prefix %s)\n",
                        checked.loaded, checked.seconds, redist::escape_for_display(options.prefix).c_str());
        else
            std::printf("checked: %zu libraries resolve (quick, %.2f s; loading each: redist check --prefix %s)\n",
                        checked.libraries, checked.seconds, redist::escape_for_display(options.prefix).c_str());
        return 0;
    }
    if (options.check) {
        if (!options.install.json)
            for (const auto& f : checked.findings)
                if (f.severity == redist::check_severity::failure)
                    std::fprintf(stderr, "%s\n", format_finding(f).c_str());
        std::fprintf(stderr, "%s: error: %zu post-install checks failed (--check)\n", tool_name.c_str(), failures);
        return redist::exit_code_for(redist::error_code::check_failed);
    }
    if (!options.install.quiet) {
        std::string first;
        for (const auto& f : checked.findings)
            if (f.severity == redist::check_severity::failure && first.empty()) first = f.check + ": " + f.message;
        std::fprintf(stderr,
                     "%s: warning: %zu post-install checks failed, first: %s (see `redist check --prefix %s`)\n",
                     tool_name.c_str(), failures, redist::escape_for_display(first).c_str(),
                     redist::escape_for_display(options.prefix).c_str());
    }
    return 0;
}

// What a stopped run leaves for the next one, as the cache holds it (not
// as the run counted): "120 MiB of 313 MiB downloaded stay in the cache,
// run the same command to resume"; "" when nothing does.
std::string kept_downloads_text(const redist::install_request& req) {
    const auto kept = redist::kept_in_cache(req);
    if (!kept.ok() || kept->bytes == 0) return {};
    return human_size(kept->bytes) + " of " + human_size(kept->total) +
           " downloaded stay in the cache, run the same command to resume";
}

// After Ctrl-C or SIGTERM stopped install(): nothing was committed.
int report_interrupt(const redist::install_request& req) {
    std::string kept = kept_downloads_text(req);
    if (kept.empty()) kept = "nothing downloaded is kept, run the same command to start again";
    std::fprintf(stderr, "%s: interrupted: the prefix is unchanged; %s\n", tool_name.c_str(), kept.c_str());
    return redist::exit_code_for(redist::error_code::cancelled);
}

// A download that failed part-way (a server that died): the error says
// what the cache keeps for the next run.
redist::error with_kept_downloads(redist::error e, const redist::install_request& req) {
    if (e.code != redist::error_code::network) return e;
    if (const std::string kept = kept_downloads_text(req); !kept.empty()) e.message += "; " + kept;
    return e;
}

// The components whose files the plan cannot know before unpacking them
// (their conflicts are found by the install), in plan order.
std::vector<std::string> unknown_files(const redist::install_plan& plan) {
    std::vector<std::string> out;
    for (const auto& item : plan.items)
        if (!item.files_known) out.push_back(item.product + "/" + item.component);
    return out;
}

// --dry-run: a line per artifact (action, product, component, size), a line
// per conflict the commit would refuse, then the totals, and which
// components' files are not known yet. Returns the exit code: a conflict
// fails the dry run as it would fail the install (exit 9).
int print_plan(const install_flags& flags, const redist::install_plan& plan) {
    const std::vector<std::string> unknown = unknown_files(plan);
    const int code = plan.conflicts.empty() ? 0 : redist::exit_code_for(redist::error_code::conflict);
    if (flags.json) {
        redist::json_writer w(2);
        w.begin_object();
        w.key("plan").begin_array();
        for (const auto& item : plan.items) {
            w.begin_object();
            w.field("action", redist::to_string(item.action));
            w.field("product", item.product);
            w.field("component", item.component);
            w.field("version", item.version);
            if (item.variant) w.field("variant", *item.variant);
            if (item.previous_version) w.field("previous_version", *item.previous_version);
            if (item.previous_variant) w.field("previous_variant", *item.previous_variant);
            w.field("size", item.size);
            w.field("recompressed_copy", item.from_copy);
            w.field("files_known", item.files_known);
            w.end_object();
        }
        w.end_array();
        w.field("download_bytes", plan.download_bytes);
        w.field("unpack_bytes", plan.unpack_bytes);
        w.key("conflicts").begin_array();
        for (const auto& c : plan.conflicts) {
            w.begin_object();
            w.field("path", c.path);
            w.field("message", c.message);
            w.end_object();
        }
        w.end_array();
        w.field("conflicts_complete", unknown.empty());
        w.field("archives_read", static_cast<std::uint64_t>(plan.archives_read));
        w.field("archive_bytes_read", plan.archive_bytes_read);
        w.end_object();
        std::printf("%s\n", w.str().c_str());
        return code;
    }
    std::map<redist::plan_action, std::size_t> counts;
    for (const auto& item : plan.items) {
        ++counts[item.action];
        const std::string change = item.action == redist::plan_action::remove
                                       ? printable(item.version) +
                                             (item.variant ? " (" + printable(*item.variant) + ")" : "")
                                       : version_change(item.previous_version, item.previous_variant, item.version,
                                                        item.variant);
        std::printf("%-14s %-12s %-28s %10s  %s%s\n", redist::to_string(item.action), printable(item.product).c_str(),
                    printable(item.component).c_str(),
                    item.action == redist::plan_action::remove ? "-" : human_size(item.size).c_str(), change.c_str(),
                    item.from_copy ? "  (from the mirror's recompressed copy)" : "");
    }
    std::printf(
        "plan: %zu to download (%s), %zu from the cache, %zu unchanged, %zu to remove; unpacking needs at "
        "least %s (dry run: nothing was changed)\n",
        counts[redist::plan_action::download], human_size(plan.download_bytes).c_str(),
        counts[redist::plan_action::from_cached_tree] + counts[redist::plan_action::from_cached_blob],
        counts[redist::plan_action::unchanged], counts[redist::plan_action::remove],
        human_size(plan.unpack_bytes).c_str());
    for (const auto& c : plan.conflicts)
        std::printf("%-14s %s: %s\n", "conflict", printable(c.path).c_str(), printable(c.message).c_str());
    std::string unknown_list;
    for (const auto& u : unknown) unknown_list += (unknown_list.empty() ? "" : ", ") + printable(u);
    std::printf("conflicts: %s%s\n",
                plan.conflicts.empty() ? "none" : (std::to_string(plan.conflicts.size()) + " (listed above)").c_str(),
                unknown.empty() ? ""
                                : ("; not checked: the files of " + unknown_list +
                                   " (known only once their archives are unpacked: the install checks them)")
                                      .c_str());
    return code;
}

}  // namespace

int run_fetch(const fetch_options& options) {
    // A lock pins the release and its components: what would pick them is refused, not ignored.
    if (!options.locked.empty() && (!options.source.manifest.empty() || !options.source.manifest_sha256.empty()))
        return usage_error("--manifest and --manifest-sha256 pick a release; --locked installs the one the lock pins");
    if (options.check && options.no_check)
        return usage_error("--check asks for the full post-install check and --no-check for none: give one");
    if (!options.locked.empty() && options.all)
        return usage_error(
            "--all picks a release's components; --locked installs the ones the lock pins "
            "(--component chooses among them)");
    const bool chatty = !options.install.quiet && !options.install.json;
    // The driver is asked once, from the start (a child process, 20-25 ms
    // with a real GPU): the preflight reads the answer before the download,
    // and the post-install check reuses it rather than asking after the
    // install, where the answer set the check's time. The preflight judges
    // GPUs even where only cuInit lists them, so it asks at full depth. It
    // loads the system's libcuda and NVML, never the prefix's (which it is
    // told, so that no path into it is taken: find_system_driver).
    std::optional<redist::driver_query> driver_query;
    if (!options.install.quiet || !options.no_check)
        driver_query.emplace(default_check_options(options.prefix), options.install.quiet && !options.check
                                                                        ? redist::check_depth::quick
                                                                        : redist::check_depth::full);
    const auto platform = effective_platform(options.selection.platform);
    if (!platform.ok()) return report_error(platform.error_value());
    if (auto keys = load_trusted_keys(options.source); !keys.ok()) return report_error(keys.error_value());
    const bool with_deps = options.with_deps || !options.deps_cuda_version.empty();
    if (with_deps && !options.locked.empty())
        return usage_error(
            "--with-deps needs PRODUCT [VERSION]: a lock file (--locked) holds one release; "
            "lock a project whose product sets `deps = true` instead (redist sync)");
    auto planned = options.locked.empty()
                       ? plan_from_manifest(options, *platform, chatty, driver_query ? &*driver_query : nullptr)
                       : plan_from_lock(options, *platform, chatty);
    if (!planned.ok()) return report_error(planned.error_value());
    if (!options.install.quiet)
        preflight(*planned, *driver_query);  // independent of --no-check, which is about the prefix

    std::optional<missing_deps> missing;
    if (const auto deps = dependencies_of_plan(*planned)) missing = find_missing_deps(*deps, options.prefix);
    std::optional<redist::release_plan> deps_plan;
    if (with_deps && missing && !missing->components.empty()) {
        auto p = plan_dependencies(options, *platform, *missing, *planned, chatty);
        if (!p.ok()) return report_error(p.error_value());
        deps_plan = std::move(p).value();
        missing->components.clear();  // installed in the same transaction, or not at all
    }

    redist::install_request req;
    req.prefix = options.prefix;
    req.releases.push_back(*planned);
    if (deps_plan) req.releases.push_back(std::move(*deps_plan));
    req.transfer = options.source.transfer();
    req.sources = options.source.policy();
    std::optional<redist::install_report> report;
    if (const int code = run_install(options.install, req, report, *platform); code != 0 || !report) return code;
    record_artifacts(options.source, options.install.quiet, *report);  // drift watching
    if (chatty && missing && !missing->components.empty()) print_missing_deps(options, *planned, *missing);

    std::optional<redist::check_report> checked;
    if (!options.no_check) checked = post_install_check(options, *report, driver_query ? &*driver_query : nullptr);
    if (options.install.json) print_json_report(*report, checked, missing);
    return checked ? render_post_install_check(options, *checked) : 0;
}

int run_install(const install_flags& flags, redist::install_request& req, std::optional<redist::install_report>& report,
                const std::string& platform, const std::function<redist::error(redist::error)>& explain) {
    req.reinstall = flags.force || flags.reinstall;
    req.overwrite_unowned = flags.force || flags.overwrite;
    req.tree_link_mode = redist::parse_link_mode(flags.link_mode).value();  // validated by CLI11
    req.jobs = flags.jobs;
    req.connections = flags.connections;
    req.max_expansion = flags.max_expansion;
    req.use_recompressed = !flags.no_recompressed;
    if (flags.dry_run) {
        // Archives whose files are not known yet are read into the cache
        // (forecast_install): shown as downloads, without "done" lines (nothing is installed).
        progress_display display(!flags.quiet && !flags.json, ::isatty(STDOUT_FILENO) != 0);
        console_observer observer(flags.quiet);
        observer.progress = [&display](const redist::progress_event& e) {
            if (e.stage != redist::fetch_stage::staged && e.stage != redist::fetch_stage::done) display(e);
        };
        observer.display = &display;
        req.observer = &observer;
        auto plan = redist::forecast_install(req);
        req.observer = nullptr;
        display.finish();
        if (!plan.ok()) return report_error(plan.error_value());
        if (plan->archives_read > 0 && !flags.json)
            std::printf("read %zu archive%s (%s) into the cache to list %s files\n", plan->archives_read,
                        plan->archives_read == 1 ? "" : "s", human_size(plan->archive_bytes_read).c_str(),
                        plan->archives_read == 1 ? "its" : "their");
        const int code = print_plan(flags, *plan);
        if (code != 0)
            std::fprintf(stderr, "%s: error: the install would fail (exit %d): %zu %s%s\n", tool_name.c_str(), code,
                         plan->conflicts.size(), plan->conflicts.size() == 1 ? "path conflicts" : "paths conflict",
                         flags.json ? "" : " (listed above)");
        return code;
    }
    auto budget = redist::make_run_budget({flags.threads, flags.max_memory});
    if (!budget.ok()) return report_error(budget.error_value());
    req.budget = *budget;
    progress_display display(!flags.quiet && !flags.json, ::isatty(STDOUT_FILENO) != 0);
    console_observer observer(flags.quiet);  // lock waits, retries and source changes
    observer.progress = [&display](const redist::progress_event& e) { display(e); };
    observer.display = &display;
    req.observer = &observer;
    const auto started = std::chrono::steady_clock::now();
    std::optional<interrupt_scope> interrupts(std::in_place);
    req.cancel = interrupts->cancel_flag();
    auto done = redist::install(req);
    req.observer = nullptr;
    req.cancel = nullptr;
    display.finish();
    if (!done.ok() && interrupts->interrupted()) return report_interrupt(req);
    interrupts.reset();  // the post-install check's children get the default handling
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (flags.profile || profile_requested()) print_profile(redist::profile_of(*req.budget));
    if (!done.ok()) {
        redist::error e = with_kept_downloads(std::move(done).error_value(), req);
        return report_error(explain ? explain(std::move(e)) : e);
    }
    report = std::move(done).value();
    if (!flags.json && !flags.quiet) print_install_summary(*report, seconds, platform);
    return 0;
}

}  // namespace redist_tools
