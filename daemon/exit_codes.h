// daemon/exit_codes — the exit codes of `tierfs` and its subcommands: 0 ok (also after
// fusermount3 -u, SIGINT, SIGTERM), 1 runtime failure (origin unreachable, mount failed), 2 usage
// or configuration error. (`tierfs manifest diff` follows diff(1): 1 means "different".)
#pragma once

namespace tierfs {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

}  // namespace tierfs
