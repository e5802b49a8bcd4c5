// What the project, drift, lock and SBOM subcommands (tools/commands/) share
// with each other and with `redist fetch`.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "commands/commands.hpp"
#include "redist/diff.hpp"
#include "redist/install.hpp"
#include "redist/lockfile.hpp"
#include "redist/project.hpp"
#include "redist/transfer.hpp"

namespace redist_tools {

// The flags with which `redist sync` and `redist lock` (without PRODUCT
// VERSION) find a project and keep its lock: tools/commands/sync.cpp turns
// them into the library's open_project and lock_project requests (sync.hpp).
struct project_lock_options {
    std::string file;                   // --file; empty: redist.toml here or in a parent directory
    std::string lock_file;              // --lock-file; empty: redist.lock beside the project file
    bool upgrade = false;               // --upgrade: resolve again instead of keeping the locked releases
    std::vector<std::string> products;  // --product P (with --upgrade): only these
    bool strict = false;                // --strict: manifest drift is an error (exit 5)
    bool quiet = false;
    bool json = false;     // redist lock --json: print_lock_json() instead of the "locked" lines
    bool dry_run = false;  // sync --dry-run: resolve, but write no lock
    source_options source;
};
// Registers --file, --lock-file, --upgrade, --product and --strict (the
// source options are registered by the caller).
void add_project_lock_options(CLI::App& cmd, project_lock_options& options, bool with_strict = true);
// `redist lock` in a project: resolves what changed (or what --upgrade
// names), writes the lock when it changed, installs nothing. Returns the exit code.
int run_project_lock(const project_lock_options& options);
// `redist lock --json`, either form: {"lock_file", "products": [{"name",
// "release_label", "artifacts": N}]}.
void print_lock_json(const std::string& lock_file, const std::vector<redist::locked_product>& products);
// Whether `path` holds a project lock (version 2): `redist lock PRODUCT
// VERSION` never overwrites one.
bool holds_project_lock(const std::string& path);

// The project file of `outdated`, `list` and `env`, found and read as `redist
// sync` does (open_project): --file (`given`), else redist.toml in the
// current directory or the nearest parent, up to the repository root
// (find_project); a regular file only, bounded, never a FIFO.
// Outcomes: ok (nullopt: no project found) | not_found (--file missing) |
// bad_manifest | filesystem (what open_project returns).
redist::result<std::optional<redist::project_file>> read_project_if_any(const std::string& given);
// `prefix` (--prefix) when given, else the prefix of the project file
// (read_project_if_any(file)); "" when neither names one.
// Outcomes: as read_project_if_any.
redist::result<std::string> prefix_or_project(const std::string& prefix, const std::string& file);
// The usage error of those commands when neither names a prefix.
inline constexpr const char* kNoProject =
    "--prefix is required outside a project (no redist.toml here or in a parent directory)";

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
