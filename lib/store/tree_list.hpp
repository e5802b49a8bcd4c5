// tree_list.hpp — the file list of a cached extracted tree
// (<cache>/trees/<hex>/.redist-tree.json; see redist/cache.hpp), internal to
// the library. Its own header so that tests/fuzz/tree_list_fuzz.cpp can reach
// the reader: a shared cache is writable by another user, so the list is
// hostile input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "redist/prefix.hpp"

namespace redist {

struct tree_record {
    installed_file file;
    std::uint64_t ino = 0;   // of the cache's copy: a replaced file has another inode
    std::int64_t mtime = 0;  // of the cache's copy
    std::int64_t ctime = 0;  // of the cache's copy: any write, chmod or utime changes it
};

struct tree_list {
    std::string archive;      // the blob it came from: a tree moved to another name is refused
    bool hardlinked = false;  // hard-linked out once: ctime is no longer meaningful
    std::vector<tree_record> files;
};

std::string tree_list_json(const tree_list& list);

// nullopt for anything that is not a list of this format: broken JSON, an
// unknown key, a value of the wrong type, a piece size that is not valid.
std::optional<tree_list> parse_tree_list(const std::string& text);

// Every path stays in the tree and is listed once, nothing sits below a
// symlink (placing it would write through the link), files have a digest,
// and every symlink target is relative and resolves inside the tree. The
// list must name `sha256` as its archive.
bool valid_tree_list(const tree_list& list, const std::string& sha256);

}  // namespace redist
