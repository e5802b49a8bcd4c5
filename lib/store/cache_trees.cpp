// cache_trees.cpp — extracted trees in the cache (<cache>/trees/<hex>/): the
// tree list (tree_list.hpp: written here, read back from a cache another
// user may share, fuzzed), storing a stage's files as a tree (reflink, hard
// link or copy, holes kept) and materializing a tree into a new stage, with
// the checks that decide whether its files may be used unhashed. Apart from
// the blob store (cache.cpp): trees are a cache of the unpacked archive,
// trusted only as far as their list and their files' identities say.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <simdjson.h>

#include "archive/sha256.hpp"
#include "model/manifest.hpp"
#include "redist/cache.hpp"
#include "redist/json_writer.hpp"
#include "store/cache_access.hpp"
#include "store/cache_trees.hpp"
#include "store/commit_plan.hpp"
#include "store/tree_list.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"

namespace fs = std::filesystem;

namespace redist {

using namespace caching;

namespace {

std::int64_t mtime_ns(const struct stat& st) {
    return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}
std::int64_t ctime_ns(const struct stat& st) {
    return static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
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

// The list decides what gets installed, so it must be one we wrote: in a
// directory (`dir_st`) and a file owned by us (or root) that nobody else can
// write, not a link to somebody else's file; and valid for blob `sha256`.
std::optional<tree_list> read_own_list(const struct stat& dir_st, const fs::path& list_path,
                                       const std::string& sha256) {
    if (!S_ISDIR(dir_st.st_mode) || (dir_st.st_uid != ::geteuid() && dir_st.st_uid != 0) ||
        (dir_st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return std::nullopt;
    struct stat st {};
    const auto fd = open_regular(list_path, follow_links::no, &st);
    if (!fd.ok() || !written_by_us(st)) return std::nullopt;
    const auto text = read_fd(fd->get(), static_cast<std::uint64_t>(st.st_size), k_max_tree_list, list_path);
    if (!text.ok()) return std::nullopt;
    auto list = parse_tree_list(text.value());
    if (!list || !valid_tree_list(*list, sha256)) return std::nullopt;
    return list;
}

// Whether the content of `fd` hashes to what the tree list says of `f`.
bool digest_matches(int fd, const installed_file& f, const fs::path& shown_as) {
    const auto digest = file_digest(fd, f.piece_size, shown_as);
    return digest.ok() && *digest == f.sha256;
}

}  // namespace

std::optional<std::vector<installed_file>> tree_files(const blob_cache& cache, const std::string& sha256) {
    if (!is_sha256_hex(sha256)) return std::nullopt;
    const fs::path dir_path = cache.trees_ / sha256;
    const unique_fd dir_fd(::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat dir_st {};
    if (dir_fd.get() < 0 || ::fstat(dir_fd.get(), &dir_st) != 0) return std::nullopt;
    const fs::path dir = cache.shared_ ? anchored(dir_fd.get(), dir_path) : dir_path;
    auto list = read_own_list(dir_st, dir / ".redist-tree.json", sha256);
    if (!list) return std::nullopt;
    std::vector<installed_file> files;
    files.reserve(list->files.size());
    for (auto& r : list->files) files.push_back(std::move(r.file));
    return files;
}

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

    std::optional<tree_list> list = dir_opened ? read_own_list(dir_st, list_path, sha256) : std::nullopt;
    if (!list) return reject();

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
