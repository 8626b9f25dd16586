// Block storage and block naming (tier.h). The byte layout hashed by MakeBlockKey is part of the
// on-flash and L3 format: see tiercache/FORMAT.md before changing anything here.
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>
// Block checksums hash every byte tierfs stores or serves from L2 and L3: on x86-64 they go
// through libxxhash's runtime dispatch (XXH3_64bits and XXH3_64bits_update become their
// *_dispatch forms, which pick AVX-512, AVX2 or SSE2 by cpuid) instead of the library's
// baseline SSE2 code. The same function, the same values (tests/tiercache/block_test.cc).
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "base/coding.h"
#include "base/memory_budget.h"
#include "tiercache/internal/block_arena.h"
#include "tiercache/tier.h"

namespace tierfs {

void AppendStoreStats(const BlobStoreStats& s, std::vector<std::pair<std::string, uint64_t>>* out) {
  out->emplace_back("retries", s.retries);
  out->emplace_back("hedges", s.hedges_issued);
  out->emplace_back("hedge_wins", s.hedges_won);
  out->emplace_back("concurrency_limit", s.concurrency_limit);
  out->emplace_back("throttled", s.concurrency_decreases);
  out->emplace_back("throttled_answers", s.throttled);
  out->emplace_back("ttfb_p95_us", s.ttfb_p95_us);
  out->emplace_back("parallel_reads", s.parallel_reads);
  out->emplace_back("credential_refreshes", s.credential_refreshes);
  out->emplace_back("credential_refresh_failures", s.credential_refresh_failures);
  out->emplace_back("credential_forced_refreshes", s.credential_forced_refreshes);
}
namespace {

void AppendField(std::string* out, std::string_view field) {
  PutFixed64(out, field.size());
  out->append(field);
}

std::atomic<uint64_t> g_live_bytes{0};

// The process's block arena. Freed storage kept for reuse: 64 MiB for good (a few dozen 1 MiB
// blocks in flight through the fetchers; an L1 at its budget frees one block for each it takes),
// and what was freed in the last 5 s (a burst of frees, such as small files handed to the
// kernel at open while prefetch keeps fetching, is reused by the allocations that follow it).
// Never destroyed: blocks may be freed by other static objects' destructors at exit.
constexpr uint64_t kArenaRetainBytes = 64ULL << 20;
constexpr std::chrono::seconds kArenaDecay{5};
tiercache_internal::BlockArena& Arena() {
  static auto* arena = new tiercache_internal::BlockArena(kArenaRetainBytes, kArenaDecay);
  return *arena;
}

// Charges `bytes` of new block storage to the process's budget; returns what was charged.
size_t ChargeStorage(size_t bytes) {
  MemoryBudget* budget = ProcessMemoryBudget();
  if (budget == nullptr) return 0;
  budget->Charge(MemoryUse::kBlocks, bytes);
  return bytes;
}

}  // namespace

void Block::Free::operator()(std::byte* p) const {
  if (charged != 0) ProcessMemoryBudget()->Release(MemoryUse::kBlocks, charged);
  if (mapped == 0) {
    delete[] p;
    return;
  }
  if (slab != nullptr) {
    Arena().Release({p, mapped, static_cast<tiercache_internal::BlockArena::Slab*>(slab)});
  } else {
    ::munmap(p, mapped);
  }
  g_live_bytes.fetch_sub(mapped, std::memory_order_relaxed);
}

std::shared_ptr<Block> Block::Allocate(size_t capacity) {
  auto b = std::make_shared<Block>();
  // Charged before the storage is taken: room L1 gives back for it is reused by it.
  const size_t class_bytes = tiercache_internal::BlockArena::ClassBytes(capacity);
  const size_t charged =
      ChargeStorage(class_bytes != 0 ? class_bytes : std::max<size_t>(capacity, 1));
  if (capacity >= kMapThreshold) {
    Free owner;
    std::byte* data = nullptr;
    if (const auto piece = Arena().Allocate(capacity); piece.data != nullptr) {
      data = piece.data;
      owner = Free(piece.bytes, piece.slab);
    } else if (void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
               p != MAP_FAILED) {
      // A size the arena does not serve. MAP_POPULATE: the fetcher writes every page at once;
      // one populate is cheaper than a page fault per 4 KiB.
      data = static_cast<std::byte*>(p);
      owner = Free(capacity);
    }
    if (data != nullptr) {
      b->data_ = std::unique_ptr<std::byte[], Free>(data, owner);
      g_live_bytes.fetch_add(owner.mapped, std::memory_order_relaxed);
    }
  }
  if (!b->data_) {
    // No zero-fill (as make_unique_for_overwrite): the fetcher overwrites every byte it
    // publishes. Small blocks, or a failed mmap (the allocation then throws like any other).
    b->data_ =
        std::unique_ptr<std::byte[], Free>(new std::byte[capacity == 0 ? 1 : capacity], Free(0));
  }
  b->data_.get_deleter().charged = charged;
  b->capacity_ = capacity;
  b->size_ = 0;
  return b;
}

std::vector<std::shared_ptr<Block>> Block::AllocateAdjacent(size_t capacity, size_t n) {
  std::vector<std::shared_ptr<Block>> out;
  // Items of a larger class would leave gaps between the blocks.
  if (capacity < kMapThreshold ||
      tiercache_internal::BlockArena::ClassBytes(capacity) != capacity) {
    return out;
  }
  const size_t charged = ChargeStorage(capacity * n);
  const std::vector<tiercache_internal::BlockArena::Piece> pieces =
      Arena().AllocateAdjacent(capacity, n);
  if (charged != 0 && pieces.size() < n) {  // none (the arena had no adjacent storage to give)
    ProcessMemoryBudget()->Release(MemoryUse::kBlocks, capacity * (n - pieces.size()));
  }
  out.reserve(pieces.size());
  for (const auto& piece : pieces) {
    auto b = std::make_shared<Block>();
    Free owner(piece.bytes, piece.slab);
    owner.charged = charged != 0 ? piece.bytes : 0;
    b->data_ = std::unique_ptr<std::byte[], Free>(piece.data, owner);
    g_live_bytes.fetch_add(piece.bytes, std::memory_order_relaxed);
    b->capacity_ = capacity;
    out.push_back(std::move(b));
  }
  return out;
}

FileExtent::~FileExtent() { ::close(fd_); }

Status FileExtent::ReadAt(uint64_t at, std::span<std::byte> out) const {
  if (at > length_ || out.size() > length_ - at) {
    return Status::InvalidArgument("read past the end of a file extent");
  }
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n =
        ::pread(fd_, out.data() + got, out.size() - got, static_cast<off_t>(offset_ + at + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read of a cached block file");
    }
    if (n == 0) return Status::Corruption("cached block file is short");
    got += static_cast<size_t>(n);
  }
  return Status::OK();
}

Result<uint64_t> FileExtent::Checksum() const {
  // In pieces of 128 KiB: a piece is hashed while the CPU cache still holds it, and each thread's
  // buffer stays small. A block-size buffer per thread (64 prefetch threads verify L2 blocks
  // ahead of a reader) was 64 MiB zero-filled and faulted in: 8.6% of the daemon's samples in
  // memset alone in a warm read of a 1 GiB file from L2 on a new daemon.
  static constexpr uint64_t kPiece = 128 * 1024;
  thread_local const std::unique_ptr<std::byte[]> buf =
      std::make_unique_for_overwrite<std::byte[]>(kPiece);
  const std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                              &XXH3_freeState);
  if (state == nullptr || XXH3_64bits_reset(state.get()) != XXH_OK) {
    return Status::Internal("XXH3 state");
  }
  for (uint64_t at = 0; at < length_;) {
    const size_t n = static_cast<size_t>(std::min(kPiece, length_ - at));
    TIERFS_RETURN_IF_ERROR(ReadAt(at, std::span<std::byte>(buf.get(), n)));
    (void)XXH3_64bits_update(state.get(), buf.get(), n);
    at += n;
  }
  return uint64_t{XXH3_64bits_digest(state.get())};
}

bool FileExtent::AllCached() const {
#ifndef __NR_cachestat
#define __NR_cachestat 451  // the same number on every architecture (Linux 6.5+)
#endif
  struct {
    uint64_t off, len;
  } range{offset_, length_};
  struct {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
  } cs{};
  if (length_ == 0 || ::syscall(__NR_cachestat, fd_, &range, &cs, 0) != 0) return false;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = offset_ / page, last = (offset_ + length_ - 1) / page;
  return cs.nr_cache >= last - first + 1;
}

uint64_t Block::MappedBytes() { return g_live_bytes.load(std::memory_order_relaxed); }

Block::PoolStats Block::Pool() {
  const tiercache_internal::BlockArena::Stats s = Arena().stats();
  return PoolStats{s.slab_bytes, s.free_resident_bytes, s.reused, s.fresh};
}

void Block::LimitPool(uint64_t bytes) { Arena().SetRetain(bytes); }

uint64_t Block::Prefault(uint64_t bytes, size_t block_size, size_t run_bytes,
                         std::stop_token stop) {
  Arena().SetReserve(bytes);
  return Arena().Prefill(block_size, run_bytes, std::move(stop));
}

BlockKey MakeBlockKey(std::string_view source, std::string_view key, std::string_view etag,
                      uint64_t block_size, uint64_t block_index) {
  // Every variable-length field is prefixed with its length (u64 LE), so no two distinct
  // tuples serialise to the same bytes ("ab"+"c" vs "a"+"bc").
  std::string buf;
  buf.reserve(48 + source.size() + key.size() + etag.size());
  AppendField(&buf, source);
  AppendField(&buf, key);
  AppendField(&buf, etag);
  PutFixed64(&buf, block_size);
  PutFixed64(&buf, block_index);
  XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);  // big-endian high64 then low64
  BlockKey out;
  static_assert(sizeof(c.digest) == out.size());
  std::memcpy(out.data(), c.digest, out.size());
  return out;
}

std::string BlockVersion(const ObjectInfo& info) {
  if (!info.etag.empty()) return info.etag;
  return " size=" + std::to_string(info.size) + " mtime_ns=" + std::to_string(info.mtime_ns);
}

BlockKey MakeBlockKey(std::string_view source, std::string_view key, const ObjectInfo& info,
                      uint64_t block_size, uint64_t block_index) {
  return MakeBlockKey(source, key, BlockVersion(info), block_size, block_index);
}

ObjectId MakeObjectId(std::string_view source, std::string_view key, const ObjectInfo& info,
                      uint64_t block_size) {
  static constexpr std::string_view kTag = "tierfs-object";
  const std::string version = BlockVersion(info);
  std::string buf;
  buf.reserve(kTag.size() + 32 + source.size() + key.size() + version.size());
  buf.append(kTag);
  AppendField(&buf, source);
  AppendField(&buf, key);
  AppendField(&buf, version);
  PutFixed64(&buf, block_size);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(buf.data(), buf.size()));
  ObjectId out;
  static_assert(sizeof(c.digest) == out.size());
  std::memcpy(out.data(), c.digest, out.size());
  return out;
}

BlockKey MakeChunkKey(const BlockKey& block, uint64_t chunk, uint64_t length) {
  static constexpr std::string_view kTag = "tierfs-chunk";
  std::string buf;
  buf.reserve(kTag.size() + block.size() + 24);
  buf.append(kTag);
  buf.append(reinterpret_cast<const char*>(block.data()), block.size());
  PutFixed64(&buf, kSparseChunkBytes);
  PutFixed64(&buf, chunk);
  PutFixed64(&buf, length);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(buf.data(), buf.size()));
  BlockKey out;
  std::memcpy(out.data(), c.digest, out.size());
  return out;
}

std::string BlockKeyHex(const BlockKey& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(key.size() * 2, '0');
  for (size_t i = 0; i < key.size(); ++i) {
    s[2 * i] = kHex[key[i] >> 4];
    s[2 * i + 1] = kHex[key[i] & 0xf];
  }
  return s;
}

uint64_t BlockChecksum(std::span<const std::byte> data) {
  return XXH3_64bits(data.data(), data.size());
}

}  // namespace tierfs
