// redist/cache.hpp — the content-addressed download cache.
//
// Layout (all under the cache root):
//   blobs/sha256/<hex>          verified archives, named by their SHA-256
//   blobs/sha256/<hex>.part     an interrupted download; the next process resumes it
//   locks/<hex>.lock            per-blob flock: single flight across processes
//   documents/<sha256(url)>     manifests and indexes last fetched from a URL (for --offline)
//   trees/<hex>/                the extracted tree of a verified archive, laid out as
//                               installed (for fast re-installs into new prefixes)
//   trees/<hex>.json            its file list: path, type, size, sha256/target, mode, mtime
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
#include "redist/install.hpp"

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

// How a cached tree is put into a stage (--link-mode):
//   reflink   copy-on-write clone (btrfs, XFS): instant and fully independent
//   hardlink  instant, but every prefix installed this way shares inodes with
//             the cache and with each other: an in-place edit in one changes
//             them all (the cache notices by size and mtime, and rebuilds the
//             tree from the archive; the other prefixes' `redist verify` fails)
//   copy      a real copy (copy_file_range, in the kernel): independent, costs the I/O
//   auto      reflink where the filesystem can, else copy (the default: every
//             prefix is independent of the others)
// The tree itself is recorded by hard links to the stage of a cold install,
// so building it costs no copy; an edit in that first prefix is detected the
// same way.
enum class link_mode : std::uint8_t { auto_select, reflink, hardlink, copy };
result<link_mode> parse_link_mode(std::string_view text);

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

    // Removes blobs (and partials), and their extracted trees, not used for
    // `older_than`; zero removes everything. Returns the number of bytes freed. Blobs locked by another
    // process are skipped.
    result<std::uint64_t> prune(std::chrono::seconds older_than) const;

    // Records a committed-ready stage as the tree of blob `sha256`, by hard
    // links (no copy). Best effort: on another filesystem it does nothing.
    void store_tree(const std::string& sha256, const std::filesystem::path& stage,
                    const std::vector<installed_file>& files) const noexcept;

    // Fills `stage` from the tree of blob `sha256`. Returns nullopt (and
    // drops the tree) when it is missing or no longer matches its file list
    // (size, mtime, symlink target), so the caller falls back to the archive.
    result<std::optional<std::vector<installed_file>>> materialize_tree(const std::string& sha256,
                                                                        const std::filesystem::path& stage,
                                                                        link_mode mode) const;

    // Documents (manifests, indexes) by URL, for --offline.
    void store_document(const std::string& url, const std::string& body) const noexcept;
    std::optional<std::string> load_document(const std::string& url) const;

private:
    // Removes trees/<hex>/; returns the bytes of its files (shared with
    // hardlinked prefixes, so not all of them are freed on disk).
    std::uint64_t remove_tree(const std::string& sha256) const;

    std::filesystem::path root_;
};

}  // namespace redist
