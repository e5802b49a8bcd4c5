// `redist init` — writes a commented starter redist.toml (see project.hpp).
// It never overwrites an existing file unless --force.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands/project_commands.hpp"
#include "common/printable.hpp"
#include "redist/json_writer.hpp"
#include "redist/platform.hpp"
#include "redist/project.hpp"

namespace redist_tools {

namespace {

struct init_args {
    std::string file = "redist.toml";
    std::vector<std::string> platforms;
    bool force = false;
    bool check = false;  // validate an existing file instead of writing one
    bool json = false;   // print the project as parsed
    bool quiet = false;
};

// --json: the project file as parsed (what was checked, or written).
void print_project_json(const std::string& file, const redist::project_file& project) {
    redist::json_writer w(2);
    w.begin_object();
    w.field("file", file);
    w.field("prefix", project.prefix.string());
    w.key("platforms").begin_array();
    for (const auto& p : project.platforms) w.value(p);
    w.end_array();
    if (project.cuda) w.field("cuda", static_cast<std::uint64_t>(*project.cuda));
    w.key("products").begin_array();
    for (const auto& p : project.products) {
        w.begin_object();
        w.field("name", p.name);
        w.field("version", p.version);
        w.key("components").begin_array();
        for (const auto& c : p.components) w.value(c);
        w.end_array();
        if (p.cuda) w.field("cuda", static_cast<std::uint64_t>(*p.cuda));
        w.end_object();
    }
    w.end_array();
    w.end_object();
    std::printf("%s\n", w.str().c_str());
}

// --check: parses and validates the file; prints a summary, or the error
// with its line and key (exit 4).
int run_check(const init_args& args) {
    auto text = redist::read_project_document(args.file, redist::kMaxProjectFileBytes, "project file");
    if (!text.ok()) return report_error(text.error_value());
    // Absolute, so that a relative prefix resolves against the file's directory.
    auto project = redist::parse_project(*text, std::filesystem::absolute(args.file));
    if (!project.ok()) return report_error(project.error_value());
    if (args.json) print_project_json(args.file, *project);
    if (args.json || args.quiet) return 0;
    // Everything below comes from the project file (a pull request may write it): escaped.
    std::string summary = args.file + ": prefix " + project->prefix.string() + ", platforms";
    for (const auto& p : project->platforms) summary += " " + p;
    if (project->cuda) summary += ", CUDA " + std::to_string(*project->cuda);
    std::printf("%s\n", printable(summary).c_str());
    for (const auto& p : project->products) {
        std::string line = p.name + " " + p.version + ":";
        if (p.components.empty()) line += " every component";
        for (const auto& c : p.components) line += " " + c;
        std::printf("  %s\n", printable(line).c_str());
    }
    return 0;
}

int run_init(const init_args& args) {
    if (args.check) return run_check(args);
    std::vector<std::string> platforms = args.platforms;
    if (platforms.empty()) {
        auto host = redist::detect_host_platform(redist::host_probe::system());
        platforms.push_back(host.ok() ? *host : std::string("linux-x86_64"));
    }
    const std::string text = redist::starter_project(platforms);
    // The starter must be a valid project file: a broken template is a bug.
    auto starter = redist::parse_project(text, std::filesystem::absolute(args.file));
    if (!starter.ok()) return report_error(starter.error_value());
    if (!args.force && ::access(args.file.c_str(), F_OK) == 0)
        return report_error(redist::make_error(redist::error_code::usage, "already exists (use --force to replace it)")
                                .with_path(args.file));
    if (const int code = write_output(args.file, text); code != 0) return code;
    if (args.json) print_project_json(args.file, *starter);
    if (args.json || args.quiet) return 0;
    std::printf("wrote %s: edit it, then check it with `redist init --check`\n", printable(args.file).c_str());
    return 0;
}

}  // namespace

void add_init_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<init_args>();
    auto* cmd = app.add_subcommand("init", "Write a commented starter project file (redist.toml)");
    cmd->add_option("--file", args->file, "Where to write it (default redist.toml)")->type_name("FILE");
    cmd->add_option("--platform", args->platforms, "Platforms to list (repeatable; default: this machine's)")
        ->check(platform_check())
        ->type_name("P");
    cmd->add_flag("--force", args->force, "Replace an existing file");
    cmd->add_flag("--check", args->check, "Validate an existing project file instead (errors name the line and key)");
    add_report_flags(*cmd, args->json, args->quiet,
                     "Print the project file as parsed (file, prefix, platforms, cuda, products), as one JSON object");
    cmd->footer(exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_init(*args); }; });
}

}  // namespace redist_tools
