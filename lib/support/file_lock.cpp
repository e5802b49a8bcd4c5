// The lock file: see file_lock.hpp for the contract.
#include "support/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>

#include "support/posix_file.hpp"

namespace redist {

result<unique_fd> lock_file_at(int dir_fd, const char* name, lock_mode mode, lock_wait wait,
                               const std::function<void()>& on_wait, const std::filesystem::path& shown_as) {
    const int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    unique_fd fd(::openat(dir_fd, name, flags | O_CREAT, 0644));
    if (!fd && (errno == EACCES || errno == EROFS)) fd.reset(::openat(dir_fd, name, flags));
    if (!fd) return errno_error("cannot open lock file", shown_as, errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return errno_error("cannot open lock file", shown_as, errno);
    if (!S_ISREG(st.st_mode))
        return make_error(error_code::filesystem, "lock file is not a regular file").with_path(shown_as.string());
    const int op = mode == lock_mode::exclusive ? LOCK_EX : LOCK_SH;
    if (::flock(fd.get(), op | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK) return errno_error("cannot lock", shown_as, errno);
    if (wait == lock_wait::try_once) return unique_fd();
    if (on_wait) on_wait();
    while (::flock(fd.get(), op) != 0)
        if (errno != EINTR) return errno_error("cannot lock", shown_as, errno);
    return fd;
}

result<unique_fd> lock_file(const std::filesystem::path& path, lock_mode mode, lock_wait wait,
                            const std::function<void()>& on_wait) {
    return lock_file_at(AT_FDCWD, path.c_str(), mode, wait, on_wait, path);
}

}  // namespace redist
