// Block naming and storage: MakeBlockKey is a persistent format (tiercache/FORMAT.md), so these
// tests pin it down byte by byte.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/internal/block_arena.h"
#include "tiercache/tier.h"

namespace tierfs {
namespace {

// The derivation spelled out independently of block.cc, as FORMAT.md describes it.
BlockKey ReferenceKey(std::string_view source, std::string_view key, std::string_view etag,
                      uint64_t bs, uint64_t index) {
  std::string buf;
  auto u64 = [&buf](uint64_t v) {
    for (int i = 0; i < 8; ++i) buf.push_back(static_cast<char>(v >> (8 * i)));
  };
  for (std::string_view f : {source, key, etag}) {
    u64(f.size());
    buf.append(f);
  }
  u64(bs);
  u64(index);
  XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  BlockKey out;
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(h.high64 >> (56 - 8 * i));
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>(h.low64 >> (56 - 8 * i));
  return out;
}

TEST(BlockKeyTest, MatchesTheDocumentedDerivation) {
  EXPECT_EQ(MakeBlockKey("s3://h/b/", "a/b.bin", "etag1", 1 << 20, 7),
            ReferenceKey("s3://h/b/", "a/b.bin", "etag1", 1 << 20, 7));
  EXPECT_EQ(MakeBlockKey("", "", "", 0, 0), ReferenceKey("", "", "", 0, 0));
}

TEST(BlockKeyTest, IsStableAcrossVersions) {
  // Golden value: changing it orphans every L2 and L3 block in the field. If this fails, the
  // format changed; bump it deliberately and document it in FORMAT.md.
  EXPECT_EQ(BlockKeyHex(MakeBlockKey("file:///data", "train/shard-000.tar", "etag-1", 1048576, 3)),
            BlockKeyHex(ReferenceKey("file:///data", "train/shard-000.tar", "etag-1", 1048576, 3)));
  EXPECT_EQ(BlockKeyHex(MakeBlockKey("file:///data", "train/shard-000.tar", "etag-1", 1048576, 3)),
            "019b3d40472838cf06cd039aa70ec488");
}

// The owner id the tiers index blocks by (FORMAT.md "Object ids"): L2 records store it, so it is
// part of the on-flash format too. Every field changes it; the block index does not enter it.
TEST(BlockKeyTest, ObjectIdIsStableAndNamesOneVersion) {
  ObjectInfo info;
  info.etag = "etag-1";
  info.size = 12345;
  const ObjectId id = MakeObjectId("file:///data", "train/shard-000.tar", info, 1048576);
  // The encoding of FORMAT.md spelled out: the tag, the length-prefixed fields, the block size.
  std::string buf = "tierfs-object";
  auto u64 = [&buf](uint64_t v) {
    for (int i = 0; i < 8; ++i) buf.push_back(static_cast<char>(v >> (8 * i)));
  };
  for (std::string_view f : {"file:///data", "train/shard-000.tar", "etag-1"}) {
    u64(f.size());
    buf.append(f);
  }
  u64(1048576);
  const XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  ObjectId ref;
  for (int i = 0; i < 8; ++i) ref[i] = static_cast<uint8_t>(h.high64 >> (56 - 8 * i));
  for (int i = 0; i < 8; ++i) ref[8 + i] = static_cast<uint8_t>(h.low64 >> (56 - 8 * i));
  EXPECT_EQ(id, ref);
  EXPECT_EQ(BlockKeyHex(id), "83aac4133a4150d8037c65264935dc3e");
  ObjectInfo other = info;
  other.etag = "etag-2";
  EXPECT_NE(MakeObjectId("file:///data", "train/shard-000.tar", other, 1048576), id);
  EXPECT_NE(MakeObjectId("file:///data", "train/shard-001.tar", info, 1048576), id);
  EXPECT_NE(MakeObjectId("file:///dat", "atrain/shard-000.tar", info, 1048576), id);
  EXPECT_NE(MakeObjectId("file:///data", "train/shard-000.tar", info, 4096), id);
  other = info;
  other.size = 1;  // the size is not part of an ETag'd version
  EXPECT_EQ(MakeObjectId("file:///data", "train/shard-000.tar", other, 1048576), id);
  EXPECT_NE(BlockKeyHex(id),
            BlockKeyHex(MakeBlockKey("file:///data", "train/shard-000.tar", info, 1048576, 0)));
}

TEST(BlockKeyTest, EveryFieldChangesTheKey) {
  const BlockKey base = MakeBlockKey("src", "key", "etag", 1024, 5);
  std::set<BlockKey> keys = {base};
  keys.insert(MakeBlockKey("src2", "key", "etag", 1024, 5));
  keys.insert(MakeBlockKey("src", "key2", "etag", 1024, 5));
  keys.insert(MakeBlockKey("src", "key", "etag2", 1024, 5));
  keys.insert(MakeBlockKey("src", "key", "etag", 2048, 5));
  keys.insert(MakeBlockKey("src", "key", "etag", 1024, 6));
  EXPECT_EQ(keys.size(), 6u);
  EXPECT_EQ(MakeBlockKey("src", "key", "etag", 1024, 5), base);  // deterministic
}

TEST(BlockKeyTest, FieldBoundariesAreUnambiguous) {
  // Without length prefixes these would all hash the same concatenation "abc".
  std::set<BlockKey> keys = {MakeBlockKey("ab", "c", "", 1, 0), MakeBlockKey("a", "bc", "", 1, 0),
                             MakeBlockKey("", "abc", "", 1, 0), MakeBlockKey("a", "b", "c", 1, 0),
                             MakeBlockKey("abc", "", "", 1, 0)};
  EXPECT_EQ(keys.size(), 5u);
}

TEST(BlockKeyTest, HexIsLowerCase32Chars) {
  BlockKey k{};
  k[0] = 0xAB;
  k[15] = 0x0f;
  EXPECT_EQ(BlockKeyHex(k), "ab00000000000000000000000000000f");
}

TEST(BlockChecksumTest, IsXxh3_64) {
  // Against libxxhash's baseline code (this file does not include the x86 dispatch that
  // block.cc uses): short inputs, both sides of the 240-byte switch to the vector loop, and
  // sizes across its stripes and blocks; the streaming form (FileExtent::Checksum) likewise.
  const std::string big = testing::Pattern((1 << 20) + 3, 7);
  for (const size_t n : {size_t{0}, size_t{1}, size_t{240}, size_t{241}, size_t{1024 + 64},
                         size_t{4096}, big.size()}) {
    EXPECT_EQ(BlockChecksum(testing::AsBytes(big).first(n)), XXH3_64bits(big.data(), n)) << n;
  }
  std::string data = testing::Pattern(4096);
  EXPECT_EQ(BlockChecksum(testing::AsBytes(data)), XXH3_64bits(data.data(), data.size()));
  std::string other = data;
  other[100] ^= 1;
  EXPECT_NE(BlockChecksum(testing::AsBytes(data)), BlockChecksum(testing::AsBytes(other)));
}

TEST(BlockChecksumTest, AFileExtentsChecksumIsBlockChecksumOfItsBytes) {
  // Read and hashed in 128 KiB pieces: lengths around and across the pieces, at an offset.
  testing::TempDir dir;
  const std::string data = testing::Pattern(3 * 131072 + 777);
  const std::string path = dir.path() + "/f";
  {
    std::ofstream f(path, std::ios::binary);
    f << data;
  }
  for (const uint64_t off : {uint64_t{0}, uint64_t{5}}) {
    for (const uint64_t len : {uint64_t{0}, uint64_t{1}, uint64_t{131072}, uint64_t{131073},
                               uint64_t{2 * 131072 + 3}, uint64_t{data.size() - 5}}) {
      SCOPED_TRACE(std::to_string(off) + "+" + std::to_string(len));
      FileExtent e(::open(path.c_str(), O_RDONLY | O_CLOEXEC), off, len);
      Result<uint64_t> sum = e.Checksum();
      ASSERT_OK(sum);
      EXPECT_EQ(*sum, BlockChecksum(testing::AsBytes(data).subspan(off, len)));
    }
  }
  // A file shorter than the extent: Corruption, as ReadAt says.
  FileExtent longer(::open(path.c_str(), O_RDONLY | O_CLOEXEC), 0, data.size() + 1);
  Result<uint64_t> sum = longer.Checksum();
  ASSERT_FALSE(sum.ok());
  EXPECT_EQ(sum.status().code(), Status::Code::kCorruption);
}

TEST(BlockTest, AllocateGivesCapacityAndZeroSize) {
  auto b = Block::Allocate(1 << 20);
  EXPECT_EQ(b->capacity(), 1u << 20);
  EXPECT_EQ(b->size(), 0u);
  EXPECT_EQ(b->mutable_data().size(), 1u << 20);
  std::memset(b->mutable_data().data(), 7, 10);
  b->set_size(10);
  EXPECT_EQ(b->data().size(), 10u);
  EXPECT_EQ(b->data()[9], std::byte{7});
  auto empty = Block::Allocate(0);
  EXPECT_EQ(empty->data().size(), 0u);
}

TEST(BlockTest, LargeBlocksComeFromTheArenaAndGoBackToIt) {
  const uint64_t before = Block::MappedBytes();
  const std::byte* storage = nullptr;
  {
    auto b = Block::Allocate(Block::kMapThreshold);
    storage = b->mutable_data().data();
    EXPECT_EQ(Block::MappedBytes(), before + Block::kMapThreshold);
    std::memset(b->mutable_data().data(), 1, b->capacity());
    auto small = Block::Allocate(Block::kMapThreshold - 1);  // from the heap
    EXPECT_EQ(Block::MappedBytes(), before + Block::kMapThreshold);
  }
  EXPECT_EQ(Block::MappedBytes(), before);
  // The next block of that size reuses the storage instead of faulting in fresh pages.
  const Block::PoolStats pool = Block::Pool();
  auto again = Block::Allocate(Block::kMapThreshold);
  EXPECT_EQ(again->mutable_data().data(), storage);
  EXPECT_GE(Block::Pool().slab_bytes, Block::kMapThreshold);
  EXPECT_EQ(Block::Pool().reused + Block::Pool().fresh, pool.reused + pool.fresh + 1);
  // Sizes beyond the arena's are mappings of their own, returned when freed.
  {
    auto huge = Block::Allocate(32u << 20);
    EXPECT_EQ(Block::MappedBytes(), before + Block::kMapThreshold + (32u << 20));
  }
  EXPECT_EQ(Block::MappedBytes(), before + Block::kMapThreshold);
}

TEST(BlockTest, StorageIsChargedToTheProcessBudgetWhileItLives) {
  // (The process's budget outlives the test; its limit leaves every other test alone.)
  MemoryBudget* budget = SetProcessMemoryBudget(uint64_t{1} << 50);
  const uint64_t before = budget->used(MemoryUse::kBlocks);
  {
    auto big = Block::Allocate(1 << 20);
    EXPECT_EQ(budget->used(MemoryUse::kBlocks), before + (1 << 20));
    auto small = Block::Allocate(100);  // from the heap, charged all the same
    EXPECT_EQ(budget->used(MemoryUse::kBlocks), before + (1 << 20) + 100);
    auto odd = Block::Allocate((1 << 20) + 1);  // charged by its size class
    EXPECT_EQ(budget->used(MemoryUse::kBlocks),
              before + (1 << 20) + 100 + tiercache_internal::BlockArena::ClassBytes((1 << 20) + 1));
    std::vector<std::shared_ptr<Block>> run = Block::AllocateAdjacent(1 << 20, 4);
    EXPECT_EQ(budget->used(MemoryUse::kBlocks),
              before + (1 << 20) + 100 + tiercache_internal::BlockArena::ClassBytes((1 << 20) + 1) +
                  run.size() * (1 << 20));
  }
  EXPECT_EQ(budget->used(MemoryUse::kBlocks), before);
}

TEST(BlockTest, AnAllocationOverTheBudgetHasTheReclaimerGiveBackFirst) {
  MemoryBudget* budget = SetProcessMemoryBudget(uint64_t{1} << 50);
  uint64_t asked = 0;
  std::vector<BlockRef> held;  // a stand-in for L1: what it gives back is freed
  budget->SetReclaimer([&](uint64_t bytes) {
    asked += bytes;
    uint64_t freed = 0;
    while (freed < bytes && !held.empty()) {
      freed += held.back()->capacity();
      held.pop_back();
    }
    return freed;
  });
  // Fill the budget up to its limit less one block, then allocate two more.
  const uint64_t room = budget->limit() - budget->used();
  budget->Charge(MemoryUse::kListings, room - (2u << 20));
  held.push_back(Block::Allocate(1 << 20));
  held.push_back(Block::Allocate(1 << 20));
  EXPECT_EQ(asked, 0u);
  auto next = Block::Allocate(1 << 20);  // over by one block: one held block goes
  EXPECT_EQ(asked, 1u << 20);
  EXPECT_EQ(held.size(), 1u);
  EXPECT_LE(budget->used(), budget->limit());
  budget->SetReclaimer(nullptr);
  held.clear();
  next.reset();
  budget->Release(MemoryUse::kListings, room - (2u << 20));
}

}  // namespace
}  // namespace tierfs
