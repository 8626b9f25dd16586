// Directory listings shared through L3 (listing_share.h): the listing object's format
// (l3_listing.h) and the Catalog of several "hosts" (each its own MetaStore and L3 tier) over
// one FakeBlobStore origin and one FakeBlobStore L3 bucket, with a FakeClock for the TTLs.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "base/metrics.h"
#include "base/units.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/catalog.h"
#include "tiercache/internal/l3_listing.h"
#include "tiercache/tier.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using testing::FakeBlobStore;
using tiercache_internal::DecodeL3Listing;
using tiercache_internal::EncodeL3Listing;
using tiercache_internal::ListingObjectName;

const std::string kMacKey(32, 'K');

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

DirEntry File(std::string name, uint64_t size, std::string etag, int64_t mtime) {
  DirEntry e;
  e.name = std::move(name);
  e.size = size;
  e.etag = std::move(etag);
  e.mtime_ns = mtime;
  return e;
}
DirEntry Dir(std::string name) {
  DirEntry e;
  e.name = std::move(name);
  e.type = EntryType::kDir;
  return e;
}

SharedListing Sample() {
  SharedListing l;
  l.listed_at_ns = 1'700'000'000'123'456'789LL;
  l.entries = {File("a.bin", 10, "etag-a", 5), Dir("sub"), File("z z.txt", 0, "", 7)};
  return l;
}

bool Same(const std::vector<DirEntry>& a, const std::vector<DirEntry>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].type != b[i].type || a[i].size != b[i].size ||
        a[i].etag != b[i].etag || a[i].mtime_ns != b[i].mtime_ns)
      return false;
  }
  return true;
}

// ---- the object format ----

TEST(ListingObjectTest, RoundTripWithAndWithoutMac) {
  for (const std::string& key : {std::string(), kMacKey}) {
    std::vector<std::byte> obj;
    ASSERT_OK(EncodeL3Listing("s3://h/b/", "train/x", Sample(), 42, Bytes(key), &obj));
    uint64_t stored = 0;
    auto l = DecodeL3Listing(obj, "s3://h/b/", "train/x", Bytes(key), &stored);
    ASSERT_OK(l);
    EXPECT_EQ(stored, 42u);
    EXPECT_EQ(l->listed_at_ns, Sample().listed_at_ns);
    EXPECT_TRUE(Same(l->entries, Sample().entries));
  }
}

TEST(ListingObjectTest, NamesAreApartFromBlocksAndCarryTheSource) {
  const std::string a = ListingObjectName("s3://h/b/", "d");
  EXPECT_TRUE(a.starts_with("listings/")) << a;
  EXPECT_EQ(a.size(), std::string("listings/").size() + 32);
  EXPECT_NE(a, ListingObjectName("s3://h/other/", "d"));  // another origin: another object
  EXPECT_NE(a, ListingObjectName("s3://h/b/", "e"));
  EXPECT_NE(a, ListingObjectName("s3://h/b/", ""));
}

TEST(ListingObjectTest, EveryDamageIsRejected) {
  std::vector<std::byte> good;
  ASSERT_OK(EncodeL3Listing("src", "d", Sample(), 1, Bytes(kMacKey), &good));
  uint64_t stored = 0;
  auto decode = [&](const std::vector<std::byte>& obj, std::string_view src, std::string_view dir,
                    const std::string& key) {
    return DecodeL3Listing(obj, src, dir, Bytes(key), &stored).status();
  };
  ASSERT_OK(decode(good, "src", "d", kMacKey));
  // Every single flipped byte is caught (checksum or MAC).
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<std::byte> bad = good;
    bad[i] ^= std::byte{0x01};
    EXPECT_EQ(decode(bad, "src", "d", kMacKey).code(), Status::Code::kCorruption) << "byte " << i;
  }
  // Cut short, another directory or source (foreign), another key, no key where one is required.
  std::vector<std::byte> cut(good.begin(), good.end() - 1);
  EXPECT_EQ(decode(cut, "src", "d", kMacKey).code(), Status::Code::kCorruption);
  EXPECT_EQ(decode(good, "src", "e", kMacKey).code(), Status::Code::kCorruption);
  EXPECT_EQ(decode(good, "src2", "d", kMacKey).code(), Status::Code::kCorruption);
  EXPECT_EQ(decode(good, "src", "d", std::string(32, 'O')).code(), Status::Code::kCorruption);
  std::vector<std::byte> plain;
  ASSERT_OK(EncodeL3Listing("src", "d", Sample(), 1, {}, &plain));
  EXPECT_EQ(decode(plain, "src", "d", kMacKey).code(), Status::Code::kCorruption);
  // Well-framed but bad entries: out of order, duplicate, a '/' or a control character in a name.
  for (auto entries :
       {std::vector<DirEntry>{File("b", 1, "e", 1), File("a", 1, "e", 1)},
        std::vector<DirEntry>{File("a", 1, "e", 1), File("a", 1, "e", 1)},
        std::vector<DirEntry>{File("a/b", 1, "e", 1)}, std::vector<DirEntry>{File("..", 1, "e", 1)},
        std::vector<DirEntry>{File("x\ny", 1, "e", 1)}}) {
    SharedListing l;
    l.entries = entries;
    std::vector<std::byte> obj;
    ASSERT_OK(EncodeL3Listing("src", "d", l, 1, {}, &obj));
    EXPECT_EQ(decode(obj, "src", "d", "").code(), Status::Code::kCorruption);
  }
}

TEST(ListingObjectTest, LargeListingsCompress) {
  SharedListing l;
  for (int i = 0; i < 20000; ++i) {
    char name[32];
    snprintf(name, sizeof name, "sample_%06d.jpg", i);
    l.entries.push_back(File(name, 1000 + i, "0123456789abcdef0123456789abcdef", 1'700'000'000LL));
  }
  std::vector<std::byte> obj;
  ASSERT_OK(EncodeL3Listing("src", "", l, 1, {}, &obj));
  EXPECT_LT(obj.size(), 20000u * 20) << "zstd should shrink ~70-byte entries well";
  uint64_t stored = 0;
  auto back = DecodeL3Listing(obj, "src", "", {}, &stored);
  ASSERT_OK(back);
  EXPECT_TRUE(Same(back->entries, l.entries));
}

// ---- hosts sharing listings through L3 ----

constexpr auto kTtl = std::chrono::seconds(60);

// One "host": its own metadata store, L3 tier (over the shared L3 bucket) and catalog.
struct Host {
  std::unique_ptr<MetaStore> meta = NewMemMetaStore();
  std::unique_ptr<Tier> l3;
  std::unique_ptr<Catalog> catalog;

  uint64_t Extra(const std::string& name) const {
    std::vector<std::pair<std::string, uint64_t>> v;
    l3->AppendExtraStats(&v);
    for (const auto& [k, n] : v) {
      if (k == name) return n;
    }
    ADD_FAILURE() << "no extra stat " << name;
    return 0;
  }
  // Waits until the tier's uploads are done (or 10 s passed).
  bool Drain() const {
    return testing::Eventually([&] { return Extra("write.pending") == 0; });
  }
};

class SharedListingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    origin_.PutObject("top.txt", "hello", 111);
    origin_.PutObject("a/one.bin", std::string(10, 'x'), 222);
    origin_.PutObject("a/two.bin", std::string(20, 'y'), 333);
    origin_.PutObject("a/b/deep.bin", "deep", 444);
    origin_.ResetCounters();
  }

  std::unique_ptr<Host> NewHost(BlobStore* origin, const std::string& mac_key = "",
                                std::chrono::nanoseconds ttl = kTtl) {
    auto h = std::make_unique<Host>();
    RemoteTierOptions ro;
    ro.block_size = 4096;
    ro.mac_key = mac_key;
    auto t = NewRemoteTier(ro, &l3_, &clock_);
    EXPECT_OK(t);
    h->l3 = std::move(*t);
    CatalogOptions co;
    co.metadata_ttl = ttl;
    co.stale_while_revalidate = false;  // every relisting on the caller's thread: deterministic
    co.listing_share = h->l3->listing_share();
    auto c = Catalog::Open(co, origin, h->meta.get(), &clock_);
    EXPECT_OK(c);
    h->catalog = std::move(*c);
    return h;
  }

  static std::vector<DirEntry> All(Host* h, std::string_view dir) {
    std::vector<DirEntry> out;
    Status st = h->catalog->ReadDir(dir, "", 1000, &out);
    EXPECT_OK(st);
    return out;
  }

  // Host A lists "", "a" and "a/b" from the origin and shares them.
  std::unique_ptr<Host> Hydrate(BlobStore* origin, const std::string& mac_key = "") {
    auto a = NewHost(origin, mac_key);
    All(a.get(), "a/b");  // lists "", "a" (its parents) and "a/b"
    EXPECT_TRUE(a->Drain());
    EXPECT_EQ(a->Extra("listings.stored"), 3u);
    return a;
  }

  FakeBlobStore origin_{"fake://bucket"};
  FakeBlobStore l3_{"fake://l3"};
  FakeClock clock_;
};

TEST_F(SharedListingTest, SecondHostListsWithoutTheOrigin) {
  auto a = Hydrate(&origin_);
  const uint64_t lists_a = origin_.list_calls();
  EXPECT_GE(lists_a, 3u);
  auto b = NewHost(&origin_);
  EXPECT_TRUE(Same(All(b.get(), "a"), All(a.get(), "a")));
  EXPECT_TRUE(Same(All(b.get(), ""), All(a.get(), "")));
  EXPECT_TRUE(Same(All(b.get(), "a/b"), All(a.get(), "a/b")));
  auto e = b->catalog->Lookup("a", "two.bin");
  ASSERT_OK(e);
  EXPECT_EQ(e->size, 20u);
  EXPECT_EQ(e->mtime_ns, 333);
  EXPECT_FALSE(e->etag.empty());
  EXPECT_EQ(b->catalog->Lookup("a", "nope").status().code(), Status::Code::kNotFound);
  EXPECT_EQ(origin_.list_calls(), lists_a) << "host B listed from the origin";
  EXPECT_EQ(b->catalog->Stats().list_requests, 0u);
  EXPECT_EQ(b->catalog->Stats().listing_misses, 0u);
  EXPECT_EQ(b->Extra("listings.hits"), 3u);
  EXPECT_EQ(b->Extra("listings.stored"), 0u);  // nothing to share: it came from L3
}

TEST_F(SharedListingTest, OnlyTheFirstHostAfterExpiryListsTheOrigin) {
  auto a = Hydrate(&origin_);
  auto b = NewHost(&origin_);
  All(b.get(), "a");
  origin_.PutObject("a/three.bin", "333", 555);  // changes after the listings were taken
  origin_.ResetCounters();
  // Still fresh (59 s): nobody relists, and the new file is not seen yet.
  clock_.Advance(std::chrono::seconds(59));
  EXPECT_EQ(All(b.get(), "a").size(), 3u);  // b/, one.bin, two.bin
  EXPECT_EQ(origin_.list_calls(), 0u);
  // Expired: host B is first and lists from the origin (the L3 copy is as old as its own).
  clock_.Advance(std::chrono::seconds(2));
  EXPECT_EQ(All(b.get(), "a").size(), 4u);
  const uint64_t lists_b = origin_.list_calls();
  EXPECT_GT(lists_b, 0u);
  EXPECT_GE(b->Extra("listings.old"), 1u);
  ASSERT_TRUE(b->Drain());
  EXPECT_GE(b->Extra("listings.stored"), 1u);
  // Host A, a second later, takes B's new listing from L3.
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_EQ(All(a.get(), "a").size(), 4u);
  EXPECT_EQ(origin_.list_calls(), lists_b) << "host A listed from the origin";
  // It expires for A when it expires for B: 60 s after B took it, not after A read it.
  clock_.Advance(std::chrono::seconds(59));
  All(a.get(), "a");
  EXPECT_GT(origin_.list_calls(), lists_b);
}

TEST_F(SharedListingTest, ACorruptListingIsIgnoredAndReplaced) {
  auto a = Hydrate(&origin_);
  const std::string name = ListingObjectName(origin_.Describe(), "a");
  auto info = l3_.Head(name);
  ASSERT_OK(info);
  std::string obj(info->size, '\0');
  ASSERT_OK(l3_.Read(name, 0, {reinterpret_cast<std::byte*>(obj.data()), obj.size()}, ""));
  obj[obj.size() - 3] ^= 0x40;
  l3_.PutObject(name, obj);
  origin_.ResetCounters();
  auto b = NewHost(&origin_);
  EXPECT_TRUE(Same(All(b.get(), "a"), All(a.get(), "a")));
  EXPECT_EQ(b->Extra("listings.rejected"), 1u);
  EXPECT_GT(origin_.list_calls(), 0u);  // "a" from the origin; "" from L3
  EXPECT_EQ(b->Extra("listings.hits"), 1u);
  ASSERT_TRUE(b->Drain());
  // B's origin listing replaced the bad object: C reads it from L3.
  origin_.ResetCounters();
  auto c = NewHost(&origin_);
  All(c.get(), "a");
  EXPECT_EQ(origin_.list_calls(), 0u);
  EXPECT_EQ(c->Extra("listings.rejected"), 0u);
}

TEST_F(SharedListingTest, AnotherKeyOrNoKeyIsNotTrusted) {
  auto a = Hydrate(&origin_, /*mac_key=*/"");
  origin_.ResetCounters();
  auto b = NewHost(&origin_, kMacKey);  // keyed: refuses the unauthenticated listings
  All(b.get(), "a");
  EXPECT_EQ(b->Extra("listings.rejected"), 2u);  // "" and "a"
  EXPECT_EQ(b->Extra("listings.hits"), 0u);
  EXPECT_GT(origin_.list_calls(), 0u);
  ASSERT_TRUE(b->Drain());
  origin_.ResetCounters();
  auto c = NewHost(&origin_, kMacKey);  // same key as B: takes B's listings
  All(c.get(), "a");
  EXPECT_EQ(c->Extra("listings.hits"), 2u);
  EXPECT_EQ(origin_.list_calls(), 0u);
  auto d = NewHost(&origin_, std::string(32, 'O'));  // another key
  All(d.get(), "a");
  EXPECT_EQ(d->Extra("listings.rejected"), 2u);
}

TEST_F(SharedListingTest, TwoOriginsSharingOneL3NeverMix) {
  auto a = Hydrate(&origin_);
  FakeBlobStore other("fake://other-bucket");
  other.PutObject("a/mine.bin", "m", 1);
  auto b = NewHost(&other);
  auto names = All(b.get(), "a");
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].name, "mine.bin");
  EXPECT_EQ(b->Extra("listings.hits"), 0u);
  EXPECT_GT(other.list_calls(), 0u);
}

TEST_F(SharedListingTest, AnL3ThatIsDownCostsOnlyItsOwnRequests) {
  Hydrate(&origin_);
  origin_.ResetCounters();
  l3_.FailNext(1000, Status::Unavailable("l3 down"));
  auto b = NewHost(&origin_);
  auto e = b->catalog->Lookup("a/b", "deep.bin");  // "", "a", "a/b": all from the origin
  ASSERT_OK(e);
  EXPECT_EQ(e->size, 4u);
  EXPECT_GE(origin_.list_calls(), 3u);
  EXPECT_EQ(b->Extra("listings.errors"), 3u);
  EXPECT_EQ(b->Extra("listings.hits"), 0u);
  // After breaker_failures (5) failures L3 is skipped without a request.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(kTtl);
    All(b.get(), "a");
  }
  EXPECT_GE(b->Extra("breaker.trips"), 1u);
  EXPECT_GE(b->Extra("skipped"), 1u);
}

TEST_F(SharedListingTest, ForeverTtlTakesAnyStoredListing) {
  Hydrate(&origin_);
  clock_.Advance(std::chrono::hours(24 * 365));
  origin_.ResetCounters();
  auto b = NewHost(&origin_, "", kForever);
  EXPECT_EQ(All(b.get(), "a").size(), 3u);
  EXPECT_EQ(origin_.list_calls(), 0u);
}

TEST_F(SharedListingTest, AListingLargerThanTheFirstReadTakesASecondGet) {
  SharedListing big;
  big.listed_at_ns = clock_.NowUnixNanos();
  uint64_t x = 88172645463325252ULL;  // xorshift: ETags that do not compress
  for (int i = 0; i < 20000; ++i) {
    char name[32];
    snprintf(name, sizeof name, "f_%06d", i);
    std::string etag;
    for (int j = 0; j < 2; ++j) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      char hex[17];
      snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(x));
      etag += hex;
    }
    big.entries.push_back(File(name, static_cast<uint64_t>(i), etag, i));
  }
  auto a = NewHost(&origin_);
  a->l3->listing_share()->Publish(origin_.Describe(), "big", big);
  ASSERT_TRUE(a->Drain());
  ASSERT_EQ(a->Extra("listings.stored"), 1u);
  auto info = l3_.Head(ListingObjectName(origin_.Describe(), "big"));
  ASSERT_OK(info);
  EXPECT_GT(info->size, 256u * 1024) << "the test needs an object over the first read";
  auto b = NewHost(&origin_);
  l3_.ResetCounters();
  auto got = b->l3->listing_share()->Fetch(origin_.Describe(), "big", 0);
  ASSERT_OK(got);
  EXPECT_EQ(l3_.read_calls(), 2u);
  EXPECT_EQ(got->listed_at_ns, big.listed_at_ns);
  EXPECT_TRUE(Same(got->entries, big.entries));
  // Asked for a newer one than it holds: not served, counted as old.
  EXPECT_EQ(b->l3->listing_share()
                ->Fetch(origin_.Describe(), "big", big.listed_at_ns + 1)
                .status()
                .code(),
            Status::Code::kNotFound);
  EXPECT_EQ(b->Extra("listings.old"), 1u);
}

// The value of the sample `series` (name{labels}) in a scrape, or -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

TEST_F(SharedListingTest, CountersReachStatsAndMetrics) {
  Hydrate(&origin_);
  auto b = NewHost(&origin_);
  All(b.get(), "a");
  b->catalog.reset();  // it points at the tier, which the cache below takes over
  metrics::Registry registry;
  TieredCacheOptions to;
  to.block_size = 4096;
  to.metrics = &registry;
  CacheTiers tiers;
  tiers.shared.push_back(std::move(b->l3));
  auto c = TieredCache::Open(to, std::move(tiers), &origin_, &clock_);
  ASSERT_OK(c);
  const std::string stats = (*c)->StatsText();
  EXPECT_NE(stats.find("l3.listings.hits=2 "), std::string::npos) << stats;
  EXPECT_NE(stats.find("l3.listings.rejected=0 "), std::string::npos) << stats;
  const std::string text = registry.Scrape();
  EXPECT_EQ(Sample(text, "tierfs_l3_listings_hits_total{tier=\"l3\"}"), 2);
  EXPECT_EQ(Sample(text, "tierfs_l3_listings_stored_total{tier=\"l3\"}"), 0);
  EXPECT_EQ(Sample(text, "tierfs_l3_listings_rejected_total{tier=\"l3\"}"), 0);
}

}  // namespace
}  // namespace tierfs
