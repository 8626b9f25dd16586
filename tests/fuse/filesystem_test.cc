// Filesystem semantics without mounting: a real TieredCache (L1 memory tier) and Catalog over a
// FakeBlobStore origin and an in-memory MetaStore, with a FakeClock for metadata TTLs.
#include "fuse/filesystem.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "base/units.h"
#include "fuse/fuse_server.h"
#include "metastore/meta_store.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"
#include "tiercache/catalog.h"
#include "tiercache/manifest.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using testing::FakeBlobStore;

constexpr uint64_t kBlock = 64 * 1024;

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

std::string Concat(const std::vector<BlockSlice>& slices) {
  std::string out;
  for (const auto& s : slices) {
    out.append(reinterpret_cast<const char*>(s.block->data().data()) + s.offset, s.length);
  }
  return out;
}

class FilesystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    origin_.PutObject("hello.txt", "hello world\n", 1'600'000'000'000'000'000LL);
    origin_.PutObject("a/b/c.txt", "nested");
    origin_.PutObject("marker/", "");  // a folder marker: an empty directory
    big_ = Pattern(2 * kBlock + kBlock / 2, 7);
    origin_.PutObject("data/big.bin", big_);
    for (int i = 0; i < 50; ++i) {
      origin_.PutObject(fmt::format("many/f{:03d}", i), std::to_string(i));
    }
    Open();
  }

  void Open(FilesystemOptions fs_options = {}) {
    fs_.reset();
    catalog_.reset();
    cache_.reset();
    meta_ = NewMemMetaStore();
    TieredCacheOptions co;
    co.block_size = kBlock;
    co.prefetch_threads = 2;
    co.small_object_bytes = 0;  // these tests watch readahead, which small objects skip
    std::vector<std::unique_ptr<Tier>> tiers;
    MemoryTierOptions l1;
    l1.capacity_bytes = 64 * kBlock;
    l1.shards = 2;
    tiers.push_back(NewMemoryTier(l1));
    auto cache = TieredCache::Open(co, std::move(tiers), &origin_, &clock_);
    ASSERT_OK(cache);
    cache_ = std::move(*cache);
    CatalogOptions cat;
    cat.metadata_ttl = ttl_;
    auto catalog = Catalog::Open(cat, &origin_, meta_.get(), &clock_);
    ASSERT_OK(catalog);
    catalog_ = std::move(*catalog);
    fs_options.uid = 1234;
    fs_options.gid = 5678;
    fs_ = std::make_unique<Filesystem>(fs_options, catalog_.get(), cache_.get(), &clock_);
  }

  // A test that closes the origin's read gate must not leave a fetch thread blocked for the
  // cache's destructor (which joins them).
  void TearDown() override { origin_.ReleaseReads(); }

  InodeId LookupIno(InodeId parent, std::string_view name) {
    auto r = fs_->Lookup(parent, name);
    EXPECT_OK(r) << name;
    return r.ok() ? r->attr.ino : 0;
  }

  InodeId Walk(std::string_view path) {
    InodeId ino = kRootInode;
    size_t pos = 0;
    while (pos < path.size()) {
      size_t slash = path.find('/', pos);
      if (slash == std::string_view::npos) slash = path.size();
      ino = LookupIno(ino, path.substr(pos, slash - pos));
      pos = slash + 1;
    }
    return ino;
  }

  std::string ReadAll(uint64_t fh, uint64_t off, uint64_t len) {
    auto r = fs_->Read(fh, off, len);
    EXPECT_OK(r);
    return r.ok() ? Concat(*r) : std::string();
  }

  // Every item of a directory through ReadDir in pages of `page` items.
  std::vector<DirItem> ListAll(uint64_t dh, size_t page) {
    std::vector<DirItem> all, items;
    uint64_t off = 0;
    for (int guard = 0; guard < 1000; ++guard) {
      Status s = fs_->ReadDir(dh, off, page, &items);
      EXPECT_OK(s);
      if (items.empty()) break;
      for (auto& i : items) {
        off = i.next_offset;
        all.push_back(i);
      }
    }
    return all;
  }

  FakeClock clock_;
  FakeBlobStore origin_;
  std::chrono::nanoseconds ttl_ = std::chrono::seconds(60);  // metadata.ttl of Open()
  std::string big_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<TieredCache> cache_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(FilesystemTest, RootIsAReadOnlyDirectory) {
  auto a = fs_->GetAttr(kRootInode);
  ASSERT_OK(a);
  EXPECT_TRUE(a->is_dir);
  EXPECT_EQ(a->mode, static_cast<uint32_t>(S_IFDIR | 0755));
  EXPECT_EQ(a->uid, 1234u);
  EXPECT_EQ(a->gid, 5678u);
  EXPECT_EQ(a->blksize, kBlock);
}

TEST_F(FilesystemTest, LookupFileAttributes) {
  auto e = fs_->Lookup(kRootInode, "hello.txt");
  ASSERT_OK(e);
  EXPECT_NE(e->attr.ino, kRootInode);
  EXPECT_FALSE(e->attr.is_dir);
  EXPECT_EQ(e->attr.mode, static_cast<uint32_t>(S_IFREG | 0644));
  EXPECT_EQ(e->attr.size, 12u);
  EXPECT_EQ(e->attr.nlink, 1u);
  EXPECT_EQ(e->attr.mtime_ns, 1'600'000'000'000'000'000LL);
  EXPECT_EQ(e->generation, fs_->generation());
  auto a = fs_->GetAttr(e->attr.ino);
  ASSERT_OK(a);
  EXPECT_EQ(a->size, 12u);
}

TEST_F(FilesystemTest, LookupCountsAndForget) {
  InodeId ino = LookupIno(kRootInode, "hello.txt");
  EXPECT_EQ(LookupIno(kRootInode, "hello.txt"), ino);  // same inode while known
  EXPECT_EQ(fs_->TEST_LookupCount(ino), 2u);
  fs_->Forget(ino, 1);
  EXPECT_EQ(fs_->TEST_LookupCount(ino), 1u);
  EXPECT_OK(fs_->GetAttr(ino));
  fs_->Forget(ino, 1);
  EXPECT_EQ(fs_->TEST_LookupCount(ino), 0u);
  auto gone = fs_->GetAttr(ino);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(ToErrno(gone.status()), ESTALE);
  fs_->Forget(ino, 5);  // forgetting an unknown inode is harmless
  InodeId again = LookupIno(kRootInode, "hello.txt");
  EXPECT_NE(again, ino);  // numbers are never reused
  EXPECT_EQ(fs_->TEST_LookupCount(again), 1u);
}

TEST_F(FilesystemTest, ForgetMoreThanHeldErasesAndRootIsNeverForgotten) {
  InodeId ino = LookupIno(kRootInode, "hello.txt");
  size_t before = fs_->InodeCount();
  fs_->Forget(ino, 100);
  EXPECT_EQ(fs_->InodeCount(), before - 1);
  fs_->Forget(kRootInode, 100);
  EXPECT_OK(fs_->GetAttr(kRootInode));
}

TEST_F(FilesystemTest, NestedDirectories) {
  InodeId a = LookupIno(kRootInode, "a");
  auto aa = fs_->GetAttr(a);
  ASSERT_OK(aa);
  EXPECT_TRUE(aa->is_dir);
  EXPECT_EQ(aa->mode, static_cast<uint32_t>(S_IFDIR | 0755));
  InodeId b = LookupIno(a, "b");
  auto c = fs_->Lookup(b, "c.txt");
  ASSERT_OK(c);
  EXPECT_EQ(c->attr.size, 6u);
  // A file is not a directory to look up in.
  auto bad = fs_->Lookup(c->attr.ino, "x");
  EXPECT_FALSE(bad.ok());
}

TEST_F(FilesystemTest, FolderMarkerIsAnEmptyDirectory) {
  auto m = fs_->Lookup(kRootInode, "marker");
  ASSERT_OK(m);
  EXPECT_TRUE(m->attr.is_dir);
  auto dh = fs_->OpenDir(m->attr.ino);
  ASSERT_OK(dh);
  auto items = ListAll(*dh, 10);
  ASSERT_EQ(items.size(), 2u);  // "." and ".." only
  EXPECT_EQ(items[0].name, ".");
  EXPECT_EQ(items[1].name, "..");
  fs_->ReleaseDir(*dh);
}

TEST_F(FilesystemTest, NegativeLookup) {
  auto r = fs_->Lookup(kRootInode, "nope");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound());
  EXPECT_EQ(ToErrno(r.status()), ENOENT);
  EXPECT_EQ(fs_->counters().negative_lookups.load(), 1u);
  EXPECT_TRUE(fs_->Lookup(kRootInode, "..").status().IsNotFound());
  // Lookup in an unknown parent is a stale handle, not a crash.
  EXPECT_EQ(ToErrno(fs_->Lookup(999999, "x").status()), ESTALE);
}

TEST_F(FilesystemTest, ReadDirPagingIsConsistent) {
  InodeId many = LookupIno(kRootInode, "many");
  auto dh = fs_->OpenDir(many);
  ASSERT_OK(dh);
  for (size_t page : {1, 3, 5, 100}) {
    auto items = ListAll(*dh, page);
    ASSERT_EQ(items.size(), 52u) << "page " << page;
    EXPECT_EQ(items[0].name, ".");
    EXPECT_EQ(items[0].ino, many);
    EXPECT_EQ(items[1].name, "..");
    EXPECT_EQ(items[1].ino, kRootInode);
    std::set<uint64_t> offsets;
    for (size_t i = 2; i < items.size(); ++i) {
      EXPECT_EQ(items[i].name, fmt::format("f{:03d}", i - 2));
      EXPECT_FALSE(items[i].is_dir);
      EXPECT_TRUE(offsets.insert(items[i].next_offset).second);
    }
  }
  // Resuming at an offset handed out earlier gives the same continuation.
  std::vector<DirItem> a, b;
  ASSERT_OK(fs_->ReadDir(*dh, 10, 5, &a));
  ASSERT_OK(fs_->ReadDir(*dh, 10, 5, &b));
  ASSERT_EQ(a.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].name, b[i].name);
  EXPECT_EQ(a[0].name, "f008");
  // Past the end: empty.
  ASSERT_OK(fs_->ReadDir(*dh, 1000, 5, &a));
  EXPECT_TRUE(a.empty());
  fs_->ReleaseDir(*dh);
  EXPECT_FALSE(fs_->ReadDir(*dh, 0, 5, &a).ok());  // released handle
}

TEST_F(FilesystemTest, ReadDirOffsetsStableWhileDirectoryChanges) {
  InodeId many = LookupIno(kRootInode, "many");
  auto dh = fs_->OpenDir(many);
  ASSERT_OK(dh);
  std::vector<DirItem> first;
  ASSERT_OK(fs_->ReadDir(*dh, 0, 12, &first));
  ASSERT_EQ(first.size(), 12u);
  // The listing changes and expires; the open handle keeps its order: no entry is skipped or
  // repeated.
  origin_.PutObject("many/e000", "new");
  origin_.RemoveObject("many/f020");
  clock_.Advance(std::chrono::minutes(5));
  std::vector<std::string> names;
  for (auto& i : first) names.push_back(i.name);
  uint64_t off = first.back().next_offset;
  std::vector<DirItem> items;
  while (fs_->ReadDir(*dh, off, 6, &items).ok() && !items.empty()) {
    for (auto& i : items) {
      names.push_back(i.name);
      off = i.next_offset;
    }
  }
  std::set<std::string> unique(names.begin() + 2, names.end());
  EXPECT_EQ(unique.size(), names.size() - 2) << "an entry was repeated";
  for (int i = 0; i < 50; ++i) {
    if (i == 20) continue;
    EXPECT_TRUE(unique.count(fmt::format("f{:03d}", i))) << i;
  }
  fs_->ReleaseDir(*dh);
}

TEST_F(FilesystemTest, OpenDirectoryHandlesShareOneListingSnapshot) {
  InodeId many = LookupIno(kRootInode, "many");
  const uint64_t built = catalog_->Stats().snapshots_built;
  std::vector<uint64_t> handles;
  for (int i = 0; i < 10; ++i) {
    auto dh = fs_->OpenDir(many);
    ASSERT_OK(dh);
    handles.push_back(*dh);
    auto items = ListAll(*dh, 100);
    ASSERT_EQ(items.size(), 52u);
  }
  // Ten open handles, one copy of the listing.
  EXPECT_EQ(catalog_->Stats().snapshots_built - built, 1u);
  EXPECT_GE(catalog_->Stats().snapshots_shared, 9u);
  for (uint64_t dh : handles) fs_->ReleaseDir(dh);
  // Once every handle is closed the snapshot is gone; the next open reads a new one.
  auto dh = fs_->OpenDir(many);
  ASSERT_OK(dh);
  EXPECT_EQ(ListAll(*dh, 100).size(), 52u);
  EXPECT_EQ(catalog_->Stats().snapshots_built - built, 2u);
  fs_->ReleaseDir(*dh);
}

TEST_F(FilesystemTest, LookupDirItemAddsALookup) {
  InodeId many = LookupIno(kRootInode, "many");
  auto dh = fs_->OpenDir(many);
  ASSERT_OK(dh);
  std::vector<DirItem> items;
  ASSERT_OK(fs_->ReadDir(*dh, 2, 1, &items));
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].ino, kUnknownInode);
  auto e = fs_->LookupDirItem(many, items[0]);
  ASSERT_OK(e);
  EXPECT_EQ(fs_->TEST_LookupCount(e->attr.ino), 1u);
  EXPECT_EQ(LookupIno(many, items[0].name), e->attr.ino);
  EXPECT_EQ(fs_->TEST_LookupCount(e->attr.ino), 2u);
  // Known inodes show their number in a later readdir.
  ASSERT_OK(fs_->ReadDir(*dh, 2, 1, &items));
  EXPECT_EQ(items[0].ino, e->attr.ino);
  fs_->ReleaseDir(*dh);
}

TEST_F(FilesystemTest, ReadAcrossBlockBoundaries) {
  InodeId ino = Walk("data/big.bin");
  auto o = fs_->Open(ino);
  ASSERT_OK(o);
  const uint64_t size = big_.size();
  struct Case {
    uint64_t off, len;
  } cases[] = {
      {0, 10},
      {kBlock - 3, 6},           // straddles block 0/1
      {kBlock - 1, kBlock + 2},  // three blocks
      {0, size},                 // everything
      {2 * kBlock, kBlock / 2},  // the short last block exactly
      {size - 5, 100},           // short at EOF
      {123457, 3 * kBlock},      // short, from the middle
  };
  for (const auto& c : cases) {
    std::string got = ReadAll(o->fh, c.off, c.len);
    uint64_t want_len = std::min<uint64_t>(c.len, size - c.off);
    EXPECT_EQ(got.size(), want_len) << c.off << "+" << c.len;
    EXPECT_TRUE(got == big_.substr(c.off, want_len)) << "bytes differ at " << c.off << "+" << c.len;
  }
  EXPECT_EQ(ReadAll(o->fh, size, 10), "");
  EXPECT_EQ(ReadAll(o->fh, size + 100, 10), "");
  fs_->Release(o->fh);
  EXPECT_EQ(ToErrno(fs_->Read(o->fh, 0, 1).status()), ESTALE);
}

TEST_F(FilesystemTest, OpenDirectoryAndOpenOfAGoneFile) {
  InodeId a = LookupIno(kRootInode, "a");
  auto od = fs_->Open(a);
  EXPECT_FALSE(od.ok());
  EXPECT_EQ(fs_->OpenDir(LookupIno(kRootInode, "hello.txt")).status().code(),
            Status::Code::kInvalidArgument);
  InodeId ino = LookupIno(kRootInode, "hello.txt");
  origin_.RemoveObject("hello.txt");
  clock_.Advance(std::chrono::minutes(2));
  auto o = fs_->Open(ino);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(ToErrno(o.status()), ENOENT);
}

// An origin that reports owners (file://): its owner, group and mode show, so the kernel's
// default_permissions applies them; a field the user set replaces the origin's for every inode.
// Entries without an owner (S3) show the mount's uid/gid/file_mode.
TEST_F(FilesystemTest, OriginOwnerAndModeShowUnlessTheUserSetThem) {
  origin_.PutObject("secret.bin", "s");
  origin_.SetOwner("secret.bin", Ownership{true, 0, 42, 0600});
  Open();
  auto a = fs_->Lookup(kRootInode, "secret.bin");
  ASSERT_OK(a);
  EXPECT_EQ(a->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(a->attr.uid, 0u);
  EXPECT_EQ(a->attr.gid, 42u);
  auto g = fs_->GetAttr(a->attr.ino);
  ASSERT_OK(g);
  EXPECT_EQ(g->mode, static_cast<uint32_t>(S_IFREG | 0600));
  auto plain = fs_->Lookup(kRootInode, "hello.txt");
  ASSERT_OK(plain);
  EXPECT_EQ(plain->attr.mode, static_cast<uint32_t>(S_IFREG | 0644));
  EXPECT_EQ(plain->attr.uid, 1234u);

  FilesystemOptions o;
  o.uid_set = true;
  o.file_mode = 0444;
  o.file_mode_set = true;
  Open(o);
  auto b = fs_->Lookup(kRootInode, "secret.bin");
  ASSERT_OK(b);
  EXPECT_EQ(b->attr.mode, static_cast<uint32_t>(S_IFREG | 0444));
  EXPECT_EQ(b->attr.uid, 1234u);
  EXPECT_EQ(b->attr.gid, 42u);  // not set by the user: the origin's
}

TEST_F(FilesystemTest, OpenToCloseConsistencyAndKeepCache) {
  InodeId ino = LookupIno(kRootInode, "hello.txt");
  auto o1 = fs_->Open(ino);
  ASSERT_OK(o1);
  EXPECT_FALSE(o1->keep_cache);  // nothing cached by the kernel yet
  EXPECT_EQ(ReadAll(o1->fh, 0, 100), "hello world\n");
  auto o2 = fs_->Open(ino);
  ASSERT_OK(o2);
  EXPECT_TRUE(o2->keep_cache);  // same ETag: the page cache is still good
  fs_->Release(o2->fh);

  // The object changes; after the TTL the next open sees the new version. o1 is still open on
  // this inode (its page cache holds the old version), so the open fails with ESTALE and the
  // path's next lookup (the kernel's LOOKUP_REVAL retry) gives a new inode for the new version.
  origin_.PutObject("hello.txt", "HELLO, NEW WORLD\n");
  clock_.Advance(std::chrono::minutes(2));
  auto stale = fs_->Open(ino);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(ToErrno(stale.status()), ESTALE);
  InodeId ino2 = LookupIno(kRootInode, "hello.txt");
  EXPECT_NE(ino2, ino);
  auto o3 = fs_->Open(ino2);
  ASSERT_OK(o3);
  EXPECT_FALSE(o3->keep_cache);
  EXPECT_EQ(ReadAll(o3->fh, 0, 100), "HELLO, NEW WORLD\n");
  auto a = fs_->GetAttr(ino2);
  ASSERT_OK(a);
  EXPECT_EQ(a->size, 17u);
  // The old inode keeps its version's attributes, and the old handle reads its own version
  // (from the cache), never the new bytes.
  auto old_attr = fs_->GetAttr(ino);
  ASSERT_OK(old_attr);
  EXPECT_EQ(old_attr->size, 12u);
  EXPECT_EQ(ReadAll(o1->fh, 0, 100), "hello world\n");
  fs_->Release(o1->fh);
  fs_->Release(o3->fh);

  // With no handle open any more, a new version is opened on the same inode (the kernel drops
  // its pages: keep_cache false).
  origin_.PutObject("hello.txt", "third\n");
  clock_.Advance(std::chrono::minutes(2));
  auto o4 = fs_->Open(ino2);
  ASSERT_OK(o4);
  EXPECT_FALSE(o4->keep_cache);
  EXPECT_EQ(ReadAll(o4->fh, 0, 100), "third\n");
  fs_->Release(o4->fh);
}

// Store at open (FuseOptions::store_on_open_max): the first open of an inode tells the server
// that the kernel holds none of its pages, and ReadWholeIfLocal hands over a small file only when
// every byte is in the host tiers, as a read of the pinned version.
TEST_F(FilesystemTest, FirstOpenAndReadWholeIfLocal) {
  FilesystemOptions o;
  o.prefetch.readahead_max_bytes = 0;  // only what the test reads becomes local
  o.prefetch.next_files = 0;
  Open(o);
  InodeId ino = LookupIno(kRootInode, "hello.txt");
  auto o1 = fs_->Open(ino);
  ASSERT_OK(o1);
  EXPECT_TRUE(o1->first_open);
  auto none = fs_->ReadWholeIfLocal(o1->fh, 1 << 20);
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());  // not in L1/L2 yet: nothing fetched for it
  EXPECT_EQ(origin_.read_calls(), 0u);
  EXPECT_EQ(ReadAll(o1->fh, 0, 100), "hello world\n");
  auto whole = fs_->ReadWholeIfLocal(o1->fh, 1 << 20);
  ASSERT_OK(whole);
  EXPECT_EQ(Concat(*whole), "hello world\n");
  EXPECT_EQ(fs_->counters().open_stores.load(), 1u);
  auto small_max = fs_->ReadWholeIfLocal(o1->fh, 11);  // a byte short of the file
  ASSERT_OK(small_max);
  EXPECT_TRUE(small_max->empty());
  EXPECT_TRUE(fs_->ReadWholeIfLocal(999, 1 << 20)->empty());  // unknown handle
  auto o2 = fs_->Open(ino);
  ASSERT_OK(o2);
  EXPECT_FALSE(o2->first_open);  // the kernel may hold pages from the first open
  fs_->Release(o1->fh);
  fs_->Release(o2->fh);
  // Forgotten by the kernel (its inode and pages are gone): the next open is a first one again.
  fs_->Forget(ino, 1);
  auto o3 = fs_->Open(LookupIno(kRootInode, "hello.txt"));
  ASSERT_OK(o3);
  EXPECT_TRUE(o3->first_open);
  EXPECT_EQ(Concat(*fs_->ReadWholeIfLocal(o3->fh, 1 << 20)), "hello world\n");
  // Handed to the kernel: with no L2 below to serve it again, L1 keeps it (TieredCache::HandOff).
  fs_->HandedToKernel(o3->fh);
  fs_->HandedToKernel(999);  // unknown handle: nothing
  EXPECT_NE(cache_->StatsText().find(" handoffs=0 "), std::string::npos);
  EXPECT_EQ(Concat(*fs_->ReadWholeIfLocal(o3->fh, 1 << 20)), "hello world\n");
  fs_->Release(o3->fh);
  // A file of several blocks comes whole, in order.
  auto big = fs_->Open(Walk("data/big.bin"));
  ASSERT_OK(big);
  EXPECT_TRUE(fs_->ReadWholeIfLocal(big->fh, 4 * kBlock)->empty());
  EXPECT_EQ(ReadAll(big->fh, 0, big_.size()), big_);
  EXPECT_EQ(Concat(*fs_->ReadWholeIfLocal(big->fh, 4 * kBlock)), big_);
  EXPECT_TRUE(fs_->ReadWholeIfLocal(big->fh, 2 * kBlock)->empty());  // larger than the limit
  fs_->Release(big->fh);
}

TEST_F(FilesystemTest, ChangedObjectUnderAnOpenHandleIsStale) {
  InodeId ino = Walk("data/big.bin");
  auto o = fs_->Open(ino);
  ASSERT_OK(o);
  EXPECT_EQ(ReadAll(o->fh, 0, 10), big_.substr(0, 10));
  origin_.PutObject("data/big.bin", Pattern(big_.size(), 99));
  // Block 2 was never read by this handle: the origin refuses (If-Match) → ESTALE, never mixed
  // bytes.
  auto r = fs_->Read(o->fh, 2 * kBlock, 10);
  if (r.ok()) {
    EXPECT_EQ(Concat(*r), big_.substr(2 * kBlock, 10));  // already prefetched: the old version
  } else {
    EXPECT_EQ(ToErrno(r.status()), ESTALE);
  }
  fs_->Release(o->fh);
}

TEST_F(FilesystemTest, AStaleReadMakesTheNextOpenSeeTheNewVersionWithTtlForever) {
  ttl_ = kForever;
  FilesystemOptions no_readahead;
  no_readahead.prefetch.readahead_max_bytes = 0;  // block 2 is only ever read on demand
  Open(no_readahead);
  InodeId ino = Walk("data/big.bin");
  auto o = fs_->Open(ino);
  ASSERT_OK(o);
  EXPECT_EQ(ReadAll(o->fh, 0, 10), big_.substr(0, 10));
  const std::string replaced = Pattern(big_.size(), 99);  // same size, new ETag
  origin_.PutObject("data/big.bin", replaced);
  auto r = fs_->Read(o->fh, 2 * kBlock, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ToErrno(r.status()), ESTALE);
  EXPECT_EQ(fs_->counters().stale_reads, 1u);
  fs_->Release(o->fh);
  // No remount, metadata.ttl = forever: the next open pins the new version, whole and unmixed.
  auto o2 = fs_->Open(ino);
  ASSERT_OK(o2);
  EXPECT_FALSE(o2->keep_cache);  // the kernel's pages are of the old version
  EXPECT_EQ(ReadAll(o2->fh, 0, replaced.size()), replaced);
  auto xattr = fs_->GetXattr(ino, "user.tierfs.etag");
  ASSERT_OK(xattr);
  EXPECT_EQ(*xattr, origin_.Head("data/big.bin")->etag);
  fs_->Release(o2->fh);
}

// Opens in the kernel (FuseOptions::open_in_kernel): reads come without a handle and read the
// version the inode last saw, whole; a stale read makes the inode take the new version at once.
TEST_F(FilesystemTest, ReadsWithoutAnOpenPinTheVersionAtTheInode) {
  ttl_ = kForever;
  FilesystemOptions no_readahead;
  no_readahead.prefetch.readahead_max_bytes = 0;  // block 2 is only ever read on demand
  Open(no_readahead);
  InodeId ino = Walk("data/big.bin");
  auto r0 = fs_->ReadInode(ino, 0, 10);
  ASSERT_OK(r0);
  EXPECT_EQ(Concat(*r0), big_.substr(0, 10));
  EXPECT_EQ(*fs_->GetXattr(ino, "user.tierfs.source"), "origin");
  EXPECT_FALSE(fs_->ReadInodeIsLocal(Walk("hello.txt"), 0, 1));  // no reader yet: not local
  EXPECT_TRUE(fs_->ReadInodeIsLocal(ino, 0, 10));
  EXPECT_FALSE(fs_->ReadInodeIsLocal(ino, 2 * kBlock, 10));
  auto tail = fs_->ReadInode(ino, big_.size() - 5, 100);  // short at EOF
  ASSERT_OK(tail);
  EXPECT_EQ(Concat(*tail), big_.substr(big_.size() - 5));
  EXPECT_EQ(fs_->counters().opens.load(), 0u);

  const std::string replaced = Pattern(big_.size(), 99);  // same size, new ETag
  origin_.PutObject("data/big.bin", replaced);
  // Cached blocks are the inode's version; an uncached one meets the new version: ESTALE,
  // never mixed bytes.
  auto cached = fs_->ReadInode(ino, 0, 10);
  ASSERT_OK(cached);
  EXPECT_EQ(Concat(*cached), big_.substr(0, 10));
  auto stale = fs_->ReadInode(ino, 2 * kBlock - 5, 10);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(ToErrno(stale.status()), ESTALE);
  EXPECT_EQ(fs_->counters().stale_reads.load(), 1u);
  // The inode took the new version (metadata.ttl = forever notwithstanding): the next reads get
  // it whole.
  EXPECT_EQ(*fs_->GetXattr(ino, "user.tierfs.etag"), origin_.Head("data/big.bin")->etag);
  auto fresh = fs_->ReadInode(ino, 2 * kBlock - 5, 10);
  ASSERT_OK(fresh);
  EXPECT_EQ(Concat(*fresh), replaced.substr(2 * kBlock - 5, 10));
  auto head = fs_->ReadInode(ino, 0, 10);
  ASSERT_OK(head);
  EXPECT_EQ(Concat(*head), replaced.substr(0, 10));

  // Unknown inodes and directories are refused; a forgotten inode drops its reader.
  EXPECT_EQ(ToErrno(fs_->ReadInode(424242, 0, 1).status()), ESTALE);
  EXPECT_EQ(ToErrno(fs_->ReadInode(Walk("data"), 0, 1).status()), ESTALE);
  fs_->Forget(ino, 1000);
  EXPECT_EQ(ToErrno(fs_->ReadInode(ino, 0, 1).status()), ESTALE);
}

TEST_F(FilesystemTest, ReadsWithoutAnOpenDriveReadaheadAndTheNextFilesPrefetch) {
  InodeId ino = Walk("data/big.bin");
  ASSERT_OK(fs_->ReadInode(ino, 0, 4096));
  EXPECT_EQ(fs_->prefetch_stats().readahead_requests.load(), 1u);  // blocks 1..2
  ASSERT_OK(fs_->ReadInode(ino, 4096, 4096));                      // the same reader: nothing new
  EXPECT_EQ(fs_->prefetch_stats().readahead_requests.load(), 1u);
  // The first read of a small file counts as its open for the next-files prefetch.
  ASSERT_OK(fs_->ReadInode(Walk("many/f010"), 0, 10));
  ASSERT_OK(fs_->ReadInode(Walk("many/f010"), 0, 10));  // not a second open
  EXPECT_EQ(fs_->prefetch_stats().next_file_prefetches.load(), 0u);
  ASSERT_OK(fs_->ReadInode(Walk("many/f020"), 0, 10));
  EXPECT_EQ(fs_->prefetch_stats().next_file_prefetches.load(), 16u);
}

TEST_F(FilesystemTest, SequentialReadsStartReadaheadAndSeeksReset) {
  InodeId ino = Walk("data/big.bin");
  auto o = fs_->Open(ino);
  ASSERT_OK(o);
  EXPECT_EQ(ReadAll(o->fh, 0, 4096).size(), 4096u);
  EXPECT_EQ(fs_->prefetch_stats().readahead_requests.load(), 1u);  // blocks 1..2 asked for
  EXPECT_EQ(ReadAll(o->fh, 4096, 4096).size(), 4096u);
  EXPECT_EQ(fs_->prefetch_stats().readahead_requests.load(), 1u);  // nothing new to ask for
  fs_->Release(o->fh);

  auto o2 = fs_->Open(ino);
  ASSERT_OK(o2);
  EXPECT_EQ(ReadAll(o2->fh, 2 * kBlock, 10).size(), 10u);  // a first read elsewhere: a seek
  EXPECT_EQ(fs_->prefetch_stats().readahead_requests.load(), 1u);
  fs_->Release(o2->fh);

  FilesystemOptions off;
  off.prefetch.readahead_max_bytes = 0;
  Open(off);
  auto o3 = fs_->Open(Walk("data/big.bin"));
  ASSERT_OK(o3);
  ReadAll(o3->fh, 0, 4096);
  EXPECT_EQ(fs_->prefetch_stats().readahead_requests.load(), 0u);
  fs_->Release(o3->fh);
}

TEST_F(FilesystemTest, SmallFilesOpenedInADirectoryPrefetchTheNextOnes) {
  auto open_close = [&](std::string_view path) {
    auto o = fs_->Open(Walk(path));
    ASSERT_OK(o) << path;
    fs_->Release(o->fh);
  };
  auto residency = [&](std::string_view path) {
    auto v = fs_->GetXattr(Walk(path), "user.tierfs.residency");
    return v.ok() ? *v : v.status().ToString();
  };
  open_close("many/f010");  // one file of a directory: no pattern yet
  EXPECT_EQ(fs_->prefetch_stats().next_file_prefetches.load(), 0u);
  open_close("hello.txt");  // another directory does not count
  EXPECT_EQ(fs_->prefetch_stats().next_file_prefetches.load(), 0u);
  open_close("many/f030");  // the second: the next 16 of the listing are queued
  EXPECT_EQ(fs_->prefetch_stats().next_file_prefetches.load(), 16u);
  for (int i = 31; i <= 46; ++i) {
    const std::string path = fmt::format("many/f{:03d}", i);
    testing::Eventually([&] { return residency(path) == "l1=1/1"; }, std::chrono::seconds(20),
                        std::chrono::milliseconds(5));
    EXPECT_EQ(residency(path), "l1=1/1") << path;
  }
  EXPECT_EQ(residency("many/f047"), "l1=0/1");  // beyond the 16
  // Near the end of the listing there are fewer to queue, and what the cache holds is skipped:
  // of f046..f049, f046 is in L1 already.
  open_close("many/f045");
  EXPECT_EQ(fs_->prefetch_stats().next_file_prefetches.load(), 16u + 3u);
  // Big files neither count nor get queued; 0 turns it off.
  FilesystemOptions off;
  off.prefetch.next_files = 0;
  Open(off);
  open_close("many/f001");
  open_close("many/f002");
  open_close("many/f003");
  EXPECT_EQ(fs_->prefetch_stats().next_file_prefetches.load(), 0u);
}

TEST_F(FilesystemTest, StatsXattrOnRoot) {
  InodeId ino = LookupIno(kRootInode, "hello.txt");
  auto o = fs_->Open(ino);
  ASSERT_OK(o);
  ReadAll(o->fh, 0, 100);
  fs_->Release(o->fh);
  auto v = fs_->GetXattr(kRootInode, "user.tierfs.stats");
  ASSERT_OK(v);
  // Space-separated key=value tokens, every value a number.
  std::map<std::string, std::string> kv;
  size_t pos = 0;
  while (pos < v->size()) {
    size_t end = v->find(' ', pos);
    if (end == std::string::npos) end = v->size();
    std::string tok = v->substr(pos, end - pos);
    pos = end + 1;
    size_t eq = tok.find('=');
    ASSERT_NE(eq, std::string::npos) << tok;
    kv[tok.substr(0, eq)] = tok.substr(eq + 1);
    EXPECT_TRUE(std::all_of(tok.begin() + eq + 1, tok.end(), ::isdigit)) << tok;
  }
  EXPECT_EQ(kv["origin.bytes"], "12");
  EXPECT_TRUE(kv.count("l1.hits"));
  EXPECT_TRUE(kv.count("catalog.list_requests"));
  EXPECT_TRUE(kv.count("catalog.stale_serves"));
  EXPECT_TRUE(kv.count("catalog.background_refreshes"));
  EXPECT_TRUE(kv.count("catalog.snapshots_shared"));
  EXPECT_EQ(kv["fuse.opens"], "1");
  EXPECT_EQ(kv["fuse.open_files"], "0");
  // Root only.
  auto on_file = fs_->GetXattr(ino, "user.tierfs.stats");
  ASSERT_FALSE(on_file.ok());
  EXPECT_EQ(ToErrno(on_file.status(), ErrnoContext::kXattr), ENODATA);
}

TEST_F(FilesystemTest, FileXattrs) {
  InodeId ino = Walk("data/big.bin");
  auto info = origin_.Head("data/big.bin");
  ASSERT_OK(info);
  auto etag = fs_->GetXattr(ino, "user.tierfs.etag");
  ASSERT_OK(etag);
  EXPECT_EQ(*etag, info->etag);
  EXPECT_EQ(*fs_->GetXattr(ino, "user.tierfs.source"), "none");
  EXPECT_EQ(*fs_->GetXattr(ino, "user.tierfs.residency"), "l1=0/3");

  FilesystemOptions no_ra;
  no_ra.prefetch.readahead_max_bytes = 0;  // keep the residency deterministic
  Open(no_ra);
  ino = Walk("data/big.bin");
  auto o = fs_->Open(ino);
  ASSERT_OK(o);
  ReadAll(o->fh, 0, 10);
  EXPECT_EQ(*fs_->GetXattr(ino, "user.tierfs.source"), "origin");
  EXPECT_EQ(*fs_->GetXattr(ino, "user.tierfs.residency"), "l1=1/3");
  ReadAll(o->fh, 0, 10);
  EXPECT_EQ(*fs_->GetXattr(ino, "user.tierfs.source"), "l1");
  fs_->Release(o->fh);

  auto names = fs_->ListXattr(ino);
  ASSERT_OK(names);
  EXPECT_EQ(*names, (std::vector<std::string>{"user.tierfs.etag", "user.tierfs.source",
                                              "user.tierfs.residency", "user.tierfs.prefetch",
                                              "user.tierfs.pin", "user.tierfs.ttl",
                                              "user.tierfs.policy", "user.tierfs.admit"}));
  auto root_names = fs_->ListXattr(kRootInode);
  ASSERT_OK(root_names);
  EXPECT_EQ(*root_names,
            (std::vector<std::string>{"user.tierfs.stats", "user.tierfs.prefetch",
                                      "user.tierfs.prefetch_list", "user.tierfs.pin",
                                      "user.tierfs.ttl", "user.tierfs.policy", "user.tierfs.admit",
                                      "user.tierfs.log_level", "user.tierfs.daemon"}));
  // Directories have no etag.
  EXPECT_EQ(ToErrno(fs_->GetXattr(LookupIno(kRootInode, "a"), "user.tierfs.etag").status(),
                    ErrnoContext::kXattr),
            ENODATA);
}

// A mount of a dataset manifest: user.tierfs.manifest on the root (listed) gives its checksum
// (on a mount of live listings it is ENODATA and not listed); reads of an object changed since
// the manifest fail with ESTALE at every open, and nothing is listed or HEADed.
TEST_F(FilesystemTest, ManifestMountPinsVersionsAndTellsTheChecksum) {
  EXPECT_EQ(
      ToErrno(fs_->GetXattr(kRootInode, "user.tierfs.manifest").status(), ErrnoContext::kXattr),
      ENODATA);
  auto m = BuildManifest(&origin_, origin_.Describe(), &clock_);
  ASSERT_OK(m);
  ASSERT_OK(EncodeManifest(&*m));
  fs_.reset();
  catalog_ = NewManifestCatalog(*m);
  fs_ = std::make_unique<Filesystem>(FilesystemOptions{}, catalog_.get(), cache_.get(), &clock_);
  origin_.ResetCounters();
  EXPECT_EQ(*fs_->GetXattr(kRootInode, "user.tierfs.manifest"), m->checksum);
  auto root_names = fs_->ListXattr(kRootInode);
  ASSERT_OK(root_names);
  EXPECT_NE(std::find(root_names->begin(), root_names->end(), "user.tierfs.manifest"),
            root_names->end());
  const InodeId hello = Walk("hello.txt");
  EXPECT_EQ(ToErrno(fs_->GetXattr(hello, "user.tierfs.manifest").status(), ErrnoContext::kXattr),
            ENODATA);
  auto o = fs_->Open(hello);
  ASSERT_OK(o);
  EXPECT_EQ(ReadAll(o->fh, 0, 100), "hello world\n");
  fs_->Release(o->fh);
  const InodeId big = Walk("data/big.bin");
  origin_.PutObject("data/big.bin", Pattern(2 * kBlock + kBlock / 2, 8));  // a new version
  for (int i = 0; i < 2; ++i) {
    auto h = fs_->Open(big);
    ASSERT_OK(h);
    auto r = fs_->Read(h->fh, 0, 10);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(ToErrno(r.status()), ESTALE);
    fs_->Release(h->fh);
  }
  EXPECT_EQ(origin_.list_calls(), 0u);
  EXPECT_EQ(origin_.head_calls(), 0u);
}

// The daemon's side of user.tierfs.log_level / user.tierfs.daemon, recording what fuse/ asks.
class RecordingControl final : public DaemonControl {
 public:
  std::string LogLevel() const override { return level; }
  Status SetLogLevel(std::string_view l) override {
    level = std::string(l);
    ++sets;
    return Status::OK();
  }
  std::string Describe() const override { return "pid=1 version=t"; }
  std::string level = "info";
  int sets = 0;
};

TEST_F(FilesystemTest, LogLevelXattrIsParsedHereAndAppliedByTheDaemon) {
  // Without a daemon control: the level reads, a set is refused (ENOTSUP), never a crash.
  EXPECT_OK(fs_->GetXattr(kRootInode, "user.tierfs.log_level"));
  EXPECT_EQ(
      ToErrno(fs_->SetXattr(kRootInode, "user.tierfs.log_level", "debug", 0), ErrnoContext::kXattr),
      ENOTSUP);
  RecordingControl control;
  fs_->AttachDaemonControl(&control);
  EXPECT_EQ(*fs_->GetXattr(kRootInode, "user.tierfs.daemon"), "pid=1 version=t");
  ASSERT_OK(fs_->SetXattr(kRootInode, "user.tierfs.log_level", "debug\n", 0));
  EXPECT_EQ(control.level, "debug");  // setfattr's trailing newline dropped
  EXPECT_EQ(*fs_->GetXattr(kRootInode, "user.tierfs.log_level"), "debug");
  // A bad value never reaches the daemon: EINVAL.
  EXPECT_EQ(ToErrno(fs_->SetXattr(kRootInode, "user.tierfs.log_level", "verbose", 0),
                    ErrnoContext::kXattr),
            EINVAL);
  // Owner/root only, like the other controls.
  EXPECT_EQ(ToErrno(fs_->SetXattr(kRootInode, "user.tierfs.log_level", "info", 4242),
                    ErrnoContext::kXattr),
            EPERM);
  EXPECT_EQ(control.sets, 1);
  // Root only: files do not have it.
  const InodeId file = LookupIno(kRootInode, "hello.txt");
  EXPECT_EQ(ToErrno(fs_->GetXattr(file, "user.tierfs.log_level").status(), ErrnoContext::kXattr),
            ENODATA);
  fs_->AttachDaemonControl(nullptr);
}

TEST_F(FilesystemTest, XattrErrors) {
  InodeId ino = LookupIno(kRootInode, "hello.txt");
  auto unknown = fs_->GetXattr(ino, "user.tierfs.nope");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(ToErrno(unknown.status(), ErrnoContext::kXattr), ENODATA);
  EXPECT_EQ(ToErrno(fs_->GetXattr(ino, "security.capability").status(), ErrnoContext::kXattr),
            ENODATA);
  Status ro = fs_->SetXattr(ino, "user.tierfs.etag", "x", 0);
  EXPECT_EQ(ro.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ToErrno(ro, ErrnoContext::kXattr), EINVAL);
  EXPECT_EQ(ToErrno(fs_->SetXattr(kRootInode, "user.tierfs.stats", "", 0), ErrnoContext::kXattr),
            EINVAL);
  EXPECT_EQ(ToErrno(fs_->SetXattr(ino, "user.tierfs.bogus", "1", 0), ErrnoContext::kXattr),
            ENOTSUP);
  EXPECT_EQ(ToErrno(fs_->SetXattr(ino, "user.other", "1", 0), ErrnoContext::kXattr), ENOTSUP);
  EXPECT_EQ(ToErrno(fs_->RemoveXattr(ino, "user.tierfs.etag"), ErrnoContext::kXattr), EINVAL);
  EXPECT_EQ(ToErrno(fs_->RemoveXattr(ino, "user.other"), ErrnoContext::kXattr), ENODATA);
  EXPECT_EQ(ToErrno(fs_->GetXattr(424242, "user.tierfs.etag").status(), ErrnoContext::kXattr),
            ESTALE);
}

TEST_F(FilesystemTest, StatFsReportsTheLargestTier) {
  FsStatsInfo s = fs_->StatFs();
  EXPECT_EQ(s.block_size, kBlock);
  EXPECT_EQ(s.total_blocks, 64u);  // L1 capacity / block size (the only tier here)
  EXPECT_LE(s.free_blocks, s.total_blocks);
  EXPECT_EQ(s.name_max, 255u);
  EXPECT_GE(s.files, 1u);
}

TEST_F(FilesystemTest, OriginDownGivesEioNotACrash) {
  InodeId ino = Walk("data/big.bin");
  auto o = fs_->Open(ino);
  ASSERT_OK(o);
  origin_.FailNext(1000, Status::Unavailable("injected"));
  auto r = fs_->Read(o->fh, 2 * kBlock + 5, 10);
  if (!r.ok()) {
    EXPECT_EQ(ToErrno(r.status()), EIO);
  }
  auto miss = fs_->Lookup(kRootInode, "not-listed-yet");
  EXPECT_FALSE(miss.ok());
  // Cached attributes still answer getattr.
  EXPECT_OK(fs_->GetAttr(ino));
  origin_.FailNext(0);
  fs_->Release(o->fh);
}

TEST_F(FilesystemTest, ConcurrentLookupsReadsAndForgets) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto d = fs_->Lookup(kRootInode, "data");
        if (!d.ok()) {
          ++failures;
          continue;
        }
        auto f = fs_->Lookup(d->attr.ino, "big.bin");
        if (!f.ok()) {
          ++failures;
          continue;
        }
        auto o = fs_->Open(f->attr.ino);
        if (o.ok()) {
          uint64_t off = static_cast<uint64_t>((t * 7919 + i * 104729) % (2 * kBlock));
          auto r = fs_->Read(o->fh, off, 1000);
          if (!r.ok() || Concat(*r) != big_.substr(off, 1000)) ++failures;
          fs_->GetXattr(f->attr.ino, "user.tierfs.source").ok();
          fs_->Release(o->fh);
        } else {
          ++failures;
        }
        fs_->Forget(f->attr.ino, 1);
        fs_->Forget(d->attr.ino, 1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(fs_->InodeCount(), 1u);  // only the root is left
}

// ---- ToErrno: the one Status → errno table ----

// Interrupts: a read waiting on a stalled origin ends with Cancelled (EINTR) when its
// token is cancelled, while reads of cached files go on; ReadIsLocal tells them apart.
TEST_F(FilesystemTest, InterruptedReadIsEintrAndCachedReadsGoOn) {
  FilesystemOptions o;
  o.prefetch.readahead_max_bytes = 0;  // only the demand read reaches the origin
  o.prefetch.next_files = 0;
  Open(o);
  auto small = fs_->Open(LookupIno(kRootInode, "hello.txt"));
  ASSERT_OK(small);
  EXPECT_FALSE(fs_->ReadIsLocal(small->fh, 0, 12));
  EXPECT_EQ(ReadAll(small->fh, 0, 12), "hello world\n");
  EXPECT_TRUE(fs_->ReadIsLocal(small->fh, 0, 12));

  auto big = fs_->Open(Walk("data/big.bin"));
  ASSERT_OK(big);
  EXPECT_FALSE(fs_->ReadIsLocal(big->fh, 0, kBlock));
  origin_.HoldReads();
  CancelToken token;
  auto blocked =
      std::async(std::launch::async, [&] { return fs_->Read(big->fh, 0, kBlock, &token); });
  origin_.WaitForBlockedReads(1);
  EXPECT_EQ(ReadAll(small->fh, 0, 5), "hello");  // served from L1 meanwhile
  token.Cancel();
  ASSERT_EQ(blocked.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto r = blocked.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ToErrno(r.status()), EINTR);
  origin_.ReleaseReads();
  EXPECT_EQ(ReadAll(big->fh, 0, kBlock), big_.substr(0, kBlock));  // the fetch went on
  fs_->Release(small->fh);
  fs_->Release(big->fh);
}

TEST(ToErrnoTest, Table) {
  EXPECT_EQ(ToErrno(Status::OK()), 0);
  EXPECT_EQ(ToErrno(Status::NotFound("")), ENOENT);
  EXPECT_EQ(ToErrno(Status::NotFound(""), ErrnoContext::kXattr), ENODATA);
  EXPECT_EQ(ToErrno(Status::InvalidArgument("")), EINVAL);
  EXPECT_EQ(ToErrno(Status::IOError("")), EIO);
  EXPECT_EQ(ToErrno(Status::Corruption("")), EIO);
  EXPECT_EQ(ToErrno(Status::Unavailable("")), EIO);
  EXPECT_EQ(ToErrno(Status::TimedOut("")), EIO);
  EXPECT_EQ(ToErrno(Status::PermissionDenied("")), EACCES);
  EXPECT_EQ(ToErrno(Status::NoSpace("")), ENOSPC);
  EXPECT_EQ(ToErrno(Status::Cancelled("")), EINTR);
  EXPECT_EQ(ToErrno(Status::NotSupported("")), ENOTSUP);
  EXPECT_EQ(ToErrno(Status::NotSupported(""), ErrnoContext::kXattr), ENOTSUP);
  EXPECT_EQ(ToErrno(Status::Internal("")), EIO);
  EXPECT_EQ(ToErrno(Status::FailedPrecondition("")), ESTALE);
}

TEST(TimeoutSecondsTest, ForeverIsAYear) {
  EXPECT_DOUBLE_EQ(TimeoutSeconds(std::chrono::seconds(30)), 30.0);
  EXPECT_DOUBLE_EQ(TimeoutSeconds(std::chrono::milliseconds(1500)), 1.5);
  EXPECT_DOUBLE_EQ(TimeoutSeconds(kForever), 365.0 * 24 * 3600);
  EXPECT_DOUBLE_EQ(TimeoutSeconds(std::chrono::hours(24 * 365 * 10)), 365.0 * 24 * 3600);
}

TEST(FitReadToPipeTest, ReadsShrinkToWhatThePipeSplices) {
  constexpr uint32_t kMiB = 1U << 20;
  // Room for the reply: the bytes, its 16-byte header, a page per buffer (two file slices, the
  // header) and a spare page (libfuse's fuse_send_data_iov).
  const auto page = static_cast<uint32_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(FitReadToPipe(kMiB, 2 * kMiB), kMiB);
  EXPECT_EQ(FitReadToPipe(kMiB, kMiB + 4 * page + 16), kMiB);
  // fs.pipe-max-size's default, 1 MiB: 1004 KiB with 4 KiB pages.
  const uint32_t fit = FitReadToPipe(kMiB, kMiB);
  EXPECT_EQ(fit % page, 0u);
  EXPECT_LE(fit + 4 * page + 16, kMiB);
  EXPECT_GT(fit + page + 4 * page + 16, kMiB);
  if (page == 4096) {
    EXPECT_EQ(fit, 1004U << 10);
  }
  // Smaller requests stay as they are; a pipe too small for useful reads changes nothing.
  EXPECT_EQ(FitReadToPipe(128 << 10, kMiB), 128U << 10);
  EXPECT_EQ(FitReadToPipe(kMiB, 64 << 10), kMiB);
}

}  // namespace
}  // namespace tierfs
