// flock(2) on a lock file: the prefix lock (exclusive for writers, shared for
// `verify`), the cache's per-blob locks and the drift history's per-URL locks
// (internal to the library). The one place that opens a lock file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>

#include "redist/error.hpp"
#include "support/unique_fd.hpp"

namespace redist {

enum class lock_mode : std::uint8_t {
    exclusive,  // a writer: nobody else holds the lock
    shared,     // a reader: no writer holds it, other readers may
};

enum class lock_wait : std::uint8_t {
    block,     // wait until the lock is free (on_wait is called once first)
    try_once,  // do not wait: an empty descriptor when another process holds it
};

// Opens `name` under the directory `dir_fd` (AT_FDCWD: a path) and takes a
// flock in `mode`. The lock file is opened without following a symlink at its
// name and must be a regular file (O_NONBLOCK, so that a FIFO planted there
// cannot block the open). It is opened read-only (flock needs no write
// access, so a lock file that another user of a shared cache created can be
// locked too), created when missing and opened as it is when creating is
// refused (EACCES, EROFS: a reader without write access to the directory).
// With lock_wait::block and another process holding the lock in a
// conflicting mode, calls on_wait once, then waits (EINTR is retried). The
// lock lasts until the descriptor is closed (also when the process dies,
// even by SIGKILL). `shown_as` names the file in errors.
// Outcomes: ok (with lock_wait::try_once, an empty descriptor when the lock
// is held elsewhere) | filesystem ("cannot open lock file: <strerror>",
// "lock file is not a regular file", "cannot lock: <strerror>").
result<unique_fd> lock_file_at(int dir_fd, const char* name, lock_mode mode, lock_wait wait,
                               const std::function<void()>& on_wait, const std::filesystem::path& shown_as);

// lock_file_at for a path. Outcomes: as lock_file_at.
result<unique_fd> lock_file(const std::filesystem::path& path, lock_mode mode, lock_wait wait,
                            const std::function<void()>& on_wait = {});

}  // namespace redist
