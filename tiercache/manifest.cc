// Dataset manifests (manifest.h): the file format (tiercache/FORMAT.md, "Dataset manifests"),
// building one from a listing, and diffing two.
//
// Layout: a fixed header (magic, version, flags, entry count, creation time, payload sizes,
// source URI), one zstd frame holding the entries, and an XXH3-128 of every byte before it. The
// entries are front-coded (each key stores only what differs from the previous one), sizes are
// varints, the usual ETags (32 hex digits of an MD5, optionally "-N" for a multipart upload) are
// stored as 16 raw bytes, and mtimes as zigzag varint deltas: 10,000 typical entries take about
// 20 bytes each before compression.
#include "tiercache/manifest.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/coding.h"

namespace tierfs {
namespace {

constexpr size_t kHeaderFixed = 52;  // bytes before the source URI
constexpr size_t kChecksumBytes = 16;
constexpr int kZstdLevel = 3;

enum EtagKind : uint8_t {
  kEtagString = 0,     // varint length + bytes
  kEtagMd5 = 1,        // 16 bytes: the ETag is their 32 lowercase hex digits
  kEtagMultipart = 2,  // 16 bytes + varint N: the ETag is the hex digits, '-', N in decimal
};

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1)); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is kept as a string: the ETag must come back byte for byte
}
bool ParseHex16(std::string_view hex, uint8_t out[16]) {
  if (hex.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}
void AppendHex(std::string* out, const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out->push_back(kDigits[bytes[i] >> 4]);
    out->push_back(kDigits[bytes[i] & 15]);
  }
}

void PutEtag(std::string* out, std::string_view etag) {
  uint8_t md5[16];
  if (ParseHex16(etag, md5)) {
    out->push_back(static_cast<char>(kEtagMd5));
    out->append(reinterpret_cast<const char*>(md5), 16);
    return;
  }
  if (etag.size() > 33 && etag[32] == '-' && ParseHex16(etag.substr(0, 32), md5)) {
    std::string_view n = etag.substr(33);
    // Canonical decimal only (no leading zero, at most 9 digits), so it comes back identical.
    if (n.size() <= 9 && n[0] != '0' &&
        std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      out->push_back(static_cast<char>(kEtagMultipart));
      out->append(reinterpret_cast<const char*>(md5), 16);
      PutVarint(out, std::stoull(std::string(n)));
      return;
    }
  }
  out->push_back(static_cast<char>(kEtagString));
  PutVarint(out, etag.size());
  out->append(etag);
}

// Reads the payload front to back; every getter fails (returns false) past the end.
class PayloadReader {
 public:
  explicit PayloadReader(std::string_view data) : data_(data) {}
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      if (shift == 63 && b > 1) return false;  // more than 64 bits
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (data_.size() - pos_ < n) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool Byte(uint8_t* b) {
    if (pos_ >= data_.size()) return false;
    *b = static_cast<uint8_t>(data_[pos_++]);
    return true;
  }
  bool done() const { return pos_ == data_.size(); }
  size_t pos() const { return pos_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

std::string ChecksumHex(const char* data, size_t n, char canonical_out[kChecksumBytes]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, n));
  std::memcpy(canonical_out, c.digest, kChecksumBytes);
  std::string hex;
  AppendHex(&hex, c.digest, kChecksumBytes);
  return hex;
}

}  // namespace

Result<std::string> EncodeManifest(Manifest* m) {
  if (m->source.size() > kMaxManifestSource)
    return Status::InvalidArgument("manifest: source URI longer than 4096 bytes");
  if (m->entries.size() > kMaxManifestEntries)
    return Status::InvalidArgument("manifest: too many entries");
  std::string raw;
  raw.reserve(m->entries.size() * 32);
  std::string_view prev_key;
  int64_t prev_mtime = 0;
  for (size_t i = 0; i < m->entries.size(); ++i) {
    const ManifestEntry& e = m->entries[i];
    if (e.key.empty() || e.key.size() > kMaxManifestKey)
      return Status::InvalidArgument(fmt::format("manifest: bad key length {}", e.key.size()));
    if (e.info.etag.size() > kMaxManifestEtag)
      return Status::InvalidArgument(fmt::format("manifest: ETag of '{}' too long", e.key));
    if (i > 0 && !(prev_key < std::string_view(e.key))) {
      return Status::InvalidArgument(
          fmt::format("manifest: keys out of order or repeated at '{}'", e.key));
    }
    size_t shared = 0;
    const size_t limit = std::min(prev_key.size(), e.key.size());
    while (shared < limit && prev_key[shared] == e.key[shared]) ++shared;
    PutVarint(&raw, shared);
    PutVarint(&raw, e.key.size() - shared);
    raw.append(e.key, shared);
    PutVarint(&raw, e.info.size);
    PutEtag(&raw, e.info.etag);
    // Wrapping arithmetic: any two int64 mtimes give a delta the reader undoes exactly.
    PutVarint(&raw, ZigZag(static_cast<int64_t>(static_cast<uint64_t>(e.info.mtime_ns) -
                                                static_cast<uint64_t>(prev_mtime))));
    prev_key = e.key;
    prev_mtime = e.info.mtime_ns;
  }
  std::string out;
  const size_t bound = ZSTD_compressBound(raw.size());
  out.reserve(kHeaderFixed + m->source.size() + bound + kChecksumBytes);
  out.append(kManifestMagic);
  PutFixed32(&out, kManifestVersion);
  PutFixed32(&out, 0);  // flags
  PutFixed64(&out, m->entries.size());
  PutFixed64(&out, static_cast<uint64_t>(m->created_unix_ns));
  PutFixed64(&out, raw.size());
  const size_t zsize_at = out.size();
  PutFixed64(&out, 0);  // compressed size, filled in below
  PutFixed32(&out, static_cast<uint32_t>(m->source.size()));
  out.append(m->source);
  const size_t payload_at = out.size();
  out.resize(payload_at + bound);
  const size_t z =
      ZSTD_compress(out.data() + payload_at, bound, raw.data(), raw.size(), kZstdLevel);
  if (ZSTD_isError(z))
    return Status::Internal(fmt::format("manifest: zstd: {}", ZSTD_getErrorName(z)));
  out.resize(payload_at + z);
  std::string zs;
  PutFixed64(&zs, z);
  out.replace(zsize_at, 8, zs);
  char canonical[kChecksumBytes];
  m->checksum = ChecksumHex(out.data(), out.size(), canonical);
  out.append(canonical, kChecksumBytes);
  return out;
}

namespace {

// One entry of a manifest's payload into *e: its key after `*key` (the previous entry's; none
// when `first`) and its mtime after `*mtime`, both advanced. Returns what is wrong with it, or
// an empty string; the reader then stands where the problem is.
std::string DecodeEntry(PayloadReader* reader, bool first, std::string* key, int64_t* mtime,
                        ManifestEntry* e) {
  PayloadReader& r = *reader;
  uint64_t shared, suffix_len, size, delta;
  std::string_view suffix;
  if (!r.Varint(&shared) || !r.Varint(&suffix_len)) return "truncated";
  if (shared > key->size() || suffix_len > kMaxManifestKey ||
      shared + suffix_len > kMaxManifestKey || shared + suffix_len == 0)
    return "bad key length";
  if (!r.Bytes(suffix_len, &suffix)) return "truncated key";
  e->key.reserve(shared + suffix_len);
  e->key.assign(*key, 0, shared);
  e->key.append(suffix);
  if (!first && !(*key < e->key)) return "keys out of order";
  *key = e->key;
  uint8_t kind;
  if (!r.Varint(&size) || !r.Byte(&kind)) return "truncated";
  e->info.size = size;
  std::string_view raw_etag;
  switch (kind) {
    case kEtagString: {
      uint64_t len;
      if (!r.Varint(&len) || len > kMaxManifestEtag || !r.Bytes(len, &raw_etag)) return "bad ETag";
      e->info.etag.assign(raw_etag);
      break;
    }
    case kEtagMd5:
    case kEtagMultipart: {
      if (!r.Bytes(16, &raw_etag)) return "truncated ETag";
      AppendHex(&e->info.etag, reinterpret_cast<const uint8_t*>(raw_etag.data()), 16);
      if (kind == kEtagMultipart) {
        uint64_t parts;
        if (!r.Varint(&parts) || parts == 0 || parts > 999'999'999) return "bad ETag";
        e->info.etag += '-';
        e->info.etag += std::to_string(parts);
      }
      break;
    }
    default:
      return fmt::format("unknown ETag kind {}", kind);
  }
  if (!r.Varint(&delta)) return "truncated mtime";
  *mtime =
      static_cast<int64_t>(static_cast<uint64_t>(*mtime) + static_cast<uint64_t>(UnZigZag(delta)));
  e->info.mtime_ns = *mtime;
  return {};
}

}  // namespace

Result<Manifest> DecodeManifest(std::string_view bytes, std::string_view name) {
  auto corrupt = [&](std::string_view why) {
    return Status::Corruption(fmt::format("manifest {}: {}", name, why));
  };
  if (bytes.size() < kManifestMagic.size() || bytes.substr(0, 8) != kManifestMagic)
    return corrupt("not a tierfs manifest (wrong magic)");
  if (bytes.size() < kHeaderFixed + kChecksumBytes) return corrupt("truncated header");
  const char* p = bytes.data();
  const uint32_t version = DecodeFixed32(p + 8);
  if (version != kManifestVersion) {
    return Status::NotSupported(
        fmt::format("manifest {}: format version {}; this tierfs reads version {}", name, version,
                    kManifestVersion));
  }
  if (DecodeFixed32(p + 12) != 0) return corrupt("unknown flags");
  Manifest m;
  const uint64_t count = DecodeFixed64(p + 16);
  m.created_unix_ns = static_cast<int64_t>(DecodeFixed64(p + 24));
  const uint64_t raw_size = DecodeFixed64(p + 32);
  const uint64_t z_size = DecodeFixed64(p + 40);
  const uint32_t source_len = DecodeFixed32(p + 48);
  if (source_len > kMaxManifestSource) return corrupt("source URI too long");
  if (count > kMaxManifestEntries || raw_size > kMaxManifestPayload)
    return corrupt("entry count or payload size out of bounds");
  const uint64_t expect = kHeaderFixed + source_len + z_size + kChecksumBytes;
  if (z_size > bytes.size() || bytes.size() != expect) {
    return corrupt(bytes.size() < expect ? "truncated" : "trailing bytes after the checksum");
  }
  char canonical[kChecksumBytes];
  m.checksum = ChecksumHex(p, bytes.size() - kChecksumBytes, canonical);
  if (std::memcmp(canonical, p + bytes.size() - kChecksumBytes, kChecksumBytes) != 0)
    return corrupt("checksum mismatch (the file is damaged)");
  m.source.assign(p + kHeaderFixed, source_len);
  const char* z = p + kHeaderFixed + source_len;
  const unsigned long long frame = ZSTD_getFrameContentSize(z, z_size);
  if (frame != raw_size) return corrupt("payload size does not match its header");
  std::string raw(raw_size, '\0');
  const size_t n = ZSTD_decompress(raw.data(), raw.size(), z, z_size);
  if (ZSTD_isError(n) || n != raw_size)
    return corrupt(fmt::format("payload does not decompress ({})",
                               ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short"));
  // Each entry takes at least 5 bytes: no reservation beyond what the payload can hold.
  if (count > raw_size / 5 + 1) return corrupt("entry count larger than the payload can hold");
  m.entries.reserve(count);
  PayloadReader r(raw);
  std::string key;
  int64_t mtime = 0;
  for (uint64_t i = 0; i < count; ++i) {
    ManifestEntry e;
    if (const std::string why = DecodeEntry(&r, i == 0, &key, &mtime, &e); !why.empty()) {
      return corrupt(fmt::format("entry {} (payload byte {}): {}", i, r.pos(), why));
    }
    m.entries.push_back(std::move(e));
  }
  if (!r.done()) return corrupt("bytes after the last entry");
  return m;
}

Result<Manifest> ReadManifestFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = fmt::format("cannot open manifest {}: {}", path, std::strerror(err));
    return err == ENOENT ? Status::NotFound(msg) : Status::IOError(msg);
  }
  std::string bytes;
  char buf[1 << 16];
  Status st;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = Status::IOError(fmt::format("reading manifest {}: {}", path, std::strerror(errno)));
      break;
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
    if (bytes.size() > kMaxManifestPayload) {
      st = Status::Corruption(fmt::format("manifest {}: larger than 64 GiB", path));
      break;
    }
  }
  ::close(fd);
  if (!st.ok()) return st;
  return DecodeManifest(bytes, path);
}

Status WriteManifestFile(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::IOError(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::IOError(fmt::format("writing {}: {}", tmp, std::strerror(err)));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IOError(fmt::format("writing {}: {}", tmp, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IOError(fmt::format("renaming {} to {}: {}", tmp, path, std::strerror(err)));
  }
  return Status::OK();
}

Result<Manifest> BuildManifest(BlobStore* store, std::string source, Clock* clock,
                               const std::function<void(uint64_t)>& progress) {
  Manifest m;
  m.source = std::move(source);
  m.created_unix_ns = clock->NowUnixNanos();
  bool sorted = true;
  TIERFS_RETURN_IF_ERROR(ForEachListPage(store, "", "", 1000, [&](ListPage& page) -> Status {
    for (ListEntry& e : page.objects) {
      if (e.key.empty()) continue;  // the prefix's own folder marker ("prefix/"): the root
      if (!m.entries.empty() && !(m.entries.back().key < e.key)) sorted = false;
      m.entries.push_back(ManifestEntry{std::move(e.key), std::move(e.info)});
    }
    if (progress) progress(m.entries.size());
    return Status::OK();
  }));
  if (!sorted) {
    // Listings come in byte order; a store that breaks it (or repeats a key across pages) is
    // tolerated: sorted, and the last answer for a key wins.
    std::stable_sort(m.entries.begin(), m.entries.end(),
                     [](const ManifestEntry& a, const ManifestEntry& b) { return a.key < b.key; });
    std::vector<ManifestEntry> unique;
    unique.reserve(m.entries.size());
    for (ManifestEntry& e : m.entries) {
      if (!unique.empty() && unique.back().key == e.key) {
        unique.back() = std::move(e);
      } else {
        unique.push_back(std::move(e));
      }
    }
    m.entries = std::move(unique);
  }
  return m;
}

ManifestDiff DiffManifests(const Manifest& a, const Manifest& b) {
  ManifestDiff d;
  size_t i = 0, j = 0;
  while (i < a.entries.size() || j < b.entries.size()) {
    if (j == b.entries.size() || (i < a.entries.size() && a.entries[i].key < b.entries[j].key)) {
      d.removed.push_back(a.entries[i++]);
    } else if (i == a.entries.size() || b.entries[j].key < a.entries[i].key) {
      d.added.push_back(b.entries[j++]);
    } else {
      const ManifestEntry& x = a.entries[i++];
      const ManifestEntry& y = b.entries[j++];
      if (x.info.size != y.info.size || x.info.etag != y.info.etag) d.changed.push_back({x, y});
    }
  }
  return d;
}

}  // namespace tierfs
