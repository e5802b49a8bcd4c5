// Tests for redist/signing.hpp: Ed25519 keys from PEM files and detached
// signatures, against RFC 8032's first test vector (so that what redist signs
// is what any Ed25519 implementation signs), and every way a key file or a
// signature can be wrong.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <sys/stat.h>

#include "archive/signing.hpp"
#include "redist/signing.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

namespace {

// RFC 8032, section 7.1, TEST 1: the seed, the public key, and the signature of the empty message.
const char* kPrivatePem =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n"
    "-----END PRIVATE KEY-----\n";
const char* kPublicPem =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n"
    "-----END PUBLIC KEY-----\n";
const char* kPublicHex = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
const char* kEmptySignatureHex =
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24"
    "655141438e7a100b";
// sha256 of the public key's DER (302a300506032b6570032100 || key): what `openssl pkey -pubin -outform DER | sha256sum`
// prints.
const char* kFingerprint = "06e3fd8fda29bb60ab59557de61edb0aecdb231134be30e75b455f8e1b792fa9";

std::string from_hex(std::string_view hex) {
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
        out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
    return out;
}

fs::path write(const fs::path& dir, const std::string& name, const std::string& text) {
    redist_test::write(dir / name, text);
    return dir / name;
}

}  // namespace

TEST_CASE("signing: RFC 8032's key signs and verifies as the RFC says") {
    const fs::path dir = redist_test::scratch("signing_rfc");
    auto key = redist::signing_key::read(write(dir, "k.pem", kPrivatePem));
    REQUIRE(key.ok());
    CHECK(key->public_key().public_key == from_hex(kPublicHex));
    CHECK(key->public_key().fingerprint == kFingerprint);
    auto signature = key->sign("");
    REQUIRE(signature.ok());
    CHECK(*signature == from_hex(kEmptySignatureHex));

    auto trusted = redist::read_trusted_key(write(dir, "k.pub", kPublicPem));
    REQUIRE(trusted.ok());
    CHECK(trusted->fingerprint == kFingerprint);
    CHECK(trusted->source == (dir / "k.pub").string());
    const std::vector<redist::trusted_key> keys{*trusted};
    CHECK(redist::find_signer(keys, "", *signature) == &keys[0]);
    // The private key file serves as a trusted key too (its public half).
    auto from_private = redist::parse_trusted_key(kPrivatePem, "k.pem");
    REQUIRE(from_private.ok());
    CHECK(from_private->public_key == trusted->public_key);
}

TEST_CASE("signing: a changed message, a changed signature or another key is no signature") {
    auto key = redist::parse_trusted_key(kPublicPem, "k.pub");
    REQUIRE(key.ok());
    const std::vector<redist::trusted_key> keys{*key};
    const std::string good = from_hex(kEmptySignatureHex);
    CHECK(redist::find_signer(keys, "x", good) == nullptr);
    std::string flipped = good;
    flipped[10] = static_cast<char>(flipped[10] ^ 1);
    CHECK(redist::find_signer(keys, "", flipped) == nullptr);
    CHECK(redist::find_signer(keys, "", good.substr(0, 63)) == nullptr);
    CHECK(redist::find_signer(keys, "", good + "x") == nullptr);
    CHECK(redist::find_signer(keys, "", "") == nullptr);
    CHECK(redist::find_signer({}, "", good) == nullptr);
    // A second, unrelated key before the signer: the signer is found.
    const fs::path dir = redist_test::scratch("signing_other");
    auto other = redist::signing_key::read(write(dir, "other.pem",
                                                 "-----BEGIN PRIVATE KEY-----\n"
                                                 "MC4CAQAwBQYDK2VwBCIEIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f\n"
                                                 "-----END PRIVATE KEY-----\n"));
    REQUIRE(other.ok());
    const std::vector<redist::trusted_key> two{other->public_key(), *key};
    CHECK(redist::find_signer(two, "", good) == &two[1]);
    auto theirs = other->sign("");
    REQUIRE(theirs.ok());
    CHECK(redist::find_signer(keys, "", *theirs) == nullptr);
}

TEST_CASE("signing: what is not an Ed25519 PEM key is refused, naming the file") {
    for (const char* text : {"", "hello\n", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
                             // An RSA public key: PEM, but not Ed25519.
                             "-----BEGIN PUBLIC KEY-----\n"
                             "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDaW3bYZ0qxzlW3A/cNmNXfp2SJ\n"
                             "z9EpYERzB0vbGa1Rs7DfO20LFApVc2XB9+vJ7BFOL4Rn7A2lV/yEoUYppjmLRUca\n"
                             "zsbIimaE/KZU/e9M3CH2lEi0U0RgNhtGT9DbiS/C42ebR+le8XrCyDqC12addCqs\n"
                             "Ych3vhcZzIyFtpNjPQIDAQAB\n"
                             "-----END PUBLIC KEY-----\n"}) {
        INFO(text);
        auto key = redist::parse_trusted_key(text, "/keys/bad.pem");
        REQUIRE_FALSE(key.ok());
        CHECK(key.error_value().code == redist::error_code::usage);
        CHECK(key.error_value().message.find("/keys/bad.pem") != std::string::npos);
    }
    // A public key cannot sign.
    const fs::path dir = redist_test::scratch("signing_bad");
    auto pub_as_private = redist::signing_key::read(write(dir, "k.pub", kPublicPem));
    REQUIRE_FALSE(pub_as_private.ok());
    CHECK(pub_as_private.error_value().message.find("k.pub") != std::string::npos);
    // A missing file, and a FIFO, fail at once.
    CHECK_FALSE(redist::read_trusted_key(dir / "missing.pub").ok());
    const fs::path fifo = dir / "fifo.pub";
    fs::remove(fifo);
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_FALSE(redist::read_trusted_key(fifo).ok());
    CHECK_FALSE(redist::signing_key::read(fifo).ok());
    // Larger than a key file can be.
    CHECK_FALSE(redist::parse_trusted_key(std::string(70000, 'A'), "big.pem").ok());
}
