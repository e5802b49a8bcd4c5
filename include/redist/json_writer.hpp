// redist/json_writer.hpp — a minimal streaming JSON writer for receipts, lock
// files and the tools' --json output. Output is deterministic (keys in the
// order written) so that files stay reviewable and diffable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

// Escapes a string for a JSON string literal (without the quotes). Bytes that
// are not valid UTF-8 become \ufffd: the output is always valid JSON, so a
// receipt or lock file never becomes unreadable through what it records.
// (Paths are refused earlier if they are not UTF-8: see safe_path.hpp.)
std::string json_escape(std::string_view text);

class json_writer {
public:
    // indent = 0 writes everything on one line.
    explicit json_writer(int indent = 2) : indent_(indent) {}

    json_writer& begin_object();
    json_writer& end_object();
    json_writer& begin_array();
    json_writer& end_array();
    json_writer& key(std::string_view name);
    json_writer& value(std::string_view text);
    json_writer& value(const char* text) { return value(std::string_view(text)); }
    json_writer& value(const std::string& text) { return value(std::string_view(text)); }
    json_writer& value(std::uint64_t number);
    json_writer& value(std::int64_t number);
    json_writer& value(int number) { return value(static_cast<std::int64_t>(number)); }
    json_writer& value(unsigned number) { return value(static_cast<std::uint64_t>(number)); }
    json_writer& value(double number);
    json_writer& value(bool flag);
    json_writer& null();
    // A value already written as JSON, copied as it is: only text that a
    // JSON reader accepted (what another tool wrote into a file we rewrite).
    json_writer& raw(std::string_view json);
    json_writer& value(const std::optional<std::string>& text) { return text ? value(*text) : null(); }

    template <class T>
    json_writer& field(std::string_view name, const T& v) {
        key(name);
        return value(v);
    }

    const std::string& str() const { return out_; }

private:
    void before_value();
    json_writer& end_container(char closing);
    void newline();
    std::string out_;
    std::vector<bool> first_;  // per open container: no element written yet
    int indent_;
    bool after_key_ = false;
};

REDIST_API_END
}  // namespace redist
