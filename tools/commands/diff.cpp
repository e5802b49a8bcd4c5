// `redist diff PRODUCT V1 V2` — what changed between two releases:
// components added, removed or renamed, versions, platforms, CUDA variants,
// artifacts and sizes. Text, or one JSON object with --json.
#include <cstdio>
#include <memory>

#include "commands/project_commands.hpp"
#include "common/printable.hpp"
#include "redist/diff.hpp"

namespace redist_tools {

namespace {

struct diff_args {
    std::string product;
    std::string from;
    std::string to;
    source_options source;
    bool json = false;
    bool quiet = false;
};

std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
    return out;
}

std::string signed_size(std::uint64_t from, std::uint64_t to) {
    return to >= from ? "+" + human_size(to - from) : "-" + human_size(from - to);
}

std::string artifact_name(const redist::artifact_change& a) {
    return a.component + " " + a.platform + (a.variant ? " " + *a.variant : "");
}

std::string describe_artifact_change(const redist::artifact_change& a) {
    const std::string name = artifact_name(a);
    switch (a.kind) {
        case redist::artifact_change_kind::replaced_in_place:
            return "REPLACED IN PLACE: " + name + " " + a.new_relative_path + ": sha256 " + a.old_sha256 + " -> " +
                   a.new_sha256 + ", size " + std::to_string(a.old_size) + " -> " + std::to_string(a.new_size);
        case redist::artifact_change_kind::rebuilt:
            return "artifact changed: " + name + ": " + a.new_relative_path + " (" +
                   signed_size(a.old_size, a.new_size) + ")";
        case redist::artifact_change_kind::added:
            return "artifact added: " + name + " (" + human_size(a.new_size) + ")";
        case redist::artifact_change_kind::removed: break;
    }
    return "artifact removed: " + name;
}

int run_diff(const diff_args& args) {
    const auto transfer = args.source.transfer();
    auto from = redist::resolve_release(make_release_request(args.source, args.product, args.from), transfer);
    if (!from.ok()) return report_error(from.error_value());
    auto to = redist::resolve_release(make_release_request(args.source, args.product, args.to), transfer);
    if (!to.ok()) return report_error(to.error_value());
    auto d = redist::diff_manifests(from->parsed, to->parsed);
    // Labels from the resolved releases: old manifests may not carry one.
    d.old_label = from->label;
    d.new_label = to->label;
    if (args.json) {
        std::printf("%s\n", redist::manifest_diff_to_json(d).c_str());
        return 0;
    }
    if (args.quiet) return d.empty() ? 0 : 1;  // as diff -q, git diff --quiet
    std::printf("%s\n", printable(args.product + " " + d.old_label + " -> " + d.new_label).c_str());
    if (d.empty()) std::printf("  no component, version or artifact differs\n");
    print_manifest_diff(stdout, d, "  ");
    return 0;
}

}  // namespace

void print_manifest_diff(std::FILE* out, const redist::manifest_diff& d, const char* indent) {
    // Names, versions, paths and hashes come from manifests: each line is
    // escaped whole, here, so no field of the diff can reach the terminal raw.
    const auto put = [&](const std::string& line) { std::fprintf(out, "%s%s\n", indent, printable(line).c_str()); };
    for (const auto& r : d.renamed) put("component renamed: " + r.from + " -> " + r.to);
    if (!d.added.empty()) put("components added: " + join(d.added));
    if (!d.removed.empty()) put("components removed: " + join(d.removed));
    for (const auto& v : d.versions) put("version: " + v.component + " " + v.from + " -> " + v.to);
    if (!d.platforms_added.empty()) put("platforms added: " + join(d.platforms_added));
    if (!d.platforms_removed.empty()) put("platforms removed: " + join(d.platforms_removed));
    if (!d.variants_added.empty()) put("variants added: " + join(d.variants_added));
    if (!d.variants_removed.empty()) put("variants removed: " + join(d.variants_removed));
    for (const auto& a : d.artifacts) put(describe_artifact_change(a));
    if (d.old_total_size != d.new_total_size)
        put("total size: " + human_size(d.old_total_size) + " -> " + human_size(d.new_total_size) + " (" +
            signed_size(d.old_total_size, d.new_total_size) + ")");
}

void add_diff_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<diff_args>();
    auto* cmd = app.add_subcommand("diff", "Show what changed between two releases of a product");
    cmd->add_option("PRODUCT", args->product, "cudnn, cuda, ...")->required();
    cmd->add_option("V1", args->from, "The older release (9.8.0, 9.8, 9 or latest)")->required();
    cmd->add_option("V2", args->to, "The newer release")->required();
    add_source_options(*cmd, args->source);
    add_report_flags(*cmd, args->json, args->quiet, "Print one JSON object",
                     "Print nothing: exit 0 when nothing differs, 1 when something does (as diff -q)");
    cmd->footer(std::string("\nComponents added, removed or renamed (known renames: cuda_cccl -> cccl), versions,\n"
                            "platforms, CUDA variants, and every artifact that changed: a new file, one added\n"
                            "or removed, or one REPLACED IN PLACE (same file name, new SHA-256 or size).\n\n"
                            "Examples:\n  redist diff cudnn 9.8.0 9.27.0\n  redist diff cuda 12.9 13.0 --json\n\n") +
                exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_diff(*args); }; });
}

}  // namespace redist_tools
