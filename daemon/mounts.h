// daemon/mounts — the host's mounts from /proc/self/mountinfo, and which of them are tierfs's
// (fstype "fuse.tierfs"). Used by `tierfs status` (every tierfs mount) and `tierfs prefetch`
// (refuses paths that are not on a tierfs mount).
//
// Pure parsing (ParseMountInfo) plus two readers of the live system; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace tierfs {

inline constexpr std::string_view kTierfsFsType = "fuse.tierfs";

// One line of /proc/self/mountinfo (proc(5)), with the octal escapes of the paths decoded.
struct MountInfo {
  uint64_t id = 0;
  uint32_t major = 0;  // st_dev of every file on the mount
  uint32_t minor = 0;
  std::string root;        // the mounted directory inside its file system
  std::string mountpoint;  // "/mnt/data"
  std::string fstype;      // "fuse.tierfs"
  std::string source;      // "tierfs:s3://bucket/prefix"
  std::string options;     // per-mount options ("rw,nosuid,nodev,relatime")
};

// "\040" → ' ', "\011" → tab, "\012" → newline, "\134" → '\', as the kernel escapes mountinfo
// fields; anything else is kept as it is.
std::string UnescapeMountField(std::string_view field);

// Every well-formed line of a mountinfo text, in order; malformed lines are skipped.
std::vector<MountInfo> ParseMountInfo(std::string_view text);

// ParseMountInfo of /proc/self/mountinfo (IOError if it cannot be read).
Result<std::vector<MountInfo>> ReadMountInfo(const std::string& path = "/proc/self/mountinfo");

// The mounts of type fuse.tierfs, in mount order.
std::vector<MountInfo> TierfsMounts(const std::vector<MountInfo>& all);

// The tierfs mount that holds `path` (matched by the device number stat(2) reports, so bind
// mounts and symlinks are handled). NotFound naming the path and its file system type when it
// is on another file system; IOError when it cannot be stat'ed (a stale mount gives ENOTCONN).
Result<MountInfo> TierfsMountOf(const std::string& path);

// The mount on top at `mountpoint` (an absolute path, symlinks resolved), if there is one, in
// `mounts` (ReadMountInfo).
const MountInfo* MountAt(const std::vector<MountInfo>& mounts, const std::string& mountpoint);

// Whether `tierfs mount` may mount at `mountpoint` (an existing directory). InvalidArgument:
//   - when it already is a mount point, whatever `allow_nonempty` says: "MNT is already a mount
//     point (tierfs pid N)" or "(fstype X, SOURCE)"; unmount it first (a second mount on top would
//     hide the first, whose daemon lives on unseen);
//   - when it holds any entry and `allow_nonempty` (-o nonempty) is false: the mount would hide
//     them.
Status CheckMountpoint(const std::string& mountpoint, bool allow_nonempty);

}  // namespace tierfs
