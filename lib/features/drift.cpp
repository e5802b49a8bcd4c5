// drift.cpp — the per-URL history of what upstream served, in the cache.
#include "redist/drift.hpp"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <simdjson.h>

#include "archive/sha256.hpp"
#include "features/url_history.hpp"
#include "model/manifest.hpp"
#include "redist/json_writer.hpp"
#include "redist/manifest.hpp"
#include "support/file_lock.hpp"
#include "support/posix_file.hpp"
#include "support/timestamp.hpp"

namespace redist {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxUrlBytes = 8192;
constexpr std::size_t kMaxTimestampBytes = 64;

// Reads at most `limit` bytes of a regular file, without following a
// symlink at the final component. nullopt when it does not exist.
result<std::optional<std::string>> read_limited(const fs::path& path, std::size_t limit) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return std::optional<std::string>{};
    REDIST_TRY(std::string body, read_file(path, limit, follow_links::no, error_code::bad_manifest));
    return std::optional<std::string>(std::move(body));
}

bool plausible_timestamp(std::string_view s) {
    if (s.empty() || s.size() > kMaxTimestampBytes) return false;
    for (unsigned char c : s)
        if (!(std::isdigit(c) || c == '-' || c == ':' || c == 'T' || c == 'Z' || c == '.' || c == '+')) return false;
    return true;
}

}  // namespace

result<url_history> parse_url_history(std::string_view json, std::string_view source) {
    auto fail = [&](const std::string& path, const std::string& what) {
        return make_error(error_code::bad_manifest, what).with_source(std::string(source)).with_json_path(path);
    };
    if (json.size() > kMaxHistoryBytes)
        return fail("", "history file larger than " + std::to_string(kMaxHistoryBytes) + " bytes");
    // The DOM parser validates the whole document (structure, UTF-8, every
    // literal) before anything is read from it.
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    if (auto err = parser.parse(json.data(), json.size()).get(root))
        return fail("", std::string("history file is not JSON: ") + simdjson::error_message(err));
    simdjson::dom::object obj;
    if (root.get_object().get(obj)) return fail("", "history file is not a JSON object");
    std::uint64_t version = 0;
    if (obj["history_version"].get_uint64().get(version) || version != 1)
        return fail("history_version", "missing or unsupported history_version (expected 1)");
    url_history h;
    std::string_view s;
    if (obj["url"].get_string().get(s)) return fail("url", "expected a string");
    if (s.empty() || s.size() > kMaxUrlBytes) return fail("url", "empty or too long");
    h.url = std::string(s);
    simdjson::dom::array seen;
    if (obj["seen"].get_array().get(seen)) return fail("seen", "expected an array");
    if (seen.size() > kMaxHistoryEntries)
        return fail("seen", "more than " + std::to_string(kMaxHistoryEntries) + " entries");
    std::size_t index = 0;
    for (auto item : seen) {
        const std::string path = "seen[" + std::to_string(index++) + "]";
        simdjson::dom::object e;
        if (item.get_object().get(e)) return fail(path, "expected an object");
        seen_entry entry;
        if (e["sha256"].get_string().get(s) || !is_sha256_hex(s)) return fail(path + ".sha256", "not a SHA-256");
        entry.sha256 = std::string(s);
        if (e["size"].get_uint64().get(entry.size)) return fail(path + ".size", "expected an unsigned integer");
        if (e["first_seen"].get_string().get(s) || !plausible_timestamp(s))
            return fail(path + ".first_seen", "expected an ISO 8601 timestamp");
        entry.first_seen = std::string(s);
        if (e["last_seen"].get_string().get(s) || !plausible_timestamp(s))
            return fail(path + ".last_seen", "expected an ISO 8601 timestamp");
        entry.last_seen = std::string(s);
        h.seen.push_back(std::move(entry));
    }
    return h;
}

std::string url_history_to_json(const url_history& history) {
    json_writer w(2);
    w.begin_object();
    w.field("history_version", 1);
    w.field("url", history.url);
    w.key("seen").begin_array();
    for (const auto& e : history.seen) {
        w.begin_object().field("sha256", e.sha256).field("size", e.size);
        w.field("first_seen", e.first_seen).field("last_seen", e.last_seen).end_object();
    }
    w.end_array().end_object();
    return w.str() + "\n";
}

// A history is kept per URL without its credentials (sanitize_url): the
// cache is a record, and a record never holds a password or a token, in the
// file or in its name.
fs::path drift_store::url_file(std::string_view url) const {
    return cache_.history_urls_dir() / (sha256_hex(sanitize_url(url)) + ".json");
}

result<std::optional<url_history>> drift_store::load(std::string_view url) const {
    const fs::path path = url_file(url);
    REDIST_TRY(auto text, read_limited(path, kMaxHistoryBytes));
    if (!text) return std::optional<url_history>{};
    REDIST_TRY(auto h, parse_url_history(*text, path.string()));
    // A file that names another URL (a hash collision, or a file copied in)
    // is not this URL's history.
    if (h.url != sanitize_url(url))
        return make_error(error_code::bad_manifest, "history file belongs to another URL").with_path(path.string());
    return std::optional<url_history>(std::move(h));
}

result<drift_check> drift_store::check(std::string_view url, std::string_view sha256) const {
    drift_check out;
    auto h = load(url);
    if (!h.ok()) {
        if (h.error_value().code != error_code::bad_manifest) return std::move(h).error_value();
        out.corrupt_history = true;
        out.first_time = true;
        return out;
    }
    if (!*h || (*h)->seen.empty()) {
        out.first_time = true;
        return out;
    }
    const seen_entry& last = (*h)->seen.back();
    if (last.sha256 != sha256) {
        out.changed = true;
        out.previous = last;
    }
    return out;
}

result<void> drift_store::record(std::string_view url, std::string_view sha256, std::uint64_t size,
                                 std::string_view now) const {
    const std::string when = now.empty() ? utc_now_iso8601() : std::string(now);
    const fs::path path = url_file(url);
    const fs::path lock_path = path.string().substr(0, path.string().size() - 5) + ".lock";
    REDIST_TRY(const unique_fd lock, lock_file(lock_path, lock_mode::exclusive, lock_wait::block));

    url_history h;
    h.url = sanitize_url(url);
    if (auto old = load(url); old.ok() && *old) h = std::move(**old);  // corrupt or missing: start over
    if (!h.seen.empty() && h.seen.back().sha256 == sha256 && h.seen.back().size == size) {
        h.seen.back().last_seen = when;
    } else {
        h.seen.push_back({std::string(sha256), size, when, when});
        if (h.seen.size() > kMaxHistoryEntries)
            h.seen.erase(h.seen.begin(), h.seen.end() - static_cast<std::ptrdiff_t>(kMaxHistoryEntries));
    }
    // Readers see the old or the new file, never half; a crash may lose the
    // newest entry, which only means it is recorded again next time.
    return atomic_write(path, url_history_to_json(h), durability::contents);
}

result<void> drift_store::record_manifest(std::string_view url, std::string_view body, std::string_view now) const {
    // Whatever a URL served is kept only if it is what it claimed to be.
    if (auto parsed = parse_manifest(body, sanitize_url(std::string(url))); !parsed.ok())
        return std::move(parsed).error_value();
    const std::string sha256 = sha256_hex(body);
    if (body.size() <= kMaxKeptDocumentBytes) {
        const fs::path path = cache_.history_documents_dir() / sha256;
        struct stat st {};
        if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
            REDIST_TRY_VOID(atomic_write(path, body, durability::contents));
    }
    return record(url, sha256, body.size(), now);
}

std::optional<std::string> drift_store::load_document(std::string_view sha256) const {
    if (!is_sha256_hex(sha256)) return std::nullopt;
    auto text = read_limited(cache_.history_documents_dir() / std::string(sha256), kMaxKeptDocumentBytes);
    if (!text.ok() || !*text || sha256_hex(**text) != sha256) return std::nullopt;
    return std::move(**text);
}

}  // namespace redist
