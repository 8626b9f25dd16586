// The ListObjectsV2 answer parser of the S3 store (internal to blobclient/; its own header so the
// fuzz target tests/fuzz/list_xml_fuzz.cc can reach it).
//
// Thread-safety: pure function; safe from any thread.
#pragma once

#include <string_view>

#include "base/result.h"
#include "blobclient/blob_store.h"

namespace tierfs::blobclient {

// Parses one ListObjectsV2 XML page. Keys and prefixes are URL-decoded when the answer says
// EncodingType=url, and returned relative to `strip` (the store's prefix); entries outside it,
// or equal to it, are dropped. Corruption (starting with `context`) for unparsable XML, a missing
// ListBucketResult, a <Size> that is not a 64-bit unsigned number, or a truncated page without a
// continuation token.
Result<ListPage> ParseListObjectsV2(std::string_view xml, std::string_view strip,
                                    std::string_view context);

}  // namespace tierfs::blobclient
