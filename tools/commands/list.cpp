// `redist list [--prefix DIR] [--json]` — what redist installed in a prefix,
// one row per component, from its receipts (as `pip list`, `pixi list` and
// `dpkg -l`). Reads only; a prefix without receipts is exit 3.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands/project_commands.hpp"
#include "common/printable.hpp"
#include "redist/json_writer.hpp"
#include "redist/prefix.hpp"

namespace redist_tools {

namespace {

struct list_args {
    std::string prefix;
    std::string file;  // --file: the project whose prefix is listed; default redist.toml here or in a parent
    bool json = false;
    bool quiet = false;
};

// The bytes of a receipt's regular files (what the component takes on disk, before any sharing).
std::uint64_t installed_bytes(const redist::receipt& r) {
    std::uint64_t total = 0;
    for (const auto& f : r.files)
        if (f.kind == redist::entry_kind::regular) total += f.size;
    return total;
}

void print_json(const std::string& prefix, const std::vector<redist::receipt>& receipts) {
    redist::json_writer w(2);
    w.begin_object().field("prefix", prefix).key("components").begin_array();
    for (const auto& r : receipts) {
        w.begin_object();
        w.field("product", r.product);
        w.field("release_label", r.release_label);
        w.field("component", r.component);
        w.field("version", r.component_version);
        w.field("variant", r.variant);  // as the manifest keys it (cuda12, cuda13.2); null for plain artifacts
        w.field("platform", r.platform);
        w.field("source", r.url);
        w.field("sha256", r.archive_sha256);
        w.field("files", static_cast<std::uint64_t>(r.files.size()));
        w.field("size", installed_bytes(r));
        w.field("installed_at", r.installed_at);
        w.end_object();
    }
    w.end_array().end_object();
    std::printf("%s\n", w.str().c_str());
}

void print_table(const std::vector<redist::receipt>& receipts) {
    // Every cell from a receipt is escaped (printable) before it is measured.
    std::vector<std::vector<std::string>> rows = {
        {"PRODUCT", "RELEASE", "COMPONENT", "VERSION", "VARIANT", "PLATFORM", "FILES", "SIZE"}};
    for (const auto& r : receipts)
        rows.push_back({printable(r.product), printable(r.release_label), printable(r.component),
                        printable(r.component_version), r.variant ? printable(*r.variant) : "-", printable(r.platform),
                        std::to_string(r.files.size()), human_size(installed_bytes(r))});
    std::vector<std::size_t> width(rows.front().size(), 0);
    for (const auto& row : rows)
        for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t i = 0; i < row.size(); ++i) {
            const bool numeric = i >= 6;  // FILES and SIZE line up on the right
            const std::string pad(width[i] - row[i].size(), ' ');
            line += (i ? "  " : "") + (numeric ? pad + row[i] : row[i] + (i + 1 < row.size() ? pad : ""));
        }
        std::printf("%s\n", line.c_str());
    }
}

int run_list(list_args args) {
    auto given = prefix_or_project(args.prefix, args.file);
    if (!given.ok()) return report_error(given.error_value());
    args.prefix = *given;
    if (args.prefix.empty()) return usage_error(kNoProject);
    auto receipts = redist::read_installed_receipts(args.prefix);
    if (!receipts.ok()) return report_error(receipts.error_value());
    if (args.json) print_json(args.prefix, *receipts);
    else if (!args.quiet) print_table(*receipts);
    return 0;
}

}  // namespace

void add_list_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<list_args>();
    auto* cmd = app.add_subcommand("list", "List what redist installed in a prefix: versions, variants, sizes");
    cmd->add_option("--prefix", args->prefix, "A prefix redist installed into (default: the project's)")
        ->type_name("DIR");
    cmd->add_option("--file", args->file,
                    "The project file whose prefix to list (default redist.toml here or in a parent)")
        ->type_name("FILE");
    add_report_flags(*cmd, args->json, args->quiet,
                     "Print one JSON object: prefix, components [{product, release_label, component, version, "
                     "variant, platform, source, sha256, files, size, installed_at}]",
                     "Print nothing: exit 0 when something is installed, 3 when nothing is");
    cmd->footer(std::string("\nOne row per installed component, read from the prefix's receipts\n"
                            "(<prefix>/.redist/receipts/): its product and release, the component's own version,\n"
                            "the CUDA variant as the manifest keys it (cuda12, cuda13.2; - for a plain artifact),\n"
                            "the platform, and the files and bytes it installed. Nothing is read from the network\n"
                            "and nothing in the prefix is changed. Exits 3 when the prefix has no receipts.\n\n"
                            "Examples:\n  redist list --prefix /opt/cudnn\n"
                            "  redist list --prefix /opt/cudnn --json\n\n") +
                exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_list(*args); }; });
}

}  // namespace redist_tools
