// `redist verify --prefix DIR` — every installed file against its receipt.
#include <cstdint>
#include <cstdio>
#include <memory>

#include "commands/commands.hpp"
#include "common/printable.hpp"
#include "redist/json_writer.hpp"
#include "redist/prefix.hpp"

namespace redist_tools {

namespace {

struct verify_args {
    std::string prefix;
    bool json = false;
    bool quiet = false;
    unsigned threads = 0;
};

void print_json(const std::string& prefix, const redist::verify_report& report) {
    redist::json_writer w(2);
    w.begin_object();
    w.field("prefix", prefix);
    w.field("ok", report.problems.empty() && report.unreadable.empty());
    w.field("components", std::uint64_t{report.components});
    w.field("files", std::uint64_t{report.files});
    w.key("problems").begin_array();
    for (const auto& p : report.problems) {
        w.begin_object().field("component", p.component).field("path", p.path).field("problem", p.what);
        w.end_object();
    }
    w.end_array();
    w.key("unreadable").begin_array();  // receipts that could not be read: those components were not checked
    for (const auto& u : report.unreadable)
        w.begin_object()
            .field("component", u.component)
            .field("receipt", u.rel_path)
            .field("problem", u.why.message)
            .end_object();
    w.end_array().end_object();
    std::printf("%s\n", w.str().c_str());
}

void print_text(const std::string& prefix, const redist::verify_report& report) {
    for (const auto& p : report.problems)
        std::printf("%s: %s: %s\n", printable(p.component).c_str(), printable(p.path).c_str(),
                    printable(p.what).c_str());
    if (report.problems.empty())
        std::printf("%s: %zu components, %zu files: all match their receipts\n", printable(prefix).c_str(),
                    report.components, report.files);
    else
        std::printf("%s: %zu of %zu files differ from their receipts\n", printable(prefix).c_str(),
                    report.problems.size(), report.files);
}

int run_verify(const verify_args& args) {
    // Under the prefix lock, shared: a commit in progress is waited for, and
    // a journal found is one of a writer that is gone.
    auto report = redist::verify_prefix(args.prefix, args.threads, [&] {
        std::fprintf(stderr, "%s: waiting for lock on %s (a commit is in progress)\n", tool_name.c_str(),
                     printable(args.prefix).c_str());
    });
    if (!report.ok()) return report_error(report.error_value());
    if (report->commit_pending)
        std::fprintf(stderr,
                     "%s: warning: %s: an interrupted commit is pending; the next `redist fetch` or "
                     "`redist remove` on this prefix completes it\n",
                     tool_name.c_str(), printable(args.prefix).c_str());
    if (report->components == 0 && report->unreadable.empty()) {
        return report_error(redist::make_error(redist::error_code::not_found, "no redist receipts in this prefix")
                                .with_path(args.prefix));
    }
    if (args.json) print_json(args.prefix, *report);
    else if (!args.quiet) print_text(args.prefix, *report);
    // A receipt that cannot be read: its component was not checked, the
    // others were. One line each, and the exit code of corrupt input.
    int unreadable = 0;
    for (const auto& u : report->unreadable) unreadable = report_error(u.why);
    if (unreadable != 0) return unreadable;
    return report->problems.empty() ? 0 : redist::exit_code_for(redist::error_code::integrity);
}

}  // namespace

void add_verify_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<verify_args>();
    auto* cmd = app.add_subcommand("verify", "Check installed files against the receipts");
    cmd->add_option("--prefix", args->prefix, "The prefix to check")->required()->type_name("DIR");
    add_report_flags(*cmd, args->json, args->quiet,
                     "Print a JSON report: prefix, ok, components, files, problems [{component, path, problem}], "
                     "unreadable [{component, receipt, problem}]");
    cmd->add_option("--threads", args->threads, "Files and 8 MiB pieces hashed at once (default: cores)")
        ->type_name("N");
    cmd->footer(
        "\nEvery file a receipt lists is checked (symlinks by target; files by type, size and SHA-256,\n"
        "the 8 MiB pieces of large files on all cores at once); nothing is changed. It waits for a\n"
        "commit in progress (the prefix lock, shared), so it never reads half a commit. Exits 5 when any\n"
        "file is missing or changed, 3 when the prefix has no receipts, 4 when a receipt cannot be\n"
        "read (the other components are still checked). To repair: run the same\n"
        "`redist fetch` again with --reinstall.\n\n" +
        exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_verify(*args); }; });
}

}  // namespace redist_tools
