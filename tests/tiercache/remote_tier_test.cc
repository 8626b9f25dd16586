// The L3 tier (NewRemoteTier) over FakeBlobStore: object format round trip, corruption, TTL,
// the bounded write queue, the circuit breaker, concurrency, TieredCache with two "hosts" sharing
// one L3, the keyed MAC (cache.l3_key_file), and GcRemoteTier.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/eventually.h"
#include "tests/testing/read_into.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/internal/l3_object.h"
#include "tiercache/tier.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using testing::AsString;
using testing::Eventually;
using testing::FakeBlobStore;
using testing::ParseStats;
using testing::Pattern;

constexpr uint64_t kBs = 4096;
constexpr size_t kHeader = 48;
constexpr size_t kMacHeader = 80;
const std::string kKey(32, 'K');
const std::string kOtherKey(32, 'O');

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

// An L3 object as a writer holding `mac_key` ("" = none) makes it.
std::string Encode(const BlockKey& key, const std::string& data, const std::string& mac_key,
                   uint64_t stored_ns = 0) {
  std::vector<std::byte> out;
  tiercache_internal::EncodeL3Object(key, Bytes(data), stored_ns, Bytes(mac_key), &out);
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

BlockRef MakeBlock(const std::string& s) {
  auto b = Block::Allocate(s.size());
  std::memcpy(b->mutable_data().data(), s.data(), s.size());
  b->set_size(s.size());
  return b;
}

BlockKey Key(int i) { return MakeBlockKey("fake://origin", "obj", "etag-1", kBs, i); }

uint64_t Extra(const Tier& t, const std::string& name) {
  std::vector<std::pair<std::string, uint64_t>> v;
  t.AppendExtraStats(&v);
  for (const auto& [k, n] : v) {
    if (k == name) return n;
  }
  ADD_FAILURE() << "no extra stat " << name;
  return 0;
}

// Waits until every queued upload finished (or 10 s passed).
bool Drain(const Tier& t) {
  return Eventually([&] { return Extra(t, "write.pending") == 0; });
}

std::string ObjectOf(FakeBlobStore* store, const BlockKey& key) {
  const std::string name = "blocks/" + BlockKeyHex(key);
  auto info = store->Head(name);
  if (!info.ok()) return "";
  std::string s(info->size, '\0');
  auto n = store->Read(name, 0, {reinterpret_cast<std::byte*>(s.data()), s.size()}, "");
  return n.ok() ? s : "";
}

class RemoteTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<Tier> Open() {
    options_.block_size = kBs;
    auto t = NewRemoteTier(options_, &store_, &clock_);
    EXPECT_OK(t);
    return t.ok() ? std::move(*t) : nullptr;
  }

  RemoteTierOptions options_;
  FakeBlobStore store_{"fake://l3"};
  FakeClock clock_;
};

TEST_F(RemoteTierTest, RoundTripAndObjectLayout) {
  auto t = Open();
  const std::string data = Pattern(kBs, 7);
  EXPECT_FALSE(t->Contains(Key(0)));
  ASSERT_OK(t->Insert(Key(0), MakeBlock(data), {}));
  ASSERT_TRUE(Drain(*t));
  EXPECT_TRUE(t->Contains(Key(0)));
  EXPECT_EQ(t->Stats().inserts, 1u);
  EXPECT_EQ(t->Stats().bytes_inserted, kBs);

  const std::string obj = ObjectOf(&store_, Key(0));
  ASSERT_EQ(obj.size(), kHeader + kBs);
  EXPECT_EQ(obj.substr(0, 4), "TFL3");
  EXPECT_EQ(obj.substr(kHeader), data);
  EXPECT_EQ(obj.substr(32, 16),
            std::string(reinterpret_cast<const char*>(Key(0).data()), Key(0).size()));

  auto r = t->Read(Key(0));
  ASSERT_OK(r);
  EXPECT_EQ(AsString((*r)->data()), data);
  EXPECT_EQ(t->Stats().hits, 1u);
  EXPECT_EQ(t->Stats().bytes_read, kBs);

  // A short (last) block and an empty one round-trip too.
  ASSERT_OK(t->Insert(Key(1), MakeBlock("tail"), {}));
  ASSERT_OK(t->Insert(Key(2), MakeBlock(""), {}));
  ASSERT_TRUE(Drain(*t));
  auto a = t->Read(Key(1));
  ASSERT_OK(a);
  EXPECT_EQ(AsString((*a)->data()), "tail");
  auto b = t->Read(Key(2));
  ASSERT_OK(b);
  EXPECT_EQ((*b)->size(), 0u);
}

// Polls until `n` reads wait at the store's gate (HoldReads); false after 10 s.
bool WaitBlocked(FakeBlobStore* store, int n) {
  return Eventually([&] { return store->blocked_reads() >= n; });
}

TEST_F(RemoteTierTest, ReadManyIssuesTheGetsAtOnceAndKeepsTheOrder) {
  options_.read_parallel = 4;
  auto t = Open();
  for (int i = 0; i < 6; ++i) {
    if (i == 2) continue;  // a miss
    ASSERT_OK(t->Insert(Key(i), MakeBlock(Pattern(kBs, i)), {}));
  }
  ASSERT_TRUE(Drain(*t));
  // Block 4 is corrupt: a miss too, counted.
  std::string bad = ObjectOf(&store_, Key(4));
  bad[kHeader + 1] ^= 1;
  store_.PutObject("blocks/" + BlockKeyHex(Key(4)), bad);
  std::vector<BlockKey> keys;
  for (int i = 0; i < 6; ++i) keys.push_back(Key(i));

  store_.HoldReads();
  std::vector<Result<BlockRef>> rs;
  std::thread reader([&] { rs = t->ReadMany(keys); });
  // read_parallel GETs wait at the gate together: they were issued at once.
  const bool together = WaitBlocked(&store_, 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a window for a fifth
  EXPECT_EQ(store_.blocked_reads(), 4);                        // never more than read_parallel
  store_.ReleaseReads();
  reader.join();
  ASSERT_TRUE(together);
  ASSERT_EQ(rs.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    if (i == 2 || i == 4) {
      EXPECT_TRUE(rs[i].status().IsNotFound()) << i << ": " << rs[i].status().ToString();
      continue;
    }
    ASSERT_OK(rs[i]) << i;
    EXPECT_EQ(AsString((*rs[i])->data()), Pattern(kBs, i)) << i;
  }
  EXPECT_EQ(t->Stats().hits, 4u);
  EXPECT_EQ(t->Stats().misses, 2u);
  EXPECT_EQ(t->Stats().corruptions, 1u);

  // read_parallel = 1: one GET after the other, same answers.
  options_.read_parallel = 1;
  auto one = Open();
  store_.HoldReads();
  std::thread r1([&] { rs = one->ReadMany(keys); });
  ASSERT_TRUE(WaitBlocked(&store_, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a window for a second
  EXPECT_EQ(store_.blocked_reads(), 1);
  store_.ReleaseReads();
  r1.join();
  ASSERT_EQ(rs.size(), 6u);
  EXPECT_EQ(AsString((*rs[5])->data()), Pattern(kBs, 5));
  EXPECT_TRUE(rs[2].status().IsNotFound());
}

TEST_F(RemoteTierTest, MissIsNotFound) {
  auto t = Open();
  auto r = t->Read(Key(5));
  EXPECT_TRUE(r.status().IsNotFound());
  EXPECT_EQ(t->Stats().misses, 1u);
  EXPECT_EQ(t->Stats().errors, 0u);
}

TEST_F(RemoteTierTest, CorruptObjectsAreMissesAndCounted) {
  auto t = Open();
  for (int i = 0; i < 5; ++i) ASSERT_OK(t->Insert(Key(i), MakeBlock(Pattern(kBs, i)), {}));
  ASSERT_TRUE(Drain(*t));
  std::string obj = ObjectOf(&store_, Key(0));
  // 0: one payload byte flipped → checksum mismatch.
  std::string flipped = obj;
  flipped[kHeader + 100] ^= 0x5a;
  store_.PutObject("blocks/" + BlockKeyHex(Key(0)), flipped);
  // 1: truncated payload → length mismatch.
  store_.PutObject("blocks/" + BlockKeyHex(Key(1)), ObjectOf(&store_, Key(1)).substr(0, 1000));
  // 2: block 3's (valid) object stored under block 2's name → header names another block.
  store_.PutObject("blocks/" + BlockKeyHex(Key(2)), ObjectOf(&store_, Key(3)));
  // 4: garbage without a header.
  store_.PutObject("blocks/" + BlockKeyHex(Key(4)), "not a tierfs block");
  for (int i : {0, 1, 2, 4}) {
    auto r = t->Read(Key(i));
    EXPECT_TRUE(r.status().IsNotFound()) << i << ": " << r.status().ToString();
    EXPECT_FALSE(t->Contains(Key(i)));
  }
  EXPECT_EQ(t->Stats().corruptions, 4u);
  EXPECT_EQ(t->Stats().hits, 0u);
  auto ok = t->Read(Key(3));
  ASSERT_OK(ok);
  EXPECT_EQ(AsString((*ok)->data()), Pattern(kBs, 3));

  // Writing the block again (what the origin refetch does) repairs the object.
  ASSERT_OK(t->Insert(Key(0), MakeBlock(Pattern(kBs, 0)), {}));
  ASSERT_TRUE(Drain(*t));
  auto fixed = t->Read(Key(0));
  ASSERT_OK(fixed);
  EXPECT_EQ(AsString((*fixed)->data()), Pattern(kBs, 0));
}

TEST_F(RemoteTierTest, KeyedObjectsCarryAMacAndRoundTrip) {
  options_.mac_key = kKey;
  auto t = Open();
  const std::string data = Pattern(kBs, 4);
  ASSERT_OK(t->Insert(Key(0), MakeBlock(data), {}));
  ASSERT_OK(t->Insert(Key(1), MakeBlock(""), {}));
  ASSERT_TRUE(Drain(*t));
  const std::string obj = ObjectOf(&store_, Key(0));
  ASSERT_EQ(obj.size(), kMacHeader + kBs);
  EXPECT_EQ(obj.substr(0, 4), "TFL3");
  EXPECT_EQ(obj[4], 2);  // version 2: with a MAC
  EXPECT_EQ(obj.substr(kMacHeader), data);
  // The MAC is HMAC-SHA256(key, the 48 fixed header bytes || the block's bytes).
  const HmacSha256Digest want =
      HmacSha256(Bytes(kKey), {Bytes(obj).first(kHeader), Bytes(obj).subspan(kMacHeader)});
  EXPECT_EQ(obj.substr(kHeader, 32), std::string(reinterpret_cast<const char*>(want.data()), 32));
  t->Erase(Key(0));
  auto r = t->Read(Key(0));
  ASSERT_OK(r);
  EXPECT_EQ(AsString((*r)->data()), data);
  auto empty = t->Read(Key(1));
  ASSERT_OK(empty);
  EXPECT_EQ((*empty)->size(), 0u);
  EXPECT_EQ(t->Stats().corruptions, 0u);
}

TEST_F(RemoteTierTest, WithAKeyForgedOrUnsignedObjectsAreRejected) {
  options_.mac_key = kKey;
  auto t = Open();
  const std::string good = Pattern(kBs, 1), evil = Pattern(kBs, 66);
  auto name = [](int i) { return "blocks/" + BlockKeyHex(Key(i)); };
  // 0: a writer without the key (version 1, valid checksum, the right block key).
  store_.PutObject(name(0), Encode(Key(0), evil, ""));
  // 1: a writer with another key.
  store_.PutObject(name(1), Encode(Key(1), evil, kOtherKey));
  // 2: a good keyed object with one byte changed and its XXH3 checksum fixed up: only the MAC
  // can tell.
  std::string tampered = Encode(Key(2), good, kKey);
  tampered[kMacHeader + 10] ^= 0x01;
  const uint64_t sum = BlockChecksum(Bytes(tampered).subspan(kMacHeader));
  for (int i = 0; i < 8; ++i) tampered[16 + i] = static_cast<char>(sum >> (8 * i));
  store_.PutObject(name(2), tampered);
  // 3: the MAC of a good object zeroed.
  std::string zeroed = Encode(Key(3), good, kKey);
  std::fill(zeroed.begin() + kHeader, zeroed.begin() + kMacHeader, '\0');
  store_.PutObject(name(3), zeroed);
  // 4: a good keyed object of another block, renamed (the MAC covers the block key).
  store_.PutObject(name(4), Encode(Key(5), good, kKey));
  for (int i = 0; i < 5; ++i) {
    auto r = t->Read(Key(i));
    EXPECT_TRUE(r.status().IsNotFound()) << i << ": " << r.status().ToString();
  }
  EXPECT_EQ(t->Stats().corruptions, 5u);
  EXPECT_EQ(t->Stats().hits, 0u);
  // The right key is accepted.
  store_.PutObject(name(6), Encode(Key(6), good, kKey));
  auto r = t->Read(Key(6));
  ASSERT_OK(r);
  EXPECT_EQ(AsString((*r)->data()), good);
}

TEST_F(RemoteTierTest, WithoutAKeyBothVersionsAreReadOnTheirChecksum) {
  auto t = Open();  // no key: L3 is trusted, as before
  const std::string data = Pattern(kBs, 8);
  store_.PutObject("blocks/" + BlockKeyHex(Key(0)), Encode(Key(0), data, ""));
  store_.PutObject("blocks/" + BlockKeyHex(Key(1)), Encode(Key(1), data, kKey));
  for (int i : {0, 1}) {
    auto r = t->Read(Key(i));
    ASSERT_OK(r) << i;
    EXPECT_EQ(AsString((*r)->data()), data);
  }
  // A version 1 object holding more than a block (it fits the read buffer, sized for the
  // version 2 header) is refused.
  store_.PutObject("blocks/" + BlockKeyHex(Key(3)), Encode(Key(3), Pattern(kBs + 32, 1), ""));
  EXPECT_TRUE(t->Read(Key(3)).status().IsNotFound());
  EXPECT_EQ(t->Stats().corruptions, 1u);
  // A keyless writer still writes version 1 (old daemons read it).
  ASSERT_OK(t->Insert(Key(2), MakeBlock(data), {}));
  ASSERT_TRUE(Drain(*t));
  const std::string obj = ObjectOf(&store_, Key(2));
  ASSERT_EQ(obj.size(), kHeader + kBs);
  EXPECT_EQ(obj[4], 1);
}

TEST(L3ObjectTest, ParseRejectsMalformedHeaders) {
  using tiercache_internal::ParseL3Header;
  using tiercache_internal::ParseL3Object;
  const std::string good = Encode(Key(0), "abc", kKey);
  ASSERT_OK(ParseL3Object(Bytes(good), Bytes(kKey)));
  auto h = ParseL3Header(Bytes(good).first(48));
  ASSERT_OK(h);
  EXPECT_EQ(h->version, 2u);
  EXPECT_EQ(h->header_bytes, 80u);
  EXPECT_EQ(h->length, 3u);
  EXPECT_EQ(h->key, Key(0));
  // Every prefix shorter than the whole object fails, never reads past the end.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(ParseL3Object(Bytes(good).first(n), Bytes(kKey)).ok()) << n;
    EXPECT_FALSE(ParseL3Object(Bytes(good).first(n), {}).ok()) << n;
  }
  std::string v9 = good;
  v9[4] = 9;
  EXPECT_NE(ParseL3Header(Bytes(v9)).status().message().find("version 9"), std::string::npos);
  std::string huge = Encode(Key(0), "abc", "");
  for (int i = 8; i < 16; ++i) huge[i] = '\xff';  // length 2^64-1
  EXPECT_FALSE(ParseL3Object(Bytes(huge), {}).ok());
}

TEST_F(RemoteTierTest, TtlExpiry) {
  options_.ttl = std::chrono::hours(1);
  auto t = Open();
  ASSERT_OK(t->Insert(Key(0), MakeBlock(Pattern(kBs)), {}));
  ASSERT_TRUE(Drain(*t));
  clock_.Advance(std::chrono::minutes(59));
  EXPECT_OK(t->Read(Key(0)));
  clock_.Advance(std::chrono::minutes(2));
  auto r = t->Read(Key(0));
  EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
  EXPECT_EQ(Extra(*t, "expired"), 1u);
  EXPECT_FALSE(t->Contains(Key(0)));
  // A fresh write makes it young again.
  ASSERT_OK(t->Insert(Key(0), MakeBlock(Pattern(kBs)), {}));
  ASSERT_TRUE(Drain(*t));
  EXPECT_OK(t->Read(Key(0)));
}

TEST_F(RemoteTierTest, FullQueueDropsWithoutBlocking) {
  options_.write_queue = 2;
  options_.write_threads = 1;
  store_.SetDelay(std::chrono::milliseconds(200));
  auto t = Open();
  const auto t0 = std::chrono::steady_clock::now();
  int dropped = 0;
  for (int i = 0; i < 10; ++i) {
    Status s = t->Insert(Key(i), MakeBlock(Pattern(kBs, i)), {});
    if (!s.ok()) {
      EXPECT_EQ(s.code(), Status::Code::kNoSpace) << s.ToString();
      ++dropped;
    }
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::milliseconds(100));
  // One upload in progress at most, two queued: at least seven dropped.
  EXPECT_GE(dropped, 7);
  EXPECT_EQ(Extra(*t, "write.dropped"), static_cast<uint64_t>(dropped));
  ASSERT_TRUE(Drain(*t));
  EXPECT_EQ(t->Stats().inserts, static_cast<uint64_t>(10 - dropped));
}

TEST_F(RemoteTierTest, DuplicateInsertsQueueOnce) {
  options_.write_threads = 1;
  store_.SetDelay(std::chrono::milliseconds(50));
  auto t = Open();
  for (int i = 0; i < 5; ++i) ASSERT_OK(t->Insert(Key(0), MakeBlock(Pattern(kBs)), {}));
  ASSERT_TRUE(Drain(*t));
  EXPECT_EQ(t->Stats().inserts, 1u);
  // Known to be there: a later insert is not uploaded again.
  ASSERT_OK(t->Insert(Key(0), MakeBlock(Pattern(kBs)), {}));
  ASSERT_TRUE(Drain(*t));
  EXPECT_EQ(t->Stats().inserts, 1u);
}

TEST_F(RemoteTierTest, CircuitBreakerSkipsAFailingStore) {
  options_.breaker_failures = 3;
  options_.breaker_cooldown = std::chrono::seconds(10);
  auto t = Open();
  store_.FailNext(1000, Status::Unavailable("l3 down"));
  for (int i = 0; i < 3; ++i) {
    auto r = t->Read(Key(i));
    EXPECT_EQ(r.status().code(), Status::Code::kUnavailable);
  }
  EXPECT_EQ(t->Stats().errors, 3u);
  EXPECT_EQ(Extra(*t, "breaker.open"), 1u);
  EXPECT_EQ(Extra(*t, "breaker.trips"), 1u);
  const uint64_t calls = store_.read_calls();
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(t->Read(Key(i)).ok());
  EXPECT_EQ(store_.read_calls(), calls) << "an open breaker must not touch the store";
  EXPECT_EQ(Extra(*t, "skipped"), 20u);
  // Writes are dropped while it is open.
  EXPECT_FALSE(t->Insert(Key(0), MakeBlock("x"), {}).ok());
  EXPECT_EQ(Extra(*t, "write.dropped"), 1u);

  // After the cool-down a request goes through; still failing, it re-opens at once.
  clock_.Advance(std::chrono::seconds(11));
  EXPECT_EQ(Extra(*t, "breaker.open"), 0u);
  EXPECT_FALSE(t->Read(Key(0)).ok());
  EXPECT_EQ(store_.read_calls(), calls + 1);
  EXPECT_EQ(Extra(*t, "breaker.open"), 1u);
  EXPECT_EQ(Extra(*t, "breaker.trips"), 2u);

  // Recovered: the next request after the cool-down succeeds (a miss) and closes it.
  store_.FailNext(0);
  clock_.Advance(std::chrono::seconds(11));
  EXPECT_TRUE(t->Read(Key(0)).status().IsNotFound());
  ASSERT_OK(t->Insert(Key(0), MakeBlock("y"), {}));
  ASSERT_TRUE(Drain(*t));
  auto r = t->Read(Key(0));
  ASSERT_OK(r);
  EXPECT_EQ(AsString((*r)->data()), "y");
  EXPECT_EQ(Extra(*t, "breaker.open"), 0u);
}

// memcached with one server of three down answers NotFound for that server's keys, writes too
// (blob_store.h "Failures"): the write-backs of the blocks that missed there all go to it, and
// must not open the breaker, which would take the live servers' hits away as well.
TEST_F(RemoteTierTest, WritesToALostServerDoNotOpenTheBreaker) {
  options_.breaker_failures = 3;
  options_.write_threads = 1;
  auto t = Open();
  store_.FailNext(10, Status::NotFound("memcached set: one server failed: a miss"));
  for (int i = 0; i < 10; ++i) ASSERT_OK(t->Insert(Key(i), MakeBlock(Pattern(64, i)), {}));
  ASSERT_TRUE(Drain(*t));
  EXPECT_EQ(Extra(*t, "write.errors"), 10u);
  EXPECT_EQ(Extra(*t, "breaker.trips"), 0u);
  EXPECT_EQ(Extra(*t, "breaker.open"), 0u);
  // The store answers again: writes and reads go through.
  ASSERT_OK(t->Insert(Key(20), MakeBlock(Pattern(64, 20)), {}));
  ASSERT_TRUE(Drain(*t));
  EXPECT_EQ(t->Stats().inserts, 1u);
  auto r = t->Read(Key(20));
  ASSERT_OK(r);
  // Any other write failure still counts towards it.
  store_.FailNext(3, Status::Unavailable("l3 down"));
  for (int i = 30; i < 33; ++i) ASSERT_OK(t->Insert(Key(i), MakeBlock(Pattern(64, i)), {}));
  ASSERT_TRUE(Drain(*t));
  EXPECT_EQ(Extra(*t, "breaker.trips"), 1u);
}

TEST_F(RemoteTierTest, WriteErrorsAreCounted) {
  options_.breaker_failures = 100;
  options_.write_threads = 1;
  auto t = Open();
  store_.FailNext(2, Status::IOError("disk full"));
  for (int i = 0; i < 3; ++i) ASSERT_OK(t->Insert(Key(i), MakeBlock(Pattern(64, i)), {}));
  ASSERT_TRUE(Drain(*t));
  EXPECT_EQ(Extra(*t, "write.errors"), 2u);
  EXPECT_EQ(t->Stats().inserts, 1u);
}

TEST_F(RemoteTierTest, ConcurrentInsertsAndReads) {
  options_.write_queue = 1000;
  options_.write_threads = 4;
  auto t = Open();
  constexpr int kThreads = 8, kPer = 40;
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < kPer; ++i) {
        const int id = th * kPer + i;
        EXPECT_OK(t->Insert(Key(id), MakeBlock(Pattern(512, id)), {}));
        (void)t->Read(Key(id));  // miss or hit, racing the upload
        (void)t->Contains(Key(id));
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(Drain(*t));
  EXPECT_EQ(t->Stats().inserts, static_cast<uint64_t>(kThreads * kPer));
  for (int id = 0; id < kThreads * kPer; ++id) {
    auto r = t->Read(Key(id));
    ASSERT_OK(r) << id;
    EXPECT_EQ(AsString((*r)->data()), Pattern(512, id));
  }
  EXPECT_EQ(t->Stats().corruptions, 0u);
}

TEST_F(RemoteTierTest, OptionsAreValidated) {
  options_.write_queue = 0;
  EXPECT_FALSE(NewRemoteTier(options_, &store_, &clock_).ok());
  options_.write_queue = 4;
  options_.write_threads = 0;
  EXPECT_FALSE(NewRemoteTier(options_, &store_, &clock_).ok());
  options_.write_threads = 1;
  EXPECT_FALSE(NewRemoteTier(options_, nullptr, &clock_).ok());
}

// ---- two hosts (separate L1s) sharing one origin and one L3 through TieredCache ----

class SharedL3Test : public ::testing::Test {
 protected:
  struct Host {
    Tier* l3 = nullptr;
    std::unique_ptr<TieredCache> cache;
  };
  // `prefetch_threads` > 0: readahead runs of 8 blocks.
  Host OpenHost(int prefetch_threads = 0) {
    CacheTiers tiers;
    MemoryTierOptions m;
    m.capacity_bytes = 1 << 22;
    m.shards = 2;
    tiers.host.push_back(NewMemoryTier(m));
    RemoteTierOptions r;
    r.block_size = kBs;
    r.write_queue = 1000;
    r.mac_key = mac_key_;
    auto l3 = NewRemoteTier(r, &l3_store_, &clock_);
    EXPECT_OK(l3);
    Host h;
    h.l3 = l3->get();
    tiers.shared.push_back(std::move(*l3));
    TieredCacheOptions o;
    o.block_size = kBs;
    o.prefetch_threads = prefetch_threads;
    o.readahead_run_bytes = 8 * kBs;
    auto c = TieredCache::Open(o, std::move(tiers), &origin_, &clock_);
    EXPECT_OK(c);
    h.cache = std::move(*c);
    return h;
  }
  ObjectRef Put(const std::string& key, const std::string& data) {
    origin_.PutObject(key, data);
    ObjectRef o;
    o.key = key;
    o.info = *origin_.Head(key);
    return o;
  }
  std::string ReadAll(TieredCache* c, const ObjectRef& o) {
    std::string out(o.info.size, '\0');
    auto n =
        tierfs::testing::ReadInto(*c, o, 0, {reinterpret_cast<std::byte*>(out.data()), out.size()});
    EXPECT_OK(n);
    return out;
  }

  FakeBlobStore origin_{"fake://origin"};
  FakeBlobStore l3_store_{"fake://l3"};
  FakeClock clock_;
  std::string mac_key_;  // cache.l3_key_file of the hosts opened next
};

TEST_F(SharedL3Test, HostBReadsEverythingFromL3) {
  const std::string data = Pattern(10 * kBs + 123, 9);
  const ObjectRef obj = Put("data/a.bin", data);
  Host a = OpenHost();
  EXPECT_EQ(ReadAll(a.cache.get(), obj), data);
  EXPECT_EQ(a.cache->Stats().origin_requests, 11u);
  ASSERT_TRUE(Drain(*a.l3));
  EXPECT_EQ(a.l3->Stats().inserts, 11u);
  auto sa = ParseStats(a.cache->StatsText());
  EXPECT_EQ(sa["l3.write.dropped"], 0u);
  EXPECT_EQ(sa["l3.inserts"], 11u);

  Host b = OpenHost();
  origin_.ResetCounters();
  EXPECT_EQ(ReadAll(b.cache.get(), obj), data);
  EXPECT_EQ(b.cache->Stats().origin_requests, 0u);
  EXPECT_EQ(origin_.read_calls(), 0u);
  EXPECT_EQ(b.l3->Stats().hits, 11u);
  // The L3 hits were copied up into B's L1: a second read touches neither L3 nor the origin.
  EXPECT_EQ(ReadAll(b.cache.get(), obj), data);
  EXPECT_EQ(b.l3->Stats().hits, 11u);
  // B did not write the blocks back to L3.
  ASSERT_TRUE(Drain(*b.l3));
  EXPECT_EQ(b.l3->Stats().inserts, 0u);
  auto res = b.cache->Residency(obj);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0], (std::pair<std::string, uint64_t>("l1", 11)));
  EXPECT_EQ(res[1], (std::pair<std::string, uint64_t>("l3", 11)));
  // Evict drops the host tiers only: L3 keeps its copy for the other hosts.
  b.cache->Evict(obj);
  EXPECT_EQ(l3_store_
                .Head("blocks/" +
                      BlockKeyHex(MakeBlockKey("fake://origin", obj.key, obj.info.etag, kBs, 0)))
                .ok(),
            true);
}

// Polls until the host tiers hold all of `o`; false after 10 s.
bool WaitHostHolds(TieredCache* c, const ObjectRef& o) {
  return Eventually([&] { return c->HostHolds(o, 0, o.info.size); });
}

// The host tiers can hold an object before its blocks are handed to L3's write queue, so a Drain
// right after WaitHostHolds may see an empty queue too early: wait for `n` uploads first.
bool WaitL3Inserts(const Tier& t, uint64_t n) {
  return Eventually([&] { return t.Stats().inserts >= n; });
}

TEST_F(SharedL3Test, ReadaheadRunsComeFromL3AtOnceAndTheGapsFromTheOriginInOneRequest) {
  const std::string data = Pattern(8 * kBs, 11);
  const ObjectRef obj = Put("run.bin", data);
  {
    // Host A, cold: the run misses L3 (one ReadMany) and comes from the origin in one request,
    // then is written back block by block.
    Host a = OpenHost(1);
    EXPECT_EQ(a.cache->Prefetch(obj, 0, 8), 0u);
    ASSERT_TRUE(WaitHostHolds(a.cache.get(), obj));
    EXPECT_EQ(origin_.read_calls(), 1u);
    EXPECT_EQ(a.l3->Stats().misses, 8u);
    ASSERT_TRUE(WaitL3Inserts(*a.l3, 8));
    ASSERT_TRUE(Drain(*a.l3));
    EXPECT_EQ(a.l3->Stats().inserts, 8u);
  }
  // Two blocks of the middle are missing from L3.
  for (int i : {3, 4}) {
    l3_store_.RemoveObject("blocks/" +
                           BlockKeyHex(MakeBlockKey("fake://origin", obj.key, obj.info, kBs, i)));
  }
  origin_.ResetCounters();
  Host b = OpenHost(1);
  l3_store_.HoldReads();
  EXPECT_EQ(b.cache->Prefetch(obj, 0, 8), 0u);
  // The run's 8 L3 GETs are in flight together (read_parallel = 8 by default).
  const bool together = WaitBlocked(&l3_store_, 8);
  l3_store_.ReleaseReads();
  ASSERT_TRUE(together);
  ASSERT_TRUE(WaitHostHolds(b.cache.get(), obj));
  EXPECT_EQ(b.l3->Stats().hits, 6u);
  EXPECT_EQ(b.l3->Stats().misses, 2u);
  // Blocks 3 and 4 came from the origin with one request.
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(b.cache->Stats().origin_requests, 1u);
  auto s = ParseStats(b.cache->StatsText());
  EXPECT_EQ(s["readahead.blocks"], 8u);
  EXPECT_EQ(ReadAll(b.cache.get(), obj), data);
  EXPECT_EQ(origin_.read_calls(), 1u);
  EXPECT_EQ(b.l3->Stats().hits, 6u);  // the reads were served by L1
  // Only the two origin blocks were written back.
  ASSERT_TRUE(WaitL3Inserts(*b.l3, 2));
  ASSERT_TRUE(Drain(*b.l3));
  EXPECT_EQ(b.l3->Stats().inserts, 2u);
}

TEST_F(SharedL3Test, HydrateRunReadsL3AtOnceAndTheRestFromTheOrigin) {
  const std::string data = Pattern(8 * kBs, 12);
  const ObjectRef obj = Put("hyd.bin", data);
  {
    Host a = OpenHost();
    EXPECT_EQ(ReadAll(a.cache.get(), obj), data);
    ASSERT_TRUE(Drain(*a.l3));
  }
  for (int i : {0, 6, 7}) {
    l3_store_.RemoveObject("blocks/" +
                           BlockKeyHex(MakeBlockKey("fake://origin", obj.key, obj.info, kBs, i)));
  }
  origin_.ResetCounters();
  Host b = OpenHost();
  l3_store_.HoldReads();
  uint64_t done = 0;
  Status st;
  std::thread h([&] { st = b.cache->HydrateRun(obj, 0, 8, /*target=*/0, &done); });
  const bool together = WaitBlocked(&l3_store_, 8);
  l3_store_.ReleaseReads();
  h.join();
  ASSERT_TRUE(together);
  ASSERT_OK(st);
  EXPECT_EQ(done, 8 * kBs);
  EXPECT_EQ(b.l3->Stats().hits, 5u);
  // Block 0 and blocks 6-7: two origin requests.
  EXPECT_EQ(origin_.read_calls(), 2u);
  EXPECT_TRUE(b.cache->HostHolds(obj, 0, obj.info.size));
  EXPECT_EQ(ReadAll(b.cache.get(), obj), data);
  EXPECT_EQ(origin_.read_calls(), 2u);
  ASSERT_TRUE(Drain(*b.l3));
  EXPECT_EQ(b.l3->Stats().inserts, 3u);
}

TEST_F(SharedL3Test, L3DownNeverFailsARead) {
  const std::string data = Pattern(6 * kBs, 3);
  const ObjectRef obj = Put("x", data);
  Host h = OpenHost();
  l3_store_.FailNext(1 << 30, Status::Unavailable("connection refused"));
  EXPECT_EQ(ReadAll(h.cache.get(), obj), data);
  EXPECT_EQ(h.cache->Stats().origin_requests, 6u);
  auto s = ParseStats(h.cache->StatsText());
  EXPECT_GT(s["l3.errors"] + s["l3.skipped"], 0u);
  EXPECT_EQ(s["origin.errors"], 0u);
  // The endpoints' request counters are listed too (a fake store reports zeros).
  for (const char* k :
       {"origin.retries", "origin.hedges", "origin.hedge_wins", "origin.concurrency_limit",
        "origin.throttled", "l3.hedges", "l3.retries"}) {
    EXPECT_TRUE(s.count(k)) << k << " missing from " << h.cache->StatsText();
  }
}

TEST_F(SharedL3Test, CorruptL3BlockIsRefetchedFromTheOrigin) {
  const std::string data = Pattern(4 * kBs, 5);
  const ObjectRef obj = Put("y", data);
  {
    Host a = OpenHost();
    EXPECT_EQ(ReadAll(a.cache.get(), obj), data);
    ASSERT_TRUE(Drain(*a.l3));
  }
  const std::string name =
      "blocks/" + BlockKeyHex(MakeBlockKey("fake://origin", "y", obj.info.etag, kBs, 2));
  std::string o = ObjectOf(&l3_store_, MakeBlockKey("fake://origin", "y", obj.info.etag, kBs, 2));
  ASSERT_FALSE(o.empty());
  o[kHeader + 7] ^= 1;
  l3_store_.PutObject(name, o);
  Host b = OpenHost();
  EXPECT_EQ(ReadAll(b.cache.get(), obj), data);
  EXPECT_EQ(b.l3->Stats().corruptions, 1u);
  EXPECT_EQ(b.l3->Stats().hits, 3u);
  EXPECT_EQ(b.cache->Stats().origin_requests, 1u);
  // The refetched block was written back over the bad object.
  ASSERT_TRUE(Drain(*b.l3));
  Host c = OpenHost();
  EXPECT_EQ(ReadAll(c.cache.get(), obj), data);
  EXPECT_EQ(c.cache->Stats().origin_requests, 0u);
  EXPECT_EQ(c.l3->Stats().corruptions, 0u);
}

TEST_F(SharedL3Test, PoisonFromAWriterWithoutTheKeyIsRefetchedNeverServed) {
  const std::string data = Pattern(4 * kBs, 6);
  const ObjectRef obj = Put("z", data);
  mac_key_ = kKey;
  {
    Host a = OpenHost();
    EXPECT_EQ(ReadAll(a.cache.get(), obj), data);
    ASSERT_TRUE(Drain(*a.l3));
  }
  // Someone with write access to the bucket but not the key replaces block 1 by other bytes in
  // a well-formed object (valid checksum, right block key): unsigned, and signed with their key.
  const BlockKey k1 = MakeBlockKey("fake://origin", "z", obj.info.etag, kBs, 1);
  const BlockKey k2 = MakeBlockKey("fake://origin", "z", obj.info.etag, kBs, 2);
  const std::string poison(kBs, 'P');
  l3_store_.PutObject("blocks/" + BlockKeyHex(k1), Encode(k1, poison, ""));
  l3_store_.PutObject("blocks/" + BlockKeyHex(k2), Encode(k2, poison, kOtherKey));
  Host b = OpenHost();
  EXPECT_EQ(ReadAll(b.cache.get(), obj), data);
  EXPECT_EQ(b.l3->Stats().corruptions, 2u);
  EXPECT_EQ(b.l3->Stats().hits, 2u);
  EXPECT_EQ(b.cache->Stats().origin_requests, 2u);
  // The refetched blocks were written back, signed: the next host reads all of it from L3.
  ASSERT_TRUE(Drain(*b.l3));
  Host c = OpenHost();
  EXPECT_EQ(ReadAll(c.cache.get(), obj), data);
  EXPECT_EQ(c.cache->Stats().origin_requests, 0u);
  EXPECT_EQ(c.l3->Stats().corruptions, 0u);
  // A host with the wrong key trusts none of it.
  mac_key_ = kOtherKey;
  Host d = OpenHost();
  EXPECT_EQ(ReadAll(d.cache.get(), obj), data);
  EXPECT_EQ(d.l3->Stats().hits, 0u);
  EXPECT_EQ(d.l3->Stats().corruptions, 4u);
  EXPECT_EQ(d.cache->Stats().origin_requests, 4u);
}

// ---- gc ----

TEST(RemoteGcTest, ExpiresThenTrimsOldestFirst) {
  FakeBlobStore store("fake://l3");
  FakeClock clock;
  const int64_t now = clock.NowUnixNanos();
  const int64_t hour = 3600LL * 1000000000LL;
  // 6 blocks of 100 bytes, aged 10h, 8h, 5h, 3h, 2h, 1h; plus an object outside blocks/.
  const int ages[] = {10, 8, 5, 3, 2, 1};
  for (int i = 0; i < 6; ++i) {
    store.PutObject("blocks/" + BlockKeyHex(Key(i)), Encode(Key(i), std::string(52, 'x'), ""),
                    now - ages[i] * hour);
  }
  store.PutObject("other/keep", "k", 0);

  RemoteGcOptions o;
  o.ttl = std::chrono::hours(6);
  o.max_bytes = 250;
  o.dry_run = true;
  auto dry = GcRemoteTier(o, &store, &clock);
  ASSERT_OK(dry);
  EXPECT_EQ(dry->objects, 6u);
  EXPECT_EQ(dry->expired, 2u);
  EXPECT_EQ(dry->trimmed, 2u);
  EXPECT_EQ(dry->remaining_bytes, 200u);
  for (int i = 0; i < 6; ++i) EXPECT_OK(store.Head("blocks/" + BlockKeyHex(Key(i))));

  o.dry_run = false;
  auto rep = GcRemoteTier(o, &store, &clock);
  ASSERT_OK(rep);
  EXPECT_EQ(rep->expired, 2u);
  EXPECT_EQ(rep->expired_bytes, 200u);
  EXPECT_EQ(rep->trimmed, 2u);
  EXPECT_EQ(rep->remaining_objects, 2u);
  EXPECT_EQ(rep->remaining_bytes, 200u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(store.Head("blocks/" + BlockKeyHex(Key(i))).ok(), i >= 4) << i;
  }
  EXPECT_OK(store.Head("other/keep"));

  // No ttl, no max: nothing to do.
  auto idle = GcRemoteTier(RemoteGcOptions{}, &store, &clock);
  ASSERT_OK(idle);
  EXPECT_EQ(idle->expired + idle->trimmed, 0u);
}

TEST(RemoteGcTest, DeletesOnlyTierfsObjects) {
  FakeBlobStore store("fake://l3");
  FakeClock clock;
  const int64_t old = clock.NowUnixNanos() - 100LL * 3600 * 1000000000LL;
  auto name = [](int i) { return "blocks/" + BlockKeyHex(Key(i)); };
  // Tierfs's own: version 1 and version 2 (keyed) objects.
  store.PutObject(name(0), Encode(Key(0), std::string(52, 'a'), ""), old);
  store.PutObject(name(1), Encode(Key(1), std::string(20, 'b'), kKey), old);
  // Not tierfs's, all as old: other names, a foreign body under a block name, a tierfs object
  // of another block under this name, an object shorter than a header, an unknown version.
  store.PutObject("blocks/README.txt", std::string(300, 'r'), old);
  store.PutObject("blocks/" + BlockKeyHex(Key(2)) + ".bak", Encode(Key(2), "x", ""), old);
  store.PutObject("blocks/" + std::string(32, 'A'), Encode(Key(2), "x", ""), old);
  store.PutObject(name(3), std::string(100, 'z'), old);
  store.PutObject(name(4), Encode(Key(9), std::string(52, 'c'), ""), old);
  store.PutObject(name(5), "TFL3", old);
  std::string v7 = Encode(Key(6), std::string(52, 'd'), "");
  v7[4] = 7;
  store.PutObject(name(6), v7, old);

  RemoteGcOptions o;
  o.ttl = std::chrono::hours(1);
  o.dry_run = true;
  auto dry = GcRemoteTier(o, &store, &clock);
  ASSERT_OK(dry);
  EXPECT_EQ(dry->objects, 9u);
  EXPECT_EQ(dry->expired, 2u);
  EXPECT_EQ(dry->foreign, 7u);
  o.dry_run = false;
  auto rep = GcRemoteTier(o, &store, &clock);
  ASSERT_OK(rep);
  EXPECT_EQ(rep->expired, 2u);
  EXPECT_EQ(rep->expired_bytes, 100u + 80u + 20u);
  EXPECT_EQ(rep->foreign, 7u);
  EXPECT_EQ(rep->remaining_objects, 0u);
  EXPECT_EQ(rep->delete_errors, 0u);
  EXPECT_FALSE(store.Head(name(0)).ok());
  EXPECT_FALSE(store.Head(name(1)).ok());
  for (const std::string& kept :
       {std::string("blocks/README.txt"), "blocks/" + BlockKeyHex(Key(2)) + ".bak",
        "blocks/" + std::string(32, 'A'), name(3), name(4), name(5), name(6)}) {
    EXPECT_OK(store.Head(kept)) << kept;
  }

  // Trimming to max_bytes neither deletes foreign objects nor counts them.
  store.PutObject(name(7), Encode(Key(7), std::string(52, 'e'), ""), old + 1);
  store.PutObject(name(8), Encode(Key(8), std::string(52, 'f'), ""), old + 2);
  RemoteGcOptions trim;
  trim.max_bytes = 100;
  auto t = GcRemoteTier(trim, &store, &clock);
  ASSERT_OK(t);
  EXPECT_EQ(t->trimmed, 1u);
  EXPECT_EQ(t->remaining_objects, 1u);
  EXPECT_EQ(t->remaining_bytes, 100u);
  EXPECT_FALSE(store.Head(name(7)).ok());
  EXPECT_OK(store.Head(name(8)));
  EXPECT_OK(store.Head(name(3)));
}

TEST(RemoteGcTest, ListErrorIsReturned) {
  FakeBlobStore store("fake://l3");
  store.FailNext(1, Status::Unavailable("down"));
  EXPECT_FALSE(GcRemoteTier(RemoteGcOptions{}, &store, nullptr).ok());
}

// An L3 bucket whose listing cycles A -> B -> A: gc ends with an error and deletes nothing.
class CyclicListStore : public FakeBlobStore {
 public:
  using FakeBlobStore::FakeBlobStore;
  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override {
    ++calls;
    TIERFS_ASSIGN_OR_RETURN(ListPage page, FakeBlobStore::List(prefix, delimiter, "", max_keys));
    page.next_token = token == "A" ? "B" : "A";
    return page;
  }
  int calls = 0;
};

TEST(RemoteGcTest, CyclicContinuationTokensEndInAnErrorNotALoop) {
  CyclicListStore store("fake://l3");
  FakeClock clock;
  store.PutObject("blocks/" + BlockKeyHex(Key(1)), "x", 0);
  RemoteGcOptions o;
  o.ttl = std::chrono::hours(1);
  auto rep = GcRemoteTier(o, &store, &clock);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.status().code(), Status::Code::kCorruption) << rep.status().ToString();
  EXPECT_NE(rep.status().message().find("repeated a continuation token"), std::string::npos)
      << rep.status().ToString();
  EXPECT_EQ(store.calls, 3);                               // "", A, B -> A again
  EXPECT_OK(store.Head("blocks/" + BlockKeyHex(Key(1))));  // nothing deleted
}

}  // namespace
}  // namespace tierfs
