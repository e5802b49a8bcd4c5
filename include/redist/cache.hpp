// redist/cache.hpp — the content-addressed download cache.
//
// Layout (all under the cache root):
//   blobs/sha256/<hex>          verified archives, named by their SHA-256
//   blobs/sha256/<hex>.part     an interrupted download; the next process resumes it
//   locks/<hex>.lock            per-blob flock: single flight across processes
//   documents/<sha256(url)>     manifests and indexes last fetched from a URL (for --offline)
//
// Nothing unverified ever sits under a final name: a blob is renamed from
// .part only after its size and SHA-256 matched, and a blob that fails
// re-verification when used is deleted.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"

namespace redist {

// --cache-dir wins (passed as `explicit_dir`), then $REDIST_CACHE_DIR, then
// $XDG_CACHE_HOME/redist, then ~/.cache/redist.
std::filesystem::path default_cache_dir(const std::string& explicit_dir = {});

// Holds an exclusive flock on locks/<hex>.lock for its lifetime.
class blob_lock {
public:
    blob_lock() = default;
    blob_lock(blob_lock&&) noexcept;
    blob_lock& operator=(blob_lock&&) noexcept;
    ~blob_lock();

private:
    friend class blob_cache;
    int fd_ = -1;
};

struct cache_entry {
    std::string sha256;
    std::uint64_t size = 0;
    std::filesystem::file_time_type last_used;
    bool partial = false;
};

class blob_cache {
public:
    // Creates the directories. Outcomes: ok | filesystem.
    static result<blob_cache> open(const std::filesystem::path& root);

    const std::filesystem::path& root() const { return root_; }
    std::filesystem::path blob_path(const std::string& sha256) const;
    std::filesystem::path partial_path(const std::string& sha256) const;

    // Blocks until this process is the only one working on the blob.
    // on_wait is called once before blocking. Outcomes: ok | filesystem.
    result<blob_lock> lock_blob(const std::string& sha256, const std::function<void()>& on_wait = {}) const;

    // Moves a verified .part file to its final name (atomic rename).
    result<void> publish(const std::string& sha256) const;

    // Every blob and partial download. Outcomes: ok | filesystem.
    result<std::vector<cache_entry>> list() const;

    // Removes blobs (and partials) not used for `older_than`; zero removes
    // everything. Returns the number of bytes freed. Blobs locked by another
    // process are skipped.
    result<std::uint64_t> prune(std::chrono::seconds older_than) const;

    // Documents (manifests, indexes) by URL, for --offline.
    void store_document(const std::string& url, const std::string& body) const noexcept;
    std::optional<std::string> load_document(const std::string& url) const;

private:
    std::filesystem::path root_;
};

}  // namespace redist
