// Internal: hex digits and digests. to_hex writes lower-case hex of a byte
// string (digests in receipts, lock files, SBOMs; sha256.cpp defines it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace redist {

std::string to_hex(const unsigned char* bytes, std::size_t size);

// The value of one hex digit of either case, or -1.
constexpr int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Whether two digests are the same, whatever the case of their hex digits
// (ASCII rules: std::tolower would depend on the locale).
inline bool equal_hex(std::string_view a, std::string_view b) noexcept {
    constexpr auto lower = [](char c) { return (c >= 'A' && c <= 'F') ? static_cast<char>(c - 'A' + 'a') : c; };
    return std::ranges::equal(a, b, {}, lower, lower);
}

}  // namespace redist
