// Record layouts of the metadata store: see internal/records.h and metastore/FORMAT.md.
#include "metastore/internal/records.h"

#include <cstring>

#include "base/coding.h"

namespace tierfs::metastore_internal {
namespace {

// Layout version byte leading every record value (FORMAT.md). Bump per record type when its
// layout changes, and keep decoding the old one until a schema upgrade rewrites it.
constexpr uint8_t kDirLayoutV1 = 1;
constexpr uint8_t kEntryLayoutV1 = 1;
constexpr uint8_t kEntryLayoutV2 = 2;  // V1 + owner, group and mode (entries that have them)
constexpr uint8_t kBlockLayoutV1 = 1;
constexpr uint8_t kValueLayoutV1 = 1;
constexpr size_t kDirValueSize = 1 + 8 + 8;
constexpr size_t kEntryValueFixed = 1 + 1 + 8 + 8;                   // + etag bytes
constexpr size_t kEntryValueFixedV2 = kEntryValueFixed + 4 + 4 + 4;  // + etag bytes
constexpr size_t kBlockValueSize = 1 + 4 + 8 + 8 + 8 + 4;            // the fields every record has
constexpr size_t kBlockValueSizeExt = kBlockValueSize + 4 + 8;       // + group, expires_ns
constexpr size_t kBlockValueSizeOwner = kBlockValueSizeExt + 16 + 8 + 1;  // + owner

}  // namespace

std::string EncodeDir(const DirRecord& r) {
  std::string v;
  v.reserve(kDirValueSize);
  v.push_back(static_cast<char>(kDirLayoutV1));
  PutFixed64(&v, static_cast<uint64_t>(r.listed_at_ns));
  PutFixed64(&v, r.entry_count);
  return v;
}
Result<DirRecord> DecodeDir(std::string_view v) {
  if (v.size() < kDirValueSize || static_cast<uint8_t>(v[0]) != kDirLayoutV1) {
    return Status::Corruption("bad dir record (layout version or size)");
  }
  DirRecord r;
  r.listed_at_ns = static_cast<int64_t>(DecodeFixed64(v.data() + 1));
  r.entry_count = DecodeFixed64(v.data() + 9);
  return r;
}

// Entries without an owner are written in layout 1 (what every S3 entry is), entries with one
// in layout 2 (FORMAT.md).
std::string EncodeEntry(const DirEntry& e) {
  std::string v;
  v.reserve(kEntryValueFixedV2 + e.etag.size());
  v.push_back(static_cast<char>(e.owner_known ? kEntryLayoutV2 : kEntryLayoutV1));
  v.push_back(static_cast<char>(e.type));
  PutFixed64(&v, e.size);
  PutFixed64(&v, static_cast<uint64_t>(e.mtime_ns));
  if (e.owner_known) {
    PutFixed32(&v, e.uid);
    PutFixed32(&v, e.gid);
    PutFixed32(&v, e.mode);
  }
  v.append(e.etag);
  return v;
}
Result<DirEntry> DecodeEntry(std::string_view name, std::string_view v) {
  const uint8_t lv = v.empty() ? 0 : static_cast<uint8_t>(v[0]);
  const size_t fixed = lv == kEntryLayoutV2 ? kEntryValueFixedV2 : kEntryValueFixed;
  if ((lv != kEntryLayoutV1 && lv != kEntryLayoutV2) || v.size() < fixed) {
    return Status::Corruption("bad dir entry record (layout version or size)");
  }
  const auto type = static_cast<uint8_t>(v[1]);
  if (type != static_cast<uint8_t>(EntryType::kFile) &&
      type != static_cast<uint8_t>(EntryType::kDir)) {
    return Status::Corruption("bad dir entry type");
  }
  DirEntry e;
  e.name = std::string(name);
  e.type = static_cast<EntryType>(type);
  e.size = DecodeFixed64(v.data() + 2);
  e.mtime_ns = static_cast<int64_t>(DecodeFixed64(v.data() + 10));
  if (lv == kEntryLayoutV2) {
    e.owner_known = true;
    e.uid = DecodeFixed32(v.data() + 18);
    e.gid = DecodeFixed32(v.data() + 22);
    e.mode = DecodeFixed32(v.data() + 26) & 0777;
  }
  e.etag = std::string(v.substr(fixed));
  return e;
}

std::string EncodeBlock(const BlockRecord& r) {
  std::string v;
  v.reserve(kBlockValueSizeOwner);
  v.push_back(static_cast<char>(kBlockLayoutV1));
  PutFixed32(&v, r.length);
  PutFixed64(&v, r.checksum);
  PutFixed64(&v, static_cast<uint64_t>(r.atime_ns));
  PutFixed64(&v, static_cast<uint64_t>(r.stored_ns));
  PutFixed32(&v, r.flags);
  PutFixed32(&v, r.group);
  PutFixed64(&v, static_cast<uint64_t>(r.expires_ns));
  v.append(reinterpret_cast<const char*>(r.owner.object.data()), r.owner.object.size());
  PutFixed64(&v, r.owner.index);
  v.push_back(static_cast<char>(r.owner.chunk ? 1 : 0));
  return v;
}
Result<BlockRecord> DecodeBlock(std::string_view key, std::string_view v) {
  if (key.size() != sizeof(BlockKey) || v.size() < kBlockValueSize ||
      static_cast<uint8_t>(v[0]) != kBlockLayoutV1) {
    return Status::Corruption("bad block record (key size, layout version or size)");
  }
  BlockRecord r;
  std::memcpy(r.key.data(), key.data(), sizeof(BlockKey));
  r.length = DecodeFixed32(v.data() + 1);
  r.checksum = DecodeFixed64(v.data() + 5);
  r.atime_ns = static_cast<int64_t>(DecodeFixed64(v.data() + 13));
  r.stored_ns = static_cast<int64_t>(DecodeFixed64(v.data() + 21));
  r.flags = DecodeFixed32(v.data() + 29);
  if (v.size() >= kBlockValueSizeExt) {  // older records end at 33 bytes: no group, no expiry
    r.group = DecodeFixed32(v.data() + 33);
    r.expires_ns = static_cast<int64_t>(DecodeFixed64(v.data() + 37));
  }
  if (v.size() >= kBlockValueSizeOwner) {  // older records end at 45 bytes: owner unknown
    std::memcpy(r.owner.object.data(), v.data() + 45, r.owner.object.size());
    r.owner.index = DecodeFixed64(v.data() + 61);
    r.owner.chunk = (static_cast<uint8_t>(v[69]) & 1) != 0;
  }
  return r;
}
std::string_view BlockKeyView(const BlockKey& k) {
  return std::string_view(reinterpret_cast<const char*>(k.data()), k.size());
}

std::string EncodeValue(std::string_view value) {
  std::string v;
  v.reserve(1 + value.size());
  v.push_back(static_cast<char>(kValueLayoutV1));
  v.append(value);
  return v;
}
Result<std::string_view> DecodeValue(std::string_view v) {
  if (v.empty() || static_cast<uint8_t>(v[0]) != kValueLayoutV1) {
    return Status::Corruption("bad value record (layout version)");
  }
  return v.substr(1);
}

std::string EntryPrefix(std::string_view dir_key) {
  std::string k;
  k.reserve(dir_key.size() + 1);
  k.append(dir_key);
  k.push_back('\0');
  return k;
}
std::string EntryKey(std::string_view dir_key, std::string_view name) {
  std::string k = EntryPrefix(dir_key);
  k.append(name);
  return k;
}

}  // namespace tierfs::metastore_internal
