// `redist sync` — installs a project (redist.toml) into its prefix in one
// transaction, and keeps redist.lock (version 2) next to it. See sync.hpp.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands/project_commands.hpp"
#include "common/observer.hpp"
#include "common/printable.hpp"
#include "redist/atomic_write.hpp"
#include "redist/json_writer.hpp"
#include "redist/platform.hpp"
#include "redist/project.hpp"
#include "redist/sync.hpp"
#include "redist/urls.hpp"

namespace redist_tools {

namespace {

namespace fs = std::filesystem;

struct sync_args {
    std::string file = "redist.toml";
    std::string lock_file;  // default: redist.lock beside the project file
    std::string platform;   // default: the host's
    std::string prefix;     // --prefix: instead of the project's
    bool allow_outside_prefix = false;
    std::vector<std::string> exclude;
    source_options source;
    bool locked = false;
    bool frozen = false;
    bool force = false;
    bool keep_unlisted = false;
    bool quiet = false;
    bool json = false;
    unsigned jobs = 0;
};

redist::result<std::string> read_small_file(const std::string& path, std::size_t max_bytes, const char* what) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f)
        return redist::make_error(redist::error_code::not_found, std::string("cannot open the ") + what).with_path(path);
    std::string text;
    char buf[65536];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= max_bytes) text.append(buf, n);
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed)
        return redist::make_error(redist::error_code::filesystem, std::string("cannot read the ") + what)
            .with_path(path);
    if (text.size() > max_bytes)
        return redist::make_error(redist::error_code::bad_manifest, std::string("the ") + what + " is too large")
            .with_path(path);
    return text;
}

// --locked / --frozen: the lock as written; never a request.
redist::result<redist::project_lock> read_lock(const sync_args& args, const std::string& lock_path,
                                               const redist::project_file& project,
                                               const std::vector<fs::path>& local_roots) {
    REDIST_TRY(const std::string text, read_small_file(lock_path, redist::kMaxLockFileBytes, "lock file"));
    REDIST_TRY(auto lock, redist::project_lock_from_json(text, lock_path));
    REDIST_TRY_VOID(redist::check_lock_sources(lock, lock_path, local_roots));
    if (auto stale = redist::lock_staleness(lock, project)) {
        if (args.frozen)
            return redist::make_error(redist::error_code::bad_manifest,
                                      "the lock file is stale (" + *stale + "); run `redist sync` to update it")
                .with_source(lock_path);
        if (!args.quiet)
            std::fprintf(stderr, "%s: warning: %s: the lock file is stale (%s); installing what it pins\n",
                         tool_name.c_str(), printable(lock_path).c_str(), printable(*stale).c_str());
    }
    return lock;
}

// Without --locked: resolve every product again, and rewrite the lock when it changed.
redist::result<redist::project_lock> resolve_and_lock(const sync_args& args, const std::string& lock_path,
                                                      const redist::project_file& project) {
    redist::project_resolve_options o;
    o.base_url = !args.source.base_url.empty() || project.base_url.empty() ? args.source.effective_base_url()
                                                                           : project.base_url;
    o.sources = args.source.policy();
    if (args.source.mirrors.empty() && !project.mirrors.empty()) o.sources.mirrors = project.mirrors;
    o.transfer = args.source.transfer();
    o.on_manifest = [&](const redist::resolved_release& r) {
        return watch_manifest_drift(args.source, false, args.quiet, r);
    };
    REDIST_TRY(auto resolved, redist::resolve_project(project, o));
    if (!args.quiet)
        for (const auto& note : resolved.notes)
            std::fprintf(stderr, "%s: note: %s\n", tool_name.c_str(), printable(note).c_str());
    const std::string text = redist::project_lock_to_json(resolved.lock);
    auto old = read_small_file(lock_path, redist::kMaxLockFileBytes, "lock file");
    if (!old.ok() || *old != text) {
        // Atomically: a reader (or a crash) sees the old lock or the new one, and
        // nothing a checkout holds at the name (or at a temp name) is written through.
        REDIST_TRY_VOID(redist::atomic_write(lock_path, text, redist::durability::full));
        if (!args.quiet) std::printf("wrote %s\n", printable(lock_path).c_str());
    }
    return std::move(resolved.lock);
}

// --json: what landed, per product, with the libraries directly in lib/ (for
// redist_fetch(FILE ...) in RedistFetch.cmake, which defines a target for each).
int print_json(const redist::multi_install_request& req, const std::string& platform,
               const redist::multi_install_report& report) {
    const auto& reports = report.products;
    auto receipts = redist::read_receipts(req.prefix);
    if (!receipts.ok()) return report_error(receipts.error_value());
    redist::json_writer w(2);
    w.begin_object();
    w.field("prefix", req.prefix.string());
    w.field("platform", platform);
    w.key("products").begin_array();
    for (const auto& r : reports) {
        w.begin_object();
        w.field("name", r.product);
        w.field("release_label", r.release_label);
        w.key("components").begin_array();
        std::size_t installed = 0;
        for (const auto& c : r.components) {
            w.value(c.component);
            installed += c.unchanged ? 0 : 1;
        }
        w.end_array();
        w.field("installed", static_cast<std::uint64_t>(installed));
        w.key("libraries").begin_array();
        for (const auto& rec : *receipts) {
            if (rec.product != r.product) continue;
            for (const auto& f : rec.files) {
                const std::string_view path = f.path;
                const bool in_lib = path.starts_with("lib/lib") && path.find('/', 4) == std::string_view::npos;
                if (in_lib && (path.ends_with(".so") || path.ends_with(".a"))) w.value(f.path);
            }
        }
        w.end_array();
        w.end_object();
    }
    w.end_array();
    // What left the prefix because the project no longer names it (empty with --keep-unlisted).
    w.key("removed").begin_array();
    for (const auto& r : report.removed) {
        w.begin_object();
        w.field("product", r.product);
        w.field("component", r.component);
        w.field("version", r.version);
        w.field("release_label", r.release_label);
        w.field("files", static_cast<std::uint64_t>(r.files));
        w.end_object();
    }
    w.end_array();
    w.end_object();
    std::printf("%s\n", w.str().c_str());
    return 0;
}

int run_sync(sync_args args) {
    if (args.json) args.quiet = true;
    if (args.frozen) args.locked = true;
    auto text = read_small_file(args.file, redist::kMaxProjectFileBytes, "project file");
    if (!text.ok()) return report_error(text.error_value());
    const fs::path file = fs::absolute(args.file);
    auto project = redist::parse_project(*text, file);
    if (!project.ok()) return report_error(project.error_value());
    const std::string lock_path = args.lock_file.empty() ? (file.parent_path() / "redist.lock").string()
                                                         : args.lock_file;

    std::string platform = args.platform;
    if (platform.empty()) {
        auto host = redist::detect_host_platform(redist::host_probe::system());
        if (!host.ok()) return report_error(host.error_value());
        platform = *host;
    }
    if (std::find(project->platforms.begin(), project->platforms.end(), platform) == project->platforms.end())
        return report_error(
            redist::make_error(redist::error_code::usage, "platform " + platform + " is not in project.platforms")
                .with_source(args.file));

    // Where redist may read local files: the directories the user named, and
    // the project's own local mirrors (inside its directory). A lock's URLs
    // point there or at http(s) (check_lock_sources), never at /etc/shadow.
    auto project_roots = redist::project_local_roots(*project);
    if (!project_roots.ok()) return report_error(project_roots.error_value());
    std::vector<fs::path> roots = args.source.local_roots();
    roots.insert(roots.end(), project_roots->begin(), project_roots->end());

    // The project's prefix stays inside its directory unless the command line says otherwise.
    if (!args.prefix.empty()) {
        project->prefix = fs::absolute(args.prefix).lexically_normal();
    } else if (!args.allow_outside_prefix) {
        if (auto inside = redist::check_project_prefix(*project); !inside.ok())
            return report_error(inside.error_value());
    }

    auto lock = args.locked ? read_lock(args, lock_path, *project, roots) : resolve_and_lock(args, lock_path, *project);
    if (!lock.ok()) return report_error(lock.error_value());
    auto plans = redist::plans_for_platform(*lock, platform);
    if (!plans.ok()) return report_error(std::move(plans).error_value().with_source(lock_path));

    redist::multi_install_request req;
    req.prefix = project->prefix;
    for (auto& p : *plans)
        req.products.push_back(
            {p.product, p.label, p.artifact_base_url, std::move(p.artifacts), std::move(p.component_versions)});
    req.exclude = project->exclude;
    for (const auto& g : args.exclude)
        if (std::find(req.exclude.begin(), req.exclude.end(), g) == req.exclude.end()) req.exclude.push_back(g);
    req.options.force = args.force;
    req.keep_unlisted = args.keep_unlisted;
    req.options.jobs = args.jobs;
    req.options.transfer = args.source.transfer();
    req.options.sources = args.source.policy();
    if (args.source.mirrors.empty() && !project->mirrors.empty()) req.options.sources.mirrors = project->mirrors;
    console_observer observer(args.quiet);  // lock waits, retries and source changes
    req.options.observer = &observer;
    auto done = redist::install_all(req);
    if (!done.ok()) return report_error(done.error_value());
    const auto& reports = done->products;

    if (args.json) {
        for (const auto& r : reports) record_artifacts(args.source, true, r);
        return print_json(req, platform, *done);
    }
    std::size_t installed = 0, unchanged = 0;
    for (const auto& r : reports) {
        record_artifacts(args.source, args.quiet, r);  // drift watching
        for (const auto& c : r.components) {
            if (c.unchanged) {
                ++unchanged;
                continue;
            }
            ++installed;
            if (!args.quiet)
                std::printf("installed %s %s %s: %zu files, %s\n", printable(r.product).c_str(),
                            printable(c.component).c_str(), printable(c.version).c_str(), c.files,
                            human_size(c.size).c_str());
        }
    }
    if (!args.quiet) {
        for (const auto& r : done->removed)
            std::printf("removed %s %s %s: %zu files (no longer in the project)\n", printable(r.product).c_str(),
                        printable(r.component).c_str(), printable(r.version).c_str(), r.files);
        const auto count = [](std::size_t n, const char* noun) {
            return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
        };
        std::printf("%s: %s for %s: %s installed, %zu unchanged, %zu removed\n", printable(req.prefix.string()).c_str(),
                    count(reports.size(), "product").c_str(), printable(platform).c_str(),
                    count(installed, "component").c_str(), unchanged, done->removed.size());
    }
    return 0;
}

}  // namespace

void add_sync_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<sync_args>();
    auto* cmd = app.add_subcommand("sync", "Install every product of a project file (redist.toml) in one transaction");
    cmd->add_option("--file", args->file, "The project file (default ./redist.toml)")->type_name("FILE");
    cmd->add_option("--lock-file", args->lock_file, "The lock file (default: redist.lock beside the project file)")
        ->type_name("FILE");
    cmd->add_option("--platform", args->platform, "Install this listed platform (default: this machine's)")
        ->type_name("P");
    cmd->add_option("--prefix", args->prefix,
                    "Install into this directory instead of the project's prefix (which must lie inside the "
                    "project file's directory)")
        ->type_name("DIR");
    cmd->add_flag("--allow-outside-prefix", args->allow_outside_prefix,
                  "Install into the project's prefix even when it lies outside the project file's directory "
                  "(an absolute path, '..', or a symlink leading out); refused otherwise (exit 4)");
    cmd->add_option("--exclude", args->exclude,
                    "Skip archive paths matching this glob (repeatable; adds to the project's exclude)")
        ->type_name("GLOB");
    cmd->add_flag("--locked", args->locked,
                  "Install what redist.lock pins; never re-resolve (no index or manifest requests). "
                  "A stale lock is a warning");
    cmd->add_flag("--frozen", args->frozen,
                  "As --locked, but a lock that no longer matches the project file is an "
                  "error (exit 4)");
    cmd->add_flag("--force", args->force, "Reinstall even if the receipts say it is installed");
    cmd->add_flag("--keep-unlisted", args->keep_unlisted,
                  "Keep components in the prefix that the project does not name (by default they are removed, "
                  "also those a plain `redist fetch` installed there)");
    cmd->add_flag("--quiet,-q", args->quiet, "Print only errors");
    cmd->add_flag("--json", args->json,
                  "Print one JSON object: the prefix, per product its components and libraries, and what was removed");
    cmd->add_option("--jobs,-j", args->jobs, "Artifacts downloaded at once (default: cores)")->type_name("N");
    add_source_options(*cmd, args->source);
    cmd->footer(
        "\nWithout --locked, every product is resolved again and redist.lock is rewritten when the\n"
        "resolution changed (it pins every listed platform: URLs, SHA-256s, sizes, manifest SHA-256s).\n"
        "Then the chosen platform's artifacts of every product are staged and committed into the\n"
        "prefix together, or not at all. Not enough free space for the downloads: exit 10, before\n"
        "any download. A stale lock under --frozen: exit 4.\n\n"
        "The project file is input: its prefix must lie inside its directory (also through symlinks)\n"
        "unless --prefix or --allow-outside-prefix says otherwise, and every URL in it or in the lock\n"
        "is http(s):// or lies under a local mirror or base named on the command line (or the\n"
        "project's own, inside its directory); anything else is refused with exit 4. Sources are\n"
        "tried mirrors first, then the base URL, for manifests and archives alike.\n\n"
        "The prefix ends up holding exactly what the project names for the platform: a component\n"
        "installed there that the project does not name (dropped from redist.toml, a dropped product,\n"
        "or put there by `redist fetch`) is removed in the same transaction, as `redist remove` would\n"
        "(files another component also installed stay). --keep-unlisted keeps them.\n\n" +
        std::string(exit_code_help));
    cmd->final_callback([args, &selected] { selected = [args] { return run_sync(*args); }; });
}

}  // namespace redist_tools
