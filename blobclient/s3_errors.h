// S3 error answers → messages that name the cause and the fix (internal to blobclient/).
//
// An S3 error answer is an HTTP status, an XML body <Error><Code>…</Code><Message>…</Message>
// </Error> (none for HEAD) and sometimes an x-amz-bucket-region header. The Status code of a
// failed answer stays what HttpStatusToStatus gives (403 PermissionDenied, 404 NotFound, ...);
// S3ErrorToStatus only appends an explanation to its message, for the answers a user can act on:
//
//   301/400 with another region   bucket B is in region Y (requests were signed for R); set
//   --region Y 301 without a region          bucket B is not served at endpoint E; set --region /
//   --endpoint-url 403 AccessDenied              the IAM actions the credentials need
//   (s3:ListBucket on the bucket,
//                                 s3:GetObject on the prefix; PUT/DELETE:
//                                 s3:PutObject/DeleteObject)
//   403 InvalidAccessKeyId        the key id and where it came from are not known to the endpoint
//   403 SignatureDoesNotMatch     the secret of key id K (from SOURCE) is wrong
//   400/403 ExpiredToken & co.    the session token expired: refresh the temporary credentials
//   403 RequestTimeTooSkewed      the host clock is off: sync it
//   404 NoSuchBucket              bucket B does not exist (endpoint E)
//
// Never includes a secret or a session token: only the access key id, which AWS itself prints in
// its error messages. Bytes from the answer (Code, Message, the region header) are escaped.
//
// Thread-safe (pure functions).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "blobclient/http_transport.h"

namespace tierfs::blobclient {

// What a store knows that makes an error message useful. Holds no secret.
struct S3ErrorContext {
  std::string bucket;
  std::string prefix;    // "" or ending in '/'
  std::string endpoint;  // URL, credentials redacted
  std::string region;    // the region requests are signed for
  std::string access_key_id;
  std::string credentials_source;  // "environment", "profile p (~/.aws/credentials)", or ""
  bool anonymous = false;
};

// One parsed error answer. Code and message come from the XML body (empty when there is none,
// e.g. for HEAD); bucket_region from the x-amz-bucket-region header (or <Region> in the body).
struct S3ErrorAnswer {
  long http_status = 0;
  std::string code;
  std::string message;
  std::string bucket_region;
};

S3ErrorAnswer ParseS3ErrorAnswer(const HttpResponse& response);
S3ErrorAnswer ParseS3ErrorAnswer(long http_status, std::string_view body,
                                 std::string_view bucket_region_header);

// The cause and the fix in one sentence, or "" when the answer needs no explanation (404
// NoSuchKey, 503 SlowDown, 412, ...). `method` is the request's ("GET", "PUT", ...).
std::string ExplainS3Error(const S3ErrorAnswer& answer, std::string_view method,
                           const S3ErrorContext& context);

// HttpStatusToStatus(response.status, what, body) with ExplainS3Error's sentence appended to the
// message; the Status code is unchanged. `what` is "METHOD key" (the method is its first word).
Status S3ErrorToStatus(const HttpResponse& response, std::string_view what,
                       const S3ErrorContext& context);

// The x-amz-bucket-region of an answer when it names a region other than `signed_region`
// (any status: S3 sends it on 200, 301, 400 and 403 answers to HeadBucket); "" otherwise. Only
// plausible region names are accepted ([a-z0-9-], at most 32 characters).
std::string OtherBucketRegion(const HttpResponse& response, std::string_view signed_region);

}  // namespace tierfs::blobclient
