// MemcachedBlobStore: the L3 tier in a pool of memcached servers (blob_store.h,
// NewMemcachedBlobStore). Key form: tiercache/FORMAT.md, "L3 in memcached".
//
// Why the shape below:
// - libmemcached (the standard C client) does the distribution: consistent hashing (ketama, the
//   libketama-compatible continuum), so that losing one of N servers remaps only its ~1/N of the
//   keys; and failover: a server that fails `server_failure_limit` times is removed from the
//   continuum for `retry_timeout` (REMOVE_FAILED_SERVERS), so its keys go to the others (misses
//   first, then refilled by the origin reads that follow).
// - A memcached_st is not thread-safe: calls take a connection (a clone of the configured
//   memcached_st) from a memcached_pool_st and give it back.
// - The binary protocol, short connect/IO timeouts: a dead or slow server must cost a reader a
//   few ms, then the origin serves.
// - A failed server is a miss, not an L3 failure (see blob_store.h "Failures"): the tier above
//   opens its circuit breaker on runs of failures, and one dead server of three must cost only
//   its share of the hits, not all of them.
#include <fmt/format.h>
#include <libmemcached/memcached.h>
#include <libmemcached/util.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/logging.h"
#include "blobclient/memcached_store.h"

namespace tierfs {

Result<std::vector<MemcachedServer>> ParseMemcachedUri(std::string_view uri) {
  auto bad = [uri](std::string_view why) {
    return Status::InvalidArgument("bad memcached pool '" + std::string(uri) +
                                   "': " + std::string(why) +
                                   " (expected memcached://HOST:PORT,HOST:PORT,...)");
  };
  if (!IsMemcachedUri(uri)) return bad("no memcached:// scheme");
  std::string_view rest = uri.substr(std::string_view("memcached://").size());
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty()) return bad("no server");
  std::vector<MemcachedServer> out;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (item.empty()) return bad("empty server");
    MemcachedServer s;
    std::string_view port;
    if (item.front() == '[') {
      const size_t close = item.find(']');
      if (close == std::string_view::npos)
        return bad("unclosed '[' in '" + std::string(item) + "'");
      s.host = std::string(item.substr(1, close - 1));
      std::string_view after = item.substr(close + 1);
      if (!after.empty()) {
        if (after.front() != ':') return bad("junk after ']' in '" + std::string(item) + "'");
        port = after.substr(1);
        if (port.empty()) return bad("empty port in '" + std::string(item) + "'");
      }
    } else {
      const size_t colon = item.find(':');
      s.host = std::string(item.substr(0, colon));
      if (colon != std::string_view::npos) {
        port = item.substr(colon + 1);
        if (port.empty()) return bad("empty port in '" + std::string(item) + "'");
      }
    }
    if (s.host.empty()) return bad("empty host in '" + std::string(item) + "'");
    for (char c : s.host) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_' || c == ':';
      if (!ok) return bad("bad character in host '" + s.host + "'");
    }
    if (!port.empty()) {
      if (port.size() > 5 ||
          !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return bad("bad port in '" + std::string(item) + "'");
      }
      const int p = std::atoi(std::string(port).c_str());
      if (p < 1 || p > 65535) return bad("port out of range in '" + std::string(item) + "'");
      s.port = static_cast<uint16_t>(p);
    }
    out.push_back(std::move(s));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (out.size() > 64) return bad("more than 64 servers");
  return out;
}

std::string MemcachedKey(std::string_view name) {
  const bool plain =
      !name.empty() && name.size() <= kMemcachedMaxPlainName &&
      std::all_of(name.begin(), name.end(), [](char c) { return c > ' ' && c < 0x7f; });
  if (plain) return "tierfs/" + std::string(name);
  const XXH128_hash_t h = XXH3_128bits(name.data(), name.size());
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return "tierfs#" + std::string(hex, 32);
}

namespace {

std::string ServerName(const MemcachedServer& s) {
  return s.host.find(':') != std::string::npos ? "[" + s.host + "]:" + std::to_string(s.port)
                                               : s.host + ":" + std::to_string(s.port);
}

// Thread-safe; no external synchronization needed.
class MemcachedBlobStore final : public BlobStore {
 public:
  MemcachedBlobStore(const MemcachedOptions& options, memcached_pool_st* pool)
      : options_(options), pool_(pool), failed_at_ns_(options.servers.size()) {
    for (auto& t : failed_at_ns_) t.store(INT64_MIN / 2, std::memory_order_relaxed);
    describe_ = "memcached://";
    for (size_t i = 0; i < options_.servers.size(); ++i) {
      if (i > 0) describe_ += ",";
      describe_ += ServerName(options_.servers[i]);
    }
  }

  ~MemcachedBlobStore() override {
    memcached_st* master = memcached_pool_destroy(pool_);
    if (master != nullptr) memcached_free(master);
  }

  std::string Describe() const override { return describe_; }

  Result<ObjectInfo> Head(std::string_view key) override {
    Item item;
    TIERFS_RETURN_IF_ERROR(Get(key, &item));
    ObjectInfo info;
    info.size = item.size;
    return info;
  }

  Result<size_t> Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                      std::string_view if_match_etag) override {
    if (!if_match_etag.empty()) {
      return Status::NotSupported("memcached: conditional reads are not supported");
    }
    Item item;
    TIERFS_RETURN_IF_ERROR(Get(key, &item));
    if (offset >= item.size) return size_t{0};
    const size_t n = std::min<size_t>(out.size(), item.size - offset);
    std::memcpy(out.data(), item.data.get() + offset, n);
    return n;
  }

  Result<ListPage> List(std::string_view, std::string_view, std::string_view, int) override {
    return Status::NotSupported(
        "memcached: keys cannot be listed (the pool evicts by LRU itself; no gc is needed)");
  }

  Status Put(std::string_view key, std::span<const std::byte> data) override {
    Conn c(this);
    if (c.m == nullptr) return c.status;
    const std::string mkey = MemcachedKey(key);
    const int server = ServerOf(c.m, mkey);
    ++requests_;
    const memcached_return_t rc =
        memcached_set(c.m, mkey.data(), mkey.size(), reinterpret_cast<const char*>(data.data()),
                      data.size(), static_cast<time_t>(options_.expiration.count()), 0);
    if (memcached_success(rc)) {
      bytes_written_ += data.size();
      return Status::OK();
    }
    if (rc == MEMCACHED_E2BIG) {
      if (too_large_.fetch_add(1, std::memory_order_relaxed) == 0) {
        Logger(Module::kBlobClient)
            .warn(
                "memcached: {} refused an item of {} bytes as too large; start the servers "
                "with -I above the block size plus 80 bytes (further refusals are counted "
                "in tierfs_l3_memcached_too_large_total)",
                describe_, data.size());
      }
      return Status::NoSpace("memcached: item larger than the servers' item size (-I)");
    }
    return Failure(c.m, rc, "set", server);
  }

  Status Delete(std::string_view key) override {
    Conn c(this);
    if (c.m == nullptr) return c.status;
    const std::string mkey = MemcachedKey(key);
    const int server = ServerOf(c.m, mkey);
    ++requests_;
    const memcached_return_t rc = memcached_delete(c.m, mkey.data(), mkey.size(), 0);
    if (memcached_success(rc) || rc == MEMCACHED_NOTFOUND) return Status::OK();
    return Failure(c.m, rc, "delete", server);
  }

  BlobStoreStats Stats() const override {
    BlobStoreStats s;
    s.requests = requests_.load(std::memory_order_relaxed);
    s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
    s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
    s.errors = errors_.load(std::memory_order_relaxed);
    return s;
  }

  MemcachedStats memcached_stats() const {
    return {server_failures_.load(std::memory_order_relaxed),
            too_large_.load(std::memory_order_relaxed)};
  }

 private:
  // A connection taken from the pool for one call, given back by the destructor.
  struct Conn {
    explicit Conn(MemcachedBlobStore* store) : self(store) {
      // Waits up to io_timeout for a free connection. libmemcached's timed wait can return at
      // once without one (seen under load: 58 of 800 calls of 8 threads over 3 connections), so
      // it is asked again in short waits until the deadline.
      const auto deadline = std::chrono::steady_clock::now() + store->options_.io_timeout;
      do {
        struct timespec rel {};
        rel.tv_nsec = 10 * 1000 * 1000;  // 10 ms
        memcached_return_t rc = MEMCACHED_SUCCESS;
        m = memcached_pool_fetch(store->pool_, &rel, &rc);
      } while (m == nullptr && std::chrono::steady_clock::now() < deadline);
      if (m == nullptr) {
        ++store->errors_;
        status = Status::TimedOut("memcached: no free connection in the pool");
      }
    }
    ~Conn() {
      if (m != nullptr) (void)memcached_pool_release(self->pool_, m);
    }
    Conn(const Conn&) = delete;
    Conn& operator=(const Conn&) = delete;
    MemcachedBlobStore* self;
    memcached_st* m = nullptr;
    Status status = Status::OK();
  };

  // An item's value as libmemcached returns it (malloc'ed), read in place.
  struct Item {
    struct Free {
      void operator()(char* p) const { std::free(p); }
    };
    std::unique_ptr<char, Free> data;
    size_t size = 0;
  };

  Status Get(std::string_view key, Item* item) {
    Conn c(this);
    if (c.m == nullptr) return c.status;
    const std::string mkey = MemcachedKey(key);
    const int server = ServerOf(c.m, mkey);
    ++requests_;
    size_t len = 0;
    uint32_t flags = 0;
    memcached_return_t rc = MEMCACHED_SUCCESS;
    char* v = memcached_get(c.m, mkey.data(), mkey.size(), &len, &flags, &rc);
    if (v != nullptr) {
      item->data.reset(v);
      item->size = len;
      bytes_read_ += len;
      return Status::OK();
    }
    if (rc == MEMCACHED_NOTFOUND || memcached_success(rc)) {
      return Status::NotFound("memcached: no item " + mkey);
    }
    return Failure(c.m, rc, "get", server);
  }

  // The index in options_.servers of the server `mkey` maps to now (-1: none). Asked before the
  // call, because a failed server is dropped from the continuum during it.
  int ServerOf(memcached_st* m, const std::string& mkey) const {
    memcached_return_t rc = MEMCACHED_SUCCESS;
    const memcached_instance_st* s = memcached_server_by_key(m, mkey.data(), mkey.size(), &rc);
    return s != nullptr ? IndexOf(s) : -1;
  }
  int IndexOf(const memcached_instance_st* s) const {
    const char* host = memcached_server_name(s);
    const in_port_t port = memcached_server_port(s);
    if (host == nullptr) return -1;
    for (size_t i = 0; i < options_.servers.size(); ++i) {
      if (options_.servers[i].host == host && options_.servers[i].port == port) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  // A failed call to server `server` (-1: not known): a miss (NotFound) while some server has not
  // failed within dead_window, Unavailable when all have (or the pool has none left).
  Status Failure(memcached_st* m, memcached_return_t rc, std::string_view op, int server) {
    const int64_t now = NowNs();
    const std::string what = fmt::format("memcached {}: {}", op, memcached_strerror(m, rc));
    if (const memcached_instance_st* dead = memcached_server_get_last_disconnect(m)) {
      if (server < 0) server = IndexOf(dead);
      memcached_reset_last_disconnected_server(m);
    }
    if (server >= 0) {
      const int64_t prev = failed_at_ns_[server].exchange(now, std::memory_order_relaxed);
      if (now - prev > Window()) {
        Logger(Module::kBlobClient)
            .warn("memcached: server {} failed ({}); its keys are misses until it answers",
                  ServerName(options_.servers[server]), memcached_strerror(m, rc));
      }
    }
    const bool all_failed =
        rc == MEMCACHED_NO_SERVERS ||
        std::all_of(failed_at_ns_.begin(), failed_at_ns_.end(), [&](const auto& t) {
          return now - t.load(std::memory_order_relaxed) <= Window();
        });
    if (all_failed) {
      ++errors_;
      return Status::Unavailable(what + " (every server of the pool failed recently)");
    }
    ++server_failures_;
    return Status::NotFound(what + " (one server failed: a miss)");
  }

  int64_t Window() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(options_.dead_window).count();
  }
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Constant after construction.
  const MemcachedOptions options_;
  memcached_pool_st* const pool_;  // owned (with its master memcached_st)
  std::string describe_;

  // When each server (by index in options_.servers) last failed, steady-clock ns.
  std::vector<std::atomic<int64_t>> failed_at_ns_;
  std::atomic<uint64_t> requests_{0}, bytes_read_{0}, bytes_written_{0}, errors_{0};
  std::atomic<uint64_t> server_failures_{0}, too_large_{0};
};

}  // namespace

MemcachedStats GetMemcachedStats(const BlobStore& store) {
  const auto* m = dynamic_cast<const MemcachedBlobStore*>(&store);
  return m != nullptr ? m->memcached_stats() : MemcachedStats{};
}

Result<std::unique_ptr<BlobStore>> NewMemcachedBlobStore(const MemcachedOptions& options) {
  if (options.servers.empty()) return Status::InvalidArgument("memcached: no servers");
  if (options.servers.size() > 64) return Status::InvalidArgument("memcached: over 64 servers");
  if (options.expiration.count() < 0 || options.expiration > std::chrono::hours(24 * 30)) {
    return Status::InvalidArgument("memcached: expiration must be in [0, 30 days]");
  }
  if (options.max_connections < 1 || options.max_connections > 1024) {
    return Status::InvalidArgument("memcached: max_connections must be in [1, 1024]");
  }
  if (options.connect_timeout.count() <= 0 || options.io_timeout.count() <= 0) {
    return Status::InvalidArgument("memcached: timeouts must be positive");
  }
  memcached_st* m = memcached_create(nullptr);
  if (m == nullptr) return Status::Internal("memcached: memcached_create failed");
  auto fail = [m](std::string_view what, memcached_return_t rc) {
    const std::string msg = fmt::format("memcached: {}: {}", what, memcached_strerror(m, rc));
    memcached_free(m);
    return Status::InvalidArgument(msg);
  };
  for (const auto& s : options.servers) {
    const memcached_return_t rc = memcached_server_add(m, s.host.c_str(), s.port);
    if (!memcached_success(rc)) return fail("adding server " + ServerName(s), rc);
  }
  const uint64_t io_us = static_cast<uint64_t>(options.io_timeout.count()) * 1000;
  const std::pair<memcached_behavior_t, uint64_t> behaviors[] = {
      {MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1},
      // libketama-compatible consistent hashing (MD5 continuum).
      {MEMCACHED_BEHAVIOR_DISTRIBUTION, MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA},
      {MEMCACHED_BEHAVIOR_KETAMA_HASH, MEMCACHED_HASH_MD5},
      {MEMCACHED_BEHAVIOR_TCP_NODELAY, 1},
      {MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, static_cast<uint64_t>(options.connect_timeout.count())},
      {MEMCACHED_BEHAVIOR_POLL_TIMEOUT, static_cast<uint64_t>(options.io_timeout.count())},
      {MEMCACHED_BEHAVIOR_SND_TIMEOUT, io_us},
      {MEMCACHED_BEHAVIOR_RCV_TIMEOUT, io_us},
      {MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS, 1},
      {MEMCACHED_BEHAVIOR_SERVER_FAILURE_LIMIT,
       static_cast<uint64_t>(std::max(1, options.server_failure_limit))},
      {MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, static_cast<uint64_t>(options.retry_timeout.count())},
  };
  for (const auto& [b, v] : behaviors) {
    const memcached_return_t rc = memcached_behavior_set(m, b, v);
    if (!memcached_success(rc)) {
      return fail(fmt::format("setting behavior {}", static_cast<int>(b)), rc);
    }
  }
  memcached_pool_st* pool =
      memcached_pool_create(m, 1, static_cast<uint32_t>(options.max_connections));
  if (pool == nullptr) {
    memcached_free(m);
    return Status::Internal("memcached: memcached_pool_create failed");
  }
  return std::unique_ptr<BlobStore>(std::make_unique<MemcachedBlobStore>(options, pool));
}

}  // namespace tierfs
