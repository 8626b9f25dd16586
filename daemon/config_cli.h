// daemon/config_cli — `tierfs config check FILE` (the effective configuration, and what this
// host can give) and `tierfs config reference` (docs/config-reference.md).
//
// Thread-safety: called once, from main.
#pragma once

#include <string>

namespace tierfs {

// Returns the exit code (daemon/exit_codes.h): 2 for a bad file or sizes this host refuses.
int RunConfigCheck(const std::string& path);

// Prints every config key as a Markdown table.
int RunConfigReference();

}  // namespace tierfs
