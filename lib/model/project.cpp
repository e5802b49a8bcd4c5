// project.cpp — redist.toml: parsing (toml++) and strict validation.
//
// toml++ is used without exceptions (TOML_EXCEPTIONS 0): parse() returns a
// parse_result holding the table or the error with its source position. It
// is header-only here and included in this file only, so the setting cannot
// differ between translation units.
//
// Two defects of toml++ 3.3, both found by tests/fuzz/project_fuzz.cpp, are
// kept away from it by a pre-scan (precheck()):
//  - a table header that does not start with a key ("[(x]", "[]") fails
//    TOML_ASSERT_ASSUME in parse_key(): abort() without NDEBUG, an unchecked
//    assumption (undefined behaviour) with clang and NDEBUG. Its assertions
//    are also compiled out here, so its parser reports the error normally;
//  - is_non_ascii_horizontal_whitespace() reaches __builtin_unreachable()
//    for many non-ASCII characters (U+00E9 among them) wherever the parser
//    checks for whitespace, which on invalid input can be almost anywhere.
//    toml++ is therefore given ASCII only (to_ascii()): UTF-8 in a comment
//    becomes '?', in a string a \uXXXX escape (decoded without that check,
//    so the value is the same; a 'literal string' is given as the "basic
//    string" of the same value); anywhere else (a bare key) it is refused,
//    as is invalid UTF-8. to_ascii() follows TOML's strings and comments;
//    where it and toml++ might disagree (invalid input), toml++ still sees
//    ASCII only.
#define TOML_EXCEPTIONS 0
#define TOML_ASSERT(expr) static_assert(true)
#include "redist/project.hpp"

#include <toml++/toml.h>

#include "model/project.hpp"
#include "model/urls.hpp"
#include "redist/platform.hpp"
#include "redist/printable.hpp"
#include "redist/urls.hpp"
#include "support/posix_file.hpp"
#include "support/printable.hpp"
#include "support/safe_path.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace redist {

namespace {

namespace fs = std::filesystem;

struct validator {
    std::string source;

    error fail(const toml::source_region& where, const std::string& key, const std::string& what) const {
        // "redist.toml:5:11: products.cuda.version: expected a string" once described.
        return make_error(error_code::bad_manifest, what)
            .with_source(source + ":" + std::to_string(where.begin.line) + ":" + std::to_string(where.begin.column))
            .with_json_path(key);
    }

    result<std::string> string(const toml::node& n, const std::string& key, bool allow_empty = false) const {
        const auto* s = n.as_string();
        if (!s) return fail(n.source(), key, "expected a string");
        if (!allow_empty && s->get().empty()) return fail(n.source(), key, "must not be empty");
        return s->get();
    }

    // An array of non-empty, distinct strings.
    result<std::vector<std::string>> strings(const toml::node& n, const std::string& key) const {
        const auto* arr = n.as_array();
        if (!arr) return fail(n.source(), key, "expected an array of strings");
        std::vector<std::string> out;
        std::set<std::string> seen;
        for (std::size_t i = 0; i < arr->size(); ++i) {
            const std::string item_key = key + "[" + std::to_string(i) + "]";
            REDIST_TRY(std::string s, string(*arr->get(i), item_key));
            if (!seen.insert(s).second) return fail(arr->get(i)->source(), item_key, "duplicate value '" + s + "'");
            out.push_back(std::move(s));
        }
        return out;
    }
};

bool is_name(std::string_view s) {
    return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](unsigned char c) {
        return std::islower(c) || std::isdigit(c) || c == '_' || c == '-';
    });
}

result<std::optional<int>> parse_cuda(const validator& v, const toml::node& n, const std::string& key) {
    std::string text;
    if (const auto* i = n.as_integer()) {
        text = std::to_string(i->get());
    } else if (const auto* s = n.as_string()) {
        text = s->get();
    } else {
        return v.fail(n.source(), key, "expected a CUDA major version like \"12\"");
    }
    if (text.empty() || text.size() > 2 ||
        !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); }) || text == "0" ||
        text == "00")
        return v.fail(n.source(), key, "expected a CUDA major version like \"12\", not '" + text + "'");
    return std::optional<int>(std::stoi(text));
}

// A base-url or mirror from the file: an http(s):// URL as written, or a
// local directory (a path, relative to the file's directory, or a file://
// URL) inside the project's directory, returned as a file:// URL. A cloned
// project must not point redist at /etc: local sources elsewhere are the
// user's to name, with --mirror or --base-url.
result<std::string> project_source(const validator& v, const toml::node& n, const std::string& key,
                                   const fs::path& dir) {
    REDIST_TRY(std::string text, v.string(n, key));
    if (text.find('\0') != std::string::npos) return v.fail(n.source(), key, "contains a NUL byte");
    const auto layout = oci_layout_dir(text);  // oci-layout:DIR, DIR relative to the file's directory
    const std::string url = layout            ? oci_layout_url((dir / *layout).string())
                            : names_url(text) ? text
                                              : to_url((dir / text).string());
    if (layout) {
        const fs::path root = fs::absolute(dir.empty() ? fs::path(".") : dir).lexically_normal();
        if (auto why = source_url_problem(url, {root})) return v.fail(n.source(), key, *why);
        return url;
    }
    if (source_kind_of(url) != source_kind::file) {
        if (auto why = source_url_problem(url, {})) return v.fail(n.source(), key, *why);
        return url;
    }
    std::string path;
    if (auto why = file_url_to_path(url, path)) return v.fail(n.source(), key, *why);
    const fs::path root = fs::absolute(dir.empty() ? fs::path(".") : dir).lexically_normal();
    const fs::path local = fs::path(path).lexically_normal();
    if (local != root && !is_strictly_under(root, local))
        return v.fail(n.source(), key,
                      "a local directory outside the project's directory (name it with --mirror or --base-url)");
    return to_url(local.string());
}

result<void> parse_project_table(const validator& v, const toml::table& t, project_file& out, bool& has_prefix) {
    for (auto&& [key, node] : t) {
        const std::string k(key.str());
        const std::string full = "project." + k;
        if (k == "prefix") {
            REDIST_TRY(std::string p, v.string(node, full));
            if (p.find('\0') != std::string::npos) return v.fail(node.source(), full, "contains a NUL byte");
            fs::path prefix(p);
            out.prefix = prefix.is_absolute() ? prefix : (out.path.parent_path() / prefix).lexically_normal();
            has_prefix = true;
        } else if (k == "platforms") {
            REDIST_TRY(out.platforms, v.strings(node, full));
            if (out.platforms.empty()) return v.fail(node.source(), full, "list at least one platform");
            for (std::size_t i = 0; i < out.platforms.size(); ++i)
                if (auto problem = platform_problem(out.platforms[i]))
                    return v.fail(node.as_array()->get(i)->source(), full + "[" + std::to_string(i) + "]", *problem);
        } else if (k == "cuda") {
            REDIST_TRY(out.cuda, parse_cuda(v, node, full));
        } else if (k == "base-url") {
            REDIST_TRY(out.base_url, project_source(v, node, full, out.path.parent_path()));
        } else if (k == "mirrors") {
            REDIST_TRY(out.mirrors, v.strings(node, full));
            for (std::size_t i = 0; i < out.mirrors.size(); ++i) {
                REDIST_TRY(out.mirrors[i],
                           project_source(v, *node.as_array()->get(i), full + "[" + std::to_string(i) + "]",
                                          out.path.parent_path()));
            }
        } else if (k == "trusted-keys") {
            REDIST_TRY(const auto keys, v.strings(node, full));
            const fs::path root = fs::absolute(out.path.parent_path().empty() ? fs::path(".") : out.path.parent_path())
                                      .lexically_normal();
            for (std::size_t i = 0; i < keys.size(); ++i) {
                const fs::path file = (root / keys[i]).lexically_normal();
                // As for local sources: a cloned project names files of its own, never /etc/...
                if (keys[i].find('\0') != std::string::npos || !is_strictly_under(root, file))
                    return v.fail(node.as_array()->get(i)->source(), full + "[" + std::to_string(i) + "]",
                                  "a key file inside the project's directory (name others with --trusted-key)");
                out.trusted_keys.push_back(file);
            }
        } else if (k == "exclude") {
            REDIST_TRY(out.exclude, v.strings(node, full));
            for (std::size_t i = 0; i < out.exclude.size(); ++i) {
                const auto& g = out.exclude[i];
                if (g.front() == '/' || g.find("..") != std::string::npos)
                    return v.fail(node.as_array()->get(i)->source(), full + "[" + std::to_string(i) + "]",
                                  "patterns are relative to the prefix: no leading '/' and no '..'");
            }
        } else {
            return v.fail(key.source(), full,
                          "unknown key (known: prefix, platforms, cuda, base-url, mirrors, trusted-keys, exclude)");
        }
    }
    return {};
}

result<project_product> parse_product(const validator& v, const std::string& name, const toml::node& node) {
    const std::string base = "products." + name;
    const auto* t = node.as_table();
    if (!t) return v.fail(node.source(), base, "expected a table ([" + base + "])");
    if (!is_name(name)) return v.fail(node.source(), base, "a product name is lower-case letters, digits, '_' or '-'");
    project_product p;
    p.name = name;
    p.line = t->source().begin.line;
    bool has_version = false;
    for (auto&& [key, value] : *t) {
        const std::string k(key.str());
        const std::string full = base + "." + k;
        if (k == "version") {
            REDIST_TRY(p.version, v.string(value, full));
            has_version = true;
        } else if (k == "components") {
            REDIST_TRY(p.components, v.strings(value, full));
            if (p.components.empty())
                return v.fail(value.source(), full, "list at least one component, or leave the key out for all");
        } else if (k == "cuda") {
            REDIST_TRY(p.cuda, parse_cuda(v, value, full));
        } else if (k == "deps") {
            const auto* b = value.as_boolean();
            if (!b) return v.fail(value.source(), full, "expected true or false");
            p.deps = b->get();
        } else {
            return v.fail(key.source(), full, "unknown key (known: version, components, cuda, deps)");
        }
    }
    if (!has_version) return v.fail(t->source(), base + ".version", "missing (a version like \"12.9\" or \"latest\")");
    return p;
}

// The code point of the valid UTF-8 sequence of `len` bytes at `s`.
char32_t code_point(std::string_view s, std::size_t len) {
    if (len == 1) return static_cast<unsigned char>(s[0]);
    const unsigned lead_bits = len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07;
    char32_t cp = static_cast<unsigned char>(s[0]) & lead_bits;
    for (std::size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
    return cp;
}

enum class lex_state : std::uint8_t { normal, comment, basic, ml_basic, literal, ml_literal };

struct transition {
    lex_state next;
    std::size_t taken;  // bytes of the delimiter, copied as they are; 0: none here
};

// Whether the text at `rest` (in `state`) starts or ends a string or a comment.
transition next_state(lex_state state, std::string_view rest) {
    const char c = rest.front();
    switch (state) {
        case lex_state::normal:
            if (c == '#') return {lex_state::comment, 1};
            if (rest.starts_with(R"(""")")) return {lex_state::ml_basic, 3};
            if (rest.starts_with("'''")) return {lex_state::ml_literal, 3};
            if (c == '"') return {lex_state::basic, 1};
            if (c == '\'') return {lex_state::literal, 1};
            break;
        case lex_state::comment:
            if (c == '\n') return {lex_state::normal, 1};
            break;
        case lex_state::basic:
        case lex_state::literal:
            if (c == '\n' || c == (state == lex_state::basic ? '"' : '\'')) return {lex_state::normal, 1};
            break;
        case lex_state::ml_basic:
            if (rest.starts_with(R"(""")")) return {lex_state::normal, 3};
            break;
        case lex_state::ml_literal:
            if (rest.starts_with("'''")) return {lex_state::normal, 3};
            break;
    }
    return {state, 0};
}

bool in_literal(lex_state state) { return state == lex_state::literal || state == lex_state::ml_literal; }

// One ASCII byte or delimiter (`bytes`, left in state `state` for `next`) as
// toml++ is given it: a 'literal string' becomes the "basic string" of the
// same value (its quotes become double quotes; '\' and '"' in it escaped),
// so that UTF-8 in it can be written as an escape as in any basic string.
void put_ascii(std::string& out, lex_state state, lex_state next, std::string_view bytes) {
    const bool opens = state == lex_state::normal && in_literal(next);
    const bool closes = in_literal(state) && next == lex_state::normal && bytes.front() == '\'';
    if (opens || closes) {
        out.append(bytes.size(), '"');
    } else if (in_literal(state) && (bytes.front() == '\\' || bytes.front() == '"')) {
        out += '\\';
        out += bytes.front();
    } else {
        out.append(bytes);
    }
}

// The text as toml++ may see it (see the top of this file), or the 1-based
// line of the first character that cannot be given to it and why.
struct ascii_text {
    std::string text;
    std::size_t bad_line = 0;
    const char* what = nullptr;
};

ascii_text to_ascii(std::string_view in) {
    ascii_text out;
    out.text.reserve(in.size());
    lex_state state = lex_state::normal;
    std::size_t line = 1;
    for (std::size_t i = 0; i < in.size();) {
        const std::string_view rest = in.substr(i);
        if (static_cast<unsigned char>(rest.front()) < 0x80) {
            line += rest.front() == '\n';
            transition t = next_state(state, rest);
            if (rest.front() == '\\' && (state == lex_state::basic || state == lex_state::ml_basic)) {
                // An escape is copied whole (\" does not end the string). It
                // must escape ASCII: a backslash before a \uXXXX made here
                // would turn an invalid escape into a valid "\\".
                if (rest.size() > 1 && static_cast<unsigned char>(rest[1]) >= 0x80)
                    return {{}, line, "a backslash before a non-ASCII character is not an escape"};
                t = {state, rest.size() > 1 && rest[1] != '\n' ? 2u : 1u};
            }
            const std::size_t n = std::max<std::size_t>(t.taken, 1);
            put_ascii(out.text, state, t.next, rest.substr(0, n));
            state = t.next;
            i += n;
            continue;
        }
        const std::size_t len = utf8_sequence_length(rest);
        if (len == 0) return {{}, line, "invalid UTF-8"};
        if (state == lex_state::comment) {
            out.text += '?';
        } else if (state != lex_state::normal) {
            char escape[16];
            const auto cp = static_cast<unsigned long>(code_point(rest, len));
            std::snprintf(escape, sizeof escape, cp > 0xFFFF ? "\\U%08lX" : "\\u%04lX", cp);
            out.text += escape;
        } else {
            return {{}, line, "non-ASCII character outside a string or a comment"};
        }
        i += len;
    }
    return out;
}

// Returns the 1-based line of the first input toml++ 3.3 must not see (see
// the top of this file) and what is wrong, or line 0. Deliberately not a
// TOML lexer: on invalid input toml++ and any approximation of it disagree
// about what is inside a string, so the rules hold for every line.
std::pair<std::size_t, const char*> precheck(std::string_view text) {
    std::size_t line = 1;
    for (std::size_t pos = 0; pos <= text.size(); ++line) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        const std::string_view l = text.substr(pos, end - pos);
        pos = end + 1;
        std::size_t i = l.find_first_not_of(" \t");
        if (i == std::string_view::npos || l[i] != '[') continue;
        ++i;
        if (i < l.size() && l[i] == '[') ++i;
        while (i < l.size() && (l[i] == ' ' || l[i] == '\t')) ++i;
        const unsigned char k = i < l.size() ? static_cast<unsigned char>(l[i]) : 0;
        // In a project file a line starting with '[' is a table header (no
        // field takes nested arrays), and a header starts with a key.
        if (!(std::isalnum(k) || k == '_' || k == '-' || k == '"' || k == '\''))
            return {line, "a table header must start with a key, like [products.cuda]"};
    }
    return {0, nullptr};
}

// The TOML text as a table, through the guards at the top of this file.
// Outcomes: ok | bad_manifest (source = "<path>[:<line>[:<column>]]").
result<toml::table> parse_toml(std::string_view text, const validator& v) {
    if (text.size() > kMaxProjectFileBytes)
        return make_error(error_code::bad_manifest, "larger than " + std::to_string(kMaxProjectFileBytes) + " bytes")
            .with_source(v.source);
    const ascii_text ascii = to_ascii(text);
    if (ascii.bad_line)
        return make_error(error_code::bad_manifest, ascii.what)
            .with_source(v.source + ":" + std::to_string(ascii.bad_line));
    if (const auto [bad_line, what] = precheck(ascii.text); bad_line)
        return make_error(error_code::bad_manifest, what).with_source(v.source + ":" + std::to_string(bad_line));
    toml::parse_result parsed = toml::parse(ascii.text, v.source);
    if (!parsed) {
        const auto& err = parsed.error();
        return v.fail(err.source(), "", std::string(err.description()));
    }
    return std::move(parsed).table();
}

// A config file's path value: absolute as written, else from `dir`.
result<fs::path> config_path(const validator& v, const toml::node& n, const std::string& key, const fs::path& dir) {
    REDIST_TRY(const std::string text, v.string(n, key));
    if (text.find('\0') != std::string::npos) return v.fail(n.source(), key, "contains a NUL byte");
    const fs::path p(text);
    return (p.is_absolute() ? p : dir / p).lexically_normal();
}

// A config file's source: a URL as written (http(s)://, file://, oci://,
// oci-layout:), or a local directory as a file:// URL.
result<std::string> config_source(const validator& v, const toml::node& n, const std::string& key,
                                  const fs::path& dir) {
    REDIST_TRY(const std::string text, v.string(n, key));
    if (text.find('\0') != std::string::npos) return v.fail(n.source(), key, "contains a NUL byte");
    if (names_url(text)) return text;
    const fs::path p(text);
    return to_url((p.is_absolute() ? p : dir / p).lexically_normal().string());
}

}  // namespace

fs::path user_config_path() {
    if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg == '/')
        return fs::path(xdg) / "redist" / "config.toml";
    if (const char* home = std::getenv("HOME"); home && *home == '/')
        return fs::path(home) / ".config" / "redist" / "config.toml";
    return {};
}

result<user_config> parse_user_config(std::string_view text, const fs::path& path) {
    const validator v{path.string()};
    REDIST_TRY(const toml::table root, parse_toml(text, v));
    user_config out;
    out.path = path;
    const fs::path dir = fs::absolute(path.parent_path().empty() ? fs::path(".") : path.parent_path());
    for (auto&& [key, node] : root) {
        const std::string k(key.str());
        if (k == "base-url") {
            REDIST_TRY(out.base_url, config_source(v, node, k, dir));
        } else if (k == "mirrors") {
            REDIST_TRY(const auto items, v.strings(node, k));
            for (std::size_t i = 0; i < items.size(); ++i) {
                REDIST_TRY(auto url,
                           config_source(v, *node.as_array()->get(i), k + "[" + std::to_string(i) + "]", dir));
                out.mirrors.push_back(std::move(url));
            }
        } else if (k == "cache-dir") {
            REDIST_TRY(out.cache_dir, config_path(v, node, k, dir));
        } else if (k == "retries") {
            const auto* n = node.as_integer();
            if (!n || n->get() < 1 || n->get() > 100)
                return v.fail(node.source(), k, "expected a number of attempts from 1 to 100");
            out.retries = static_cast<int>(n->get());
        } else if (k == "trusted-keys") {
            REDIST_TRY(const auto items, v.strings(node, k));
            for (std::size_t i = 0; i < items.size(); ++i) {
                REDIST_TRY(auto key_file,
                           config_path(v, *node.as_array()->get(i), k + "[" + std::to_string(i) + "]", dir));
                out.trusted_keys.push_back(std::move(key_file));
            }
        } else {
            return v.fail(key.source(), k, "unknown key (known: base-url, mirrors, cache-dir, retries, trusted-keys)");
        }
    }
    return out;
}

result<user_config> read_user_config(const fs::path& path) {
    std::error_code ec;
    if (path.empty() || !fs::exists(fs::symlink_status(path, ec))) return user_config{};
    REDIST_TRY(const std::string text, read_file(path, kMaxProjectFileBytes, follow_links::yes));
    return parse_user_config(text, path);
}

result<std::string> read_project_document(const fs::path& path, std::uint64_t max_bytes, const char* what) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path, ec)))
        return make_error(error_code::not_found, std::string("cannot open the ") + what).with_path(path.string());
    auto text = read_file(path, max_bytes, follow_links::yes);
    if (!text) {
        error e = text.error_value();
        e.message = std::string("cannot read the ") + what + ": " + e.message;
        return e;
    }
    return text;
}

result<project_file> parse_project(std::string_view text, const fs::path& path) {
    const validator v{path.string()};
    REDIST_TRY(const toml::table root, parse_toml(text, v));
    project_file out;
    out.path = path;
    bool has_project = false, has_prefix = false;
    toml::source_region project_where = root.source();
    for (auto&& [key, node] : root) {
        const std::string k(key.str());
        if (k == "project") {
            const auto* t = node.as_table();
            if (!t) return v.fail(node.source(), k, "expected a table ([project])");
            has_project = true;
            project_where = t->source();
            REDIST_TRY_VOID(parse_project_table(v, *t, out, has_prefix));
        } else if (k == "products") {
            const auto* t = node.as_table();
            if (!t) return v.fail(node.source(), k, "expected tables ([products.<name>])");
            for (auto&& [name, product] : *t) {
                REDIST_TRY(auto p, parse_product(v, std::string(name.str()), product));
                out.products.push_back(std::move(p));
            }
        } else {
            return v.fail(key.source(), k, "unknown table (known: [project], [products.<name>])");
        }
    }
    if (!has_project) return v.fail(root.source(), "project", "missing [project] table");
    if (!has_prefix) return v.fail(project_where, "project.prefix", "missing (where to install, e.g. \"nvidia\")");
    if (out.platforms.empty()) return v.fail(project_where, "project.platforms", "missing (e.g. [\"linux-x86_64\"])");
    if (out.products.empty()) return v.fail(root.source(), "products", "no [products.<name>] table");
    std::sort(out.products.begin(), out.products.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
}

std::string starter_project(const std::vector<std::string>& platforms) {
    std::string list;
    for (const auto& p : platforms) list += (list.empty() ? "\"" : ", \"") + p + "\"";
    return "# redist.toml: the NVIDIA libraries this project needs.\n"
           "# Check it with `redist init --check`; install the whole set with `redist sync` (one transaction;\n"
           "# it writes redist.lock beside this file, and `redist sync --locked` reinstalls exactly that).\n"
           "\n"
           "[project]\n"
           "# Where to install, relative to this file's directory and inside it. `redist sync` refuses a\n"
           "# prefix outside it (an absolute path, '..', a symlink leading out) unless it is given\n"
           "# --allow-outside-prefix (or --prefix DIR instead).\n"
           "prefix = \"nvidia\"\n"
           "# Platforms to resolve and lock: linux-x86_64, linux-sbsa, linux-aarch64 (Jetson),\n"
           "# windows-x86_64, ... `--platform` picks one of them at install time (default: this machine's).\n"
           "platforms = [" +
           list +
           "]\n"
           "# The CUDA major version (\"12\", \"13\"; a major only). It picks the variant of products that\n"
           "# ship one build per CUDA version (cuDNN, ...), and the release of the cuda product (\"latest\"\n"
           "# is the newest 12.x; a version of another major is an error). A product's table may set its\n"
           "# own. Leave it out to use the toolkit found here (CUDA_HOME, CUDA_PATH, /usr/local/cuda,\n"
           "# nvcc's directory on PATH; read from its version.json or include/cuda.h, never run), or else\n"
           "# the newest variant every chosen component offers.\n"
           "cuda = \"12\"\n"
           "# Where releases come from (default: NVIDIA's server); mirrors are tried first.\n"
           "# base-url = \"https://developer.download.nvidia.com/compute\"\n"
           "# mirrors = [\"https://mirror.example.com/compute\"]\n"
           "# Public keys whose signature makes a mirror's recompressed copies usable (docs/fleet.md).\n"
           "# trusted-keys = [\"keys/mirror.pub\"]\n"
           "# Archive entries not to install, relative to the prefix.\n"
           "# exclude = [\"lib/*_static*.a\"]\n"
           "\n"
           "# One table per product (the directory name upstream: cuda, cudnn, cutensor, nccl, ...).\n"
           "# version: exact (\"12.9.1\"), a prefix (\"12.9\", \"12\": the newest match) or \"latest\".\n"
           "# components: optional; every component when left out (`redist show PRODUCT VERSION` lists them).\n"
           "[products.cuda]\n"
           "version = \"12.9\"\n"
           "components = [\"cuda_nvcc\", \"cuda_cudart\", \"libcublas\"]\n"
           "\n"
           "[products.cudnn]\n"
           "version = \"9\"\n"
           "# With what it needs of the cuda product (cuda_cudart, libcublas, cuda_nvrtc; docs/Projects.md).\n"
           "# deps = true\n";
}

}  // namespace redist
