#include "redist/version.hpp"

#include <algorithm>
#include <cctype>
#include <cstddef>

#include "model/index_html.hpp"

namespace redist {

namespace {

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
bool is_alnum(char c) noexcept { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
char lower(char c) noexcept { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

std::vector<std::string_view> split_fields(std::string_view label) {
    std::vector<std::string_view> fields;
    std::size_t start = 0;
    for (;;) {
        const std::size_t dot = label.find('.', start);
        if (dot == std::string_view::npos) {
            fields.push_back(label.substr(start));
            return fields;
        }
        fields.push_back(label.substr(start, dot - start));
        start = dot + 1;
    }
}

// Compares two digit strings as unbounded non-negative integers (labels are
// untrusted text: "99999999999999999999" must not overflow anything).
int compare_digits(std::string_view a, std::string_view b) noexcept {
    while (a.size() > 1 && a.front() == '0') a.remove_prefix(1);
    while (b.size() > 1 && b.front() == '0') b.remove_prefix(1);
    if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
    const int c = a.compare(b);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
}

int compare_text(std::string_view a, std::string_view b) noexcept {
    const int c = a.compare(b);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
}

// One field. Purely numeric fields compare as numbers. A field that mixes
// digits and letters ("0rc1", "beta") compares by its leading number first
// and then lexically by the rest, so that the overall order stays transitive:
// a plain "lexical if either side is non-numeric" rule would make
// "9" < "10" (numeric), "10" < "1a" (lexical) and "1a" < "9" (lexical) a
// cycle, and std::sort on such a comparator is undefined behaviour.
// Fields with a leading number sort before fields without one.
int compare_field(std::string_view a, std::string_view b) noexcept {
    std::size_t da = 0;
    std::size_t db = 0;
    while (da < a.size() && is_digit(a[da])) ++da;
    while (db < b.size() && is_digit(b[db])) ++db;
    if ((da > 0) != (db > 0)) return da > 0 ? -1 : 1;
    if (da > 0) {
        if (const int c = compare_digits(a.substr(0, da), b.substr(0, db)); c != 0) return c;
    }
    return compare_text(a.substr(da), b.substr(db));
}

// Field equality used by spec matching: "06" matches "6", as in ordering.
bool field_matches(std::string_view spec_field, std::string_view label_field) noexcept {
    return compare_field(spec_field, label_field) == 0;
}

// Decodes %XX escapes. Invalid escapes are kept verbatim; a decoded label is
// validated afterwards anyway.
std::string percent_decode(std::string_view in) {
    auto hex = [](char c) -> int {
        if (is_digit(c)) return c - '0';
        c = lower(c);
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    std::string out;
    out.reserve(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '%' && i + 2 < in.size()) {
            const int hi = hex(in[i + 1]);
            const int lo = hex(in[i + 2]);
            if (hi >= 0 && lo >= 0) {
                out.push_back(static_cast<char>(hi * 16 + lo));
                i += 2;
                continue;
            }
        }
        out.push_back(in[i]);
    }
    return out;
}

// A label is what sits between "redistrib_" and ".json". Only characters
// seen in release labels are accepted, so that a link can never smuggle a
// path separator or a URL metacharacter into the URL built from the label.
bool valid_label(std::string_view label) noexcept {
    if (label.empty() || !is_alnum(label.front())) return false;
    return std::all_of(label.begin(), label.end(),
                       [](char c) { return is_alnum(c) || c == '.' || c == '-' || c == '_' || c == '+'; });
}

// If the href's last path segment is "redistrib_<label>.json", returns the label.
std::string label_from_href(std::string_view href) {
    // Drop the fragment and the query: they are not part of the path.
    if (const auto p = href.find('#'); p != std::string_view::npos) href = href.substr(0, p);
    if (const auto p = href.find('?'); p != std::string_view::npos) href = href.substr(0, p);
    const std::string path = percent_decode(href);
    const auto slash = path.find_last_of('/');
    const std::string_view segment = slash == std::string::npos ? std::string_view(path)
                                                                : std::string_view(path).substr(slash + 1);
    constexpr std::string_view prefix = "redistrib_";
    constexpr std::string_view suffix = ".json";
    if (segment.size() <= prefix.size() + suffix.size()) return {};
    if (segment.substr(0, prefix.size()) != prefix) return {};
    if (segment.substr(segment.size() - suffix.size()) != suffix) return {};
    const std::string_view label = segment.substr(prefix.size(), segment.size() - prefix.size() - suffix.size());
    return valid_label(label) ? std::string(label) : std::string();
}

bool iequals_prefix(std::string_view text, std::size_t pos, std::string_view word) noexcept {
    if (text.size() - pos < word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i)
        if (lower(text[pos + i]) != word[i]) return false;
    return true;
}

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

// Scans the attributes of one tag starting after its name; returns the value
// of its href attribute (if any) and advances `pos` past the closing '>'.
// Quoted values may contain '>' and whitespace, so attributes are tokenized
// rather than searched for.
std::string_view scan_tag_for_href(std::string_view html, std::size_t& pos) {
    std::string_view href;
    const std::size_t n = html.size();
    while (pos < n) {
        while (pos < n && (is_space(html[pos]) || html[pos] == '/')) ++pos;
        if (pos >= n) break;
        if (html[pos] == '>') {
            ++pos;
            break;
        }
        const std::size_t name_start = pos;
        while (pos < n && !is_space(html[pos]) && html[pos] != '=' && html[pos] != '>' && html[pos] != '/') ++pos;
        const std::string_view name = html.substr(name_start, pos - name_start);
        while (pos < n && is_space(html[pos])) ++pos;
        if (pos >= n || html[pos] != '=') continue;  // attribute without a value
        ++pos;
        while (pos < n && is_space(html[pos])) ++pos;
        std::string_view value;
        if (pos < n && (html[pos] == '"' || html[pos] == '\'')) {
            const char quote = html[pos++];
            const std::size_t end = html.find(quote, pos);
            const std::size_t stop = end == std::string_view::npos ? n : end;
            value = html.substr(pos, stop - pos);
            pos = end == std::string_view::npos ? n : end + 1;
        } else {
            const std::size_t start = pos;
            while (pos < n && !is_space(html[pos]) && html[pos] != '>') ++pos;
            value = html.substr(start, pos - start);
        }
        if (name.size() == 4 && iequals_prefix(name, 0, "href") && href.empty()) href = value;
    }
    return href;
}

// Newest first, each label once (compare_versions).
void sort_newest_first(std::vector<std::string>& labels) {
    std::sort(labels.begin(), labels.end(),
              [](const std::string& x, const std::string& y) { return compare_versions(x, y) > 0; });
    labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
}

}  // namespace

int compare_versions(std::string_view a, std::string_view b) noexcept {
    const auto fa = split_fields(a);
    const auto fb = split_fields(b);
    const std::size_t common = std::min(fa.size(), fb.size());
    for (std::size_t i = 0; i < common; ++i)
        if (const int c = compare_field(fa[i], fb[i]); c != 0) return c;
    if (fa.size() != fb.size()) return fa.size() < fb.size() ? -1 : 1;
    // Equal field by field but different text ("25.06" vs "25.6"): break the
    // tie on the bytes so that only identical labels compare equal and the
    // order (and hence de-duplication and "newest") is deterministic.
    return compare_text(a, b);
}

std::vector<std::string> parse_index_html(std::string_view html) {
    std::vector<std::string> labels;
    std::size_t pos = 0;
    const std::size_t n = html.size();
    while (pos < n) {
        const std::size_t lt = html.find('<', pos);
        if (lt == std::string_view::npos) break;
        pos = lt + 1;
        // Comments may hold stale or example links; skip them whole.
        if (html.substr(lt, 4) == "<!--") {
            const std::size_t end = html.find("-->", lt + 4);
            pos = end == std::string_view::npos ? n : end + 3;
            continue;
        }
        // Only anchors count: "<a" followed by whitespace (not "<abbr").
        if (pos < n && lower(html[pos]) == 'a' && pos + 1 < n && is_space(html[pos + 1])) {
            pos += 1;
            const std::string_view href = scan_tag_for_href(html, pos);
            if (!href.empty()) {
                std::string label = label_from_href(href);
                if (!label.empty()) labels.push_back(std::move(label));
            }
        }
    }
    sort_newest_first(labels);
    return labels;
}

result<std::string> resolve_version_spec(std::string_view spec, const std::vector<std::string>& labels) {
    std::vector<std::string> sorted = labels;
    sort_newest_first(sorted);

    auto available = [&]() {
        if (sorted.empty()) return std::string("none");
        constexpr std::size_t shown = 10;
        std::string list;
        for (std::size_t i = 0; i < sorted.size() && i < shown; ++i) list += (i > 0 ? ", " : "") + sorted[i];
        if (sorted.size() > shown) list += ", \u2026 (" + std::to_string(sorted.size() - shown) + " more)";
        return list;
    };

    if (spec.empty()) return make_error(error_code::usage, "empty version spec");
    if (spec == "latest") {
        if (sorted.empty()) return make_error(error_code::not_found, "no releases available");
        return sorted.front();
    }
    const auto spec_fields = split_fields(spec);
    for (const auto field : spec_fields) {
        if (field.empty()) {
            return make_error(error_code::usage, "malformed version spec '" + std::string(spec) +
                                                     "' (expected \"latest\" or fields like 9, 9.27, 9.27.0)");
        }
    }
    for (const auto& label : sorted)
        if (label == spec) return label;
    // `sorted` is newest first, so the first match is the newest.
    for (const auto& label : sorted) {
        const auto fields = split_fields(label);
        if (fields.size() < spec_fields.size()) continue;
        bool match = true;
        for (std::size_t i = 0; i < spec_fields.size() && match; ++i) match = field_matches(spec_fields[i], fields[i]);
        if (match) return label;
    }
    return make_error(error_code::not_found,
                      "no release matches '" + std::string(spec) + "' (available: " + available() + ")");
}

}  // namespace redist
