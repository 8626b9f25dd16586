// Version integrity in the cache: block keys never version-less, a read that
// meets another version inserts nothing into any tier, the catalog forgets a changed file even
// with metadata.ttl = forever, and lengths handed between layers are bounds-checked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/mutex.h"
#include "base/units.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/fakes/http_server_test.h"
#include "tests/fakes/http_test_server.h"
#include "tests/testing/eventually.h"
#include "tests/testing/read_into.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/catalog.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using testing::FakeBlobStore;
using testing::HttpTestRequest;
using testing::HttpTestResponse;
using testing::HttpTestServer;
using testing::Pattern;

constexpr uint64_t kBs = 4096;

TEST(BlockVersionTest, EtagLessObjectsAreKeyedBySizeAndMtime) {
  ObjectInfo with;
  with.size = 10;
  with.etag = "etag-1";
  with.mtime_ns = 5;
  // Objects with an ETag keep their keys (the golden key in block_test.cc).
  EXPECT_EQ(MakeBlockKey("src", "k", with, kBs, 0), MakeBlockKey("src", "k", "etag-1", kBs, 0));
  ObjectInfo without = with;
  without.etag.clear();
  EXPECT_EQ(BlockVersion(without), " size=10 mtime_ns=5");
  EXPECT_NE(MakeBlockKey("src", "k", without, kBs, 0), MakeBlockKey("src", "k", "", kBs, 0));
  ObjectInfo rewritten = without;
  rewritten.mtime_ns = 6;
  EXPECT_NE(MakeBlockKey("src", "k", without, kBs, 0), MakeBlockKey("src", "k", rewritten, kBs, 0));
  ObjectInfo resized = without;
  resized.size = 11;
  EXPECT_NE(MakeBlockKey("src", "k", without, kBs, 0), MakeBlockKey("src", "k", resized, kBs, 0));
  // Golden (FORMAT.md): changing it orphans the cached blocks of every ETag-less object.
  EXPECT_EQ(BlockKeyHex(MakeBlockKey("file:///data", "a.bin", without, 1048576, 0)),
            BlockKeyHex(MakeBlockKey("file:///data", "a.bin", " size=10 mtime_ns=5", 1048576, 0)));
  EXPECT_EQ(BlockKeyHex(MakeBlockKey("file:///data", "a.bin", without, 1048576, 0)),
            "eec4d6b1abaf0722cf044c33ae2c72b8");
}

// ---- the cache over a real S3 store whose object is replaced behind the pinned version ----

class CacheOverS3Test : public ::tierfs::testing::HttpServerTest {
 protected:
  void SetUp() override {
    ::tierfs::testing::HttpServerTest::SetUp();
    if (HasFatalFailure()) return;
    S3Options o;
    o.bucket = "bkt";
    o.endpoint = server_->base_url();
    o.credentials.anonymous = true;
    o.backoff_base = std::chrono::milliseconds(1);
    o.backoff_max = std::chrono::milliseconds(5);
    o.max_attempts = 2;
    o.hedge = false;
    o.part_size = kBs;  // a run of blocks is several ranged GETs
    o.max_parts_in_flight = 1;
    auto st = NewS3BlobStore(o, transport_.get(), &clock_);
    ASSERT_OK(st);
    store_ = std::move(*st);
  }

  std::unique_ptr<TieredCache> OpenCache() {
    std::vector<std::unique_ptr<Tier>> tiers;
    MemoryTierOptions m;
    m.capacity_bytes = 1 << 20;
    m.shards = 1;
    tiers.push_back(NewMemoryTier(m));
    TieredCacheOptions co;
    co.block_size = kBs;
    co.prefetch_threads = 1;
    co.readahead_run_bytes = 4 * kBs;
    auto c = TieredCache::Open(co, std::move(tiers), store_.get(), &clock_);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Serves `data` with ETag "v<version>" (If-Match ignored, as s3rver does).
  HttpTestResponse Serve(const HttpTestRequest& req) {
    HttpTestRequest r = req;
    std::erase_if(r.headers, [](const auto& h) { return h.first == "if-match"; });
    const int v = version_.load();
    return HttpTestServer::ServeObject(r, v == 1 ? v1_ : v2_, "v" + std::to_string(v));
  }

  const std::string v1_ = Pattern(4 * kBs, 1), v2_ = Pattern(4 * kBs, 2);  // same size
  std::atomic<int> version_{1};
  FakeClock clock_;
  std::unique_ptr<BlobStore> store_;
};

TEST_F(CacheOverS3Test, NothingFromAnAnswerOfAnotherVersionLandsInTheCache) {
  auto h = server_->Scoped([this](const HttpTestRequest& r) { return Serve(r); });
  auto c = OpenCache();
  ObjectRef obj;
  obj.key = "obj";
  obj.info.size = v1_.size();
  obj.info.etag = "v1";
  // Block 0 of v1 is read and cached; then the object is replaced at the same size.
  std::vector<std::byte> buf(kBs);
  auto first = tierfs::testing::ReadInto(*c, obj, 0, buf);
  ASSERT_OK(first);
  EXPECT_EQ(testing::AsString(buf), v1_.substr(0, kBs));
  version_ = 2;
  std::vector<std::byte> rest(3 * kBs);
  auto r = tierfs::testing::ReadInto(*c, obj, kBs, rest);
  ASSERT_FALSE(r.ok()) << "served bytes of v2 under v1's name";
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition) << r.status().ToString();
  // Readahead runs (one origin read of several blocks) are checked the same way.
  c->Prefetch(obj, 1, 3);
  testing::Eventually([&] { return c->Stats().origin_errors >= 2; }, std::chrono::seconds(1),
                      std::chrono::milliseconds(5));
  auto res = c->Residency(obj);
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0].second, 1u) << "only v1's block 0 may be cached";
  EXPECT_EQ(c->tiers()[0]->Stats().inserts, 1u);
}

// A BlobStore that claims more bytes than the buffer it was given: the cache must not copy.
class OverrunStore : public FakeBlobStore {
 public:
  using FakeBlobStore::FakeBlobStore;
  Result<size_t> Read(std::string_view key, uint64_t offset, std::span<std::byte> out,
                      std::string_view if_match_etag) override {
    TIERFS_ASSIGN_OR_RETURN(size_t n, FakeBlobStore::Read(key, offset, out, if_match_etag));
    return n + 4096;
  }
};

TEST(CacheBoundsTest, AStoreReturningMoreThanAskedIsAnErrorNotACopy) {
  OverrunStore origin("fake://overrun");
  origin.PutObject("obj", Pattern(3 * kBs));
  std::vector<std::unique_ptr<Tier>> tiers;
  MemoryTierOptions m;
  m.capacity_bytes = 1 << 20;
  tiers.push_back(NewMemoryTier(m));
  TieredCacheOptions co;
  co.block_size = kBs;
  co.prefetch_threads = 0;
  FakeClock clock;
  auto c = TieredCache::Open(co, std::move(tiers), &origin, &clock);
  ASSERT_OK(c);
  ObjectRef obj;
  obj.key = "obj";
  obj.info = *origin.Head("obj");
  auto r = (*c)->Read(obj, 0, kBs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInternal) << r.status().ToString();
  EXPECT_EQ((*c)->tiers()[0]->Stats().inserts, 0u);
}

TEST(CacheBoundsTest, AnL3StoreReturningMoreThanAskedIsCorruptionNotAnOverread) {
  OverrunStore l3("fake://l3");
  RemoteTierOptions o;
  o.block_size = kBs;
  FakeClock clock;
  auto t = NewRemoteTier(o, &l3, &clock);
  ASSERT_OK(t);
  const BlockKey key = MakeBlockKey("fake://origin", "obj", "etag-1", kBs, 0);
  auto b = Block::Allocate(kBs);
  std::memcpy(b->mutable_data().data(), Pattern(kBs).data(), kBs);
  b->set_size(kBs);
  ASSERT_OK((*t)->Insert(key, BlockRef(std::move(b)), {}));
  testing::Eventually([&] { return l3.Head("blocks/" + BlockKeyHex(key)).ok(); },
                      std::chrono::milliseconds(2500), std::chrono::milliseconds(5));
  auto r = (*t)->Read(key);
  EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
  EXPECT_EQ((*t)->Stats().corruptions, 1u);
  EXPECT_EQ((*t)->Stats().hits, 0u);
}

// ---- the catalog after a version change ----

// Hides ETags, like a listing/HEAD of a store that sends none.
class EtaglessStore : public FakeBlobStore {
 public:
  using FakeBlobStore::FakeBlobStore;
  Result<ObjectInfo> Head(std::string_view key) override {
    TIERFS_ASSIGN_OR_RETURN(ObjectInfo i, FakeBlobStore::Head(key));
    i.etag.clear();
    return i;
  }
  Result<ListPage> List(std::string_view prefix, std::string_view delimiter, std::string_view token,
                        int max_keys) override {
    TIERFS_ASSIGN_OR_RETURN(ListPage p, FakeBlobStore::List(prefix, delimiter, token, max_keys));
    for (auto& o : p.objects) o.info.etag.clear();
    return p;
  }
};

class CatalogInvalidateTest : public ::testing::Test {
 protected:
  std::unique_ptr<Catalog> Open(BlobStore* origin) {
    CatalogOptions o;
    o.metadata_ttl = kForever;
    auto c = Catalog::Open(o, origin, meta_.get(), &clock_);
    EXPECT_OK(c);
    return std::move(*c);
  }
  FakeClock clock_;
  std::unique_ptr<MetaStore> meta_ = NewMemMetaStore();
};

TEST_F(CatalogInvalidateTest, AfterAMismatchTheNextOpenSeesTheNewVersionWithTtlForever) {
  FakeBlobStore origin("fake://bucket");
  origin.PutObject("d/f.bin", "version one");
  auto c = Open(&origin);
  ASSERT_OK(c->Lookup("d", "f.bin"));  // listed: the entry is cached
  auto before = c->Revalidate("d/f.bin");
  ASSERT_OK(before);
  origin.PutObject("d/f.bin", "version two, longer");
  const std::string new_etag = origin.Head("d/f.bin")->etag;
  origin.ResetCounters();
  // ttl = forever: without a mismatch the catalog keeps answering with the old version.
  EXPECT_EQ(c->Revalidate("d/f.bin")->etag, before->etag);
  EXPECT_EQ(origin.head_calls(), 0u);
  c->Invalidate("d/f.bin");  // what a read that met the new version does
  auto after = c->Revalidate("d/f.bin");
  ASSERT_OK(after);
  EXPECT_EQ(after->etag, new_etag);
  EXPECT_EQ(after->size, std::string("version two, longer").size());
  EXPECT_EQ(origin.head_calls(), 1u);
  EXPECT_EQ(c->Stats().invalidations, 1u);
  // The refreshed entry replaced the cached one (lookups, getattr) and no more HEADs follow.
  EXPECT_EQ(c->Lookup("d", "f.bin")->etag, new_etag);
  EXPECT_EQ(c->Revalidate("d/f.bin")->etag, new_etag);
  EXPECT_EQ(origin.head_calls(), 1u);
  // A file deleted meanwhile is NotFound at the next open.
  c->Invalidate("d/f.bin");
  origin.RemoveObject("d/f.bin");
  EXPECT_TRUE(c->Revalidate("d/f.bin").status().IsNotFound());
  EXPECT_TRUE(c->Lookup("d", "f.bin").status().IsNotFound());
}

TEST_F(CatalogInvalidateTest, EtaglessFilesAreHeadedAtEveryOpen) {
  EtaglessStore origin("fake://noetag");
  origin.PutObject("f.bin", "one", 1000);
  auto c = Open(&origin);
  auto e = c->Revalidate("f.bin");
  ASSERT_OK(e);
  EXPECT_TRUE(e->etag.empty());
  EXPECT_EQ(e->mtime_ns, 1000);
  origin.PutObject("f.bin", "two", 2000);  // same size, new mtime
  origin.ResetCounters();
  auto again = c->Revalidate("f.bin");
  ASSERT_OK(again);
  EXPECT_EQ(again->mtime_ns, 2000);
  EXPECT_EQ(origin.head_calls(), 1u);
}

}  // namespace
}  // namespace tierfs
