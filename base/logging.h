// Logging (conventions C20): spdlog, one named logger per module.
//
//   Logger(Module::kTierCache).warn("l2 block {} failed its checksum; refetching", hex);
//
// Rules: log state changes and errors with context (bucket/key/offset/tier/status); never
// credentials; never at info or above per read. Debug lines are compiled into release builds
// (SPDLOG_ACTIVE_LEVEL is DEBUG; only trace is compiled out) so the level can be raised at run
// time (SetLogLevel, the root's user.tierfs.log_level). On the hot path use
// SPDLOG_LOGGER_DEBUG(&Logger(m), ...): with the level above debug it costs one relaxed atomic
// load and a compare, the arguments are not formatted.
//
// Output: one line per message, as text ("2026-11-30T14:03:08.123 info daemon: ...", local
// time) or as one JSON object per line ({"time":"2026-11-30T14:03:08.123456Z","level":"info",
// "thread":1234,"logger":"daemon","message":"..."}, UTC). Control characters of a message are
// escaped (EscapeForLog) in both. A log file is reopened by ReopenLogFile (SIGHUP, logrotate).
//
// Thread-safe; no external synchronization needed.
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

#include "base/status.h"

namespace tierfs {

enum class Module { kBase, kBlobClient, kMetaStore, kTierCache, kFuse, kDaemon };

spdlog::logger& Logger(Module m);

struct LogOptions {
  // "trace", "debug", "info", "warn", "error", "off". Default info.
  std::string level = "info";
  // Empty: stderr. "syslog": syslog (ident "tierfs"). Otherwise a file path (appended).
  std::string destination;
  // "text" or "json" (one JSON object per line; syslog always gets the bare message).
  std::string format = "text";
};

// Points every module logger at one sink. Call once from daemon/ before threads start; later
// calls replace the sink (after daemonizing, stderr → file/syslog). Returns false and leaves the
// loggers unchanged when the level or format is unknown or the destination cannot be opened
// (error written to *err).
bool ConfigureLogging(const LogOptions& options, std::string* err);

// The level names SetLogLevel and LogOptions::level accept: trace, debug, info, warn (warning),
// error (err), critical, off. False for anything else.
bool ParseLogLevel(std::string_view name, spdlog::level::level_enum* out);
// Sets the level of every module logger now. InvalidArgument naming the value if unknown.
Status SetLogLevel(std::string_view name);
// The current level's name ("info").
std::string CurrentLogLevel();
// The configured destination and format ("stderr", "syslog" or the file path; "text"/"json").
LogOptions CurrentLogOptions();

// Reopens the log file by its path (after logrotate moved it away): later lines go to a new file
// of that name. OK and nothing done for stderr and syslog. On an error the old file stays in use.
Status ReopenLogFile();

// The JSON form of one message, as written with format "json" (without the newline). Pure; for
// tests and the formatter.
std::string FormatJsonLogLine(const spdlog::details::log_msg& msg);

}  // namespace tierfs
