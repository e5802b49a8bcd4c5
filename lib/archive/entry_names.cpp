// archive/entry_names.cpp — see entry_names.hpp.
#include "archive/entry_names.hpp"

#include "redist/printable.hpp"
#include "support/printable.hpp"

namespace redist {
namespace {

bool is_name(std::string_view seg) { return !seg.empty() && seg != "." && seg != ".."; }

// A symlink target's shape: how many leading "..", the first name after them
// (empty if none), and whether a ".." follows a name.
struct target_shape {
    std::size_t ups = 0;
    std::string_view first_name;
    bool dotdot_after_name = false;
};

target_shape shape_of(std::string_view target) {
    target_shape s;
    for_each_segment(target, [&](std::string_view seg) {
        if (seg == "..") {
            if (!s.first_name.empty()) s.dotdot_after_name = true;
            else ++s.ups;
        } else if (is_name(seg) && s.first_name.empty()) {
            s.first_name = seg;
        }
        return !s.dotdot_after_name;
    });
    return s;
}

}  // namespace

std::optional<std::string> split_entry_name(std::string_view name, std::vector<std::string_view>& segments) {
    segments.clear();
    if (name.empty()) return "empty entry name";
    if (name.front() == '/') return "absolute path in archive";
    // Receipts are JSON, which holds only UTF-8: a name that is not could not
    // be recorded, verified or removed (NVIDIA's names are ASCII).
    if (!valid_utf8(name)) return "entry name is not valid UTF-8";
    bool dotdot = false;
    for_each_segment(name, [&](std::string_view seg) {
        if (seg == "..") dotdot = true;
        else if (is_name(seg)) segments.push_back(seg);
        return !dotdot;
    });
    if (dotdot) return "'..' in entry name";
    return std::nullopt;
}

std::string join_segments(const std::vector<std::string_view>& segments, std::size_t first) {
    std::string out;
    for (std::size_t i = first; i < segments.size(); ++i) {
        if (!out.empty()) out += '/';
        out += segments[i];
    }
    return out;
}

std::optional<std::string> check_symlink_target(std::string_view target, std::size_t link_depth) {
    if (target.empty()) return "empty symlink target";
    if (target.front() == '/') return "absolute symlink target";
    if (!valid_utf8(target)) return "symlink target is not valid UTF-8";  // recorded in the receipt
    const target_shape s = shape_of(target);
    if (s.dotdot_after_name) return "symlink target has '..' after a name";
    if (s.ups > link_depth) return "symlink target points outside the stage";
    return std::nullopt;
}

bool symlink_points_into_reserved(std::string_view target, std::size_t link_depth) {
    const target_shape s = shape_of(target);
    return s.ups == link_depth && s.first_name == kReservedDir;
}

std::string printable_entry(std::string_view text) { return printable(text, no_length_limit, backslashes::keep); }

}  // namespace redist
