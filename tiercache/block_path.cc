// L2's block file names (internal/block_path.h).
#include "tiercache/internal/block_path.h"

namespace tierfs::tiercache_internal {
namespace {

int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string BlockPath(const BlockKey& key) {
  std::string hex = BlockKeyHex(key);
  std::string p(kBlocksDir);
  p += hex.substr(0, 2);
  p += '/';
  p += hex;
  return p;
}

// "blocks/xx/<32 lower-case hex>", with xx the first two hex digits.
std::optional<BlockKey> ParseBlockPath(std::string_view path) {
  if (!path.starts_with(kBlocksDir)) return std::nullopt;
  path.remove_prefix(kBlocksDir.size());
  if (path.size() != 3 + 32 || path[2] != '/') return std::nullopt;
  std::string_view hex = path.substr(3);
  if (hex.substr(0, 2) != path.substr(0, 2)) return std::nullopt;
  BlockKey key;
  for (size_t i = 0; i < key.size(); ++i) {
    int hi = HexVal(hex[2 * i]), lo = HexVal(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return key;
}

}  // namespace tierfs::tiercache_internal
