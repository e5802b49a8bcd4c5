// Internal: the one place where names from input are judged and where paths
// built from input are joined under a root.
//
// Every byte of a manifest, lock file, receipt or journal may be hostile. A
// component key such as "../../../../x" or "/tmp/victim" must never become a
// path outside the prefix, so:
//  * names (component keys, product names, labels, platforms, variants) are
//    checked with validate_name() where they are parsed;
//  * every path made from input goes through confined_join(), which refuses
//    anything that is not a plain relative path and proves that the result
//    lies under the root.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

#include "redist/error.hpp"
#include "redist/printable.hpp"  // printable(): names in the messages below are escaped

namespace redist {

inline constexpr std::size_t max_name_length = 128;

// Why `text` is not a valid name, or nullptr when it is one. A name is 1 to
// max_name_length characters from [A-Za-z0-9._+-], and is not "." or "..".
// (So: no '/', no '\\', no NUL or other control character, no space.)
const char* name_problem(std::string_view text) noexcept;

// Outcomes: ok | bad_manifest ("<what> '<name>' is not a valid name: <why>";
// the name is shown escaped and shortened).
result<void> validate_name(std::string_view text, std::string_view what);

// Why `relative` is not a plain relative '/'-separated path, or nullptr when
// it is one: not empty, not absolute, no empty, "." or ".." segment, no
// backslash, no NUL or other control character, valid UTF-8.
const char* relative_path_problem(std::string_view relative) noexcept;

// root / relative, where root is absolute and lexically normal (the caller's
// prefix; it is normalized here too) and `relative` passes
// relative_path_problem(). The result is proven to lie strictly under root.
// This is a lexical guarantee: callers that act on the result never follow
// symlinks they did not create (see parent_guard in lib/store/journal.cpp).
// Outcomes: ok | bad_manifest ("unsafe path '<relative>': <why>", path = root).
result<std::filesystem::path> confined_join(const std::filesystem::path& root, std::string_view relative);

// True when `path` is lexically strictly below `root` (both normalized).
bool is_strictly_under(const std::filesystem::path& root, const std::filesystem::path& path) noexcept;

}  // namespace redist
