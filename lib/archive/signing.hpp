// archive/signing.hpp (internal) — the Ed25519 work behind redist/signing.hpp
// (signing.cpp): a trusted key read from PEM text, finding the trusted key
// that signed a record (resolve.cpp for a sidecar beside a manifest, the
// mirror's read_previous_copies for its own), and the private key `redist
// mirror --sign-key` signs with (features/mirror.cpp); exposed for the unit
// tests (tests/unit/archive/signing_test.cpp) and
// tests/fuzz/signing_fuzz.cpp. redist/signing.hpp holds the key formats and
// what a program reads: a trusted key from a file.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/signing.hpp"

namespace redist {

// A trusted key (read_trusted_key) from PEM text; `source` names it in errors.
result<trusted_key> parse_trusted_key(std::string_view pem, std::string_view source);

// The first of `keys` whose Ed25519 signature of `message` is `signature`
// (64 raw bytes), or null: no key made it, or the signature is malformed.
const trusted_key* find_signer(const std::vector<trusted_key>& keys, std::string_view message,
                               std::string_view signature) noexcept;

// A private Ed25519 key that signs (redist mirror --sign-key). Move-only;
// its bytes are wiped when it is destroyed.
class signing_key {
public:
    // Outcomes: ok | filesystem (cannot read) | usage (not a PEM Ed25519
    // private key); the error names the file.
    static result<signing_key> read(const std::filesystem::path& pem_file);

    signing_key(signing_key&& other) noexcept;
    signing_key& operator=(signing_key&& other) noexcept;
    signing_key(const signing_key&) = delete;
    signing_key& operator=(const signing_key&) = delete;
    ~signing_key();

    // The 64-byte signature of `message`. Outcomes: ok | internal (OpenSSL failed).
    result<std::string> sign(std::string_view message) const;
    // The public half, as a client trusts it.
    const trusted_key& public_key() const noexcept { return public_; }

private:
    signing_key() = default;
    std::string private_;  // the 32 raw bytes of the seed
    trusted_key public_;
};

}  // namespace redist
