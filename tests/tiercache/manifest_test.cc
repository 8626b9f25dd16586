// Dataset manifests (tiercache/manifest.h): the file format (round trip, every truncation and bit
// flip refused, version and magic checks), building one from a paginated listing, diffs, and
// the manifest catalog (the tree it serves, no origin request at all, ESTALE on a changed
// object that stays pinned).
#include "tiercache/manifest.h"

#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

#define XXH_INLINE_ALL
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "base/units.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using testing::FakeBlobStore;
using testing::Pattern;

ManifestEntry E(std::string key, uint64_t size, std::string etag, int64_t mtime) {
  ManifestEntry e;
  e.key = std::move(key);
  e.info.size = size;
  e.info.etag = std::move(etag);
  e.info.mtime_ns = mtime;
  return e;
}

Manifest Sample() {
  Manifest m;
  m.source = "s3://bucket/datasets/v1/";
  m.created_unix_ns = 1'764'547'200'123'456'789LL;
  m.entries = {
      E("a.bin", 0, "", 0),
      E("dir/x.bin", 1ull << 40, "9b2cf535f27731c974343645a3985328", 1'700'000'000'000'000'000LL),
      E("dir/y.bin", 7, "9b2cf535f27731c974343645a3985328-17", -5),
      E("dir/z.bin", 8, "9B2CF535F27731C974343645A3985328", 1'700'000'000'000'000'001LL),
      E("dir\xc3\xa9/w", 9, "W/\"weak\"", INT64_MIN),
      E("dir\xc3\xa9/w2", 10, "9b2cf535f27731c974343645a3985328-01", INT64_MAX),
      E("z", UINT64_MAX, "9b2cf535f27731c974343645a398532", 3),
  };
  return m;
}

void ExpectSame(const Manifest& a, const Manifest& b) {
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.created_unix_ns, b.created_unix_ns);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    EXPECT_EQ(a.entries[i].key, b.entries[i].key);
    EXPECT_EQ(a.entries[i].info.size, b.entries[i].info.size) << a.entries[i].key;
    EXPECT_EQ(a.entries[i].info.etag, b.entries[i].info.etag) << a.entries[i].key;
    EXPECT_EQ(a.entries[i].info.mtime_ns, b.entries[i].info.mtime_ns) << a.entries[i].key;
  }
}

TEST(ManifestFormatTest, RoundTripKeepsEveryFieldExactly) {
  Manifest m = Sample();
  auto bytes = EncodeManifest(&m);
  ASSERT_OK(bytes);
  EXPECT_EQ(bytes->substr(0, 8), "TIERFSMF");
  ASSERT_EQ(m.checksum.size(), 32u);
  auto back = DecodeManifest(*bytes, "m.tfm");
  ASSERT_OK(back);
  ExpectSame(m, *back);
  EXPECT_EQ(back->checksum, m.checksum);
  // Deterministic: the same manifest encodes to the same bytes (and so the same checksum).
  Manifest again = Sample();
  auto bytes2 = EncodeManifest(&again);
  ASSERT_OK(bytes2);
  EXPECT_EQ(*bytes, *bytes2);
  // Another ETag is another dataset version.
  again.entries[1].info.etag[0] = 'a';
  ASSERT_OK(EncodeManifest(&again));
  EXPECT_NE(again.checksum, m.checksum);
}

TEST(ManifestFormatTest, EmptyManifestRoundTrips) {
  Manifest m;
  m.source = "file:///data";
  auto bytes = EncodeManifest(&m);
  ASSERT_OK(bytes);
  auto back = DecodeManifest(*bytes, "e.tfm");
  ASSERT_OK(back);
  EXPECT_TRUE(back->entries.empty());
  EXPECT_EQ(back->source, "file:///data");
}

TEST(ManifestFormatTest, TenThousandTypicalEntriesAreCompact) {
  Manifest m;
  m.source = "s3://b/imagenet/";
  for (int i = 0; i < 10000; ++i) {
    const std::string h = fmt::format("{:016x}{:016x}", XXH3_64bits(&i, sizeof(i)),
                                      XXH3_64bits_withSeed(&i, sizeof(i), 7));
    m.entries.push_back(E(fmt::format("train/class{:03d}/img{:06d}.jpg", i / 100, i),
                          100000 + static_cast<uint64_t>(i) * 37, h,
                          1'700'000'000'000'000'000LL + i * 1'000'000'000LL));
  }
  auto bytes = EncodeManifest(&m);
  ASSERT_OK(bytes);
  // 16 bytes of each entry are a random MD5: about 20 bytes per entry after zstd.
  EXPECT_LT(bytes->size(), 10000u * 24) << bytes->size();
  auto back = DecodeManifest(*bytes, "big.tfm");
  ASSERT_OK(back);
  ExpectSame(m, *back);
}

TEST(ManifestFormatTest, EveryTruncationAndBitFlipIsRefusedNamingTheFile) {
  Manifest m = Sample();
  const std::string bytes = *EncodeManifest(&m);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = DecodeManifest(std::string_view(bytes).substr(0, n), "cut.tfm");
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
    EXPECT_NE(r.status().message().find("cut.tfm"), std::string::npos) << r.status().ToString();
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      auto r = DecodeManifest(bad, "flip.tfm");
      ASSERT_FALSE(r.ok()) << "flip of bit " << bit << " of byte " << i << " accepted";
    }
  }
  auto longer = DecodeManifest(bytes + "x", "long.tfm");
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), Status::Code::kCorruption);
}

TEST(ManifestFormatTest, MagicVersionAndChecksumErrorsSayWhatIsWrong) {
  Manifest m = Sample();
  const std::string bytes = *EncodeManifest(&m);
  std::string magic = bytes;
  magic[0] = 'X';
  auto r1 = DecodeManifest(magic, "m.tfm");
  EXPECT_EQ(r1.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r1.status().message().find("wrong magic"), std::string::npos);
  auto r0 = DecodeManifest("just some text file\n", "notes.txt");
  EXPECT_NE(r0.status().message().find("notes.txt: not a tierfs manifest"), std::string::npos)
      << r0.status().ToString();

  std::string v2 = bytes;
  v2[8] = 2;
  auto r2 = DecodeManifest(v2, "m.tfm");
  EXPECT_EQ(r2.status().code(), Status::Code::kNotSupported);
  EXPECT_NE(r2.status().message().find("format version 2"), std::string::npos);

  std::string sum = bytes;
  sum[60] = static_cast<char>(sum[60] ^ 1);  // inside the source URI
  auto r3 = DecodeManifest(sum, "m.tfm");
  EXPECT_EQ(r3.status().code(), Status::Code::kCorruption);
  EXPECT_NE(r3.status().message().find("checksum mismatch"), std::string::npos);
}

// A header that lies, under a valid checksum (a buggy or hostile writer), is still refused
// before anything large is allocated.
TEST(ManifestFormatTest, LyingHeaderUnderAValidChecksumIsRefused) {
  Manifest m = Sample();
  const std::string bytes = *EncodeManifest(&m);
  auto reseal = [](std::string b) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(b.data(), b.size() - 16));
    std::memcpy(b.data() + b.size() - 16, c.digest, 16);
    return b;
  };
  ASSERT_OK(DecodeManifest(reseal(bytes), "ok.tfm"));
  for (uint64_t count : {uint64_t{6}, uint64_t{8}, uint64_t{1} << 40}) {
    std::string b = bytes;
    std::memcpy(b.data() + 16, &count, 8);  // little-endian host
    auto r = DecodeManifest(reseal(b), "count.tfm");
    ASSERT_FALSE(r.ok()) << count;
    EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << r.status().ToString();
  }
  std::string raw = bytes;
  const uint64_t huge = 1ull << 62;
  std::memcpy(raw.data() + 32, &huge, 8);
  EXPECT_FALSE(DecodeManifest(reseal(raw), "raw.tfm").ok());
}

TEST(ManifestFormatTest, EncodeRefusesUnsortedOrRepeatedKeys) {
  Manifest m;
  m.entries = {E("b", 1, "", 0), E("a", 1, "", 0)};
  EXPECT_EQ(EncodeManifest(&m).status().code(), Status::Code::kInvalidArgument);
  m.entries = {E("a", 1, "", 0), E("a", 2, "", 0)};
  EXPECT_EQ(EncodeManifest(&m).status().code(), Status::Code::kInvalidArgument);
}

TEST(ManifestFormatTest, FileWriteAndReadBack) {
  testing::TempDir dir;
  Manifest m = Sample();
  const std::string path = dir.path() + "/m.tfm";
  ASSERT_OK(WriteManifestFile(path, *EncodeManifest(&m)));
  auto back = ReadManifestFile(path);
  ASSERT_OK(back);
  ExpectSame(m, *back);
  auto missing = ReadManifestFile(dir.path() + "/nope.tfm");
  EXPECT_TRUE(missing.status().IsNotFound());
  EXPECT_NE(missing.status().message().find("nope.tfm"), std::string::npos);
}

TEST(ManifestBuildTest, ListsEveryPageOfTheStore) {
  FakeBlobStore store;
  for (int i = 0; i < 2500; ++i) store.PutObject(fmt::format("d{}/f{:05d}", i % 3, i), "x", i);
  store.PutObject("top", "hello", 42);
  store.PutObject("", "");  // the prefix's own folder marker, relative: not an entry
  FakeClock clock;
  uint64_t last_progress = 0;
  auto m = BuildManifest(&store, "fake://origin", &clock, [&](uint64_t n) { last_progress = n; });
  ASSERT_OK(m);
  EXPECT_EQ(m->entries.size(), 2501u);
  EXPECT_EQ(last_progress, 2501u);
  EXPECT_EQ(store.list_calls(), 3u);  // pages of 1000
  EXPECT_EQ(store.head_calls(), 0u);
  EXPECT_EQ(m->created_unix_ns, clock.NowUnixNanos());
  EXPECT_EQ(m->entries.back().key, "top");
  EXPECT_EQ(m->entries.back().info.size, 5u);
  EXPECT_EQ(m->entries.back().info.mtime_ns, 42);
  EXPECT_EQ(m->entries.back().info.etag, store.Head("top")->etag);
  // Encodes (sorted, unique) as it is.
  EXPECT_OK(EncodeManifest(&*m));
}

TEST(ManifestDiffTest, AddedRemovedAndChanged) {
  Manifest a, b;
  a.entries = {E("same", 1, "e1", 0), E("gone", 1, "e1", 0), E("resized", 1, "e1", 0),
               E("retagged", 1, "e1", 0), E("touched", 1, "e1", 0)};
  b.entries = {E("new", 1, "e1", 0), E("resized", 2, "e1", 0), E("retagged", 1, "e2", 0),
               E("same", 1, "e1", 0), E("touched", 1, "e1", 99)};
  auto sorted = [](Manifest* m) {
    std::sort(m->entries.begin(), m->entries.end(),
              [](const ManifestEntry& x, const ManifestEntry& y) { return x.key < y.key; });
  };
  sorted(&a);
  sorted(&b);
  ManifestDiff d = DiffManifests(a, b);
  ASSERT_EQ(d.added.size(), 1u);
  EXPECT_EQ(d.added[0].key, "new");
  ASSERT_EQ(d.removed.size(), 1u);
  EXPECT_EQ(d.removed[0].key, "gone");
  ASSERT_EQ(d.changed.size(), 2u);  // an mtime alone is not a change of content
  EXPECT_EQ(d.changed[0].after.key, "resized");
  EXPECT_EQ(d.changed[1].after.info.etag, "e2");
  EXPECT_TRUE(DiffManifests(a, a).empty());
}

// ---- the catalog ----

Manifest TreeManifest() {
  Manifest m;
  m.source = "fake://origin";
  m.checksum = "00112233445566778899aabbccddeeff";
  m.entries = {
      E("a", 3, "fa", 0),          // a file shadowed by directory "a" below
      E("a/b/c.bin", 4, "fc", 1),  //
      E("a/d.bin", 5, "fd", 2),   E("bad\nname", 1, "x", 0),  // unsafe: hidden
      E("empty/", 0, "m", 0),                                 // a folder marker: an empty directory
      E("top.bin", 6, "ft", 3),
  };
  return m;
}

TEST(ManifestCatalogTest, ServesExactlyTheManifestTree) {
  ManifestCatalogStats st;
  auto c = NewManifestCatalog(TreeManifest(), &st);
  EXPECT_EQ(st.files, 3u);
  EXPECT_EQ(st.directories, 4u);  // "", a, a/b, empty
  EXPECT_EQ(st.hidden, 2u);
  std::vector<DirEntry> root;
  ASSERT_OK(c->ReadDir("", "", 100, &root));
  ASSERT_EQ(root.size(), 3u);
  EXPECT_EQ(root[0].name, "a");
  EXPECT_EQ(root[0].type, EntryType::kDir);
  EXPECT_EQ(root[1].name, "empty");
  EXPECT_EQ(root[1].type, EntryType::kDir);
  EXPECT_EQ(root[2].name, "top.bin");
  EXPECT_EQ(root[2].etag, "ft");
  std::vector<DirEntry> page;
  ASSERT_OK(c->ReadDir("", "a", 1, &page));
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].name, "empty");
  auto f = c->Lookup("a/b", "c.bin");
  ASSERT_OK(f);
  EXPECT_EQ(f->size, 4u);
  EXPECT_EQ(f->etag, "fc");
  EXPECT_EQ(f->mtime_ns, 1);
  EXPECT_TRUE(c->Lookup("a", "nope").status().IsNotFound());
  EXPECT_TRUE(c->Lookup("top.bin", "x").status().IsNotFound());  // a file is no directory
  EXPECT_TRUE(c->ReadDir("nope", "", 10, &page).IsNotFound());
  auto snap = c->Snapshot("a");
  ASSERT_OK(snap);
  ASSERT_EQ((*snap)->entries.size(), 2u);
  EXPECT_EQ((*snap)->entries[0].name, "b");
  EXPECT_EQ((*snap)->entries[1].name, "d.bin");
  EXPECT_EQ(snap->get(), c->Snapshot("a")->get());  // one shared copy
  auto empty = c->Snapshot("empty");
  ASSERT_OK(empty);
  EXPECT_TRUE((*empty)->entries.empty());
  auto r = c->Revalidate("a/d.bin");
  ASSERT_OK(r);
  EXPECT_EQ(r->etag, "fd");
  EXPECT_EQ(c->Revalidate("")->type, EntryType::kDir);
  EXPECT_EQ(c->metadata_ttl(), kForever);
  EXPECT_EQ(c->manifest_checksum(), "00112233445566778899aabbccddeeff");
}

// The whole point of a manifest mount: the origin only ever sees GETs, each pinned to the
// manifest's version, and a changed object fails its reads (ESTALE) instead of being served.
TEST(ManifestCatalogTest, NoListOrHeadAndAChangedObjectStaysStale) {
  FakeBlobStore origin;
  origin.PutObject("d/x.bin", Pattern(10000, 1));
  origin.PutObject("d/y.bin", Pattern(10000, 2));
  FakeClock clock;
  auto m = BuildManifest(&origin, "fake://origin", &clock);
  ASSERT_OK(m);
  ASSERT_OK(EncodeManifest(&*m));
  auto catalog = NewManifestCatalog(*m);
  std::vector<std::unique_ptr<Tier>> tiers;
  MemoryTierOptions mo;
  mo.capacity_bytes = 1 << 20;
  tiers.push_back(NewMemoryTier(mo));
  TieredCacheOptions co;
  co.block_size = 4096;
  co.prefetch_threads = 0;
  auto cache = TieredCache::Open(co, std::move(tiers), &origin, &clock);
  ASSERT_OK(cache);
  origin.ResetCounters();

  auto read_all = [&](const std::string& path) -> Result<std::string> {
    TIERFS_ASSIGN_OR_RETURN(DirEntry e, catalog->Revalidate(path));
    ObjectRef obj;
    obj.key = path;
    obj.info.size = e.size;
    obj.info.etag = e.etag;
    obj.info.mtime_ns = e.mtime_ns;
    TIERFS_ASSIGN_OR_RETURN(std::vector<BlockSlice> slices, (*cache)->Read(obj, 0, e.size));
    std::string out;
    for (const BlockSlice& s : slices)
      out.append(reinterpret_cast<const char*>(s.block->data().data()) + s.offset, s.length);
    return out;
  };
  std::vector<DirEntry> ls;
  ASSERT_OK(catalog->ReadDir("d", "", 10, &ls));
  EXPECT_EQ(ls.size(), 2u);
  auto x = read_all("d/x.bin");
  ASSERT_OK(x);
  EXPECT_EQ(*x, Pattern(10000, 1));

  origin.PutObject("d/y.bin", Pattern(10000, 3));  // a new version behind the manifest's back
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto y = read_all("d/y.bin");
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), Status::Code::kFailedPrecondition) << y.status().ToString();
    catalog->Invalidate("d/y.bin");  // what the FUSE layer does on ESTALE
    // Still pinned to the manifest: the next open gets the old version, and fails again.
    EXPECT_EQ(catalog->Revalidate("d/y.bin")->etag, m->entries[1].info.etag);
  }
  EXPECT_EQ(catalog->Stats().invalidations.load(), 2u);
  EXPECT_EQ(origin.list_calls(), 0u);
  EXPECT_EQ(origin.head_calls(), 0u);
  EXPECT_GT(origin.read_calls(), 0u);
  EXPECT_EQ(catalog->Stats().list_requests.load(), 0u);
  EXPECT_EQ(catalog->Stats().head_requests.load(), 0u);
}

}  // namespace
}  // namespace tierfs
