// blobclient/memcached_store.h — the L3 tier in a memcached pool (spare host memory).
//
// Apart from blob_store.h because only the daemon (and tests) build one: the rest of tierfs sees
// a BlobStore.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "blobclient/blob_store.h"

namespace tierfs {

// ---- memcached (L3 in spare host memory) ----
//
// A BlobStore over a pool of memcached servers (libmemcached): objects are items, spread over
// the servers by consistent (ketama) hashing, so a server that dies costs only its share of the
// items. Get/set/delete only: List is NotSupported (memcached cannot enumerate keys; it evicts
// by LRU itself, so no gc is needed) and conditional reads are NotSupported. A read is one get
// of the whole item, served from `offset` in it.
//
// Failures: a server that fails (refused, timed out, marked dead) makes that call a miss
// (NotFound, counted in server_failures) while another server of the pool has not failed in the
// last `dead_window`: the tier above must not treat one dead server as a dead L3. Unavailable
// once every server has failed within it. A write larger than the servers' item size (memcached
// -I) is refused with NoSpace and counted in too_large. Thread-safe (a pool of connections).
struct MemcachedServer {
  std::string host;  // name or address (IPv6 in brackets in the URI, without them here)
  uint16_t port = 11211;
};
struct MemcachedOptions {
  std::vector<MemcachedServer> servers;  // required, at most 64
  // Items expire after this long (memcached's exptime); 0: never (LRU only). At most 30 days.
  std::chrono::seconds expiration{0};
  std::chrono::milliseconds connect_timeout{250};
  std::chrono::milliseconds io_timeout{1000};  // per poll / send / receive
  int server_failure_limit = 1;                // failures before a server is ejected
  std::chrono::seconds retry_timeout{2};       // an ejected server is retried after this
  std::chrono::seconds dead_window{10};        // see "Failures" above
  int max_connections = 64;                    // connections (libmemcached clones) in the pool
};
// "memcached://HOST:PORT,HOST:PORT,..." (port optional: 11211; "[::1]:11211" for IPv6) into
// servers. InvalidArgument naming the URI otherwise.
Result<std::vector<MemcachedServer>> ParseMemcachedUri(std::string_view uri);
inline bool IsMemcachedUri(std::string_view uri) { return uri.starts_with("memcached://"); }
// The memcached key of an object name (tiercache/FORMAT.md "L3 in memcached"): "tierfs/" + name
// when the name is at most kMemcachedMaxPlainName bytes of printable ASCII without spaces (all
// the names tierfs writes: "blocks/<32 hex>", "listings/<32 hex>"), else "tierfs#" + the 32
// lower-case hex digits of XXH3-128(name). Always <= 250 bytes, never a space or control byte.
inline constexpr size_t kMemcachedMaxPlainName = 200;
std::string MemcachedKey(std::string_view name);
Result<std::unique_ptr<BlobStore>> NewMemcachedBlobStore(const MemcachedOptions& options);

// Counters of a store made by NewMemcachedBlobStore (all 0 for any other store). The usual ones
// (requests, bytes, errors) are in BlobStore::Stats().
struct MemcachedStats {
  uint64_t server_failures = 0;  // calls one server failed (dead, refused, timed out): misses
  uint64_t too_large = 0;        // writes refused as larger than the servers' item size (-I)
};
MemcachedStats GetMemcachedStats(const BlobStore& store);

}  // namespace tierfs
