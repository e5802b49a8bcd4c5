// The field-table JSON reader; see json_reader.hpp. On-Demand hazards are
// handled here once: values are read once, in order; every string is copied;
// after the first error the iterator is abandoned.
#include "support/json_reader.hpp"

#include <simdjson.h>

#include <algorithm>

#include "support/json_type.hpp"
#include "support/safe_path.hpp"

namespace redist::json {

namespace od = simdjson::ondemand;

struct context {
    std::string_view source;
    std::string_view what;
    const simdjson::padded_string* text = nullptr;
    od::document* doc = nullptr;

    error bad(std::string json_path, std::string message) const {
        return make_error(error_code::bad_manifest, std::move(message))
            .with_source(std::string(source))
            .with_json_path(std::move(json_path));
    }

    // simdjson's reason plus, when known, where the parser stood.
    error json_error(simdjson::error_code code, std::string json_path) const {
        std::string message = "invalid JSON in " + std::string(what) + ": " + simdjson::error_message(code);
        const char* where = nullptr;
        if (doc != nullptr && doc->current_location().get(where) == simdjson::SUCCESS && where != nullptr &&
            where >= text->data() && where <= text->data() + text->size()) {
            const auto offset = static_cast<std::size_t>(where - text->data());
            const auto line = 1 + std::count(text->data(), where, '\n');
            message += " (at byte " + std::to_string(offset) + ", line " + std::to_string(line) + ")";
        }
        return bad(std::move(json_path), std::move(message));
    }
};

const char* type_name(od::json_type t) noexcept {
    switch (t) {
        case od::json_type::array: return "an array";
        case od::json_type::object: return "an object";
        case od::json_type::number: return "a number";
        case od::json_type::string: return "a string";
        case od::json_type::boolean: return "a boolean";
        case od::json_type::null: return "null";
    }
    return "an unknown value";
}

namespace {

std::string child_path(const std::string& parent, std::string_view key) {
    std::string out = parent;
    if (!out.empty()) out += '.';
    out += printable(key, 64);
    return out;
}

od::value& raw(void* p) { return *static_cast<od::value*>(p); }

// Reads every field of `object` through the table.
result<void> read_fields(context& ctx, od::object object, const std::string& path, const std::vector<field>& fields) {
    std::vector<bool> seen(fields.size(), false);
    for (auto field_result : object) {
        od::field f;
        if (auto ec = std::move(field_result).get(f)) return ctx.json_error(ec, path);
        std::string_view key_view;
        if (auto ec = f.unescaped_key().get(key_view)) return ctx.json_error(ec, path);
        const auto it = std::find_if(fields.begin(), fields.end(), [&](const field& d) { return d.key == key_view; });
        if (it == fields.end()) continue;                           // unknown: skipped unread
        const std::string field_path = child_path(path, key_view);  // copies the key before the next read
        const auto index = static_cast<std::size_t>(it - fields.begin());
        if (seen[index]) return ctx.bad(field_path, "duplicate key");
        seen[index] = true;
        od::value v = f.value();
        value wrapped(ctx, &v, field_path);
        REDIST_TRY_VOID(it->read(wrapped));
    }
    for (std::size_t i = 0; i < fields.size(); ++i) {
        if (fields[i].required && !seen[i])
            return ctx.bad(child_path(path, fields[i].key), "missing " + std::string(fields[i].key));
    }
    return {};
}

}  // namespace

error value::bad(std::string message) const { return ctx_->bad(path_, std::move(message)); }

result<void> value::take() {
    if (taken_)
        return make_error(error_code::internal, "JSON value " + path_ + " read twice (a bug in redist)")
            .with_source(std::string(ctx_->source));
    taken_ = true;
    return {};
}

result<void> value::get(std::string& out) {
    REDIST_TRY_VOID(take());
    return read_string(out);
}

result<void> value::read_string(std::string& out) {
    od::json_type type{};
    if (auto ec = raw(raw_).type().get(type)) return ctx_->json_error(ec, path_);
    if (type != od::json_type::string) return bad(std::string("expected a string, got ") + type_name(type));
    std::string_view text;
    if (auto ec = raw(raw_).get_string().get(text)) return ctx_->json_error(ec, path_);
    out.assign(text);
    return {};
}

result<void> value::get(std::uint64_t& out) {
    REDIST_TRY_VOID(take());
    od::json_type type{};
    if (auto ec = raw(raw_).type().get(type)) return ctx_->json_error(ec, path_);
    if (type != od::json_type::number) return bad(std::string("expected an integer, got ") + type_name(type));
    if (raw(raw_).get_uint64().get(out)) return bad("expected a non-negative integer that fits 64 bits");
    return {};
}

result<void> value::get(bool& out) {
    REDIST_TRY_VOID(take());
    od::json_type type{};
    if (auto ec = raw(raw_).type().get(type)) return ctx_->json_error(ec, path_);
    if (type != od::json_type::boolean) return bad(std::string("expected a boolean, got ") + type_name(type));
    if (auto ec = raw(raw_).get_bool().get(out)) return ctx_->json_error(ec, path_);
    return {};
}

result<void> value::get(std::optional<std::string>& out) {
    REDIST_TRY_VOID(take());
    od::json_type type{};
    if (auto ec = raw(raw_).type().get(type)) return ctx_->json_error(ec, path_);
    if (type == od::json_type::null) {
        bool is_null = false;
        if (auto ec = raw(raw_).is_null().get(is_null)) return ctx_->json_error(ec, path_);
        out.reset();
        return {};
    }
    std::string text;
    REDIST_TRY_VOID(read_string(text));
    out = std::move(text);
    return {};
}

result<void> value::check_name(std::string_view what, const std::string& name, bool empty_ok) const {
    if (empty_ok && name.empty()) return {};
    if (const char* why = name_problem(name))
        return bad(std::string(what) + " '" + printable(name, 64) + "' is not a valid name: " + why);
    return {};
}

result<void> value::get_name(std::string& out, std::string_view what) {
    REDIST_TRY_VOID(get(out));
    return check_name(what, out, false);
}

result<void> value::get_name_or_empty(std::string& out, std::string_view what) {
    REDIST_TRY_VOID(get(out));
    return check_name(what, out, true);
}

result<void> value::get_optional_name(std::optional<std::string>& out, std::string_view what, bool empty_ok) {
    REDIST_TRY_VOID(get(out));
    return out ? check_name(what, *out, empty_ok) : result<void>();
}

result<void> value::get_relative_path(std::string& out) {
    REDIST_TRY_VOID(get(out));
    if (const char* why = relative_path_problem(out)) return bad("unsafe path '" + printable(out) + "': " + why);
    return {};
}

result<void> value::read_object(const std::vector<field>& fields) {
    REDIST_TRY_VOID(take());
    od::json_type type{};
    if (auto ec = raw(raw_).type().get(type)) return ctx_->json_error(ec, path_);
    if (type != od::json_type::object) return bad(std::string("expected an object, got ") + type_name(type));
    od::object object;
    if (auto ec = raw(raw_).get_object().get(object)) return ctx_->json_error(ec, path_);
    return read_fields(*ctx_, object, path_, fields);
}

result<void> value::get_raw_object(std::string& out) {
    REDIST_TRY_VOID(take());
    od::json_type type{};
    if (auto ec = raw(raw_).type().get(type)) return ctx_->json_error(ec, path_);
    if (type != od::json_type::object) return bad(std::string("expected an object, got ") + type_name(type));
    od::object object;
    if (auto ec = raw(raw_).get_object().get(object)) return ctx_->json_error(ec, path_);
    std::string_view text;
    if (auto ec = object.raw_json().get(text)) return ctx_->json_error(ec, path_);
    // The text runs up to the next structural character: drop the blanks before it.
    while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\r' || text.back() == '\t'))
        text.remove_suffix(1);
    out.assign(text);
    return {};
}

result<void> value::for_each(const value_fn& fn) {
    REDIST_TRY_VOID(take());
    od::json_type type{};
    if (auto ec = raw(raw_).type().get(type)) return ctx_->json_error(ec, path_);
    if (type != od::json_type::array) return bad(std::string("expected an array, got ") + type_name(type));
    od::array array;
    if (auto ec = raw(raw_).get_array().get(array)) return ctx_->json_error(ec, path_);
    std::size_t index = 0;
    for (auto element_result : array) {
        const std::string element_path = path_ + "[" + std::to_string(index++) + "]";
        od::value element;
        if (auto ec = element_result.get(element)) return ctx_->json_error(ec, element_path);
        value wrapped(*ctx_, &element, element_path);
        REDIST_TRY_VOID(fn(wrapped));
    }
    return {};
}

result<void> read_document(std::string_view text, std::string_view source, std::string_view what,
                           const std::vector<field>& fields) {
    // On-Demand reads past the end of its input: copy into a padded buffer.
    const simdjson::padded_string padded(text.data(), text.size());
    context ctx;
    ctx.source = source;
    ctx.what = what;
    ctx.text = &padded;
    if (padded.data() == nullptr && !text.empty())
        return make_error(error_code::internal, "out of memory reading the " + std::string(what))
            .with_source(std::string(source));
    od::parser parser;
    od::document doc;
    if (auto ec = parser.iterate(padded).get(doc)) return ctx.json_error(ec, "");
    ctx.doc = &doc;
    od::json_type type{};
    if (auto ec = doc.type().get(type)) return ctx.json_error(ec, "");
    if (type != od::json_type::object)
        return ctx.bad("", std::string(what) + " must be a JSON object, got " + type_name(type));
    od::object root;
    if (auto ec = doc.get_object().get(root)) return ctx.json_error(ec, "");
    REDIST_TRY_VOID(read_fields(ctx, root, "", fields));
    // simdjson 3.0.1 has no document::at_end(); current_location() reports
    // OUT_OF_BOUNDS exactly when the whole input was consumed.
    const char* rest = nullptr;
    if (doc.current_location().get(rest) == simdjson::SUCCESS)
        return ctx.bad("", "invalid JSON in " + std::string(what) + ": trailing content after the top-level object");
    return {};
}

}  // namespace redist::json
