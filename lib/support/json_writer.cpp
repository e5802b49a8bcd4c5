#include "redist/json_writer.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "redist/printable.hpp"
#include "support/printable.hpp"

namespace redist {

std::string json_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size() + 2);
    while (!text.empty()) {
        const char c = text[0];
        // A JSON text is UTF-8 (RFC 8259): a byte that is not part of a valid
        // sequence becomes U+FFFD, so that what is written always parses.
        const std::size_t len = utf8_sequence_length(text);
        if (len != 1) {
            out += len == 0 ? std::string_view("\ufffd") : text.substr(0, len);
            text.remove_prefix(len == 0 ? 1 : len);
            continue;
        }
        text.remove_prefix(1);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
    return out;
}

void json_writer::newline() {
    if (indent_ <= 0) return;
    out_ += '\n';
    out_.append(first_.size() * static_cast<std::size_t>(indent_), ' ');
}

void json_writer::before_value() {
    if (after_key_) {
        after_key_ = false;
        return;
    }
    if (!first_.empty()) {
        if (!first_.back()) out_ += ',';
        first_.back() = false;
        newline();
    }
}

json_writer& json_writer::begin_object() {
    before_value();
    out_ += '{';
    first_.push_back(true);
    return *this;
}

json_writer& json_writer::end_container(char closing) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) newline();
    out_ += closing;
    return *this;
}

json_writer& json_writer::end_object() { return end_container('}'); }

json_writer& json_writer::begin_array() {
    before_value();
    out_ += '[';
    first_.push_back(true);
    return *this;
}

json_writer& json_writer::end_array() { return end_container(']'); }

json_writer& json_writer::key(std::string_view name) {
    before_value();
    out_ += '"';
    out_ += json_escape(name);
    out_ += indent_ > 0 ? "\": " : "\":";
    after_key_ = true;
    return *this;
}

json_writer& json_writer::value(std::string_view text) {
    before_value();
    out_ += '"';
    out_ += json_escape(text);
    out_ += '"';
    return *this;
}

json_writer& json_writer::value(std::uint64_t number) {
    before_value();
    out_ += std::to_string(number);
    return *this;
}

json_writer& json_writer::value(std::int64_t number) {
    before_value();
    out_ += std::to_string(number);
    return *this;
}

json_writer& json_writer::value(double number) {
    before_value();
    if (!std::isfinite(number)) {
        out_ += "null";
        return *this;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", number);
    out_ += buf;
    return *this;
}

json_writer& json_writer::value(bool flag) {
    before_value();
    out_ += flag ? "true" : "false";
    return *this;
}

json_writer& json_writer::null() {
    before_value();
    out_ += "null";
    return *this;
}

json_writer& json_writer::raw(std::string_view json) {
    before_value();
    out_ += json;
    return *this;
}

}  // namespace redist
