// `redist outdated --prefix DIR` — compares the releases installed in a prefix
// (its receipts) with the newest releases upstream, in the same major version
// and overall. Exits 1 when anything newer exists, as `npm outdated` does.
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "commands/project_commands.hpp"
#include "common/printable.hpp"
#include "redist/install.hpp"
#include "redist/json_writer.hpp"
#include "redist/version.hpp"

namespace redist_tools {

namespace {

struct outdated_args {
    std::string prefix;
    source_options source;
    bool json = false;
    bool quiet = false;
};

struct outdated_row {
    std::string product;
    std::string installed;
    std::set<std::string> components;
    std::string latest_in_major;  // empty: the index has nothing in that major
    std::string latest;
    bool newer() const {
        return (!latest_in_major.empty() && redist::compare_versions(latest_in_major, installed) > 0) ||
               redist::compare_versions(latest, installed) > 0;
    }
};

// "9.27.0" -> "9"; the whole label when it has no dot.
std::string major_of(const std::string& label) { return label.substr(0, label.find('.')); }

int run_outdated(const outdated_args& args) {
    auto receipts = redist::read_receipts(args.prefix);
    if (!receipts.ok()) return report_error(receipts.error_value());
    if (receipts->empty())
        return report_error(redist::make_error(redist::error_code::not_found, "no redist receipts in this prefix")
                                .with_path(args.prefix));
    // One row per installed (product, release); components of one release share it.
    std::map<std::pair<std::string, std::string>, outdated_row> rows;
    for (const auto& r : *receipts) {
        auto& row = rows[{r.product, r.release_label}];
        row.product = r.product;
        row.installed = r.release_label;
        row.components.insert(r.component);
    }
    std::map<std::string, std::vector<std::string>> labels;  // product -> newest first
    for (auto& [key, row] : rows) {
        if (!labels.count(row.product)) {
            auto listed = redist::list_versions(args.source.effective_base_url(), row.product, args.source.transfer(),
                                                args.source.policy());
            if (!listed.ok()) return report_error(listed.error_value());
            labels[row.product] = std::move(*listed);
        }
        const auto& list = labels[row.product];
        row.latest = list.empty() ? row.installed : list.front();
        for (const auto& l : list)
            if (major_of(l) == major_of(row.installed)) {
                row.latest_in_major = l;
                break;
            }
    }
    bool any_newer = false;
    for (const auto& [key, row] : rows) any_newer = any_newer || row.newer();

    if (args.json) {
        redist::json_writer w(2);
        w.begin_array();
        for (const auto& [key, row] : rows) {
            w.begin_object().field("product", row.product).field("installed", row.installed);
            w.key("components").begin_array();
            for (const auto& c : row.components) w.value(c);
            w.end_array();
            w.field("latest_in_major", row.latest_in_major).field("latest", row.latest).field("outdated", row.newer());
            w.end_object();
        }
        w.end_array();
        std::printf("%s\n", w.str().c_str());
    } else if (!args.quiet) {
        std::printf("%-14s %-12s %-16s %-12s %s\n", "PRODUCT", "INSTALLED", "LATEST-IN-MAJOR", "LATEST", "COMPONENTS");
        for (const auto& [key, row] : rows) {
            std::string comps;
            for (const auto& c : row.components) comps += (comps.empty() ? "" : ",") + c;
            // Labels and component names come from receipts and the index: escaped.
            std::printf("%-14s %-12s %-16s %-12s %s%s\n", printable(row.product).c_str(),
                        printable(row.installed).c_str(),
                        row.latest_in_major.empty() ? "-" : printable(row.latest_in_major).c_str(),
                        printable(row.latest).c_str(), printable(comps).c_str(), row.newer() ? "" : "  (up to date)");
        }
    }
    return any_newer ? 1 : 0;
}

}  // namespace

void add_outdated_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<outdated_args>();
    auto* cmd = app.add_subcommand("outdated", "Compare what a prefix holds with the newest releases");
    cmd->add_option("--prefix", args->prefix, "A prefix redist installed into")->required()->type_name("DIR");
    add_source_options(*cmd, args->source);
    add_report_flags(*cmd, args->json, args->quiet, "Print a JSON array, one object per installed release");
    cmd->footer(std::string("\nFor each installed release: the newest release with the same major version, and the\n"
                            "newest overall. Exits 0 when everything is current, 1 when anything newer exists\n"
                            "(as `npm outdated` does); other errors use the codes below.\n\n") +
                exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_outdated(*args); }; });
}

}  // namespace redist_tools
