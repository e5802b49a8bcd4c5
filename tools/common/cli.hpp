// Shared pieces of the command-line tools: option sets, error rendering,
// exit codes, progress display. Tools stay thin: parse arguments, call the
// library, render the result.
#pragma once

#include <CLI/CLI.hpp>

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/install.hpp"
#include "redist/prefix.hpp"
#include "redist/project.hpp"

namespace redist_tools {

// The user's config.toml (redist::user_config_path()), read once by
// run_tool before any command runs (a broken file is that command's error);
// empty when there is none. The command line, a project file and the
// environment variables all come before it.
const redist::user_config& user_defaults();
// The cache directory: --cache-dir, else $REDIST_CACHE_DIR, else
// config.toml's cache-dir, else redist::default_cache_dir()'s.
std::filesystem::path effective_cache_dir(const std::string& cache_dir);

// The "Exit codes:" section of every --help, made from
// redist::exit_code_table() (the README's table is tested against it).
extern const std::string exit_code_help;

// The headings of --help after the everyday "Options" (as uv groups its
// options): where manifests and archives come from, and the knobs few need.
inline constexpr const char* source_options_group = "Source options";
inline constexpr const char* advanced_options_group = "Advanced options";

// Options shared by every command that reads a release.
struct source_options {
    std::string base_url;                   // --base-url, else $REDIST_BASE_URL, else NVIDIA's
    std::string manifest;                   // --manifest PATH|URL
    std::string manifest_sha256;            // --manifest-sha256 HEX
    std::string ca_file;                    // --ca-file
    std::vector<std::string> mirrors;       // --mirror (repeatable), else $REDIST_MIRRORS
    std::string cache_dir;                  // --cache-dir, else $REDIST_CACHE_DIR, $XDG_CACHE_HOME/redist
    bool no_cache = false;                  // --no-cache
    bool shared_cache = false;              // --shared-cache: the cache may belong to others; re-verify what is used
    bool offline = false;                   // --offline
    std::optional<int> retries;             // --retries: attempts per source (see effective_retries())
    std::vector<std::string> trusted_keys;  // --trusted-key (repeatable), and $REDIST_TRUSTED_KEYS
    long stall_timeout = 60;                // --stall-timeout seconds
    redist::transfer_options transfer() const;
    redist::source_policy policy() const;
    std::string effective_base_url() const;
    // The bases tried after effective_base_url(): NVIDIA's bin-archive when
    // no base is named (--base-url, $REDIST_BASE_URL, config.toml's base-url), else none.
    std::vector<std::string> fallback_bases() const;
    std::vector<std::string> effective_mirrors() const;  // --mirror, else $REDIST_MIRRORS, else config.toml's
    int effective_retries() const;                       // --retries, else config.toml's, else 4
    // The local directories among the base URL and the mirrors the user
    // named: where a lock's file:// URLs may point (redist/urls.hpp local_roots).
    std::vector<std::filesystem::path> local_roots() const;
};
void add_source_options(CLI::App& app, source_options& options);
// --trusted-key FILE (repeatable): the public keys whose signature makes a
// mirror's recompressed copies usable, for the commands that install or lock.
void add_trust_option(CLI::App& app, source_options& options);
// The keys of --trusted-key and $REDIST_TRUSTED_KEYS (paths, ':'-separated),
// and config.toml's; `extra` (a project's) are added. A key that cannot be read is
// an error naming the file.
redist::result<std::vector<redist::trusted_key>> load_trusted_keys(
    const source_options& options, const std::vector<std::filesystem::path>& extra = {});

// Options that select artifacts.
struct selection_options {
    std::string platform;                      // --platform, else the host's
    std::optional<redist::cuda_version> cuda;  // --cuda N or N.M
    std::vector<std::string> components;       // --component a,b
};
void add_selection_options(CLI::App& app, selection_options& options, bool platform_default_is_host);

// The install flags `fetch` and `sync` share, registered once (add_install_flags).
struct install_flags {
    std::string link_mode = "auto";  // --link-mode
    bool force = false;              // --force: both of the next two
    bool reinstall = false;          // --reinstall: even when the receipts match
    bool overwrite = false;          // --overwrite: replace files in the prefix that no receipt owns
    bool strict = false;             // --strict: upstream drift is an error (exit 5)
    bool json = false;
    bool quiet = false;
    bool dry_run = false;  // --dry-run: print the plan, change nothing
    unsigned jobs = 0;
    unsigned max_expansion = 20;   // --max-expansion (see redist::install_request)
    int connections = 0;           // --connections N (see install_request::connections); 0 = the default
    std::uint64_t max_memory = 0;  // --max-memory SIZE (see redist/budget.hpp); 0 = the default
    unsigned threads = 0;          // --threads N; 0 = the cores
    bool profile = false;          // --profile or REDIST_PROFILE=1: per-stage times on stderr
    bool no_recompressed = false;  // --no-recompressed: never install a mirror's recompressed copies
};
void add_install_flags(CLI::App& app, install_flags& flags);

// Everything `redist fetch` and `cudnn-fetch` take.
struct fetch_options {
    source_options source;
    selection_options selection;
    install_flags install;
    std::string product;
    std::string version = "latest";
    std::string prefix;
    std::string locked;     // --locked FILE
    bool all = false;       // --all: every component but the driver's (see redist::unnamed_components)
    bool check = false;     // --check: a failed post-install check is an error (exit 11)
    bool no_check = false;  // --no-check: skip the post-install checks
    // --with-deps: the components redist::dependencies_of() names that the
    // prefix lacks, from one release of the `cuda` product, in the same install.
    bool with_deps = false;
    std::string deps_cuda_version;  // --deps-cuda-version: that release (a CUDA N.x spec); implies --with-deps
};
void add_fetch_flags(CLI::App& app, fetch_options& options);
// --strict, as `redist fetch` and `redist sync` take it: a manifest that
// differs from the one its URL served before (drift) is an error (exit 5).
void add_strict_flag(CLI::App& app, bool& strict);

// The one install front end of fetch and sync: fills `req`'s options from
// the flags and the sources (req.prefix, releases, exclude and keep_unlisted
// are the caller's; so are req.sources when set), then with --dry-run prints
// the plan and returns 0 leaving `report` empty; otherwise installs with the
// progress display, stops cleanly on Ctrl-C (exit 130, nothing committed),
// prints --profile and, without --json or --quiet, the summary
// (print_install_summary), and sets `report`. `explain`, when set, rewrites
// an install error before it is printed. Returns the exit code.
int run_install(const install_flags& flags, redist::install_request& req, std::optional<redist::install_report>& report,
                const std::string& platform, const std::function<redist::error(redist::error)>& explain = {});

// Fills a release_request from the options (base URL, manifest, pin, mirrors, cache).
redist::release_request make_release_request(const source_options& source, const std::string& product,
                                             const std::string& version);

// Where to read again what a prefix holds (sbom's licenses, outdated's
// index). With --base-url: that base (after --mirror), as for any command.
// Otherwise the bases the receipts of `product` came from (each receipt's
// URL is <base>/<product>/redist/...), after --mirror and before
// $REDIST_BASE_URL when set; NVIDIA's default base only when the receipts
// name none, so that a prefix installed from a mirror is never sent
// upstream by surprise. A remembered base only ever forms
// <base>/<product>/redist/ URLs with validated names (index, manifest).
struct installed_sources {
    std::string base_url;          // the last resort
    redist::source_policy policy;  // mirrors = what is tried before it
};
installed_sources sources_for_installed(const source_options& source, const std::vector<redist::receipt>& receipts,
                                        const std::string& product);

// The manifest of an installed release, cache first: every source above is
// tried offline (the cache and file:// URLs) before any is asked online.
redist::result<redist::resolved_release> resolve_installed_release(const source_options& source,
                                                                   const std::vector<redist::receipt>& receipts,
                                                                   const std::string& product,
                                                                   const std::string& label);

// The platform to use: --platform, else the host's.
redist::result<std::string> effective_platform(const std::string& platform);

// --json (with what it prints) and -q/--quiet ("print only errors"): the
// same two flags, in the same words, on every command that prints a report.
// `quiet_help`, when given, says what -q leaves out where "print only
// errors" would not be the whole story (a command whose output is the answer).
void add_report_flags(CLI::App& app, bool& json, bool& quiet, const std::string& json_help,
                      const std::string& quiet_help = "Print only errors (the exit code says the rest)");

// Runs a fetch and renders it (progress, summary or --json). Returns the exit code.
int run_fetch(const fetch_options& options);

// Prints "<tool>: error: <one line>" to stderr and returns the exit code for it.
int report_error(const redist::error& e);
// report_error() of a usage error (exit 2) with this message.
int usage_error(const std::string& message);

// Wraps a tool's main: parses, runs, maps CLI11 and library errors to exit
// codes. `body` returns an exit code.
int run_tool(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

// Ctrl-C (SIGINT) and SIGTERM while a scope lives: the first sets
// cancel_flag() (install_request::cancel: the library stops before its
// commit and discards its stages; the tool then says so and exits 130); a
// second one ends the process at once (exit 130; the next run on the prefix
// cleans up what was left). The previous handlers come back at the end.
class interrupt_scope {
public:
    interrupt_scope();
    ~interrupt_scope();
    interrupt_scope(const interrupt_scope&) = delete;
    interrupt_scope& operator=(const interrupt_scope&) = delete;
    std::atomic<bool>* cancel_flag();
    bool interrupted() const;  // a signal came (the flag alone may mean a failure)
};

// "1.4 GiB", "812 KiB", "17 B".
std::string human_size(std::uint64_t bytes);

// For --cuda of `lock` and `mirror`: a CUDA version as people write it (12,
// 12.4, 12.4.1) becomes its major (12): they take every variant of a major.
// fetch's --cuda keeps the minor (add_selection_options).
CLI::Validator cuda_major_transform();

// For every --platform: one of redist::known_platforms(), else a usage error
// with the likely intent (redist::platform_problem).
CLI::Validator platform_check();

// Name of the running tool ("redist", "cudnn-fetch"), for messages.
extern std::string tool_name;

// What an install changes of a component, printable, as apt and pip say it:
// "9.19.0 (cuda12) -> 9.27.0 (cuda13) (variant changes cuda12 -> cuda13)",
// "9.27.0 (cuda13) (new)" when nothing was installed, "9.27.0 (cuda13)"
// when the version and variant stay (a reinstall).
std::string version_change(const std::optional<std::string>& previous_version,
                           const std::optional<std::string>& previous_variant, const std::string& version,
                           const std::optional<std::string>& variant);

}  // namespace redist_tools
