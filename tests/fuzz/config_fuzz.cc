// Fuzz target: the TOML config file (daemon/config: toml++ and every key's conversion and
// range check), then FinishOptions/Validate on what it accepted.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "daemon/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tierfs::DaemonOptions o;
  o.source = "s3://bucket/prefix";
  o.mountpoint = "/mnt/fuzz";
  if (!tierfs::ApplyConfigText(text, "fuzz.toml", &o).ok()) return 0;
  auto no_env = [](const char*) -> std::optional<std::string> { return std::nullopt; };
  if (tierfs::FinishOptions(&o, no_env).ok()) (void)tierfs::DescribeOptions(o);
  return 0;
}
