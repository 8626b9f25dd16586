#include "daemon/mounts.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/strings.h"

namespace tierfs {
namespace {

std::vector<std::string_view> SplitSpaces(std::string_view line) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    if (pos >= line.size()) break;
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    out.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

}  // namespace

std::string UnescapeMountField(std::string_view f) {
  std::string out;
  out.reserve(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '\\' && i + 3 < f.size()) {
      const char a = f[i + 1], b = f[i + 2], c = f[i + 3];
      if (a >= '0' && a <= '3' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out.push_back(static_cast<char>((a - '0') * 64 + (b - '0') * 8 + (c - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(f[i]);
  }
  return out;
}

std::vector<MountInfo> ParseMountInfo(std::string_view text) {
  std::vector<MountInfo> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const auto f = SplitSpaces(line);
    // id parent maj:min root mountpoint options [optional...] - fstype source superoptions
    if (f.size() < 10) continue;
    size_t sep = 6;
    while (sep < f.size() && f[sep] != "-") ++sep;
    if (sep + 2 >= f.size()) continue;
    MountInfo m;
    uint64_t major = 0, minor = 0;
    const size_t colon = f[2].find(':');
    if (!ParseDecimal(f[0], &m.id) || colon == std::string_view::npos ||
        !ParseDecimal(f[2].substr(0, colon), &major) ||
        !ParseDecimal(f[2].substr(colon + 1), &minor)) {
      continue;
    }
    m.major = static_cast<uint32_t>(major);
    m.minor = static_cast<uint32_t>(minor);
    m.root = UnescapeMountField(f[3]);
    m.mountpoint = UnescapeMountField(f[4]);
    m.options = std::string(f[5]);
    m.fstype = UnescapeMountField(f[sep + 1]);
    m.source = UnescapeMountField(f[sep + 2]);
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<MountInfo>> ReadMountInfo(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::IOError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseMountInfo(ss.str());
}

std::vector<MountInfo> TierfsMounts(const std::vector<MountInfo>& all) {
  std::vector<MountInfo> out;
  for (const auto& m : all) {
    if (m.fstype == kTierfsFsType) out.push_back(m);
  }
  return out;
}

Result<MountInfo> TierfsMountOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return Status::FromErrno(err, fmt::format("cannot stat {}", path));
  }
  auto all = ReadMountInfo();
  if (!all.ok()) return all.status();
  const MountInfo* found = nullptr;
  for (const auto& m : *all) {
    // The last mount with that device is the one on top.
    if (m.major == major(st.st_dev) && m.minor == minor(st.st_dev)) found = &m;
  }
  if (found != nullptr && found->fstype == kTierfsFsType) return *found;
  return Status::NotFound(
      fmt::format("{} is not on a tierfs mount (it is on {}{})", path,
                  found ? found->fstype : std::string("an unknown file system"),
                  found ? fmt::format(" mounted at {}", found->mountpoint) : std::string()));
}

const MountInfo* MountAt(const std::vector<MountInfo>& mounts, const std::string& mountpoint) {
  const MountInfo* found = nullptr;
  for (const auto& m : mounts) {
    if (m.mountpoint == mountpoint) found = &m;  // the last one is on top
  }
  return found;
}

namespace {

// "tierfs pid N" for a tierfs mount (its daemon answers user.tierfs.daemon), else "fstype X, SRC".
std::string DescribeMount(const MountInfo& m, const std::string& path) {
  if (m.fstype != kTierfsFsType) {
    return fmt::format("fstype {}, {}", EscapeForLog(m.fstype, 64), EscapeForLog(m.source, 256));
  }
  std::string value(512, '\0');
  const ssize_t n = ::getxattr(path.c_str(), "user.tierfs.daemon", value.data(), value.size());
  std::string pid = "unknown";
  if (n > 0) {
    value.resize(static_cast<size_t>(n));
    if (value.starts_with("pid=")) pid = value.substr(4, value.find(' ') - 4);
  }
  return fmt::format("tierfs pid {}, {}", EscapeForLog(pid, 32), EscapeForLog(m.source, 256));
}

}  // namespace

Status CheckMountpoint(const std::string& mountpoint, bool allow_nonempty) {
  char resolved[PATH_MAX];
  const std::string path =
      ::realpath(mountpoint.c_str(), resolved) != nullptr ? std::string(resolved) : mountpoint;
  auto all = ReadMountInfo();
  if (!all.ok()) return all.status();
  if (const MountInfo* m = MountAt(*all, path)) {
    const bool fuse = m->fstype == "fuse" || m->fstype.starts_with("fuse.");
    return Status::InvalidArgument(fmt::format(
        "MOUNTPOINT {} is already a mount point ({}); unmount it first ({} {})", mountpoint,
        DescribeMount(*m, path), fuse ? "fusermount3 -u" : "umount", mountpoint));
  }
  if (allow_nonempty) return Status::OK();
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return Status::FromErrno(errno, "MOUNTPOINT " + mountpoint);
  std::string first;
  uint64_t count = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    if (count++ == 0) first = name;
  }
  ::closedir(d);
  if (count == 0) return Status::OK();
  return Status::InvalidArgument(fmt::format(
      "MOUNTPOINT {} is not empty (it holds '{}'{}); the mount would hide what it holds: use "
      "an empty directory, or -o nonempty to mount over it anyway",
      mountpoint, EscapeForLog(first, 255),
      count > 1 ? fmt::format(" and {} more", count - 1) : std::string()));
}

}  // namespace tierfs
