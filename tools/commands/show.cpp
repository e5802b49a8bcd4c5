// `redist show PRODUCT VERSION` — the artifacts of one release, as a table or
// as JSON, optionally filtered by platform, CUDA variant and component.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "commands/commands.hpp"
#include "common/printable.hpp"
#include "redist/json_writer.hpp"
#include "redist/select.hpp"
#include "redist/suggest.hpp"
#include "redist/urls.hpp"

namespace redist_tools {

namespace {

struct show_args {
    std::string product;
    std::string version;
    source_options source;
    selection_options selection;
    bool json = false;
    bool quiet = false;
};

using artifact_row = std::pair<const redist::component*, const redist::artifact*>;

// The artifacts that pass the filters. --component must name existing
// components (a typo is an error, not an empty table).
redist::result<std::vector<artifact_row>> select_rows(const redist::resolved_release& release,
                                                      const selection_options& selection) {
    const redist::manifest& m = release.parsed;
    const std::set<std::string> wanted(selection.components.begin(), selection.components.end());
    for (const auto& name : wanted)
        if (!m.find_component(name)) return redist::unknown_component(m, name).with_source(release.manifest_url);
    std::vector<artifact_row> rows;
    for (const auto& c : m.components) {
        if (!wanted.empty() && !wanted.count(c.key)) continue;
        for (const auto& a : c.artifacts) {
            if (!selection.platform.empty() && a.platform != selection.platform) continue;
            if (selection.cuda && a.variant && a.cuda_major() != selection.cuda->major) continue;
            rows.emplace_back(&c, &a);
        }
    }
    if (rows.empty() && !selection.platform.empty()) {
        // A platform no artifact has is most often a typo (aarch64 for
        // linux-sbsa): say so instead of printing an empty table.
        std::vector<std::string> platforms;
        for (const auto& c : m.components)
            for (const auto& a : c.artifacts)
                if (std::ranges::find(platforms, a.platform) == platforms.end()) platforms.push_back(a.platform);
        if (std::ranges::find(platforms, selection.platform) == platforms.end())
            return redist::make_error(redist::error_code::not_found,
                                      "no artifact for platform '" + printable(selection.platform) + "'" +
                                          redist::did_you_mean(selection.platform, platforms))
                .with_source(release.manifest_url);
    }
    return rows;
}

void print_json(const redist::resolved_release& release, const std::vector<artifact_row>& rows) {
    redist::json_writer w(2);
    w.begin_object();
    w.field("product", release.product);
    w.field("release_label", release.label);
    w.field("release_date", release.parsed.release_date);
    w.field("manifest_url", redist::sanitize_url(release.manifest_url));
    w.field("manifest_sha256", release.manifest_sha256);
    w.key("artifacts").begin_array();
    for (const auto& [c, a] : rows) {
        w.begin_object();
        w.field("component", a->component);
        w.field("version", c->version);
        w.field("platform", a->platform);
        w.field("variant", a->variant);
        w.field("relative_path", a->relative_path);
        w.field("url",
                redist::sanitize_url(redist::artifact_url(release.artifact_base_url, a->relative_path, a->sha256)));
        w.field("sha256", a->sha256);
        w.field("md5", a->md5);
        w.field("size", a->size);
        w.field("format", redist::to_string(a->format));
        w.end_object();
    }
    w.end_array();
    w.end_object();
    std::printf("%s\n", w.str().c_str());
}

void print_table(const redist::resolved_release& release, const std::vector<artifact_row>& rows) {
    std::printf("%s %s", printable(release.product).c_str(), printable(release.label).c_str());
    if (!release.parsed.release_date.empty())
        std::printf(" (released %s)", printable(release.parsed.release_date).c_str());
    std::printf("\n%s\n\n", printable(redist::sanitize_url(release.manifest_url)).c_str());
    std::printf("%-28s %-14s %-16s %-8s %10s  %s\n", "COMPONENT", "VERSION", "PLATFORM", "VARIANT", "SIZE", "FORMAT");
    std::uint64_t total = 0;
    for (const auto& [c, a] : rows) {
        total += a->size;
        std::printf("%-28s %-14s %-16s %-8s %10s  %s\n", printable(a->component).c_str(), printable(c->version).c_str(),
                    printable(a->platform).c_str(), a->variant ? printable(*a->variant).c_str() : "-",
                    human_size(a->size).c_str(), redist::to_string(a->format));
    }
    std::printf("\n%zu artifacts, %s in all\n", rows.size(), human_size(total).c_str());
}

int run_show(const show_args& args) {
    if (args.source.manifest.empty() && (args.product.empty() || args.version.empty()))
        return usage_error("show needs PRODUCT VERSION, or --manifest PATH|URL");
    auto release = redist::resolve_release(make_release_request(args.source, args.product, args.version),
                                           args.source.transfer());
    if (!release.ok()) return report_error(release.error_value());
    auto rows = select_rows(*release, args.selection);
    if (!rows.ok()) return report_error(rows.error_value());
    if (args.quiet && !args.json) {
        if (!rows->empty()) return 0;
        return report_error(redist::make_error(redist::error_code::not_found, "no artifact matches the filters")
                                .with_source(redist::sanitize_url(release->manifest_url)));
    }
    if (args.json) print_json(*release, *rows);
    else print_table(*release, *rows);
    return 0;
}

}  // namespace

void add_show_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<show_args>();
    auto* cmd = app.add_subcommand("show", "Show the artifacts of a release (table or --json)");
    cmd->add_option("PRODUCT", args->product, "cudnn, cuda, ...");
    cmd->add_option("VERSION", args->version, "9.27.0, 9.27, 9 or latest");
    add_source_options(*cmd, args->source);
    add_selection_options(*cmd, args->selection, false);
    add_report_flags(*cmd, args->json, args->quiet, "Print one JSON object listing every (filtered) artifact",
                     "Print nothing: exit 0 when the release has an artifact that passes the filters, 3 when not");
    cmd->footer(
        "\nExamples:\n  redist show cudnn 9.27 --platform linux-x86_64\n"
        "  redist show --manifest redistrib_9.27.0.json --json\n\n" +
        exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_show(*args); }; });
}

}  // namespace redist_tools
