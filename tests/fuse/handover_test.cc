// A live restart's FUSE-side parts without mounting: the Filesystem's tables exported by one
// daemon and imported by the next (inode numbers, lookup counts, open handles and their pinned
// versions), the versioned state encoding, the descriptor's transfer, and the refusals.
#include "fuse/internal/handover.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "fuse/filesystem.h"
#include "metastore/meta_store.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/status_matchers.h"
#include "tiercache/catalog.h"
#include "tiercache/tiered_cache.h"

namespace tierfs::fuse_internal {
namespace {

using testing::FakeBlobStore;

constexpr uint64_t kBlock = 64 * 1024;

std::string Concat(const std::vector<BlockSlice>& slices) {
  std::string out;
  for (const auto& s : slices) {
    out.append(reinterpret_cast<const char*>(s.block->data().data()) + s.offset, s.length);
  }
  return out;
}

class HandoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    origin_.PutObject("hello.txt", "hello world\n");
    big_ = std::string(2 * kBlock + 100, 'x');
    for (size_t i = 0; i < big_.size(); ++i) big_[i] = static_cast<char>(i * 7 + i / 997);
    origin_.PutObject("data/big.bin", big_);
    origin_.PutObject("data/other.bin", "other");
    meta_ = NewMemMetaStore();
    TieredCacheOptions co;
    co.block_size = kBlock;
    std::vector<std::unique_ptr<Tier>> tiers;
    MemoryTierOptions l1;
    l1.capacity_bytes = 16 * kBlock;
    tiers.push_back(NewMemoryTier(l1));
    auto cache = TieredCache::Open(co, std::move(tiers), &origin_, &clock_);
    ASSERT_OK(cache);
    cache_ = std::move(*cache);
    auto catalog = Catalog::Open(CatalogOptions{}, &origin_, meta_.get(), &clock_);
    ASSERT_OK(catalog);
    catalog_ = std::move(*catalog);
  }

  std::unique_ptr<Filesystem> NewFs() {
    return std::make_unique<Filesystem>(FilesystemOptions{}, catalog_.get(), cache_.get(), &clock_);
  }

  FakeClock clock_;
  FakeBlobStore origin_;
  std::string big_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<TieredCache> cache_;
  std::unique_ptr<Catalog> catalog_;
};

TEST_F(HandoverTest, TablesSurviveEncodingIntoANewFilesystem) {
  auto old_fs = NewFs();
  auto data = old_fs->Lookup(kRootInode, "data");
  ASSERT_OK(data);
  auto big = old_fs->Lookup(data->attr.ino, "big.bin");
  ASSERT_OK(big);
  ASSERT_OK(old_fs->Lookup(data->attr.ino, "big.bin"));  // two lookups held
  auto hello = old_fs->Lookup(kRootInode, "hello.txt");
  ASSERT_OK(hello);
  auto fh = old_fs->Open(big->attr.ino);
  ASSERT_OK(fh);
  auto dh = old_fs->OpenDir(data->attr.ino);
  ASSERT_OK(dh);

  HandoverState state;
  state.init_in = {7, 45, 131072, 0x1234, 0x5};
  state.init_out.flags = 0x4321;
  state.init_out.max_write = 1 << 20;
  state.fixed = {"allow_other=true"};
  state.mounted_at_ns = 1'700'000'000'000'000'000;
  state.restarts = 3;
  state.fs = old_fs->ExportState();
  state.kernel_io.push_back(KernelIoRec{big->attr.ino, 1, 0, 0, "v1", false});
  Result<HandoverState> decoded = DecodeHandover(EncodeHandover(state));
  ASSERT_OK(decoded);
  EXPECT_EQ(decoded->init_in.minor, 45u);
  EXPECT_EQ(decoded->init_in.flags2, 0x5u);
  EXPECT_EQ(decoded->init_out.flags, 0x4321u);
  EXPECT_EQ(decoded->fixed, state.fixed);
  EXPECT_EQ(decoded->mounted_at_ns, state.mounted_at_ns);
  EXPECT_EQ(decoded->restarts, 3u);
  ASSERT_EQ(decoded->kernel_io.size(), 1u);
  EXPECT_EQ(decoded->kernel_io[0].version, "v1");

  auto new_fs = NewFs();
  ASSERT_OK(new_fs->ImportState(decoded->fs));
  old_fs.reset();
  // The numbers the kernel holds name the same entries, with the same lookup counts.
  EXPECT_EQ(new_fs->InodeCount(), 4u);
  EXPECT_EQ(new_fs->TEST_LookupCount(big->attr.ino), 2u);
  auto attr = new_fs->GetAttr(big->attr.ino);
  ASSERT_OK(attr);
  EXPECT_EQ(attr->size, big_.size());
  auto again = new_fs->Lookup(data->attr.ino, "big.bin");
  ASSERT_OK(again);
  EXPECT_EQ(again->attr.ino, big->attr.ino);
  // The open handle reads its pinned version.
  auto bytes = new_fs->Read(fh->fh, kBlock - 10, 200);
  ASSERT_OK(bytes);
  EXPECT_EQ(Concat(*bytes), big_.substr(kBlock - 10, 200));
  // The directory handle lists afresh.
  std::vector<DirItem> items;
  ASSERT_OK(new_fs->ReadDir(*dh, 0, 10, &items));
  EXPECT_EQ(items.size(), 4u);  // . .. big.bin other.bin
  // New inodes and handles never reuse a number the kernel may still hold.
  auto other = new_fs->Lookup(data->attr.ino, "other.bin");
  ASSERT_OK(other);
  EXPECT_GT(other->attr.ino, hello->attr.ino);
  auto fh2 = new_fs->Open(other->attr.ino);
  ASSERT_OK(fh2);
  EXPECT_GT(fh2->fh, *dh);
  // Lookups end as before.
  EXPECT_FALSE(new_fs->Forget(big->attr.ino, 2));  // 3 held: the two, and `again`
  EXPECT_TRUE(new_fs->Forget(big->attr.ino, 1));
}

// Crash resume sends the state before a reply hands out an inode or a handle the last state
// lacks: TablesVersion must grow with each one handed out, and only then.
TEST_F(HandoverTest, TablesVersionGrowsWithEachInodeAndHandleHandedOut) {
  auto fs = NewFs();
  const uint64_t v0 = fs->TablesVersion();
  auto data = fs->Lookup(kRootInode, "data");
  ASSERT_OK(data);
  const uint64_t v1 = fs->TablesVersion();
  EXPECT_GT(v1, v0);
  ASSERT_OK(fs->Lookup(kRootInode, "data"));  // the same inode again
  EXPECT_EQ(fs->TablesVersion(), v1);
  auto big = fs->Lookup(data->attr.ino, "big.bin");
  ASSERT_OK(big);
  const uint64_t v2 = fs->TablesVersion();
  EXPECT_GT(v2, v1);
  auto fh = fs->Open(big->attr.ino);
  ASSERT_OK(fh);
  const uint64_t v3 = fs->TablesVersion();
  EXPECT_GT(v3, v2);
  auto dh = fs->OpenDir(data->attr.ino);
  ASSERT_OK(dh);
  EXPECT_GT(fs->TablesVersion(), v3);
  // A state exported at a version holds everything handed out up to it.
  FilesystemState state = fs->ExportState();
  EXPECT_EQ(state.files.size(), 1u);
  EXPECT_EQ(state.dirs.size(), 1u);
  EXPECT_EQ(state.inodes.size(), 3u);
}

// The crash-resume log: a whole state, then updates of what was handed out since; the
// supervisor's copy, merged, holds every inode and handle the kernel may know.
TEST_F(HandoverTest, StateLogUpdatesCarryOnlyWhatWasHandedOutSince) {
  auto fs = NewFs();
  auto data = fs->Lookup(kRootInode, "data");
  ASSERT_OK(data);
  HandoverState whole;
  whole.fs = fs->ExportState();
  whole.kernel_io.push_back(KernelIoRec{data->attr.ino, 1, 0, 0, "gone", false});
  StateCopy copy;
  EXPECT_TRUE(copy.empty());
  ASSERT_OK(copy.Apply(EncodeHandover(whole)));
  EXPECT_FALSE(copy.empty());
  const InodeId from_ino = whole.fs.next_ino;
  const uint64_t from_handle = whole.fs.next_handle;
  // Nothing handed out since: an empty update.
  FilesystemState none = fs->ExportStateSince(from_ino, from_handle);
  EXPECT_TRUE(none.inodes.empty() && none.files.empty() && none.dirs.empty());

  auto big = fs->Lookup(data->attr.ino, "big.bin");
  ASSERT_OK(big);
  auto hello = fs->Lookup(kRootInode, "hello.txt");
  ASSERT_OK(hello);
  ASSERT_OK(fs->Lookup(kRootInode, "data"));  // known already: not in the update
  auto fh = fs->Open(big->attr.ino);
  ASSERT_OK(fh);
  auto dh = fs->OpenDir(data->attr.ino);
  ASSERT_OK(dh);
  HandoverState update;
  update.fs = fs->ExportStateSince(from_ino, from_handle);
  std::set<InodeId> inos;
  for (const auto& n : update.fs.inodes) inos.insert(n.ino);
  EXPECT_EQ(inos, (std::set<InodeId>{big->attr.ino, hello->attr.ino}));
  ASSERT_EQ(update.fs.files.size(), 1u);
  EXPECT_EQ(update.fs.files[0].fh, fh->fh);
  ASSERT_EQ(update.fs.dirs.size(), 1u);
  EXPECT_EQ(update.fs.dirs[0].dh, *dh);
  EXPECT_EQ(update.fs.next_ino, fs->ExportState().next_ino);
  update.kernel_io.push_back(KernelIoRec{big->attr.ino, 0, 1, 3, "v1", true});
  const std::string bytes = EncodeHandover(update, HandoverKind::kUpdate);
  // An update is not a state a live restart may hand over.
  EXPECT_TRUE(DecodeHandover(bytes).status().code() == Status::Code::kCorruption);
  ASSERT_OK(copy.Apply(bytes));

  // The merged copy makes a daemon that knows every number the kernel holds.
  Result<std::string> merged = copy.Encode();
  ASSERT_OK(merged);
  Result<HandoverState> handed = DecodeHandover(*merged);
  ASSERT_OK(handed);
  ASSERT_EQ(handed->kernel_io.size(), 1u);  // replaced whole: the closed one is gone
  EXPECT_EQ(handed->kernel_io[0].ino, big->attr.ino);
  auto next_fs = NewFs();
  ASSERT_OK(next_fs->ImportState(handed->fs));
  fs.reset();
  auto bytes_read = next_fs->Read(fh->fh, kBlock - 10, 200);
  ASSERT_OK(bytes_read);
  EXPECT_EQ(Concat(*bytes_read), big_.substr(kBlock - 10, 200));
  auto attr = next_fs->GetAttr(hello->attr.ino);
  ASSERT_OK(attr);
  EXPECT_EQ(attr->size, 12u);
  // The log does not follow lookups of known inodes: no forget drops what the kernel may hold.
  EXPECT_EQ(next_fs->TEST_LookupCount(big->attr.ino), StateCopy::kLookupsUnknown);
  EXPECT_FALSE(next_fs->Forget(big->attr.ino, 1000));
}

TEST_F(HandoverTest, StateCopyGivesAPathToItsNewestInode) {
  auto fs = NewFs();
  HandoverState whole;
  whole.fs = fs->ExportState();
  FilesystemState::InodeRec a;
  a.ino = whole.fs.next_ino;
  a.path = "a";
  a.nlookup = 1;
  whole.fs.inodes.push_back(a);
  whole.fs.next_ino = a.ino + 1;
  StateCopy copy;
  // An update needs the state it follows.
  EXPECT_TRUE(copy.Apply(EncodeHandover(whole, HandoverKind::kUpdate)).code() ==
              Status::Code::kFailedPrecondition);
  ASSERT_OK(copy.Apply(EncodeHandover(whole)));
  HandoverState update;
  FilesystemState::InodeRec b = a;  // the path's object changed: a new inode names it
  b.ino = a.ino + 5;
  update.fs.inodes.push_back(b);
  update.fs.next_ino = b.ino + 1;
  update.fs.next_handle = 1;
  ASSERT_OK(copy.Apply(EncodeHandover(update, HandoverKind::kUpdate)));
  Result<std::string> merged = copy.Encode();
  ASSERT_OK(merged);
  Result<HandoverState> handed = DecodeHandover(*merged);
  ASSERT_OK(handed);
  for (const auto& n : handed->fs.inodes) {
    if (n.path == "a") {
      EXPECT_EQ(n.mapped, n.ino == b.ino) << n.ino;
    }
  }
  EXPECT_EQ(handed->fs.next_ino, b.ino + 1);
  // An update that does not decode makes the copy unusable, not wrong.
  std::string damaged = EncodeHandover(update, HandoverKind::kUpdate);
  damaged.resize(damaged.size() - 3);
  ASSERT_OK(copy.Apply(damaged));  // its header is sound
  EXPECT_TRUE(copy.Encode().status().code() == Status::Code::kCorruption);
  auto next_fs = NewFs();
  ASSERT_OK(next_fs->ImportState(handed->fs));
  EXPECT_EQ(next_fs->InodeCount(), 3u);  // the root and both inodes of "a"
}

TEST_F(HandoverTest, ImportRefusesTablesThatDoNotHoldTogether) {
  auto fs = NewFs();
  FilesystemState s = fs->ExportState();
  FilesystemState bad = s;
  bad.files.push_back(FilesystemState::FileRec{7, 999, "x", 1, "e", 0});
  bad.next_handle = 8;
  Status st = NewFs()->ImportState(bad);
  EXPECT_TRUE(st.code() == Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("999"), std::string::npos) << st.ToString();
  bad = s;
  bad.inodes.clear();
  EXPECT_TRUE(NewFs()->ImportState(bad).code() == Status::Code::kInvalidArgument);
  bad = s;
  bad.next_ino = 1;
  EXPECT_TRUE(NewFs()->ImportState(bad).code() == Status::Code::kInvalidArgument);
}

TEST(HandoverStateTest, AnotherVersionIsRefusedNamingBoth) {
  std::string bytes = EncodeHandover(HandoverState{});
  ASSERT_OK(DecodeHandover(bytes));
  const uint32_t older = kHandoverVersion + 1;
  std::memcpy(bytes.data() + 8, &older, sizeof(older));
  Result<HandoverState> r = DecodeHandover(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().code() == Status::Code::kNotSupported) << r.status().ToString();
  EXPECT_NE(r.status().message().find(std::to_string(older)), std::string::npos);
}

TEST(HandoverStateTest, DamagedStateIsCorruption) {
  const std::string bytes = EncodeHandover(HandoverState{});
  for (size_t n : {size_t{0}, size_t{5}, size_t{12}, bytes.size() - 1}) {
    Result<HandoverState> r = DecodeHandover(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_TRUE(r.status().code() == Status::Code::kCorruption)
        << n << ": " << r.status().ToString();
  }
  EXPECT_TRUE(DecodeHandover(bytes + "x").status().code() == Status::Code::kCorruption);
  std::string huge = bytes;
  // A record count beyond what the bytes can hold.
  const uint32_t count = 0x7fffffff;
  std::memcpy(huge.data() + 8 + 4 + 20 + 64, &count, sizeof(count));  // the fixed settings
  EXPECT_TRUE(DecodeHandover(huge).status().code() == Status::Code::kCorruption);
}

TEST(HandoverStateTest, FixedSettingsDiffNamesEachSetting) {
  FuseOptions a, b;
  b.allow_other = true;
  b.default_permissions = true;
  const std::string diff =
      FixedSettingsDiff(FixedSettings(a, false, false), FixedSettings(b, false, false));
  EXPECT_NE(diff.find("fuse.allow_other: running false, new true"), std::string::npos) << diff;
  EXPECT_NE(diff.find("fuse.default_permissions"), std::string::npos) << diff;
  EXPECT_EQ(FixedSettingsDiff(FixedSettings(a, false, false), FixedSettings(a, false, false)), "");
  kabi::InitOut x{}, y{};
  y.max_write = 4096;
  EXPECT_NE(InitOutDiff(x, y).find("max_write"), std::string::npos);
  EXPECT_EQ(InitOutDiff(x, x), "");
}

TEST(HandoverStateTest, MessageCarriesTheDescriptor) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  UniqueFd pr(p[0]), pw(p[1]);
  const std::string big(300000, 'q');  // more than one socket buffer's worth in flight
  std::thread sender([&] { EXPECT_OK(SendMessage(a.get(), big, pw.get())); });
  UniqueFd got;
  Result<std::string> m =
      ReceiveMessage(b.get(), std::chrono::steady_clock::now() + std::chrono::seconds(10), &got);
  sender.join();
  ASSERT_OK(m);
  EXPECT_EQ(*m, big);
  ASSERT_GE(got.get(), 0);
  struct stat s1, s2;
  ASSERT_EQ(fstat(got.get(), &s1), 0);
  ASSERT_EQ(fstat(pw.get(), &s2), 0);
  EXPECT_EQ(s1.st_ino, s2.st_ino);  // the same pipe
  a.Reset();
  Result<std::string> eof =
      ReceiveMessage(b.get(), std::chrono::steady_clock::now() + std::chrono::seconds(10));
  EXPECT_TRUE(eof.status().code() == Status::Code::kUnavailable) << eof.status().ToString();
}

}  // namespace
}  // namespace tierfs::fuse_internal
