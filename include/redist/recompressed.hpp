// redist/recompressed.hpp — a mirror's recompressed copies: the sidecar
// document recompressed_<label>.json beside redistrib_<label>.json.
//
//   {"format": "redist-recompressed-2", "release_label": "9.19.0",
//    "manifest_sha256": "<SHA-256 of the redistrib_<label>.json bytes>",
//    "copies": [{"original_sha256", "original_size", "relative_path",
//                "compression": "zstd", "sha256", "size", "tar_sha256",
//                "tar_size", "tar_piece_bytes", "tar_list_sha256", "tree_sha256"}, ...]}
//
// and its detached Ed25519 signature, recompressed_<label>.json.sig (64 raw
// bytes, signing.hpp). `redist mirror --recompress zstd --sign-key KEY`
// writes both; fetch, lock and sync read them from the directory the
// manifest was read from and may install a copy instead of its original
// archive (install.hpp) only when the record's signature is by a key the
// user trusts (source_policy::trusted_keys). The record binds NVIDIA's
// manifest (its SHA-256), each original (SHA-256 and size) and what its copy
// decodes to (the tar's SHA-256 and size): a mirror is transport, and a copy
// is never trusted on the mirror's word alone. A copy may also record the
// decoded tar's hash list (tar_piece_bytes, tar_list_sha256: the SHA-256 of
// the raw SHA-256 digests of its consecutive pieces, as receipts record large
// files, archive/sha256.hpp): its pieces are hashed on many cores at once
// while the frames decode, where the tar's one SHA-256 is a single core's
// pass. And it may record the tree it unpacks to (tree_sha256: each entry's
// path, kind, mode, times, size, content digest as its receipt records it,
// and link target; archive/unpack.hpp tree_digest): that is checked instead,
// so no byte is hashed twice (the files are digested for the receipt
// anyway) and the tar is not hashed at all. With a tree or a list, what
// lands or is decoded is checked in full before the commit, so the copy's
// own sha256 (a sequential pass over its bytes) is not computed; without
// either, the bytes are checked against sha256 as they stream. A reader that
// does not know these fields checks the list or tar_sha256 instead.
// NVIDIA's manifest stays byte
// for byte, so --manifest-sha256 and locks keep pinning it. SECURITY.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

struct recompressed_copy {
    std::string original_sha256;      // the manifest's sha256 of the original archive (lower case)
    std::uint64_t original_size = 0;  // the manifest's size of the original archive
    std::string relative_path;        // the original's, with .tar.xz/.txz replaced by .tar.zst
    std::string sha256;               // of the copy's bytes (lower case)
    std::uint64_t size = 0;           // the copy's bytes
    std::string tar_sha256;           // of the decoded tar stream (lower case)
    std::uint64_t tar_size = 0;       // the decoded tar stream's bytes
    // The decoded tar's hash list: the piece size (0: the copy records no
    // list) and the list's digest (lower case). A record states both or neither.
    std::uint64_t tar_piece_bytes = 0;
    std::string tar_list_sha256;
    // The digest of the tree the copy unpacks to (archive/unpack.hpp
    // tree_digest: every entry's path, kind, mode, times, size, content
    // digest and link target); "" when the record has none.
    std::string tree_sha256;
};

struct recompressed_record {
    std::string release_label;
    std::string manifest_sha256;            // lower case
    std::vector<recompressed_copy> copies;  // one per original (original_sha256 unique)

    // The copy of the archive whose manifest sha256 is `original_sha256`
    // (either case), or null.
    const recompressed_copy* find(std::string_view original_sha256) const noexcept;
};

REDIST_API_END
}  // namespace redist
