// archive/entry_names.hpp — the rules every archive entry's name and every
// symlink target must pass before anything is written under a stage
// (unpack.hpp, "Security"). The extractor (extractor.hpp) applies them to
// each entry; they are pure functions of the text, tested on their own
// (tests/unit/archive/entry_names_test.cpp) as well as through whole archives.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redist {

// Calls f(segment) for each '/'-separated segment of `text`, empty and "."
// segments included, until f returns false. The one walk behind every name
// and symlink-target check.
template <class F>
void for_each_segment(std::string_view text, F&& f) {
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('/', start);
        if (end == std::string_view::npos) end = text.size();
        if (!f(text.substr(start, end - start))) return;
        start = end + 1;
    }
}

// The name of the reserved metadata directory at the prefix's root: no entry
// may live there, and no symlink may point into it.
inline constexpr std::string_view kReservedDir = ".redist";

// Splits an archive entry name into its segments. Tolerates "./" prefixes,
// "." segments and doubled or trailing slashes (directory entries end in '/').
// Returns a message when the name is unsafe: absolute, contains "..", empty,
// not valid UTF-8.
std::optional<std::string> split_entry_name(std::string_view name, std::vector<std::string_view>& segments);

// segments[first..] joined with '/'.
std::string join_segments(const std::vector<std::string_view>& segments, std::size_t first);

// A symlink target is accepted when it is relative and has the shape
// "../" * k followed by plain names, with k no deeper than the link's own
// directory inside the stage (link_depth). Why not just collapse ".."
// lexically: a ".." that follows a name can walk back out through another
// symlink of the archive ("a -> ." then "b -> a/.."), which lexical
// resolution misses. With ".." only up front, the climb happens through real
// directories (nothing is written through symlinks), and the descent can
// only pass through symlinks that were themselves checked to stay inside.
// Returns a message when the target is refused.
std::optional<std::string> check_symlink_target(std::string_view target, std::size_t link_depth);

// True if a symlink whose directory lies `link_depth` levels below the stage
// root, with a target already accepted by check_symlink_target(), points into
// the reserved directory: "../" * link_depth followed by ".redist".
bool symlink_points_into_reserved(std::string_view target, std::size_t link_depth);

// Archive bytes in errors, escaped in full: entry paths must not be cut.
std::string printable_entry(std::string_view text);

}  // namespace redist
