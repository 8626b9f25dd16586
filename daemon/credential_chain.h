// daemon/credential_chain — S3 stores (the origin, a manifest's bucket, the L3 store) get their
// credentials from the AWS credential chain (blobclient/blob_store.h) unless their requests are
// anonymous or signed with fixed keys. Used by the mount, `tierfs manifest create` and
// `tierfs l3 gc`.
//
// Thread-safety: stateless; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "blobclient/blob_store.h"

namespace tierfs {

// Gives `s3` a provider from the AWS credential chain (blob_store.h) for `profile`, unless its
// requests are anonymous or signed with fixed keys. Without a configured region, the profile's
// `region` from the AWS config file becomes the store's region (and so its endpoint's).
// InvalidArgument listing what was tried when no source yields credentials.
Status AttachCredentialChain(S3Options* s3, const std::string& profile, bool profile_explicit,
                             bool region_set, HttpTransport* transport, std::string_view what,
                             std::string_view hint);

// What to do when the origin's (or a manifest's) credentials cannot be found, and the L3's.
inline constexpr std::string_view kOriginCredentialsHint =
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, use --profile / AWS_PROFILE with "
    "~/.aws/credentials or ~/.aws/config, run with an instance role, IRSA or container "
    "credentials, or use --no-sign-request for a public bucket";
inline constexpr std::string_view kL3CredentialsHint =
    "set cache.l3_access_key_id_env and cache.l3_secret_access_key_env, cache.l3_profile, or "
    "cache.l3_no_sign_request";

}  // namespace tierfs
