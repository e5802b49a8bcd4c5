// libFuzzer target for redist::parse_trusted_key and find_signer: a trusted
// key is a PEM file a user names, or one a project file (a pull request)
// names inside its checkout, and a signature is 64 bytes any mirror serves.
//
// Contract checked on every input: a refused key is one clean usage line
// naming its file; an accepted one is an Ed25519 key of 32 bytes with a
// 64-hex fingerprint; the input as a signature never verifies under a key
// that did not make it, and never crashes the verifier.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "archive/signing.hpp"
#include "fuzz_support.hpp"
#include "model/manifest.hpp"
#include "redist/manifest.hpp"
#include "redist/signing.hpp"

namespace {

// RFC 8032's first test key: the input is checked as a signature of a fixed message under it.
constexpr std::string_view kPublicPem =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n"
    "-----END PUBLIC KEY-----\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto key = redist::parse_trusted_key(text, "fuzz.pem");
    if (key.ok()) {
        fuzz::require(key->public_key.size() == 32);
        fuzz::require(redist::is_sha256_hex(key->fingerprint));
    } else {
        const redist::error& e = key.error_value();
        fuzz::require(e.code == redist::error_code::usage);
        fuzz::require(e.message.find("fuzz.pem") != std::string::npos);
        fuzz::require(e.describe().find('\n') == std::string::npos);
    }
    static const auto rfc = redist::parse_trusted_key(kPublicPem, "rfc.pem");
    fuzz::require(rfc.ok());
    const std::vector<redist::trusted_key> keys{rfc.value()};
    // Neither the empty message nor the input itself is signed by the input (RFC 8032's key never signed them).
    const auto* signer = redist::find_signer(keys, "fuzz", text);
    fuzz::require(signer == nullptr);
    return 0;
}
