// ScatterBuffer (blob_store.h) and the default BlobStore::ReadPinnedScatter.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "blobclient/blob_store.h"

namespace tierfs {

thread_local bool UnhedgedReads::active_ = false;

ScatterBuffer::ScatterBuffer(std::span<std::byte> one) {
  if (!one.empty()) pieces_.push_back(one);
  size_ = one.size();
}

ScatterBuffer::ScatterBuffer(std::vector<std::span<std::byte>> pieces) {
  pieces_.reserve(pieces.size());
  for (std::span<std::byte> p : pieces) {
    if (p.empty()) continue;
    size_ += p.size();
    if (!pieces_.empty() && pieces_.back().data() + pieces_.back().size() == p.data()) {
      pieces_.back() =
          std::span<std::byte>(pieces_.back().data(), pieces_.back().size() + p.size());
      continue;  // adjacent in memory: one piece (one copy per write, one read call)
    }
    pieces_.push_back(p);
  }
}

ScatterBuffer ScatterBuffer::Slice(size_t offset, size_t len) const {
  ScatterBuffer out;
  for (std::span<std::byte> p : pieces_) {
    if (len == 0) break;
    if (offset >= p.size()) {
      offset -= p.size();
      continue;
    }
    const size_t take = std::min(len, p.size() - offset);
    out.pieces_.push_back(p.subspan(offset, take));
    out.size_ += take;
    len -= take;
    offset = 0;
  }
  return out;
}

void ScatterBuffer::CopyIn(size_t offset, std::span<const std::byte> data) const {
  for (std::span<std::byte> p : pieces_) {
    if (data.empty()) break;
    if (offset >= p.size()) {
      offset -= p.size();
      continue;
    }
    const size_t take = std::min(data.size(), p.size() - offset);
    std::memcpy(p.data() + offset, data.data(), take);
    data = data.subspan(take);
    offset = 0;
  }
}

Result<size_t> BlobStore::ReadPinnedScatter(std::string_view key, uint64_t offset,
                                            const ScatterBuffer& out, const ObjectInfo& pinned) {
  if (out.pieces().size() == 1) return ReadPinned(key, offset, out.pieces()[0], pinned);
  auto buf = std::make_unique_for_overwrite<std::byte[]>(out.size());
  TIERFS_ASSIGN_OR_RETURN(
      size_t n, ReadPinned(key, offset, std::span<std::byte>(buf.get(), out.size()), pinned));
  if (n > out.size()) {
    return Status::Internal("store read returned " + std::to_string(n) + " bytes into " +
                            std::to_string(out.size()));
  }
  out.CopyIn(0, std::span<const std::byte>(buf.get(), n));
  return n;
}

}  // namespace tierfs
