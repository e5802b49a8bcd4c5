// archive/sha256.hpp — streaming SHA-256 (OpenSSL EVP) and size accounting.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/manifest.hpp"  // is_sha256_hex
#include "redist/error.hpp"

// Forward declaration keeps <openssl/evp.h> out of public headers.
struct evp_md_ctx_st;

namespace redist {

// Incremental SHA-256. Move-only; holds an EVP_MD_CTX.
class sha256_hasher {
public:
    sha256_hasher();  // throws std::bad_alloc if OpenSSL cannot allocate a context
    ~sha256_hasher();
    sha256_hasher(sha256_hasher&&) noexcept;
    sha256_hasher& operator=(sha256_hasher&&) noexcept;
    sha256_hasher(const sha256_hasher&) = delete;
    sha256_hasher& operator=(const sha256_hasher&) = delete;

    void update(const void* data, std::size_t size);
    void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
    std::uint64_t bytes_hashed() const noexcept { return bytes_; }

    // Lower-case hex digest of everything hashed so far. The hasher is reset
    // afterwards and can be reused.
    std::string finish_hex();
    // The same, as the 32 raw bytes of the digest.
    std::array<unsigned char, 32> finish_bytes();

private:
    struct ctx_deleter {
        void operator()(evp_md_ctx_st* ctx) const noexcept;
    };
    std::unique_ptr<evp_md_ctx_st, ctx_deleter> ctx_;
    std::uint64_t bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);

// ---- what receipts record of a file's bytes ------------------------------------------
//
// A file of at most `piece_size` bytes is recorded by its SHA-256, as
// sha256sum prints it. A larger file is recorded by the SHA-256 of the
// concatenated raw SHA-256 digests of its consecutive `piece_size`-byte
// pieces (the last one shorter), in order: a hash list. Its pieces can be
// hashed at once on many cores, so that a 200 MiB library does not leave the
// rest of its bytes to one core after the archive's slowest xz block
// (bench/RESULTS.md). It binds the content as SHA-256 does: a collision of
// two lists of the same length is a collision of SHA-256 in the list or in a
// piece. By hand, with coreutils alone:
//   split -b 8M --filter=sha256sum FILE | cut -c1-64 | tr -d '\n' | tr a-f A-F | basenc -d --base16 | sha256sum
//
// `piece_size` 0 means the plain SHA-256 whatever the size (receipts written
// before piece lists, and what a file record says when it has no piece_size).
inline constexpr std::uint64_t receipt_piece_bytes = std::uint64_t{8} << 20;

// What a file of `size` bytes records as its piece size now: 0 (plain) up to
// receipt_piece_bytes, else receipt_piece_bytes.
constexpr std::uint64_t piece_size_for(std::uint64_t size) noexcept {
    return size > receipt_piece_bytes ? receipt_piece_bytes : 0;
}

// A piece size that a receipt or tree list may state: 0, or a power of two
// from 64 KiB to 1 GiB.
bool valid_piece_size(std::uint64_t piece_size) noexcept;

// Computes that digest from the bytes in order. With one piece or fewer (or
// piece_size 0) the result is the plain SHA-256.
class file_digester {
public:
    explicit file_digester(std::uint64_t piece_size);
    void update(const void* data, std::size_t size);
    std::uint64_t bytes_hashed() const noexcept { return total_; }
    std::string finish_hex();  // once

private:
    std::uint64_t piece_size_;
    std::uint64_t in_piece_ = 0;  // bytes of the current piece hashed so far
    bool list_started_ = false;   // a piece was closed: the digest is a hash list
    std::uint64_t total_ = 0;
    sha256_hasher piece_;
    sha256_hasher list_;
};

// The digest of pieces hashed separately (raw SHA-256 of each, in order): the
// plain digest when there is one piece.
std::string piece_list_hex(const std::vector<std::array<unsigned char, 32>>& pieces);

// Streams a file through file_digester(piece_size). Outcomes: ok (hex
// digest) | filesystem (cannot open or read; error.path set).
result<std::string> file_digest(const std::filesystem::path& path, std::uint64_t piece_size);
// The same for an open file, read from its start whatever the descriptor's
// offset; `shown_as` names it in errors.
result<std::string> file_digest(int fd, std::uint64_t piece_size, const std::filesystem::path& shown_as);

// The raw SHA-256 of bytes [offset, offset + length) of a file: one piece of
// a hash list, hashed on its own (`redist verify` hashes the pieces of a file
// on all cores). Outcomes: ok | filesystem (cannot open or read, or the file
// ends before offset + length: expected/actual set).
result<std::array<unsigned char, 32>> sha256_file_range(const std::filesystem::path& path, std::uint64_t offset,
                                                        std::uint64_t length);

// file_digest(path, 0): the plain SHA-256 of a file.
result<std::string> sha256_file(const std::filesystem::path& path);

// Checks an archive's final size and digest against the manifest. Outcomes:
// ok | integrity (message "size mismatch" or "sha256 mismatch", expected and
// actual set, url set to `where`).
result<void> check_integrity(std::uint64_t expected_size, std::string_view expected_sha256, std::uint64_t actual_size,
                             std::string_view actual_sha256, std::string_view where);

}  // namespace redist
