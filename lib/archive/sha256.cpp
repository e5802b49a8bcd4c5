// sha256.cpp — streaming SHA-256 through OpenSSL's EVP interface.
#include "archive/sha256.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <new>
#include <vector>

#include "support/hex.hpp"
#include "support/posix_file.hpp"

namespace redist {

namespace {

// Large reads keep syscall overhead negligible next to the hashing itself.
constexpr std::size_t kReadBuffer = 1u << 20;

// (Re)initializes a context for SHA-256. EVP_DigestInit_ex only fails on
// allocation failure or a broken provider setup; neither is recoverable here.
void init_sha256(EVP_MD_CTX* ctx) {
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) throw std::bad_alloc();
}

// Feeds up to `limit` bytes of the open file, from byte `offset`, into
// `hasher` (UINT64_MAX: all of it): a sha256_hasher or a file_digester. pread
// leaves the descriptor's offset alone, so a file just written through it
// reads from byte 0 as well. Returns the number of bytes read.
template <class Hasher>
result<std::uint64_t> stream_fd(int fd, const std::filesystem::path& path, std::uint64_t limit, Hasher& hasher,
                                std::uint64_t offset = 0) {
    // Advisory only: lets the kernel read ahead aggressively. Failure is harmless.
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    std::vector<unsigned char> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(kReadBuffer, limit)));
    std::uint64_t total = 0;
    while (total < limit) {
        const std::uint64_t want64 = std::min<std::uint64_t>(buffer.size(), limit - total);
        REDIST_TRY(const std::size_t got,
                   pread_some(fd, buffer.data(), static_cast<std::size_t>(want64), offset + total, path));
        if (got == 0) break;  // end of file
        hasher.update(buffer.data(), got);
        total += got;
    }
    return total;
}

template <class Hasher>
result<std::uint64_t> stream_file(const std::filesystem::path& path, std::uint64_t limit, Hasher& hasher,
                                  std::uint64_t offset = 0) {
    const unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return errno_error("cannot open file", path, errno);
    return stream_fd(fd.get(), path, limit, hasher, offset);
}

}  // namespace

std::string to_hex(const unsigned char* bytes, std::size_t size) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(size * 2, '\0');
    for (std::size_t i = 0; i < size; ++i) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 0x0f];
    }
    return out;
}

void sha256_hasher::ctx_deleter::operator()(evp_md_ctx_st* ctx) const noexcept { EVP_MD_CTX_free(ctx); }

sha256_hasher::sha256_hasher() : ctx_(EVP_MD_CTX_new()) {
    // A null from EVP_MD_CTX_new() is an allocation failure, not a crash.
    if (!ctx_) throw std::bad_alloc();
    init_sha256(ctx_.get());
}

sha256_hasher::~sha256_hasher() = default;
sha256_hasher::sha256_hasher(sha256_hasher&&) noexcept = default;
sha256_hasher& sha256_hasher::operator=(sha256_hasher&&) noexcept = default;

void sha256_hasher::update(const void* data, std::size_t size) {
    if (size == 0) return;
    // EVP_DigestUpdate cannot fail for SHA-256 on an initialized context.
    EVP_DigestUpdate(ctx_.get(), data, size);
    bytes_ += size;
}

std::string sha256_hasher::finish_hex() {
    const auto digest = finish_bytes();
    return to_hex(digest.data(), digest.size());
}

std::array<unsigned char, 32> sha256_hasher::finish_bytes() {
    std::array<unsigned char, 32> digest{};  // SHA-256 writes exactly 32 bytes
    EVP_DigestFinal_ex(ctx_.get(), digest.data(), nullptr);
    // Reset so the hasher can be reused (the contract in sha256.hpp).
    init_sha256(ctx_.get());
    bytes_ = 0;
    return digest;
}

std::string sha256_hex(std::string_view bytes) {
    sha256_hasher hasher;
    hasher.update(bytes);
    return hasher.finish_hex();
}

result<std::string> sha256_file(const std::filesystem::path& path) { return file_digest(path, 0); }

bool valid_piece_size(std::uint64_t piece_size) noexcept {
    if (piece_size == 0) return true;
    const bool power_of_two = (piece_size & (piece_size - 1)) == 0;
    return power_of_two && piece_size >= (std::uint64_t{64} << 10) && piece_size <= (std::uint64_t{1} << 30);
}

file_digester::file_digester(std::uint64_t piece_size) : piece_size_(piece_size) {}

void file_digester::update(const void* data, std::size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    total_ += size;
    if (piece_size_ == 0) return piece_.update(bytes, size);
    while (size > 0) {
        // A full piece is closed only when a byte follows it: a file of
        // exactly one piece keeps its plain digest.
        if (in_piece_ == piece_size_) {
            const auto digest = piece_.finish_bytes();
            list_.update(digest.data(), digest.size());
            list_started_ = true;
            in_piece_ = 0;
        }
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(size, piece_size_ - in_piece_));
        piece_.update(bytes, n);
        in_piece_ += n;
        bytes += n;
        size -= n;
    }
}

std::string file_digester::finish_hex() {
    if (!list_started_) return piece_.finish_hex();
    const auto last = piece_.finish_bytes();
    list_.update(last.data(), last.size());
    return list_.finish_hex();
}

std::string piece_list_hex(const std::vector<std::array<unsigned char, 32>>& pieces) {
    if (pieces.size() == 1) return to_hex(pieces.front().data(), pieces.front().size());
    sha256_hasher list;
    for (const auto& p : pieces) list.update(p.data(), p.size());
    return list.finish_hex();
}

result<std::string> file_digest(const std::filesystem::path& path, std::uint64_t piece_size) {
    file_digester digester(piece_size);
    REDIST_TRY_VOID(stream_file(path, UINT64_MAX, digester));
    return digester.finish_hex();
}

result<std::string> file_digest(int fd, std::uint64_t piece_size, const std::filesystem::path& shown_as) {
    file_digester digester(piece_size);
    REDIST_TRY_VOID(stream_fd(fd, shown_as, UINT64_MAX, digester));
    return digester.finish_hex();
}

result<std::array<unsigned char, 32>> sha256_file_range(const std::filesystem::path& path, std::uint64_t offset,
                                                        std::uint64_t length) {
    sha256_hasher hasher;
    REDIST_TRY(const std::uint64_t read, stream_file(path, length, hasher, offset));
    if (read != length) {
        return make_error(error_code::filesystem, "file is shorter than expected")
            .with_path(path.string())
            .with_expected_actual(std::to_string(offset + length), std::to_string(offset + read));
    }
    return hasher.finish_bytes();
}

result<void> check_integrity(std::uint64_t expected_size, std::string_view expected_sha256, std::uint64_t actual_size,
                             std::string_view actual_sha256, std::string_view where) {
    // Size first: a truncated download is the common case and the clearer message.
    if (expected_size != actual_size) {
        return make_error(error_code::integrity, "size mismatch")
            .with_url(std::string(where))
            .with_expected_actual(std::to_string(expected_size), std::to_string(actual_size));
    }
    // Manifests are lower-case, but compare case-insensitively to be safe.
    if (!equal_hex(expected_sha256, actual_sha256)) {
        return make_error(error_code::integrity, "sha256 mismatch")
            .with_url(std::string(where))
            .with_expected_actual(std::string(expected_sha256), std::string(actual_sha256));
    }
    return {};
}

}  // namespace redist
