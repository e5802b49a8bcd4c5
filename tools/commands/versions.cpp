// `redist versions PRODUCT` — the releases the index lists, newest first.
#include <cstdio>
#include <memory>

#include "commands/commands.hpp"
#include "common/printable.hpp"
#include "redist/json_writer.hpp"

namespace redist_tools {

namespace {

struct versions_args {
    std::string product;
    source_options source;
    bool json = false;
    bool quiet = false;
};

int run_versions(const versions_args& args) {
    auto labels = redist::list_versions(args.source.effective_base_url(), args.product, args.source.transfer(),
                                        args.source.policy());
    if (!labels.ok()) return report_error(labels.error_value());
    if (args.quiet && !args.json) return 0;
    if (args.json) {
        redist::json_writer w(0);
        w.begin_array();
        for (const auto& l : *labels) w.value(l);
        w.end_array();
        std::printf("%s\n", w.str().c_str());
    } else {
        for (const auto& l : *labels) std::printf("%s\n", printable(l).c_str());
    }
    return 0;
}

}  // namespace

void add_versions_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<versions_args>();
    auto* cmd = app.add_subcommand("versions", "List a product's releases, newest first");
    cmd->add_option("PRODUCT", args->product, "cudnn, cuda, cutensor, ...")->required();
    add_source_options(*cmd, args->source);
    add_report_flags(*cmd, args->json, args->quiet, "Print a JSON array",
                     "Print nothing: the exit code says whether the product has releases (0) or not (3)");
    cmd->footer(
        "\nReads the index <base>/<product>/redist/ (the redistrib_<version>.json files it lists);\n"
        "--mirror bases are tried first; --offline uses only the cache and file:// sources.\n\n"
        "Examples:\n  redist versions cudnn\n  redist versions cuda --json\n"
        "  redist versions cudnn --base-url file:///srv/mirror\n\n" +
        exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_versions(*args); }; });
}

}  // namespace redist_tools
