// Ed25519 keys and signatures through OpenSSL's EVP interface. See
// redist/signing.hpp.
//
// Hazards:
// - PEM_read_bio_PrivateKey prompts on the terminal for an encrypted key
//   unless a password callback answers: ours answers "no password", so an
//   encrypted key is an error, never a hang in CI.
// - OpenSSL keeps failures on a per-thread error queue; every failure path
//   clears it, so a later, unrelated OpenSSL call cannot report ours.
// - Ed25519 signs the message itself (no digest): EVP_DigestSign* with a
//   null digest, one shot.
#include "redist/signing.hpp"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>
#include <utility>

#include "archive/sha256.hpp"
#include "archive/signing.hpp"
#include "support/posix_file.hpp"

namespace redist {

namespace {

constexpr std::size_t kMaxKeyFileBytes = 64u << 10;
constexpr std::size_t kRawKeyBytes = 32;
constexpr std::size_t kSignatureBytes = 64;

struct pkey_free {
    void operator()(EVP_PKEY* k) const noexcept { EVP_PKEY_free(k); }
};
struct bio_free {
    void operator()(BIO* b) const noexcept { BIO_free(b); }
};
struct md_ctx_free {
    void operator()(EVP_MD_CTX* c) const noexcept { EVP_MD_CTX_free(c); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;

int no_password(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return -1; }

error key_error(std::string_view source, const std::string& why) {
    ERR_clear_error();
    return make_error(error_code::usage, std::string(source) + ": " + why).with_path(std::string(source));
}

// The key in `pem`: a private key when `want_private`, else a public key or
// a private one (its public half). nullptr when there is none.
pkey_ptr read_pem(std::string_view pem, bool want_private) {
    const auto read = [&](bool as_private) {
        std::unique_ptr<BIO, bio_free> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
        if (!bio) return pkey_ptr();
        return pkey_ptr(as_private ? PEM_read_bio_PrivateKey(bio.get(), nullptr, no_password, nullptr)
                                   : PEM_read_bio_PUBKEY(bio.get(), nullptr, no_password, nullptr));
    };
    pkey_ptr key = read(true);
    if (!key && !want_private) key = read(false);
    ERR_clear_error();
    return key;
}

// The trusted_key of an Ed25519 key, or an error naming `source`.
result<trusted_key> describe(EVP_PKEY* key, std::string_view source) {
    if (EVP_PKEY_get_id(key) != EVP_PKEY_ED25519) return key_error(source, "not an Ed25519 key");
    trusted_key out;
    out.source = std::string(source);
    out.public_key.resize(kRawKeyBytes);
    std::size_t n = kRawKeyBytes;
    if (EVP_PKEY_get_raw_public_key(key, reinterpret_cast<unsigned char*>(out.public_key.data()), &n) != 1 ||
        n != kRawKeyBytes)
        return key_error(source, "cannot read the public key");
    unsigned char* der = nullptr;
    const int der_size = i2d_PUBKEY(key, &der);
    if (der_size <= 0) return key_error(source, "cannot encode the public key");
    out.fingerprint = sha256_hex(
        std::string_view(reinterpret_cast<const char*>(der), static_cast<std::size_t>(der_size)));
    OPENSSL_free(der);
    return out;
}

pkey_ptr raw_public(std::string_view raw) {
    if (raw.size() != kRawKeyBytes) return pkey_ptr();
    return pkey_ptr(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr,
                                                reinterpret_cast<const unsigned char*>(raw.data()), raw.size()));
}

bool verifies(const trusted_key& key, std::string_view message, std::string_view signature) {
    const pkey_ptr pkey = raw_public(key.public_key);
    std::unique_ptr<EVP_MD_CTX, md_ctx_free> ctx(EVP_MD_CTX_new());
    const bool ok = pkey && ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) == 1 &&
                    EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                                     signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size()) == 1;
    ERR_clear_error();
    return ok;
}

result<std::string> read_key_file(const std::filesystem::path& pem_file) {
    auto text = read_file(pem_file, kMaxKeyFileBytes, follow_links::yes, error_code::usage);
    if (!text.ok()) {
        error e = std::move(text).error_value();
        if (e.path.empty()) e.path = pem_file.string();
        return e;
    }
    return text;
}

}  // namespace

result<trusted_key> parse_trusted_key(std::string_view pem, std::string_view source) {
    if (pem.size() > kMaxKeyFileBytes) return key_error(source, "a key file larger than 64 KiB");
    const pkey_ptr key = read_pem(pem, false);
    if (!key)
        return key_error(source, "not a PEM key (expected an Ed25519 key from `openssl genpkey -algorithm ed25519`)");
    return describe(key.get(), source);
}

result<trusted_key> read_trusted_key(const std::filesystem::path& pem_file) {
    REDIST_TRY(const std::string text, read_key_file(pem_file));
    return parse_trusted_key(text, pem_file.string());
}

const trusted_key* find_signer(const std::vector<trusted_key>& keys, std::string_view message,
                               std::string_view signature) noexcept {
    if (signature.size() != kSignatureBytes) return nullptr;
    for (const auto& key : keys)
        if (verifies(key, message, signature)) return &key;
    return nullptr;
}

result<signing_key> signing_key::read(const std::filesystem::path& pem_file) {
    const std::string source = pem_file.string();
    REDIST_TRY(std::string text, read_key_file(pem_file));
    const pkey_ptr key = read_pem(text, true);
    OPENSSL_cleanse(text.data(), text.size());
    if (!key)
        return key_error(source, "not an unencrypted PEM private key (`openssl genpkey -algorithm ed25519 -out FILE`)");
    signing_key out;
    REDIST_TRY(out.public_, describe(key.get(), source));
    out.private_.resize(kRawKeyBytes);
    std::size_t n = kRawKeyBytes;
    if (EVP_PKEY_get_raw_private_key(key.get(), reinterpret_cast<unsigned char*>(out.private_.data()), &n) != 1 ||
        n != kRawKeyBytes)
        return key_error(source, "cannot read the private key");
    return out;
}

signing_key::signing_key(signing_key&& other) noexcept
    : private_(std::move(other.private_)), public_(std::move(other.public_)) {
    other.private_.clear();
}

signing_key& signing_key::operator=(signing_key&& other) noexcept {
    if (this != &other) {
        OPENSSL_cleanse(private_.data(), private_.size());
        private_ = std::move(other.private_);
        public_ = std::move(other.public_);
        other.private_.clear();
    }
    return *this;
}

signing_key::~signing_key() { OPENSSL_cleanse(private_.data(), private_.size()); }

result<std::string> signing_key::sign(std::string_view message) const {
    const pkey_ptr key(EVP_PKEY_new_raw_private_key(
        EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(private_.data()), private_.size()));
    std::unique_ptr<EVP_MD_CTX, md_ctx_free> ctx(EVP_MD_CTX_new());
    std::string signature(kSignatureBytes, '\0');
    std::size_t n = signature.size();
    const bool ok = key && ctx && EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) == 1 &&
                    EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &n,
                                   reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1 &&
                    n == kSignatureBytes;
    ERR_clear_error();
    if (!ok) return make_error(error_code::internal, "cannot sign with the Ed25519 key " + public_.source);
    return signature;
}

}  // namespace redist
