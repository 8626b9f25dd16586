// Fuzz target: the ListObjectsV2 XML parser of the S3 store (blobclient/list_xml.h), which reads
// whatever the origin or a proxy answers to a LIST.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "blobclient/list_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  for (std::string_view strip : {std::string_view(), std::string_view("pre/")}) {
    auto page = tierfs::blobclient::ParseListObjectsV2(xml, strip, "LIST fuzz");
    if (!page.ok()) continue;
    // What the parser promises: relative names, a token whenever the page is truncated.
    for (const auto& e : page->objects) {
      if (e.key.empty()) std::abort();
    }
    for (const auto& p : page->prefixes) {
      if (p.empty()) std::abort();
    }
  }
  return 0;
}
