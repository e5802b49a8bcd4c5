// model/project.hpp (internal) — the user's config.toml parsed from text
// (project.cpp), which read_user_config (redist/project.hpp) does after
// reading the file; exposed for the unit tests
// (tests/unit/model/project_test.cpp) and tests/fuzz/project_fuzz.cpp.
#pragma once

#include <filesystem>
#include <string_view>

#include "redist/error.hpp"
#include "redist/project.hpp"

namespace redist {

// Parses and validates config.toml text (the same TOML reader and limits as
// the project file). Outcomes: ok | bad_manifest (source
// "<path>:<line>:<column>", json_path the key; an unknown key is refused,
// naming the known ones). Fuzzed with the project reader (project_fuzz).
result<user_config> parse_user_config(std::string_view text, const std::filesystem::path& path);

}  // namespace redist
