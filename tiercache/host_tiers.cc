// HostTiers (internal/host_tiers.h): L1 and L2 as one role: lookups with copy-up, inserts under
// admission, promotion, TTL expiry.
#include "tiercache/internal/host_tiers.h"

#include <sys/stat.h>

#include <algorithm>
#include <string>

#include "base/logging.h"

namespace tierfs::tiercache_internal {
namespace {

// The capacity of the tier admission guards (its scan threshold): L2 under L1; 0 if none.
uint64_t AdmittedCapacity(std::span<const std::unique_ptr<Tier>> tiers) {
  return tiers.size() > 1 ? tiers[1]->Stats().capacity.load() : 0;
}

}  // namespace

HostTiers::HostTiers(std::span<const std::unique_ptr<Tier>> tiers,
                     const TieredCacheOptions& options, const BlockSpace* space,
                     EngineCounters* counters, const std::atomic<uint64_t>* bytes_served)
    : tiers_(tiers),
      file_slices_(options.file_slices),
      space_(space),
      counters_(counters),
      bytes_served_(bytes_served),
      admission_(options.admission, AdmittedCapacity(tiers), options.block_size),
      promotion_(options.promote_hits, &counters->promotions) {}

BlockRef HostTiers::ReadFirst(const BlockKey& key, uint64_t expected) {
  if (tiers_.empty()) return nullptr;
  return ReadChecked(tiers_[0].get(), key, expected);
}

Served HostTiers::Lookup(const ObjectRef& obj, uint64_t index, const BlockKey& key,
                         uint64_t expected) {
  if (FirstHolds(key)) {
    if (auto b = ReadFirst(key, expected)) return Served{std::move(b), 0};
  }
  for (size_t t = 1; t < tiers_.size(); ++t) {
    if (auto b = ReadChecked(tiers_[t].get(), key, expected)) {
      Store(obj, key, space_->OwnerOf(obj, index), b, 0, t);
      return Served{std::move(b), static_cast<int>(t)};
    }
  }
  return Served{};
}

BlockRef HostTiers::FromAbove(size_t target, const BlockKey& key, uint64_t expected) {
  for (size_t t = 0; t < target && t < tiers_.size(); ++t) {
    if (!tiers_[t]->Contains(key)) continue;
    if (BlockRef b = ReadChecked(tiers_[t].get(), key, expected)) return b;
  }
  return nullptr;
}

std::optional<size_t> HostTiers::ChunkTier(const BlockKey& block, uint64_t block_len,
                                           uint64_t c) const {
  const BlockKey ck = MakeChunkKey(block, c, ChunkLength(block_len, c));
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (tiers_[t]->Contains(ck)) return t;
  }
  return std::nullopt;
}

Served HostTiers::ReadChunk(const BlockKey& block, uint64_t block_len, uint64_t c) {
  const std::optional<size_t> t = ChunkTier(block, block_len, c);
  if (!t) return Served{};
  const uint64_t len = ChunkLength(block_len, c);
  BlockRef b = ReadChecked(tiers_[*t].get(), MakeChunkKey(block, c, len), len);
  if (!b) return Served{};
  return Served{std::move(b), static_cast<int>(*t)};
}

bool HostTiers::Holds(const BlockKey& key) const {
  for (const auto& t : tiers_) {
    if (t->Contains(key)) return true;
  }
  return false;
}

bool HostTiers::BelowHolds(size_t t, const BlockKey& key) const {
  for (size_t u = t + 1; u < tiers_.size(); ++u) {
    if (tiers_[u]->Contains(key)) return true;
  }
  return false;
}

bool HostTiers::Expire(const ObjectRef& obj, const BlockKey& key) {
  const std::chrono::nanoseconds ttl = space_->TtlOf(obj);
  if (ttl == std::chrono::nanoseconds::max()) return false;
  const int64_t now = space_->clock()->NowUnixNanos();
  bool expired = false;
  for (const auto& t : tiers_) {
    std::optional<int64_t> at = t->StoredAt(key);
    if (at && now - *at > ttl.count()) expired = true;
  }
  if (!expired) return false;
  ++counters_->ttl_expired;
  for (const auto& t : tiers_) t->Erase(key);
  return true;
}

FileExtentRef HostTiers::TryExtent(const ObjectRef& obj, uint64_t index, uint64_t in_block,
                                   uint64_t length, uint64_t expected, int* tier_out,
                                   bool* promote) {
  const BlockKey key = space_->KeyFor(obj, index);
  for (size_t t = 0; t < tiers_.size(); ++t) {
    Tier* tier = tiers_[t].get();
    if (!tier->Contains(key)) continue;
    if (Expire(obj, key)) return nullptr;
    if (t > 0 && promote != nullptr &&
        promotion_.Use(key, in_block, length, bytes_served_->load(std::memory_order_relaxed),
                       tiers_[0]->Stats().capacity.load())) {
      *promote = true;
      return nullptr;
    }
    Result<FileExtentRef> r = tier->OpenExtent(key);
    if (!r.ok()) return nullptr;  // L1 (no files), a miss, a dropped block
    if ((*r)->length() != expected) {
      Logger(Module::kTierCache)
          .warn("{} block {} has {} bytes, expected {}; dropping it", tier->name(),
                BlockKeyHex(key), (*r)->length(), expected);
      tier->Erase(key);
      return nullptr;
    }
    *tier_out = static_cast<int>(t);
    return std::move(r).value();
  }
  return nullptr;
}

BlockRef HostTiers::TryRange(const ObjectRef& obj, uint64_t index, uint64_t in_block,
                             uint64_t length, int* tier_out) {
  const BlockKey key = space_->KeyFor(obj, index);
  for (size_t t = 0; t < tiers_.size(); ++t) {
    Tier* tier = tiers_[t].get();
    if (!tier->Contains(key)) continue;
    if (!tier->SupportsRanges()) return nullptr;  // L1 holds it: take the block from there
    if (Expire(obj, key)) return nullptr;
    Result<BlockRef> r = tier->ReadRange(key, in_block, length);
    if (!r.ok()) return nullptr;  // a block without chunk checksums, a miss, a bad chunk
    *tier_out = static_cast<int>(t);
    return std::move(r).value();
  }
  return nullptr;
}

void HostTiers::WillNeed(const ObjectRef& obj, uint64_t first, uint64_t end) {
  for (size_t t = 1; t < tiers_.size(); ++t) {
    std::vector<BlockKey> keys;
    for (uint64_t i = first; i < end; ++i) {
      const BlockKey key = space_->KeyFor(obj, i);
      if (tiers_[t]->Contains(key) && !FirstHolds(key)) keys.push_back(key);
    }
    if (!keys.empty()) tiers_[t]->WillNeed(keys);
  }
}

void HostTiers::Store(const ObjectRef& obj, const BlockKey& key, const BlockOwner& owner,
                      const BlockRef& block, size_t from, size_t upto) {
  upto = std::min(upto, tiers_.size());
  if (from >= upto) return;
  Placement hint = space_->InsertPlacement(obj);
  hint.owner = owner;
  for (size_t t = from; t < upto; ++t) {
    // Admission guards the host's flash tier (tiercache/admission.h): a scan's blocks go in on
    // probation, taking only free room or other probationary blocks' room.
    Placement h = hint;
    if (Admitted(t)) {
      const AdmitDecision d = admission_.Decide(key, obj.key, obj.info.size, hint);
      if (d == AdmitDecision::kNo) continue;
      h.probation = d == AdmitDecision::kProbation;
    }
    Status st = tiers_[t]->Insert(key, block, h);
    if (!st.ok()) {
      ++counters_->insert_errors;
      SPDLOG_LOGGER_DEBUG(&Logger(Module::kTierCache), "{} insert declined: {}", tiers_[t]->name(),
                          st.ToString());
    }
  }
}

// A small file (one block) that readahead fetched goes to L2 (its file, and the kernel's page
// cache that its buffered write fills) and not to L1: its reader gets it whole from L2 at its
// first open (store at open) or as a file slice, and L1 would give it up then anyway (HandOff).
// In L1 every such guess held memory until it was read (fresh pages first: in a cold loader
// epoch their first touch made the HTTP thread's copy 20% of the daemon's CPU, 6.5% without, and
// the daemon's peak RSS fell from 935 to 282 MiB). Only with L2 hits served from files
// (file_slices), an L1 above L2, the file's block whole, and the file not pinned (L1
// keeps a pinned file's blocks, as HandOff does).
bool HostTiers::SmallFileBelowFirst(const ObjectRef& obj) const {
  return file_slices_ && tiers_.size() > 1 && obj.info.size > 0 &&
         obj.info.size <= space_->block_size() && !space_->InsertPlacement(obj).pinned;
}

uint64_t HostTiers::HandOff(const ObjectRef& obj, uint64_t offset, uint64_t length) {
  const uint64_t size = obj.info.size;
  if (tiers_.size() < 2 || length == 0 || offset >= size) return 0;
  if (space_->PolicyOf(obj).pinned) return 0;
  const uint64_t end = offset + std::min(length, size - offset);
  const uint64_t bs = space_->block_size();
  uint64_t dropped = 0;
  // Only blocks the range covers whole: the kernel holds the rest of a partly covered one only
  // if it was stored another time.
  for (uint64_t i = (offset + bs - 1) / bs; i * bs < end; ++i) {
    if (i * bs + space_->ExpectedLength(obj, i) > end) break;
    const BlockKey key = space_->KeyFor(obj, i);
    if (!tiers_[0]->Contains(key) || !BelowHolds(0, key)) continue;
    tiers_[0]->Erase(key);
    ++dropped;
  }
  counters_->handoffs += dropped;
  return dropped;
}

uint64_t HostTiers::MostCapacity() const {
  uint64_t most = 0;
  for (const auto& t : tiers_) most = std::max(most, t->Stats().capacity.load());
  return most;
}

HostSpaceInfo HostTiers::Space() const {
  HostSpaceInfo h;
  if (tiers_.empty()) return h;
  const Tier& t = *tiers_.back();
  h.tier = std::string(t.name());
  h.capacity_bytes = t.Stats().capacity.load();
  h.used_bytes = std::min(h.capacity_bytes, t.Stats().bytes_used.load());
  return h;
}

}  // namespace tierfs::tiercache_internal
