// Internal: a zstd copy of an xz archive's tar stream, for mirrors that serve
// fleets (`redist mirror --recompress zstd`). xz decodes at about 30 MB/s per
// core; zstd at about ten times that, for some 10-15 % more bytes.
//
// The copy is several independent zstd frames, each of `frame_bytes` of tar
// and recording its content size, so that a reader may decode frames in
// parallel. The result carries what a client needs to trust the copy: the
// SHA-256 of the decoded tar (the same for the original and the copy), its
// hash list with one piece per frame (so that a client hashes each frame as it
// decodes it, on any core), and the copy's own SHA-256 and size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "redist/error.hpp"

namespace redist {

struct recompress_options {
    int level = 12;                                  // zstd level: 12 is near xz's size at a fraction of -19's time
    std::size_t frame_bytes = std::size_t{8} << 20;  // tar bytes per frame
    unsigned threads = 1;                            // xz decoder and zstd compressor threads
};

struct recompressed {
    std::string tar_sha256;      // of the decoded tar stream
    std::uint64_t tar_size = 0;  // its bytes
    std::string sha256;          // of the zstd copy
    std::uint64_t size = 0;      // the copy's bytes
    // The tar's hash list (archive/sha256.hpp file_digester) with pieces of
    // frame_bytes; 0 and "" when frame_bytes is no piece size a record may
    // state (recompressed.hpp: a power of two from 64 KiB to 64 MiB).
    std::uint64_t tar_piece_bytes = 0;
    std::string tar_list_sha256;
};

// Reads the .tar.xz at `xz_path` (a regular file, already verified by the
// caller) and hands the zstd copy to `write` in order. Outcomes: ok |
// bad_archive (not a valid xz stream) | filesystem (cannot read) | whatever
// `write` returns | internal (a library failed to start).
result<recompressed> recompress_xz_to_zstd(const std::filesystem::path& xz_path,
                                           const std::function<result<void>(const std::byte*, std::size_t)>& write,
                                           const recompress_options& options = {});

// The digest of the tree the zstd copy at `copy_path` unpacks to (unpack.hpp
// tree_digest), unpacked as a client unpacks it, into `stage_dir` (existing
// and empty; the caller removes it). The decoded tar must be `made`'s (its
// hash list where it has one, else its SHA-256), so the tree is the
// original's. Outcomes: ok | integrity (another tar) | bad_archive |
// unsafe_archive | filesystem | internal.
result<std::string> copy_tree_digest(const std::filesystem::path& copy_path, const std::filesystem::path& stage_dir,
                                     const recompressed& made);

}  // namespace redist
