// Fuzz target: the shared-listing parser (tiercache/internal/l3_listing.h), which reads objects
// any writer of the L3 bucket may have made. The input is used twice: as a listing payload
// wrapped in valid L3 framing (so the checksum does not stop the fuzzer before the payload
// parser, zstd frame and entry records), and as a whole object, with and without a MAC key.
// Whatever parses must satisfy the format's invariants and survive a round trip.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "tiercache/internal/l3_listing.h"
#include "tiercache/internal/l3_object.h"

using namespace tierfs::tiercache_internal;

namespace {

void CheckInvariants(const tierfs::SharedListing& l) {
  for (size_t i = 0; i < l.entries.size(); ++i) {
    const auto& e = l.entries[i];
    if (e.name.empty() || e.name.size() > 255 || e.name.find('/') != std::string::npos) {
      std::abort();
    }
    if (i > 0 && !(l.entries[i - 1].name < e.name)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  static const std::string kKey(32, 'k');
  const auto key = std::as_bytes(std::span(kKey));
  uint64_t stored = 0;
  for (auto k : {std::span<const std::byte>(), key}) {
    if (auto l = DecodeL3Listing(in, "src", "d", k, &stored); l.ok()) CheckInvariants(*l);
  }
  std::vector<std::byte> obj;
  EncodeL3Object(ListingKey("src", "d"), in, 7, {}, &obj);
  auto l = DecodeL3Listing(obj, "src", "d", {}, &stored);
  if (!l.ok()) return 0;
  CheckInvariants(*l);
  if (stored != 7) std::abort();
  // A parsed listing encodes and parses back to itself, and only for its own source and path.
  std::vector<std::byte> again;
  if (!EncodeL3Listing("src", "d", *l, 9, key, &again).ok()) std::abort();
  auto back = DecodeL3Listing(again, "src", "d", key, &stored);
  if (!back.ok() || back->listed_at_ns != l->listed_at_ns ||
      back->entries.size() != l->entries.size()) {
    std::abort();
  }
  for (size_t i = 0; i < l->entries.size(); ++i) {
    const auto& a = l->entries[i];
    const auto& b = back->entries[i];
    if (a.name != b.name || a.type != b.type || a.size != b.size || a.etag != b.etag ||
        a.mtime_ns != b.mtime_ns) {
      std::abort();
    }
  }
  if (DecodeL3Listing(again, "src", "e", key, &stored).ok()) std::abort();
  return 0;
}
