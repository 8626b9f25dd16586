// Hash functor for BlockKey in unordered containers. A BlockKey is already a uniform XXH3-128
// digest, so its first 8 bytes are a good hash as they stand.
//
// Thread-safety: stateless.
#pragma once

#include <cstddef>
#include <cstring>

#include "metastore/meta_store.h"

namespace tierfs::tiercache_internal {

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const {
    size_t h;
    std::memcpy(&h, k.data(), sizeof(h));
    return h;
  }
};

}  // namespace tierfs::tiercache_internal
