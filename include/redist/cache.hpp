// redist/cache.hpp — the content-addressed download cache.
//
// Layout (all under the cache root):
//   blobs/sha256/<hex>          verified archives, named by their SHA-256
//   blobs/sha256/<hex>.part     an interrupted download; the next process resumes it
//   locks/<hex>.lock            per-blob flock: single flight across processes
//   documents/<sha256(url)>     manifests and indexes last fetched from a URL (for --offline)
//   trees/<hex>/                the extracted tree of a verified archive, laid out as
//                               installed (for fast re-installs into new prefixes)
//   trees/<hex>/.redist-tree.json  its file list: path, type, size, sha256/target, mode,
//                               and the inode, mtime and ctime of each cached file
//   history/urls/, history/documents/  the drift history (drift.hpp), written only
//                               through a cache that open() accepted
//
// Nothing unverified ever sits under a final name: a blob is renamed from
// .part only after its size and SHA-256 matched, and a blob that fails
// re-verification when used is deleted.
//
// Trust. The cache is input like any download: redist often runs as root,
// and a cache directory that somebody else can write is a way to plant files
// in every prefix installed from it. So, by default, the cache is used only
// when it is ours: the root and blobs/, blobs/sha256/, trees/, documents/,
// locks/, history/, history/urls/ and history/documents/ must be directories
// (not symlinks) owned by the effective user and writable by nobody else.
// Then only we (or root) can create, rename or edit anything in it, and a
// cached tree is checked cheaply (its list is ours; each file's inode, size,
// mtime and ctime are as recorded, else re-hashed). A cache shared with other users is used
// only with `shared = true` (--shared-cache): the directories may then be
// anybody's, every file of a cached tree is re-hashed against its list (which
// must still be ours) when it is used, documents not written by us are
// ignored, and we never delete what others wrote. Every file is opened
// without following symlinks; new files are created with O_EXCL.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/prefix.hpp"

namespace redist {
REDIST_API_BEGIN

// --cache-dir wins (passed as `explicit_dir`), then $REDIST_CACHE_DIR, then
// $XDG_CACHE_HOME/redist, then $HOME/.cache/redist, then the passwd entry's
// home + /.cache/redist (HOME unset, as under some CI runners and sudo -i).
// Never a fixed shared path such as /tmp/redist-cache (another user could
// create it first): when no home is known, returns an empty path, and the
// caller runs without a cache or says why (blob_cache::open refuses it).
// Relative XDG_CACHE_HOME and HOME values are ignored (the XDG spec says so).
std::filesystem::path default_cache_dir(const std::string& explicit_dir = {});

// Holds an exclusive flock on locks/<hex>.lock for its lifetime.
class blob_lock {
private:
    friend class blob_cache;
    held_lock_fd fd_;
};

struct cache_entry {
    std::string sha256;
    std::uint64_t size = 0;        // of the archive (or of the partial download)
    std::uint64_t disk_bytes = 0;  // on disk, the archive and its extracted tree, as `du -s` counts them
    std::filesystem::file_time_type last_used;
    bool partial = false;
};

// How a cached tree is put into a stage (--link-mode):
//   reflink   copy-on-write clone (btrfs, XFS): instant and fully independent
//   hardlink  instant, but every prefix installed this way shares inodes with
//             the cache and with each other: an in-place edit in one changes
//             them all. Once a tree was hard-linked out, its ctime no longer
//             says anything, so it is checked by size and mtime only (an edit
//             that keeps both goes unnoticed: that is the price of asking
//             for hardlinks). With a shared cache, hardlink acts as auto.
//   copy      a real copy (copy_file_range, in the kernel, holes kept): independent, costs the I/O
//   auto      reflink where the filesystem can, else copy (the default: every
//             prefix is independent of the others)
// The tree itself is recorded on the first install whose archive is in the
// cache (the cold one included, so that a cache saved after one cold CI job
// serves the next job from its tree): by reflink where the filesystem can,
// else by hard links to the stage (no byte copied: the cold install stays at
// the decoder's pace), else by a copy (holes kept: another filesystem, where
// it costs a few percent of a cold install; a shared cache; a file the
// archive lets others write). Hard-linked, the first prefix shares those
// files with the tree: an edit there changes their ctime, which nobody can
// set back, and a tree file that is not as recorded is re-hashed before use.
enum class link_mode : std::uint8_t { auto_select, reflink, hardlink, copy };
result<link_mode> parse_link_mode(std::string_view text);

// A document the cache holds, and the URL (without credentials) that served it.
struct cached_document {
    std::string url;
    std::string body;
};

class blob_cache {
public:
    // Opens the cache, creating what is missing, and checks that it can be
    // trusted (see "Trust" above). Directories it creates are 0755 (shared:
    // as the umask says). Outcomes: ok | filesystem, where a refusal says
    // what is wrong and how to fix it (chown, chmod go-w, or --shared-cache),
    // in one line. An empty root is refused (no home directory is known).
    static result<blob_cache> open(const std::filesystem::path& root, bool shared = false);

    // Like open, for callers that treat a cache they cannot create as no
    // cache at all ("a broken cache must not break installs"): returns
    // nullopt when the directories cannot be created, and the error when the
    // cache exists but is refused as untrusted (that must not go unnoticed).
    static result<std::optional<blob_cache>> open_if_possible(const std::filesystem::path& root, bool shared);
    // The same for an optional root: no root (--no-cache) is no cache.
    static result<std::optional<blob_cache>> open_if_possible(const std::optional<std::filesystem::path>& root,
                                                              bool shared);

    bool shared() const { return shared_; }

    const std::filesystem::path& root() const { return root_; }
    std::filesystem::path blob_path(const std::string& sha256) const;
    std::filesystem::path partial_path(const std::string& sha256) const;
    // A regular file (not a symlink, FIFO, ...) under the blob's final name.
    // Its bytes are re-verified whenever it is used.
    bool has_blob(const std::string& sha256) const;
    // An extracted tree of the blob is there (its list a regular file): a
    // forecast for install()'s plan; materialize_tree() decides whether it is trusted.
    bool has_tree(const std::string& sha256) const;

    // Blocks until this process is the only one working on the blob.
    // on_wait is called once before blocking. Outcomes: ok | filesystem |
    // bad_manifest (`sha256` is not 64 hex digits: it becomes a file name).
    result<blob_lock> lock_blob(const std::string& sha256, const std::function<void()>& on_wait = {}) const;

    // Moves a verified .part file to its final name (atomic rename).
    result<void> publish(const std::string& sha256) const;

    // Every blob and partial download. Outcomes: ok | filesystem.
    result<std::vector<cache_entry>> list() const;

    // Removes blobs (and partials), and their extracted trees, not used for
    // `older_than`; zero removes everything. Returns the number of bytes freed. Blobs locked by another
    // process are skipped. Leftovers go first (remove_leftovers).
    result<std::uint64_t> prune(std::chrono::seconds older_than) const;

    // Removes what killed processes left, and only that: a tree being stored
    // (trees/<hex>.partial.*) whose blob lock is free (store_tree runs under
    // it), a tree being removed (trees/<hex>.stale.*), a drift history's
    // temp file (history/urls/<h>.json.tmp.*) whose URL lock is free, and
    // temp files without a lock (*.tmp.* in documents/ and
    // history/documents/) older than an hour, and run directories in
    // scratch/ that no live run holds. Nothing is followed through a
    // symlink (remove_tree_at); in a shared cache only our own files go.
    // Returns the bytes freed. prune and prune_to_size call it first.
    std::uint64_t remove_leftovers() const noexcept;

    // Least recently used first: removes blobs (with their trees) and partial
    // downloads until what stays (blobs, partials and trees) takes at most
    // `max_bytes`; leftovers (remove_leftovers), then orphaned trees go first. "Used" is the later of the blob's
    // mtime (touched when an install reads it) and the atime of its tree's
    // list (read when a tree is placed; relatime: at most daily). Blobs locked
    // by another process are skipped. Returns the number of bytes freed.
    // Outcomes: ok | filesystem.
    result<std::uint64_t> prune_to_size(std::uint64_t max_bytes) const;

    // Records a committed-ready stage as the tree of blob `sha256`: each file
    // by reflink, else a hard link to the stage, else a copy (holes kept; see
    // link_mode). Best effort: any failure leaves no tree behind.
    void store_tree(const std::string& sha256, const std::filesystem::path& stage,
                    const std::vector<installed_file>& files) const noexcept;

    // Fills `stage` from the tree of blob `sha256`. Returns nullopt when the
    // tree is missing or cannot be trusted, so the caller falls back to the
    // archive: its list is not ours (owner, mode, links), does not parse,
    // names a path or symlink target that leaves the tree, or a file does
    // not match it. A file whose inode, mtime and ctime are as recorded is
    // taken on its size; any other (edited, or restored from a CI cache or a
    // backup with new inodes) is re-hashed against the list, and, when it
    // matches, its new identity is recorded for the next install. Shared,
    // every file is re-hashed. A tree that fails is dropped, except in a
    // shared cache (we never delete what others may own; the archive is
    // used instead).
    result<std::optional<std::vector<installed_file>>> materialize_tree(const std::string& sha256,
                                                                        const std::filesystem::path& stage,
                                                                        link_mode mode) const;

    // Documents (manifests, indexes) by URL, for --offline.
    // A document is read with O_NOFOLLOW, only if it is a regular file of
    // at most max_bytes (and, shared, written by us), else nullopt.
    // `name` (optional) says what the document is wherever it is served
    // ("cudnn/redist/redistrib_9.19.0.json", "cudnn/redist/"): the cache then
    // also remembers which URL served it last, so that --offline finds a
    // release whichever source (a mirror, the base) it came from.
    void store_document(const std::string& url, const std::string& body, std::string_view name = {}) const noexcept;
    std::optional<std::string> load_document(const std::string& url, std::size_t max_bytes = 64u << 20) const;
    // The document last stored under `name`, and the URL (without
    // credentials) that served it; nullopt when there is none.
    std::optional<cached_document> load_document_by_name(std::string_view name,
                                                         std::size_t max_bytes = 64u << 20) const;

    // The drift history's directories (drift_store), checked with the others.
    const std::filesystem::path& history_urls_dir() const { return history_urls_; }
    // scratch/: one directory per run that needs room beside the cache
    // (redist mirror into a registry), each locked by its run, resumed by the
    // next one and removed by it or by remove_leftovers.
    const std::filesystem::path& scratch_root() const { return scratch_; }
    const std::filesystem::path& history_documents_dir() const { return history_documents_; }

private:
    // The file list of a tree, for the dry run's forecast (internal:
    // store/cache_trees.hpp).
    friend std::optional<std::vector<installed_file>> tree_files(const blob_cache& cache, const std::string& sha256);

    // Removes trees/<hex>/; returns the bytes of its files (shared with
    // hardlinked prefixes, so not all of them are freed on disk).
    std::uint64_t remove_tree(const std::string& sha256) const;
    // open() and open_if_possible(): `refused` is set when the cache is
    // untrusted, as opposed to missing or impossible to create.
    static result<blob_cache> open_checked(const std::filesystem::path& root, bool shared, bool& refused);

    std::filesystem::path root_;
    bool shared_ = false;
    // How blobs/sha256/, trees/, documents/, locks/, history/*/ and scratch/ are reached. Shared,
    // these are /proc/self/fd/<n> of the directories that open() checked:
    // other users may rename or replace the directories in a shared cache,
    // but cannot change where these names lead (a symlink swapped in for
    // blobs/sha256 cannot make us create files elsewhere).
    std::filesystem::path blobs_, trees_, documents_, locks_, history_urls_, history_documents_, scratch_;
    std::shared_ptr<const struct cache_dir_handles> handles_;  // keeps those descriptors open
};

REDIST_API_END
}  // namespace redist
