#include "redist/cache.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <variant>

#include <simdjson.h>

#include "archive/sha256.hpp"
#include "redist/json_writer.hpp"
#include "store/cache_file.hpp"
#include "store/commit_plan.hpp"
#include "store/tree_list.hpp"
#include "support/file_lock.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"

namespace fs = std::filesystem;

namespace redist {

namespace {

std::string octal(unsigned mode) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
    return buf;
}

// Files that only we (or root, who can do anything anyway) could have written.
bool written_by_us(const struct stat& st) {
    return (st.st_uid == ::geteuid() || st.st_uid == 0) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0 && st.st_nlink == 1;
}

std::int64_t mtime_ns(const struct stat& st) {
    return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}
std::int64_t ctime_ns(const struct stat& st) {
    return static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
}

// A name for a temporary file or directory that no other thread or process
// of ours uses at the same time.
std::string unique_suffix() {
    static std::atomic<unsigned> counter{0};
    return std::to_string(::getpid()) + "." + std::to_string(counter++);
}

// ---- the trust check --------------------------------------------------------------------

// A refused cache: one line that says what is wrong and how to fix it.
error untrusted(const fs::path& dir, const std::string& why, const std::string& fix) {
    return make_error(error_code::filesystem, "refusing the cache: " + why + "; " + fix +
                                                  ", or pass --shared-cache to use a cache shared with other users "
                                                  "(everything in it is re-verified)")
        .with_path(dir.string());
}

// `st` describes the opened directory `dir` of the cache. Without `shared`
// it must be ours and writable by nobody else: then nobody but us (and
// root) can add, rename or remove anything in it, which is what lets the
// rest of this file use paths inside it without racing an attacker.
result<void> check_trusted_dir(const struct stat& st, const fs::path& dir, bool shared) {
    if (!S_ISDIR(st.st_mode)) return untrusted(dir, "it is not a directory", "remove it");
    if (shared) return {};
    const auto me = ::geteuid();
    if (st.st_uid != me)
        return untrusted(dir,
                         "the directory is owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " +
                             std::to_string(me) + ")",
                         "run `chown -R " + std::to_string(me) + " " + dir.string() + "`, use another --cache-dir");
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return untrusted(dir, "the directory is writable by group or others (mode " + octal(st.st_mode) + ")",
                         "run `chmod go-w " + dir.string() + "`");
    return {};
}

struct open_failure {
    error err;
    bool refused = false;  // untrusted, as opposed to "could not create"
};

// Opens (creating) directory `name` below `parent` (its descriptor) without
// following a symlink, and checks it. A directory we create is ours; with
// a group-writable umask it is tightened (we may chmod what we created).
std::variant<unique_fd, open_failure> open_cache_dir(int parent, const char* name, const fs::path& full, bool shared) {
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    bool created = false;
    unique_fd fd(::openat(parent, name, flags));
    if (fd.get() < 0 && errno == ENOENT) {
        // Shared: what the umask allows (the process's, read once: see posix_file.hpp).
        const auto mode = static_cast<mode_t>(shared ? 0777 & ~process_umask() : 0755);
        if (::mkdirat(parent, name, mode) == 0) created = true;
        else if (errno != EEXIST) return open_failure{errno_error("cannot create cache directory", full, errno), false};
        fd = unique_fd(::openat(parent, name, flags));
    }
    if (fd.get() < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            return open_failure{untrusted(full, "it is a symlink or not a directory", "remove it"), true};
        return open_failure{errno_error("cannot open cache directory", full, errno), false};
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        return open_failure{errno_error("cannot stat cache directory", full, errno), false};
    if (created && !shared && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        if (::fchmod(fd.get(), st.st_mode & 07755) == 0) st.st_mode &= 07755;
    }
    auto trusted = check_trusted_dir(st, full, shared);
    if (!trusted.ok()) return open_failure{std::move(trusted).error_value(), true};
    return fd;
}

// ---- paths and symlinks inside a tree -----------------------------------------------------

std::vector<std::string> split_path(std::string_view path) {
    std::vector<std::string> out;
    while (!path.empty()) {
        const auto slash = path.find('/');
        out.emplace_back(path.substr(0, slash));
        if (slash == std::string_view::npos) break;
        path.remove_prefix(slash + 1);
    }
    return out;
}

// A tree-relative path as a receipt may hold it (the tree becomes a stage,
// then receipts): plain and relative (safe_path.hpp: no "..", no control
// characters, no backslash) and not in .redist/.
bool plausible_tree_path(std::string_view path) {
    return path.size() <= 4096 && relative_path_problem(path) == nullptr &&
           path.substr(0, path.find('/')) != state_dir_name;
}

// Whether symlink `link` (tree-relative) with `target` resolves inside the
// tree, following the tree's own symlinks (`links`: path -> target) the way
// the kernel would. A purely lexical check is not enough: with "a -> ." a
// link "a/up -> .." sits, for the kernel, in the root and leaves the tree.
bool resolves_inside(const std::string& link, const std::string& target,
                     const std::map<std::string, std::string>& links) {
    std::vector<std::string> dir = split_path(link);
    dir.pop_back();
    std::deque<std::string> todo;
    auto push_target = [&](const std::string& t) {
        if (t.empty() || t.front() == '/') return false;
        const auto parts = split_path(t);
        todo.insert(todo.begin(), parts.begin(), parts.end());
        return true;
    };
    if (!push_target(target)) return false;
    int hops = 0;
    while (!todo.empty()) {
        std::string c = std::move(todo.front());
        todo.pop_front();
        if (c.empty() || c == ".") continue;
        if (c == "..") {
            if (dir.empty()) return false;
            dir.pop_back();
            continue;
        }
        dir.push_back(std::move(c));
        std::string joined;
        for (const auto& d : dir) joined += (joined.empty() ? "" : "/") + d;
        if (auto it = links.find(joined); it != links.end()) {
            if (++hops > 40) return false;  // the kernel's ELOOP limit
            dir.pop_back();
            if (!push_target(it->second)) return false;
        }
    }
    return true;
}

// ---- copying ----------------------------------------------------------------------------

bool copy_range_rw(int in, int out, off_t off, off_t len) {
    std::vector<char> buffer(1u << 20);
    while (len > 0) {
        const ssize_t n = ::pread(in, buffer.data(), static_cast<std::size_t>(std::min<off_t>(len, 1 << 20)), off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        for (ssize_t done = 0; done < n;) {
            const ssize_t w = ::pwrite(out, buffer.data() + done, static_cast<std::size_t>(n - done), off + done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return false;
            done += w;
        }
        off += n;
        len -= n;
    }
    return true;
}

bool copy_range(int in, int out, off_t off, off_t len) {
    loff_t in_off = off;
    loff_t out_off = off;
    while (len > 0) {
        const ssize_t n = ::copy_file_range(in, &in_off, out, &out_off, static_cast<std::size_t>(len), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP))
            return copy_range_rw(in, out, in_off, len);
        if (n <= 0) return false;
        len -= n;
    }
    return true;
}

// Copies the first `size` bytes of `in` into the empty `out`, keeping holes:
// only the data segments (SEEK_DATA/SEEK_HOLE) are copied, the rest stays a
// hole (ftruncate). copy_file_range alone is not enough: on ext4 it writes a
// hole as zeros, and a sparse file would come out of the cache dense.
bool copy_keeping_holes(int in, int out, off_t size) {
    off_t pos = 0;
    while (pos < size) {
        off_t data = ::lseek(in, pos, SEEK_DATA);
        if (data < 0) {
            if (errno == ENXIO) break;  // only a hole remains
            data = pos;                 // no SEEK_DATA on this filesystem: copy the rest densely
        }
        if (data >= size) break;
        off_t end = ::lseek(in, data, SEEK_HOLE);
        if (end < 0 || end > size) end = size;
        if (!copy_range(in, out, data, end - data)) return false;
        pos = end;
    }
    return ::ftruncate(out, size) == 0;
}

// Places regular file `in` (size bytes) into the new, empty `out`: reflink
// where allowed and possible, else a copy where allowed.
bool clone_or_copy(int in, int out, off_t size, bool allow_reflink, bool allow_copy) {
    if (allow_reflink && ::ioctl(out, FICLONE, in) == 0) return true;
    return allow_copy && copy_keeping_holes(in, out, size);
}

// Why a file of a cached tree could not be placed in the stage. --link-mode
// reflink where blocks cannot be shared (ext4, or two filesystems) says so
// and what works, rather than "Operation not supported".
error placing_error(link_mode mode, int why, const fs::path& cache_root, const fs::path& stage, const fs::path& to) {
    if (mode == link_mode::reflink && (why == EOPNOTSUPP || why == EXDEV || why == EINVAL || why == ENOTTY))
        return make_error(error_code::filesystem, "--link-mode reflink: the cache at " + cache_root.string() +
                                                      " and the prefix (its stage " + stage.string() +
                                                      ") cannot share blocks (" + std::strerror(why) +
                                                      "; reflink needs btrfs or xfs, with both on one filesystem); "
                                                      "use --link-mode auto or copy");
    return errno_error("cannot place file from the cache", to, why);
}

// Creates the missing directories of `rel`'s parent below `root` (both
// ours), one component at a time, never through a symlink.
bool make_parents(const fs::path& root, const std::string& rel) {
    auto parts = split_path(rel);
    parts.pop_back();
    fs::path dir = root;
    for (const auto& p : parts) {
        dir /= p;
        if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
        struct stat st {};
        if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    }
    return true;
}

}  // namespace

// ---- locating and opening ----------------------------------------------------------------

fs::path default_cache_dir(const std::string& explicit_dir) {
    if (!explicit_dir.empty()) return explicit_dir;
    if (const char* env = std::getenv("REDIST_CACHE_DIR"); env && *env) return env;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/') return fs::path(xdg) / "redist";
    if (const char* home = std::getenv("HOME"); home && *home == '/') return fs::path(home) / ".cache" / "redist";
    // HOME unset: the passwd entry says where our home is. Never a fixed path
    // under /tmp: another user could create it first and own our cache.
    std::vector<char> buffer(16384);
    struct passwd pw {};
    struct passwd* found = nullptr;
    if (::getpwuid_r(::geteuid(), &pw, buffer.data(), buffer.size(), &found) == 0 && found && found->pw_dir &&
        found->pw_dir[0] == '/' && std::string_view(found->pw_dir) != "/")
        return fs::path(found->pw_dir) / ".cache" / "redist";
    return {};
}

result<int> open_cache_file(const fs::path& path, cache_file_access how) {
    int flags = O_CLOEXEC | O_NOFOLLOW;
    if (how == cache_file_access::create_fresh) {
        // Whatever sits at the name goes first (a planted symlink is removed,
        // not followed); O_EXCL then guarantees a file of our own.
        if (::unlink(path.c_str()) != 0 && errno != ENOENT)
            return errno_error("cannot replace cache file", path, errno);
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | flags, 0644);
        if (fd < 0) return errno_error("cannot create cache file", path, errno);
        return fd;
    }
    flags |= O_NONBLOCK | (how == cache_file_access::read ? O_RDONLY : O_WRONLY | O_APPEND);
    unique_fd fd(::open(path.c_str(), flags));
    if (fd.get() < 0) {
        if (errno == ELOOP)
            return make_error(error_code::filesystem, "cache file is a symlink").with_path(path.string());
        return errno_error("cannot open cache file", path, errno);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return errno_error("cannot stat cache file", path, errno);
    if (!S_ISREG(st.st_mode))
        return make_error(error_code::filesystem, "cache file is not a regular file").with_path(path.string());
    if (how == cache_file_access::append && (st.st_uid != ::geteuid() || st.st_nlink != 1))
        return make_error(error_code::filesystem, "cache file is not ours (owner or link count)")
            .with_path(path.string());
    // Regular files ignore O_NONBLOCK; it was only there so that a FIFO could not block the open.
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    return fd.release();
}

bool resumable_cache_file(const fs::path& path, std::uint64_t max_size) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == ::geteuid() &&
           st.st_size > 0 && static_cast<std::uint64_t>(st.st_size) <= max_size;
}

namespace {

// The directories of a cache below its root, each opened and checked. The
// drift history (drift.hpp) is part of the cache: its directories are
// checked here, with the others, before anything is written into them.
// blob_cache::from_checked names its members in this order.
constexpr struct {
    const char* name;
    const char* below;  // or nullptr
} k_subdirs[] = {{"blobs", "sha256"}, {"trees", nullptr},       {"documents", nullptr}, {"locks", nullptr},
                 {"history", "urls"}, {"history", "documents"}, {"scratch", nullptr}};
using checked_dirs = std::array<unique_fd, std::size(k_subdirs)>;

// Creates what is missing and checks every directory of the cache (see
// "Trust" in cache.hpp), keeping each open.
std::variant<checked_dirs, open_failure> prepare_cache_dirs(const fs::path& root, bool shared) {
    std::error_code ec;
    if (root.has_parent_path() && root.parent_path() != root) {
        create_directories_masked(root.parent_path(), ec);
        if (ec)
            return open_failure{errno_error("cannot create cache directory", root.parent_path(), ec.value()), false};
    }
    auto top = open_cache_dir(AT_FDCWD, root.c_str(), root, shared);
    if (auto* f = std::get_if<open_failure>(&top)) {
        // The root's own path is the user's choice and may end in a symlink
        // they made (~/.cache/redist -> /data/cache): the directory it names
        // is checked like the others.
        if (!f->refused) return std::move(*f);
        unique_fd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        struct stat st {};
        if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) return std::move(*f);
        auto trusted = check_trusted_dir(st, root, shared);
        if (!trusted.ok()) return open_failure{std::move(trusted).error_value(), true};
        top = std::move(fd);
    }
    const int root_fd = std::get<unique_fd>(top).get();
    checked_dirs out;
    for (std::size_t i = 0; i < out.size(); ++i) {
        const auto& sub = k_subdirs[i];
        auto dir = open_cache_dir(root_fd, sub.name, root / sub.name, shared);  // each level is checked
        if (sub.below && std::holds_alternative<unique_fd>(dir))
            dir = open_cache_dir(std::get<unique_fd>(dir).get(), sub.below, root / sub.name / sub.below, shared);
        if (auto* f = std::get_if<open_failure>(&dir)) return std::move(*f);
        out[i] = std::move(std::get<unique_fd>(dir));
    }
    return out;
}

// /proc/self/fd/<fd>: the directory itself, whatever happens to its name.
// Falls back to `path` where /proc is not mounted.
fs::path anchored(int fd, const fs::path& path) {
    static const bool have_proc = ::access("/proc/self/fd", X_OK) == 0;
    if (!have_proc || fd < 0) return path;
    return fs::path("/proc/self/fd") / std::to_string(fd);
}

}  // namespace

struct cache_dir_handles : checked_dirs {};

result<blob_cache> blob_cache::open_checked(const fs::path& root, bool shared, bool& refused) {
    if (root.empty())
        return make_error(error_code::filesystem,
                          "no cache directory: HOME is unset and the user has no home directory; "
                          "pass --cache-dir DIR (or set REDIST_CACHE_DIR), or --no-cache");
    std::error_code ec;
    fs::path absolute = fs::absolute(root, ec).lexically_normal();
    if (ec) return errno_error("cannot resolve cache directory", root, ec.value());
    if (absolute.filename().empty()) absolute = absolute.parent_path();  // "dir/" -> "dir"
    auto dirs = prepare_cache_dirs(absolute, shared);
    if (auto* f = std::get_if<open_failure>(&dirs)) {
        refused = f->refused;
        return std::move(f->err);
    }
    blob_cache cache;
    cache.root_ = absolute;
    cache.shared_ = shared;
    fs::path* const paths[] = {&cache.blobs_,  &cache.trees_,        &cache.documents_,
                               &cache.locks_,  &cache.history_urls_, &cache.history_documents_,
                               &cache.scratch_};
    static_assert(std::size(paths) == std::size(k_subdirs));
    for (std::size_t i = 0; i < std::size(paths); ++i) {
        const auto& sub = k_subdirs[i];
        const fs::path plain = sub.below ? absolute / sub.name / sub.below : absolute / sub.name;
        // Shared, not ours: each directory is reached through its descriptor (see cache.hpp).
        *paths[i] = shared ? anchored(std::get<checked_dirs>(dirs)[i].get(), plain) : plain;
    }
    if (shared)
        cache.handles_ = std::make_shared<cache_dir_handles>(
            cache_dir_handles{std::move(std::get<checked_dirs>(dirs))});
    return cache;
}

result<blob_cache> blob_cache::open(const fs::path& root, bool shared) {
    bool refused = false;
    return open_checked(root, shared, refused);
}

result<std::optional<blob_cache>> blob_cache::open_if_possible(const std::optional<fs::path>& root, bool shared) {
    if (!root) return std::optional<blob_cache>();
    return open_if_possible(*root, shared);
}

result<std::optional<blob_cache>> blob_cache::open_if_possible(const fs::path& root, bool shared) {
    bool refused = false;
    auto cache = open_checked(root, shared, refused);
    if (cache.ok()) return std::optional<blob_cache>(std::move(cache).value());
    if (refused) return std::move(cache).error_value();
    return std::optional<blob_cache>();
}

fs::path blob_cache::blob_path(const std::string& sha256) const { return blobs_ / sha256; }
fs::path blob_cache::partial_path(const std::string& sha256) const { return blobs_ / (sha256 + ".part"); }

bool blob_cache::has_blob(const std::string& sha256) const {
    struct stat st {};
    return is_sha256_hex(sha256) && ::lstat(blob_path(sha256).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool blob_cache::has_tree(const std::string& sha256) const {
    struct stat st {};
    return is_sha256_hex(sha256) && ::lstat((trees_ / sha256 / ".redist-tree.json").c_str(), &st) == 0 &&
           S_ISREG(st.st_mode);
}

result<blob_lock> blob_cache::lock_blob(const std::string& sha256, const std::function<void()>& on_wait) const {
    // The digest becomes a file name here first: nothing else may.
    if (!is_sha256_hex(sha256))
        return make_error(error_code::bad_manifest, "sha256 is not 64 hex digits: '" + sha256.substr(0, 80) + "'");
    const fs::path path = locks_ / (sha256 + ".lock");
    blob_lock lock;
    REDIST_TRY(unique_fd fd, lock_file(path, lock_mode::exclusive, lock_wait::block, on_wait));
    lock.fd_ = held_lock_fd(new unique_fd(std::move(fd)));
    return lock;
}

result<void> blob_cache::publish(const std::string& sha256) const {
    const fs::path from = partial_path(sha256);
    const fs::path to = blob_path(sha256);
    if (::rename(from.c_str(), to.c_str()) != 0) return errno_error("cannot publish cache blob", to, errno);
    return {};
}

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

void blob_cache::store_document(const std::string& url, const std::string& body) const noexcept {
    // Named by the URL without credentials: a record never derives from a password.
    (void)atomic_write(documents_ / sha256_hex(sanitize_url(url)), body, durability::none);  // best effort: a cache
}

std::optional<std::string> blob_cache::load_document(const std::string& url, std::size_t max_bytes) const {
    // A document is input like any download: no symlinks, no FIFOs, bounded,
    // and, in a shared cache, only what we wrote (a manifest decides which
    // hashes are trusted, so one planted by another user must not be used).
    struct stat st {};
    const auto fd = open_regular(documents_ / sha256_hex(sanitize_url(url)), follow_links::no, &st);
    if (!fd.ok() || (shared_ && !written_by_us(st))) return std::nullopt;
    auto text = read_fd(fd->get(), static_cast<std::uint64_t>(st.st_size), max_bytes, documents_);
    if (!text.ok()) return std::nullopt;
    return std::move(text).value();
}

result<link_mode> parse_link_mode(std::string_view text) {
    if (text == "auto") return link_mode::auto_select;
    if (text == "reflink") return link_mode::reflink;
    if (text == "hardlink") return link_mode::hardlink;
    if (text == "copy") return link_mode::copy;
    return make_error(error_code::usage,
                      "--link-mode is auto, reflink, hardlink or copy, not '" + std::string(text) + "'");
}

}  // namespace redist

// ---- extracted trees ------------------------------------------------------------------

namespace redist {

namespace {

constexpr int k_tree_format = 2;  // 1 (a bare array, hard links to a prefix) is dropped and rebuilt
constexpr std::size_t k_max_tree_list = 64u << 20;

}  // namespace

// The tree list (tree_list.hpp): written by store_tree, read back by
// materialize_tree, from a cache that another user may share.
std::string tree_list_json(const tree_list& list) {
    json_writer w(0);
    w.begin_object().field("format", k_tree_format).field("archive", list.archive).field("hardlinked", list.hardlinked);
    w.key("files").begin_array();
    for (const auto& r : list.files) {
        const auto& f = r.file;
        w.begin_object().field("path", f.path).field("type", f.kind == entry_kind::symlink ? "symlink" : "file");
        w.field("size", f.size).field("sha256", f.sha256).field("target", f.link_target).field("mode", f.mode);
        if (f.piece_size != 0) w.field("piece_size", f.piece_size);  // absent: the plain SHA-256
        w.field("ino", r.ino).field("mtime_ns", r.mtime).field("ctime_ns", r.ctime).end_object();
    }
    w.end_array().end_object();
    return w.str();
}

namespace {

// simdjson On-Demand: each value is read once, in document order.
bool parse_tree_record(simdjson::ondemand::object obj, tree_record& r) {
    installed_file& f = r.file;
    for (auto field : obj) {
        std::string_view key;
        if (field.unescaped_key().get(key)) return false;
        auto v = field.value();
        std::string_view sv;
        std::uint64_t n = 0;
        std::string* text = key == "path"     ? &f.path
                            : key == "sha256" ? &f.sha256
                            : key == "target" ? &f.link_target
                                              : nullptr;
        std::int64_t* time = key == "mtime_ns" ? &r.mtime : key == "ctime_ns" ? &r.ctime : nullptr;
        if (text) {
            if (v.get_string().get(sv)) return false;
            *text = sv;
        } else if (time) {
            if (v.get_int64().get(*time)) return false;
        } else if (key == "size" || key == "ino") {
            if (v.get_uint64().get(key == "size" ? f.size : r.ino)) return false;
        } else if (key == "type") {
            if (v.get_string().get(sv) || (sv != "symlink" && sv != "file")) return false;
            f.kind = sv == "symlink" ? entry_kind::symlink : entry_kind::regular;
        } else if (key == "piece_size") {
            if (v.get_uint64().get(n) || n == 0 || !valid_piece_size(n)) return false;
            f.piece_size = n;
        } else if (key == "mode") {
            if (v.get_uint64().get(n) || n > 07777) return false;
            f.mode = static_cast<unsigned>(n);
        } else return false;
    }
    return true;
}

}  // namespace

std::optional<tree_list> parse_tree_list(const std::string& text) {
    simdjson::ondemand::parser parser;
    simdjson::padded_string padded(text);
    simdjson::ondemand::document doc;
    simdjson::ondemand::object top;
    if (parser.iterate(padded).get(doc) || doc.get_object().get(top)) return std::nullopt;
    tree_list list;
    std::int64_t format = 0;
    for (auto field : top) {
        std::string_view key;
        if (field.unescaped_key().get(key)) return std::nullopt;
        auto v = field.value();
        if (key == "format") {
            if (v.get_int64().get(format)) return std::nullopt;
        } else if (key == "archive") {
            std::string_view sv;
            if (v.get_string().get(sv)) return std::nullopt;
            list.archive = sv;
        } else if (key == "hardlinked") {
            if (v.get_bool().get(list.hardlinked)) return std::nullopt;
        } else if (key == "files") {
            simdjson::ondemand::array items;
            if (v.get_array().get(items)) return std::nullopt;
            for (auto item : items) {
                simdjson::ondemand::object obj;
                tree_record r;
                if (item.get_object().get(obj) || !parse_tree_record(obj, r)) return std::nullopt;
                list.files.push_back(std::move(r));
            }
        } else {
            return std::nullopt;
        }
    }
    if (format != k_tree_format) return std::nullopt;
    return list;
}

bool valid_tree_list(const tree_list& list, const std::string& sha256) {
    if (list.archive != sha256) return false;
    std::map<std::string, std::string> links;
    std::set<std::string> seen;
    for (const auto& r : list.files) {
        const auto& f = r.file;
        if (!plausible_tree_path(f.path) || !seen.insert(f.path).second) return false;
        if (f.kind == entry_kind::symlink) links.emplace(f.path, f.link_target);
        else if (!is_sha256_hex(f.sha256) || !f.link_target.empty()) return false;
    }
    for (const auto& r : list.files) {
        const auto& f = r.file;
        for (auto slash = f.path.find('/'); slash != std::string::npos; slash = f.path.find('/', slash + 1))
            if (links.count(f.path.substr(0, slash))) return false;
        if (f.kind == entry_kind::symlink && !resolves_inside(f.path, f.link_target, links)) return false;
    }
    return true;
}

namespace {

// A new file `to` in a tree being stored, with the `size` bytes of `in`: a
// reflink where allowed and possible, else a copy where allowed (holes kept).
// Nothing is left at `to` when it fails. Returns the new file's stat.
std::optional<struct stat> copy_tree_file(int in, off_t size, const fs::path& to, unsigned mode, bool allow_reflink,
                                          bool allow_copy) {
    unique_fd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (out.get() < 0) return std::nullopt;
    struct stat st {};
    // Whatever the archive said, nobody else may write the cache's copy.
    if (clone_or_copy(in, out.get(), size, allow_reflink, allow_copy) &&
        ::fchmod(out.get(), (mode & 0755) | 0400) == 0 && ::fstat(out.get(), &st) == 0 && out.close(to).ok())
        return st;
    ::unlink(to.c_str());
    return std::nullopt;
}

// Puts the stage's file `from` (open as `in`, described by `in_st`) into a
// tree being stored, at `to`, the cheapest way: a reflink (independent, and
// free on btrfs/XFS), else a hard link to the stage (free: no byte is
// copied on the cold install). The stage becomes the prefix at the commit,
// so that first prefix then shares the file with the tree: an edit there
// changes its ctime (which nobody can set back), and materialize_tree
// re-hashes a file whose ctime moved before using it. Else a copy: on
// another filesystem (the copy costs a few percent of a cold install), in
// a shared cache (our prefix's files are not put where other users can
// rename things), or for a file others may write (the archive's mode).
// Returns the stored file's stat, nullopt on failure.
std::optional<struct stat> store_tree_file(int in, const struct stat& in_st, const fs::path& from, const fs::path& to,
                                           unsigned mode, bool shared) {
    const bool linkable = !shared && in_st.st_uid == ::geteuid() && (in_st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
    if (auto st = copy_tree_file(in, in_st.st_size, to, mode, true, !linkable)) return st;
    if (!linkable) return std::nullopt;
    if (::link(from.c_str(), to.c_str()) == 0) {
        // The name still leads to the file checked through `in` (the stage is ours).
        struct stat st {};
        if (::lstat(to.c_str(), &st) != 0 || st.st_ino != in_st.st_ino || st.st_dev != in_st.st_dev)
            return std::nullopt;
        return st;
    }
    if (errno != EXDEV && errno != EPERM && errno != EMLINK) return std::nullopt;
    return copy_tree_file(in, in_st.st_size, to, mode, false, true);
}

}  // namespace

void blob_cache::store_tree(const std::string& sha256, const fs::path& stage,
                            const std::vector<installed_file>& files) const noexcept {
    try {
        if (!is_sha256_hex(sha256)) return;
        const fs::path final_dir = trees_ / sha256;
        struct stat st {};
        if (::lstat(final_dir.c_str(), &st) == 0) return;
        const fs::path tmp_path = trees_ / (sha256 + ".partial." + unique_suffix());
        if (::mkdir(tmp_path.c_str(), 0755) != 0) return;
        // From here on the new directory is reached through its descriptor
        // when others can rename things in trees/ (shared); inside it, only
        // we can write.
        unique_fd tmp_fd(::open(tmp_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (tmp_fd.get() < 0 || ::fstat(tmp_fd.get(), &st) != 0 || st.st_uid != ::geteuid()) return;
        const fs::path tmp = shared_ ? anchored(tmp_fd.get(), tmp_path) : tmp_path;
        auto abandon = [&] {
            std::error_code ec;
            for (const auto& entry : fs::directory_iterator(tmp, ec)) fs::remove_all(entry.path(), ec);
            ::rmdir(tmp_path.c_str());
        };
        tree_list list;
        list.archive = sha256;
        for (const auto& f : files) list.files.push_back(tree_record{f, 0, 0, 0});
        if (!valid_tree_list(list, sha256)) return abandon();
        for (auto& r : list.files) {
            const installed_file& f = r.file;
            if (!make_parents(tmp, f.path)) return abandon();
            const fs::path to = tmp / f.path;
            if (f.kind == entry_kind::symlink) {
                if (::symlink(f.link_target.c_str(), to.c_str()) != 0) return abandon();
                continue;
            }
            unique_fd in(::open((stage / f.path).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
            struct stat in_st {};
            if (in.get() < 0 || ::fstat(in.get(), &in_st) != 0 || !S_ISREG(in_st.st_mode) ||
                static_cast<std::uint64_t>(in_st.st_size) != f.size)
                return abandon();
            const auto stored = store_tree_file(in.get(), in_st, stage / f.path, to, f.mode, shared_);
            if (!stored) return abandon();
            r.ino = static_cast<std::uint64_t>(stored->st_ino);
            r.mtime = mtime_ns(*stored);
            r.ctime = ctime_ns(*stored);
        }
        // The list is written before the directory is renamed into place, so a
        // tree under its final name always has a list.
        if (!atomic_write(tmp / ".redist-tree.json", tree_list_json(list), durability::none).ok() ||
            ::rename(tmp_path.c_str(), final_dir.c_str()) != 0)
            return abandon();
    } catch (...) {
        // Best effort (std::bad_alloc): no tree is recorded.
    }
}

namespace {

// Whether the content of `fd` hashes to what the tree list says of `f`.
bool digest_matches(int fd, const installed_file& f, const fs::path& shown_as) {
    const auto digest = file_digest(fd, f.piece_size, shown_as);
    return digest.ok() && *digest == f.sha256;
}

}  // namespace

result<std::optional<std::vector<installed_file>>> blob_cache::materialize_tree(const std::string& sha256,
                                                                                const fs::path& stage,
                                                                                link_mode mode) const {
    using outcome = std::optional<std::vector<installed_file>>;
    if (!is_sha256_hex(sha256)) return outcome();
    const fs::path dir_path = trees_ / sha256;
    unique_fd dir_fd(::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir_fd.get() < 0 && errno == ENOENT) return outcome();
    struct stat dir_st {};
    const bool dir_opened = dir_fd.get() >= 0 && ::fstat(dir_fd.get(), &dir_st) == 0;
    // Shared: the tree is reached through the directory checked below, whatever happens to its name.
    const fs::path dir = shared_ ? anchored(dir_fd.get(), dir_path) : dir_path;
    const fs::path list_path = dir / ".redist-tree.json";

    // An untrusted or stale tree: the caller unpacks the archive instead.
    auto reject = [&]() -> result<outcome> {
        std::error_code ec;
        fs::remove_all(stage, ec);
        create_directories_masked(stage, ec);
        if (!shared_) remove_tree(sha256);
        return outcome();
    };

    // The list decides what gets installed, so it must be one we wrote: in
    // a directory and a file owned by us (or root) that nobody else can
    // write, not a link to somebody else's file.
    if (!dir_opened || !S_ISDIR(dir_st.st_mode) || (dir_st.st_uid != ::geteuid() && dir_st.st_uid != 0) ||
        (dir_st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return reject();
    std::optional<tree_list> list;
    {
        struct stat st {};
        const auto fd = open_regular(list_path, follow_links::no, &st);
        if (!fd.ok() || !written_by_us(st)) return reject();
        const auto text = read_fd(fd->get(), static_cast<std::uint64_t>(st.st_size), k_max_tree_list, list_path);
        if (!text.ok()) return reject();
        list = parse_tree_list(text.value());
    }
    if (!list || !valid_tree_list(*list, sha256)) return reject();

    // Hard links would hand files others may write to the prefix in a shared cache.
    const bool hardlink = mode == link_mode::hardlink && !shared_;
    bool restamped = false;  // a file was verified by its digest: its identity is recorded anew
    for (auto& r : list->files) {
        const installed_file& f = r.file;
        const fs::path to = stage / f.path;
        std::error_code ec;
        create_directories_masked(to.parent_path(), ec);  // in our stage; no listed path is below a symlink
        if (ec)
            return make_error(error_code::filesystem, "cannot create directory: " + ec.message())
                .with_path(to.parent_path().string());
        if (f.kind == entry_kind::symlink) {
            // Made from the (validated) list, not copied from the tree.
            if (::symlink(f.link_target.c_str(), to.c_str()) != 0)
                return errno_error("cannot create symlink", to, errno);
            continue;
        }
        struct stat st {};
        auto source = open_regular(dir / f.path, follow_links::no, &st);
        if (!source.ok() || static_cast<std::uint64_t>(st.st_size) != f.size) return reject();
        const unique_fd in = std::move(source).value();
        // Not shared, the cache is ours (checked by open): nobody but us and
        // root could have written this file. What remains are our own (or
        // root's) edits, and those change the ctime even when the size and
        // mtime are put back; a replaced file has another inode. A file that
        // is not as recorded (edited, or a tree restored from a CI cache or a
        // backup: new inodes and ctimes) is re-hashed against the list before
        // it is used, and its identity recorded anew when it matches. Shared,
        // every copy placed in the stage is re-hashed.
        const bool as_recorded = !shared_ && st.st_ino == r.ino && mtime_ns(st) == r.mtime &&
                                 (list->hardlinked || ctime_ns(st) == r.ctime);
        if (!as_recorded && !shared_) {
            r.ino = static_cast<std::uint64_t>(st.st_ino);
            r.mtime = mtime_ns(st);
            r.ctime = ctime_ns(st);
            restamped = true;
        }
        if (hardlink) {
            // Not shared: only we (or root) can write the cache's file, so it is hashed in place.
            if (!as_recorded && !digest_matches(in.get(), f, dir / f.path)) return reject();
            if (::link((dir / f.path).c_str(), to.c_str()) != 0)
                return errno_error("cannot place file from the cache", to, errno);
            continue;
        }
        unique_fd out(::open(to.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (out.get() < 0) return errno_error("cannot place file from the cache", to, errno);
        if (!clone_or_copy(in.get(), out.get(), st.st_size, mode != link_mode::copy, mode != link_mode::reflink))
            return placing_error(mode, errno, root_, stage, to);
        // The copy is ours now: hashing it (not the cache's file) leaves no
        // window for a swap between the check and the use.
        if (!as_recorded && !digest_matches(out.get(), f, to)) return reject();
        if (::fchmod(out.get(), f.mode & 0777) != 0 || !out.close(to).ok())
            return errno_error("cannot place file from the cache", to, errno);
    }
    if (hardlink && !list->hardlinked) {
        // From now on the tree shares inodes with a prefix: see link_mode.
        list->hardlinked = true;
        if (!atomic_write(list_path, tree_list_json(*list), durability::none).ok()) remove_tree(sha256);
    } else if (restamped) {
        // Verified: the next install takes the cheap check. Best effort (a
        // list that cannot be rewritten means the next install hashes again).
        (void)atomic_write(list_path, tree_list_json(*list), durability::none);
    }
    std::vector<installed_file> files;
    files.reserve(list->files.size());
    for (auto& r : list->files) files.push_back(std::move(r.file));
    return outcome(std::move(files));
}

}  // namespace redist
