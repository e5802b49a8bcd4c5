// store/cache_file.hpp (internal) — how a file inside the cache is opened:
// by descriptor, checked with fstat on the opened descriptor. For the cache
// itself (cache.cpp) and the downloader's resumable .part files (sources.cpp);
// not part of the public API (redist/cache.hpp), which never hands out a
// raw descriptor.
#pragma once

#include <cstdint>
#include <filesystem>

#include "redist/error.hpp"

namespace redist {

// How a file in the cache is opened (see open_cache_file).
enum class cache_file_access : std::uint8_t {
    create_fresh,  // write-only; whatever is at the name (file, symlink, FIFO) is unlinked first, then
                   // created with O_EXCL|O_NOFOLLOW: a planted symlink is never followed or truncated
    read,          // read-only, O_NOFOLLOW; must be a regular file (a FIFO cannot hang us)
    append,        // write-only append, O_NOFOLLOW; must be a regular file with one link, owned by us
};

// Opens `path`, a file inside the cache, as `how` says, and returns the
// descriptor (the caller closes it). The checks are made with fstat on the
// opened descriptor, so they cannot race with a rename.
// Outcomes: ok | filesystem (the message says what was wrong with the file).
result<int> open_cache_file(const std::filesystem::path& path, cache_file_access how);

// A .part file that may be resumed: a regular file (not a symlink) with one
// link, owned by us, of 1..max_size bytes. Anything else is started over.
bool resumable_cache_file(const std::filesystem::path& path, std::uint64_t max_size);

}  // namespace redist
