// redist/drift.hpp — drift watching: the cache remembers the SHA-256 of every
// manifest and artifact redist verified, per URL, with when it was first and
// last seen, and keeps each manifest's bytes so that a change can be diffed
// (see diff.hpp). Upstream has regenerated manifests, replaced archives in
// place and renamed components under its users; this is how redist notices.
//
// Layout under the cache root:
//   history/urls/<sha256 of the URL>.json   what one URL served, oldest first
//   history/urls/<sha256 of the URL>.lock   flock, held while it is updated
//   history/documents/<sha256>              the bytes of a manifest, by their SHA-256
//
// The history is part of the cache: it is reached only through a blob_cache
// that open() accepted (ours, or --shared-cache), under the same checks. It is
// advisory: every file in it is read as hostile input (size limit, every field
// validated, documents re-hashed before use), written through atomic_write,
// and a corrupt one is replaced rather than allowed to block an install.
// Only documents that parse as manifests are kept.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redist/cache.hpp"
#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

struct seen_entry {
    std::string sha256;      // 64 lower-case hex digits
    std::uint64_t size = 0;  // bytes
    std::string first_seen;  // ISO 8601 UTC
    std::string last_seen;
};

struct url_history {
    std::string url;
    std::vector<seen_entry> seen;  // oldest first; the last is what the URL served most recently
};

inline constexpr std::size_t kMaxHistoryBytes = 1u << 20;  // a history file larger than this is corrupt
inline constexpr std::size_t kMaxHistoryEntries = 64;      // older entries are dropped on write
inline constexpr std::size_t kMaxKeptDocumentBytes = 64u << 20;

struct drift_check {
    bool first_time = false;             // the URL was never recorded
    bool changed = false;                // it served other bytes last time
    std::optional<seen_entry> previous;  // what it served last time (set when changed)
    bool corrupt_history = false;        // the history file was unreadable and is treated as empty
};

class drift_store {
public:
    // The history of an opened cache: blob_cache::open created and checked
    // history/urls and history/documents with the cache's other directories
    // (owner, mode, no symlinks; shared: reached through their descriptors),
    // so nothing is read or written here before the cache is accepted.
    explicit drift_store(blob_cache cache) : cache_(std::move(cache)) {}

    // Compares what `url` serves now (its SHA-256) with what it served last
    // time. Reads only. Outcomes: ok | filesystem.
    result<drift_check> check(std::string_view url, std::string_view sha256) const;

    // Records that `url` served `sha256`/`size` at `now` (ISO 8601 UTC;
    // empty: the current time): a new entry, or last_seen of the latest one
    // when it matches. Atomic and serialized by a per-URL flock, so
    // concurrent writers never corrupt the file. For an artifact that an
    // install verified; a manifest goes through record_manifest.
    // Outcomes: ok | filesystem.
    result<void> record(std::string_view url, std::string_view sha256, std::uint64_t size,
                        std::string_view now = {}) const;

    // Records that `url` served the manifest `body`, and keeps its bytes
    // (unless larger than kMaxKeptDocumentBytes) so that a later change can
    // be diffed. Only a document that parses as a manifest is stored: the
    // history never holds bytes that are not one. Outcomes: ok |
    // bad_manifest (not a manifest; nothing was written) | filesystem.
    result<void> record_manifest(std::string_view url, std::string_view body, std::string_view now = {}) const;

    // The whole history of `url` (nullopt: never recorded).
    // Outcomes: ok | bad_manifest (corrupt history file) | filesystem.
    result<std::optional<url_history>> load(std::string_view url) const;

    // The bytes kept for `sha256`, re-hashed: nullopt when missing, too
    // large or no longer matching.
    std::optional<std::string> load_document(std::string_view sha256) const;

private:
    std::filesystem::path url_file(std::string_view url) const;
    blob_cache cache_;  // keeps the checked directories (and, shared, their descriptors)
};

REDIST_API_END
}  // namespace redist
