// daemon/l3_gc_cli — `tierfs l3 gc`: settings as for a mount (config file, then flags), then
// GcRemoteTier over the L3 store: blocks older than the TTL, then the oldest ones until the tier
// holds at most cache.l3_max_bytes.
//
// Thread-safety: called once, from main.
#pragma once

#include <optional>
#include <string>

#include "daemon/config.h"

namespace tierfs {

// `flags`: the L3 flags given (l3, l3_endpoint, region); `ttl`, `max_bytes`: --l3-ttl and
// --l3-max-bytes as typed. Returns the exit code (daemon/exit_codes.h).
int RunL3Gc(const std::string& config_path, const MountFlags& flags,
            const std::optional<std::string>& ttl, const std::optional<std::string>& max_bytes,
            bool dry_run);

}  // namespace tierfs
