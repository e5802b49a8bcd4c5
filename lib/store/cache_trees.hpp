// store/cache_trees.hpp (internal) — what the cache's extracted trees
// (cache_trees.cpp) tell the rest of the library besides blob_cache's own
// calls: a tree's file list, read for the dry run's forecast
// (pipeline/forecast.cpp). A friend of blob_cache (it reads the checked
// trees/ directory), declared here rather than as a member so that it is
// not part of the public API.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "redist/cache.hpp"
#include "redist/prefix.hpp"

namespace redist {

// The file list of the tree of blob `sha256` in `cache`, where its list is
// one we wrote and valid (as blob_cache::materialize_tree() checks it; the
// files themselves are not read): what installing from it would place,
// known before anything is unpacked (--dry-run's conflicts). nullopt: no
// such tree, or one whose list cannot be trusted.
std::optional<std::vector<installed_file>> tree_files(const blob_cache& cache, const std::string& sha256);

}  // namespace redist
