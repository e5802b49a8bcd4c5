// `redist sync` — installs a project (redist.toml) into its prefix in one
// transaction, and keeps redist.lock (version 2) next to it. See sync.hpp.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "commands/check.hpp"
#include "commands/project_commands.hpp"
#include "common/observer.hpp"
#include "common/printable.hpp"
#include "redist/json_writer.hpp"
#include "redist/platform.hpp"
#include "redist/project.hpp"
#include "redist/sync.hpp"
#include "redist/urls.hpp"

namespace redist_tools {

namespace {

namespace fs = std::filesystem;

struct sync_args {
    project_lock_options lock;  // --file, --lock-file, --upgrade, --product, --strict (its source: `source`)
    source_options source;
    bool quiet = false;
    std::string platform;  // default: the host's
    std::string prefix;    // --prefix: instead of the project's
    bool allow_outside_prefix = false;
    std::vector<std::string> exclude;
    bool locked = false;
    bool frozen = false;
    bool keep_unlisted = false;
    install_flags install;  // as fetch's (add_install_flags)
};

// Whether `path` is a regular file, not followed through a symlink.
bool regular_file_at(const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The project of --file (else redist.toml here or in a parent directory),
// opened by the library; the keys it names are read before any request.
redist::result<redist::opened_project> load_project(const project_lock_options& o) {
    REDIST_TRY(
        auto p,
        redist::open_project(
            {.file = o.file, .lock_file = o.lock_file, .local_roots = o.source.local_roots(), .products = o.products}));
    REDIST_TRY_VOID(load_trusted_keys(o.source, p.project.trusted_keys));  // fail before any request
    return p;
}

void print_lines(const char* kind, const std::vector<std::string>& lines) {
    for (const auto& line : lines)
        std::fprintf(stderr, "%s: %s: %s\n", tool_name.c_str(), kind, printable(line).c_str());
}

// Where the project's manifests and archives come from: the command line's
// base and mirrors, else the project's.
redist::project_resolve_options project_sources(const source_options& source, const redist::project_file& project,
                                                const fs::path& prefix, redist::run_observer& observer) {
    redist::project_resolve_options r;
    r.base_url = !source.base_url.empty() || project.base_url.empty() ? source.effective_base_url() : project.base_url;
    r.sources = source.policy();
    if (source.base_url.empty() && !project.base_url.empty()) r.sources.fallback_bases.clear();  // one base
    if (source.mirrors.empty() && !project.mirrors.empty()) r.sources.mirrors = project.mirrors;
    if (auto keys = load_trusted_keys(source, project.trusted_keys); keys.ok()) r.sources.trusted_keys = *keys;
    r.transfer = source.transfer();
    r.observer = &observer;
    // The one CUDA variant rule, as fetch: the toolkit found here, from its
    // files (detect_cuda never runs anything), where no `cuda` is set; else
    // what the system's driver supports, asked once, by the first product
    // that needs it (system_driver_cuda: never a libcuda in the prefix).
    r.detected_cuda = redist::detect_cuda(redist::host_probe::system());
    if (!r.detected_cuda)
        r.driver_cuda = [prefix, asked = std::make_shared<std::optional<std::optional<redist::cuda_detection>>>()] {
            if (!*asked) *asked = system_driver_cuda(prefix);
            return **asked;
        };
    return r;
}

// The library's lock request for the options: upgrades, and the sources
// (drift watching included), made when the library needs them.
redist::project_lock_request lock_request(const project_lock_options& o, const redist::opened_project& p,
                                          const fs::path& prefix, redist::run_observer& observer) {
    redist::project_lock_request r;
    r.upgrade_all = o.upgrade && o.products.empty();
    r.upgrade = o.products;
    r.make_resolve = [&o, &observer, project = &p.project, prefix] {
        redist::project_resolve_options resolve = project_sources(o.source, *project, prefix, observer);
        resolve.on_manifest = [&o](const redist::resolved_release& release) {
            return watch_manifest_drift(o.source, o.strict, o.quiet, release);
        };
        return resolve;
    };
    r.write = !o.dry_run;  // --dry-run writes no lock either
    return r;
}

// What lock_project said besides the lock: warnings, notes, the lock written.
void print_lock_report(const redist::project_lock_report& r, const fs::path& lock_path, bool quiet) {
    if (quiet) return;
    print_lines("warning", r.warnings);
    print_lines("note", r.notes);
    if (r.written) std::printf("wrote %s\n", printable(lock_path.string()).c_str());
}

}  // namespace

void add_project_lock_options(CLI::App& cmd, project_lock_options& o, bool with_strict) {
    cmd.add_option("--file", o.file,
                   "The project file (default: redist.toml in this directory or the nearest parent, up to the "
                   "repository root)")
        ->type_name("FILE");
    cmd.add_option("--lock-file", o.lock_file, "The lock file (default: redist.lock beside the project file)")
        ->type_name("FILE");
    auto* upgrade = cmd.add_flag("--upgrade", o.upgrade,
                                 "Resolve every product's version spec again (newer releases, artifacts replaced "
                                 "upstream) instead of keeping the locked releases");
    cmd.add_option("--product", o.products, "With --upgrade: only this product (repeatable)")
        ->needs(upgrade)
        ->type_name("P");
    if (with_strict) add_strict_flag(cmd, o.strict);
}

int run_project_lock(const project_lock_options& options) {
    auto p = load_project(options);
    if (!p.ok()) return report_error(p.error_value());
    console_observer observer(options.quiet);  // retries, an unusable recompressed-copy record
    auto locked = redist::lock_project(*p, lock_request(options, *p, p->project.prefix, observer));
    if (!locked.ok()) return report_error(locked.error_value());
    print_lock_report(*locked, p->lock_path, options.quiet);
    const redist::project_lock& lock = locked->lock;
    if (options.json) {
        print_lock_json(p->lock_path.string(), lock.products);
    } else if (!options.quiet) {
        for (const auto& product : lock.products) {
            // The variant of each platform and why (the lock's cuda_reasons).
            std::string variants;
            for (const auto& [platform, reason] : product.cuda_reasons) variants += ", " + platform + " " + reason;
            std::printf("locked %s %s%s\n", printable(product.name).c_str(), printable(product.release_label).c_str(),
                        printable(variants).c_str());
        }
    }
    return 0;
}

void print_lock_json(const std::string& lock_file, const std::vector<redist::locked_product>& products) {
    redist::json_writer w(2);
    w.begin_object();
    w.field("lock_file", lock_file);
    w.key("products").begin_array();
    for (const auto& p : products) {
        w.begin_object();
        w.field("name", p.name);
        w.field("release_label", p.release_label);
        w.field("artifacts", static_cast<std::uint64_t>(p.artifacts.size()));
        if (!p.cuda_reasons.empty()) {
            w.key("cuda_reasons").begin_array();
            for (const auto& [platform, reason] : p.cuda_reasons) {
                w.begin_object();
                w.field("platform", platform);
                w.field("reason", reason);
                w.end_object();
            }
            w.end_array();
        }
        w.end_object();
    }
    w.end_array();
    w.end_object();
    std::printf("%s\n", w.str().c_str());
}

bool holds_project_lock(const std::string& path) {
    if (!regular_file_at(path)) return false;
    auto text = redist::read_project_document(path, redist::kMaxLockFileBytes, "lock file");
    return text.ok() && redist::project_lock_from_json(*text, path).ok();
}

namespace {

// --json: what landed, per product, with the libraries directly in lib/ (for
// redist_fetch(FILE ...) in RedistFetch.cmake, which defines a target for each,
// and links a product with "deps": true to the CUDA:: targets it needs).
int print_json(const std::string& platform, const redist::install_report& report, const redist::project_lock& lock) {
    const auto& reports = report.releases;
    auto receipts = redist::read_receipts(report.prefix);
    if (!receipts.ok()) return report_error(receipts.error_value());
    redist::json_writer w(2);
    w.begin_object();
    w.field("prefix", report.prefix.string());
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
        if (std::ranges::any_of(lock.products, [&](const auto& p) { return p.name == r.product && p.deps; }))
            w.field("deps", true);
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

// A glob that skipped no file of any component installed with these globs
// is most likely a typo ("lib/*static.a" for "lib/*_static.a"): one warning
// line each, not an error (an archive may simply not have those files).
void warn_unmatched_excludes(const std::filesystem::path& prefix, const std::vector<std::string>& exclude) {
    if (exclude.empty()) return;
    auto receipts = redist::read_receipts(prefix);
    if (!receipts.ok()) return;
    for (const auto& glob : exclude) {
        const bool matched = std::any_of(receipts->begin(), receipts->end(), [&](const redist::receipt& r) {
            return r.exclude == exclude && std::any_of(r.excluded.begin(), r.excluded.end(), [&](const auto& path) {
                       return redist::path_excluded(path, {glob});
                   });
        });
        if (!matched)
            std::fprintf(stderr, "%s: warning: exclude glob '%s' matched no file in the installed archives\n",
                         tool_name.c_str(), printable(glob).c_str());
    }
}

// A flag sync takes (from an option set it shares) but would not use is
// refused, saying why, rather than silently ignored; nullopt when none is.
std::optional<std::string> unused_flag(const sync_args& args) {
    if (!args.source.manifest.empty() || !args.source.manifest_sha256.empty())
        return std::string(
            "--manifest and --manifest-sha256 pick the release of `redist fetch` or `redist lock PRODUCT VERSION`; "
            "sync installs the releases redist.toml names (pinned by redist.lock)");
    if ((args.locked || args.frozen) && args.install.strict)
        return std::string("--strict fails on manifest drift, but ") + (args.frozen ? "--frozen" : "--locked") +
               " reads no manifest: the lock's SHA-256s decide";
    if (!args.prefix.empty() && args.allow_outside_prefix)
        return std::string(
            "--allow-outside-prefix lets the project's own prefix lie outside its directory; with --prefix that "
            "prefix is not used");
    return std::nullopt;
}

int run_sync(sync_args args) {
    if (auto why = unused_flag(args)) return usage_error(*why);
    if (args.install.json) args.install.quiet = true;
    args.lock.source = args.source;
    args.lock.quiet = args.install.quiet;
    args.lock.strict = args.install.strict;
    args.lock.dry_run = args.install.dry_run;
    auto loaded = load_project(args.lock);
    if (!loaded.ok()) return report_error(loaded.error_value());

    console_observer observer(args.install.quiet);  // retries, an unusable recompressed-copy record
    const fs::path driver_prefix = args.prefix.empty() ? loaded->project.prefix
                                                       : fs::absolute(args.prefix).lexically_normal();
    redist::sync_request request{.lock = lock_request(args.lock, *loaded, driver_prefix, observer),
                                 .platform = args.platform,
                                 .prefix = args.prefix,
                                 .allow_outside_prefix = args.allow_outside_prefix,
                                 .exclude = args.exclude,
                                 .keep_unlisted = args.keep_unlisted,
                                 .use_recompressed = !args.install.no_recompressed};
    request.lock.mode = args.frozen   ? redist::lock_mode::frozen
                        : args.locked ? redist::lock_mode::locked
                                      : redist::lock_mode::update;
    auto plan = redist::plan_sync(*loaded, request);
    if (!plan.ok()) return report_error(plan.error_value());
    print_lock_report(plan->lock, loaded->lock_path, args.install.quiet);

    redist::install_request& req = plan->install;
    const std::string& platform = plan->platform;
    const redist::project_lock& lock = plan->lock.lock;
    std::optional<redist::install_report> report;
    const auto explain = [&](redist::error e) { return redist::explain_lock_mismatch(std::move(e), lock, platform); };
    if (const int code = run_install(args.install, req, report, platform, explain); code != 0 || !report) return code;
    if (!args.install.quiet || args.install.json) warn_unmatched_excludes(req.prefix, req.exclude);
    record_artifacts(args.source, args.install.quiet, *report);  // drift watching
    if (args.install.json) return print_json(platform, *report, lock);
    return 0;
}

}  // namespace

void add_sync_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<sync_args>();
    auto* cmd = app.add_subcommand("sync", "Install every product of a project file (redist.toml) in one transaction");
    add_project_lock_options(*cmd, args->lock, /*with_strict=*/false);  // --strict: add_install_flags
    cmd->add_option("--platform", args->platform, "Install this listed platform (default: this machine's)")
        ->check(platform_check())
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
    auto* locked = cmd->add_flag("--locked", args->locked,
                                 "Install what redist.lock pins, after checking that it is up to date with the "
                                 "project file (exit 4 if not); never write it, never re-resolve (as uv and pixi)");
    cmd->add_flag("--frozen", args->frozen,
                  "Install what redist.lock pins as it is, without checking it against the project file; "
                  "never write it, never re-resolve (as uv and pixi)")
        ->excludes(locked);
    cmd->add_flag("--keep-unlisted", args->keep_unlisted,
                  "Keep components in the prefix that the project does not name (by default they are removed, "
                  "also those a plain `redist fetch` installed there)");
    add_install_flags(*cmd, args->install);
    add_source_options(*cmd, args->source);
    // Parsed, to be refused with a reason (unused_flag), but not offered: sync has no use for them.
    for (const char* name : {"--manifest", "--manifest-sha256"}) cmd->get_option(name)->group("");
    add_trust_option(*cmd, args->source);
    cmd->footer(
        "\nredist.lock is authoritative (as uv's and pixi's locks): a product whose version spec and\n"
        "components are the ones locked installs its locked release, with no index or manifest\n"
        "request; only products added or changed in the project file are resolved, and the lock\n"
        "(every listed platform: URLs, SHA-256s, sizes, manifest SHA-256s) is rewritten only when it\n"
        "changed. --upgrade [--product P] moves to newer releases. An artifact that upstream replaced\n"
        "in place against the lock is an integrity error (exit 5): accept it with\n"
        "`redist sync --upgrade --product P`. --locked: a lock out of date with the project file is\n"
        "an error (exit 4); --frozen installs the lock unchecked; neither writes it.\n"
        "Then the chosen platform's artifacts of every product are staged and committed into the\n"
        "prefix together, or not at all. Not enough free space for the downloads: exit 10, before\n"
        "any download.\n\n"
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
