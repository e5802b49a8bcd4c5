// Subcommands of the projects/drift/SBOM work (issue 12), each in its own
// file under tools/commands/, and the pieces they share with `redist fetch`.
#pragma once

#include <cstdio>
#include <string>

#include "common/cli.hpp"
#include "redist/diff.hpp"

namespace redist_tools {

void add_sbom_command(CLI::App& app, command_runner& selected);
void add_diff_command(CLI::App& app, command_runner& selected);

// Short structured lines for a manifest diff ("  + component x 1.2", ...),
// each starting with `indent`. Shared by `redist diff` and drift reports.
void print_manifest_diff(std::FILE* out, const redist::manifest_diff& d, const char* indent);

// Writes `text` to `path` atomically (temporary file + rename), or to stdout
// for "-". Returns the exit code (0, or the filesystem error's).
int write_output(const std::string& path, const std::string& text);

}  // namespace redist_tools
