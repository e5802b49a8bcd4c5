// The `redist` subcommands, each in tools/commands/<name>.cpp. Each
// add_<name>_command(app, selected) registers the subcommand, its options and
// its --help; when it is the one parsed, its final callback stores in
// `selected` the function that runs it and returns the exit code. main() in
// tools/redist.cpp only wires them up.
#pragma once

#include <functional>

#include "common/cli.hpp"

namespace redist_tools {

using command_runner = std::function<int()>;
void add_versions_command(CLI::App& app, command_runner& selected);
void add_show_command(CLI::App& app, command_runner& selected);
void add_fetch_command(CLI::App& app, command_runner& selected);
void add_verify_command(CLI::App& app, command_runner& selected);
void add_remove_command(CLI::App& app, command_runner& selected);
void add_list_command(CLI::App& app, command_runner& selected);
void add_cache_command(CLI::App& app, command_runner& selected);
void add_env_command(CLI::App& app, command_runner& selected);
void add_mirror_command(CLI::App& app, command_runner& selected);
void add_check_command(CLI::App& app, command_runner& selected);
void add_sbom_command(CLI::App& app, command_runner& selected);
void add_diff_command(CLI::App& app, command_runner& selected);
void add_outdated_command(CLI::App& app, command_runner& selected);
void add_init_command(CLI::App& app, command_runner& selected);
void add_sync_command(CLI::App& app, command_runner& selected);

}  // namespace redist_tools
