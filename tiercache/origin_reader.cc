// OriginReader (internal/origin_reader.h): reads of the pinned version of an object from the
// origin, checked and counted.
#include "tiercache/internal/origin_reader.h"

#include <algorithm>

#include "base/logging.h"

namespace tierfs::tiercache_internal {

uint64_t OriginReader::ExpectedLength(const ObjectRef& obj, uint64_t index) const {
  const uint64_t start = index * block_size_;
  return std::min<uint64_t>(block_size_, obj.info.size - start);
}

Result<BlockRef> OriginReader::FetchBlock(const ObjectRef& obj, uint64_t index, uint64_t expected) {
  auto block = Block::Allocate(expected);
  TIERFS_RETURN_IF_ERROR(ReadExact(obj, index * block_size_, block->mutable_data().first(expected),
                                   "block " + std::to_string(index)));
  block->set_size(expected);
  return BlockRef(std::move(block));
}

Status OriginReader::ReadExact(const ObjectRef& obj, uint64_t offset, std::span<std::byte> out,
                               const std::string& what) {
  return ReadExact(obj, offset, ScatterBuffer(out), what);
}
Status OriginReader::ReadExact(const ObjectRef& obj, uint64_t offset, const ScatterBuffer& out,
                               const std::string& what) {
  size_t got = 0;
  while (got < out.size()) {
    ++stats_->origin_requests;
    const ScatterBuffer rest = out.Slice(got, out.size() - got);
    Result<size_t> n = origin_->ReadPinnedScatter(obj.key, offset + got, rest, obj.info);
    if (!n.ok()) {
      ++stats_->origin_errors;
      return n.status().WithContext("reading '" + obj.key + "' at " + std::to_string(offset));
    }
    if (*n > rest.size()) return Overrun(obj, *n, rest.size());
    if (*n == 0) break;
    got += *n;
    stats_->origin_bytes += *n;
  }
  if (got != out.size()) {
    ++stats_->origin_errors;
    Logger(Module::kTierCache)
        .warn("origin returned {} bytes for {} of '{}' (expected {}); the object changed", got,
              what, obj.key, out.size());
    return Status::FailedPrecondition("object '" + obj.key + "' is shorter than its size " +
                                      std::to_string(obj.info.size) + "; it changed");
  }
  return Status::OK();
}

Status OriginReader::Overrun(const ObjectRef& obj, size_t n, size_t room) {
  ++stats_->origin_errors;
  return Status::Internal("origin read of '" + obj.key + "' returned " + std::to_string(n) +
                          " bytes into a buffer of " + std::to_string(room));
}

Result<std::vector<BlockRef>> OriginReader::FetchRun(const ObjectRef& obj, uint64_t first,
                                                     uint64_t n) {
  if (n == 1) {
    TIERFS_ASSIGN_OR_RETURN(BlockRef b, FetchBlock(obj, first, ExpectedLength(obj, first)));
    return std::vector<BlockRef>{std::move(b)};
  }
  const uint64_t bs = block_size_;
  const uint64_t last = ExpectedLength(obj, first + n - 1);
  const std::string what = "blocks " + std::to_string(first) + "+" + std::to_string(n);
  // Each block gets storage of its own and the origin's answer is written straight into those
  // pieces in order (ReadPinnedScatter): no buffer for the whole run, no copy. The full blocks
  // come adjacent from the arena when it has them (then the pieces are one span: the GETs write
  // one region), else one by one (in a steady state resident storage freed by others, no fresh
  // page); each block stays independent of the others in L1 either way (one kept block never
  // holds its whole run's memory). A run at the end of the object gives its short last block
  // storage of its own size (L1 charges a block's size).
  const uint64_t full = last < bs ? n - 1 : n;
  std::vector<std::shared_ptr<Block>> blocks = Block::AllocateAdjacent(bs, full);
  blocks.reserve(n);
  while (blocks.size() < full) blocks.push_back(Block::Allocate(bs));
  if (full < n) blocks.push_back(Block::Allocate(last));
  std::vector<std::span<std::byte>> pieces;
  pieces.reserve(n);
  for (uint64_t k = 0; k < n; ++k) {
    pieces.push_back(blocks[k]->mutable_data().first(k + 1 == n ? last : bs));
  }
  TIERFS_RETURN_IF_ERROR(ReadExact(obj, first * bs, ScatterBuffer(std::move(pieces)), what));
  std::vector<BlockRef> out;
  out.reserve(n);
  for (uint64_t k = 0; k < n; ++k) {
    blocks[k]->set_size(k + 1 == n ? last : bs);
    out.push_back(std::move(blocks[k]));
  }
  return out;
}

}  // namespace tierfs::tiercache_internal
