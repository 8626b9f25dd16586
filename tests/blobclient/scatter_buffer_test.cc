// ScatterBuffer: slicing and copying across piece boundaries, and the default
// BlobStore::ReadPinnedScatter (one read into a buffer, copied into the pieces).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "blobclient/blob_store.h"
#include "tests/blobclient/test_util.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/status_matchers.h"

namespace tierfs {
namespace {

using ::tierfs::testing::AsBytes;
using ::tierfs::testing::AsString;
using ::tierfs::testing::Pattern;

TEST(ScatterBufferTest, SliceAndCopyInCrossPieceBoundaries) {
  std::vector<std::byte> a(3), b(0), c(5), d(2);
  ScatterBuffer buf({std::span<std::byte>(a), std::span<std::byte>(b), std::span<std::byte>(c),
                     std::span<std::byte>(d)});
  EXPECT_EQ(buf.size(), 10u);
  EXPECT_EQ(buf.pieces().size(), 3u);  // the empty piece is dropped

  buf.CopyIn(0, AsBytes("0123456789"));
  EXPECT_EQ(AsString(a), "012");
  EXPECT_EQ(AsString(c), "34567");
  EXPECT_EQ(AsString(d), "89");

  // A slice from inside the first piece to inside the last.
  ScatterBuffer mid = buf.Slice(2, 7);
  EXPECT_EQ(mid.size(), 7u);
  ASSERT_EQ(mid.pieces().size(), 3u);
  EXPECT_EQ(mid.pieces()[0].data(), a.data() + 2);
  EXPECT_EQ(mid.pieces()[0].size(), 1u);
  EXPECT_EQ(mid.pieces()[1].size(), 5u);
  EXPECT_EQ(mid.pieces()[2].size(), 1u);
  mid.CopyIn(0, AsBytes("abcdefg"));
  EXPECT_EQ(AsString(a), "01a");
  EXPECT_EQ(AsString(c), "bcdef");
  EXPECT_EQ(AsString(d), "g9");

  // Copies at an offset, within one piece and across two.
  buf.CopyIn(4, AsBytes("XY"));
  EXPECT_EQ(AsString(c), "bXYef");
  buf.CopyIn(7, AsBytes("PQR"));
  EXPECT_EQ(AsString(c), "bXYeP");
  EXPECT_EQ(AsString(d), "QR");

  EXPECT_EQ(buf.Slice(3, 0).size(), 0u);
  EXPECT_TRUE(buf.Slice(10, 0).empty());
  EXPECT_EQ(buf.Slice(8, 2).pieces().size(), 1u);
}

TEST(ScatterBufferTest, PiecesAdjacentInMemoryAreJoined) {
  // A run of blocks the arena placed side by side is one piece: a write into it is one copy.
  std::vector<std::byte> all(10), other(4);
  std::span<std::byte> s(all);
  ScatterBuffer buf({s.subspan(0, 3), s.subspan(3, 0), s.subspan(3, 5), std::span<std::byte>(other),
                     s.subspan(8, 2)});
  EXPECT_EQ(buf.size(), 14u);
  ASSERT_EQ(buf.pieces().size(), 3u);
  EXPECT_EQ(buf.pieces()[0].data(), all.data());
  EXPECT_EQ(buf.pieces()[0].size(), 8u);
  EXPECT_EQ(buf.pieces()[1].data(), other.data());
  EXPECT_EQ(buf.pieces()[2].data(), all.data() + 8);  // after `other`, so not joined
  buf.CopyIn(0, AsBytes("0123456789abcd"));
  EXPECT_EQ(AsString(all), "01234567cd");
  EXPECT_EQ(AsString(other), "89ab");

  // Out of order in memory is never joined: the concatenation's order is the pieces' order.
  ScatterBuffer back({s.subspan(5, 5), s.subspan(0, 5)});
  EXPECT_EQ(back.pieces().size(), 2u);
}

TEST(ScatterBufferTest, DefaultScatterReadIsOneReadCopiedIntoThePieces) {
  ::tierfs::testing::FakeBlobStore store;
  const std::string data = Pattern(1000);
  store.PutObject("k", data);
  Result<ObjectInfo> info = store.Head("k");
  ASSERT_OK(info);
  std::vector<std::byte> a(100), b(250), c(700);
  ScatterBuffer buf({std::span<std::byte>(a), std::span<std::byte>(b), std::span<std::byte>(c)});
  store.ResetCounters();
  // Bytes 50..999: the last piece is cut short by the end of the object.
  Result<size_t> n = store.ReadPinnedScatter("k", 50, buf, *info);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 950u);
  EXPECT_EQ(store.read_calls(), 1u);
  EXPECT_EQ(store.scatter_reads(), 1u);
  EXPECT_EQ(AsString(a), data.substr(50, 100));
  EXPECT_EQ(AsString(b), data.substr(150, 250));
  EXPECT_EQ(AsString(std::span<const std::byte>(c).first(600)), data.substr(400, 600));

  // A changed object is refused as for ReadPinned, and nothing is written.
  store.PutObject("k", Pattern(1000) + "x");
  std::fill(a.begin(), a.end(), std::byte{0});
  n = store.ReadPinnedScatter("k", 0, buf, *info);
  EXPECT_EQ(n.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(a[0], std::byte{0});
}

}  // namespace
}  // namespace tierfs
