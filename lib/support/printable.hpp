// support/printable.hpp (internal) — the one UTF-8 decoder (printable.cpp),
// which printable() (redist/printable.hpp), json_escape(), the TOML reader
// (model/project.cpp) and the name checks (safe_path.cpp,
// archive/entry_names.cpp) use; exposed for the unit tests and the fuzz
// targets, which check that what redist writes is valid UTF-8.
#pragma once

#include <cstddef>
#include <string_view>

#include "redist/printable.hpp"

namespace redist {

// Length of the valid UTF-8 sequence at the start of `text` (1 for ASCII; 0
// when it is not one: a stray continuation byte, overlong, a surrogate, past
// U+10FFFF, truncated, or `text` empty).
std::size_t utf8_sequence_length(std::string_view text) noexcept;

// True when all of `text` is valid UTF-8 (so it can be a JSON string as is).
bool valid_utf8(std::string_view text) noexcept;

}  // namespace redist
