// HMAC-SHA256 (OpenSSL libcrypto) for the modules that need a keyed MAC: SigV4 signing here, and
// the L3 object MAC in tiercache/ (cache.l3_key_file).
//
// Why it lives in blobclient/: only the module that wraps a library links it (conventions C1),
// and blobclient already links OpenSSL::Crypto for SigV4. tiercache depends on blobclient, so it
// gets the MAC through this one small header without a second copy of the crypto glue and
// without making base/ (which every module links) depend on OpenSSL.
//
// Thread-safety: pure functions; safe from any thread (each thread keeps its own OpenSSL
// context).
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>

namespace tierfs {

inline constexpr size_t kHmacSha256Bytes = 32;
using HmacSha256Digest = std::array<std::byte, kHmacSha256Bytes>;

// HMAC-SHA256 with `key` over the concatenation of `parts` (in order, no separators: the caller
// makes the message unambiguous, e.g. with fixed-size fields).
HmacSha256Digest HmacSha256(std::span<const std::byte> key,
                            std::initializer_list<std::span<const std::byte>> parts);

// Whether two digests are equal, in time independent of where they differ (CRYPTO_memcmp): a
// verifier must not tell an attacker how many leading bytes of a forged MAC were right.
bool DigestEquals(std::span<const std::byte> a, std::span<const std::byte> b);

}  // namespace tierfs
