// NewMemMetaStore(): a MetaStore held in std::maps, for tests of other modules (conventions C7).
//
// Same observable semantics as the LMDB store (ordering, paging, atomic ReplaceDir, prefix drops,
// nullopt for missing data), minus durability. One mutex guards everything; the callbacks of
// ScanBlocks/ScanValues run on a snapshot taken under the lock and outside it, so a callback may
// call back into the store (as with the LMDB store, whose scans read in short transactions).
#include <atomic>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "metastore/key_rules.h"
#include "metastore/meta_store.h"

namespace tierfs {
namespace {

using metastore_internal::CheckDirKey;
using metastore_internal::CheckEntryKey;
using metastore_internal::CheckValueName;

class MemMetaStore final : public MetaStore {
 public:
  MemMetaStore() = default;

  Result<std::optional<DirRecord>> GetDir(std::string_view dir_key) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    MutexLock l(&mu_);
    auto it = dirs_.find(std::string(dir_key));
    if (it == dirs_.end()) return std::optional<DirRecord>();
    return std::optional<DirRecord>(it->second);
  }

  Result<std::optional<DirEntry>> GetDirEntry(std::string_view dir_key,
                                              std::string_view name) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    MutexLock l(&mu_);
    auto it = entries_.find(EntryKey(dir_key, name));
    if (it == entries_.end()) return std::optional<DirEntry>();
    return std::optional<DirEntry>(it->second);
  }

  Status ListDirEntries(std::string_view dir_key, std::string_view after, size_t max,
                        std::vector<DirEntry>* out) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    out->clear();
    if (dir_key.find('\0') != std::string_view::npos) {
      return Status::InvalidArgument("dir key contains NUL");
    }
    const std::string prefix = EntryKey(dir_key, "");
    MutexLock l(&mu_);
    // upper_bound of prefix+after skips `after` itself; with after == "" it skips nothing
    // because no entry has an empty name.
    for (auto it = entries_.upper_bound(prefix + std::string(after));
         it != entries_.end() && out->size() < max; ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      out->push_back(it->second);
    }
    return Status::OK();
  }

  Status ReplaceDir(std::string_view dir_key, const DirRecord& record,
                    std::span<const DirEntry> entries) override {
    TIERFS_RETURN_IF_ERROR(CheckDirKey(dir_key));
    for (const DirEntry& e : entries) TIERFS_RETURN_IF_ERROR(CheckEntryKey(dir_key, e.name));
    const std::string prefix = EntryKey(dir_key, "");
    MutexLock l(&mu_);
    EraseEntriesWithPrefix(prefix);
    dirs_[std::string(dir_key)] = record;
    for (const DirEntry& e : entries) entries_[prefix + e.name] = e;
    Wrote(1 + entries.size());
    return Status::OK();
  }

  Status PutDirEntry(std::string_view dir_key, const DirEntry& entry) override {
    TIERFS_RETURN_IF_ERROR(CheckEntryKey(dir_key, entry.name));
    MutexLock l(&mu_);
    entries_[EntryKey(dir_key, entry.name)] = entry;
    Wrote(1);
    return Status::OK();
  }

  Status DeleteDirEntry(std::string_view dir_key, std::string_view name) override {
    MutexLock l(&mu_);
    entries_.erase(EntryKey(dir_key, name));
    Wrote(1);
    return Status::OK();
  }

  Status DropDirs(std::string_view key_prefix) override {
    // Dir keys never contain NUL, so such a prefix matches no directory (and must not be allowed
    // to match "dir\0name-prefix" entry keys).
    if (key_prefix.find('\0') != std::string_view::npos) return Status::OK();
    MutexLock l(&mu_);
    uint64_t n = 0;
    // Directory records and entry keys both start with the dir key, so a byte-prefix match on
    // either map finds exactly the directories whose key starts with key_prefix.
    for (auto it = dirs_.lower_bound(std::string(key_prefix));
         it != dirs_.end() && it->first.starts_with(key_prefix);) {
      it = dirs_.erase(it);
      ++n;
    }
    for (auto it = entries_.lower_bound(std::string(key_prefix));
         it != entries_.end() && it->first.starts_with(key_prefix);) {
      it = entries_.erase(it);
      ++n;
    }
    Wrote(n);
    return Status::OK();
  }

  Result<std::optional<BlockRecord>> GetBlock(const BlockKey& key) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    MutexLock l(&mu_);
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return std::optional<BlockRecord>();
    return std::optional<BlockRecord>(it->second);
  }

  Status PutBlocks(std::span<const BlockRecord> records) override {
    MutexLock l(&mu_);
    for (const BlockRecord& r : records) blocks_[r.key] = r;
    Wrote(records.size());
    return Status::OK();
  }

  Status EraseBlocks(std::span<const BlockKey> keys) override {
    MutexLock l(&mu_);
    for (const BlockKey& k : keys) blocks_.erase(k);
    Wrote(keys.size());
    return Status::OK();
  }

  Status ScanBlocks(const std::function<bool(const BlockRecord&)>& fn) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    std::vector<BlockRecord> snapshot;
    {
      MutexLock l(&mu_);
      snapshot.reserve(blocks_.size());
      for (const auto& [k, r] : blocks_) snapshot.push_back(r);
    }
    for (const BlockRecord& r : snapshot) {
      if (!fn(r)) break;
    }
    return Status::OK();
  }

  Result<std::optional<std::string>> GetValue(std::string_view name) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    MutexLock l(&mu_);
    auto it = values_.find(std::string(name));
    if (it == values_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }

  Status PutValue(std::string_view name, std::string_view value) override {
    TIERFS_RETURN_IF_ERROR(CheckValueName(name));
    MutexLock l(&mu_);
    values_[std::string(name)] = std::string(value);
    Wrote(1);
    return Status::OK();
  }

  Status DeleteValue(std::string_view name) override {
    MutexLock l(&mu_);
    values_.erase(std::string(name));
    Wrote(1);
    return Status::OK();
  }

  Status ScanValues(std::string_view prefix,
                    const std::function<bool(std::string_view, std::string_view)>& fn) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    std::vector<std::pair<std::string, std::string>> snapshot;
    {
      MutexLock l(&mu_);
      for (auto it = values_.lower_bound(std::string(prefix));
           it != values_.end() && it->first.starts_with(prefix); ++it) {
        snapshot.emplace_back(it->first, it->second);
      }
    }
    for (const auto& [k, v] : snapshot) {
      if (!fn(k, v)) break;
    }
    return Status::OK();
  }

  Status Sync() override { return Status::OK(); }

  MetaStoreStats Stats() const override {
    MetaStoreStats s;
    s.reads = reads_.load(std::memory_order_relaxed);
    s.writes = writes_.load(std::memory_order_relaxed);
    s.commits = commits_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  static std::string EntryKey(std::string_view dir_key, std::string_view name) {
    std::string k;
    k.reserve(dir_key.size() + 1 + name.size());
    k.append(dir_key);
    k.push_back('\0');
    k.append(name);
    return k;
  }
  void EraseEntriesWithPrefix(const std::string& prefix) REQUIRES(mu_) {
    for (auto it = entries_.lower_bound(prefix);
         it != entries_.end() && it->first.starts_with(prefix);) {
      it = entries_.erase(it);
    }
  }
  void Wrote(uint64_t records) {
    writes_.fetch_add(records, std::memory_order_relaxed);
    commits_.fetch_add(1, std::memory_order_relaxed);
  }

  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> commits_{0};

  mutable Mutex mu_;
  // State below is protected by mu_.
  std::map<std::string, DirRecord> dirs_ GUARDED_BY(mu_);
  // Keyed by dir_key + '\0' + name, the same encoding as the LMDB store (FORMAT.md).
  std::map<std::string, DirEntry> entries_ GUARDED_BY(mu_);
  std::map<BlockKey, BlockRecord> blocks_ GUARDED_BY(mu_);
  std::map<std::string, std::string> values_ GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<MetaStore> NewMemMetaStore() { return std::make_unique<MemMetaStore>(); }

}  // namespace tierfs
