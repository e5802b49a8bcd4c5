// redist/printable.hpp — the one escaper for untrusted text shown to a person.
//
// Names, paths, URLs and messages come from manifests, archives, lock files,
// receipts and servers. Printed raw, an ESC sequence in a component or entry
// name would drive the terminal (move the cursor, rewrite earlier lines, set
// the title, ...), and a bidirectional override would reorder what is shown.
// The library escapes what it puts in error messages; the tools escape every
// name and message they print.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

// Whether a backslash in the text becomes "\\".
//  escape: the result is unambiguous (a name that spells "\x1b" prints as
//          "\\x1b", not as if it held an ESC). For raw text: names, paths.
//  keep:   for text that was escaped already, such as error::describe()
//          (the library escapes the names in its messages): escaping again
//          would print "\\x1b" for an ESC. The result is inert either way.
enum class backslashes : std::uint8_t { escape, keep };

inline constexpr std::size_t no_length_limit = static_cast<std::size_t>(-1);

// `text` as one inert line: C0 controls (newline included) and DEL as \xNN;
// C1 controls (U+0080..U+009F) and the bidirectional marks, embeddings,
// overrides and isolates (U+200E, U+200F, U+202A..U+202E, U+2066..U+2069) as
// \u{XXXX}; bytes that are not valid UTF-8 as \xNN; a backslash as chosen.
// Everything else, printable UTF-8 included, is kept. Past about `max_len`
// bytes of output the rest is cut and "..." appended (the default suits a
// name inside a one-line error message; pass no_length_limit for all of it).
std::string printable(std::string_view text, std::size_t max_len = 200, backslashes backslash = backslashes::escape);

// `text` as one POSIX sh word: in single quotes, each ' written as '\''.
// For commands a person or a shell runs (a hint to run, an env script).
std::string shell_quote(std::string_view text);

REDIST_API_END
}  // namespace redist
