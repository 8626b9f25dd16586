// tiercache/internal/block_path — where L2 keeps a block's file under the cache directory
// (tiercache/FORMAT.md): "blocks/<first 2 hex digits>/<32 hex digits of the key>".
//
// Thread-safe: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tiercache/tier.h"

namespace tierfs::tiercache_internal {

inline constexpr std::string_view kBlocksDir = "blocks/";

// The file of `key`, relative to the flash store's root.
std::string BlockPath(const BlockKey& key);

// The key of a BlockPath, or nullopt for any other name (a temp file, another file's).
std::optional<BlockKey> ParseBlockPath(std::string_view path);

}  // namespace tierfs::tiercache_internal
