// recompressed_sidecar.hpp (internal) — reading and writing a mirror's
// recompressed_<label>.json sidecar (the record's types and its format:
// redist/recompressed.hpp): its names beside the manifest, its limits, the
// copy's relative_path, the JSON both ways, and the check that a record
// belongs to a manifest. Implemented in manifest.cpp, with the other readers
// of a release's documents; used by resolve (reading a mirror's copies), the
// mirror (writing them) and the recompressor (the piece sizes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "redist/error.hpp"
#include "redist/manifest.hpp"
#include "redist/recompressed.hpp"

namespace redist {

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

}  // namespace redist
