// The MetaStore implementations the conformance tests run against.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "metastore/meta_store.h"

namespace tierfs {

enum class Impl { kMem, kLmdb };

inline std::string_view ImplName(Impl impl) { return impl == Impl::kMem ? "Mem" : "Lmdb"; }

inline std::vector<Impl> AllImpls() { return {Impl::kMem, Impl::kLmdb}; }

// Opens a fresh store; `dir` is an empty temp directory the LMDB store may use.
inline Result<std::unique_ptr<MetaStore>> OpenImpl(Impl impl, const std::string& dir) {
  if (impl == Impl::kMem) return NewMemMetaStore();
  MetaStoreOptions options;
  options.path = dir;
  options.map_size = 64ULL << 20;
  return NewLmdbMetaStore(options);
}

}  // namespace tierfs
