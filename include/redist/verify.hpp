// redist/verify.hpp — streaming SHA-256 (OpenSSL EVP) and size accounting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

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

    // Lower-case hex digest of everything hashed so far, without finishing:
    // the hasher keeps its state and can continue (works on a copy of the
    // context; throws std::bad_alloc if OpenSSL cannot allocate it).
    std::string peek_hex() const;

private:
    struct ctx_deleter {
        void operator()(evp_md_ctx_st* ctx) const noexcept;
    };
    std::unique_ptr<evp_md_ctx_st, ctx_deleter> ctx_;
    std::uint64_t bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);

// Hashes a file by streaming it. Outcomes: ok (hex digest) | filesystem
// (cannot open or read; error.path set).
result<std::string> sha256_file(const std::filesystem::path& path);

// Hashes the first `length` bytes of a file (used to resume a partial
// download): on success `into` is replaced by a hasher holding exactly those
// bytes, ready to continue with the rest, and the hex digest of the prefix is
// returned. Outcomes: ok | filesystem (cannot open/read, or the file is
// shorter than `length`: expected/actual set; `into` is left untouched).
result<std::string> sha256_file_prefix(const std::filesystem::path& path, std::uint64_t length, sha256_hasher& into);

// True if `text` is 64 hex digits (either case).
bool is_sha256_hex(std::string_view text) noexcept;

// Checks an archive's final size and digest against the manifest. Outcomes:
// ok | integrity (message "size mismatch" or "sha256 mismatch", expected and
// actual set, url set to `where`).
result<void> check_integrity(std::uint64_t expected_size, std::string_view expected_sha256, std::uint64_t actual_size,
                             std::string_view actual_sha256, std::string_view where);

}  // namespace redist
