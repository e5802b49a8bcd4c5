// cache_access.hpp (internal) — what the three files of the cache share:
// which files count as ours, names for temporaries, and how a checked
// directory is reached whatever happens to its name. The cache is split by
// what it stores: the blob store, its trust check and documents (cache.cpp),
// extracted trees (cache_trees.cpp), and listing and pruning (cache_prune.cpp).
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <string>

namespace redist::caching {

// Files that only we (or root, who can do anything anyway) could have written.
bool written_by_us(const struct stat& st);

// A name for a temporary file or directory that no other thread or process
// of ours uses at the same time.
std::string unique_suffix();

// /proc/self/fd/<fd>: the directory itself, whatever happens to its name.
// Falls back to `path` where /proc is not mounted.
std::filesystem::path anchored(int fd, const std::filesystem::path& path);

}  // namespace redist::caching
