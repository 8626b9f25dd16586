// PolicyResolver: value parsing, nearest-ancestor inheritance per field, config prefixes as
// defaults, persistence across a reopen, the pin quota; and the pin/TTL plumbing through
// TieredCache (Placement, Tier::SetPinned/StoredAt).
#include "tiercache/policy.h"

#include <gtest/gtest.h>

#include "base/units.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/read_into.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using namespace std::chrono_literals;

TEST(PolicyValues, Parse) {
  EXPECT_TRUE(*ParsePinValue("1"));
  EXPECT_FALSE(*ParsePinValue("0"));
  for (const char* bad : {"", "2", "yes", "true", " 1", "01"}) {
    EXPECT_EQ(ParsePinValue(bad).status().code(), Status::Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(*ParseTtlValue("30s"), 30s);
  EXPECT_EQ(*ParseTtlValue("10m"), 10min);
  EXPECT_EQ(*ParseTtlValue("forever"), kForever);
  for (const char* bad : {"", "abc", "-5s", "0", "0s", "10 parsecs"}) {
    EXPECT_EQ(ParseTtlValue(bad).status().code(), Status::Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(*ParseEvictionOrder("lru"), EvictionOrder::kLru);
  EXPECT_EQ(*ParseEvictionOrder("ttl"), EvictionOrder::kTtl);
  for (const char* bad : {"", "LRU", "fifo", "lru "}) {
    EXPECT_EQ(ParseEvictionOrder(bad).status().code(), Status::Code::kInvalidArgument) << bad;
  }
}

TEST(PolicyValues, EncodeDecode) {
  Policy p;
  p.pin = true;
  p.ttl = 90s;
  p.eviction = EvictionOrder::kTtl;
  p.pinned_bytes = 1234;
  auto d = DecodePolicy(EncodePolicy(p));
  ASSERT_OK(d);
  EXPECT_EQ(d->pin, p.pin);
  EXPECT_EQ(d->ttl, p.ttl);
  EXPECT_EQ(d->eviction, p.eviction);
  EXPECT_EQ(d->pinned_bytes, 1234u);
  auto e = DecodePolicy(EncodePolicy(Policy{}));
  ASSERT_OK(e);
  EXPECT_TRUE(e->empty());
  EXPECT_FALSE(DecodePolicy("").ok());
  EXPECT_FALSE(DecodePolicy("2 pin=1 ttl=- eviction=-").ok());
  EXPECT_FALSE(DecodePolicy("1 pin=7 ttl=- eviction=-").ok());
  EXPECT_FALSE(DecodePolicy("1 pin=1").ok());
  EXPECT_EQ(PolicyKey("a/b"), "policy/a/b");
}

TEST(PolicyValues, AdmitIsStoredAndOptionalInOldRecords) {
  Policy p;
  p.admit = AdmitPolicy::kReuse;
  EXPECT_FALSE(p.empty());
  auto d = DecodePolicy(EncodePolicy(p));
  ASSERT_OK(d);
  EXPECT_EQ(d->admit, AdmitPolicy::kReuse);
  EXPECT_FALSE(d->pin.has_value());
  // A record written before admit existed: none set.
  auto old = DecodePolicy("1 pin=1 ttl=- eviction=- pinned_bytes=5");
  ASSERT_OK(old);
  EXPECT_FALSE(old->admit.has_value());
  EXPECT_EQ(DecodePolicy("1 pin=- ttl=- eviction=- pinned_bytes=0 admit=sometimes").status().code(),
            Status::Code::kCorruption);
}

class PolicyResolverTest : public ::testing::Test {
 protected:
  std::unique_ptr<PolicyResolver> Open(PolicyOptions o = {}) {
    auto r = PolicyResolver::Open(o, meta_.get());
    EXPECT_OK(r);
    return std::move(*r);
  }
  std::unique_ptr<MetaStore> meta_ = NewMemMetaStore();
};

TEST_F(PolicyResolverTest, DefaultsWithoutPolicies) {
  auto r = Open();
  EffectivePolicy e = r->Resolve("a/b/c");
  EXPECT_FALSE(e.pin);
  EXPECT_EQ(e.ttl, kForever);
  EXPECT_EQ(e.eviction, EvictionOrder::kLru);
  EXPECT_FALSE(r->PlacementFor("a/b/c").pinned);
}

TEST_F(PolicyResolverTest, NearestAncestorPerFieldAndPersistence) {
  {
    auto r = Open();
    Policy dir;
    dir.pin = true;
    dir.ttl = 60s;
    ASSERT_OK(r->Set("data", dir, 100));
    Policy sub;
    sub.ttl = 5s;  // overrides the ttl only; pin is inherited
    ASSERT_OK(r->Set("data/sub", sub));
    Policy unpin;
    unpin.pin = false;
    ASSERT_OK(r->Set("data/sub/cold.bin", unpin));
  }
  auto r = Open();  // reloaded from the metastore
  EffectivePolicy e = r->Resolve("data/sub/x.bin");
  EXPECT_TRUE(e.pin);
  EXPECT_EQ(e.ttl, 5s);
  EXPECT_EQ(r->Resolve("data/y").ttl, 60s);
  EXPECT_TRUE(r->Resolve("data").pin);
  EXPECT_FALSE(r->Resolve("database/x").pin);  // a sibling with a common string prefix
  EXPECT_FALSE(r->Resolve("data/sub/cold.bin").pin);
  EXPECT_FALSE(r->Resolve("other").pin);
  EXPECT_TRUE(r->PlacementFor("data/sub/x.bin").pinned);
  EXPECT_EQ(r->PlacementFor("data/sub/x.bin").ttl, 5s);
  EXPECT_EQ(r->pinned_bytes(), 100u);
  EXPECT_EQ(*r->GetExact("data/sub").ttl, 5s);
  EXPECT_FALSE(r->GetExact("data/sub").pin);
}

TEST_F(PolicyResolverTest, ConfigPrefixesAreDefaultsLongestFirst) {
  PolicyOptions o;
  PrefixPolicy a;
  a.prefix = "datasets/";
  a.policy.ttl = 1h;
  a.policy.eviction = EvictionOrder::kTtl;
  PrefixPolicy b;
  b.prefix = "datasets/imagenet/";
  b.policy.pin = true;
  b.policy.ttl = 10min;
  o.prefixes = {a, b};
  auto r = Open(o);
  EffectivePolicy e = r->Resolve("datasets/imagenet/train/0.jpg");
  EXPECT_TRUE(e.pin);
  EXPECT_EQ(e.ttl, 10min);
  EXPECT_EQ(e.eviction, EvictionOrder::kTtl);
  EXPECT_TRUE(r->Resolve("datasets/imagenet").pin);  // the directory itself
  EXPECT_FALSE(r->Resolve("datasets/coco/x").pin);
  EXPECT_EQ(r->Resolve("datasets/coco/x").ttl, 1h);
  // A stored policy beats the config.
  Policy p;
  p.ttl = 1s;
  ASSERT_OK(r->Set("datasets/imagenet/train", p));
  EXPECT_EQ(r->Resolve("datasets/imagenet/train/0.jpg").ttl, 1s);
}

TEST_F(PolicyResolverTest, QuotaGroupsComeFromTheMostSpecificPrefixWithAQuota) {
  PolicyOptions o;
  PrefixPolicy all;
  all.prefix = "datasets/";
  all.quota_bytes = 1000;
  PrefixPolicy inet;
  inet.prefix = "datasets/imagenet/";
  inet.quota_bytes = 300;
  inet.policy.eviction = EvictionOrder::kTtl;
  PrefixPolicy pinned;  // more specific, but without a quota: imagenet's quota still applies
  pinned.prefix = "datasets/imagenet/val/";
  pinned.policy.pin = true;
  o.prefixes = {all, inet, pinned};
  auto r = Open(o);
  Placement p = r->PlacementFor("datasets/imagenet/val/1.jpg");
  EXPECT_EQ(p.quota_group, QuotaGroupId("datasets/imagenet/"));
  EXPECT_EQ(p.quota_bytes, 300u);
  EXPECT_TRUE(p.pinned);
  EXPECT_TRUE(p.ttl_order);
  p = r->PlacementFor("datasets/coco/1.jpg");
  EXPECT_EQ(p.quota_group, QuotaGroupId("datasets/"));
  EXPECT_EQ(p.quota_bytes, 1000u);
  EXPECT_FALSE(p.ttl_order);
  EXPECT_NE(QuotaGroupId("datasets/"), QuotaGroupId("datasets/imagenet/"));
  EXPECT_NE(QuotaGroupId(""), 0u);
  p = r->PlacementFor("scratch/x");
  EXPECT_EQ(p.quota_group, 0u);
  EXPECT_EQ(p.quota_bytes, 0u);
}

TEST_F(PolicyResolverTest, PinQuota) {
  PolicyOptions o;
  o.pin_quota_bytes = 1000;
  auto r = Open(o);
  Policy pin;
  pin.pin = true;
  ASSERT_OK(r->Set("a", pin, 600));
  Status s = r->Set("b", pin, 500);
  EXPECT_EQ(s.code(), Status::Code::kNoSpace) << s.ToString();
  EXPECT_FALSE(r->Resolve("b").pin);  // nothing changed
  ASSERT_OK(r->Set("a", pin, 700));   // re-pinning re-measures, not double counts
  EXPECT_EQ(r->pinned_bytes(), 700u);
  Policy unpin;
  unpin.pin = false;
  ASSERT_OK(r->Set("a", unpin));
  EXPECT_EQ(r->pinned_bytes(), 0u);
  ASSERT_OK(r->Set("b", pin, 500));
  EXPECT_EQ(r->pinned_bytes(), 500u);
}

// Pins and TTLs through a TieredCache with an L1 of two blocks.
TEST(PolicyPlumbing, PinnedBlocksSurviveL1PressureAndTtlRefetches) {
  testing::FakeBlobStore origin("fake://bucket");
  FakeClock clock;
  constexpr uint64_t kBs = 1024;
  origin.PutObject("pinned", testing::Pattern(kBs, 1));
  for (int i = 0; i < 4; ++i)
    origin.PutObject("f" + std::to_string(i), testing::Pattern(kBs, 10 + i));
  auto meta = NewMemMetaStore();
  PolicyOptions po;
  auto resolver = std::move(*PolicyResolver::Open(po, meta.get()));
  Policy pin;
  pin.pin = true;
  ASSERT_OK(resolver->Set("pinned", pin, kBs));
  Policy ttl;
  ttl.ttl = 10s;
  ASSERT_OK(resolver->Set("f0", ttl));

  MemoryTierOptions m;
  m.capacity_bytes = 2 * kBs;
  m.shards = 1;
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(NewMemoryTier(m));
  TieredCacheOptions o;
  o.block_size = kBs;
  o.prefetch_threads = 0;
  PolicyResolver* r = resolver.get();
  o.placement = [r](std::string_view key) { return r->PlacementFor(key); };
  auto cache = std::move(*TieredCache::Open(o, std::move(tiers), &origin, &clock));
  auto ref = [&](const std::string& k) {
    ObjectRef x;
    x.key = k;
    x.info = *origin.Head(k);
    return x;
  };
  std::string buf(kBs, '\0');
  auto span = std::span(reinterpret_cast<std::byte*>(buf.data()), buf.size());
  ASSERT_OK(tierfs::testing::ReadInto(*cache, ref("pinned"), 0, span));
  for (int i = 1; i < 4; ++i)
    ASSERT_OK(tierfs::testing::ReadInto(*cache, ref("f" + std::to_string(i)), 0, span));
  EXPECT_EQ(cache->Residency(ref("pinned"))[0].second, 1u);  // survived the pressure
  EXPECT_EQ(cache->Residency(ref("f1"))[0].second, 0u);      // evicted
  // Unpinned, it is evicted like any other block.
  cache->SetPinned(ref("pinned"), false);
  for (int i = 1; i < 4; ++i)
    ASSERT_OK(tierfs::testing::ReadInto(*cache, ref("f" + std::to_string(i)), 0, span));
  EXPECT_EQ(cache->Residency(ref("pinned"))[0].second, 0u);

  // TTL: a read within the TTL is a hit, after it a refetch from the origin.
  ASSERT_OK(tierfs::testing::ReadInto(*cache, ref("f0"), 0, span));
  origin.ResetCounters();
  clock.Advance(5s);
  ASSERT_OK(tierfs::testing::ReadInto(*cache, ref("f0"), 0, span));
  EXPECT_EQ(origin.read_calls(), 0u);
  clock.Advance(6s);
  ASSERT_OK(tierfs::testing::ReadInto(*cache, ref("f0"), 0, span));
  EXPECT_EQ(origin.read_calls(), 1u);
  EXPECT_EQ(buf, testing::Pattern(kBs, 10));
  EXPECT_NE(cache->StatsText().find("ttl.expired=1"), std::string::npos) << cache->StatsText();
}

TEST_F(PolicyResolverTest, AdmitInheritsFromStoredPathsThenConfigPrefixes) {
  PolicyOptions o;
  PrefixPolicy stream;
  stream.prefix = "stream/";
  stream.policy.admit = AdmitPolicy::kNever;
  o.prefixes = {stream};
  auto r = Open(o);
  EXPECT_EQ(r->Resolve("other/x").admit, AdmitPolicy::kDefault);
  EXPECT_EQ(r->PlacementFor("other/x").admit, AdmitPolicy::kDefault);
  EXPECT_EQ(r->Resolve("stream/a/b.bin").admit, AdmitPolicy::kNever);
  EXPECT_EQ(r->PlacementFor("stream/a/b.bin").admit, AdmitPolicy::kNever);
  Policy reuse;
  reuse.admit = AdmitPolicy::kReuse;
  ASSERT_OK(r->Set("stream/a", reuse));  // a stored policy beats the config
  EXPECT_EQ(r->Resolve("stream/a/b.bin").admit, AdmitPolicy::kReuse);
  EXPECT_EQ(r->Resolve("stream/c.bin").admit, AdmitPolicy::kNever);
  Policy ttl;
  ttl.ttl = 5s;
  ASSERT_OK(r->Set("stream/a", ttl));  // setting another field keeps admit
  EXPECT_EQ(r->GetExact("stream/a").admit, AdmitPolicy::kReuse);
  auto again = Open(o);  // persisted
  EXPECT_EQ(again->Resolve("stream/a/b.bin").admit, AdmitPolicy::kReuse);
}

}  // namespace
}  // namespace tierfs
