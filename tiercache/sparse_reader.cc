// SparseReader (internal/sparse_reader.h): projected reads from sparse entries.
#include "tiercache/internal/sparse_reader.h"

#include <algorithm>
#include <cstring>

namespace tierfs::tiercache_internal {
namespace {

// Projected reads fetch whole pages (the kernel's unit).
constexpr uint64_t kPage = 4096;

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

// The sparse entry of chunk `c` of block `key` from the fastest host tier holding it (copied
// up into the faster ones), or a null block.
Served SparseReader::FindChunk(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                               uint64_t block_len, uint64_t c) {
  if (!host_->ChunkTier(key, block_len, c)) return Served{};
  if (host_->Expire(obj, MakeChunkKey(key, c, HostTiers::ChunkLength(block_len, c)))) {
    return Served{};
  }
  Served e = host_->ReadChunk(key, block_len, c);  // null: a bad copy (erased): fetched again
  if (e.block && e.tier > 0) {
    host_->Store(obj, MakeChunkKey(key, c, e.block->size()),
                 space_->OwnerOf(obj, index, /*chunk=*/true), e.block, 0,
                 static_cast<size_t>(e.tier));
  }
  return e;
}

// Chunks [missing, c1] fetched now would make three quarters of the block's chunks present.
bool SparseReader::Dense(const BlockKey& key, uint64_t block_len, uint64_t missing,
                         uint64_t c1) const {
  const uint64_t nchunks = HostTiers::NumChunks(block_len);
  uint64_t present = c1 - missing + 1;
  for (uint64_t c = 0; c < nchunks; ++c) {
    if ((c < missing || c > c1) && host_->ChunkTier(key, block_len, c)) ++present;
  }
  return 4 * present >= 3 * nchunks;
}

bool SparseReader::Takes(const ObjectRef& obj, uint64_t index, uint64_t want, uint64_t block_len,
                         ReadHint hint) const {
  if (Eligible(obj, want, block_len, hint)) return true;
  if (!Eligible(obj, 0, block_len, hint) || 2 * want >= block_len) return false;
  const BlockKey key = space_->KeyFor(obj, index);
  if (host_->Holds(key) || fetcher_->InFlight(key)) return false;  // (Read would take the block)
  for (uint64_t c = 0; c < HostTiers::NumChunks(block_len); ++c) {
    if (host_->ChunkTier(key, block_len, c)) return true;
  }
  return false;
}

bool SparseReader::HoldsEntries(const ObjectRef& obj, uint64_t index, uint64_t in_block,
                                uint64_t length) const {
  const uint64_t block_len = space_->ExpectedLength(obj, index);
  if (length == 0 || !Eligible(obj, length, block_len)) return false;
  const BlockKey key = space_->KeyFor(obj, index);
  for (uint64_t c = in_block / kSparseChunkBytes; c * kSparseChunkBytes < in_block + length; ++c) {
    if (!host_->ChunkTier(key, block_len, c)) return false;
  }
  return true;
}

Result<std::optional<BlockSlice>> SparseReader::Read(const ObjectRef& obj, uint64_t index,
                                                     uint64_t in_block, uint64_t want,
                                                     const CancelToken* token) {
  // (Spelled out: a bare nullopt would convert to an OK Status, not to an empty optional.)
  const std::optional<BlockSlice> kWholeBlock;
  const BlockKey key = space_->KeyFor(obj, index);
  if (host_->Holds(key)) return kWholeBlock;
  const uint64_t cb = kSparseChunkBytes;
  const uint64_t block_len = space_->ExpectedLength(obj, index);
  const uint64_t end = in_block + want;
  const uint64_t c0 = in_block / cb, c1 = (end - 1) / cb;
  std::vector<BlockRef> have;  // the entries of chunks c0, c0 + 1, ... before the first missing
  int tier = 0;
  uint64_t missing = c1 + 1;
  for (uint64_t c = c0; c <= c1; ++c) {
    Served e = FindChunk(obj, index, key, block_len, c);
    if (!e.block) {
      missing = c;
      break;
    }
    tier = std::max(tier, e.tier);
    have.push_back(std::move(e.block));
  }
  if (missing > c1) {  // (also while the block is fetched whole: nothing to wait for)
    ++counters_->sparse_hits;
    return Assemble(have, nullptr, 0, in_block, want, tier);
  }
  if (fetcher_->InFlight(key) || shared_->Holds(key)) return kWholeBlock;
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
