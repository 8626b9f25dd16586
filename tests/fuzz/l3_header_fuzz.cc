// Fuzz target: the L3 object parser (tiercache/internal/l3_object.h): an object as a GET returned
// it, from any bucket, with and without a MAC key; and a round trip of the serializer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tiercache/internal/l3_object.h"

using namespace tierfs::tiercache_internal;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> obj(reinterpret_cast<const std::byte*>(data), size);
  static const std::string kKey(32, 'k');
  const auto key = std::as_bytes(std::span(kKey));
  if (auto h = ParseL3Header(obj); h.ok()) {
    if (h->header_bytes != kL3FixedHeaderBytes && h->header_bytes != kL3MacHeaderBytes) {
      std::abort();
    }
  }
  for (auto k : {std::span<const std::byte>(), key}) {
    auto h = ParseL3Object(obj, k);
    if (h.ok() && h->header_bytes + h->length != size) std::abort();
  }
  // Whatever the bytes, an object made of them parses back to them, and a keyed one does not
  // verify without its key's MAC.
  if (size >= 16) {
    tierfs::BlockKey bk;
    std::memcpy(bk.data(), data, bk.size());
    const auto payload = obj.subspan(16);
    std::vector<std::byte> out;
    EncodeL3Object(bk, payload, 42, key, &out);
    auto h = ParseL3Object(out, key);
    if (!h.ok() || h->key != bk || h->length != payload.size() || h->stored_ns != 42) std::abort();
    if (ParseL3Object(out,
                      std::as_bytes(std::span(std::string_view("another key of 32 bytes!!!!!!!!"))))
            .ok()) {
      std::abort();
    }
    EncodeL3Object(bk, payload, 7, {}, &out);
    if (!ParseL3Object(out, {}).ok() || ParseL3Object(out, key).ok()) std::abort();
  }
  return 0;
}
