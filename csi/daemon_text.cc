#include "csi/internal/daemon_text.h"

#include <fmt/format.h>

#include <sstream>

#include "base/strings.h"

namespace tierfs::csi {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t j = 1; j <= 3; ++j) {
        char c = s[i + j];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out += static_cast<char>(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

}  // namespace

std::vector<std::string> ParseTierfsMountPoints(std::string_view mountinfo) {
  std::vector<std::string> out;
  std::istringstream in{std::string(mountinfo)};
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
    std::istringstream ss(line);
    std::string id, parent, dev, root, mnt, field;
    ss >> id >> parent >> dev >> root >> mnt;
    while (ss >> field && field != "-") {
    }
    std::string fstype;
    ss >> fstype;
    if (fstype == "fuse.tierfs") out.push_back(Unescape(mnt));
  }
  return out;
}

Status DaemonFailureStatus(int exit_code, std::string_view output) {
  std::string last;
  std::istringstream ss{std::string(output)};
  for (std::string line; std::getline(ss, line);) {
    if (!TrimSpace(line).empty() && line.find("warning:") == std::string::npos) last = line;
  }
  std::string msg(TrimSpace(last));
  for (std::string_view prefix : {"tierfs mount: ", "tierfs: "}) {
    if (msg.starts_with(prefix)) msg = msg.substr(prefix.size());
  }
  if (msg.empty()) msg = fmt::format("tierfs mount exited with status {}", exit_code);
  if (exit_code == 2) return Status::InvalidArgument(msg);
  static constexpr std::pair<std::string_view, Status (*)(std::string_view)> kCodes[] = {
      {"PermissionDenied: ", &Status::PermissionDenied},
      {"NotFound: ", &Status::NotFound},
      {"Unavailable: ", &Status::Unavailable},
      {"TimedOut: ", &Status::Unavailable},
      {"IOError: ", &Status::Unavailable},
      {"InvalidArgument: ", &Status::InvalidArgument},
  };
  for (const auto& [prefix, make] : kCodes) {
    if (msg.starts_with(prefix)) return make(std::string_view(msg).substr(prefix.size()));
  }
  return Status::Internal(msg);
}

}  // namespace tierfs::csi
