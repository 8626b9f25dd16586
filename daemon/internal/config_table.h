// daemon/internal/config_table — the table of every config file key: one row per key holds its
// table and name, type, where it goes in DaemonOptions (setter) and how it reads back (getter),
// its range, one line of documentation, the flag of `tierfs mount` that sets it, and whether it
// is secret. Parsing (ApplyConfigText), the range checks, `tierfs config check`, ConfigKeys() and
// `tierfs config reference` (docs/config-reference.md) are all driven by it; defaults are read
// from a default-constructed DaemonOptions.
//
// Thread-safety: the table is built once (thread-safe static initialization) and constant after.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "daemon/config.h"

namespace tierfs::config {

enum class Kind { kString, kBool, kInt, kSize, kDuration };

// A key's value after its TOML node was converted for its Kind (only the Kind's field is set).
struct Value {
  std::string_view what;  // the key or flag the value came from, for messages
  std::string str;
  bool b = false;
  int64_t i = 0;
  uint64_t size = 0;
  std::chrono::nanoseconds duration{0};
};

struct ConfigKey {
  std::string_view table;  // "cache"
  std::string_view name;   // "l1_size"
  Kind kind = Kind::kString;
  std::string_view doc;  // one line
  // The flag of `tierfs mount` setting this key ("--l1-size"), and another spelling of it; empty
  // when the key has no flag.
  std::string_view flag;
  std::string_view flag_alias;
  // Where the flag's text is in MountFlags (a flag with a value), or its presence (a flag
  // without one, for a boolean key); both null for a key without a flag.
  std::optional<std::string> MountFlags::*flag_text = nullptr;
  bool MountFlags::*flag_on = nullptr;
  // Ranges, checked by CheckRange before `set` runs. kInt: [min, max]. kSize: at most max_size,
  // and above 0 with `positive`. kDuration: at most max_duration. kString: `non_empty`.
  int64_t min = 0;
  int64_t max = 0;
  bool zero_disables = false;  // kInt: 0 turns the feature off (said in messages)
  uint64_t max_size = UINT64_MAX;
  bool positive = false;
  std::chrono::nanoseconds max_duration = std::chrono::nanoseconds::max();
  bool non_empty = false;
  // What an unset value (an empty optional, or an empty string where `unset` is given) means,
  // shown as "(unset: ...)".
  std::string_view unset;
  // Environment variables that fill the key for a mount when neither the file nor a flag set it,
  // first match wins.
  std::vector<const char*> env;
  // A secret value is never shown (config check, the reference); no key holds one today: S3
  // credentials come from the environment or files the config only names.
  bool secret = false;
  // Stores a checked value into the options; InvalidArgument with the reason (the caller names
  // the key and line; a custom setter that names it too uses Value::what, so a flag's message
  // names the flag).
  std::function<Status(const Value&, DaemonOptions*)> set;
  // The value as `config check` prints it: a TOML value ("1GiB" quoted, 16, true); an unset
  // optional gives "" (Show adds the `unset` text).
  std::function<std::string(const DaemonOptions&)> get;
  std::function<bool(const DaemonOptions&)> is_set;  // false: the value is unset
  // kInt keys stored in one integer member: its value (for Validate's range check of values
  // that did not come through the file, e.g. from -o or the code).
  std::function<int64_t(const DaemonOptions&)> int_value;

  std::string FullName() const;
};

// Every key, in the order of the config file's documentation.
const std::vector<ConfigKey>& ConfigTable();
// The row of "table.name", or nullptr.
const ConfigKey* FindConfigKey(std::string_view table, std::string_view name);

// The range check of `key` for a converted value: InvalidArgument with the reason.
Status CheckRange(const ConfigKey& key, const Value& v);

// Every integer key's value in `o` within its range: InvalidArgument "KEY: must be MIN..MAX".
Status CheckIntRanges(const DaemonOptions& o);

// The value of `key` in `o` as `config check` prints it, "(unset: ...)" included.
std::string Show(const ConfigKey& key, const DaemonOptions& o);

// The help of the key's flag: its documentation, the key and its default.
std::string FlagHelp(const ConfigKey& key);

// A string as a TOML basic string, escaped for a terminal.
std::string Quote(std::string_view s);

// A decimal number of at most `max`; InvalidArgument naming `what` otherwise.
Status ParseUint(std::string_view what, std::string_view text, uint64_t max, uint64_t* out);

// A permission mode in octal ("0644", "640"): at most 0777, no setuid/setgid/sticky bits.
// `what` names the key or flag in the message.
Status ParseMode(std::string_view what, std::string_view text, uint32_t* out);

}  // namespace tierfs::config
