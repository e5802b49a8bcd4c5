// redist/signing.hpp — Ed25519 keys that vouch for a mirror's recompressed
// copies (recompressed.hpp), and the detached signatures they make.
//
// A key is a PEM file as `openssl genpkey -algorithm ed25519` writes it (the
// private key, kept by the operator of the mirror) and `openssl pkey -in KEY
// -pubout` derives (the public key, given to every client). A signature is
// the 64 raw bytes `openssl pkeyutl -sign -rawin` writes, so that
//
//   openssl pkeyutl -verify -pubin -inkey KEY.pub -rawin -in RECORD -sigfile RECORD.sig
//
// accepts what redist signs, and redist accepts what openssl signs. A key is
// named by its fingerprint: the SHA-256 of its public key's DER encoding,
// `openssl pkey -pubin -in KEY.pub -outform DER | sha256sum`.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

// A public key the user trusts to sign recompressed-copy records.
struct trusted_key {
    std::string source;       // where it was read from (a path), for messages
    std::string public_key;   // the 32 raw bytes of the Ed25519 public key
    std::string fingerprint;  // 64 lower-case hex digits (see above)
};

// Reads a trusted key from a PEM file: a public key, or a private key (its
// public half is taken). Outcomes: ok | filesystem (cannot read; not a
// regular file) | usage (not PEM, not an Ed25519 key, larger than 64 KiB);
// the error names the file.
result<trusted_key> read_trusted_key(const std::filesystem::path& pem_file);

REDIST_API_END
}  // namespace redist
