// The project, drift and SBOM subcommands, each in its own
// file under tools/commands/, and the pieces they share with `redist fetch`.
#pragma once

#include <cstdio>
#include <string>

#include "common/cli.hpp"
#include "redist/diff.hpp"
#include "redist/fetch.hpp"

namespace redist_tools {

void add_sbom_command(CLI::App& app, command_runner& selected);
void add_diff_command(CLI::App& app, command_runner& selected);
void add_outdated_command(CLI::App& app, command_runner& selected);
void add_init_command(CLI::App& app, command_runner& selected);
void add_sync_command(CLI::App& app, command_runner& selected);  // tools/commands/sync.cpp

// Short structured lines for a manifest diff ("  + component x 1.2", ...),
// each starting with `indent` and escaped whole (printable). Shared by
// `redist diff` and drift reports.
void print_manifest_diff(std::FILE* out, const redist::manifest_diff& d, const char* indent);

// Drift watching (tools/commands/drift.cpp), called by `redist fetch`.
// After a manifest is resolved: compares it with what its URL served last
// time (the cache's history), prints a short structured diff to stderr when
// it changed, and returns an integrity error (exit 5) when `strict`;
// otherwise records it. Only a resolved release is taken, so nothing but a
// parsed, valid manifest is ever kept in the history. Without a cache
// (--no-cache) it does nothing.
redist::result<void> watch_manifest_drift(const source_options& source, bool strict, bool quiet,
                                          const redist::resolved_release& release);
// After an install: remembers each artifact's URL and SHA-256 (a note when a
// URL now serves other bytes than last time).
void record_artifacts(const source_options& source, bool quiet, const redist::install_report& report);

// Writes `text` to `path` through redist::atomic_write (never through a
// symlink or a file planted at the name), or to stdout for "-". Returns the exit code (0, or the filesystem error's).
int write_output(const std::string& path, const std::string& text);

}  // namespace redist_tools
