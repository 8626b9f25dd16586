// The ListObjectsV2 answer parser (blobclient/list_xml.h) on its own: what an origin or a proxy
// may answer, including values that do not fit.
#include "blobclient/list_xml.h"

#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace tierfs::blobclient {
namespace {

TEST(ListXmlTest, ParsesAPage) {
  auto page = ParseListObjectsV2(
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>tok</NextContinuationToken>"
      "<Contents><Key>pre/a%20b%2Bc</Key><Size>18446744073709551615</Size>"
      "<ETag>&quot;e1&quot;</ETag><LastModified>2009-10-12T17:50:30.250Z</LastModified></Contents>"
      "<Contents><Key>other/x</Key><Size>1</Size></Contents>"
      "<CommonPrefixes><Prefix>pre/d%2F/</Prefix></CommonPrefixes></ListBucketResult>",
      "pre/", "LIST t");
  ASSERT_OK(page);
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "a b+c");
  EXPECT_EQ(page->objects[0].info.size, UINT64_MAX);
  EXPECT_EQ(page->objects[0].info.etag, "e1");
  EXPECT_EQ(page->objects[0].info.mtime_ns, 1255369830250000000LL);
  ASSERT_EQ(page->prefixes.size(), 1u);
  EXPECT_EQ(page->prefixes[0], "d//");
  EXPECT_EQ(page->next_token, "tok");
}

TEST(ListXmlTest, RefusesWhatDoesNotFit) {
  for (const char* size : {"18446744073709551616", "99999999999999999999", "-1", "", "1e3"}) {
    auto page = ParseListObjectsV2(std::string("<ListBucketResult><Contents><Key>k</Key><Size>") +
                                       size + "</Size></Contents></ListBucketResult>",
                                   "", "LIST t");
    ASSERT_FALSE(page.ok()) << size;
    EXPECT_EQ(page.status().code(), Status::Code::kCorruption);
    EXPECT_NE(page.status().message().find("LIST t"), std::string::npos);
  }
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult><IsTruncated>true</IsTruncated>"
                                  "</ListBucketResult>",
                                  "", "LIST t")
                   .ok());
  EXPECT_FALSE(ParseListObjectsV2("<Error><Code>AccessDenied</Code></Error>", "", "LIST t").ok());
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult>", "", "LIST t").ok());
}

TEST(ListXmlTest, DatesBeyondInt64NanosecondsAreZeroNotWrapped) {
  for (const char* date :
       {"9999-12-31T23:59:59.999Z", "2262-04-12T00:00:00Z", "1600-01-01T00:00:00Z", "not a date"}) {
    auto page = ParseListObjectsV2(
        std::string("<ListBucketResult><Contents><Key>k</Key><Size>1</Size><LastModified>") + date +
            "</LastModified></Contents></ListBucketResult>",
        "", "LIST t");
    ASSERT_OK(page) << date;
    EXPECT_EQ(page->objects[0].info.mtime_ns, 0) << date;
  }
}

}  // namespace
}  // namespace tierfs::blobclient
