// The zstd copy of an xz archive (lib/archive/recompress.hpp): the copy
// decodes to the same tar stream, in frames that record their sizes, and the
// digests it reports are those of the bytes it wrote and of the tar.
#include <catch2/catch.hpp>

#include "support.hpp"

#include <lzma.h>
#include <zstd.h>

#include <filesystem>
#include <string>

#include "archive/recompress.hpp"
#include "archive/sha256.hpp"

namespace fs = std::filesystem;
using redist_test::scratch;

namespace {

std::string xz_of(const std::string& plain) {
    std::string out(lzma_stream_buffer_bound(plain.size()), '\0');
    std::size_t pos = 0;
    REQUIRE(lzma_easy_buffer_encode(1, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const std::uint8_t*>(plain.data()),
                                    plain.size(), reinterpret_cast<std::uint8_t*>(out.data()), &pos,
                                    out.size()) == LZMA_OK);
    out.resize(pos);
    return out;
}

// Stands in for a tar stream: what recompress keeps is the bytes, not their format.
std::string payload(std::size_t size) {
    std::string s;
    s.reserve(size);
    std::uint32_t x = 12345;
    while (s.size() < size) {
        x = x * 1103515245u + 12345u;
        s += (x >> 16) % 7 == 0 ? std::string(100, 'a') : std::to_string(x);
    }
    s.resize(size);
    return s;
}

redist::result<redist::recompressed> recompress(const fs::path& xz, std::string& copy,
                                                const redist::recompress_options& o) {
    return redist::recompress_xz_to_zstd(
        xz,
        [&](const std::byte* data, std::size_t size) -> redist::result<void> {
            copy.append(reinterpret_cast<const char*>(data), size);
            return {};
        },
        o);
}

}  // namespace

TEST_CASE("recompressing an xz archive gives zstd frames of the same bytes", "[recompress]") {
    const fs::path dir = scratch("frames");
    const std::string plain = payload(3'000'000);
    redist_test::write(dir / "a.tar.xz", xz_of(plain));
    redist::recompress_options o;
    o.level = 3;
    o.frame_bytes = 1 << 20;
    std::string copy;
    auto r = recompress(dir / "a.tar.xz", copy, o);
    REQUIRE_OK(r);
    CHECK(r->tar_sha256 == redist::sha256_hex(plain));
    CHECK(r->tar_size == plain.size());
    CHECK(r->sha256 == redist::sha256_hex(copy));
    CHECK(r->size == copy.size());

    // Three frames of at most 1 MiB each, each recording its content size.
    std::size_t frames = 0;
    std::string decoded;
    for (std::size_t at = 0; at < copy.size(); ++frames) {
        const std::size_t n = ZSTD_findFrameCompressedSize(copy.data() + at, copy.size() - at);
        REQUIRE_FALSE(ZSTD_isError(n));
        const auto content = ZSTD_getFrameContentSize(copy.data() + at, n);
        REQUIRE(content != ZSTD_CONTENTSIZE_UNKNOWN);
        REQUIRE(content != ZSTD_CONTENTSIZE_ERROR);
        CHECK(content <= o.frame_bytes);
        std::string out(content, '\0');
        CHECK(ZSTD_decompress(out.data(), out.size(), copy.data() + at, n) == content);
        decoded += out;
        at += n;
    }
    CHECK(frames == 3);
    CHECK(decoded == plain);
    // The tar's hash list has one piece per frame.
    redist::file_digester list(o.frame_bytes);
    list.update(plain.data(), plain.size());
    CHECK(r->tar_piece_bytes == o.frame_bytes);
    CHECK(r->tar_list_sha256 == list.finish_hex());
    CHECK(r->tar_list_sha256 != r->tar_sha256);
}

TEST_CASE("a frame size that is no piece size gives no hash list", "[recompress]") {
    const fs::path dir = scratch("no-list");
    const std::string plain = payload(300'000);
    redist_test::write(dir / "a.tar.xz", xz_of(plain));
    redist::recompress_options o;
    o.level = 3;
    o.frame_bytes = 100'000;
    std::string copy;
    auto r = recompress(dir / "a.tar.xz", copy, o);
    REQUIRE_OK(r);
    CHECK(r->tar_sha256 == redist::sha256_hex(plain));
    CHECK(r->tar_piece_bytes == 0);
    CHECK(r->tar_list_sha256.empty());
}

TEST_CASE("an empty stream still gives one frame", "[recompress]") {
    const fs::path dir = scratch("empty");
    redist_test::write(dir / "e.tar.xz", xz_of(""));
    std::string copy;
    auto r = recompress(dir / "e.tar.xz", copy, {});
    REQUIRE_OK(r);
    CHECK(r->tar_size == 0);
    CHECK(r->tar_sha256 == redist::sha256_hex(""));
    CHECK(!copy.empty());
    CHECK(ZSTD_getFrameContentSize(copy.data(), copy.size()) == 0);
}

TEST_CASE("recompress refuses what is not a verified xz file", "[recompress]") {
    const fs::path dir = scratch("refuse");
    std::string copy;
    SECTION("corrupt xz") {
        std::string xz = xz_of(payload(100'000));
        xz[xz.size() / 2] = static_cast<char>(xz[xz.size() / 2] ^ 0x55);
        redist_test::write(dir / "bad.tar.xz", xz);
        auto r = recompress(dir / "bad.tar.xz", copy, {});
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::bad_archive);
    }
    SECTION("a symlink") {
        redist_test::write(dir / "real.tar.xz", xz_of("x"));
        fs::create_symlink(dir / "real.tar.xz", dir / "link.tar.xz");
        auto r = recompress(dir / "link.tar.xz", copy, {});
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::filesystem);
    }
    SECTION("a write that fails stops it") {
        redist_test::write(dir / "w.tar.xz", xz_of(payload(100'000)));
        auto r = redist::recompress_xz_to_zstd(dir / "w.tar.xz", [](const std::byte*, std::size_t) {
            return redist::result<void>(redist::make_error(redist::error_code::filesystem, "disk full"));
        });
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().message == "disk full");
    }
}
