#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"

namespace tierfs::csi {

// What one CSI volume asks the node for: the tierfs daemon that serves it (source, origin, options
// and whose credentials), parsed and vetted from a NodePublishVolume request. Two volumes with the
// same Key() are served by one daemon. A plain value; not thread-safe.
struct VolumeSpec {
  std::string source;    // s3://BUCKET[/PREFIX] or file:///PATH
  std::string endpoint;  // empty: the daemon's default (AWS for the region)
  std::string region;    // empty: the daemon's default
  // tierfs mount flags from the allow-list, by name without dashes (sorted; value empty for a
  // switch such as no-sign-request).
  std::map<std::string, std::string> options;
  // "node" (the node's own credential chain) or "sha256:HEX" of the secret's keys: identifies
  // the credentials without holding them.
  std::string credentials_id = "node";
  // The environment that hands the secret's keys to the daemon (AWS_ACCESS_KEY_ID, ...); empty
  // for the node's identity. Never persisted or logged.
  std::map<std::string, std::string> credential_env;

  // A stable 32-hex-digit name of (source, endpoint, region, options, credentials_id).
  std::string Key() const;
  // The flags for `tierfs mount` besides the source, mount point, cache and log: --endpoint=...,
  // --region=..., then the options, each one argument "--name=value" (or "--name").
  std::vector<std::string> MountFlags() const;
};

// Builds the spec from a request's volume_context (volumeAttributes), secrets
// (nodePublishSecretRef) and the capability's mount_flags (the PersistentVolume's
// mountOptions).
//   volume_context: "source" (required), "endpoint", "region", "options" (comma-separated
//     NAME[=VALUE] of the allow-list, see AllowedOptions()); keys under "csi.storage.k8s.io/"
//     (pod information) are ignored; any other key is refused.
//   secrets: "access_key_id" + "secret_access_key" (+ "session_token"); nothing else.
//   mount_flags: NAME[=VALUE] of the allow-list, like "options".
// Returns InvalidArgument naming the attribute, option or secret key at fault (never a secret's
// value).
Result<VolumeSpec> ParseVolume(const std::map<std::string, std::string>& volume_context,
                               const std::map<std::string, std::string>& secrets,
                               const std::vector<std::string>& mount_flags);

// The option names a volume may set, comma-separated (for messages and docs).
std::string AllowedOptions();

// SHA-256 of `data` as lower-case hex.
std::string Sha256Hex(std::string_view data);

}  // namespace tierfs::csi
