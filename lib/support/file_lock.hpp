// flock(2) on a lock file: the prefix lock, exclusive for writers and shared
// for `verify` (internal to the library).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "redist/error.hpp"

namespace redist {

enum class lock_mode : std::uint8_t {
    exclusive,  // a writer: nobody else holds the lock
    shared,     // a reader: no writer holds it, other readers may
};

// Opens `name` under the directory `dir_fd` (AT_FDCWD: a path) and takes a
// flock in `mode`, calling on_wait once before blocking when another process
// holds it in a conflicting mode. The lock file is opened without following a
// symlink at its name and must be a regular file (O_NONBLOCK, so that a FIFO
// planted there cannot block the open). An exclusive lock creates the file;
// a shared one creates it when it can and otherwise opens it read-only (a
// reader without write access to the directory). Returns the descriptor; the
// lock lasts until it is closed (also when the process dies, even by
// SIGKILL). `shown_as` names the file in errors. Outcomes: ok | filesystem.
inline result<int> lock_file_at(int dir_fd, const char* name, lock_mode mode, const std::function<void()>& on_wait,
                                const std::filesystem::path& shown_as) {
    const int access = mode == lock_mode::exclusive ? O_RDWR : O_RDONLY;
    const int flags = access | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    int fd = ::openat(dir_fd, name, flags | O_CREAT, 0644);
    if (fd < 0 && mode == lock_mode::shared && (errno == EACCES || errno == EROFS)) fd = ::openat(dir_fd, name, flags);
    auto failure = [&](const std::string& why) {
        if (fd >= 0) ::close(fd);
        return make_error(error_code::filesystem, "cannot lock: " + why).with_path(shown_as.string());
    };
    if (fd < 0) return failure(std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) return failure(std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return failure("the lock file is not a regular file");
    const int op = mode == lock_mode::exclusive ? LOCK_EX : LOCK_SH;
    if (::flock(fd, op | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK) return failure(std::strerror(errno));
    if (on_wait) on_wait();
    while (::flock(fd, op) != 0)
        if (errno != EINTR) return failure(std::strerror(errno));
    return fd;
}

// An exclusive lock on `path` (see lock_file_at). Outcomes: ok | filesystem.
inline result<int> lock_file_exclusive(const std::filesystem::path& path, const std::function<void()>& on_wait) {
    return lock_file_at(AT_FDCWD, path.c_str(), lock_mode::exclusive, on_wait, path);
}

}  // namespace redist
