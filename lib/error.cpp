#include "redist/error.hpp"

#include <algorithm>

namespace redist {

int exit_code_for(error_code code) noexcept {
    switch (code) {
        case error_code::internal: return 1;
        case error_code::usage: return 2;
        case error_code::not_found: return 3;
        case error_code::bad_manifest: return 4;
        case error_code::integrity: return 5;
        case error_code::network: return 6;
        case error_code::unsafe_archive: return 7;
        case error_code::bad_archive: return 8;
        case error_code::conflict: return 9;
        case error_code::filesystem: return 10;
        case error_code::cancelled: return 130;
        case error_code::check_failed: return 11;
    }
    return 1;
}

const char* to_string(error_code code) noexcept {
    switch (code) {
        case error_code::internal: return "internal";
        case error_code::usage: return "usage";
        case error_code::not_found: return "not_found";
        case error_code::bad_manifest: return "bad_manifest";
        case error_code::bad_archive: return "bad_archive";
        case error_code::integrity: return "integrity";
        case error_code::network: return "network";
        case error_code::unsafe_archive: return "unsafe_archive";
        case error_code::conflict: return "conflict";
        case error_code::filesystem: return "filesystem";
        case error_code::cancelled: return "cancelled";
        case error_code::check_failed: return "check_failed";
    }
    return "internal";
}

namespace {
// Messages must stay on one line whatever a server or archive put in them.
std::string one_line(std::string text) {
    std::replace_if(text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
    return text;
}
}  // namespace

std::string error::describe() const {
    std::string out;
    const std::string& where = !source.empty() ? source : !url.empty() ? url : path;
    if (!where.empty()) out += where + ": ";
    if (!json_path.empty()) out += json_path + ": ";
    out += message;
    if (!path.empty() && path != where) out += " (" + path + ")";
    if (!url.empty() && url != where) out += " [" + url + "]";
    if (!expected.empty() || !actual.empty()) out += " (expected " + expected + ", got " + actual + ")";
    return one_line(std::move(out));
}

error&& error::with_url(std::string v) && { url = sanitize_url(v); return std::move(*this); }
error&& error::with_path(std::string v) && { path = std::move(v); return std::move(*this); }
error&& error::with_json_path(std::string v) && { json_path = std::move(v); return std::move(*this); }
error&& error::with_source(std::string v) && { source = sanitize_url(v); return std::move(*this); }
error&& error::with_expected_actual(std::string e, std::string a) && {
    expected = std::move(e);
    actual = std::move(a);
    return std::move(*this);
}

std::string sanitize_url(std::string_view url) {
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string_view::npos) return std::string(url);
    const auto authority_start = scheme_end + 3;
    const auto authority_end = url.find_first_of("/?#", authority_start);
    const auto authority = url.substr(authority_start, authority_end == std::string_view::npos
                                                           ? std::string_view::npos
                                                           : authority_end - authority_start);
    const auto at = authority.rfind('@');
    if (at == std::string_view::npos) return std::string(url);
    std::string out(url.substr(0, authority_start));
    out += url.substr(authority_start + at + 1);
    return out;
}

}  // namespace redist
