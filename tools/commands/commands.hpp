// The `redist` subcommands that live in tools/commands/<name>.cpp and are
// declared nowhere else. Each add_<name>_command(app, selected) registers the
// subcommand, its options and its --help; when it is the one parsed, its final
// callback stores in `selected` the function that runs it (see command_runner
// in common/cli.hpp). main() in tools/redist.cpp only wires them up.
#pragma once

#include "common/cli.hpp"

namespace redist_tools {

void add_versions_command(CLI::App& app, command_runner& selected);
void add_show_command(CLI::App& app, command_runner& selected);
void add_fetch_command(CLI::App& app, command_runner& selected);
void add_verify_command(CLI::App& app, command_runner& selected);
void add_remove_command(CLI::App& app, command_runner& selected);
void add_cache_command(CLI::App& app, command_runner& selected);

}  // namespace redist_tools
