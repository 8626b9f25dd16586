#include "blobclient/s3_errors.h"

#include <fmt/format.h>

#include <pugixml.hpp>

#include "base/strings.h"

namespace tierfs::blobclient {
namespace {

// The text between <tag> and </tag> in a body too short or too broken for an XML parser (a cut
// error body); "" when absent.
std::string Between(std::string_view body, std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  size_t b = body.find(open);
  if (b == std::string_view::npos) return {};
  b += open.size();
  size_t e = body.find(close, b);
  if (e == std::string_view::npos || e - b > 1024) return {};
  return std::string(body.substr(b, e - b));
}

bool PlausibleRegion(std::string_view r) {
  if (r.empty() || r.size() > 32) return false;
  for (char c : r) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

std::string WhoseKey(const S3ErrorContext& c) {
  std::string s = "key id " + EscapeForLog(c.access_key_id);
  if (!c.credentials_source.empty()) s += " (from " + c.credentials_source + ")";
  return s;
}

std::string Arn(const S3ErrorContext& c, bool objects) {
  std::string a = "arn:aws:s3:::" + c.bucket;
  if (objects) a += "/" + c.prefix + "*";
  return a;
}

std::string AccessDenied(std::string_view method, const S3ErrorContext& c) {
  if (c.anonymous) {
    return fmt::format(
        "anonymous access (no_sign_request) to bucket {} was refused: the bucket does not allow "
        "public reads; give credentials instead",
        c.bucket);
  }
  std::string needs;
  if (method == "PUT") {
    needs = "s3:PutObject on " + Arn(c, true);
  } else if (method == "DELETE") {
    needs = "s3:DeleteObject on " + Arn(c, true);
  } else {
    needs = "s3:ListBucket on " + Arn(c, false) + " and s3:GetObject on " + Arn(c, true);
  }
  return fmt::format(
      "access denied to {}: the credentials need {} (IAM policy of the user or role, and the "
      "bucket policy; objects encrypted with SSE-KMS also need kms:Decrypt)",
      WhoseKey(c), needs);
}

}  // namespace

S3ErrorAnswer ParseS3ErrorAnswer(long http_status, std::string_view body,
                                 std::string_view bucket_region_header) {
  S3ErrorAnswer a;
  a.http_status = http_status;
  if (!body.empty()) {
    pugi::xml_document doc;
    if (doc.load_buffer(body.data(), body.size())) {
      pugi::xml_node err = doc.child("Error");
      a.code = err.child_value("Code");
      a.message = err.child_value("Message");
      a.bucket_region = err.child_value("Region");
    } else {
      a.code = Between(body, "Code");
      a.message = Between(body, "Message");
      a.bucket_region = Between(body, "Region");
    }
  }
  if (!bucket_region_header.empty()) a.bucket_region = std::string(bucket_region_header);
  if (!PlausibleRegion(a.bucket_region)) a.bucket_region.clear();
  if (a.code.size() > 128) a.code.clear();
  if (a.message.size() > 512) a.message.resize(512);
  return a;
}

S3ErrorAnswer ParseS3ErrorAnswer(const HttpResponse& response) {
  const std::string* region = response.Header("x-amz-bucket-region");
  return ParseS3ErrorAnswer(response.status, response.body,
                            region != nullptr ? std::string_view(*region) : std::string_view());
}

std::string ExplainS3Error(const S3ErrorAnswer& a, std::string_view method,
                           const S3ErrorContext& c) {
  const std::string& code = a.code;
  const long st = a.http_status;
  // Region: a 301 PermanentRedirect, a 400 AuthorizationHeaderMalformed (or any answer) naming
  // another region than the one requests are signed for.
  const bool region_code = st == 301 || code == "PermanentRedirect" ||
                           code == "AuthorizationHeaderMalformed" ||
                           code == "IllegalLocationConstraintException";
  if (!a.bucket_region.empty() && a.bucket_region != c.region &&
      (region_code || st == 400 || st == 403)) {
    return fmt::format(
        "bucket {} is in region {}, but requests were signed for region {}; set --region {} "
        "(or s3.region, AWS_REGION)",
        c.bucket, a.bucket_region, EscapeForLog(c.region), a.bucket_region);
  }
  if (st == 301 || code == "PermanentRedirect") {
    return fmt::format(
        "bucket {} is not served at endpoint {} (region {}) and the answer names no region; set "
        "--region to the bucket's region, or --endpoint-url to its endpoint",
        c.bucket, c.endpoint, EscapeForLog(c.region));
  }
  if (code == "NoSuchBucket") {
    return fmt::format(
        "bucket {} does not exist (endpoint {}); check the bucket name of the source", c.bucket,
        c.endpoint);
  }
  if (code == "ExpiredToken" || code == "TokenRefreshRequired") {
    return fmt::format(
        "the session token of {} has expired; refresh the temporary credentials (a new STS "
        "session, `aws sso login`), or use a source tierfs refreshes itself (instance role, web "
        "identity, container credentials, credential_process)",
        WhoseKey(c));
  }
  if (code == "InvalidToken") {
    return fmt::format(
        "the session token of {} is not valid for endpoint {}; check AWS_SESSION_TOKEN or the "
        "profile's aws_session_token",
        WhoseKey(c), c.endpoint);
  }
  if (code == "InvalidAccessKeyId") {
    return fmt::format(
        "{} is not known to endpoint {}; check the credentials (AWS_ACCESS_KEY_ID, --profile, the "
        "credentials file) and that they belong to this endpoint",
        WhoseKey(c), c.endpoint);
  }
  if (code == "SignatureDoesNotMatch") {
    return fmt::format(
        "the secret access key of {} is wrong (the signature the server computed differs); check "
        "the secret that goes with this key id, or a proxy that rewrites requests",
        WhoseKey(c));
  }
  if (code == "RequestTimeTooSkewed") {
    return "the clock of this host differs from the server's by more than 15 minutes; sync it "
           "(chrony, systemd-timesyncd)";
  }
  if (code == "AccessDenied" || code == "AllAccessDisabled") return AccessDenied(method, c);
  if (st == 403 && code.empty()) {
    // HEAD answers carry no body: the cause is not known.
    return AccessDenied(method, c) + ", or the key id or its secret is wrong";
  }
  if (st == 404 && code.empty() && method == "LIST") {
    return fmt::format("bucket {} may not exist (endpoint {})", c.bucket, c.endpoint);
  }
  return {};
}

Status S3ErrorToStatus(const HttpResponse& response, std::string_view what,
                       const S3ErrorContext& context) {
  Status st = HttpStatusToStatus(response.status, what, response.body);
  if (st.ok()) return st;
  const std::string_view method = what.substr(0, what.find(' '));
  std::string why = ExplainS3Error(ParseS3ErrorAnswer(response), method, context);
  if (why.empty()) return st;
  return st.WithDetail(why);
}

std::string OtherBucketRegion(const HttpResponse& response, std::string_view signed_region) {
  const std::string* r = response.Header("x-amz-bucket-region");
  if (r == nullptr || !PlausibleRegion(*r) || *r == signed_region) return {};
  return *r;
}

}  // namespace tierfs::blobclient
