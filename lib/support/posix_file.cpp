// Internal file helpers; see posix_file.hpp for the contracts.
#include "support/posix_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

namespace redist {

void unique_fd::reset(int fd) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

result<void> unique_fd::close(const std::filesystem::path& path_for_errors) {
    const int fd = release();
    if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) return errno_error("cannot close", path_for_errors, errno);
    return {};
}

error errno_error(std::string_view what, const std::filesystem::path& path, int err, error_code code) {
    std::string message(what);
    message += ": ";
    message += std::strerror(err);
    return make_error(code, std::move(message)).with_path(path.string());
}

result<void> write_all(int fd, const void* data, std::size_t size, const std::filesystem::path& path_for_errors) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
        const ssize_t n = ::write(fd, p, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno_error("cannot write", path_for_errors, errno);
        }
        p += n;
        size -= static_cast<std::size_t>(n);
    }
    return {};
}

result<unique_fd> open_regular(const std::filesystem::path& path, follow_links follow, struct ::stat* st_out) {
    struct stat st {};
    const bool follow_link = follow == follow_links::yes;
    if ((follow_link ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0)
        return errno_error("cannot open", path, errno);
    if (!follow_link && S_ISLNK(st.st_mode)) return errno_error("cannot open", path, ELOOP);
    if (!S_ISREG(st.st_mode)) return make_error(error_code::filesystem, "not a regular file").with_path(path.string());
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (follow_link ? 0 : O_NOFOLLOW);
    unique_fd fd(::open(path.c_str(), flags));
    if (!fd) return errno_error("cannot open", path, errno);
    if (::fstat(fd.get(), &st) != 0) return errno_error("cannot stat", path, errno);
    if (!S_ISREG(st.st_mode)) return make_error(error_code::filesystem, "not a regular file").with_path(path.string());
    if (st_out) *st_out = st;
    return fd;
}

result<std::size_t> read_some(int fd, void* data, std::size_t size, const std::filesystem::path& path_for_errors,
                              error_code code) {
    for (;;) {
        const ssize_t n = ::read(fd, data, size);
        if (n >= 0) return static_cast<std::size_t>(n);
        if (errno != EINTR) return errno_error("cannot read", path_for_errors, errno, code);
    }
}

result<std::size_t> pread_some(int fd, void* data, std::size_t size, std::uint64_t offset,
                               const std::filesystem::path& path_for_errors, error_code code) {
    for (;;) {
        const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
        if (n >= 0) return static_cast<std::size_t>(n);
        if (errno != EINTR) return errno_error("cannot read", path_for_errors, errno, code);
    }
}

result<std::string> read_fd(int fd, std::uint64_t size_hint, std::uint64_t max_bytes,
                            const std::filesystem::path& path_for_errors, error_code too_large) {
    if (size_hint > max_bytes) {
        return make_error(too_large, "file too large (" + std::to_string(size_hint) + " bytes, the limit is " +
                                         std::to_string(max_bytes) + ")")
            .with_path(path_for_errors.string());
    }
    std::string out;
    out.resize(static_cast<std::size_t>(size_hint));
    std::size_t got = 0;
    while (true) {
        if (got == out.size()) {
            // The file may have grown since fstat: read on, within the limit.
            if (out.size() >= max_bytes + 1) break;
            out.resize(std::min<std::uint64_t>(max_bytes + 1, out.size() + 65536));
        }
        REDIST_TRY(const std::size_t n, read_some(fd, out.data() + got, out.size() - got, path_for_errors));
        if (n == 0) break;
        got += n;
    }
    if (got > max_bytes) {
        return make_error(too_large, "file too large (the limit is " + std::to_string(max_bytes) + " bytes)")
            .with_path(path_for_errors.string());
    }
    out.resize(got);
    return out;
}

result<std::string> read_file(const std::filesystem::path& path, std::uint64_t max_bytes, follow_links follow,
                              error_code too_large) {
    struct stat st {};
    REDIST_TRY(unique_fd fd, open_regular(path, follow, &st));
    return read_fd(fd.get(), static_cast<std::uint64_t>(st.st_size), max_bytes, path, too_large);
}

void fsync_directory(const std::filesystem::path& dir) noexcept {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

namespace {
constexpr std::string_view temp_marker = ".tmp.";
}

bool is_atomic_write_temp(std::string_view name) noexcept { return name.find(temp_marker) != std::string_view::npos; }

bool is_atomic_write_temp_of(std::string_view name, std::string_view target) noexcept {
    return name.size() > target.size() + temp_marker.size() && name.starts_with(target) &&
           name.substr(target.size()).starts_with(temp_marker);
}

namespace {

// 16 hex digits from the kernel's random source: a name nobody can guess and
// plant something at first (O_EXCL would refuse it, but a guessable name
// would let anyone make every write fail).
std::string random_suffix() {
    std::uint64_t bits = 0;
    auto* p = reinterpret_cast<unsigned char*>(&bits);
    std::size_t got = 0;
    while (got < sizeof bits) {
        const ssize_t n = ::getrandom(p + got, sizeof bits - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
    }
    if (got < sizeof bits) bits ^= std::random_device{}() * 0x9E3779B97F4A7C15ULL + std::random_device{}();
    static constexpr char hex[] = "0123456789abcdef";
    std::string out(16, '0');
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = hex[(bits >> (4 * i)) & 0xf];
    return out;
}

// Creates a new temp file beside `path`; never opens anything that was there.
result<std::pair<unique_fd, std::filesystem::path>> create_temp_beside(const std::filesystem::path& path,
                                                                       unsigned mode) {
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    // Masked explicitly: libarchive may hold the process umask at 0 for a
    // moment (see umask_mutex()), which must not widen what we create.
    const auto masked = static_cast<mode_t>(mode & 0777 & ~process_umask());
    for (int attempt = 0;; ++attempt) {
        std::filesystem::path tmp = path.string() + std::string(temp_marker) + random_suffix();
        unique_fd fd(::open(tmp.c_str(), flags, masked));
        if (fd) return std::pair{std::move(fd), std::move(tmp)};
        // EEXIST: the name was taken (by chance or on purpose); draw another.
        if (errno != EEXIST || attempt == 3) return errno_error("cannot create", tmp, errno);
    }
}

}  // namespace

result<void> atomic_write(const std::filesystem::path& path, std::string_view bytes, durability how, unsigned mode) {
    REDIST_TRY(auto created, create_temp_beside(path, mode));
    unique_fd fd = std::move(created.first);
    const std::filesystem::path tmp = std::move(created.second);
    auto fail = [&](error e) {
        fd.reset();
        ::unlink(tmp.c_str());
        return e;
    };
    if (auto written = write_all(fd.get(), bytes, tmp); !written.ok()) return fail(std::move(written).error_value());
    if (how != durability::none && ::fsync(fd.get()) != 0) return fail(errno_error("cannot sync", tmp, errno));
    if (auto closed = fd.close(tmp); !closed.ok()) return fail(std::move(closed).error_value());
    // rename(2) replaces whatever is at `path`, a symlink included, without following it.
    if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(errno_error("cannot rename into place", path, errno));
    if (how == durability::full) fsync_directory(path.has_parent_path() ? path.parent_path() : ".");
    return {};
}

namespace {

constexpr unsigned max_removal_depth = 256;

std::vector<std::string> directory_names(DIR* dir) {
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(dir)) {
        const std::string_view n = e->d_name;
        if (n != "." && n != "..") names.emplace_back(n);
    }
    return names;
}

std::uint64_t remove_below(int dir_fd, const std::string& name, std::optional<unsigned> owner, unsigned depth) {
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    if (owner && st.st_uid != *owner) return 0;
    if (!S_ISDIR(st.st_mode)) {
        if (::unlinkat(dir_fd, name.c_str(), 0) != 0) return 0;
        return S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;
    }
    if (depth >= max_removal_depth) return 0;
    const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    DIR* dir = ::fdopendir(fd);
    if (!dir) {
        ::close(fd);
        return 0;
    }
    std::uint64_t freed = 0;
    for (const auto& n : directory_names(dir)) freed += remove_below(::dirfd(dir), n, owner, depth + 1);
    ::closedir(dir);
    ::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR);
    return freed;
}

}  // namespace

std::vector<std::string> directory_names_at(int dir_fd) {
    const int listing = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* dir = listing < 0 ? nullptr : ::fdopendir(listing);
    if (!dir) {
        if (listing >= 0) ::close(listing);
        return {};
    }
    auto names = directory_names(dir);
    ::closedir(dir);
    return names;
}

std::uint64_t remove_tree_at(int dir_fd, const std::string& name, std::optional<unsigned> owner) noexcept {
    try {
        return remove_below(dir_fd, name, owner, 0);
    } catch (...) {
        return 0;  // std::bad_alloc: best effort
    }
}

void remove_atomic_write_temps(const std::filesystem::path& dir) noexcept {
    try {
        const unique_fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!fd) return;
        for (const auto& n : directory_names_at(fd.get()))
            if (is_atomic_write_temp(n)) remove_tree_at(fd.get(), n);
    } catch (...) {
        // std::bad_alloc: best effort
    }
}

std::mutex& umask_mutex() {
    static std::mutex m;
    return m;
}

unsigned process_umask() {
    static const unsigned mask = [] {
        std::lock_guard lock(umask_mutex());
        const mode_t old = ::umask(0);
        ::umask(old);
        return static_cast<unsigned>(old);
    }();
    return mask;
}

void create_directories_masked(const std::filesystem::path& dir, std::error_code& ec) {
    ec.clear();
    std::filesystem::path at;
    for (const auto& part : dir) {
        at /= part;
        if (::mkdir(at.c_str(), static_cast<mode_t>(0777 & ~process_umask())) != 0 && errno != EEXIST) {
            ec = std::error_code(errno, std::generic_category());
            return;
        }
    }
    if (!std::filesystem::is_directory(dir, ec) && !ec) ec = std::make_error_code(std::errc::not_a_directory);
}

// ---- scratch directories -------------------------------------------------------------------

namespace {

// A descriptor of `name` under `parent_fd`, flocked, when it is a directory of
// ours that no live run holds and still sits at that name (a run that
// released it may have removed it between our open and our lock).
unique_fd take_unheld_dir(int parent_fd, const std::string& name, std::optional<unsigned> owner) {
    unique_fd fd(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISDIR(st.st_mode)) return {};
    if (owner && st.st_uid != *owner) return {};
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return {};
    struct stat now {};
    if (::fstatat(parent_fd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_ino != st.st_ino ||
        now.st_dev != st.st_dev)
        return {};
    return fd;
}

// Removes what `dir` holds but the downloads a later run resumes.
void keep_only_parts(int dir_fd) noexcept {
    try {
        for (const auto& name : directory_names_at(dir_fd))
            if (!is_resumable_part_name(name)) remove_tree_at(dir_fd, name);
    } catch (...) {  // best effort, as remove_tree_at
    }
}

}  // namespace

long part_file_pid(std::string_view name) noexcept {
    const auto mark = name.rfind(".part.");
    if (mark == std::string_view::npos || mark == 0) return -1;
    const std::string_view digits = name.substr(mark + 6);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos)
        return -1;
    long pid = 0;
    for (const char c : digits) pid = pid * 10 + (c - '0');
    return pid;
}

result<scratch_dir> claim_scratch_dir(int parent_fd, const std::filesystem::path& parent, const std::string& prefix) {
    scratch_dir out;
    out.parent_ = unique_fd(::fcntl(parent_fd, F_DUPFD_CLOEXEC, 0));
    if (!out.parent_) return errno_error("cannot open directory", parent, errno);
    const unsigned me = ::geteuid();
    // Every leftover no live run holds, locked; the one with partial downloads is adopted.
    std::vector<std::pair<std::string, unique_fd>> leftovers;
    for (const auto& name : directory_names_at(parent_fd))
        if (name.starts_with(prefix))
            if (unique_fd fd = take_unheld_dir(parent_fd, name, me)) leftovers.emplace_back(name, std::move(fd));
    const auto has_parts = [](int fd) {
        const auto names = directory_names_at(fd);
        return std::any_of(names.begin(), names.end(), [](const std::string& n) { return is_resumable_part_name(n); });
    };
    const auto adopt = std::find_if(leftovers.begin(), leftovers.end(),
                                    [&](auto& l) { return has_parts(l.second.get()); });
    for (auto it = leftovers.begin(); it != leftovers.end(); ++it) {
        if (it != adopt) {
            remove_tree_at(parent_fd, it->first, me);  // nothing of it would be resumed
            continue;
        }
        keep_only_parts(it->second.get());
        out.fd_ = std::move(it->second);
        out.name_ = it->first;
        out.adopted_ = true;
    }
    if (!out.fd_) {
        out.name_ = prefix + random_suffix();
        if (::mkdirat(parent_fd, out.name_.c_str(), 0700) != 0)
            return errno_error("cannot create a scratch directory", parent / out.name_, errno);
        out.fd_ = take_unheld_dir(parent_fd, out.name_, me);
        if (!out.fd_)
            return make_error(error_code::filesystem, "cannot lock a new scratch directory")
                .with_path((parent / out.name_).string());
    }
    out.path_ = parent / out.name_;
    return out;
}

void scratch_dir::release() noexcept {
    if (!fd_) return;
    keep_only_parts(fd_.get());
    bool empty = false;
    try {
        empty = directory_names_at(fd_.get()).empty();
    } catch (...) {}
    // Still under our lock: a run that opened it meanwhile finds the name gone once it holds the lock.
    if (empty && parent_) ::unlinkat(parent_.get(), name_.c_str(), AT_REMOVEDIR);
    fd_.reset();
    parent_.reset();
}

std::uint64_t remove_unheld_scratch_dirs(int parent_fd, const std::string& prefix,
                                         std::optional<unsigned> owner) noexcept {
    std::uint64_t freed = 0;
    try {
        for (const auto& name : directory_names_at(parent_fd)) {
            if (!name.starts_with(prefix)) continue;
            const unique_fd held = take_unheld_dir(parent_fd, name, owner);
            if (held) freed += remove_tree_at(parent_fd, name, owner);
        }
    } catch (...) {}
    return freed;
}

}  // namespace redist
