// Exclusive flock(2) on a lock file, shared by the prefix lock and the
// per-blob cache locks (internal to the library).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "redist/error.hpp"

namespace redist {

// Opens (creating) `path` and takes an exclusive flock, calling on_wait once
// before blocking when another process holds it. Returns the descriptor; the
// lock lasts until it is closed (also when the process dies, even by SIGKILL).
// Outcomes: ok | filesystem.
inline result<int> lock_file_exclusive(const std::filesystem::path& path, const std::function<void()>& on_wait) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    auto failure = [&](int err) {
        return make_error(error_code::filesystem, std::string("cannot lock: ") + std::strerror(err))
            .with_path(path.string());
    };
    if (fd < 0) return failure(errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK) {
        const int err = errno;
        ::close(fd);
        return failure(err);
    }
    if (on_wait) on_wait();
    while (::flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd);
        return failure(err);
    }
    return fd;
}

}  // namespace redist
