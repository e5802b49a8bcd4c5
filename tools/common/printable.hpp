// Escaping for every human-readable line the tools print: redist::printable
// (include/redist/printable.hpp, the one escaper), whole, with backslashes
// kept. Names are validated where they are parsed and hold no backslash, and
// most of what the tools print whole is error::describe() text, whose names
// the library has already escaped: escaping its backslashes again would show
// an ESC as "\\x1b". What this returns is inert either way.
#pragma once

#include <string>
#include <string_view>

#include "redist/printable.hpp"

namespace redist_tools {

inline std::string printable(std::string_view text) {
    return redist::printable(text, redist::no_length_limit, redist::backslashes::keep);
}

}  // namespace redist_tools
