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
#include "common/printable.hpp"
#include "redist/install.hpp"
#include "redist/lockfile.hpp"
#include "redist/urls.hpp"

using namespace redist_tools;

namespace {

struct lock_args {
    std::string product;
    std::string version;
    source_options source;
    std::vector<std::string> platforms;  // repeatable; default: the host's
    std::vector<int> cuda;               // repeatable; default: every variant offered
    std::vector<std::string> components;
    std::string output = "redist.lock";
};

// Resolves the request once and writes every chosen artifact, per platform
// and CUDA variant, with its URL, SHA-256 and size.
int cmd_lock(const lock_args& args) {
    auto release = redist::resolve_release(make_release_request(args.source, args.product, args.version),
                                           args.source.transfer());
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
    if (const int code = write_output(args.output, text); code != 0 || args.output == "-") return code;
    std::printf("locked %s %s: %zu artifacts -> %s\n", printable(lock->product).c_str(),
                printable(lock->release_label).c_str(), lock->artifacts.size(), printable(args.output).c_str());
    return 0;
}

void add_lock_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<lock_args>();
    auto* cmd = app.add_subcommand("lock", "Resolve a request and pin it in a lock file");
    cmd->add_option("PRODUCT", args->product, "cudnn, cuda, ...")->required();
    cmd->add_option("VERSION", args->version, "9.27.0, 9.27, 9 or latest")->required();
    add_source_options(*cmd, args->source);
    cmd->add_option("--platform", args->platforms, "Platforms to lock (repeatable; default: this machine's)")
        ->check(platform_check())
        ->type_name("P");
    cmd->add_option("--cuda", args->cuda, "CUDA majors to lock (repeatable; default: every variant offered)")
        ->transform(cuda_major_transform())
        ->type_name("N");
    cmd->add_option("--component", args->components, "Components (comma-separated; default: all)")
        ->delimiter(',')
        ->type_name("a,b");
    cmd->add_option("-o,--output", args->output, "Where to write it ('-' for stdout; default redist.lock)")
        ->type_name("FILE");
    cmd->footer(
        "\nInstall it with: redist fetch --locked redist.lock --prefix DIR [--platform P] [--cuda N]\n"
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
                           "  SSL_CERT_FILE, CURL_CA_BUNDLE  CA bundle for HTTPS\n"
                           "  http_proxy, https_proxy, no_proxy  proxies (through libcurl)\n\n"
                           "`redist COMMAND --help` says more about each command.\n\n") +
               exit_code_help);

    command_runner selected;
    for (auto* add : {add_versions_command, add_show_command, add_fetch_command, add_verify_command, add_remove_command,
                      add_cache_command, add_lock_command, add_env_command, add_mirror_command, add_check_command,
                      add_sbom_command, add_diff_command, add_outdated_command, add_init_command, add_sync_command})
        add(app, selected);
    return run_tool(app, argc, argv, [&] { return selected ? selected() : 2; });
}
