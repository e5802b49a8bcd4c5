// `redist remove --prefix DIR [--component a,b] [--product P]` — removes what
// redist installed, in one journaled transaction under the prefix lock.
#include <cstdio>
#include <memory>

#include "commands/commands.hpp"
#include "common/printable.hpp"
#include "redist/json_writer.hpp"
#include "redist/prefix.hpp"
#include "redist/suggest.hpp"

namespace redist_tools {

namespace {

struct remove_args {
    std::string prefix;
    std::string product;
    std::vector<std::string> components;
    bool quiet = false;
    bool json = false;
};

int run_remove(const remove_args& args) {
    // A prefix redist never installed into (a typo) is an error, and nothing is created there.
    auto lock = redist::prefix_lock::acquire_existing(args.prefix, [&] {
        std::fprintf(stderr, "%s: waiting for lock on %s\n", tool_name.c_str(), printable(args.prefix).c_str());
    });
    if (!lock.ok()) return report_error(lock.error_value());
    // One transaction for all of them: the receipts are read once.
    std::vector<redist::component_ref> targets;
    if (args.components.empty()) {
        auto receipts = redist::read_installed_receipts(args.prefix);  // under the lock
        if (!receipts.ok()) return report_error(receipts.error_value());
        std::vector<std::string> products;
        for (const auto& r : *receipts) {
            products.push_back(r.product);
            if (args.product.empty() || r.product == args.product) targets.push_back({r.product, r.component});
        }
        // A product that names nothing installed is a mistake, not a removal of nothing.
        if (!args.product.empty() && targets.empty())
            return report_error(redist::make_error(redist::error_code::not_found,
                                                   "product '" + printable(args.product) + "' is not installed" +
                                                       redist::did_you_mean(args.product, products))
                                    .with_path(args.prefix));
    } else {
        for (const auto& component : args.components) targets.push_back({args.product, component});
    }
    auto removed = redist::remove_components(*lock, targets);
    if (!removed.ok()) return report_error(removed.error_value());
    if (args.json) {
        redist::json_writer w(2);
        w.begin_object().field("prefix", args.prefix).key("removed").begin_array();
        for (const auto& t : targets) {
            w.begin_object();
            if (!t.product.empty()) w.field("product", t.product);  // empty: the one product that has it
            w.field("component", t.component).end_object();
        }
        w.end_array().end_object();
        std::printf("%s\n", w.str().c_str());
    } else if (!args.quiet) {
        for (const auto& t : targets)
            std::printf("removed %s from %s\n", printable(t.component).c_str(), printable(args.prefix).c_str());
    }
    return 0;
}

}  // namespace

void add_remove_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<remove_args>();
    auto* cmd = app.add_subcommand("remove", "Remove what redist installed (all, or --component)");
    cmd->add_option("--prefix", args->prefix, "The prefix")->required()->type_name("DIR");
    cmd->add_option("--component", args->components, "Components to remove (default: all)")
        ->delimiter(',')
        ->type_name("a,b");
    add_report_flags(*cmd, args->json, args->quiet, "Print one JSON object: prefix, removed [{product, component}]");
    cmd->add_option("--product", args->product, "Only this product's components")->type_name("NAME");
    cmd->footer(
        "\nOnly files the receipts list are removed (with their receipts and directories left empty);\n"
        "files you added stay. All or nothing: an interrupted removal is completed by the next\n"
        "`redist fetch` or `redist remove` on the prefix. A prefix without receipts (a typo, or a\n"
        "directory redist never installed into) is an error (exit 3), and nothing is created there.\n\n"
        "Examples:\n  redist remove --prefix /opt/cudnn\n"
        "  redist remove --prefix /opt/cuda --component cuda_nvcc --product cuda\n\n" +
        exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_remove(*args); }; });
}

}  // namespace redist_tools
