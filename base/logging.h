// Logging (conventions C20): spdlog, one named logger per module.
//
//   Logger(Module::kTierCache).warn("l2 block {} failed its checksum; refetching", hex);
//
// Rules: log state changes and errors with context (bucket/key/offset/tier/status); never
// credentials; never at info or above per read. Debug/trace are compiled out of release builds
// (SPDLOG_ACTIVE_LEVEL), so use SPDLOG_LOGGER_DEBUG(&Logger(m), ...) for hot-path debug lines.
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace tierfs {

enum class Module { kBase, kBlobClient, kMetaStore, kTierCache, kFuse, kDaemon };

spdlog::logger& Logger(Module m);

struct LogOptions {
  // "trace", "debug", "info", "warn", "error", "off". Default info.
  std::string level = "info";
  // Empty: stderr. "syslog": syslog (ident "tierfs"). Otherwise a file path (appended).
  std::string destination;
};

// Points every module logger at one sink. Call once from daemon/ before threads start; later
// calls replace the sink (after daemonizing, stderr → file/syslog). Returns false and leaves the
// loggers unchanged when the destination cannot be opened (error written to *err).
bool ConfigureLogging(const LogOptions& options, std::string* err);

}  // namespace tierfs
