// redist/atomic_write.hpp — the one way redist writes a file.
//
// Every file the library and the tools write (lock files, SBOMs, project
// files, receipts, the journal, cache documents, the drift history) goes
// through atomic_write. Many of them are written where someone else may have
// put something first: a checkout holds whatever a pull request committed (a
// `redist.lock.tmp` symlink to /etc/shadow), a shared cache whatever another
// user planted. So the writer never opens a name it did not just create:
//  * the data goes to a temporary file with a random name beside the target,
//    created with O_CREAT|O_EXCL|O_NOFOLLOW (nothing planted at a name is
//    followed, truncated or reused);
//  * it is synced as asked and renamed over the target: rename(2) replaces a
//    symlink at the target, it never writes through it;
//  * on any failure the temporary file is removed and the target is unchanged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

// How much an atomic_write must survive.
enum class durability : std::uint8_t {
    none,      // rename only: a crash may leave the old or an empty file (caches)
    contents,  // fsync the data before the rename: never a torn file
    full,      // contents, then fsync the directory: the rename itself is durable
};

// Replaces `path` with `bytes` atomically, as described above: writes
// "<path>.tmp.<16 random hex digits>", syncs per `how`, renames it over
// `path`, then syncs the directory for durability::full. A new file gets
// `mode` less the process umask (default 0644 & ~umask), whatever file was
// at `path` before. Outcomes: ok | filesystem (the message names the step
// and the path: cannot create, write, sync or rename into place).
result<void> atomic_write(const std::filesystem::path& path, std::string_view bytes, durability how,
                          unsigned mode = 0644);

REDIST_API_END
}  // namespace redist
