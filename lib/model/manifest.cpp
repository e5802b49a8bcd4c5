// redist/manifest.cpp — redistrib JSON -> typed model, with simdjson On-Demand.
//
// On-Demand hazards this file is written around:
//  * Read-once: every value is consumed at most once, in document order. We
//    never look a key up with find_field() (which may skip ahead and then
//    fail to find an earlier key); we iterate each object once and dispatch
//    on the key.
//  * Lifetimes: every string_view that simdjson hands out points into the
//    parser's buffers and dies at the next parse. Everything we keep is
//    copied into std::string before the parser goes away.
//  * Laziness: On-Demand validates structure (brackets, strings, UTF-8) up
//    front, but a scalar is only validated when it is read. Values under
//    keys we ignore are skipped unread, so a malformed literal under an
//    unknown key is not reported. Everything we do use is fully checked.
//  * Errors: after the first error the iterator is unusable; we return at
//    once and never continue a loop after a failed field.
//
// Decisions for shapes the manifests do not pin down (documented in the
// header's contract, tested in tests/unit/model/manifest_test.cpp):
//  * Top level: every key whose value is an object is a component. The known
//    scalars release_date/release_label/release_product must be strings when
//    present. Any other non-object value (string, number, array, ...) is
//    unknown metadata and ignored, so that additions by NVIDIA keep parsing.
//  * Component: name/license/license_path/version must be strings,
//    cuda_variant an array of strings. Every object value is a platform.
//    Other keys are ignored. A component without platforms is kept (it has
//    no artifacts).
//  * Platform: the artifact keys (relative_path/sha256/md5/size) form a
//    direct artifact; every object value is a variant. If one artifact key is
//    present, relative_path, sha256 and size must all be. A platform with
//    neither is an error. The direct artifact is ordered among the variants
//    at the position of its first key.
//  * Duplicate keys that we interpret (components, platforms, variants,
//    artifact fields, known scalars) are errors: a manifest whose hash has two
//    readings is not trustworthy.
#include "redist/manifest.hpp"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "model/manifest.hpp"
#include "model/recompressed_sidecar.hpp"
#include "model/urls.hpp"
#include "redist/json_writer.hpp"
#include "redist/printable.hpp"
#include "support/hex.hpp"
#include "support/json_reader.hpp"
#include "support/json_type.hpp"
#include "support/safe_path.hpp"

namespace redist {

namespace {

namespace od = simdjson::ondemand;
using json::type_name;

// ---- small helpers ----------------------------------------------------------

char ascii_lower(char c) noexcept { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool equal_icase(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

bool ends_with_icase(std::string_view text, std::string_view suffix) noexcept {
    return text.size() >= suffix.size() && equal_icase(text.substr(text.size() - suffix.size()), suffix);
}

// Keys are attacker-controlled text that ends up in one-line messages:
// replace control bytes and cap the length so a json_path stays readable.
std::string display_key(std::string_view key) {
    constexpr std::size_t max_len = 128;
    std::string out;
    out.reserve(std::min(key.size(), max_len) + 3);
    for (std::size_t i = 0; i < key.size() && i < max_len; ++i) {
        const auto c = static_cast<unsigned char>(key[i]);
        out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
    }
    if (key.size() > max_len) out += "...";
    return out;
}

std::string child_path(std::string_view parent, std::string_view key) {
    std::string out(parent);
    if (!out.empty()) out += '.';
    out += display_key(key);
    return out;
}

// Returns the lower-cased digest, or nullopt if `text` is not `digits` hex digits.
std::optional<std::string> normalize_hex(std::string_view text, std::size_t digits) {
    if (text.size() != digits || !std::all_of(text.begin(), text.end(), [](char c) { return hex_value(c) >= 0; }))
        return std::nullopt;
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), ascii_lower);
    return out;
}

std::optional<std::uint64_t> parse_decimal_u64(std::string_view text) {
    if (text.empty()) return std::nullopt;
    std::uint64_t value = 0;
    for (const char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        const auto digit = static_cast<std::uint64_t>(c - '0');
        if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
        value = value * 10 + digit;
    }
    return value;
}

// The most ".." a relative_path may start with: from "<base>/<product>/redist/"
// to the base's parent, where NVIDIA's bin-archive keeps its pool
// (".../bin-archive/release/<product>/redist/../../../pool/...").
constexpr int max_climb = 3;

// Why a relative_path is unsafe, or nullptr if it is fine. The path is a URL
// reference resolved against the manifest's URL (urls.hpp resolve_reference)
// and names files in a mirror (mirror_artifact_path), so it must not turn into
// another URL, and its ".." may only climb, as a leading run, to the base's
// parent; where that still leaves the origin is refused when it is resolved.
const char* raw_relative_path_problem(std::string_view p) noexcept {
    if (p.empty()) return "relative_path is empty";
    if (p.front() == '/') return "relative_path is absolute";
    for (const char ch : p) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f) return "relative_path contains a control character";
        if (c == '\\') return "relative_path contains a backslash";
        if (c == '?' || c == '#') return "relative_path contains a query or fragment ('?' or '#')";
    }
    // A colon in the first segment is a URL scheme ("https:") or a drive
    // letter ("C:"): either makes the path absolute for someone.
    const auto first_slash = p.find('/');
    if (p.substr(0, first_slash).find(':') != std::string_view::npos)
        return "relative_path is absolute (has a scheme or drive prefix)";
    std::size_t start = 0;
    int climb = 0;
    bool named = false;  // a segment other than ".." came
    while (true) {
        const auto end = p.find('/', start);
        const auto segment = p.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        if (segment == ".." && named) return "relative_path contains a '..' segment after a name";
        if (segment == ".." && ++climb > max_climb)
            return "relative_path climbs more than three directories (above the base's parent)";
        if (segment == ".") return "relative_path contains a '.' segment";
        if (segment.empty()) return "relative_path contains an empty segment";
        named = named || segment != "..";
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
    if (!named) return "relative_path names no file";
    return nullptr;
}

}  // namespace

// The path is used twice: as written (file names in a mirror) and through a
// URL, where libcurl percent-decodes it ("..%2f" reaches the parent of a
// file:// mirror). So it must be safe both ways: an escape that decodes to a
// byte with a meaning in paths ('/', '.', '\', '%', a control character) is
// refused, and the decoded path passes the same checks as the raw one.
const char* artifact_path_problem(std::string_view p) noexcept {
    if (const char* problem = raw_relative_path_problem(p)) return problem;
    if (p.find('%') == std::string_view::npos) return nullptr;
    std::string decoded;
    decoded.reserve(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
        if (p[i] == '%' && i + 2 < p.size() && hex_value(p[i + 1]) >= 0 && hex_value(p[i + 2]) >= 0) {
            const auto c = static_cast<unsigned char>(hex_value(p[i + 1]) * 16 + hex_value(p[i + 2]));
            if (c == '/' || c == '.' || c == '\\' || c == '%' || c < 0x20 || c == 0x7f)
                return "relative_path contains a percent-escape of a path character (%2F, %2E, %5C, %25 or a control "
                       "character)";
            decoded += static_cast<char>(c);
            i += 2;
        } else {
            decoded += p[i];
        }
    }
    if (const char* problem = raw_relative_path_problem(decoded)) return problem;
    return nullptr;
}

namespace {

// ---- the walker ---------------------------------------------------------------

enum artifact_key : unsigned { k_relative_path = 1, k_sha256 = 2, k_md5 = 4, k_size = 8 };

struct pending_artifact {
    unsigned seen = 0;  // artifact_key bits
    std::string relative_path;
    std::string sha256;
    std::string md5;
    std::uint64_t size = 0;
};

class walker {
public:
    walker(std::string_view source, const simdjson::padded_string& text) : source_(source), text_(text) {}

    result<manifest> run();

private:
    error bad(std::string json_path, std::string message) const {
        return make_error(error_code::bad_manifest, std::move(message))
            .with_source(std::string(source_))
            .with_json_path(std::move(json_path));
    }

    // A JSON-level failure: simdjson's message plus where the iterator stood.
    error json_error(simdjson::error_code code, std::string json_path) {
        std::string message = "invalid JSON: ";
        message += simdjson::error_message(code);
        if (doc_ != nullptr) {
            const char* where = nullptr;
            if (doc_->current_location().get(where) == simdjson::SUCCESS && where != nullptr && where >= text_.data() &&
                where <= text_.data() + text_.size()) {
                const auto offset = static_cast<std::size_t>(where - text_.data());
                const auto line = 1 + std::count(text_.data(), where, '\n');
                message += " (at byte " + std::to_string(offset) + ", line " + std::to_string(line) + ")";
            }
        }
        return bad(std::move(json_path), std::move(message));
    }

    // Reads a string value into `out` (an out-parameter rather than
    // result<std::string>: GCC 12 warns falsely about moving SSO strings out
    // of the variant).
    result<void> read_string(od::value value, const std::string& path, std::string_view what, std::string& out);
    result<void> read_component(od::object object, const std::string& path, component& out);
    result<void> read_cuda_variants(od::value value, const std::string& path, std::vector<std::string>& out);
    result<void> read_platform(od::object object, const std::string& path, component& comp,
                               const std::string& platform);
    result<void> read_variant(od::object object, const std::string& path, pending_artifact& out);
    // A field whose value is an object under a name (a platform of a
    // component, a variant of a platform): nullopt for a value of another
    // type (metadata this parser does not know); an error for a key that is
    // not a valid name or that `seen` holds already.
    result<std::optional<od::object>> read_named_object(od::value value, const std::string& path,
                                                        const std::string& key, const char* what,
                                                        std::unordered_set<std::string>& seen);
    // Returns true if `key` is an artifact key (and stores it), false if not.
    result<bool> read_artifact_field(std::string_view key, od::value value, const std::string& parent,
                                     pending_artifact& out);
    result<artifact> finish_artifact(pending_artifact&& fields, const std::string& path, const std::string& comp,
                                     const std::string& platform, std::optional<std::string> variant) const;

    std::string_view source_;
    const simdjson::padded_string& text_;
    od::document* doc_ = nullptr;
};

result<void> walker::read_string(od::value value, const std::string& path, std::string_view what, std::string& out) {
    od::json_type type{};
    if (auto ec = value.type().get(type)) return json_error(ec, path);
    if (type != od::json_type::string)
        return bad(path, std::string(what) + " must be a string, got " + type_name(type));
    std::string_view text;
    if (auto ec = value.get_string().get(text)) return json_error(ec, path);
    out.assign(text);  // copy: the view dies with the parser
    return {};
}

result<manifest> walker::run() {
    od::parser parser;
    od::document doc;
    if (auto ec = parser.iterate(text_).get(doc)) return json_error(ec, "");
    doc_ = &doc;

    od::json_type type{};
    if (auto ec = doc.type().get(type)) return json_error(ec, "");
    if (type != od::json_type::object)
        return bad("", std::string("top-level value must be an object, got ") + type_name(type));
    od::object root;
    if (auto ec = doc.get_object().get(root)) return json_error(ec, "");

    manifest out;
    std::unordered_set<std::string> component_keys;
    unsigned scalars_seen = 0;
    for (auto field_result : root) {
        od::field field;
        if (auto ec = std::move(field_result).get(field)) return json_error(ec, "");
        std::string_view key_view;
        if (auto ec = field.unescaped_key().get(key_view)) return json_error(ec, "");
        std::string key(key_view);
        const std::string path = child_path("", key);
        od::value value = field.value();

        static constexpr std::array<std::string_view, 3> scalar_keys{"release_date", "release_label",
                                                                     "release_product"};
        const auto known = std::find(scalar_keys.begin(), scalar_keys.end(), key);
        if (known != scalar_keys.end()) {
            const auto bit = 1u << (known - scalar_keys.begin());
            if (scalars_seen & bit) return bad(path, "duplicate key");
            scalars_seen |= bit;
            std::string& target = key == "release_date"    ? out.release_date
                                  : key == "release_label" ? out.release_label
                                                           : out.release_product;
            REDIST_TRY_VOID(read_string(value, path, key, target));
            // The label and product name files and receipts; the date is only shown.
            if (key != "release_date" && !target.empty()) {
                if (const char* why = name_problem(target))
                    return bad(path, key + " '" + printable(target, 64) + "' is not a valid name: " + why);
            }
            continue;
        }

        if (auto ec = value.type().get(type)) return json_error(ec, path);
        if (type != od::json_type::object) continue;  // unknown top-level metadata
        if (const char* why = name_problem(key))
            return bad(path, "component key '" + printable(key, 64) + "' is not a valid name: " + why);
        if (!component_keys.insert(key).second) return bad(path, "duplicate component");
        od::object object;
        if (auto ec = value.get_object().get(object)) return json_error(ec, path);
        component comp;
        comp.key = key;
        REDIST_TRY_VOID(read_component(object, path, comp));
        out.components.push_back(std::move(comp));
    }

    // simdjson 3.0.1 has no document::at_end(); current_location() reports
    // OUT_OF_BOUNDS exactly when the whole input was consumed.
    const char* rest = nullptr;
    if (doc.current_location().get(rest) == simdjson::SUCCESS) {
        const auto offset = static_cast<std::size_t>(rest - text_.data());
        return bad("", "invalid JSON: trailing content after the top-level object (at byte " + std::to_string(offset) +
                           ")");
    }
    return out;
}

result<void> walker::read_component(od::object object, const std::string& path, component& out) {
    std::unordered_set<std::string> platform_keys;
    unsigned seen = 0;
    for (auto field_result : object) {
        od::field field;
        if (auto ec = std::move(field_result).get(field)) return json_error(ec, path);
        std::string_view key_view;
        if (auto ec = field.unescaped_key().get(key_view)) return json_error(ec, path);
        std::string key(key_view);
        const std::string field_path = child_path(path, key);
        od::value value = field.value();

        static constexpr std::array<std::string_view, 5> known_keys{"name", "license", "license_path", "version",
                                                                    "cuda_variant"};
        const auto known = std::find(known_keys.begin(), known_keys.end(), key);
        if (known != known_keys.end()) {
            const auto bit = 1u << (known - known_keys.begin());
            if (seen & bit) return bad(field_path, "duplicate key");
            seen |= bit;
            if (key == "cuda_variant") {
                REDIST_TRY_VOID(read_cuda_variants(value, field_path, out.cuda_variants));
            } else {
                std::string& target = key == "name"      ? out.name
                                      : key == "license" ? out.license
                                      : key == "version" ? out.version
                                                         : out.license_path;
                REDIST_TRY_VOID(read_string(value, field_path, key, target));
            }
            continue;
        }

        REDIST_TRY(const auto platform, read_named_object(value, field_path, key, "platform", platform_keys));
        if (!platform) continue;  // unknown component metadata
        REDIST_TRY_VOID(read_platform(*platform, field_path, out, key));
    }
    return {};
}

result<std::optional<od::object>> walker::read_named_object(od::value value, const std::string& path,
                                                            const std::string& key, const char* what,
                                                            std::unordered_set<std::string>& seen) {
    od::json_type type{};
    if (auto ec = value.type().get(type)) return json_error(ec, path);
    if (type != od::json_type::object) return std::optional<od::object>();
    if (const char* why = name_problem(key))
        return bad(path, std::string(what) + " key '" + printable(key, 64) + "' is not a valid name: " + why);
    if (!seen.insert(key).second) return bad(path, std::string("duplicate ") + what);
    od::object object;
    if (auto ec = value.get_object().get(object)) return json_error(ec, path);
    return std::optional<od::object>(object);
}

result<void> walker::read_cuda_variants(od::value value, const std::string& path, std::vector<std::string>& out) {
    od::json_type type{};
    if (auto ec = value.type().get(type)) return json_error(ec, path);
    if (type != od::json_type::array)
        return bad(path, std::string("cuda_variant must be an array, got ") + type_name(type));
    od::array array;
    if (auto ec = value.get_array().get(array)) return json_error(ec, path);
    std::size_t index = 0;
    for (auto element_result : array) {
        const std::string element_path = path + "[" + std::to_string(index++) + "]";
        od::value element;
        if (auto ec = element_result.get(element)) return json_error(ec, element_path);
        std::string text;
        REDIST_TRY_VOID(read_string(element, element_path, "cuda_variant entry", text));
        out.push_back(std::move(text));
    }
    return {};
}

result<void> walker::read_platform(od::object object, const std::string& path, component& comp,
                                   const std::string& platform) {
    pending_artifact direct;
    std::size_t direct_position = 0;  // how many variants precede the direct artifact's first key
    std::vector<artifact> variants;
    std::unordered_set<std::string> variant_keys;
    for (auto field_result : object) {
        od::field field;
        if (auto ec = std::move(field_result).get(field)) return json_error(ec, path);
        std::string_view key_view;
        if (auto ec = field.unescaped_key().get(key_view)) return json_error(ec, path);
        std::string key(key_view);
        od::value value = field.value();

        const bool had_direct = direct.seen != 0;
        REDIST_TRY(const bool is_artifact_key, read_artifact_field(key, value, path, direct));
        if (is_artifact_key) {
            if (!had_direct) direct_position = variants.size();
            continue;
        }

        const std::string variant_path = child_path(path, key);
        REDIST_TRY(const auto variant_object, read_named_object(value, variant_path, key, "variant", variant_keys));
        if (!variant_object) continue;  // unknown platform metadata
        pending_artifact fields;
        REDIST_TRY_VOID(read_variant(*variant_object, variant_path, fields));
        REDIST_TRY(artifact a, finish_artifact(std::move(fields), variant_path, comp.key, platform, key));
        variants.push_back(std::move(a));
    }

    if (direct.seen == 0 && variants.empty())
        return bad(path, "platform has neither an artifact (relative_path, sha256, size) nor variants");
    if (direct.seen != 0) {
        REDIST_TRY(artifact a, finish_artifact(std::move(direct), path, comp.key, platform, std::nullopt));
        variants.insert(variants.begin() + static_cast<std::ptrdiff_t>(direct_position), std::move(a));
    }
    for (auto& a : variants) comp.artifacts.push_back(std::move(a));
    return {};
}

result<void> walker::read_variant(od::object object, const std::string& path, pending_artifact& out) {
    for (auto field_result : object) {
        od::field field;
        if (auto ec = std::move(field_result).get(field)) return json_error(ec, path);
        std::string_view key_view;
        if (auto ec = field.unescaped_key().get(key_view)) return json_error(ec, path);
        const std::string key(key_view);  // copy before the next read reuses the buffer
        REDIST_TRY(const bool used, read_artifact_field(key, field.value(), path, out));
        (void)used;  // anything else under a variant is ignored (skipped unread)
    }
    if (out.seen == 0) return bad(path, "variant has no artifact (relative_path, sha256, size)");
    return {};
}

result<bool> walker::read_artifact_field(std::string_view key, od::value value, const std::string& parent,
                                         pending_artifact& out) {
    unsigned bit = 0;
    if (key == "relative_path") bit = k_relative_path;
    else if (key == "sha256") bit = k_sha256;
    else if (key == "md5") bit = k_md5;
    else if (key == "size") bit = k_size;
    else return false;

    const std::string path = child_path(parent, key);
    if (out.seen & bit) return bad(path, "duplicate key");
    out.seen |= bit;

    if (bit == k_size) {
        od::json_type type{};
        if (auto ec = value.type().get(type)) return json_error(ec, path);
        if (type == od::json_type::number) {
            // Accepted for robustness; published manifests use strings.
            od::number_type number_type{};
            if (auto ec = value.get_number_type().get(number_type)) return json_error(ec, path);
            if (number_type == od::number_type::floating_point_number)
                return bad(path, "size must be a whole number of bytes");
            if (number_type == od::number_type::signed_integer) return bad(path, "size is negative");
            if (auto ec = value.get_uint64().get(out.size)) {
                if (ec == simdjson::NUMBER_OUT_OF_RANGE || ec == simdjson::INCORRECT_TYPE)
                    return bad(path, "size does not fit in 64 bits");
                return json_error(ec, path);
            }
            return true;
        }
        if (type != od::json_type::string)
            return bad(path, std::string("size must be a string of decimal digits, got ") + type_name(type));
        std::string_view text;
        if (auto ec = value.get_string().get(text)) return json_error(ec, path);
        const auto size = parse_decimal_u64(text);
        if (!size) {
            const bool digits = !text.empty() &&
                                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
            return bad(path, text.empty() ? "size is empty"
                             : digits     ? "size does not fit in 64 bits"
                                          : "size is not a string of decimal digits");
        }
        out.size = *size;
        return true;
    }

    std::string text;
    REDIST_TRY_VOID(read_string(value, path, key, text));
    if (bit == k_relative_path) {
        if (const char* problem = artifact_path_problem(text)) return bad(path, problem);
        out.relative_path = std::move(text);
    } else {
        const std::size_t digits = bit == k_sha256 ? 64 : 32;
        auto hex = normalize_hex(text, digits);
        if (!hex) return bad(path, std::string(key) + " must be " + std::to_string(digits) + " hex digits");
        (bit == k_sha256 ? out.sha256 : out.md5) = std::move(*hex);
    }
    return true;
}

result<artifact> walker::finish_artifact(pending_artifact&& fields, const std::string& path, const std::string& comp,
                                         const std::string& platform, std::optional<std::string> variant) const {
    // Report the first missing required key in a stable order.
    if (!(fields.seen & k_relative_path)) return bad(child_path(path, "relative_path"), "missing relative_path");
    if (!(fields.seen & k_sha256)) return bad(child_path(path, "sha256"), "missing sha256");
    if (!(fields.seen & k_size)) return bad(child_path(path, "size"), "missing size");
    artifact a;
    a.component = comp;
    a.platform = platform;
    a.variant = std::move(variant);
    a.format = archive_format_from_path(fields.relative_path);
    a.relative_path = std::move(fields.relative_path);
    a.sha256 = std::move(fields.sha256);
    a.md5 = std::move(fields.md5);
    a.size = fields.size;
    return a;
}

}  // namespace

// ---- public API ---------------------------------------------------------------

const char* to_string(archive_format format) noexcept {
    switch (format) {
        case archive_format::tar_xz: return "tar.xz";
        case archive_format::tar_gz: return "tar.gz";
        case archive_format::tar_zst: return "tar.zst";
        case archive_format::zip: return "zip";
        case archive_format::unknown: return "unknown";
    }
    return "unknown";
}

archive_format archive_format_from_path(std::string_view relative_path) noexcept {
    // Case-insensitive: Windows-side tooling sometimes upper-cases extensions.
    if (ends_with_icase(relative_path, ".tar.xz") || ends_with_icase(relative_path, ".txz"))
        return archive_format::tar_xz;
    if (ends_with_icase(relative_path, ".tar.gz") || ends_with_icase(relative_path, ".tgz"))
        return archive_format::tar_gz;
    if (ends_with_icase(relative_path, ".tar.zst")) return archive_format::tar_zst;
    if (ends_with_icase(relative_path, ".zip")) return archive_format::zip;
    return archive_format::unknown;
}

std::optional<cuda_version> parse_cuda_version(std::string_view text) noexcept {
    // Up to three dot-separated numbers of 1-3 digits each.
    int parts[3] = {0, 0, 0};
    std::size_t count = 0;
    std::size_t digits = 0;
    for (const char c : text) {
        if (c == '.') {
            if (digits == 0 || ++count == 3) return std::nullopt;
            digits = 0;
        } else if (c >= '0' && c <= '9' && digits < 3) {
            parts[count] = parts[count] * 10 + (c - '0');
            ++digits;
        } else {
            return std::nullopt;
        }
    }
    if (digits == 0) return std::nullopt;
    cuda_version out;
    out.major = parts[0];
    if (count >= 1) out.minor = parts[1];
    return out;
}

std::string to_string(const cuda_version& version) {
    return std::to_string(version.major) + (version.minor ? "." + std::to_string(*version.minor) : "");
}

std::optional<cuda_version> artifact::cuda_variant() const {
    if (!variant) return std::nullopt;
    std::string_view v = *variant;
    if (v.substr(0, 4) != "cuda") return std::nullopt;
    v.remove_prefix(4);
    // "cuda12" or "cuda13.2"; never a patch level ("cuda12.4.1" is no variant key).
    if (std::count(v.begin(), v.end(), '.') > 1) return std::nullopt;
    return parse_cuda_version(v);
}

std::optional<int> artifact::cuda_major() const {
    if (const auto v = cuda_variant()) return v->major;
    return std::nullopt;
}

std::size_t manifest::artifact_count() const noexcept {
    std::size_t n = 0;
    for (const auto& c : components) n += c.artifacts.size();
    return n;
}

const component* manifest::find_component(std::string_view key) const noexcept {
    for (const auto& c : components)
        if (c.key == key) return &c;
    return nullptr;
}

result<manifest> parse_manifest(std::string_view json, std::string_view source) {
    // On-Demand reads up to SIMDJSON_PADDING bytes past the end: copy into a
    // padded buffer rather than trusting the caller's allocation.
    const simdjson::padded_string text(json.data(), json.size());
    if (text.data() == nullptr && json.size() != 0)
        return make_error(error_code::internal, "out of memory copying the manifest").with_source(std::string(source));
    walker w(source, text);
    return w.run();
}

bool is_sha256_hex(std::string_view text) noexcept {
    return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) { return hex_value(c) >= 0; });
}

}  // namespace redist

// ---- recompressed copies (recompressed.hpp) ---------------------------------------

namespace redist {

namespace {

// A 64-hex-digit field, stored lower case.
json::value_fn read_digest(std::string& out) {
    return [&out](json::value& v) -> result<void> {
        std::string text;
        REDIST_TRY_VOID(v.get(text));
        auto hex = normalize_hex(text, 64);
        if (!hex) return result<void>(v.bad("not a SHA-256 (64 hex digits)"));
        out = std::move(*hex);
        return result<void>();
    };
}

// A size: a decimal string, like the manifest's.
json::value_fn read_decimal_size(std::uint64_t& out) {
    return [&out](json::value& v) -> result<void> {
        std::string text;
        REDIST_TRY_VOID(v.get(text));
        auto n = parse_decimal_u64(text);
        if (!n) return result<void>(v.bad("not a string of decimal digits that fits 64 bits"));
        out = *n;
        return result<void>();
    };
}

result<void> read_copy(json::value& item, recompressed_copy& c) {
    std::string compression;
    auto read = item.read_object({
        {"original_sha256", read_digest(c.original_sha256), true},
        {"original_size", read_decimal_size(c.original_size), true},
        {"relative_path",
         [&](json::value& v) -> result<void> {
             REDIST_TRY_VOID(v.get(c.relative_path));
             if (const char* why = artifact_path_problem(c.relative_path)) return result<void>(v.bad(why));
             if (!c.relative_path.ends_with(".tar.zst")) return result<void>(v.bad("does not end in .tar.zst"));
             return result<void>();
         },
         true},
        {"compression",
         [&](json::value& v) -> result<void> {
             REDIST_TRY_VOID(v.get(compression));
             if (compression != "zstd")
                 return result<void>(v.bad("unsupported compression '" + printable(compression, 32) + "'"));
             return result<void>();
         },
         true},
        {"sha256", read_digest(c.sha256), true},
        {"size", read_decimal_size(c.size), true},
        {"tar_sha256", read_digest(c.tar_sha256), true},
        {"tar_size", read_decimal_size(c.tar_size), true},
        {"tar_piece_bytes",
         [&](json::value& v) -> result<void> {
             REDIST_TRY_VOID(read_decimal_size(c.tar_piece_bytes)(v));
             // A piece is gathered whole before it is hashed: at most a pool frame's size (64 MiB).
             const std::uint64_t n = c.tar_piece_bytes;
             if ((n & (n - 1)) != 0 || n < kMinTarPieceBytes || n > kMaxTarPieceBytes)
                 return result<void>(v.bad("not a power of two from 65536 to 67108864"));
             return result<void>();
         }},
        {"tar_list_sha256", read_digest(c.tar_list_sha256)},
        {"tree_sha256", read_digest(c.tree_sha256)},
    });
    if (!read.ok()) return read;
    if ((c.tar_piece_bytes == 0) != c.tar_list_sha256.empty())
        return item.bad("tar_piece_bytes and tar_list_sha256 go together");
    return read;
}

}  // namespace

const recompressed_copy* recompressed_record::find(std::string_view original_sha256) const noexcept {
    for (const auto& c : copies)
        if (equal_hex(c.original_sha256, original_sha256)) return &c;
    return nullptr;
}

std::string recompressed_document_name(std::string_view label) {
    return "recompressed_" + std::string(label) + ".json";
}

std::string recompressed_signature_name(std::string_view label) { return recompressed_document_name(label) + ".sig"; }

std::string recompressed_copy_path(std::string_view original) {
    for (const std::string_view suffix : {std::string_view(".tar.xz"), std::string_view(".txz")})
        if (ends_with_icase(original, suffix))
            return std::string(original.substr(0, original.size() - suffix.size())) + ".tar.zst";
    return {};
}

std::string recompressed_to_json(const recompressed_record& record) {
    const auto lower = [](std::string s) {
        for (auto& ch : s)
            if (ch >= 'A' && ch <= 'F') ch = static_cast<char>(ch - 'A' + 'a');
        return s;
    };
    json_writer w(2);
    w.begin_object();
    w.field("format", kRecompressedFormat);
    w.field("release_label", record.release_label);
    w.field("manifest_sha256", lower(record.manifest_sha256));
    w.key("copies").begin_array();
    for (const auto& c : record.copies) {
        w.begin_object();
        w.field("original_sha256", lower(c.original_sha256));
        w.field("original_size", std::to_string(c.original_size));
        w.field("relative_path", c.relative_path);
        w.field("compression", "zstd");
        w.field("sha256", lower(c.sha256));
        w.field("size", std::to_string(c.size));
        w.field("tar_sha256", lower(c.tar_sha256));
        w.field("tar_size", std::to_string(c.tar_size));
        if (c.tar_piece_bytes != 0) {
            w.field("tar_piece_bytes", std::to_string(c.tar_piece_bytes));
            w.field("tar_list_sha256", lower(c.tar_list_sha256));
        }
        if (!c.tree_sha256.empty()) w.field("tree_sha256", lower(c.tree_sha256));
        w.end_object();
    }
    w.end_array();
    w.end_object();
    return w.str() + "\n";
}

result<recompressed_record> parse_recompressed(std::string_view text, std::string_view source) {
    if (text.size() > kMaxRecompressedBytes)
        return make_error(error_code::bad_manifest, "recompressed-copy record larger than 4 MiB")
            .with_source(std::string(source));
    recompressed_record out;
    std::string format;
    std::unordered_set<std::string> originals;
    auto read = json::read_document(
        text, source, "recompressed-copy record",
        {{"format",
          [&](json::value& v) -> result<void> {
              REDIST_TRY_VOID(v.get(format));
              if (format != kRecompressedFormat)
                  return result<void>(v.bad("unsupported format '" + printable(format, 64) + "' (expected " +
                                            std::string(kRecompressedFormat) + ")"));
              return result<void>();
          },
          true},
         {"release_label",
          [&](json::value& v) -> result<void> { return v.get_name_or_empty(out.release_label, "release label"); },
          true},
         {"manifest_sha256", read_digest(out.manifest_sha256), true},
         {"copies",
          [&](json::value& v) -> result<void> {
              return v.for_each([&](json::value& item) -> result<void> {
                  recompressed_copy c;
                  REDIST_TRY_VOID(read_copy(item, c));
                  if (!originals.insert(c.original_sha256).second)
                      return result<void>(item.bad("a second copy of original " + c.original_sha256));
                  out.copies.push_back(std::move(c));
                  return result<void>();
              });
          },
          true}});
    if (!read.ok()) return std::move(read).error_value();
    return out;
}

result<void> check_recompressed_for(const recompressed_record& record, const manifest& m,
                                    std::string_view manifest_sha256, std::string_view source) {
    const auto bad = [&](const std::string& why, const std::string& path) {
        return result<void>(
            make_error(error_code::bad_manifest, why).with_source(std::string(source)).with_json_path(path));
    };
    if (!equal_hex(record.manifest_sha256, manifest_sha256))
        return bad("the record is for another manifest (SHA-256 " + record.manifest_sha256 + ", the manifest's " +
                       std::string(manifest_sha256) + ")",
                   "manifest_sha256");
    if (!record.release_label.empty() && !m.release_label.empty() && record.release_label != m.release_label)
        return bad("the record is for release '" + record.release_label + "', the manifest's is '" + m.release_label +
                       "'",
                   "release_label");
    for (std::size_t i = 0; i < record.copies.size(); ++i) {
        const recompressed_copy& c = record.copies[i];
        const std::string at = "copies[" + std::to_string(i) + "]";
        const artifact* original = nullptr;
        for (const auto& comp : m.components)
            for (const auto& a : comp.artifacts)
                if (!original && equal_hex(a.sha256, c.original_sha256)) original = &a;
        if (!original) return bad("no artifact of the manifest has this SHA-256", at + ".original_sha256");
        if (original->size != c.original_size)
            return bad("the manifest's size of this original is " + std::to_string(original->size),
                       at + ".original_size");
        const std::string expected = recompressed_copy_path(original->relative_path);
        if (expected.empty()) return bad("the original is not a .tar.xz/.txz archive", at + ".original_sha256");
        if (c.relative_path != expected)
            return bad("expected '" + printable(expected) + "' (the original's path as .tar.zst)",
                       at + ".relative_path");
    }
    return {};
}

}  // namespace redist
