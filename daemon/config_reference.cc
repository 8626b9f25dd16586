// `tierfs config reference` (docs/config-reference.md): every key of the table in
// daemon/config_table.cc as Markdown, with its type, default, range, flag and documentation.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/units.h"
#include "daemon/config.h"
#include "daemon/internal/config_table.h"

namespace tierfs {
namespace config {
namespace {

std::string_view TypeName(Kind k) {
  switch (k) {
    case Kind::kString:
      return "string";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kSize:
      return "size";
    case Kind::kDuration:
      return "duration";
  }
  return "?";
}

std::string RangeText(const ConfigKey& k) {
  std::vector<std::string> parts;
  switch (k.kind) {
    case Kind::kInt:
      parts.push_back(
          fmt::format("{}..{}{}", k.min, k.max, k.zero_disables ? " (0 disables it)" : ""));
      break;
    case Kind::kSize:
      if (k.positive) parts.push_back("> 0");
      if (k.max_size != UINT64_MAX) parts.push_back("at most " + FormatSize(k.max_size));
      break;
    case Kind::kDuration:
      if (k.max_duration != std::chrono::nanoseconds::max()) {
        parts.push_back("at most " + FormatDuration(k.max_duration));
      }
      break;
    case Kind::kString:
      if (k.non_empty) parts.push_back("not empty");
      break;
    case Kind::kBool:
      break;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// A table cell: '|' would end it.
std::string Cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string Code(std::string_view s) { return s.empty() ? std::string() : fmt::format("`{}`", s); }

}  // namespace

}  // namespace config

std::string ConfigReferenceMarkdown() {
  using config::ConfigKey;
  using config::ConfigTable;
  std::string out =
      "<!-- Generated from the key table in daemon/config_table.cc by\n"
      "     `tierfs config reference > docs/config-reference.md`; do not edit by hand. -->\n"
      "# Configuration reference\n\n"
      "Every key of the TOML config file (`tierfs mount --config FILE`; `tierfs config check "
      "FILE` prints the effective value of each). Flags override the file; for s3.endpoint, "
      "s3.region and s3.profile the file overrides the environment.\n\n"
      "Sizes are strings (\"512MiB\", \"20GiB\") or integers (bytes); durations are strings "
      "(\"250ms\", \"30s\", \"10m\", \"7d\", \"forever\") or integers (seconds). The "
      "default is the value a mount uses when the key is not set.\n";
  const DaemonOptions defaults;
  std::string_view table;
  for (const ConfigKey& k : ConfigTable()) {
    if (k.table != table) {
      table = k.table;
      out += fmt::format(
          "\n## [{}]\n\n| key | type | default | range | flag | description |\n"
          "| --- | --- | --- | --- | --- | --- |\n",
          table);
    }
    std::string flags = config::Code(k.flag);
    if (!k.flag_alias.empty()) flags += ", " + config::Code(k.flag_alias);
    out +=
        fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", k.FullName(), config::TypeName(k.kind),
                    config::Cell(config::Code(config::Show(k, defaults))),
                    config::Cell(config::RangeText(k)), flags, config::Cell(k.doc));
  }
  out +=
      "\n## [[policy]]\n\n"
      "Policies per path prefix, one `[[policy]]` table each: `prefix` (required), `pin`, `ttl`, "
      "`policy` (lru or ttl), `admit` (always, reuse or never) and `quota` (a size).\n";
  return out;
}

}  // namespace tierfs
