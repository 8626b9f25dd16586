// ForwardingMetaStore — a MetaStore that forwards every call to an in-memory store
// (NewMemMetaStore) it owns, for tests that change one or two calls: derive, override those, and
// call the base for the default behaviour (leveldb's EnvWrapper).
//
// Thread-safe as far as the overrides are.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "metastore/meta_store.h"

namespace tierfs::testing {

class ForwardingMetaStore : public MetaStore {
 public:
  Result<std::optional<DirRecord>> GetDir(std::string_view k) override { return m_->GetDir(k); }
  Result<std::optional<DirEntry>> GetDirEntry(std::string_view k, std::string_view n) override {
    return m_->GetDirEntry(k, n);
  }
  Status ListDirEntries(std::string_view k, std::string_view after, size_t max,
                        std::vector<DirEntry>* out) override {
    return m_->ListDirEntries(k, after, max, out);
  }
  Status ReplaceDir(std::string_view k, const DirRecord& r, std::span<const DirEntry> e) override {
    return m_->ReplaceDir(k, r, e);
  }
  Status PutDirEntry(std::string_view k, const DirEntry& e) override {
    return m_->PutDirEntry(k, e);
  }
  Status DeleteDirEntry(std::string_view k, std::string_view n) override {
    return m_->DeleteDirEntry(k, n);
  }
  Status DropDirs(std::string_view p) override { return m_->DropDirs(p); }
  Result<std::optional<BlockRecord>> GetBlock(const BlockKey& k) override {
    return m_->GetBlock(k);
  }
  Status PutBlocks(std::span<const BlockRecord> r) override { return m_->PutBlocks(r); }
  Status EraseBlocks(std::span<const BlockKey> k) override { return m_->EraseBlocks(k); }
  Status ScanBlocks(const std::function<bool(const BlockRecord&)>& fn) override {
    return m_->ScanBlocks(fn);
  }
  Result<std::optional<std::string>> GetValue(std::string_view n) override {
    return m_->GetValue(n);
  }
  Status PutValue(std::string_view n, std::string_view v) override { return m_->PutValue(n, v); }
  Status DeleteValue(std::string_view n) override { return m_->DeleteValue(n); }
  Status ScanValues(std::string_view p,
                    const std::function<bool(std::string_view, std::string_view)>& fn) override {
    return m_->ScanValues(p, fn);
  }
  Status Sync() override { return m_->Sync(); }
  MetaStoreStats Stats() const override { return m_->Stats(); }

 private:
  std::unique_ptr<MetaStore> m_ = NewMemMetaStore();
};

}  // namespace tierfs::testing
