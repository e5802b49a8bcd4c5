#include "common/cli.hpp"
#include "common/printable.hpp"

#include <curl/curl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "redist/cache.hpp"
#include "redist/suggest.hpp"
#include "redist/urls.hpp"

namespace redist_tools {

std::string tool_name = "redist";

namespace {

// "Exit codes:" and one line per code, from the library's table (0 first,
// then by number), so --help, exit_code_for() and README.md cannot disagree.
std::string make_exit_code_help() {
    std::vector<redist::exit_code_row> rows(redist::exit_code_table().begin(), redist::exit_code_table().end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.exit_code < b.exit_code; });
    std::string out = "Exit codes:\n    0  success (including \"already installed\")\n";
    for (const auto& r : rows) {
        char code[8];
        std::snprintf(code, sizeof code, "%5d", r.exit_code);
        out += std::string(code) + "  " + r.summary;
        if (*r.detail) out += std::string(" (") + r.detail + ")";
        out += "\n";
    }
    return out;
}

}  // namespace

const std::string exit_code_help = make_exit_code_help();

namespace {
redist::user_config loaded_user_config;
}  // namespace

const redist::user_config& user_defaults() { return loaded_user_config; }

std::filesystem::path effective_cache_dir(const std::string& cache_dir) {
    const char* env = std::getenv("REDIST_CACHE_DIR");
    if (cache_dir.empty() && !(env && *env) && !user_defaults().cache_dir.empty()) return user_defaults().cache_dir;
    return redist::default_cache_dir(cache_dir);
}

int source_options::effective_retries() const { return retries ? *retries : user_defaults().retries.value_or(4); }

redist::transfer_options source_options::transfer() const {
    redist::transfer_options t;
    t.ca_file = ca_file;
    t.stall_timeout_seconds = stall_timeout;
    return t;
}

std::vector<std::string> source_options::effective_mirrors() const {
    const char* env = std::getenv("REDIST_MIRRORS");
    if (!mirrors.empty()) return mirrors;
    if (!env) return user_defaults().mirrors;
    // $REDIST_MIRRORS: whitespace- or comma-separated base URLs.
    std::vector<std::string> out;
    std::string item;
    for (const char c : std::string(env) + ',') {
        if (std::string_view(", \t\n").find(c) == std::string_view::npos) item += c;
        else if (!item.empty()) out.push_back(std::exchange(item, {}));
    }
    return out;
}

std::vector<std::filesystem::path> source_options::local_roots() const {
    std::vector<std::string> named = effective_mirrors();
    named.push_back(effective_base_url());
    return redist::local_roots(named);
}

redist::source_policy source_options::policy() const {
    redist::source_policy p;
    p.mirrors = effective_mirrors();
    if (!no_cache) {
        auto dir = effective_cache_dir(cache_dir);
        if (!dir.empty()) {
            // The library goes on without a cache it cannot create or use
            // (an unwritable HOME): said once, not silently.
            static bool checked = false;
            if (!std::exchange(checked, true)) {
                auto usable = redist::blob_cache::open_if_possible(dir, shared_cache);
                if (usable.ok() && !*usable)
                    std::fprintf(stderr,
                                 "%s: warning: no download cache: cannot create or use %s; pass --cache-dir DIR "
                                 "or set REDIST_CACHE_DIR or XDG_CACHE_HOME to a writable directory\n",
                                 tool_name.c_str(), printable(dir.string()).c_str());
            }
            p.cache_dir = std::move(dir);
        } else {
            // Never a fixed shared path (/tmp/...): without a home, no cache.
            static bool warned = false;
            if (!std::exchange(warned, true))
                std::fprintf(stderr,
                             "%s: warning: no download cache: HOME is unset and the user has no home "
                             "directory; pass --cache-dir DIR or set REDIST_CACHE_DIR\n",
                             tool_name.c_str());
        }
    }
    p.fallback_bases = fallback_bases();
    p.shared_cache = shared_cache;
    p.offline = offline;
    // A key that cannot be read was reported where the command started (load_trusted_keys).
    if (auto keys = load_trusted_keys(*this); keys.ok()) p.trusted_keys = std::move(keys).value();
    p.attempts_per_source = std::max(1, effective_retries());
    // One process, one run: every request of it shares what it learnt about dead sources.
    static const auto health = redist::make_source_health();
    p.health = health;
    return p;
}

std::string source_options::effective_base_url() const {
    if (!base_url.empty()) return redist::to_url(base_url);
    if (const char* env = std::getenv("REDIST_BASE_URL"); env && *env) return redist::to_url(env);
    if (!user_defaults().base_url.empty()) return user_defaults().base_url;
    return std::string(redist::default_base_url);
}

std::vector<std::string> source_options::fallback_bases() const {
    if (!base_url.empty()) return {};
    if (const char* env = std::getenv("REDIST_BASE_URL"); env && *env) return {};
    if (!user_defaults().base_url.empty()) return {};  // the user's own base: that one only
    return {std::string(redist::bin_archive_base_url)};
}

installed_sources sources_for_installed(const source_options& source, const std::vector<redist::receipt>& receipts,
                                        const std::string& product) {
    installed_sources out;
    out.policy = source.policy();
    out.base_url = source.effective_base_url();
    if (!source.base_url.empty()) return out;  // --base-url: the user's choice, alone
    std::vector<std::string> remembered;
    for (const auto& r : receipts) {
        if (r.product != product) continue;
        const auto base = redist::base_of_artifact_url(r.url, product);
        if (base && std::find(remembered.begin(), remembered.end(), *base) == remembered.end())
            remembered.push_back(*base);
    }
    const char* env = std::getenv("REDIST_BASE_URL");
    if (!remembered.empty() && !(env && *env)) {
        out.base_url = remembered.back();
        remembered.pop_back();
    }
    for (auto& base : remembered)
        if (base != out.base_url) out.policy.mirrors.push_back(std::move(base));
    return out;
}

redist::result<redist::resolved_release> resolve_installed_release(const source_options& source,
                                                                   const std::vector<redist::receipt>& receipts,
                                                                   const std::string& product,
                                                                   const std::string& label) {
    const installed_sources where = sources_for_installed(source, receipts, product);
    redist::release_request req = make_release_request(source, product, label);
    req.base_url = where.base_url;
    req.sources = where.policy;
    if (!req.sources.offline) {
        auto offline = req;
        offline.sources.offline = true;
        if (auto cached = redist::resolve_release(offline, source.transfer()); cached.ok()) return cached;
    }
    return redist::resolve_release(req, source.transfer());
}

void add_source_options(CLI::App& app, source_options& options) {
    app.add_option("--base-url", options.base_url,
                   "Where products live: <base>/<product>/redist/. http(s)://, file:// or a local directory. "
                   "Default: $REDIST_BASE_URL, else " +
                       std::string(redist::default_base_url) + ", then " + std::string(redist::bin_archive_base_url))
        ->type_name("URL");
    app.add_option("--manifest", options.manifest,
                   "Use this redistrib_<version>.json (path or URL) instead of resolving a version; "
                   "artifacts are fetched relative to its directory")
        ->type_name("PATH|URL");
    app.add_option("--manifest-sha256", options.manifest_sha256,
                   "Refuse the manifest unless its SHA-256 is this (pins a release, as hermetic builds do)")
        ->type_name("HEX");
    app.add_option("--ca-file", options.ca_file,
                   "CA bundle for HTTPS (default: $SSL_CERT_FILE, $CURL_CA_BUNDLE, else the system's)")
        ->type_name("FILE");
    app.add_option(
           "--mirror", options.mirrors,
           "A base URL with the same layout, tried before --base-url (repeatable; default: $REDIST_MIRRORS); "
           "also a registry: oci://HOST[:PORT]/NAMESPACE or oci+http://..., or an OCI image layout: oci-layout:DIR")
        ->type_name("URL");
    app.add_option("--cache-dir", options.cache_dir,
                   "Download cache (default: $REDIST_CACHE_DIR, else $XDG_CACHE_HOME/redist, else ~/.cache/redist)")
        ->type_name("DIR");
    app.add_flag("--no-cache", options.no_cache, "Do not use the download cache");
    app.add_flag("--shared-cache", options.shared_cache,
                 "Use a cache that other users can write (otherwise refused): every cached file is re-hashed when "
                 "used, and only what this user wrote there is trusted");
    app.add_flag("--offline", options.offline,
                 "Use only the cache and local sources (file://, oci-layout:); say what is missing");
    app.add_option("--retries", options.retries,
                   "Attempts per source for transient failures (default 4), with exponential backoff; for the "
                   "index and manifest too. A mirror that cannot be reached twice in a row (refused, timed out) "
                   "is skipped for the rest of the run; the base URL never is")
        ->type_name("N");
    app.add_option("--stall-timeout", options.stall_timeout,
                   "Seconds without data before a transfer counts as failed and is retried (default 60; the index "
                   "and manifest allow at most 5, and 5 s to connect)")
        ->type_name("S");
    for (const char* name : {"--base-url", "--manifest", "--manifest-sha256", "--ca-file", "--mirror", "--cache-dir",
                             "--no-cache", "--shared-cache", "--offline", "--retries", "--stall-timeout"})
        app.get_option(name)->group(source_options_group);
}

void add_trust_option(CLI::App& app, source_options& options) {
    app.add_option("--trusted-key", options.trusted_keys,
                   "An Ed25519 public key (PEM) whose signature makes a mirror's recompressed copies usable "
                   "(repeatable; default: $REDIST_TRUSTED_KEYS, ':'-separated paths). Without a trusted "
                   "signature, the originals are installed: docs/fleet.md")
        ->type_name("FILE")
        ->group(source_options_group);
}

redist::result<std::vector<redist::trusted_key>> load_trusted_keys(const source_options& options,
                                                                   const std::vector<std::filesystem::path>& extra) {
    std::vector<std::string> paths = options.trusted_keys;
    if (const char* env = std::getenv("REDIST_TRUSTED_KEYS"); env && *env) {
        std::string item;
        for (const char c : std::string(env) + ':') {
            if (c != ':') item += c;
            else if (!item.empty()) paths.push_back(std::exchange(item, {}));
        }
    }
    for (const auto& p : extra) paths.push_back(p.string());
    for (const auto& p : user_defaults().trusted_keys) paths.push_back(p.string());
    std::vector<redist::trusted_key> keys;
    for (const auto& path : paths) {
        REDIST_TRY(auto key, redist::read_trusted_key(path));
        keys.push_back(std::move(key));
    }
    return keys;
}

void add_selection_options(CLI::App& app, selection_options& options, bool platform_default_is_host) {
    app.add_option("--platform", options.platform,
                   std::string("Platform: linux-x86_64, linux-sbsa, linux-aarch64 (Jetson), windows-x86_64, ...") +
                       (platform_default_is_host ? " (default: this machine's)" : " (default: all)"))
        ->check(platform_check())
        ->type_name("P");
    app.add_option_function<std::string>(
           "--cuda", [&options](const std::string& value) { options.cuda = redist::parse_cuda_version(value); },
           "CUDA version of the variant to use, e.g. 12, 13 or 13.2: a major takes its own variant (cuda13), "
           "else its newest minor-keyed one (cuda13.2); N.M prefers cuda<N>.<M>, else the major's")
        ->check(CLI::Validator(
            [](std::string& value) -> std::string {
                if (redist::parse_cuda_version(value)) return {};
                return "expected a CUDA version such as 12 or 12.4, got '" + printable(value) + "'";
            },
            "", "cuda version"))
        ->type_name("N[.M]");
    app.add_option("--component", options.components,
                   "Components to use, comma-separated (default: all; `redist fetch` asks for a choice where the "
                   "release is not one library family, see --all)")
        ->delimiter(',')
        ->type_name("a,b");
}

void add_strict_flag(CLI::App& app, bool& strict) {
    app.add_flag("--strict", strict,
                 "Fail (exit 5) when a manifest differs from the one this URL served before (drift)");
}

void add_fetch_flags(CLI::App& app, fetch_options& options) {
    app.add_option("--prefix", options.prefix, "Install into this directory (created if needed)")
        ->required()
        ->type_name("DIR");
    add_source_options(app, options.source);
    add_trust_option(app, options.source);
    add_selection_options(app, options.selection, true);
    app.add_flag(
           "--all", options.all,
           "Without --component: every component except the driver's (nvidia_driver, nvidia_fs, "
           "fabricmanager, ...). Needed for the CUDA toolkit (a release with driver components or over 2 GiB that "
           "is not one library family); "
           "one that is (cudnn) installs every component by default")
        ->excludes("--component");
    app.add_option("--locked", options.locked,
                   "Install exactly what this lock file (from `redist lock`) pins; never re-resolve")
        ->type_name("FILE");
    add_install_flags(app, options.install);
    app.add_flag("--check", options.check,
                 "Run the full `redist check` after installing and fail (exit 11) when a check fails: it runs code "
                 "from the installed libraries (every one loaded, RTLD_NOW, in child processes whose process groups "
                 "are killed whole at the timeout; the driver is always the system's). Without it a quick check "
                 "runs and only warns: it reads files only (DT_NEEDED and symbol-version resolution, versions from "
                 "file names and headers, shadowing copies) and asks the system's driver its version; nothing "
                 "installed is run");
    app.add_flag("--no-check", options.no_check, "Skip the post-install checks (see `redist check`)");
    app.add_flag("--with-deps", options.with_deps,
                 "Also install what the release needs from the CUDA toolkit that the prefix lacks (cuDNN: "
                 "cuda_cudart, libcublas, cuda_nvrtc, and cuda_crt for CUDA 13), from the `cuda` release of the "
                 "chosen variant's CUDA major already in the prefix, else the newest the source lists; one "
                 "transaction, verified like the rest");
    app.add_option("--deps-cuda-version", options.deps_cuda_version,
                   "With --with-deps (implied): the `cuda` release the dependencies come from (13.0.0, 13.0, 13), "
                   "of the chosen variant's CUDA major")
        ->type_name("VERSION");
}

void add_install_flags(CLI::App& app, install_flags& options) {
    app.add_flag("--reinstall", options.reinstall,
                 "Install again even when the receipts say it is installed (repairs files `redist verify` reports)");
    app.add_flag("--overwrite", options.overwrite,
                 "Replace files in the prefix that no receipt owns (otherwise a conflict, exit 9)");
    app.add_flag("--force", options.force, "Both --reinstall and --overwrite");
    app.add_flag("--dry-run", options.dry_run,
                 "Print the plan (per artifact: unchanged, cached-tree, cached-archive, download or remove, with "
                 "sizes and totals) and every conflict the install would refuse, and exit (9 when there is a "
                 "conflict). Archives whose files the cache does not list yet are read into the cache first (so "
                 "the install then unpacks nothing; with --no-cache they are named as not checked); nothing is "
                 "written into the prefix");
    add_strict_flag(app, options.strict);
    app.add_option("--link-mode", options.link_mode,
                   "How a cached extracted tree is placed on re-installs: auto (reflink where possible, else copy; the "
                   "default), reflink, copy, or hardlink (instant, but prefixes share inodes with the cache)")
        ->check(CLI::IsMember({"auto", "reflink", "hardlink", "copy"}))
        ->type_name("MODE");
    app.add_option("--jobs,-j", options.jobs,
                   "Artifacts fetched at once, largest first (default: enough for the others to finish beside the "
                   "largest, ceil(total size / largest size), at most --threads)")
        ->type_name("N");
    app.add_option("--connections", options.connections,
                   "Ranged connections per archive, for links that cap each connection (default: an archive "
                   "of 64 MiB or more starts as one stream and goes on over 6 once the stream keeps the "
                   "unpacker waiting; N splits any archive of 8 MiB or more from the start; 1: one stream; a "
                   "server that ignores ranges gets one stream)")
        ->check(CLI::Range(1, 32))
        ->type_name("N");
    app.add_option("--max-expansion", options.max_expansion,
                   "An archive whose hash is not yet known may unpack to at most N times its size "
                   "(at least 64 MiB) before it is refused as unsafe (default 20; 0: no limit)")
        ->type_name("N");
    app.add_option("--max-memory", options.max_memory,
                   "Memory the run's decoders, writers and queues share, e.g. 512MiB (default: RAM/8 "
                   "within 256 MiB..1 GiB; see redist/budget.hpp)")
        ->transform(CLI::AsSizeValue(false).description(""))
        ->type_name("SIZE");
    app.add_option("--threads", options.threads, "Threads the run's decoders and writers share (default: cores)")
        ->type_name("N");
    app.add_flag("--profile", options.profile,
                 "Print per-stage busy and wait times to stderr at the end: transfer (busy: hashing the "
                 "archive; wait: the unpacker is behind), decoder (busy: decoding xz "
                 "blocks, on any thread), extractor, writers");
    app.add_flag("--no-recompressed", options.no_recompressed,
                 "Never install a mirror's recompressed (.tar.zst) copies. By default, where the manifest's "
                 "directory has a recompressed_<label>.json (redist mirror --recompress zstd), an archive not in "
                 "the cache is installed from its copy (faster to decode), verified against the copy's SHA-256 "
                 "and the decoded tar's (and a lock's tar_sha256); a copy that fails is discarded and the "
                 "original installed. Turn them off to install only NVIDIA's bytes, or to skip the extra request");
    add_report_flags(app, options.json, options.quiet, "Print one JSON report at the end instead of progress");
    // --help: the everyday flags under "Options", then where bytes come from, then the knobs.
    for (const char* name : {"--strict", "--no-recompressed"}) app.get_option(name)->group(source_options_group);
    for (const char* name :
         {"--link-mode", "--jobs", "--connections", "--max-expansion", "--max-memory", "--threads", "--profile"})
        app.get_option(name)->group(advanced_options_group);
}

void add_report_flags(CLI::App& app, bool& json, bool& quiet, const std::string& json_help,
                      const std::string& quiet_help) {
    app.add_flag("--json", json, json_help);
    app.add_flag("--quiet,-q", quiet, quiet_help);
}

redist::release_request make_release_request(const source_options& source, const std::string& product,
                                             const std::string& version) {
    redist::release_request req;
    req.product = product;
    req.version_spec = version;
    req.base_url = source.effective_base_url();
    req.manifest_location = source.manifest;
    req.manifest_sha256 = source.manifest_sha256;
    req.sources = source.policy();
    return req;
}

redist::result<std::string> effective_platform(const std::string& platform) {
    if (!platform.empty()) return platform;
    return redist::detect_host_platform(redist::host_probe::system());
}

int report_error(const redist::error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool_name.c_str(), printable(e.describe()).c_str());
    return redist::exit_code_for(e.code);
}

int usage_error(const std::string& message) {
    return report_error(redist::make_error(redist::error_code::usage, message));
}

namespace {

// The subcommand the parse reached: `redist cache prune` -> prune.
const CLI::App* deepest_subcommand(const CLI::App& app) {
    const CLI::App* at = &app;
    for (auto subs = at->get_subcommands(); !subs.empty(); subs = at->get_subcommands()) at = subs.front();
    return at;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
    return names;
}

// A first word that is no subcommand, before CLI11 says only "A subcommand is
// required": "unknown command 'fecth' (did you mean 'fetch'?)".
std::optional<std::string> unknown_subcommand(const CLI::App& app, int argc, char** argv) {
    if (argc < 2 || argv[1][0] == '-') return std::nullopt;
    const auto names = subcommand_names(app);
    if (names.empty() || std::find(names.begin(), names.end(), argv[1]) != names.end()) return std::nullopt;
    return "unknown command '" + printable(argv[1]) + "'" + redist::did_you_mean(argv[1], names) + "; see '" +
           tool_name + " --help'";
}

// What CLI11 could not place, as "unknown option '--prefx' (did you mean
// '--prefix'?)" against the options of the subcommand it was given to.
// CLI11 checks required options before it reports extras, so a typo of a
// required flag would read "--prefix is required"; the extras go first here.
std::optional<std::string> describe_extras(const CLI::App& app) {
    const CLI::App* at = deepest_subcommand(app);
    const auto extras = at->remaining();
    if (extras.empty()) return std::nullopt;
    const std::string& first = extras.front();
    std::vector<std::string> flags;
    for (const auto* opt : at->get_options()) {
        for (const auto& l : opt->get_lnames()) flags.push_back("--" + l);
        for (const auto& s : opt->get_snames()) flags.push_back("-" + s);
    }
    const std::string command = at == &app ? tool_name : tool_name + " " + at->get_name();
    if (first.size() > 1 && first[0] == '-') {
        const std::string flag = first.substr(0, first.find('='));
        return "unknown option '" + printable(flag) + "'" + redist::did_you_mean(flag, flags) + "; see '" + command +
               " --help'";
    }
    std::string hint = redist::did_you_mean(first, subcommand_names(*at));
    return "unexpected argument '" + printable(first) + "'" + hint + "; see '" + command + " --help'";
}

}  // namespace

int run_tool(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
    const int usage_exit = redist::exit_code_for(redist::error_code::usage);
    // A bare `redist` gets the help, and exits as a usage error (as uv does:
    // a script that forgot its subcommand must not pass).
    if (argc < 2 && app.get_require_subcommand_min() > 0) {
        std::fputs(app.help().c_str(), stdout);
        return usage_exit;
    }
    if (auto unknown = unknown_subcommand(app, argc, argv)) {
        std::fprintf(stderr, "%s: error: %s\n", tool_name.c_str(), unknown->c_str());
        return usage_exit;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {  // --help, --help-all, --version
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        if (auto extras = describe_extras(app)) {
            std::fprintf(stderr, "%s: error: %s\n", tool_name.c_str(), extras->c_str());
            return usage_exit;
        }
        // Every other usage error in the tools' one-line form (CLI11 would
        // print its message and "Run with --help" on two).
        std::fprintf(stderr, "%s: error: %s; see '%s --help'\n", tool_name.c_str(), printable(e.what()).c_str(),
                     tool_name.c_str());
        return usage_exit;
    }
    auto config = redist::read_user_config(redist::user_config_path());
    if (!config.ok()) return report_error(config.error_value());
    loaded_user_config = std::move(config).value();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int code = 0;
    try {
        code = body();
    } catch (const std::exception& e) {
        code = report_error(redist::make_error(redist::error_code::internal, e.what()));
    }
    curl_global_cleanup();
    return code;
}

CLI::Validator cuda_major_transform() {
    return CLI::Validator(
        [](std::string& value) -> std::string {
            const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
            std::size_t major_end = 0;
            while (major_end < value.size() && is_digit(value[major_end])) ++major_end;
            bool ok = major_end > 0 && major_end <= 3;
            int dots = 0;
            for (std::size_t i = major_end; ok && i < value.size(); ++i) {
                if (value[i] == '.') ok = ++dots <= 2 && i + 1 < value.size() && is_digit(value[i + 1]);
                else ok = is_digit(value[i]);
            }
            if (!ok) return "expected a CUDA version such as 12 or 12.4, got '" + printable(value) + "'";
            value.resize(major_end);
            return {};
        },
        "", "cuda major");
}

CLI::Validator platform_check() {
    return CLI::Validator([](std::string& value) { return redist::platform_problem(value).value_or(std::string()); },
                          "", "platform");
}

namespace {

std::atomic<bool> cancel_requested{false};
std::atomic<int> signals_seen{0};
char again_message[160];
std::size_t again_length = 0;
struct sigaction previous_int {};
struct sigaction previous_term {};

void on_interrupt(int) {
    if (signals_seen.fetch_add(1) > 0) {
        // Only async-signal-safe calls here: write(2) and _exit(2).
        [[maybe_unused]] const auto n = ::write(STDERR_FILENO, again_message, again_length);
        ::_exit(130);
    }
    cancel_requested.store(true);
}

}  // namespace

interrupt_scope::interrupt_scope() {
    static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);
    const std::string text = "\n" + tool_name + ": interrupted again: stopping at once (the next run cleans up)\n";
    again_length = std::min(text.size(), sizeof again_message);
    std::memcpy(again_message, text.data(), again_length);
    cancel_requested.store(false);
    signals_seen.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // the library's reads and writes go on; the flag stops the run
    ::sigaction(SIGINT, &sa, &previous_int);
    ::sigaction(SIGTERM, &sa, &previous_term);
}

interrupt_scope::~interrupt_scope() {
    ::sigaction(SIGINT, &previous_int, nullptr);
    ::sigaction(SIGTERM, &previous_term, nullptr);
}

std::atomic<bool>* interrupt_scope::cancel_flag() { return &cancel_requested; }

bool interrupt_scope::interrupted() const { return signals_seen.load() > 0; }

std::string human_size(std::uint64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1024 && unit < 4) {
        value /= 1024;
        ++unit;
    }
    char buf[32];
    if (unit == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    else std::snprintf(buf, sizeof buf, value < 10 ? "%.1f %s" : "%.0f %s", value, units[unit]);
    return buf;
}

std::string version_change(const std::optional<std::string>& previous_version,
                           const std::optional<std::string>& previous_variant, const std::string& version,
                           const std::optional<std::string>& variant) {
    const auto label = [](const std::string& v, const std::optional<std::string>& var) {
        return printable(v) + (var ? " (" + printable(*var) + ")" : "");
    };
    const std::string now = label(version, variant);
    if (!previous_version) return now + " (new)";
    if (*previous_version == version && previous_variant == variant) return now;
    std::string text = label(*previous_version, previous_variant) + " -> " + now;
    if (previous_variant != variant)
        text += " (variant changes " + (previous_variant ? printable(*previous_variant) : std::string("none")) +
                " -> " + (variant ? printable(*variant) : std::string("none")) + ")";
    return text;
}

}  // namespace redist_tools
