// fuse — the libfuse3 low-level adapter. The one public header of the module (conventions C2).
//
// FuseServer mounts a Filesystem through /dev/fuse and serves the kernel's requests with
// libfuse's multi-threaded loop. Handlers are thin (C5): each translates the request into one call
// on the Filesystem (taken from fuse_req_userdata, never a global) and replies exactly once.
// Only fuse/ includes fuse_lowlevel.h (through fuse/internal/libfuse.h); nothing here exposes
// FUSE types. The parts of the adapter are listed at the top of fuse/fuse_server.cc.
//
// The mount is read-only: every write operation gets EROFS.
//
// Interrupts and isolation. Requests that may wait on the network (a read of blocks
// no host tier holds; lookup, getattr, open and readdir, whose catalog may list or HEAD the
// origin) get a CancelToken: a FUSE interrupt (the reader's ^C or SIGKILL) cancels it and the
// request replies EINTR at once; its deadline (request_timeout) ends it with EIO. Such a request
// runs on the libfuse worker that received it only while one of the max_threads - reserved
// "remote slots" is free; otherwise it is handed to an owned pool of remote_threads threads
// ("tierfs-remote-N") and replied from there. So at least `reserved` libfuse workers are always
// free to serve reads of cached blocks and cached metadata, and to receive the kernel's
// INTERRUPT requests, however many readers wait on a stalled origin. A request queued for the
// pool that is interrupted before it starts replies EINTR when a pool thread takes it.
//
// Thread-safety: Mount/Run/Unmount/destructor are called from one thread (the daemon's main
// thread); the handlers run on libfuse's worker threads and only touch the (thread-safe)
// Filesystem.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/status.h"

namespace tierfs {
namespace metrics {
class Registry;
}
namespace fuse_internal {
class Session;
class StateCopy;
}  // namespace fuse_internal

class Filesystem;
struct FilesystemState;

struct FuseOptions {
  // libfuse worker threads (fuse_loop_cfg_set_max_threads). At most max_threads - reserved of
  // them wait on the network at once (see the file comment); reserved = max(2, max_threads / 4).
  int max_threads = 16;
  // Owned threads that serve the network-bound requests beyond the libfuse workers' share.
  int remote_threads = 64;
  // Longest a request may wait on the network before it fails with EIO (its CancelToken's
  // deadline). daemon/ derives it from the origin's timeouts, attempts and backoff.
  std::chrono::nanoseconds request_timeout = std::chrono::minutes(5);
  // One /dev/fuse fd per worker thread (less contention on the device).
  bool clone_fd = true;
  // -o allow_other: other users (the training job's) may use the mount. Off by default: only
  // the mounting user can. Needs user_allow_other in /etc/fuse.conf when not mounting as root.
  bool allow_other = false;
  // -o allow_root: root may use the mount too (besides the mounting user); exclusive with
  // allow_other. Same /etc/fuse.conf rule.
  bool allow_root = false;
  // -o default_permissions: the kernel checks the mode bits and owner (FilesystemOptions) itself.
  // daemon/ turns it on with allow_other (or allow_root) unless told otherwise.
  bool default_permissions = false;
  // "tierfs:SOURCE", shown by mount(8) and df(1). Subtype is always "tierfs" (type fuse.tierfs).
  std::string fsname = "tierfs";
  // Further -o options passed to libfuse as they are ("nodev", "noatime", "auto_unmount", ...).
  std::vector<std::string> extra_options;
  // Kernel cache lifetimes of entries, attributes and negative entries. daemon/ sets all three
  // from metadata_ttl; kForever becomes one year.
  std::chrono::nanoseconds entry_timeout = std::chrono::seconds(60);
  std::chrono::nanoseconds attr_timeout = std::chrono::seconds(60);
  std::chrono::nanoseconds negative_timeout = std::chrono::seconds(60);
  // Opens handled in the kernel (FUSE_CAP_NO_OPEN_SUPPORT, Linux 4.20+): the first open is
  // answered ENOSYS after its checks, and the kernel then opens files without asking (no open
  // or release requests) and keeps their pages cached; reads then pin the version at the inode
  // (Filesystem::ReadInode) instead of the open. For datasets that do not change while mounted:
  // a changed object is seen once the kernel's attributes time out (attr_timeout, i.e.
  // metadata_ttl) rather than by the next open. Ignored where the kernel lacks it.
  bool open_in_kernel = false;
  // Small files handed to the kernel with their open: on the first open of a file (since the
  // kernel looked it up) of at most this many bytes whose every byte is in L1/L2, the daemon
  // stores the whole file in the kernel's page cache (FUSE notify_store) before it answers the
  // open, so reading it costs no read request; nor, then, does the kernel mark the file's atime
  // stale (it does after every read request on a writable mount), which would cost the next
  // stat(2) of it a getattr. 0: off. Not with open_in_kernel (there is no open to answer).
  uint64_t store_on_open_max = 1U << 20;
  // FUSE passthrough (Linux 6.9+ with CONFIG_FUSE_PASSTHROUGH; the daemon needs CAP_SYS_ADMIN):
  // a file whose bytes L2 holds whole in one file of exactly its size (TieredCache::OpenWholeFile)
  // is opened with that file as its backing file, on its first open since the kernel looked it up
  // and on later ones while every open of it was so and its pages are not all in the page cache;
  // the kernel then reads that file itself: no read request, no copy through the daemon. The
  // INIT flag and the backing-file ioctls are sent by hand (libfuse 3.14 predates them). Off by
  // default: it pays where a dataset is read from L2 again and again because the page cache
  // cannot hold it, and costs where it can (a passthrough read marks the inode's atime stale on
  // this writable mount, so each later stat(2) of the file is a getattr; docs/semantics.md).
  // Not with open_in_kernel (there is no open to answer).
  bool passthrough = false;
  // Largest read request and kernel readahead (the kernel may lower both).
  uint32_t max_read = 1U << 20;
  uint32_t max_readahead = 1U << 20;
  // Lower max_read (and max_readahead with it) to what this process's splice pipe can carry
  // from cache files: a read across a block boundary, two file slices plus the reply header.
  // Without CAP_SYS_RESOURCE a pipe grows only to fs.pipe-max-size (1 MiB by default), which
  // cannot hold a 1 MiB read and its header: reads of 1004 KiB are spliced, while 1 MiB ones
  // would be read into a buffer and written (one copy more). The cost: a read then usually spans
  // two blocks, so a block that no tier keeps (admit = "never" with L1 off) is fetched twice, and
  // a 1 MiB O_DIRECT read becomes two requests. daemon/: fuse.splice_sized_reads (off by
  // default), only with an L2 and cache.l2_splice.
  bool fit_reads_to_splice_pipe = false;
  // SIGINT/SIGTERM: how long the requests waiting on the network when the signal came (reads of
  // blocks no host tier holds, lookups and opens that list or HEAD the origin) may take to be
  // answered; those still waiting then get EIO. Meanwhile new requests that would wait on the
  // network get EIO at once and cached ones are answered. Then the mount is detached, the loop
  // answers for up to 1 s more (until the last open file is closed), and Run() returns: no
  // request the kernel sent before the signal is left unanswered (ENOTCONN).
  std::chrono::nanoseconds shutdown_grace = std::chrono::seconds(5);
  // libfuse debug output (every request) through the fuse logger.
  bool debug = false;
  // Where the server publishes tierfs_fuse_requests_total{op} and
  // tierfs_fuse_request_duration_seconds{op} (from the handler's start to its reply) and the
  // Filesystem's counters (fuse.* of user.tierfs.stats). Not owned; must outlive the server.
  // Null: requests are not timed.
  metrics::Registry* metrics = nullptr;
};

// Where a Status is being turned into an errno: xattr operations map NotFound to ENODATA.
enum class ErrnoContext { kDefault, kXattr };

// The one Status → errno function of tierfs (conventions C4). Positive errno values.
int ToErrno(const Status& status, ErrnoContext context = ErrnoContext::kDefault);

// A kernel cache timeout in seconds for `d`; kForever and anything beyond a year → one year.
double TimeoutSeconds(std::chrono::nanoseconds d);

// The largest read request whose reply from two cache files (a read across a block boundary) a
// splice pipe of `pipe_bytes` holds with its header (FuseOptions::fit_reads_to_splice_pipe):
// `max_read` when it fits, else the largest multiple of the page size that does (a 1 MiB pipe:
// 1004 KiB). `max_read` as it is when the pipe would leave reads under 128 KiB (replies from
// cache files are then read into a buffer and written).
uint32_t FitReadToPipe(uint32_t max_read, size_t pipe_bytes);

class FuseServer {
 public:
  // Creates the FUSE session with `options`, installs the signal handlers (SIGINT and SIGTERM
  // end Run() after the drain, see FuseOptions::shutdown_grace; SIGHUP is left as it was, for the
  // daemon) and mounts at `mountpoint`. When this returns OK the mount is in place: the kernel
  // queues requests until Run() serves them. `fs` is not owned and must outlive the server. One
  // server per process (the signal handlers are the process's).
  static Result<std::unique_ptr<FuseServer>> Mount(const FuseOptions& options, Filesystem* fs,
                                                   const std::string& mountpoint);
  // Takes over the mount at `mountpoint` from the daemon at the other end of `channel` (a live
  // restart, `tierfs restart`; fuse/FORMAT.md "Handover"): receives the /dev/fuse descriptor
  // and the session's state within `timeout`, creates the session on it with `options`, and
  // answers the old daemon "ok", or why not (it then keeps serving). Refused (InvalidArgument,
  // naming the setting) when `options` change what the live connection fixed (allow_other,
  // max_read, ...); NotSupported when the old daemon's state version is not this binary's. The
  // inode and handle tables wait for Attach.
  static Result<std::unique_ptr<FuseServer>> TakeOver(const FuseOptions& options,
                                                      const std::string& mountpoint, int channel,
                                                      std::chrono::nanoseconds timeout);
  // Answers the daemon at the other end of `channel` that this one will not take over, and why
  // (a new daemon that fails before TakeOver: its configuration, its log file).
  static void RefuseTakeOver(int channel, const Status& why);
  // A server made by TakeOver: waits up to `timeout` for the old daemon to release the cache
  // directory ("go"; it keeps serving until then). Then build the components.
  Status AwaitRelease(std::chrono::nanoseconds timeout);
  // The Filesystem of a server made by TakeOver, given the old daemon's inode and handle tables;
  // tells the old daemon that this one serves. REQUIRES: after AwaitRelease, before Run(); `fs`
  // as for Mount.
  Status Attach(Filesystem* fs);

  // Unmounts if still mounted and destroys the session.
  ~FuseServer();
  FuseServer(const FuseServer&) = delete;
  FuseServer& operator=(const FuseServer&) = delete;

  // Serves requests on max_threads workers until the file system is unmounted (fusermount3 -u,
  // umount) or a signal arrives and the requests in flight are answered (then the mount is
  // already detached). OK on either; an error only if the loop failed.
  Status Run();

  // Crash resume (fuse/FORMAT.md "Crash resume"): sends the session's state on `channel` (a
  // socket to the daemon's supervisor) with the /dev/fuse descriptor, and again as inodes and
  // handles are handed out, until Run() returns. REQUIRES: before Run().
  void LogStateTo(int channel);
  // A server made by TakeOver after its predecessor died, the mount's `resumes`th crash resume
  // (history(): not a live restart): asks the kernel to send again the requests that daemon had
  // read and not answered (FUSE_NOTIFY_RESEND). False (logged) where the kernel cannot (before
  // Linux 6.9). REQUIRES: after Attach, before Run().
  bool ResumeAfterCrash(uint32_t resumes);
  // The mount's crash resumes so far (history(), metrics), for a supervised daemon that is not
  // itself a resume (the first, or a live restart's).
  void CountCrashResumes(uint32_t resumes);
  // The supervisor's side of crash resume: its copy of the state a daemon logs (LogStateTo; the
  // last whole state with the updates since merged in).
  class LoggedState {
   public:
    LoggedState();
    ~LoggedState();
    LoggedState(const LoggedState&) = delete;
    LoggedState& operator=(const LoggedState&) = delete;
    // Takes the next message on `channel`, waiting up to `timeout`, and in *fd the descriptor
    // that came with it (-1 if none). TimedOut; Unavailable once the daemon's end is closed; a
    // bad message's error (the copy is then unchanged).
    Status Receive(int channel, std::chrono::nanoseconds timeout, int* fd);
    // Whether a whole state came (a daemon that never served logged none).
    bool empty() const;
    // The daemon the logging one said takes the mount over in a live restart (0: none, or the
    // handover failed), cleared.
    int TakeSuccessor();
    // Gives the copy and `fuse_fd` to the new daemon at the other end of `channel` (started to
    // TakeOver) as a live restart's old daemon does, and waits for its "ok" (up to
    // `start_limit`) and its "serving"; the reason otherwise.
    Status HandTo(int channel, int fuse_fd, std::chrono::nanoseconds start_limit) const;

   private:
    std::unique_ptr<fuse_internal::StateCopy> copy_;
    int successor_ = 0;
  };

  // Unmounts now (idempotent). Run() then returns.
  void Unmount();

  // What a handover asks of the daemon (HandOver).
  struct HandOverHooks {
    // Starts the new daemon, which must call TakeOver with `channel` (the other end of a socket
    // pair); its pid.
    std::function<Result<int>(int channel)> start;
    // The new daemon accepted the mount: free what it opens next (the cache directory's lock, the
    // metrics port: every component below the server, the Filesystem included). No request
    // reaches the Filesystem from here on, until `restore` or the end.
    std::function<void()> release;
    // The new daemon failed after `release`: build the components again; the Filesystem to serve
    // on (it is given back the inode and handle tables).
    std::function<Result<Filesystem*>()> restore;
  };
  // Hands the mount to a new daemon while Run() serves (from another thread): the requests in
  // flight are answered first (up to `pause_limit`, else Unavailable and nothing changes), then
  // hooks.start starts the new daemon; on its "ok" (within `start_limit`) hooks.release, and
  // once it serves Run() returns without unmounting and the pid is returned. On anything else
  // the new daemon is killed and reaped, this server serves on (after hooks.restore if
  // hooks.release had run), and the error says why.
  Result<int> HandOver(const HandOverHooks& hooks, std::chrono::nanoseconds pause_limit,
                       std::chrono::nanoseconds start_limit);
  // The mount was handed over: Run() returned for that, and nothing unmounts it here.
  bool handed_over() const;

  // When the mount was made (by this daemon or the first of those that handed it on), and how
  // many live restarts it has been through.
  struct History {
    int64_t mounted_at_ns = 0;  // Unix time
    uint32_t restarts = 0;
    uint32_t resumes = 0;  // crash resumes (ResumeAfterCrash)
  };
  History history() const;

  struct Context;  // opaque: what the handlers get from fuse_req_userdata

 private:
  FuseServer(const FuseOptions& options, std::unique_ptr<Context> ctx,
             std::unique_ptr<fuse_internal::Session> session);

  const FuseOptions options_;
  const std::unique_ptr<Context> ctx_;
  // The FUSE session serving ctx_ (fuse/internal/session.h); destroyed first.
  std::unique_ptr<fuse_internal::Session> session_;
  // TakeOver: the old daemon's tables, for Attach, and the socket to it.
  std::unique_ptr<FilesystemState> pending_state_;
  int channel_ = -1;  // not owned (the daemon's)
};

}  // namespace tierfs
