// redist — fetch NVIDIA redistrib releases, verified, into a prefix.
// Each subcommand lives in tools/commands/<name>.cpp, parses its options and
// makes one library call; main() only wires them up.
#include <cstdio>
#include <memory>
#include <optional>

#include "commands/check.hpp"
#include "commands/commands.hpp"
#include "commands/project_commands.hpp"
#include "common/cli.hpp"
#include "common/observer.hpp"
#include "common/printable.hpp"
#include "redist/lockfile.hpp"
#include "redist/prefix.hpp"
#include "redist/select.hpp"
#include "redist/urls.hpp"

using namespace redist_tools;

namespace {

struct lock_args {
    std::string product;
    std::string version;
    project_lock_options project;        // without PRODUCT VERSION; its source serves both forms
    std::vector<std::string> platforms;  // repeatable; default: the host's
    std::vector<int> cuda;               // repeatable; default: every variant offered
    std::vector<std::string> components;
    std::string output;  // default redist.lock
    bool json = false;   // a summary of the lock (print_lock_json)
    bool quiet = false;
};

// A usage error, or 0: the two forms of `redist lock` take different options.
int check_lock_form(const lock_args& args) {
    if (args.product.empty() != args.version.empty())
        return usage_error("give PRODUCT and VERSION, or neither to lock the project (redist.toml)");
    const bool single = !args.product.empty();
    const auto& p = args.project;
    if (single && (!p.file.empty() || !p.lock_file.empty() || p.upgrade || p.strict))
        return usage_error(
            "--file, --lock-file, --upgrade and --strict lock a project: run `redist lock` without "
            "PRODUCT VERSION");
    if (!single && (!args.platforms.empty() || !args.cuda.empty() || !args.components.empty() || !args.output.empty()))
        return usage_error(
            "--platform, --cuda, --component and --output lock one release: give PRODUCT VERSION (a "
            "project's platforms, CUDA variant and components are in redist.toml)");
    if (!single && (!p.source.manifest.empty() || !p.source.manifest_sha256.empty()))
        return usage_error(
            "--manifest and --manifest-sha256 lock one release: give PRODUCT VERSION (a project's releases are "
            "the ones redist.toml names)");
    return 0;
}

// Resolves the request once and writes every chosen artifact, per platform
// and CUDA variant, with its URL, SHA-256 and size. Without PRODUCT VERSION,
// locks the project instead (run_project_lock).
int cmd_lock(lock_args args) {
    if (const int code = check_lock_form(args)) return code;
    args.project.json = args.json;
    args.project.quiet = args.quiet || args.json;
    if (args.product.empty()) return run_project_lock(args.project);
    const std::string output = args.output.empty() ? "redist.lock" : args.output;
    if (args.json && output == "-")
        return usage_error("--json summarizes the lock written to a file; with -o - the lock itself is the output");
    // A project's lock is redist sync's; a single-release lock never replaces it.
    if (output != "-" && holds_project_lock(output))
        return report_error(redist::make_error(redist::error_code::bad_manifest,
                                               "a project lock (redist sync's) is there; write the single-release "
                                               "lock elsewhere with -o FILE, or lock the project with `redist lock`")
                                .with_path(output));
    const auto& source = args.project.source;
    if (auto keys = load_trusted_keys(source); !keys.ok()) return report_error(keys.error_value());
    // One --cuda N with the cuda product: "latest" is the newest N.x, as for fetch.
    auto spec = redist::release_spec_for_cuda(
        args.product, args.version, args.cuda.size() == 1 ? std::optional<int>(args.cuda.front()) : std::nullopt);
    if (!spec.ok()) return report_error(spec.error_value());
    auto request = make_release_request(source, args.product, *spec);
    // A mirror's recompressed copies: the lock pins each one's decoded tar (tar_sha256).
    console_observer observer(false);
    request.observer = &observer;
    request.recompressed = true;
    auto release = redist::resolve_release(request, source.transfer());
    if (!release.ok()) return report_error(release.error_value());
    std::vector<std::string> platforms = args.platforms;
    if (platforms.empty()) {
        auto host = redist::detect_host_platform(redist::host_probe::system());
        if (!host.ok()) return report_error(host.error_value());
        platforms.push_back(*host);
    }
    auto lock = redist::make_lockfile(*release, platforms, args.cuda, args.components);
    if (!lock.ok()) return report_error(lock.error_value());
    const std::string text = redist::lockfile_to_json(*lock);
    if (const int code = write_output(output, text); code != 0 || output == "-") return code;
    if (args.json) {
        redist::locked_product summary;
        summary.name = lock->product;
        summary.release_label = lock->release_label;
        summary.artifacts = lock->artifacts;
        print_lock_json(output, {summary});
    }
    if (args.json || args.quiet) return 0;
    std::printf("locked %s %s: %zu artifacts -> %s\n", printable(lock->product).c_str(),
                printable(lock->release_label).c_str(), lock->artifacts.size(), printable(output).c_str());
    return 0;
}

void add_lock_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<lock_args>();
    auto* cmd = app.add_subcommand("lock",
                                   "Pin a project (redist.toml) or one release in a lock file; install nothing");
    cmd->add_option("PRODUCT", args->product, "cudnn, cuda, ... (none: lock the project)");
    cmd->add_option("VERSION", args->version, "9.27.0, 9.27, 9 or latest");
    add_source_options(*cmd, args->project.source);
    add_trust_option(*cmd, args->project.source);
    add_project_lock_options(*cmd, args->project);
    cmd->add_option("--platform", args->platforms, "Platforms to lock (repeatable; default: this machine's)")
        ->check(platform_check())
        ->type_name("P");
    cmd->add_option("--cuda", args->cuda,
                    "CUDA majors to lock (repeatable; default: every variant offered). With the cuda product, "
                    "one N makes 'latest' the newest N.x release")
        ->transform(cuda_major_transform())
        ->type_name("N");
    cmd->add_option("--component", args->components, "Components (comma-separated; default: all)")
        ->delimiter(',')
        ->type_name("a,b");
    cmd->add_option("-o,--output", args->output,
                    "Where to write it ('-' for stdout; default redist.lock, never over a project's lock)")
        ->type_name("FILE");
    add_report_flags(*cmd, args->json, args->quiet,
                     "Print one JSON object: lock_file, products [{name, release_label, artifacts}]");
    cmd->footer(
        "\nWithout PRODUCT VERSION: locks the project (redist.toml, found here or in a parent\n"
        "directory) into redist.lock beside it, as `redist sync` would, without installing: what the\n"
        "lock pins stays, what changed in redist.toml is resolved; --upgrade [--product P] moves to\n"
        "newer releases (and accepts artifacts replaced upstream).\n\n"
        "With PRODUCT VERSION: a single-release lock; install it with:\n"
        "  redist fetch --locked redist.lock --prefix DIR [--platform P] [--cuda N]\n"
        "That never re-resolves; if the upstream manifest changed it warns, and any locked artifact\n"
        "that changed upstream is a hard error (exit 5).\n\n" +
        std::string(exit_code_help));
    cmd->final_callback([args, &selected] { selected = [args] { return cmd_lock(*args); }; });
}

}  // namespace

int main(int argc, char** argv) {
    // The child of `redist check` (hidden): runs before any parsing or curl setup.
    if (argc >= 2 && std::string_view(argv[1]) == "__check-probe") return check_probe_main(argc, argv);
    tool_name = "redist";
    CLI::App app{
        "redist: fetch NVIDIA redistrib releases (cuDNN, CUDA, cuTENSOR, ...) into a prefix.\n"
        "Every archive is verified (size and SHA-256) before anything lands in the prefix.",
        "redist"};
    app.set_version_flag("--version", std::string("redist ") + REDIST_VERSION);
    app.require_subcommand(1);
    app.footer(std::string("\nEnvironment:\n  REDIST_BASE_URL  default for --base-url\n"
                           "  REDIST_MIRRORS  default for --mirror (base URLs, comma- or space-separated)\n"
                           "  REDIST_CACHE_DIR, XDG_CACHE_HOME  where the download cache lives (~/.cache/redist)\n"
                           "  REDIST_TRUSTED_KEYS  default for --trusted-key (key files, ':'-separated)\n"
                           "  SSL_CERT_FILE, CURL_CA_BUNDLE  CA bundle for HTTPS\n"
                           "  http_proxy, https_proxy, no_proxy  proxies (through libcurl)\n\n"
                           "Defaults of your own: $XDG_CONFIG_HOME/redist/config.toml (else ~/.config/redist/)\n"
                           "with base-url, mirrors, cache-dir, retries and trusted-keys; the command line, a\n"
                           "project's redist.toml and the variables above come first.\n\n"
                           "`redist COMMAND --help` says more about each command.\n\n") +
               exit_code_help);

    command_runner selected;
    for (auto* add : {add_versions_command, add_show_command, add_fetch_command, add_verify_command, add_list_command,
                      add_remove_command, add_cache_command, add_lock_command, add_env_command, add_mirror_command,
                      add_check_command, add_sbom_command, add_diff_command, add_outdated_command, add_init_command,
                      add_sync_command})
        add(app, selected);
    return run_tool(app, argc, argv, [&] { return selected ? selected() : 2; });
}
