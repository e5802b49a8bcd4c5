// The one escaper for untrusted text shown to a person; see printable.hpp.
#include "redist/printable.hpp"
#include "support/printable.hpp"

#include <algorithm>
#include <cstdio>

namespace redist {

namespace {

void append_hex_byte(std::string& out, unsigned char byte) {
    static constexpr char digits[] = "0123456789abcdef";
    out += "\\x";
    out += digits[byte >> 4];
    out += digits[byte & 15];
}

// Length of the valid UTF-8 sequence at the start of `s` (0 if it is not
// one: overlong, a surrogate, past U+10FFFF, truncated) and its code point.
std::size_t decode_utf8(std::string_view s, char32_t& cp) {
    const auto b0 = static_cast<unsigned char>(s[0]);
    std::size_t len = 0;
    char32_t min = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
        cp = b0 & 0x1F;
        min = 0x80;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        cp = b0 & 0x0F;
        min = 0x800;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        cp = b0 & 0x07;
        min = 0x10000;
    } else return 0;
    if (s.size() < len) return 0;
    for (std::size_t i = 1; i < len; ++i) {
        const auto b = static_cast<unsigned char>(s[i]);
        if ((b & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

// Code points that are valid UTF-8 but act on the terminal or on the order
// of what is shown.
bool invisible_control(char32_t cp) {
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

// Appends the escaped form of the character at the start of `text`; returns
// how many bytes it used.
std::size_t append_one(std::string& out, std::string_view text, backslashes backslash) {
    const auto c = static_cast<unsigned char>(text[0]);
    if (c < 0x80) {
        if (c < 0x20 || c == 0x7F) append_hex_byte(out, c);
        else if (c == '\\' && backslash == backslashes::escape) out += "\\\\";
        else out += static_cast<char>(c);
        return 1;
    }
    char32_t cp = 0;
    const std::size_t len = decode_utf8(text, cp);
    if (len == 0) {
        append_hex_byte(out, c);
        return 1;
    }
    if (invisible_control(cp)) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\u{%04X}", static_cast<unsigned>(cp));
        out += buf;
    } else {
        out.append(text.substr(0, len));
    }
    return len;
}

}  // namespace

std::size_t utf8_sequence_length(std::string_view text) noexcept {
    if (text.empty()) return 0;
    if (static_cast<unsigned char>(text[0]) < 0x80) return 1;
    char32_t cp = 0;
    return decode_utf8(text, cp);
}

bool valid_utf8(std::string_view text) noexcept {
    while (!text.empty()) {
        const std::size_t len = utf8_sequence_length(text);
        if (len == 0) return false;
        text.remove_prefix(len);
    }
    return true;
}

std::string printable(std::string_view text, std::size_t max_len, backslashes backslash) {
    std::string out;
    out.reserve(std::min(text.size(), max_len) + 3);
    while (!text.empty()) {
        if (out.size() >= max_len) {
            out += "...";
            break;
        }
        text.remove_prefix(append_one(out, text, backslash));
    }
    return out;
}

std::string shell_quote(std::string_view text) {
    std::string out = "'";
    for (const char c : text) out += c == '\'' ? std::string_view("'\\''") : std::string_view(&c, 1);
    return out + "'";
}

}  // namespace redist
