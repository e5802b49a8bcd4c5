#include "redist/error.hpp"

#include <algorithm>
#include <iterator>

namespace redist {

namespace {

constexpr exit_code_row rows[] = {
    {error_code::internal, 1, "internal", "internal error", ""},
    {error_code::usage, 2, "usage", "usage error", "bad arguments"},
    {error_code::not_found, 3, "not_found", "not found",
     "product, version, component, platform, CUDA variant; HTTP 404; offline and not cached"},
    {error_code::bad_manifest, 4, "bad_manifest", "bad manifest, index, receipt or lock file", ""},
    {error_code::bad_archive, 8, "bad_archive", "corrupt or unsupported archive data", ""},
    {error_code::integrity, 5, "integrity", "integrity failure",
     "size or SHA-256 mismatch; verify found changes; a locked artifact changed upstream"},
    {error_code::network, 6, "network", "network failure", "connection, TLS, HTTP errors other than 404"},
    {error_code::unsafe_archive, 7, "unsafe_archive", "unsafe archive",
     "entries escaping the prefix, device nodes, ..."},
    {error_code::conflict, 9, "conflict", "conflict", "two components ship different files at one path"},
    {error_code::filesystem, 10, "filesystem", "filesystem error", "disk full, permissions, ..."},
    {error_code::cancelled, 130, "cancelled", "cancelled", "stopped on purpose; as Ctrl-C"},
    {error_code::check_failed, 11, "check_failed", "a post-install check failed", "redist check; fetch --check"},
};

// Row i describes enumerator i, so a lookup is an index and a missing or
// misplaced row fails the build.
constexpr bool rows_follow_enumerators() {
    for (std::size_t i = 0; i < std::size(rows); ++i)
        if (static_cast<std::size_t>(rows[i].code) != i) return false;
    return static_cast<std::size_t>(error_code::check_failed) + 1 == std::size(rows);
}
static_assert(rows_follow_enumerators(), "exit_code_table(): one row per error_code, in enumerator order");

const exit_code_row& row_for(error_code code) noexcept {
    const auto i = static_cast<std::size_t>(code);
    return i < std::size(rows) ? rows[i] : rows[0];
}

}  // namespace

std::span<const exit_code_row> exit_code_table() noexcept { return rows; }

int exit_code_for(error_code code) noexcept { return row_for(code).exit_code; }

const char* to_string(error_code code) noexcept { return row_for(code).name; }

namespace {
// Messages must stay on one line whatever a server or archive put in them.
std::string one_line(std::string text) {
    std::replace_if(
        text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
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

error&& error::with_url(const std::string& v) && {
    url = sanitize_url(v);
    return std::move(*this);
}
error&& error::with_path(std::string v) && {
    path = std::move(v);
    return std::move(*this);
}
error&& error::with_json_path(std::string v) && {
    json_path = std::move(v);
    return std::move(*this);
}
error&& error::with_source(const std::string& v) && {
    source = sanitize_url(v);
    return std::move(*this);
}
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
