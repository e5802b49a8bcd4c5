// Name validation and confined path joining; see safe_path.hpp.
#include "support/safe_path.hpp"

#include <algorithm>
#include <string>

#include "support/printable.hpp"

namespace redist {

namespace {

bool is_name_char(char ch) noexcept {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
           ch == '+' || ch == '-';
}

}  // namespace

const char* name_problem(std::string_view text) noexcept {
    if (text.empty()) return "it is empty";
    if (text.size() > max_name_length) return "it is longer than 128 characters";
    if (text == "." || text == "..") return "it is a relative directory";
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f) return "it contains a control character";
        if (ch == '/' || ch == '\\') return "it contains a path separator";
        if (!is_name_char(ch)) return "only letters, digits and . _ + - are allowed";
    }
    return nullptr;
}

result<void> validate_name(std::string_view text, std::string_view what) {
    if (const char* why = name_problem(text)) {
        return make_error(error_code::bad_manifest,
                          std::string(what) + " '" + printable(text, 64) + "' is not a valid name: " + why);
    }
    return {};
}

const char* relative_path_problem(std::string_view p) noexcept {
    if (p.empty()) return "the path is empty";
    if (p.front() == '/') return "the path is absolute";
    for (const char ch : p) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f) return "the path contains a control character";
        if (ch == '\\') return "the path contains a backslash";
    }
    // Receipts and the journal are JSON, which holds only UTF-8: a path that
    // is not could not be recorded as it is, and so could not be verified or
    // removed.
    if (!valid_utf8(p)) return "the path is not valid UTF-8";
    std::size_t start = 0;
    while (true) {
        const auto end = p.find('/', start);
        const auto segment = p.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        if (segment.empty()) return "the path contains an empty segment";
        if (segment == "..") return "the path contains a '..' segment";
        if (segment == ".") return "the path contains a '.' segment";
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
    return nullptr;
}

bool is_strictly_under(const std::filesystem::path& root, const std::filesystem::path& path) noexcept {
    // Both lexically normal: no "." segments, and ".." only where it cannot
    // be resolved, which a string prefix test then treats as a plain name.
    std::string r = root.lexically_normal().string();
    const std::string p = path.lexically_normal().string();
    while (r.size() > 1 && r.back() == '/') r.pop_back();
    if (p.size() <= r.size() || p.compare(0, r.size(), r) != 0) return false;
    if (r == "/") return p[1] != '/';
    return p[r.size()] == '/' && p.size() > r.size() + 1;
}

result<std::filesystem::path> confined_join(const std::filesystem::path& root, std::string_view relative) {
    auto refuse = [&](const char* why) {
        return make_error(error_code::bad_manifest, "unsafe path '" + printable(relative) + "': " + why)
            .with_path(root.string());
    };
    if (!root.is_absolute()) return refuse("the root is not absolute");
    if (const char* why = relative_path_problem(relative)) return refuse(why);
    const std::filesystem::path base = root.lexically_normal();
    std::filesystem::path joined = base / std::filesystem::path(std::string(relative));
    // The checks above already exclude every way out; prove it anyway, so a
    // future change to them cannot open a hole silently.
    if (!is_strictly_under(base, joined)) return refuse("the path leaves its root");
    return joined;
}

}  // namespace redist
