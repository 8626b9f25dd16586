// The memcached L3 store: URI parsing and key mapping (pure), and the store against a real
// memcached on 127.0.0.1 when the server binary is installed (skipped otherwise).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "blobclient/memcached_store.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

TEST(MemcachedUri, ParsesServers) {
  auto s = ParseMemcachedUri("memcached://10.0.0.1:11311,host-b,[::1]:11212,[fe80::1]");
  ASSERT_OK(s);
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[0].host, "10.0.0.1");
  EXPECT_EQ((*s)[0].port, 11311);
  EXPECT_EQ((*s)[1].host, "host-b");
  EXPECT_EQ((*s)[1].port, 11211);
  EXPECT_EQ((*s)[2].host, "::1");
  EXPECT_EQ((*s)[2].port, 11212);
  EXPECT_EQ((*s)[3].host, "fe80::1");
  EXPECT_EQ((*s)[3].port, 11211);
  auto trailing = ParseMemcachedUri("memcached://a:1/");
  ASSERT_OK(trailing);
  EXPECT_EQ(trailing->size(), 1u);
}

TEST(MemcachedUri, RejectsBadUris) {
  for (const char* bad :
       {"memcached://", "memcached://a:1,,b:2", "memcached://a:", "memcached://a:0",
        "memcached://a:65536", "memcached://a:1x", "memcached://[::1", "memcached://[::1]x",
        "memcached://:11211", "memcached://a b:1", "s3://bucket"}) {
    auto s = ParseMemcachedUri(bad);
    EXPECT_FALSE(s.ok()) << bad;
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument) << bad;
    }
  }
  std::string many = "memcached://";
  for (int i = 0; i < 65; ++i) many += (i ? ",h" : "h") + std::to_string(i);
  EXPECT_FALSE(ParseMemcachedUri(many).ok());
  EXPECT_TRUE(IsMemcachedUri("memcached://a"));
  EXPECT_FALSE(IsMemcachedUri("s3://a"));
}

TEST(MemcachedKey, PlainNamesKeepTheirName) {
  EXPECT_EQ(MemcachedKey("blocks/0123456789abcdef0123456789abcdef"),
            "tierfs/blocks/0123456789abcdef0123456789abcdef");
  EXPECT_EQ(MemcachedKey("listings/00ff"), "tierfs/listings/00ff");
  EXPECT_EQ(MemcachedKey(std::string(kMemcachedMaxPlainName, 'a')),
            "tierfs/" + std::string(kMemcachedMaxPlainName, 'a'));
}

TEST(MemcachedKey, LongOrUnsafeNamesAreHashed) {
  // XXH3-128 of "a b", high 64 bits then low 64 bits, lower-case hex.
  const std::string spaced = MemcachedKey("a b");
  ASSERT_EQ(spaced.size(), 7u + 32u);
  EXPECT_EQ(spaced.substr(0, 7), "tierfs#");
  EXPECT_EQ(spaced.find_first_not_of("0123456789abcdef", 7), std::string::npos);
  EXPECT_NE(MemcachedKey("a b"), MemcachedKey("a  b"));
  EXPECT_EQ(MemcachedKey("a b"), MemcachedKey("a b"));  // deterministic
  const std::string long_name(kMemcachedMaxPlainName + 1, 'a');
  EXPECT_EQ(MemcachedKey(long_name).substr(0, 7), "tierfs#");
  EXPECT_EQ(MemcachedKey(std::string("x\ny")).substr(0, 7), "tierfs#");
  EXPECT_EQ(MemcachedKey("").substr(0, 7), "tierfs#");
  EXPECT_EQ(MemcachedKey("caf\xc3\xa9").substr(0, 7), "tierfs#");  // non-ASCII
  for (const auto& k : {MemcachedKey(long_name), MemcachedKey(std::string(100000, 'z'))}) {
    EXPECT_LE(k.size(), 250u);
  }
}

TEST(MemcachedStore, RejectsBadOptions) {
  MemcachedOptions o;
  EXPECT_FALSE(NewMemcachedBlobStore(o).ok());  // no servers
  o.servers.push_back({"127.0.0.1", 1});
  o.expiration = std::chrono::hours(24 * 31);
  EXPECT_FALSE(NewMemcachedBlobStore(o).ok());
  o.expiration = std::chrono::seconds(0);
  o.max_connections = 0;
  EXPECT_FALSE(NewMemcachedBlobStore(o).ok());
}

// A memcached server on a free loopback port, killed by its pid at the end.
class MemcachedServerProcess {
 public:
  bool Start(const char* max_item) {
    if (access("/usr/bin/memcached", X_OK) != 0) return false;
    port_ = FreePort();
    if (port_ == 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      execl("/usr/bin/memcached", "memcached", "-l", "127.0.0.1", "-p", port.c_str(), "-U", "0",
            "-m", "64", "-I", max_item, "-u", "nobody", static_cast<char*>(nullptr));
      _exit(127);
    }
    if (pid_ < 0) return false;
    // Ready when it accepts a connection.
    return testing::Eventually([&] { return Connects(); }, std::chrono::seconds(2));
  }
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  ~MemcachedServerProcess() { Stop(); }
  uint16_t port() const { return port_; }

 private:
  static uint16_t FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    uint16_t port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    close(fd);
    return port;
  }
  bool Connects() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port_);
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    return ok;
  }
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

std::vector<std::byte> Bytes(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(seed + i * 7));
  return v;
}

TEST(MemcachedStore, GetSetDeleteAgainstARealServer) {
  MemcachedServerProcess server;
  if (!server.Start("1m")) GTEST_SKIP() << "no memcached server to run";
  MemcachedOptions o;
  o.servers.push_back({"127.0.0.1", server.port()});
  auto store = NewMemcachedBlobStore(o);
  ASSERT_OK(store);
  BlobStore* s = store->get();
  EXPECT_EQ(s->Describe(), "memcached://127.0.0.1:" + std::to_string(server.port()));

  std::vector<std::byte> buf(100);
  EXPECT_TRUE(s->Read("blocks/none", 0, buf, "").status().IsNotFound());
  const auto data = Bytes(5000, 3);
  ASSERT_OK(s->Put("blocks/a", data));
  auto n = s->Read("blocks/a", 0, buf, "");
  ASSERT_OK(n);
  EXPECT_EQ(*n, 100u);
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data(), 100));
  n = s->Read("blocks/a", 4950, buf, "");  // short at the end
  ASSERT_OK(n);
  EXPECT_EQ(*n, 50u);
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 4950, 50));
  n = s->Read("blocks/a", 6000, buf, "");
  ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);
  auto h = s->Head("blocks/a");
  ASSERT_OK(h);
  EXPECT_EQ(h->size, 5000u);
  EXPECT_EQ(s->Read("blocks/a", 0, buf, "etag").status().code(), Status::Code::kNotSupported);
  EXPECT_EQ(s->List("blocks/", "", "").status().code(), Status::Code::kNotSupported);

  // Larger than -I 1m: refused as NoSpace and counted, never an error.
  const auto big = Bytes(2 << 20, 1);
  EXPECT_EQ(s->Put("blocks/big", big).code(), Status::Code::kNoSpace);
  EXPECT_EQ(GetMemcachedStats(*s).too_large, 1u);
  EXPECT_EQ(s->Stats().errors, 0u);

  ASSERT_OK(s->Delete("blocks/a"));
  EXPECT_TRUE(s->Read("blocks/a", 0, buf, "").status().IsNotFound());
  EXPECT_OK(s->Delete("blocks/a"));  // already gone: OK

  // Every server dead: Unavailable (an L3 failure), not a miss.
  server.Stop();
  Status dead = s->Read("blocks/b", 0, buf, "").status();
  EXPECT_EQ(dead.code(), Status::Code::kUnavailable) << dead.ToString();
}

// Many threads share the store (a pool of connections), fewer connections than threads.
TEST(MemcachedStore, ConcurrentCallsShareThePool) {
  MemcachedServerProcess server;
  if (!server.Start("1m")) GTEST_SKIP() << "no memcached server to run";
  MemcachedOptions o;
  o.servers.push_back({"127.0.0.1", server.port()});
  o.max_connections = 3;
  auto store = NewMemcachedBlobStore(o);
  ASSERT_OK(store);
  BlobStore* s = store->get();
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([s, t, &bad] {
      const auto data = Bytes(4096, static_cast<uint8_t>(t));
      std::vector<std::byte> buf(4096);
      for (int i = 0; i < 50; ++i) {
        const std::string key = "blocks/t" + std::to_string(t) + "-" + std::to_string(i);
        if (!s->Put(key, data).ok()) ++bad;
        auto n = s->Read(key, 0, buf, "");
        if (!n.ok() || *n != data.size() || std::memcmp(buf.data(), data.data(), *n) != 0) ++bad;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(s->Stats().requests, 8u * 50u * 2u);
}

TEST(MemcachedStore, OneDeadServerOfTwoIsAMiss) {
  MemcachedServerProcess a, b;
  if (!a.Start("2m") || !b.Start("2m")) GTEST_SKIP() << "no memcached server to run";
  MemcachedOptions o;
  o.servers.push_back({"127.0.0.1", a.port()});
  o.servers.push_back({"127.0.0.1", b.port()});
  auto store = NewMemcachedBlobStore(o);
  ASSERT_OK(store);
  BlobStore* s = store->get();
  const auto data = Bytes(1000, 9);
  for (int i = 0; i < 40; ++i) ASSERT_OK(s->Put("blocks/" + std::to_string(i), data));
  a.Stop();
  std::vector<std::byte> buf(1000);
  int hits = 0, misses = 0;
  for (int i = 0; i < 40; ++i) {
    auto n = s->Read("blocks/" + std::to_string(i), 0, buf, "");
    if (n.ok()) {
      ++hits;
      EXPECT_EQ(*n, 1000u);
      EXPECT_EQ(0, std::memcmp(buf.data(), data.data(), 1000));
    } else {
      EXPECT_TRUE(n.status().IsNotFound()) << n.status().ToString();
      ++misses;
    }
  }
  // Both servers held some of the 40 keys; the live one still serves its share.
  EXPECT_GT(hits, 0);
  EXPECT_GT(misses, 0);
  EXPECT_GT(GetMemcachedStats(*s).server_failures, 0u);
  // The dead server is out of the continuum now: writes and reads go to the live one.
  for (int i = 0; i < 10; ++i) {
    const std::string key = "blocks/after" + std::to_string(i);
    ASSERT_OK(s->Put(key, data)) << key;
    auto n = s->Read(key, 0, buf, "");
    ASSERT_OK(n) << key;
  }
}

}  // namespace
}  // namespace tierfs
