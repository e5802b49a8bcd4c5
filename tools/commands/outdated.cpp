// `redist outdated --prefix DIR` — compares the releases installed in a prefix
// (its receipts) with what is wanted and what is newest upstream. WANTED is
// the newest release the project's version spec allows (redist.toml), else
// the newest in the installed major. Exits 1 only when a wanted update
// exists, as `npm outdated` does: a project pinned to 12.9 is not outdated
// because 13.0 exists.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "commands/project_commands.hpp"
#include "common/printable.hpp"
#include "redist/json_writer.hpp"
#include "redist/prefix.hpp"
#include "redist/project.hpp"
#include "redist/sync.hpp"
#include "redist/version.hpp"

namespace redist_tools {

namespace {

struct outdated_args {
    std::string prefix;
    std::string file;  // --file: the project file; default redist.toml here or in a parent
    source_options source;
    bool json = false;
    bool quiet = false;
};

struct outdated_row {
    std::string product;
    std::string installed;
    std::set<std::string> components;
    std::string spec;    // what the project asks for; empty: the installed major
    std::string wanted;  // empty: nothing upstream matches the spec (or the major)
    std::string latest;
    bool newer() const { return !wanted.empty() && redist::compare_versions(wanted, installed) > 0; }
};

// "9.27.0" -> "9"; the whole label when it has no dot.
std::string major_of(const std::string& label) { return label.substr(0, label.find('.')); }

void print_rows(const std::map<std::pair<std::string, std::string>, outdated_row>& rows, bool json) {
    if (json) {
        redist::json_writer w(2);
        w.begin_array();
        for (const auto& [key, row] : rows) {
            w.begin_object().field("product", row.product).field("installed", row.installed);
            w.key("components").begin_array();
            for (const auto& c : row.components) w.value(c);
            w.end_array();
            w.field("spec", row.spec.empty() ? major_of(row.installed) : row.spec);
            w.field("wanted", row.wanted).field("latest", row.latest).field("outdated", row.newer());
            w.end_object();
        }
        w.end_array();
        std::printf("%s\n", w.str().c_str());
        return;
    }
    std::printf("%-14s %-12s %-12s %-12s %s\n", "PRODUCT", "INSTALLED", "WANTED", "LATEST", "COMPONENTS");
    for (const auto& [key, row] : rows) {
        std::string comps;
        for (const auto& c : row.components) comps += (comps.empty() ? "" : ",") + c;
        // Labels and component names come from receipts and the index: escaped.
        std::printf("%-14s %-12s %-12s %-12s %s%s\n", printable(row.product).c_str(), printable(row.installed).c_str(),
                    row.wanted.empty() ? "-" : printable(row.wanted).c_str(), printable(row.latest).c_str(),
                    printable(comps).c_str(), row.newer() ? "" : "  (up to date)");
    }
}

int run_outdated(outdated_args args) {
    auto project = read_project_if_any(args.file);
    if (!project.ok()) return report_error(project.error_value());
    if (args.prefix.empty() && *project) args.prefix = (*project)->prefix.string();
    if (args.prefix.empty()) return usage_error(kNoProject);
    auto receipts = redist::read_installed_receipts(args.prefix);
    if (!receipts.ok()) return report_error(receipts.error_value());
    // One row per installed (product, release); components of one release share it.
    std::map<std::pair<std::string, std::string>, outdated_row> rows;
    for (const auto& r : *receipts) {
        auto& row = rows[{r.product, r.release_label}];
        row.product = r.product;
        row.installed = r.release_label;
        row.components.insert(r.component);
        if (*project)
            for (const auto& p : (*project)->products)
                if (p.name == r.product) row.spec = p.version;
    }
    std::map<std::string, std::vector<std::string>> labels;  // product -> newest first
    for (auto& [key, row] : rows) {
        if (!labels.count(row.product)) {
            const auto where = sources_for_installed(args.source, *receipts, row.product);
            auto listed = redist::list_versions(where.base_url, row.product, args.source.transfer(), where.policy);
            if (!listed.ok()) return report_error(listed.error_value());
            labels[row.product] = std::move(*listed);
        }
        const auto& list = labels[row.product];
        row.latest = list.empty() ? row.installed : list.front();
        const auto wanted = redist::resolve_version_spec(row.spec.empty() ? major_of(row.installed) : row.spec, list);
        if (wanted.ok()) row.wanted = *wanted;
    }
    bool any_newer = false;
    for (const auto& [key, row] : rows) any_newer = any_newer || row.newer();
    if (args.json || !args.quiet) print_rows(rows, args.json);
    return any_newer ? 1 : 0;
}

}  // namespace

redist::result<std::optional<redist::project_file>> read_project_if_any(const std::string& given) {
    // Found (here, else a parent) and read as `redist sync` does: a regular file, bounded.
    auto opened = redist::open_project({.file = given});
    if (!opened.ok() && given.empty() && opened.error_value().code == redist::error_code::not_found)
        return std::optional<redist::project_file>();
    REDIST_TRY(auto project, std::move(opened));
    return std::optional<redist::project_file>(std::move(project.project));
}

redist::result<std::string> prefix_or_project(const std::string& prefix, const std::string& file) {
    if (!prefix.empty()) return prefix;
    REDIST_TRY(const auto project, read_project_if_any(file));
    return project ? project->prefix.string() : std::string();
}

void add_outdated_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<outdated_args>();
    auto* cmd = app.add_subcommand("outdated", "Compare what a prefix holds with the wanted and newest releases");
    cmd->add_option("--prefix", args->prefix, "A prefix redist installed into (default: the project's)")
        ->type_name("DIR");
    cmd->add_option("--file", args->file,
                    "The project file whose version specs say what is wanted (default redist.toml here or in a "
                    "parent)")
        ->type_name("FILE");
    add_source_options(*cmd, args->source);
    add_report_flags(*cmd, args->json, args->quiet, "Print a JSON array, one object per installed release");
    cmd->footer(std::string("\nFor each installed release: WANTED, the newest release its spec allows (the\n"
                            "project's version, e.g. 12.9 allows 12.9.x; without a project, the installed\n"
                            "major), and LATEST, the newest overall. Exits 0 when every release is the wanted\n"
                            "one, 1 when a wanted update exists (as `npm outdated` does; a newer LATEST alone\n"
                            "is not one); other errors use the codes below. Releases are listed from the\n"
                            "sources the receipts name (see `redist sbom --help`).\n\n") +
                exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_outdated(*args); }; });
}

}  // namespace redist_tools
