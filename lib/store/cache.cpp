// cache.cpp — the blob cache (redist/cache.hpp): where it is, the trust
// check of its directories (ours, or --shared-cache), the blobs themselves
// (paths, the per-blob lock, publishing a verified .part) and the documents
// it keeps. Extracted trees are in cache_trees.cpp, listing and pruning in
// cache_prune.cpp.
#include "redist/cache.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>
#include <variant>

#include "archive/sha256.hpp"
#include "model/manifest.hpp"
#include "store/cache_access.hpp"
#include "store/cache_file.hpp"
#include "support/file_lock.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"

namespace fs = std::filesystem;

namespace redist {

namespace caching {

bool written_by_us(const struct stat& st) {
    return (st.st_uid == ::geteuid() || st.st_uid == 0) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0 && st.st_nlink == 1;
}

std::string unique_suffix() {
    static std::atomic<unsigned> counter{0};
    return std::to_string(::getpid()) + "." + std::to_string(counter++);
}

fs::path anchored(int fd, const fs::path& path) {
    static const bool have_proc = ::access("/proc/self/fd", X_OK) == 0;
    if (!have_proc || fd < 0) return path;
    return fs::path("/proc/self/fd") / std::to_string(fd);
}

}  // namespace caching

using namespace caching;

namespace {

std::string octal(unsigned mode) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
    return buf;
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
// The file that says which URL last served the document `name`: beside the
// documents, named by a hash no URL can have (a URL never starts "name:").
std::string document_name_key(std::string_view name) { return sha256_hex("name:" + std::string(name)); }
constexpr std::size_t kMaxUrlBytes = 8192;

// A file of documents/, read as input like any download: no symlinks, no
// FIFOs, at most max_bytes, and, in a shared cache, only what we wrote (a
// manifest decides which hashes are trusted, so one planted by another user
// must not be used). nullopt: none that qualifies.
std::optional<std::string> read_documents_file(const fs::path& dir, const std::string& file, bool shared,
                                               std::size_t max_bytes) {
    struct stat st {};
    const auto fd = open_regular(dir / file, follow_links::no, &st);
    if (!fd.ok() || (shared && !written_by_us(st))) return std::nullopt;
    auto text = read_fd(fd->get(), static_cast<std::uint64_t>(st.st_size), max_bytes, dir);
    if (!text.ok()) return std::nullopt;
    return std::move(text).value();
}
}  // namespace

void blob_cache::store_document(const std::string& url, const std::string& body, std::string_view name) const noexcept {
    // Named by the URL without credentials: a record never derives from a password.
    const std::string safe_url = sanitize_url(url);
    if (!atomic_write(documents_ / sha256_hex(safe_url), body, durability::none).ok()) return;  // best effort
    if (!name.empty() && safe_url.size() <= kMaxUrlBytes)
        (void)atomic_write(documents_ / document_name_key(name), safe_url, durability::none);
}

std::optional<std::string> blob_cache::load_document(const std::string& url, std::size_t max_bytes) const {
    return read_documents_file(documents_, sha256_hex(sanitize_url(url)), shared_, max_bytes);
}

std::optional<cached_document> blob_cache::load_document_by_name(std::string_view name, std::size_t max_bytes) const {
    if (name.empty()) return std::nullopt;
    auto url = read_documents_file(documents_, document_name_key(name), shared_, kMaxUrlBytes);
    if (!url || url->empty()) return std::nullopt;
    auto body = load_document(*url, max_bytes);
    if (!body) return std::nullopt;
    return cached_document{std::move(*url), std::move(*body)};
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
