// redist/recompressed.hpp — a mirror's recompressed copies: the sidecar
// document recompressed_<label>.json beside redistrib_<label>.json.
//
//   {"format": "redist-recompressed-2", "release_label": "9.19.0",
//    "manifest_sha256": "<SHA-256 of the redistrib_<label>.json bytes>",
//    "copies": [{"original_sha256", "original_size", "relative_path",
//                "compression": "zstd", "sha256", "size", "tar_sha256",
//                "tar_size", "tar_piece_bytes", "tar_list_sha256"}, ...]}
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
// pass. A reader that does not know these fields checks tar_sha256 instead.
// NVIDIA's manifest stays byte
// for byte, so --manifest-sha256 and locks keep pinning it. SECURITY.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

struct manifest;  // manifest.hpp

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
};

struct recompressed_record {
    std::string release_label;
    std::string manifest_sha256;            // lower case
    std::vector<recompressed_copy> copies;  // one per original (original_sha256 unique)

    // The copy of the archive whose manifest sha256 is `original_sha256`
    // (either case), or null.
    const recompressed_copy* find(std::string_view original_sha256) const noexcept;
};

inline constexpr std::string_view kRecompressedFormat = "redist-recompressed-2";
// The piece sizes a copy's hash list may have (powers of two).
inline constexpr std::uint64_t kMinTarPieceBytes = std::uint64_t{64} << 10;
inline constexpr std::uint64_t kMaxTarPieceBytes = std::uint64_t{64} << 20;
inline constexpr std::size_t kMaxRecompressedBytes = 4u << 20;

// "recompressed_<label>.json".
std::string recompressed_document_name(std::string_view label);
// "recompressed_<label>.json.sig": the record's detached signature.
std::string recompressed_signature_name(std::string_view label);
inline constexpr std::size_t kRecompressedSignatureBytes = 64;

// The copy's relative_path for an original: ".tar.xz"/".txz" replaced by
// ".tar.zst"; empty when the original is no .tar.xz/.txz (it gets no copy).
std::string recompressed_copy_path(std::string_view original_relative_path);

// Hex lower case, sizes as decimal strings, copies in the record's order.
std::string recompressed_to_json(const recompressed_record& record);

// Parses a sidecar. `source` (its URL) is only used in errors.
// Outcomes: ok | bad_manifest (source and json_path name the problem):
// broken JSON, a duplicate key, a missing field, a format other than
// redist-recompressed-2, a compression other than zstd, a digest that is not
// 64 hex digits, a size that is not a decimal string that fits 64 bits, a
// relative_path that fails artifact_path_problem() or does not end in
// .tar.zst, a second copy of one original, a document over 4 MiB, a
// tar_piece_bytes that is not a power of two from 64 KiB to 64 MiB, or only one
// of tar_piece_bytes and tar_list_sha256.
// Never crashes on any input (fuzzed: tests/fuzz/recompressed_fuzz.cpp).
result<recompressed_record> parse_recompressed(std::string_view json, std::string_view source);

// Whether the record belongs to `m`, whose bytes hash to `manifest_sha256`:
// the same manifest_sha256 (either case), the manifest's release_label when
// both have one, and every copy the copy of one .tar.xz/.txz artifact of `m`
// of the recorded size (its relative_path recompressed_copy_path() of that
// artifact's).
// Outcomes: ok | bad_manifest (source = `source`, json_path names the field).
result<void> check_recompressed_for(const recompressed_record& record, const manifest& m,
                                    std::string_view manifest_sha256, std::string_view source);

REDIST_API_END
}  // namespace redist
