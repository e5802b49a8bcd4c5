// redist/error.hpp — the single error type of the library, and result<T>.
//
// Every fallible library function returns result<T>. An error carries a code
// (which the tools map to an exit code), a one-line message, and whatever
// context is known: the URL (credentials stripped), a filesystem path, a JSON
// path inside a manifest, and expected/actual values for integrity failures.
// The library never prints and never exits; the tools render errors.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

// Error categories. Each maps to a distinct, documented tool exit code
// (see exit_code_table()). Adding one: add the enumerator here, its row in
// exit_code_table() (lib/support/error.cpp; the build fails until the rows and the
// enumerators line up) and its row in README.md's table (tests/unit/support/error_test.cpp
// checks it).
enum class error_code : std::uint8_t {
    internal,        // a bug or an unexpected library failure
    usage,           // bad arguments or options
    not_found,       // version, product, component, platform or variant missing; HTTP 404
    bad_manifest,    // malformed JSON or manifest content, bad index or lock file
    bad_archive,     // corrupt, truncated or unsupported archive data
    integrity,       // size or SHA-256 mismatch
    network,         // transport errors, HTTP errors other than 404, TLS failures
    unsafe_archive,  // archive entry that would escape the prefix, device nodes, ...
    conflict,        // two components ship different files at one path
    filesystem,      // I/O errors: disk full, permissions, ...
    cancelled,       // stopped on purpose: stream_unpacker::cancel(), or work abandoned
                     // because another artifact failed (install() reports that failure)
    check_failed,    // a post-install check failed (redist check, fetch --check)
};

// One row of the exit-code table, the single source of exit_code_for(),
// to_string(), the "Exit codes:" section of every tool's --help and the
// README's table (tests/unit/support/error_test.cpp compares them).
struct exit_code_row {
    error_code code;
    int exit_code;        // 1..125, or 130 for cancelled (as for SIGINT)
    const char* name;     // stable, for --json: "integrity", "network", ...
    const char* summary;  // a few words; each README row starts with them
    const char* detail;   // what falls under it, for --help; may be empty
};

// Every error_code once, in enumerator order. (0, success, is no error and
// has no row.)
std::span<const exit_code_row> exit_code_table() noexcept;

// The exit code a tool uses for an error of this category. Documented in
// README.md and in every tool's --help.
int exit_code_for(error_code code) noexcept;

// Short stable name of the category ("integrity", "network", ...), used in
// --json output.
const char* to_string(error_code code) noexcept;

struct error {
    error_code code = error_code::internal;
    std::string message;    // one line, lower-case start, no trailing period
    std::string url;        // sanitized: no user:password
    std::string path;       // filesystem path
    std::string json_path;  // e.g. "cudnn.linux-x86_64.cuda12.sha256"
    std::string source;     // file or URL of the document json_path refers to
    std::string expected;   // for mismatches
    std::string actual;

    // One line: "<source or url or path>: <json_path>: message (expected X, got Y)".
    // Never contains a newline, whatever the fields hold.
    std::string describe() const;

    // Fluent helpers, so call sites stay short:
    //   return make_error(error_code::integrity, "sha256 mismatch").with_url(u)
    error&& with_url(const std::string& v) &&;
    error&& with_path(std::string v) &&;
    error&& with_json_path(std::string v) &&;
    error&& with_source(const std::string& v) &&;
    error&& with_expected_actual(std::string e, std::string a) &&;
};

inline error make_error(error_code code, std::string message) {
    error e;
    e.code = code;
    e.message = std::move(message);
    return e;
}

// Removes "user:password@" from a URL so that it can appear in messages.
std::string sanitize_url(std::string_view url);

// A value or an error, in the spirit of C++23 std::expected.
template <class T>
class [[nodiscard]] result {
public:
    result(T value) : state_(std::in_place_index<0>, std::move(value)) {}
    result(error err) : state_(std::in_place_index<1>, std::move(err)) {}

    bool ok() const noexcept { return state_.index() == 0; }
    explicit operator bool() const noexcept { return ok(); }

    T& value() & { return std::get<0>(state_); }
    const T& value() const& { return std::get<0>(state_); }
    T&& value() && { return std::get<0>(std::move(state_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

    const error& error_value() const& { return std::get<1>(state_); }
    error&& error_value() && { return std::get<1>(std::move(state_)); }

private:
    std::variant<T, error> state_;
};

template <>
class [[nodiscard]] result<void> {
public:
    result() = default;
    result(error err) : err_(std::move(err)), failed_(true) {}

    bool ok() const noexcept { return !failed_; }
    explicit operator bool() const noexcept { return ok(); }
    const error& error_value() const& { return err_; }
    error&& error_value() && { return std::move(err_); }

private:
    error err_;
    bool failed_ = false;
};

REDIST_API_END
}  // namespace redist

// Propagates an error from an expression returning result<...>.
//   REDIST_TRY(auto manifest, parse_manifest(text, source));
// `decl` is a declaration and `tmp` a name: neither can be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define REDIST_CONCAT_INNER(a, b) a##b
#define REDIST_CONCAT(a, b) REDIST_CONCAT_INNER(a, b)
#define REDIST_TRY_IMPL(tmp, decl, expr)                \
    auto tmp = (expr);                                  \
    if (!tmp.ok()) return std::move(tmp).error_value(); \
    decl = std::move(tmp).value()
#define REDIST_TRY(decl, expr) REDIST_TRY_IMPL(REDIST_CONCAT(redist_try_, __LINE__), decl, expr)
#define REDIST_TRY_VOID(expr)                                                         \
    do {                                                                              \
        auto redist_try_void_ = (expr);                                               \
        if (!redist_try_void_.ok()) return std::move(redist_try_void_).error_value(); \
    } while (0)
// NOLINTEND(bugprone-macro-parentheses)
