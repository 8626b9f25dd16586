// SparseReader (internal/sparse_reader.h): projected reads from sparse entries.
#include "tiercache/internal/sparse_reader.h"

#include <algorithm>
#include <cstring>

namespace tierfs::tiercache_internal {
namespace {

// Projected reads fetch whole pages (the kernel's unit).
constexpr uint64_t kPage = 4096;

// The lengths a sparse entry of chunk `c` of a block of `block_len` bytes can have that cover its
// first `need` bytes (need 0: every length), longest first: whole pages, then the chunk's end.
std::vector<uint64_t> ChunkEntryLengths(uint64_t block_len, uint64_t c, uint64_t need) {
  const uint64_t full = std::min(kSparseChunkBytes, block_len - c * kSparseChunkBytes);
  std::vector<uint64_t> out{full};
  for (uint64_t len = (full - 1) / kPage * kPage; len >= std::max<uint64_t>(need, 1) && len > 0;
       len -= kPage) {
    out.push_back(len);
  }
  return out;
}

// One slice of bytes [in_block, in_block + want) of a block: the entries of chunks c0, c0 + 1,
// ... (`have`) and then `fetched` (bytes from `fetch_begin`): a part of one buffer when one holds
// it all, else a copy of the pieces.
BlockSlice Assemble(const std::vector<BlockRef>& have, const BlockRef& fetched,
                    uint64_t fetch_begin, uint64_t in_block, uint64_t want, int tier) {
  const uint64_t cb = kSparseChunkBytes;
  const uint64_t c0 = in_block / cb, end = in_block + want;
  if (have.empty()) {
    return BlockSlice{fetched, static_cast<size_t>(in_block - fetch_begin),
                      static_cast<size_t>(want), tier, nullptr};
  }
  if (have.size() == 1 && !fetched) {
    return BlockSlice{have[0], static_cast<size_t>(in_block - c0 * cb), static_cast<size_t>(want),
                      tier, nullptr};
  }
  auto out = Block::Allocate(want);
  std::byte* dst = out->mutable_data().data();
  uint64_t pos = in_block;
  for (size_t k = 0; k < have.size(); ++k) {
    const uint64_t c = c0 + k;
    const uint64_t n = std::min(end, (c + 1) * cb) - pos;
    std::memcpy(dst + (pos - in_block), have[k]->data().data() + (pos - c * cb), n);
    pos += n;
  }
  if (pos < end) {
    std::memcpy(dst + (pos - in_block), fetched->data().data() + (pos - fetch_begin), end - pos);
  }
  out->set_size(want);
  return BlockSlice{BlockRef(std::move(out)), 0, static_cast<size_t>(want), tier, nullptr};
}

}  // namespace

// Where a sparse entry of chunk `c` of block `key` covering its first `need` bytes (0: any) is:
// the fastest host tier holding one, and its length; nullopt when none does.
std::optional<std::pair<size_t, uint64_t>> SparseReader::ChunkHolder(const BlockKey& key,
                                                                     uint64_t block_len, uint64_t c,
                                                                     uint64_t need) const {
  for (uint64_t len : ChunkEntryLengths(block_len, c, need)) {
    const BlockKey ck = MakeChunkKey(key, c, len);
    for (size_t t = 0; t < host_->size(); ++t) {
      if (host_->tier(t)->Contains(ck)) return std::make_pair(t, len);
    }
  }
  return std::nullopt;
}

// The sparse entry of chunk `c` of block `key` that covers its first `need` bytes, from the
// fastest host tier holding one (copied up into the faster ones), or a null block.
Served SparseReader::FindChunk(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                               uint64_t block_len, uint64_t c, uint64_t need) {
  const auto held = ChunkHolder(key, block_len, c, need);
  if (!held) return Served{};
  const auto [t, len] = *held;
  const BlockKey ck = MakeChunkKey(key, c, len);
  if (host_->Expire(obj, ck)) return Served{};
  BlockRef b = ReadChecked(host_->tier(t), ck, len);  // null: a bad copy (erased): fetched again
  if (!b) return Served{};
  if (t > 0) host_->Store(obj, ck, space_->OwnerOf(obj, index, /*chunk=*/true), b, 0, t);
  return Served{std::move(b), static_cast<int>(t)};
}

// Chunks [missing, c1] fetched now would make three quarters of the block's chunks present.
bool SparseReader::Dense(const BlockKey& key, uint64_t block_len, uint64_t missing,
                         uint64_t c1) const {
  const uint64_t nchunks = (block_len + kSparseChunkBytes - 1) / kSparseChunkBytes;
  uint64_t present = c1 - missing + 1;
  for (uint64_t c = 0; c < nchunks; ++c) {
    if ((c < missing || c > c1) && ChunkHolder(key, block_len, c, 0)) ++present;
  }
  return 4 * present >= 3 * nchunks;
}

Result<std::optional<BlockSlice>> SparseReader::Read(const ObjectRef& obj, uint64_t index,
                                                     uint64_t in_block, uint64_t want,
                                                     const CancelToken* token) {
  // (Spelled out: a bare nullopt would convert to an OK Status, not to an empty optional.)
  const std::optional<BlockSlice> kWholeBlock;
  const BlockKey key = space_->KeyFor(obj, index);
  if (host_->Holds(key) || fetcher_->InFlight(key) || shared_->Holds(key)) return kWholeBlock;
  const uint64_t cb = kSparseChunkBytes;
  const uint64_t block_len = space_->ExpectedLength(obj, index);
  const uint64_t end = in_block + want;
  const uint64_t c0 = in_block / cb, c1 = (end - 1) / cb;
  std::vector<BlockRef> have;  // the entries of chunks c0, c0 + 1, ... before the first missing
  int tier = 0;
  uint64_t missing = c1 + 1;
  for (uint64_t c = c0; c <= c1; ++c) {
    Served e = FindChunk(obj, index, key, block_len, c, std::min(end, (c + 1) * cb) - c * cb);
    if (!e.block) {
      missing = c;
      break;
    }
    tier = std::max(tier, e.tier);
    have.push_back(std::move(e.block));
  }
  if (missing > c1) {
    ++counters_->sparse_hits;
    return Assemble(have, nullptr, 0, in_block, want, tier);
  }
  if (Dense(key, block_len, missing, c1)) {
    ++counters_->sparse_dense;
    return kWholeBlock;
  }
  const uint64_t fetch_begin = missing * cb;
  const uint64_t fetch_end = std::min(block_len, (end + kPage - 1) / kPage * kPage);
  TIERFS_ASSIGN_OR_RETURN(BlockRef fetched,
                          fetcher_->FetchRange(obj, index, fetch_begin, fetch_end, token));
  return Assemble(have, fetched, fetch_begin, in_block, want, kOriginTier);
}

}  // namespace tierfs::tiercache_internal
