// Credentials of the S3 stores from the AWS credential chain (daemon/credential_chain.h).

#include "daemon/credential_chain.h"

#include <fmt/format.h>

#include "base/clock.h"
#include "base/logging.h"
#include "daemon/config.h"

namespace tierfs {

Status AttachCredentialChain(S3Options* s3, const std::string& profile, bool profile_explicit,
                             bool region_set, HttpTransport* transport, std::string_view what,
                             std::string_view hint) {
  if (s3->credentials.anonymous || !s3->credentials.access_key_id.empty()) return Status::OK();
  CredentialChainOptions co;
  co.getenv = RealGetEnv;
  co.profile = profile;
  co.profile_explicit = profile_explicit;
  co.region = region_set ? s3->region : std::string();
  co.transport = transport;
  co.clock = SystemClock();
  co.ca_bundle = s3->ca_bundle;
  auto chain = NewCredentialChain(co);
  if (!chain.ok()) {
    return Status::InvalidArgument(
        fmt::format("no credentials for {}: {}; {}", what, chain.status().message(), hint));
  }
  s3->credentials_provider = chain->provider;
  if (!region_set && !chain->profile_region.empty()) {
    s3->region = chain->profile_region;
    s3->discover_region = false;
  }
  Logger(Module::kDaemon)
      .info("{}: credentials from {}{}", what, chain->provider->source(),
            chain->provider->temporary() ? " (temporary, refreshed in the background)" : "");
  return Status::OK();
}

}  // namespace tierfs
