// Internal: one small reader over simdjson On-Demand for the library's own
// JSON files (receipts, the commit journal, lock files), distilled from the
// manifest walker.
//
// A reader is a table of fields per object. For each object the reader:
//  * iterates the fields once, in document order (On-Demand's read-once rule:
//    no find_field(), which may skip past a key and never see it);
//  * dispatches known keys to their handler and skips unknown ones unread, so
//    newer files keep parsing;
//  * refuses a known key given twice ("duplicate key"): a document with two
//    readings of one value is not trustworthy;
//  * refuses a missing required key;
//  * names the JSON path of every error ("files[3].path") with the source
//    file, as error_code::bad_manifest (exit 4).
// Strings are copied out at once: a string_view from simdjson dies at the
// next read.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"

namespace redist::json {

class value;
using value_fn = std::function<result<void>(value&)>;

struct field {
    std::string_view key;
    value_fn read;
    bool required = false;
};

struct context;  // the document being read (source, text, parser position)

// One JSON value at a known path. Each value can be read once: a second read
// is refused (error_code::internal) instead of reaching simdjson. On-Demand
// unescapes a string into the parser's buffer each time it is read, and that
// buffer is sized for one read of every string of the document: a second read
// of a long string wrote past it (receipt_fuzz, SECURITY.md guarantee 14).
class value {
public:
    const std::string& path() const noexcept { return path_; }
    // A bad_manifest error at this value's path.
    error bad(std::string message) const;

    result<void> get(std::string& out);
    result<void> get(std::uint64_t& out);
    result<void> get(bool& out);
    // A string or null.
    result<void> get(std::optional<std::string>& out);
    // A string that passes validate_name() (see safe_path.hpp); `what` names it in errors.
    result<void> get_name(std::string& out, std::string_view what);
    // The same, or "" (release labels of old manifests are empty).
    result<void> get_name_or_empty(std::string& out, std::string_view what);
    // null, or a string that passes validate_name() (or is "", when `empty_ok`).
    result<void> get_optional_name(std::optional<std::string>& out, std::string_view what, bool empty_ok = false);
    // A string that passes relative_path_problem() (see safe_path.hpp).
    result<void> get_relative_path(std::string& out);
    // An object, read with `fields`.
    result<void> read_object(const std::vector<field>& fields);
    // An object's JSON text as written (to keep what another tool wrote in
    // a file that is rewritten); the object is not read further.
    result<void> get_raw_object(std::string& out);
    // An array: fn is called for every element, in order ("path[i]").
    result<void> for_each(const value_fn& fn);

    // Internal: made by the reader.
    value(context& ctx, void* raw, std::string path) : ctx_(&ctx), raw_(raw), path_(std::move(path)) {}

private:
    result<void> take();                         // the one read of this value
    result<void> read_string(std::string& out);  // after take()
    result<void> check_name(std::string_view what, const std::string& name, bool empty_ok) const;

    context* ctx_;
    void* raw_;  // simdjson::ondemand::value*, kept opaque so simdjson stays out of this header
    std::string path_;
    bool taken_ = false;
};

// Parses `text` (the whole file; its top level must be an object) and reads
// it with `fields`. `source` (a path or URL) and `what` ("receipt", "lock
// file", ...) appear in errors. Trailing content after the object is an error.
// Outcomes: ok | bad_manifest (source, json_path and a one-line reason).
result<void> read_document(std::string_view text, std::string_view source, std::string_view what,
                           const std::vector<field>& fields);

}  // namespace redist::json
