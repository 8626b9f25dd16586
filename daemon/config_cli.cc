// `tierfs config check` and `tierfs config reference` (daemon/config_cli.h).

#include "daemon/config_cli.h"

#include <cstdio>

#include "daemon/config.h"
#include "daemon/exit_codes.h"
#include "daemon/host_limits.h"
#include "daemon/memory_limit.h"

namespace tierfs {

int RunConfigCheck(const std::string& path) {
  auto text = CheckConfigFile(path, RealGetEnv);
  if (!text.ok()) {
    std::fprintf(stderr, "tierfs config check: %s\n", text.status().message().c_str());
    return kExitUsage;
  }
  std::printf("%s", text->c_str());
  // What this host can give, as a mount here would check it: memory budgets above its memory
  // are errors, an L2 above the cache file system a warning.
  DaemonOptions o;
  if (Status s = ApplyConfigFile(path, &o); !s.ok()) return kExitUsage;  // checked above
  const HostLimits host = ReadHostLimits(o.cache_dir);
  if (Status s = CheckMemorySizes(o, host); !s.ok()) {
    std::fprintf(stderr, "tierfs config check: %s (a mount on this host refuses it)\n",
                 s.message().c_str());
    return kExitUsage;
  }
  Result<std::string> memory = DescribeMemoryLimit(o, host);
  if (!memory.ok()) {
    std::fprintf(stderr, "tierfs config check: %s (a mount on this host refuses it)\n",
                 memory.status().message().c_str());
    return kExitUsage;
  }
  std::printf("%s", memory->c_str());
  if (o.l2.capacity_bytes > 0) {
    if (std::string w = L2SizeWarning(o.l2.capacity_bytes, o.cache_dir, host); !w.empty()) {
      std::fprintf(stderr, "tierfs config check: warning: %s\n", w.c_str());
    }
  }
  return kExitOk;
}

int RunConfigReference() {
  std::printf("%s", ConfigReferenceMarkdown().c_str());
  return kExitOk;
}

}  // namespace tierfs
