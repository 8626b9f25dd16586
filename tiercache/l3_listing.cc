#include "tiercache/internal/l3_listing.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "tiercache/internal/l3_object.h"
#include "tiercache/tier.h"

namespace tierfs::tiercache_internal {
namespace {

constexpr char kMagic[4] = {'T', 'F', 'L', 'S'};
constexpr size_t kMaxNameBytes = 255;
constexpr size_t kMaxEtagBytes = 0xffff;
constexpr std::string_view kListingVersion = "tierfs-listing";

class Writer {
 public:
  explicit Writer(std::vector<std::byte>* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<std::byte>(v)); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Str(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out_->insert(out_->end(), p, p + s.size());
  }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_->push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  }
  std::vector<std::byte>* out_;
};

// Reads little-endian fields; any read past the end sets failed() and returns zeros.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint64_t Le(size_t n) {
    if (!Need(n)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  std::string_view Str(size_t n) {
    if (!Need(n)) return {};
    std::string_view s(reinterpret_cast<const char*>(in_.data()) + pos_, n);
    pos_ += n;
    return s;
  }
  std::span<const std::byte> Rest() const { return in_.subspan(std::min(pos_, in_.size())); }
  bool failed() const { return failed_; }
  bool done() const { return pos_ == in_.size(); }

 private:
  bool Need(size_t n) {
    if (failed_ || in_.size() - pos_ < n) {
      failed_ = true;
      return false;
    }
    return true;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// The names a directory listing may carry (the Catalog hides the others when it lists).
bool GoodName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxNameBytes && name != "." && name != ".." &&
         std::none_of(name.begin(), name.end(), [](char c) {
           return c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
         });
}

}  // namespace

BlockKey ListingKey(std::string_view source, std::string_view dir) {
  return MakeBlockKey(source, dir, kListingVersion, 0, 0);
}

std::string ListingObjectName(std::string_view source, std::string_view dir) {
  return std::string(kListingsDir) + BlockKeyHex(ListingKey(source, dir));
}

Status EncodeL3Listing(std::string_view source, std::string_view dir, const SharedListing& listing,
                       uint64_t stored_ns, std::span<const std::byte> mac_key,
                       std::vector<std::byte>* out) {
  std::vector<std::byte> raw;
  Writer w(&raw);
  for (const DirEntry& e : listing.entries) {
    if (e.name.size() > kMaxNameBytes || e.etag.size() > kMaxEtagBytes) {
      return Status::InvalidArgument("entry '" + e.name.substr(0, 64) + "' is too long to share");
    }
    w.U8(static_cast<uint8_t>(e.type));
    w.U16(static_cast<uint16_t>(e.name.size()));
    w.Str(e.name);
    w.U64(e.size);
    w.U64(static_cast<uint64_t>(e.mtime_ns));
    w.U16(static_cast<uint16_t>(e.etag.size()));
    w.Str(e.etag);
    if (raw.size() > kMaxListingRawBytes) {
      return Status::InvalidArgument("listing too large to share");
    }
  }
  std::vector<std::byte> payload;
  Writer p(&payload);
  p.Str({kMagic, 4});
  p.U32(kListingPayloadVersion);
  p.U32(kListingCodecZstd);
  p.U32(0);
  p.U64(static_cast<uint64_t>(listing.listed_at_ns));
  p.U64(listing.entries.size());
  p.U64(raw.size());
  p.U32(static_cast<uint32_t>(source.size()));
  p.Str(source);
  p.U32(static_cast<uint32_t>(dir.size()));
  p.Str(dir);
  const size_t head = payload.size();
  payload.resize(head + ZSTD_compressBound(raw.size()));
  const size_t z = ZSTD_compress(payload.data() + head, payload.size() - head, raw.data(),
                                 raw.size(), /*compressionLevel=*/3);
  if (ZSTD_isError(z)) {
    return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(z));
  }
  payload.resize(head + z);
  if (payload.size() + kL3MaxHeaderBytes > kMaxListingObjectBytes) {
    return Status::InvalidArgument("listing too large to share");
  }
  EncodeL3Object(ListingKey(source, dir), payload, stored_ns, mac_key, out);
  return Status::OK();
}

Result<SharedListing> DecodeL3Listing(std::span<const std::byte> object, std::string_view source,
                                      std::string_view dir, std::span<const std::byte> mac_key,
                                      uint64_t* stored_ns) {
  TIERFS_ASSIGN_OR_RETURN(L3Header h, ParseL3Object(object, mac_key));
  if (h.key != ListingKey(source, dir)) return Status::Corruption("header names another object");
  *stored_ns = h.stored_ns;
  Reader r(object.subspan(h.header_bytes));
  if (r.Str(4) != std::string_view(kMagic, 4)) return Status::Corruption("not a listing");
  const uint64_t version = r.Le(4);
  if (version != kListingPayloadVersion) {
    return Status::Corruption("unknown listing version " + std::to_string(version));
  }
  const uint64_t codec = r.Le(4);
  if (codec != kListingCodecZstd) {
    return Status::Corruption("unknown listing codec " + std::to_string(codec));
  }
  r.Le(4);  // reserved
  SharedListing out;
  out.listed_at_ns = static_cast<int64_t>(r.Le(8));
  const uint64_t count = r.Le(8);
  const uint64_t raw_len = r.Le(8);
  const std::string_view src = r.Str(r.Le(4));
  const std::string_view d = r.Str(r.Le(4));
  if (r.failed()) return Status::Corruption("payload shorter than its header");
  if (src != source || d != dir) return Status::Corruption("listing of another source or path");
  if (raw_len > kMaxListingRawBytes || count > raw_len / 22 + 1) {
    return Status::Corruption("implausible size (" + std::to_string(count) + " entries, " +
                              std::to_string(raw_len) + " bytes)");
  }
  const std::span<const std::byte> z = r.Rest();
  const unsigned long long frame = ZSTD_getFrameContentSize(z.data(), z.size());
  if (frame != raw_len) return Status::Corruption("compressed size does not match");
  std::vector<std::byte> raw(raw_len);
  const size_t n = ZSTD_decompress(raw.data(), raw.size(), z.data(), z.size());
  if (ZSTD_isError(n) || n != raw_len) return Status::Corruption("cannot decompress");
  Reader e(raw);
  out.entries.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    DirEntry de;
    const uint64_t type = e.Le(1);
    de.name = std::string(e.Str(e.Le(2)));
    de.size = e.Le(8);
    de.mtime_ns = static_cast<int64_t>(e.Le(8));
    de.etag = std::string(e.Str(e.Le(2)));
    if (e.failed()) return Status::Corruption("entries shorter than their count");
    if (type == static_cast<uint64_t>(EntryType::kFile)) {
      de.type = EntryType::kFile;
    } else if (type == static_cast<uint64_t>(EntryType::kDir) && de.size == 0 && de.mtime_ns == 0 &&
               de.etag.empty()) {
      de.type = EntryType::kDir;
    } else {
      return Status::Corruption("bad entry type");
    }
    if (!GoodName(de.name)) return Status::Corruption("bad entry name");
    if (!out.entries.empty() && out.entries.back().name >= de.name) {
      return Status::Corruption("entries not in order");
    }
    out.entries.push_back(std::move(de));
  }
  if (!e.done()) return Status::Corruption("bytes after the last entry");
  return out;
}

}  // namespace tierfs::tiercache_internal
