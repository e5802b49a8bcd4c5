// cache_prune.cpp — what the cache holds and how it shrinks: listing blobs
// with what they take on disk, removing a tree, the leftovers of killed runs
// (temp files no lock protects any more), and pruning by age or to a size.
// Apart from the blob store (cache.cpp): it only ever removes, and decides
// what is safe to remove while other processes use the cache.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <optional>
#include <set>
#include <utility>

#include "model/manifest.hpp"
#include "redist/cache.hpp"
#include "redist/manifest.hpp"
#include "store/cache_access.hpp"
#include "support/file_lock.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"

namespace fs = std::filesystem;

namespace redist {

using namespace caching;

namespace {

// What `path` (a file, or a directory and all below it, not following
// symlinks) takes on disk, as `du -s` counts it: allocated blocks, not
// apparent sizes (a sparse file counts its data), and each inode once (the
// hard links of `seen`). 0 if it does not exist.
std::uint64_t disk_bytes(const fs::path& path, std::set<std::pair<dev_t, ino_t>>& seen) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return 0;
    std::uint64_t bytes = 0;
    const auto count = [&](const struct stat& s) {
        if (s.st_nlink <= 1 || seen.emplace(s.st_dev, s.st_ino).second)
            bytes += static_cast<std::uint64_t>(s.st_blocks) * 512;
    };
    count(st);
    if (!S_ISDIR(st.st_mode)) return bytes;
    std::error_code ec;
    for (const auto& entry : fs::recursive_directory_iterator(path, ec)) {
        struct stat below {};
        if (::lstat(entry.path().c_str(), &below) == 0) count(below);
    }
    return bytes;
}

// What the tree of a blob takes on disk (disk_bytes); 0 if `dir` is not a directory.
std::uint64_t tree_bytes(const fs::path& dir) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    std::set<std::pair<dev_t, ino_t>> seen;
    return disk_bytes(dir, seen);
}

}  // namespace

result<std::vector<cache_entry>> blob_cache::list() const {
    std::vector<cache_entry> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(blobs_, ec)) {
        std::string name = entry.path().filename().string();
        cache_entry e;
        if (name.ends_with(".part")) {
            e.partial = true;
            name.resize(name.size() - 5);
        }
        if (!is_sha256_hex(name)) continue;
        struct stat st {};
        if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        e.sha256 = name;
        e.size = static_cast<std::uint64_t>(st.st_size);
        std::set<std::pair<dev_t, ino_t>> seen;
        e.disk_bytes = disk_bytes(entry.path(), seen) + (e.partial ? 0 : disk_bytes(trees_ / name, seen));
        std::error_code ignored;
        e.last_used = entry.last_write_time(ignored);
        out.push_back(std::move(e));
    }
    if (ec) return make_error(error_code::filesystem, "cannot list cache: " + ec.message()).with_path(root_.string());
    return out;
}

namespace {

// A directory of the cache, without following a symlink at its name: `path`
// is the plain path of a cache we own, or /proc/self/fd/<n> of a directory
// open() checked (shared), which is a link by design.
unique_fd open_cache_subdir(const fs::path& path, bool shared) {
    return unique_fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | (shared ? 0 : O_NOFOLLOW)));
}

}  // namespace

std::uint64_t blob_cache::remove_tree(const std::string& sha256) const {
    // Never in a shared cache: what others wrote is theirs to remove, and a
    // recursive delete where others can rename directories is a race
    // (a directory swapped for a symlink mid-way) that we do not run.
    if (shared_) return 0;
    const fs::path dir = trees_ / sha256;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    const std::uint64_t bytes = tree_bytes(dir);
    // Rename first, so that no process picks up a half-removed tree.
    const std::string doomed = sha256 + ".stale." + unique_suffix();
    if (::rename(dir.c_str(), (trees_ / doomed).c_str()) != 0) return 0;
    if (const unique_fd trees = open_cache_subdir(trees_, shared_)) remove_tree_at(trees.get(), doomed);
    return bytes;
}

namespace {

// A temp file no lock protects is taken for dead after this long (an atomic
// write of a document takes milliseconds).
constexpr std::time_t unlocked_temp_age_s = 3600;

unique_fd open_subdir_at(int dir_fd, const char* name) {
    return unique_fd(::openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

// True when nobody holds the flock on `name` in `dir_fd` (or it does not
// exist): then no writer it serializes is at work. The lock is held by `held`
// until the caller is done.
bool lock_is_free_at(int dir_fd, const std::string& name, unique_fd& held) {
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT;
    auto lock = lock_file_at(dir_fd, name.c_str(), lock_mode::exclusive, lock_wait::try_once, {}, name);
    if (!lock.ok()) return false;
    held = std::move(*lock);
    return held.valid();
}

// atomic_write's (and store_document's) temp files in `dir_fd` older than
// unlocked_temp_age_s.
std::uint64_t remove_old_temps(int dir_fd, std::optional<unsigned> owner) {
    if (dir_fd < 0) return 0;
    const std::time_t now = std::time(nullptr);
    std::uint64_t freed = 0;
    for (const auto& name : directory_names_at(dir_fd)) {
        struct stat st {};
        if (!is_atomic_write_temp(name) || ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (now - st.st_mtime >= unlocked_temp_age_s) freed += remove_tree_at(dir_fd, name, owner);
    }
    return freed;
}

// history/urls/<h>.json.tmp.*: drift_store::record writes them holding <h>.lock.
std::uint64_t remove_dead_history_temps(int urls_fd, std::optional<unsigned> owner) {
    if (urls_fd < 0) return 0;
    std::uint64_t freed = 0;
    for (const auto& name : directory_names_at(urls_fd)) {
        const auto mark = name.find(".json.tmp.");
        if (mark == std::string::npos) continue;
        unique_fd lock;
        if (lock_is_free_at(urls_fd, name.substr(0, mark) + ".lock", lock))
            freed += remove_tree_at(urls_fd, name, owner);
    }
    return freed;
}

}  // namespace

std::uint64_t blob_cache::remove_leftovers() const noexcept {
    try {
        const std::optional<unsigned> owner = shared_ ? std::optional<unsigned>(::geteuid()) : std::nullopt;
        std::uint64_t freed = 0;
        if (const unique_fd trees = open_cache_subdir(trees_, shared_)) {
            for (const auto& name : directory_names_at(trees.get())) {
                const std::string hex = name.substr(0, 64);
                const std::string_view kind = std::string_view(name).substr(hex.size());
                if (!is_sha256_hex(hex)) continue;
                if (kind.starts_with(".stale.")) {  // renamed away by remove_tree, never read again
                    freed += remove_tree_at(trees.get(), name, owner);
                    continue;
                }
                if (!kind.starts_with(".partial.")) continue;
                const auto held = lock_file(locks_ / (hex + ".lock"), lock_mode::exclusive, lock_wait::try_once);
                if (held.ok() && *held) freed += remove_tree_at(trees.get(), name, owner);
            }
        }
        if (const unique_fd documents = open_cache_subdir(documents_, shared_))
            freed += remove_old_temps(documents.get(), owner);
        // history/ belongs to the drift store, which open() does not check:
        // each level is opened without following a symlink.
        const unique_fd history(::open((root_ / "history").c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (history) {
            freed += remove_dead_history_temps(open_subdir_at(history.get(), "urls").get(), owner);
            freed += remove_old_temps(open_subdir_at(history.get(), "documents").get(), owner);
        }
        if (const unique_fd scratch = open_cache_subdir(scratch_, shared_))
            freed += remove_unheld_scratch_dirs(scratch.get(), "", owner);
        return freed;
    } catch (...) {
        return 0;  // std::bad_alloc: best effort
    }
}

result<std::uint64_t> blob_cache::prune(std::chrono::seconds older_than) const {
    REDIST_TRY(const auto entries, list());
    const auto now = fs::file_time_type::clock::now();
    std::uint64_t freed = remove_leftovers();
    for (const auto& e : entries) {
        if (older_than.count() > 0 && now - e.last_used < older_than) continue;
        // Skip blobs that another process is working on right now.
        const auto held = lock_file(locks_ / (e.sha256 + ".lock"), lock_mode::exclusive, lock_wait::try_once);
        if (held.ok() && *held) {
            std::error_code ec;
            if (fs::remove(e.partial ? partial_path(e.sha256) : blob_path(e.sha256), ec)) freed += e.size;
            if (!e.partial) freed += remove_tree(e.sha256);
        }
    }
    // Trees whose archive is gone (pruned above, or deleted by hand).
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(trees_, ec)) {
        const std::string name = entry.path().filename().string();
        if (!is_sha256_hex(name) || fs::exists(blob_path(name))) continue;
        std::error_code ignored;
        if (older_than.count() > 0 && now - entry.last_write_time(ignored) < older_than) continue;
        freed += remove_tree(name);
    }
    return freed;
}

result<std::uint64_t> blob_cache::prune_to_size(std::uint64_t max_bytes) const {
    const std::uint64_t leftovers = remove_leftovers();
    REDIST_TRY(const auto entries, list());
    struct candidate {
        const cache_entry* entry;
        std::uint64_t bytes;  // the blob and its tree
        fs::file_time_type used;
    };
    std::vector<candidate> order;
    std::uint64_t total = 0;
    std::set<std::string> blobs;
    for (const auto& e : entries) {
        candidate c{&e, e.size, e.last_used};
        if (!e.partial) {
            blobs.insert(e.sha256);
            const fs::path tree = trees_ / e.sha256;
            c.bytes += tree_bytes(tree);
            struct stat st {};
            if (::lstat((tree / ".redist-tree.json").c_str(), &st) == 0) {
                const std::chrono::system_clock::time_point sys(
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::chrono::seconds(st.st_atim.tv_sec) + std::chrono::nanoseconds(st.st_atim.tv_nsec)));
                const auto atime = fs::file_time_type::clock::from_sys(sys);
                c.used = std::max(c.used, atime);
            }
        }
        total += c.bytes;
        order.push_back(c);
    }
    std::uint64_t freed = leftovers;
    // Orphaned trees (their archive is gone) first: nothing can reuse them without decoding again.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(trees_, ec)) {
        const std::string name = entry.path().filename().string();
        if (!is_sha256_hex(name) || blobs.count(name)) continue;
        if (total <= max_bytes) {
            total += tree_bytes(entry.path());
            continue;
        }
        freed += remove_tree(name);
    }
    std::sort(order.begin(), order.end(), [](const candidate& a, const candidate& b) { return a.used < b.used; });
    for (const auto& c : order) {
        if (total <= max_bytes) break;
        const auto held = lock_file(locks_ / (c.entry->sha256 + ".lock"), lock_mode::exclusive, lock_wait::try_once);
        if (!held.ok() || !*held) continue;  // in use by another process
        std::uint64_t gone = 0;
        std::error_code removed;
        if (fs::remove(c.entry->partial ? partial_path(c.entry->sha256) : blob_path(c.entry->sha256), removed))
            gone += c.entry->size;
        if (!c.entry->partial) gone += remove_tree(c.entry->sha256);
        freed += gone;
        total -= std::min(total, c.bytes);
    }
    return freed;
}

}  // namespace redist
