// sha256_test.cpp — SHA-256 known answers (FIPS 180-2 / NIST vectors), chunk
// boundaries, file hashing and integrity messages.
#include "archive/sha256.hpp"

#include "model/manifest.hpp"
#include "support.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::string kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const std::string kAbc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
const std::string k448Input = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
const std::string k448 = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
const std::string kMillionA = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

fs::path scratch_dir(const std::string& name) {
    const fs::path dir = fs::path(REDIST_TEST_SCRATCH) / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

void write_file(const fs::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

std::string random_bytes(std::size_t size, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> dist(0, 255);
    std::string out(size, '\0');
    for (auto& c : out) c = static_cast<char>(dist(gen));
    return out;
}

// An independent oracle: coreutils' sha256sum, when it is installed.
std::string sha256sum_of(const fs::path& path) {
    const std::string cmd = "sha256sum '" + path.string() + "' 2>/dev/null";
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) return {};
    char buf[128] = {};
    std::string out;
    if (std::fgets(buf, sizeof buf, pipe) != nullptr) out = buf;
    ::pclose(pipe);
    return out.substr(0, std::min<std::size_t>(out.size(), 64));
}

}  // namespace

TEST_CASE("sha256 known answers", "[verify]") {
    CHECK(redist::sha256_hex("") == kEmpty);
    CHECK(redist::sha256_hex("abc") == kAbc);
    CHECK(redist::sha256_hex(k448Input) == k448);
    CHECK(redist::sha256_hex(std::string(1'000'000, 'a')) == kMillionA);
}

TEST_CASE("sha256 million 'a' fed in odd-sized chunks", "[verify]") {
    redist::sha256_hasher h;
    const std::string chunk(997, 'a');  // prime: chunk ends never align with blocks
    std::size_t left = 1'000'000;
    while (left > 0) {
        const std::size_t n = std::min(left, chunk.size());
        h.update(chunk.data(), n);
        left -= n;
    }
    CHECK(h.bytes_hashed() == 1'000'000);
    CHECK(h.finish_hex() == kMillionA);
}

TEST_CASE("incremental updates split around the padding boundaries", "[verify]") {
    // 55/56 bytes is where the length field stops fitting in the last block;
    // 63/64/65 straddle a block. Every split of every such length must agree
    // with the one-shot digest.
    const std::string data = random_bytes(200, 42);
    for (std::size_t len : {0u, 1u, 54u, 55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 127u, 128u, 129u, 200u}) {
        const std::string input = data.substr(0, len);
        const std::string whole = redist::sha256_hex(input);
        for (std::size_t split = 0; split <= len; ++split) {
            redist::sha256_hasher h;
            h.update(std::string_view(input).substr(0, split));
            h.update(std::string_view(input).substr(split));
            INFO("len=" << len << " split=" << split);
            REQUIRE(h.bytes_hashed() == len);
            REQUIRE(h.finish_hex() == whole);
        }
        // Byte-at-a-time too.
        redist::sha256_hasher h;
        for (char c : input) h.update(&c, 1);
        REQUIRE(h.finish_hex() == whole);
    }
    // The NIST 448-bit vector is exactly 56 bytes: split it everywhere as well.
    REQUIRE(k448Input.size() == 56);
    for (std::size_t split = 0; split <= k448Input.size(); ++split) {
        redist::sha256_hasher h;
        h.update(std::string_view(k448Input).substr(0, split));
        h.update(std::string_view(k448Input).substr(split));
        REQUIRE(h.finish_hex() == k448);
    }
}

TEST_CASE("finish_hex resets the hasher", "[verify]") {
    redist::sha256_hasher h;
    h.update("abc");
    CHECK(h.bytes_hashed() == 3);
    CHECK(h.finish_hex() == kAbc);
    CHECK(h.bytes_hashed() == 0);
    CHECK(h.finish_hex() == kEmpty);  // nothing hashed since the reset
    h.update("ab");
    h.update("c");
    CHECK(h.finish_hex() == kAbc);
}

TEST_CASE("sha256_hasher is movable", "[verify]") {
    redist::sha256_hasher a;
    a.update("ab");
    redist::sha256_hasher b(std::move(a));
    b.update("c");
    CHECK(b.finish_hex() == kAbc);
    redist::sha256_hasher c;
    c = std::move(b);
    c.update("abc");
    CHECK(c.finish_hex() == kAbc);
}

TEST_CASE("sha256_file streams files larger than its buffer", "[verify]") {
    const fs::path dir = scratch_dir("file");
    // 2.5 MiB + 3: several full 1 MiB reads and a ragged tail.
    const std::string data = random_bytes((5u << 19) + 3, 7);
    const fs::path path = dir / "blob.bin";
    write_file(path, data);

    auto digest = redist::sha256_file(path);
    REQUIRE(digest.ok());
    CHECK(*digest == redist::sha256_hex(data));
    const std::string oracle = sha256sum_of(path);
    if (!oracle.empty()) CHECK(*digest == oracle);

    const fs::path empty = dir / "empty";
    write_file(empty, "");
    auto empty_digest = redist::sha256_file(empty);
    REQUIRE(empty_digest.ok());
    CHECK(*empty_digest == kEmpty);
}

TEST_CASE("sha256_file reports a missing file as a filesystem error", "[verify]") {
    const fs::path dir = scratch_dir("missing");
    auto digest = redist::sha256_file(dir / "nope");
    REQUIRE_FALSE(digest.ok());
    CHECK(digest.error_value().code == redist::error_code::filesystem);
    CHECK(digest.error_value().path == (dir / "nope").string());
    CHECK(digest.error_value().message.find("cannot open") != std::string::npos);

    // A directory opens but cannot be read.
    auto dir_digest = redist::sha256_file(dir);
    REQUIRE_FALSE(dir_digest.ok());
    CHECK(dir_digest.error_value().code == redist::error_code::filesystem);
}

TEST_CASE("is_sha256_hex", "[verify]") {
    CHECK(redist::is_sha256_hex(kAbc));
    CHECK(redist::is_sha256_hex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
    CHECK_FALSE(redist::is_sha256_hex(""));
    CHECK_FALSE(redist::is_sha256_hex(kAbc.substr(1)));
    CHECK_FALSE(redist::is_sha256_hex(kAbc + "0"));
    std::string bad = kAbc;
    bad[10] = 'g';
    CHECK_FALSE(redist::is_sha256_hex(bad));
}

TEST_CASE("check_integrity", "[verify]") {
    const std::string url = "https://example.invalid/a.tar.xz";
    CHECK(redist::check_integrity(3, kAbc, 3, kAbc, url).ok());
    // Upper-case digests in a manifest still match.
    std::string upper = kAbc;
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    CHECK(redist::check_integrity(3, upper, 3, kAbc, url).ok());

    auto size = redist::check_integrity(4, kAbc, 3, kAbc, url);
    REQUIRE_FALSE(size.ok());
    CHECK(size.error_value().code == redist::error_code::integrity);
    CHECK(size.error_value().message == "size mismatch");
    CHECK(size.error_value().expected == "4");
    CHECK(size.error_value().actual == "3");
    CHECK(size.error_value().url == url);

    auto hash = redist::check_integrity(3, kAbc, 3, kEmpty, url);
    REQUIRE_FALSE(hash.ok());
    CHECK(hash.error_value().code == redist::error_code::integrity);
    CHECK(hash.error_value().message == "sha256 mismatch");
    CHECK(hash.error_value().expected == kAbc);
    CHECK(hash.error_value().actual == kEmpty);
    const std::string line = hash.error_value().describe();
    CHECK(line.find(url) != std::string::npos);
    CHECK(line.find(kAbc) != std::string::npos);
    CHECK(line.find(kEmpty) != std::string::npos);

    // Credentials never appear in the error.
    auto secret = redist::check_integrity(4, kAbc, 3, kAbc, "https://user:pw@host/x");
    REQUIRE_FALSE(secret.ok());
    CHECK(secret.error_value().describe().find("pw@") == std::string::npos);
}

// ---- receipt digests: plain SHA-256 up to one piece, a hash list above -----------------

namespace {

std::string pattern_bytes(std::size_t size) {
    std::string out(size, '\0');
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<char>(i % 251);
    return out;
}

std::string piece_list_oracle(const std::string& data, std::size_t piece) {
    return redist_test::receipt_digest_oracle(data, piece);
}

std::string digest_in_chunks(const std::string& data, std::uint64_t piece, std::size_t chunk) {
    redist::file_digester d(piece);
    for (std::size_t at = 0; at < data.size(); at += chunk)
        d.update(data.data() + at, std::min(chunk, data.size() - at));
    CHECK(d.bytes_hashed() == data.size());
    return d.finish_hex();
}

}  // namespace

TEST_CASE("file_digester: a known answer for a three-piece file", "[verify][pieces]") {
    // Python: pcs = [sha256(d[i:i+65536]).digest() for i in range(0, len(d), 65536)];
    //         sha256(b''.join(pcs)).hexdigest(), d = bytes(i % 251 for i in range(200000))
    const std::string data = pattern_bytes(200000);
    CHECK(digest_in_chunks(data, 65536, data.size()) ==
          "bf2187045a84f25369fb8ca6a17623571e97266c1c640e6ed3c1a4e99189dad7");
    CHECK(redist::sha256_hex(data) == "e24bc62381f1224fbbb74688663f8f9743b9680b193edd666835e97b06e730eb");
    CHECK(piece_list_oracle(data, 65536) == "bf2187045a84f25369fb8ca6a17623571e97266c1c640e6ed3c1a4e99189dad7");
}

TEST_CASE("file_digester: one piece or less is the plain SHA-256", "[verify][pieces]") {
    CHECK(redist::file_digester(65536).finish_hex() == kEmpty);
    CHECK(digest_in_chunks("abc", 65536, 1) == kAbc);
    // Exactly one piece: no list (a piece is closed only when a byte follows).
    const std::string one = pattern_bytes(65536);
    CHECK(digest_in_chunks(one, 65536, 65536) == "4b640d85ab3ba30fd02c9fc9db4a8928f416322ad27022ea58a65aaee68a4df2");
    CHECK(digest_in_chunks(one, 65536, 1000) == redist::sha256_hex(one));
    // One byte more: two pieces.
    const std::string two = pattern_bytes(65537);
    CHECK(digest_in_chunks(two, 65536, 7) == piece_list_oracle(two, 65536));
    CHECK(digest_in_chunks(two, 65536, 7) != redist::sha256_hex(two));
    // Piece size 0: plain whatever the size.
    const std::string big = random_bytes(300000, 5);
    CHECK(digest_in_chunks(big, 0, 4096) == redist::sha256_hex(big));
}

TEST_CASE("file_digester does not depend on how the bytes are fed", "[verify][pieces]") {
    const std::string data = random_bytes(5 * 65536 + 123, 9);
    const std::string expected = piece_list_oracle(data, 65536);
    for (const std::size_t chunk : {std::size_t{1}, std::size_t{63}, std::size_t{65535}, std::size_t{65536},
                                    std::size_t{65537}, std::size_t{200000}, data.size()}) {
        INFO("chunk " << chunk);
        CHECK(digest_in_chunks(data, 65536, chunk) == expected);
    }
}

TEST_CASE("piece_list_hex: raw piece digests to the file's digest", "[verify][pieces]") {
    const std::string data = random_bytes(3 * 65536 + 5, 11);
    std::vector<std::array<unsigned char, 32>> pieces;
    for (std::size_t at = 0; at < data.size(); at += 65536) {
        redist::sha256_hasher h;
        h.update(std::string_view(data).substr(at, 65536));
        pieces.push_back(h.finish_bytes());
    }
    CHECK(redist::piece_list_hex(pieces) == piece_list_oracle(data, 65536));
    pieces.resize(1);
    CHECK(redist::piece_list_hex(pieces) == redist::sha256_hex(std::string_view(data).substr(0, 65536)));
    CHECK(redist::piece_list_hex({}) == kEmpty);
}

TEST_CASE("file_digest and the receipt's piece rule", "[verify][pieces]") {
    const fs::path dir = scratch_dir("file_digest");
    const std::string data = random_bytes(3u << 20, 3);
    write_file(dir / "f", data);
    auto pieces = redist::file_digest(dir / "f", 1u << 20);
    REQUIRE(pieces.ok());
    CHECK(*pieces == piece_list_oracle(data, 1u << 20));
    auto plain = redist::file_digest(dir / "f", 0);
    REQUIRE(plain.ok());
    CHECK(*plain == redist::sha256_hex(data));
    const std::string by_sha256sum = sha256sum_of(dir / "f");
    if (!by_sha256sum.empty()) CHECK(*plain == by_sha256sum);
    auto missing = redist::file_digest(dir / "absent", 1u << 20);
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error_value().code == redist::error_code::filesystem);

    CHECK(redist::piece_size_for(0) == 0);
    CHECK(redist::piece_size_for(redist::receipt_piece_bytes) == 0);
    CHECK(redist::piece_size_for(redist::receipt_piece_bytes + 1) == redist::receipt_piece_bytes);
    CHECK(redist::valid_piece_size(0));
    CHECK(redist::valid_piece_size(redist::receipt_piece_bytes));
    CHECK(redist::valid_piece_size(64u << 10));
    CHECK(redist::valid_piece_size(1u << 30));
    CHECK_FALSE(redist::valid_piece_size(32u << 10));
    CHECK_FALSE(redist::valid_piece_size(std::uint64_t{2} << 30));
    CHECK_FALSE(redist::valid_piece_size((8u << 20) + 1));
}
