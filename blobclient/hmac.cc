#include "blobclient/hmac.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstdlib>
#include <memory>

namespace tierfs {
namespace {

// The HMAC implementation, fetched once (EVP_MAC_fetch looks it up in the provider tables).
EVP_MAC* HmacAlgorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
}

// One HMAC context per thread, made once with the digest set: EVP_MAC_init with the digest
// parameter fetches SHA-256 from the provider tables on every call, which was most of the cost
// of a short MAC (SigV4 signs every origin request). Later inits pass only the key, which keeps
// the digest and resets the state.
struct ThreadCtx {
  EVP_MAC_CTX* ctx = nullptr;
  bool has_digest = false;
  ~ThreadCtx() { EVP_MAC_CTX_free(ctx); }
};

}  // namespace

HmacSha256Digest HmacSha256(std::span<const std::byte> key,
                            std::initializer_list<std::span<const std::byte>> parts) {
  HmacSha256Digest out{};
  thread_local ThreadCtx t;
  if (t.ctx == nullptr) {
    EVP_MAC* mac = HmacAlgorithm();
    t.ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
  }
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_end(),
  };
  // An empty key is a valid HMAC key; OpenSSL wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const auto* k = key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  bool ok =
      t.ctx != nullptr && EVP_MAC_init(t.ctx, k, key.size(), t.has_digest ? nullptr : params) == 1;
  t.has_digest = ok;
  for (const auto& p : parts) {
    if (!ok) break;
    if (p.empty()) continue;
    ok = EVP_MAC_update(t.ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  }
  size_t len = 0;
  ok = ok &&
       EVP_MAC_final(t.ctx, reinterpret_cast<unsigned char*>(out.data()), &len, out.size()) == 1 &&
       len == out.size();
  // Only a broken libcrypto fails here (no memory, no default provider). A MAC that silently
  // came out as zeros would make every object "verify" against every other, so stop instead.
  if (!ok) std::abort();
  return out;
}

bool DigestEquals(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tierfs
