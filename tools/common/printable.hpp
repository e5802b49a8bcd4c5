// Escaping for every human-readable line the tools print. Names, paths, URLs
// and error messages come from manifests, archives, lock files and servers:
// raw, an ESC sequence in a component or entry name would drive the
// terminal (move the cursor, rewrite earlier lines, set the title, ...).
#pragma once

#include <string>
#include <string_view>

namespace redist_tools {

// `text` with every control character escaped, so that it prints as one
// inert line: C0 controls and DEL as \n, \t, \r, \e or \xNN; C1 controls (U+0080..U+009F) and
// the bidirectional overrides and isolates (U+200E, U+200F, U+202A..U+202E,
// U+2066..U+2069; they reorder what is shown) as \u{XXXX}; bytes that are not
// valid UTF-8 as \xNN. Everything else, printable UTF-8 included, is kept.
// A backslash is kept as is: the library already escapes names in its error
// messages the same way, and escaping it again would print "\\x1b". A name
// that spells a literal "\x1b" is inert text either way.
std::string printable(std::string_view text);

}  // namespace redist_tools
