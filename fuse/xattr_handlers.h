// The user.tierfs.* extended attributes (conventions C16): a registry of small handler classes.
// xattr_handlers.cc is the one file that lists every name (NewDefaultXattrRegistry).
//
//   user.tierfs.stats      root only, get: space-separated key=value counters of every tier,
//                          the origin, the catalog and the FUSE layer
//                          ("l1.hits=3 ... origin.bytes=1048576 ... fuse.inodes=12")
//   user.tierfs.etag       files, get: the ETag of the version the inode last saw
//   user.tierfs.source     files, get: which tier served the file's last read: l1, l2, origin,
//                          or "none" before the first read
//   user.tierfs.residency  files, get: blocks held per host tier, "l1=3/25 l2=25/25"
//   user.tierfs.prefetch   files and directories (recursive). set: "l1", "l2" or "l3" starts a
//                          durable background job hydrating it into that tier, "cancel" stops
//                          it; get: "state=<queued|running|done|failed|cancelled> tier=l2
//                          files=<done>/<total> bytes=<done>/<total>" (+ " error=..." when
//                          failed), "state=none tier=- files=0/0 bytes=0/0" without a job
//   user.tierfs.prefetch_list  root only. set: "[tier=l1|l2|l3\n]path\npath..." appends those
//                          files (relative to the root, in that order) to the mount's list job
//                          (EINVAL and nothing queued if one is missing or a directory),
//                          "cancel" drops it; get: its state as for user.tierfs.prefetch
//   user.tierfs.evict      files and directories (recursive), set only: "1" drops the blocks
//                          from the host tiers (L1, L2) now. Not listed; get → ENODATA.
//   user.tierfs.log_level  root only. get: the daemon's log level ("info"); set: trace, debug,
//                          info, warn, error, critical or off changes it at once (EINVAL for
//                          anything else). Applied by the daemon (DaemonControl).
//   user.tierfs.daemon     root only, get: "pid=N version=V cache_dir=PATH log=DEST
//                          log_format=text|json" of the daemon serving the mount.
//   user.tierfs.manifest   root only, get: the checksum (32 hex digits) of the dataset manifest
//                          the mount serves (--manifest); not there (ENODATA, not listed) on
//                          a mount of live listings.
//
// Who may set: root and the mounting user set every name; members of the control group
// (FilesystemOptions::control_gid) set user.tierfs.prefetch and user.tierfs.prefetch_list only
// (a prefetch adds to the cache for everyone; pin, ttl, policy, admit and evict change what the
// host keeps for every user, and log_level the daemon). Everyone may get.
//
// Values are short and machine-parseable. Unknown names: get → NotFound (ENODATA), set →
// NotSupported (ENOTSUP). Setting a read-only name → InvalidArgument (EINVAL) and a log line.
//
// Thread-safety: the registry is immutable after construction; handlers are stateless and
// thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {

class Filesystem;

inline constexpr std::string_view kXattrPrefix = "user.tierfs.";

// What a handler is asked about: one inode, as the Filesystem last saw it.
struct XattrTarget {
  std::string_view path;  // "" for the root
  bool is_dir = false;
  bool is_root = false;
  ObjectRef object;          // files: key and the last seen version (size, ETag, mtime)
  std::string_view source;   // files: tier name of the last read, "" before any
  Filesystem* fs = nullptr;  // for the catalog, the cache and the FUSE counters
  // Set when the caller may set the name only as a member of the control group
  // (FilesystemOptions::control_gid): the uid that owns the prefetch jobs it starts (capped per
  // user, PrefetchJobsOptions::max_jobs_per_user). Unset for root and the mounting user.
  std::optional<uint32_t> job_owner;
};

class XattrHandler {
 public:
  virtual ~XattrHandler() = default;
  virtual std::string_view name() const = 0;  // full name, "user.tierfs.etag"
  virtual bool AppliesTo(const XattrTarget& target) const = 0;
  virtual Result<std::string> Get(const XattrTarget& target) const = 0;
  // Default: the name is read-only (InvalidArgument).
  virtual Status Set(const XattrTarget& target, std::string_view value) const;
  // Whether listxattr shows the name (false for set-only names such as evict).
  virtual bool Listed() const { return true; }
  // Whether members of the control group may set the name (prefetch, prefetch_list); the others
  // stay with root and the mounting user.
  virtual bool GroupSettable() const { return false; }
};

// Value parsing shared by the handlers (unit-tested): the value with one trailing NUL or newline
// removed (some tools send "l2\n" or "l2\0").
std::string_view TrimXattrValue(std::string_view value);

class XattrRegistry {
 public:
  void Register(std::unique_ptr<XattrHandler> handler);
  // nullptr if no handler has that name.
  const XattrHandler* Find(std::string_view name) const;
  // Names of the handlers that apply to `target`, in registration order.
  std::vector<std::string> List(const XattrTarget& target) const;

 private:
  std::vector<std::unique_ptr<XattrHandler>> handlers_;
  std::map<std::string, const XattrHandler*, std::less<>> by_name_;
};

// Every user.tierfs.* name tierfs serves.
std::unique_ptr<XattrRegistry> NewDefaultXattrRegistry();

}  // namespace tierfs
