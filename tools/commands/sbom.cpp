// `redist sbom` — an SPDX 2.3 or CycloneDX 1.5 JSON bill of materials for a
// prefix, from its receipts. Licenses come from each release's manifest
// (receipts do not carry them), read through the usual sources and cache.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>

#include "commands/project_commands.hpp"
#include "common/printable.hpp"
#include "redist/atomic_write.hpp"
#include "redist/json_writer.hpp"
#include "redist/prefix.hpp"
#include "redist/sbom.hpp"

namespace redist_tools {

namespace {

struct sbom_args {
    std::string prefix;
    std::string format;
    std::string output = "-";
    source_options source;
    bool no_license_lookup = false;
    bool json = false;   // a summary of what was written (with -o FILE)
    bool quiet = false;  // no warnings (a license that cannot be looked up)
};

// One manifest per (product, release) in the receipts; a release that cannot
// be read leaves its licenses unknown (NOASSERTION), with a warning.
redist::license_table look_up_licenses(const std::vector<redist::receipt>& receipts, const source_options& source,
                                       bool quiet) {
    redist::license_table table;
    std::set<std::pair<std::string, std::string>> releases;
    for (const auto& r : receipts) releases.insert({r.product, r.release_label});
    for (const auto& [product, label] : releases) {
        auto release = resolve_installed_release(source, receipts, product, label);
        if (!release.ok()) {
            if (quiet) continue;
            std::fprintf(stderr,
                         "%s: warning: cannot read the manifest of %s %s for its licenses (%s); "
                         "they are NOASSERTION\n",
                         tool_name.c_str(), printable(product).c_str(), printable(label).c_str(),
                         printable(release.error_value().describe()).c_str());
            continue;
        }
        for (const auto& c : release->parsed.components)
            if (!c.license.empty()) table[{product, c.key}] = c.license;
    }
    return table;
}

// --json: what was written, for a pipeline that goes on with the file.
void print_summary(const sbom_args& args, const redist::sbom_document& doc) {
    std::size_t files = 0;
    for (const auto& c : doc.components) files += c.files.size();
    redist::json_writer w(2);
    w.begin_object();
    w.field("output", args.output);
    w.field("format", args.format);
    w.field("components", static_cast<std::uint64_t>(doc.components.size()));
    w.field("files", static_cast<std::uint64_t>(files));
    w.end_object();
    std::printf("%s\n", w.str().c_str());
}

int run_sbom(const sbom_args& args) {
    const auto format = redist::parse_sbom_format(args.format);
    if (!format.ok()) return report_error(format.error_value());
    if (args.json && args.output == "-")
        return usage_error(
            "--json summarizes the document written with -o FILE; without -o the document itself is the output");
    redist::sbom_request req;
    req.prefix = args.prefix;
    req.tool_version = REDIST_VERSION;
    if (!args.no_license_lookup) {
        auto receipts = redist::read_receipts(args.prefix);
        if (!receipts.ok()) return report_error(receipts.error_value());
        req.licenses = look_up_licenses(*receipts, args.source, args.quiet);
    }
    auto doc = redist::collect_sbom(req);
    if (!doc.ok()) return report_error(doc.error_value());
    if (const int code = write_output(args.output, redist::render_sbom(*doc, *format)); code != 0) return code;
    if (args.json) print_summary(args, *doc);
    return 0;
}

}  // namespace

int write_output(const std::string& path, const std::string& text) {
    if (path == "-") {
        std::fwrite(text.data(), 1, text.size(), stdout);
        return std::fflush(stdout) == 0
                   ? 0
                   : report_error(redist::make_error(redist::error_code::filesystem, "cannot write to stdout"));
    }
    // Never through whatever is at the name or a temp name (atomic_write.hpp).
    if (auto written = redist::atomic_write(path, text, redist::durability::full); !written.ok())
        return report_error(written.error_value());
    return 0;
}

void add_sbom_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<sbom_args>();
    auto* cmd = app.add_subcommand("sbom", "Write an SBOM (SPDX 2.3 or CycloneDX 1.5 JSON) of a prefix");
    cmd->add_option("--prefix", args->prefix, "A prefix redist installed into")->required()->type_name("DIR");
    cmd->add_option("--format", args->format, "spdx-json or cyclonedx-json")
        ->required()
        ->check(CLI::IsMember({"spdx-json", "cyclonedx-json"}))
        ->type_name("FORMAT");
    cmd->add_option("-o,--output", args->output, "Where to write it (default '-': stdout)")->type_name("FILE");
    cmd->add_flag("--no-license-lookup", args->no_license_lookup,
                  "Do not read the manifests for license names (they become NOASSERTION)");
    add_source_options(*cmd, args->source);
    add_report_flags(*cmd, args->json, args->quiet,
                     "With -o FILE: print a JSON summary of what was written (output, format, components, files)",
                     "Print only errors (no warning about a license that cannot be looked up)");
    cmd->footer(std::string("\nEvery installed component (product, release, version, platform, CUDA variant,\n"
                            "download URL, archive SHA-256, license named in its manifest) and every regular\n"
                            "file it installed, with SHA-256 and SHA-1. Files are hashed again: a file that no\n"
                            "longer matches its receipt is an error (exit 5; `redist verify` lists them).\n"
                            "Licenses are read from the releases' manifests: from the cache first, else from\n"
                            "--mirror, the sources the receipts name, then --base-url (NVIDIA's only when the\n"
                            "receipts name no source); --offline applies.\n\n"
                            "Examples:\n"
                            "  redist sbom --prefix /opt/cudnn --format spdx-json -o cudnn.spdx.json\n"
                            "  redist sbom --prefix /opt/cuda --format cyclonedx-json --offline\n\n") +
                exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_sbom(*args); }; });
}

}  // namespace redist_tools
