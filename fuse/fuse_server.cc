// The libfuse3 low-level adapter: the only file of tierfs that includes fuse_lowlevel.h.
//
// Every operation is split in two (conventions C5): DoX(ctx, ...) calls the Filesystem and
// returns a value (Result), X(req, ...) replies exactly once with it. No lock is held while
// replying (C6); the Filesystem returns values, not references into its tables. Errors become
// errno only through ToErrno (C4).
//
// Zero copy on read: the Filesystem returns BlockSlices that point into shared, immutable
// blocks. One slice is replied with fuse_reply_data over a one-buffer fuse_bufvec and
// FUSE_BUF_NO_SPLICE (libfuse then writev()s the memory directly); several slices with
// fuse_reply_iov (one iovec per slice) because libfuse 3.14's fuse_reply_data copies a bufvec of
// several memory buffers into a temporary buffer first (the FIXME in
// fuse_send_data_iov_fallback). The slices (and the BlockRefs keeping them alive) live on the
// handler's stack until the reply call returns. Slices backed by a cache file (BlockSlice::file:
// L2 hits, TieredCacheOptions::file_slices) are replied with fuse_reply_data over a bufvec whose
// buffers are the files (FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK; memory slices of the same read ride
// along as memory buffers): with SPLICE_WRITE libfuse splices the file's page-cache pages into a
// pipe and on to /dev/fuse, so the bytes never cross user space. Mount probes how far a pipe
// can grow (without CAP_SYS_RESOURCE only to fs.pipe-max-size, 1 MiB by default, less than a
// 1 MiB reply and its header) and, with FuseOptions::fit_reads_to_splice_pipe, asks the kernel
// for reads no larger than such a pipe splices (1004 KiB). A reply the pipe cannot hold even so
// is read into a per-thread buffer and written with writev instead (ReplyFromFilesCopied), not
// through libfuse's fallback, which allocates a reply-sized buffer per reply. SPLICE_MOVE/READ
// are not requested.
//
// Store at open (FuseOptions::store_on_open_max): a small file whose bytes are all in L1/L2 is
// written into the kernel's page cache with fuse_lowlevel_notify_store before its open is
// answered (keep_cache then keeps those pages), so the reads that follow are page-cache hits.
// Bytes from an L2 file are spliced into the notification like a read reply's (when the pipe
// holds them); memory, or a file the pipe cannot hold, is gathered into a buffer first.
//
// Passthrough (FuseOptions::passthrough, Linux 6.9+): a file L2 holds whole in one file of exactly
// its bytes is opened with that file as its backing file, and the kernel reads it without us.
// libfuse 3.14 predates the protocol, so it is done by hand: a custom I/O (fuse_session_custom_io
// on the mounted fd) notes whether the kernel's INIT offers FUSE_PASSTHROUGH and sets it, with
// max_stack_depth 1, in our INIT reply; backing files are registered with the
// FUSE_DEV_IOC_BACKING_OPEN ioctl and named in an open reply built with fuse_reply_buf. The
// kernel keeps one io mode per inode: while any open of an inode is in passthrough mode every
// other open must be too, with the same backing file, and a passthrough open is refused while a
// cached-mode open is outstanding (either mismatch fails open(2) with EIO). So the opens and
// releases of each inode are counted by mode (KernelIo, counted before the reply, released at
// RELEASE, which the kernel sends after its own count dropped); a backing id lives until the
// last passthrough release of its inode.
//
// Interrupts (see fuse_server.h). A request that may wait on the network is run through
// Dispatch(): it gets a RequestToken, which registers a libfuse interrupt callback that cancels
// the request's CancelToken (the callback only sets the token and wakes its waiters: libfuse
// calls it holding the request's lock, possibly from inside fuse_req_interrupt_func). Before the
// reply the callback is unregistered (fuse_req_interrupt_func(req, NULL, NULL) takes the same
// lock, so a callback running on another thread has finished when it returns); the token then
// dies with the request. Dispatch() runs the work inline while a remote slot is free, else
// queues it for the remote pool, which replies from its own thread (libfuse allows replying from
// any thread). Local reads (every block in L1/L2, Filesystem::ReadIsLocal) take no slot.
//
// Stopping (FuseServer::Drain). libfuse's SIGINT/SIGTERM handler would end the loop at once and
// leave the requests in flight to the kernel's ENOTCONN; ours only wakes a supervisor thread
// through a pipe. It stops new network-bound work (EIO at once), waits up to
// FuseOptions::shutdown_grace for the dispatched requests, cancels the rest "for shutdown" (their
// Cancelled maps to EIO, not EINTR, through the thread's t_ended_by_shutdown), detaches the
// mount, lets the loop answer for a moment more while open files are closed, then ends the loop
// (fuse_session_exit, and pthread_kill to wake its sem_wait).

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)  // fuse_loop_cfg_* (libfuse >= 3.12)
#include "fuse/fuse_server.h"

#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/cancel.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "base/units.h"
#include "fuse/filesystem.h"

namespace tierfs {

namespace {
// Set while a network-bound request's job runs on this thread (RemoteWork::Run): the flag its
// RequestToken raises when the daemon's shutdown, not the reader, cancelled it.
thread_local const std::atomic<bool>* t_ended_by_shutdown = nullptr;
}  // namespace

int ToErrno(const Status& status, ErrnoContext context) {
  switch (status.code()) {
    case Status::Code::kOk:
      return 0;
    case Status::Code::kNotFound:
      // No such entry → ENOENT. For xattrs NotFound means "no such attribute", which getxattr(2)
      // and removexattr(2) report as ENODATA.
      return context == ErrnoContext::kXattr ? ENODATA : ENOENT;
    case Status::Code::kInvalidArgument:
      // Bad input from the user (xattr value, name, read-only attribute) → EINVAL.
      return EINVAL;
    case Status::Code::kIOError:
      // Local or remote I/O failed after retries → EIO, what readers of files expect.
      return EIO;
    case Status::Code::kCorruption:
      // Unparsable data from a store (checksum failures are refetched below us, never surfaced)
      // → EIO: a wrong byte is never returned.
      return EIO;
    case Status::Code::kUnavailable:
      // The origin cannot be reached (retries spent) → EIO, not EAGAIN: readers do not retry.
      return EIO;
    case Status::Code::kTimedOut:
      // A deadline passed after retries → EIO (ETIMEDOUT would read as a network socket error).
      return EIO;
    case Status::Code::kPermissionDenied:
      // The store refused our credentials (401/403) → EACCES. A user.tierfs.* control set by a
      // user other than root and the mounting user → EPERM, as for other privileged attributes.
      return context == ErrnoContext::kXattr ? EPERM : EACCES;
    case Status::Code::kNoSpace:
      // A tier or quota is full → ENOSPC.
      return ENOSPC;
    case Status::Code::kCancelled:
      // Cancelled by the reader's interrupt → EINTR (as 3FS does; ECANCELED is for AIO). A
      // request the daemon gave up on because it is stopping (SIGTERM, after the shutdown grace)
      // → EIO: its reader interrupted nothing.
      return t_ended_by_shutdown != nullptr && t_ended_by_shutdown->load(std::memory_order_acquire)
                 ? EIO
                 : EINTR;
    case Status::Code::kNotSupported:
      // Operation not supported here (setxattr of an unknown name) → ENOTSUP.
      return ENOTSUP;
    case Status::Code::kInternal:
      // A bug: an invariant did not hold → EIO, and it is logged where it happened.
      return EIO;
    case Status::Code::kFailedPrecondition:
      // The object changed under an open handle (If-Match failed with 412, or an answer's ETag,
      // size or Last-Modified differed from the version the handle pinned), or an inode/handle
      // the kernel named is unknown → ESTALE: the next open sees the new version.
      return ESTALE;
  }
  return EIO;
}

double TimeoutSeconds(std::chrono::nanoseconds d) {
  constexpr double kYear = 365.0 * 24 * 3600;
  if (d == kForever) return kYear;
  double s = std::chrono::duration<double>(d).count();
  return std::clamp(s, 0.0, kYear);
}

namespace {

// One kernel request's CancelToken, cancelled by the request's FUSE interrupt. Created before
// the work starts (also while it waits in the remote pool's queue); Detach() before the reply.
class RequestToken {
 public:
  RequestToken(fuse_req_t req, std::chrono::nanoseconds timeout) : req_(req), token_(timeout) {
    // May call OnInterrupt at once (already interrupted): it only cancels the token.
    fuse_req_interrupt_func(req_, &RequestToken::OnInterrupt, &token_);
  }
  ~RequestToken() { Detach(); }
  RequestToken(const RequestToken&) = delete;
  RequestToken& operator=(const RequestToken&) = delete;

  // Unregisters the interrupt callback; when this returns, the callback is not running and will
  // not run. REQUIRES: before the request is replied.
  void Detach() {
    if (req_ == nullptr) return;
    fuse_req_interrupt_func(req_, nullptr, nullptr);
    req_ = nullptr;
  }
  const CancelToken* token() const { return &token_; }
  void Cancel() { token_.Cancel(); }
  // Cancels the request because the daemon is stopping: it then fails with EIO, not EINTR.
  void CancelForShutdown() {
    ended_by_shutdown_.store(true, std::memory_order_release);
    token_.Cancel();
  }
  const std::atomic<bool>* ended_by_shutdown() const { return &ended_by_shutdown_; }

 private:
  static void OnInterrupt(fuse_req_t, void* data) { static_cast<CancelToken*>(data)->Cancel(); }

  fuse_req_t req_;
  CancelToken token_;
  std::atomic<bool> ended_by_shutdown_{false};
};

// Network-bound work of one request: runs with the token installed as the thread's current one,
// calls RequestToken::Detach() and replies.
using RemoteJob = std::function<void(fuse_req_t req, RequestToken* tok)>;

// The remote slots and the remote pool (see the file comment).
class RemoteWork {
 public:
  RemoteWork(int slots, int threads, std::chrono::nanoseconds timeout)
      : free_slots_(slots), timeout_(timeout) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this, i] { Loop(i); });
    }
  }
  ~RemoteWork() { Stop(); }

  void Dispatch(fuse_req_t req, RemoteJob job) EXCLUDES(mu_) {
    auto tok = std::make_shared<RequestToken>(req, timeout_);
    bool refuse = false;
    {
      MutexLock l(&mu_);
      refuse = draining_;
    }
    if (refuse) {
      // The daemon is stopping: nothing new waits on the network (cached reads still answer).
      tok->Detach();
      fuse_reply_err(req, EIO);
      return;
    }
    const bool slot = TakeSlot();
    {
      MutexLock l(&mu_);
      if (cancel_all_) tok->Cancel();
      active_.insert(tok.get());
      if (!slot && !stopping_ && !threads_.empty()) {
        queue_.push_back(Item{req, std::move(tok), std::move(job)});
        cv_.Signal();
        return;
      }
    }
    // A free slot (or no pool, or shutting down): on this libfuse worker.
    Run(req, tok.get(), job);
    if (slot) free_slots_.fetch_add(1, std::memory_order_acq_rel);
    Done(tok.get());
  }

  // The daemon is stopping (FuseServer::Drain): from now on a request that would wait on the
  // network is answered EIO at once; those dispatched before go on.
  void BeginShutdown() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    draining_ = true;
  }
  // Waits until no dispatched request is unanswered, or `deadline`; true if none is.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    while (!active_.empty()) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      idle_cv_.WaitFor(deadline - now);
    }
    return true;
  }
  size_t ActiveCount() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return active_.size();
  }
  // Ends every dispatched request with EIO (RequestToken::CancelForShutdown).
  void CancelAllForShutdown() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    for (RequestToken* t : active_) t->CancelForShutdown();
  }

  // Runs `job` on this libfuse worker without a remote slot (work that does not wait on the
  // network, or only for a listing), with a token that the request's interrupt and CancelAll()
  // cancel: long walks (evict, pin) observe it.
  void RunInline(fuse_req_t req, const RemoteJob& job) EXCLUDES(mu_) {
    RequestToken tok(req, timeout_);
    {
      MutexLock l(&mu_);
      if (cancel_all_) tok.Cancel();
      active_.insert(&tok);
    }
    Run(req, &tok, job);
    Done(&tok);
  }

  // The session is over (unmounted or a signal): cancels every request waiting on the network,
  // inline or in the pool, and every one dispatched from now on.
  void CancelAll() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    cancel_all_ = true;
    for (RequestToken* t : active_) t->Cancel();
  }

  // CancelAll(), then joins the pool (its queue drained). Idempotent.
  void Stop() EXCLUDES(mu_) {
    CancelAll();
    {
      MutexLock l(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.SignalAll();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  struct Item {
    fuse_req_t req = nullptr;
    std::shared_ptr<RequestToken> tok;
    RemoteJob job;
  };

  bool TakeSlot() {
    int n = free_slots_.load(std::memory_order_acquire);
    while (n > 0) {
      if (free_slots_.compare_exchange_weak(n, n - 1, std::memory_order_acq_rel)) return true;
    }
    return false;
  }

  static void Run(fuse_req_t req, RequestToken* tok, const RemoteJob& job) {
    t_ended_by_shutdown = tok->ended_by_shutdown();
    // Interrupted (or past its deadline) while queued: reply at once.
    if (Status s = tok->token()->Check("request"); !s.ok()) {
      tok->Detach();
      fuse_reply_err(req, ToErrno(s));
    } else {
      CancelToken::Scope scope(tok->token());
      job(req, tok);
    }
    t_ended_by_shutdown = nullptr;
  }

  void Done(RequestToken* tok) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    active_.erase(tok);
    if (active_.empty()) idle_cv_.SignalAll();
  }

  void Loop(int n) EXCLUDES(mu_) {
    const std::string name = "tierfs-remote-" + std::to_string(n);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    while (true) {
      Item item;
      {
        MutexLock l(&mu_);
        while (queue_.empty() && !stopping_) cv_.Wait();
        if (queue_.empty()) return;  // stopping, queue drained
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      Run(item.req, item.tok.get(), item.job);
      Done(item.tok.get());
    }
  }

  std::atomic<int> free_slots_;
  const std::chrono::nanoseconds timeout_;
  Mutex mu_;
  CondVar cv_{&mu_};
  CondVar idle_cv_{&mu_};  // active_ became empty
  std::deque<Item> queue_ GUARDED_BY(mu_);
  std::unordered_set<RequestToken*> active_ GUARDED_BY(mu_);  // dispatched, not yet replied
  bool cancel_all_ GUARDED_BY(mu_) = false;
  bool draining_ GUARDED_BY(mu_) = false;  // BeginShutdown
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // written only by the constructor and Stop()
};

}  // namespace

// The kernel's max_background (see Init).
constexpr unsigned kMaxBackground = 1024;

// The operations timed for tierfs_fuse_request_duration_seconds{op}; the label is the name
// libfuse's fuse_lowlevel_ops gives the handler.
enum class Op : uint8_t {
  kLookup,
  kForget,
  kGetAttr,
  kOpenDir,
  kReadDir,
  kReadDirPlus,
  kReleaseDir,
  kOpen,
  kRead,
  kRelease,
  kStatFs,
  kGetXattr,
  kListXattr,
  kSetXattr,
  kRemoveXattr,
  kCount,
};
constexpr std::array<const char*, static_cast<size_t>(Op::kCount)> kOpNames = {
    "lookup", "forget",  "getattr", "opendir",  "readdir",   "readdirplus", "releasedir", "open",
    "read",   "release", "statfs",  "getxattr", "listxattr", "setxattr",    "removexattr"};

struct FuseServer::Context {
  // Per-op latency histograms (empty without FuseOptions::metrics), and their registration.
  std::vector<std::unique_ptr<metrics::Histogram>> op_latency;
  metrics::Registry::Registration metrics_reg;  // reset first in ~FuseServer
  Filesystem* fs = nullptr;
  fuse_session* se = nullptr;  // set once the session exists, before the loop runs
  std::unique_ptr<RemoteWork> remote;
  std::string mountpoint;
  // The stop pipe: SIGINT/SIGTERM (OnStopSignal) and the loop's end write a byte, the
  // supervisor (FuseServer::Supervise) waits on it.
  UniqueFd stop_read;
  UniqueFd stop_write;
  double entry_timeout = 60;
  double attr_timeout = 60;
  double negative_timeout = 60;
  uint32_t max_read = 1U << 20;
  uint32_t max_readahead = 1U << 20;
  unsigned max_background = 12;    // the kernel's default
  bool open_in_kernel = false;     // FuseOptions::open_in_kernel
  uint64_t store_on_open_max = 0;  // FuseOptions::store_on_open_max
  // open_in_kernel and the kernel offers it: opens are answered ENOSYS. Set by Init, before any
  // open arrives.
  std::atomic<bool> no_open{false};
  // The largest pipe this process can have (ProbeSplicePipe, at Mount).
  size_t pipe_bytes = 0;
  // The largest pipe libfuse can splice a reply through (0: no splicing): pipe_bytes, set by Init
  // when the kernel offers splicing. A reply from cache files that needs more is copied by
  // ReplyFromFilesCopied instead.
  std::atomic<size_t> splice_pipe_bytes{0};

  // ---- passthrough (see the file comment) ----
  bool passthrough_wanted = false;  // FuseOptions::passthrough, without open_in_kernel
  // Written by the custom I/O's read of INIT, read by its writev of the reply (libfuse handles
  // INIT on one thread before any other request).
  std::atomic<bool> init_seen{false};
  std::atomic<bool> init_answered{false};
  uint64_t init_unique = 0;
  bool init_offers_passthrough = false;
  // Our INIT reply took passthrough: opens are counted per inode from then on.
  std::atomic<bool> passthrough_negotiated{false};
  // Opens may use it: negotiated, and no backing-file ioctl refused yet (CAP_SYS_ADMIN, a cache
  // directory on a stacked file system).
  std::atomic<bool> passthrough{false};
  // The io mode of an inode's outstanding opens, and its backing file while any is passthrough.
  struct KernelIo {
    uint32_t cached_opens = 0;
    uint32_t passthrough_opens = 0;
    int32_t backing_id = 0;           // while passthrough_opens > 0
    std::string version;              // of the backing file's bytes (OpenResult::version)
    bool opened_passthrough = false;  // an open was passthrough: prefer it while the inode lives
  };
  Mutex io_mu;
  std::unordered_map<fuse_ino_t, KernelIo> io GUARDED_BY(io_mu);
};

namespace {

using Context = FuseServer::Context;

Context* Ctx(fuse_req_t req) { return static_cast<Context*>(fuse_req_userdata(req)); }

// Times one request from its handler's start to the end of the scope that replies (a job run
// by Dispatch() carries the start along). Without metrics it reads no clock.
class OpTimer {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  static TimePoint Start(const Context* ctx) {
    return ctx->op_latency.empty() ? TimePoint() : std::chrono::steady_clock::now();
  }
  OpTimer(const Context* ctx, Op op, TimePoint start = {})
      : h_(ctx->op_latency.empty() ? nullptr : ctx->op_latency[static_cast<size_t>(op)].get()),
        start_(h_ != nullptr && start == TimePoint() ? std::chrono::steady_clock::now() : start) {}
  ~OpTimer() {
    if (h_ != nullptr) h_->ObserveDuration(std::chrono::steady_clock::now() - start_);
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  metrics::Histogram* const h_;
  const TimePoint start_;
};

// tierfs_fuse_* of docs/operations.md, "Metrics": the op histograms, and the Filesystem's and its
// Prefetcher's counters (the same atomics as the fuse.* fields of user.tierfs.stats).
void CollectFuseMetrics(const Context& ctx, metrics::Exposition* e) {
  for (size_t i = 0; i < ctx.op_latency.size(); ++i) {
    const metrics::Histogram::Snapshot snap = ctx.op_latency[i]->Snap();
    const metrics::Labels l = {{"op", kOpNames[i]}};
    e->AddCounter("tierfs_fuse_requests_total", "FUSE requests answered, by operation.", l,
                  static_cast<double>(snap.count));
    e->AddHistogram("tierfs_fuse_request_duration_seconds",
                    "FUSE request latency, from the handler's start to its reply, by operation.", l,
                    snap);
  }
  const FsCounters& c = ctx.fs->counters();
  e->AddCounter("tierfs_fuse_lookups_total", "Lookups.", {}, c.lookups);
  e->AddCounter("tierfs_fuse_negative_lookups_total", "Lookups of names that do not exist.", {},
                c.negative_lookups);
  e->AddCounter("tierfs_fuse_opens_total", "Files opened.", {}, c.opens);
  e->AddCounter("tierfs_fuse_reads_total", "File reads.", {}, c.reads);
  e->AddCounter("tierfs_fuse_read_bytes_total", "Bytes returned by file reads.", {}, c.read_bytes);
  const PrefetcherStats& p = ctx.fs->prefetch_stats();
  e->AddCounter("tierfs_fuse_readahead_requests_total", "Readahead windows requested.", {},
                p.readahead_requests);
  e->AddCounter("tierfs_fuse_next_file_prefetches_total",
                "Files queued by the next-files prefetch.", {}, p.next_file_prefetches);
  e->AddCounter("tierfs_fuse_next_file_opens_total",
                "Small-file opens in directories read file after file.", {}, p.next_file_opens);
  e->AddCounter("tierfs_fuse_next_file_hits_total",
                "Of those, opens that found the file in L1 or L2 already.", {}, p.next_file_hits);
  e->AddCounter("tierfs_fuse_random_hydrations_total",
                "Open files hydrated in the background after random reads kept missing.", {},
                p.random_hydrations);
  e->AddCounter("tierfs_fuse_stale_reads_total",
                "Reads failed with ESTALE: the object changed under an open file.", {},
                c.stale_reads);
  e->AddCounter("tierfs_fuse_open_stores_total",
                "Small files stored in the kernel's page cache with their open.", {},
                c.open_stores);
  e->AddCounter("tierfs_fuse_passthrough_opens_total",
                "Opens answered with an L2 file the kernel reads itself (FUSE passthrough).", {},
                c.passthrough_opens);
  e->AddGauge("tierfs_fuse_inodes", "Inodes the kernel holds.", {},
              static_cast<double>(ctx.fs->InodeCount()));
}

// ---- libfuse's own messages → Logger(Module::kFuse) ----

std::mutex g_last_error_mu;
std::string g_last_error;  // the last error libfuse logged, for mount failure messages

void FuseLog(enum fuse_log_level level, const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  std::string_view msg(buf);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.remove_suffix(1);
  spdlog::logger& log = Logger(Module::kFuse);
  if (level <= FUSE_LOG_ERR) {
    {
      std::lock_guard<std::mutex> l(g_last_error_mu);
      g_last_error = std::string(msg);
    }
    log.error("libfuse: {}", msg);
  } else if (level == FUSE_LOG_WARNING) {
    log.warn("libfuse: {}", msg);
  } else if (level == FUSE_LOG_DEBUG) {
    log.debug("libfuse: {}", msg);
  } else {
    log.info("libfuse: {}", msg);
  }
}

std::string TakeLastFuseError() {
  std::lock_guard<std::mutex> l(g_last_error_mu);
  std::string e = std::move(g_last_error);
  g_last_error.clear();
  return e;
}

// ---- conversions ----

struct stat ToStat(const InodeAttr& a) {
  struct stat st {};
  st.st_ino = a.ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blksize = a.blksize;
  st.st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  int64_t sec = a.mtime_ns / 1'000'000'000;
  int64_t nsec = a.mtime_ns % 1'000'000'000;
  if (nsec < 0) {
    nsec += 1'000'000'000;
    --sec;
  }
  st.st_mtim.tv_sec = sec;
  st.st_mtim.tv_nsec = nsec;
  st.st_ctim = st.st_mtim;
  st.st_atim = st.st_mtim;
  return st;
}

fuse_entry_param ToEntry(const Context& ctx, const LookupEntry& e) {
  fuse_entry_param p{};
  p.ino = e.attr.ino;
  p.generation = e.generation;
  p.attr = ToStat(e.attr);
  p.attr_timeout = ctx.attr_timeout;
  p.entry_timeout = ctx.entry_timeout;
  return p;
}

// ---- passthrough: the kernel ABI libfuse 3.14 lacks (<linux/fuse.h> of Linux 6.9+) ----

namespace kabi {
constexpr uint32_t kOpInit = 26;                 // FUSE_INIT
constexpr uint32_t kInitExt = 1U << 30;          // FUSE_INIT_EXT: flags2 is valid
constexpr uint32_t kPassthroughFlag2 = 1U << 5;  // FUSE_PASSTHROUGH (1ULL << 37), in flags2
constexpr uint32_t kOpenNoFlush = 1U << 5;       // FOPEN_NOFLUSH
constexpr uint32_t kOpenPassthrough = 1U << 7;   // FOPEN_PASSTHROUGH
struct InHeader {
  uint32_t len, opcode;
  uint64_t unique, nodeid;
  uint32_t uid, gid, pid;
  uint16_t total_extlen, padding;
};
struct InitIn {
  uint32_t major, minor, max_readahead, flags, flags2;
};
struct OutHeader {
  uint32_t len;
  int32_t error;
  uint64_t unique;
};
struct InitOut {
  uint32_t major, minor, max_readahead, flags;
  uint16_t max_background, congestion_threshold;
  uint32_t max_write, time_gran;
  uint16_t max_pages, map_alignment;
  uint32_t flags2, max_stack_depth;
  uint16_t request_timeout;
  uint16_t unused[11];
};
struct OpenOut {
  uint64_t fh;
  uint32_t open_flags;
  int32_t backing_id;
};
struct BackingMap {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
static_assert(sizeof(InHeader) == 40 && sizeof(OutHeader) == 16 && sizeof(InitOut) == 64 &&
              sizeof(OpenOut) == 16 && sizeof(BackingMap) == 16);
constexpr unsigned long kIocBackingOpen = _IOW(229, 1, BackingMap);  // FUSE_DEV_IOC_BACKING_OPEN
constexpr unsigned long kIocBackingClose = _IOW(229, 2, uint32_t);   // FUSE_DEV_IOC_BACKING_CLOSE
}  // namespace kabi

// The handle of a passthrough open carries this bit (the kernel passes fh back unread): its
// release knows the mode it was counted in. Filesystem handles count up from 1 and never reach it.
constexpr uint64_t kFhPassthrough = 1ULL << 63;

// The custom I/O (fuse_session_custom_io): plain read/writev/splice on the same fd, except that
// the INIT request is looked at and the reply to it is amended.
ssize_t IoRead(int fd, void* buf, size_t len, void* userdata) {
  const ssize_t n = ::read(fd, buf, len);
  auto* ctx = static_cast<Context*>(userdata);
  if (n >= static_cast<ssize_t>(sizeof(kabi::InHeader) + sizeof(kabi::InitIn)) &&
      !ctx->init_seen.load(std::memory_order_relaxed)) {
    kabi::InHeader h;
    std::memcpy(&h, buf, sizeof(h));
    if (h.opcode == kabi::kOpInit) {
      kabi::InitIn in;
      std::memcpy(&in, static_cast<const char*>(buf) + sizeof(h), sizeof(in));
      ctx->init_unique = h.unique;
      ctx->init_offers_passthrough =
          (in.flags & kabi::kInitExt) != 0 && (in.flags2 & kabi::kPassthroughFlag2) != 0;
      ctx->init_seen.store(true, std::memory_order_release);
    }
  }
  return n;
}

ssize_t IoWritev(int fd, struct iovec* iov, int count, void* userdata) {
  auto* ctx = static_cast<Context*>(userdata);
  if (ctx->init_seen.load(std::memory_order_acquire) &&
      !ctx->init_answered.load(std::memory_order_relaxed) && count >= 2 &&
      iov[0].iov_len == sizeof(kabi::OutHeader) &&
      iov[1].iov_len >= offsetof(kabi::InitOut, request_timeout)) {
    kabi::OutHeader h;
    std::memcpy(&h, iov[0].iov_base, sizeof(h));
    if (h.unique == ctx->init_unique) {
      ctx->init_answered.store(true, std::memory_order_relaxed);
      if (h.error == 0 && ctx->init_offers_passthrough) {
        kabi::InitOut out{};
        const size_t n = std::min(sizeof(out), iov[1].iov_len);
        std::memcpy(&out, iov[1].iov_base, n);
        out.flags |= kabi::kInitExt;
        out.flags2 |= kabi::kPassthroughFlag2;
        // Backing files on a file system that stacks on none (ext4, xfs: L2's cache directory);
        // a stacked one (overlayfs) makes the first backing open fail, and passthrough goes off.
        out.max_stack_depth = 1;
        std::memcpy(iov[1].iov_base, &out, n);
        ctx->passthrough_negotiated.store(true);
        ctx->passthrough.store(true);
        Logger(Module::kFuse).info("fuse connection: passthrough on (files L2 holds whole)");
      }
    }
  }
  return ::writev(fd, iov, count);
}

ssize_t IoSpliceReceive(int fdin, off_t* offin, int fdout, off_t* offout, size_t len,
                        unsigned int flags, void*) {
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

ssize_t IoSpliceSend(int fdin, off_t* offin, int fdout, off_t* offout, size_t len,
                     unsigned int flags, void*) {
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

// Registers `fd` as a backing file of the connection: its id (> 0), or 0 if the kernel refused
// (then passthrough goes off for this mount: the reason holds for every cache file).
int32_t BackingOpen(Context* ctx, int fd) {
  kabi::BackingMap m{};
  m.fd = fd;
  const int id = ::ioctl(fuse_session_fd(ctx->se), kabi::kIocBackingOpen, &m);
  if (id > 0) return id;
  const int err = errno;
  if (ctx->passthrough.exchange(false)) {
    Logger(Module::kFuse)
        .warn("passthrough off: the kernel refused a backing file ({}){}", std::strerror(err),
              err == EPERM ? "; it needs CAP_SYS_ADMIN"
                           : (err == EINVAL ? "; is the cache directory on a stacked file "
                                              "system (overlayfs)?"
                                            : ""));
  }
  return 0;
}

void BackingClose(Context* ctx, int32_t id) {
  uint32_t arg = static_cast<uint32_t>(id);
  if (::ioctl(fuse_session_fd(ctx->se), kabi::kIocBackingClose, &arg) != 0) {
    Logger(Module::kFuse).warn("closing backing file {}: {}", id, std::strerror(errno));
  }
}

// How one open is answered when the connection has passthrough.
struct OpenIo {
  bool passthrough = false;
  int32_t backing_id = 0;
  // Another version than the one the inode's passthrough opens read: refused (ESTALE).
  bool refused = false;
  // Cached mode for an inode whose opens since the lookup were all passthrough: the kernel holds
  // none of its pages, so they may be stored with this open (as with a first open).
  bool may_store = false;
};

// Chooses the io mode of an open of `ino` (answered with `r.fh`) and counts it, before the
// reply. Passthrough while the inode has passthrough opens, with their backing file (the kernel
// allows no other mode, and one backing file per inode): an open of another version (the object
// changed at the origin while those are open) is refused, since the kernel would serve the old
// version's bytes to it (mmap maps the backing file even with FOPEN_DIRECT_IO). Else cached
// while the inode has cached opens. Else passthrough when the file can have a backing file and
// either the kernel holds none of the file's pages (its first open since the lookup) or the
// inode's opens since then were passthrough, unless such a reopened file's backing pages are all
// in the page cache (read lately): then it is opened cached and stored with its open (the kernel
// holds none of its pages), because a passthrough read marks the inode's atime stale on this
// writable mount, so every later stat(2) of it asks us, where a file in the inode's own page
// cache costs no request at all when it is read again.
OpenIo ChooseOpenIo(Context* ctx, fuse_ino_t ino, const OpenResult& r) {
  bool preferred = r.first_open;
  if (!preferred) {
    MutexLock l(&ctx->io_mu);
    auto it = ctx->io.find(ino);
    preferred = it != ctx->io.end() && it->second.opened_passthrough;
  }
  FileExtentRef file;
  bool warm = false;
  if (preferred && !r.attr_changed && ctx->passthrough.load()) {
    if (auto f = ctx->fs->FileForKernel(r.fh); f.ok()) {
      file = std::move(f).value();
      // Not on a first open: verifying a block after a restart reads its file, which would
      // make every first use look like a file read lately.
      warm = !r.first_open && file->AllCached();
    }
  }
  MutexLock l(&ctx->io_mu);
  Context::KernelIo& k = ctx->io[ino];
  OpenIo io;
  if (k.passthrough_opens > 0) {
    if (r.version != k.version) {
      io.refused = true;
      return io;
    }
    ++k.passthrough_opens;
    io.passthrough = true;
    io.backing_id = k.backing_id;
    return io;
  }
  if (k.cached_opens == 0 && file != nullptr && !warm && ctx->passthrough.load()) {
    if (const int32_t id = BackingOpen(ctx, file->fd()); id > 0) {
      k.passthrough_opens = 1;
      k.backing_id = id;
      k.version = r.version;
      k.opened_passthrough = true;
      io.passthrough = true;
      io.backing_id = id;
      return io;
    }
  }
  // No open outstanding, and every open since the lookup was passthrough: the inode's page
  // cache is empty, and no reader of another version can see a store.
  io.may_store = k.opened_passthrough && k.cached_opens == 0;
  k.opened_passthrough = false;  // from now on its pages are the inode's
  ++k.cached_opens;
  return io;
}

// The release (or failed reply) of an open counted by ChooseOpenIo.
void ReleaseOpenIo(Context* ctx, fuse_ino_t ino, bool passthrough) {
  MutexLock l(&ctx->io_mu);
  auto it = ctx->io.find(ino);
  if (it == ctx->io.end()) return;
  Context::KernelIo& k = it->second;
  if (passthrough) {
    if (k.passthrough_opens > 0 && --k.passthrough_opens == 0) {
      BackingClose(ctx, k.backing_id);
      k.backing_id = 0;
    }
  } else if (k.cached_opens > 0) {
    --k.cached_opens;
  }
  if (k.passthrough_opens == 0 && k.cached_opens == 0 && !k.opened_passthrough) ctx->io.erase(it);
}

// The kernel forgot `ino`: its preference goes (the entry itself once its last open is released).
void ForgetOpenIo(Context* ctx, fuse_ino_t ino) {
  MutexLock l(&ctx->io_mu);
  auto it = ctx->io.find(ino);
  if (it == ctx->io.end()) return;
  it->second.opened_passthrough = false;
  if (it->second.passthrough_opens == 0 && it->second.cached_opens == 0) ctx->io.erase(it);
}

// ---- init ----

// "major:minor" of the file system mounted at `mountpoint`, from /proc/self/mountinfo (no
// request to our own mount, which is not being served yet). "" if not found.
std::string MountDevice(const std::string& mountpoint) {
  FILE* f = std::fopen("/proc/self/mountinfo", "r");
  if (f == nullptr) return "";
  std::string found;
  char line[4096];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT ... (spaces in paths are escaped as \040)
    char dev[64], root[2048], mnt[2048];
    if (std::sscanf(line, "%*d %*d %63s %2047s %2047s", dev, root, mnt) != 3) continue;
    std::string m;
    for (const char* p = mnt; *p; ++p) {
      if (p[0] == '\\' && p[1] && p[2] && p[3]) {
        m.push_back(static_cast<char>((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0')));
        p += 3;
      } else {
        m.push_back(*p);
      }
    }
    if (m == mountpoint) found = dev;  // the last match is the top mount
  }
  std::fclose(f);
  return found;
}

// The pipe libfuse needs to splice a reply of `bytes` in `buffers` buffers (fuse_lowlevel.c,
// fuse_send_data_iov: a page per buffer, one for the header and one spare, plus the bytes).
size_t SplicePipeNeed(size_t bytes, size_t buffers) {
  constexpr size_t kOutHeader = 16;  // struct fuse_out_header
  return static_cast<size_t>(::sysconf(_SC_PAGESIZE)) * (buffers + 2) + kOutHeader + bytes;
}

// The largest pipe this process can have for a reply of up to `max_read` bytes: F_SETPIPE_SZ
// beyond fs.pipe-max-size (1 MiB by default) needs CAP_SYS_RESOURCE, which a root daemon in a
// container often lacks. Then a 1 MiB read reply (1 MiB + header) cannot be spliced, and
// libfuse's fallback allocates (and page-faults) a reply-sized buffer for every reply.
size_t ProbeSplicePipe(uint32_t max_read) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return 0;
  const size_t want = SplicePipeNeed(max_read, 4);
  long got = ::fcntl(p[0], F_SETPIPE_SZ, static_cast<int>(want));
  if (got < 0) {
    unsigned long max = 0;
    if (FILE* f = std::fopen("/proc/sys/fs/pipe-max-size", "r")) {
      if (std::fscanf(f, "%lu", &max) != 1) max = 0;
      std::fclose(f);
    }
    if (max > 0) (void)::fcntl(p[0], F_SETPIPE_SZ, static_cast<int>(max));
    got = ::fcntl(p[0], F_GETPIPE_SZ);
  }
  ::close(p[0]);
  ::close(p[1]);
  return got > 0 ? static_cast<size_t>(got) : 0;
}

// The kernel proposes its default readahead (128KiB) and the INIT reply can only lower it. Raising
// the mount's bdi read_ahead_kb before the reply lets sequential readers get max_readahead-sized
// FUSE reads (fewer round trips). Needs root; otherwise the default stays.
void RaiseKernelReadahead(const Context& ctx) {
  std::string dev = MountDevice(ctx.mountpoint);
  if (dev.empty()) return;
  std::string path = "/sys/class/bdi/" + dev + "/read_ahead_kb";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    Logger(Module::kFuse).debug("cannot raise {}: {}", path, std::strerror(errno));
    return;
  }
  std::fprintf(f, "%u\n", ctx.max_readahead / 1024);
  std::fclose(f);
}

void Init(void* userdata, struct fuse_conn_info* conn) {
  auto* ctx = static_cast<Context*>(userdata);
  // ls -l and os.scandir + stat get attributes with the names: one round trip per page. Always,
  // not "auto": the kernel's heuristic sends READDIRPLUS only for the first page and for pages
  // read after a lookup in the directory, and ls -l / find read a large directory (find: up to
  // 100,000 names) before they stat it, so a cold listing of 200,000 files became ~190,000
  // LOOKUPs (9.1 s; 6.2 s with every page a READDIRPLUS). The cost: a warm listing
  // passes the attributes again (0.9 s -> 1.3 s for 200,000 names), and a names-only listing
  // makes the entries' inodes too.
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  // Several reads of one file in flight at once (kernel readahead overlaps the demand read).
  if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
  // Lookups and readdirs of one directory in parallel: the Filesystem is thread-safe. (libfuse
  // before 3.16 never passes this flag on to the kernel: there, lookups in one directory are
  // serialised by the kernel, and one waiting for the directory's listing holds up the others.)
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // A changed size/mtime seen by getattr drops the kernel's cached pages (pairs with keep_cache).
  if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
  // Splice for replies from cache files only (see the file comment); memory replies are written
  // directly (FUSE_BUF_NO_SPLICE, fuse_reply_iov).
  conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_SPLICE_READ);
  // Opens handled by the kernel (FuseOptions::open_in_kernel): nothing to ask for in `want`;
  // an open answered ENOSYS turns it on.
  ctx->no_open.store(ctx->open_in_kernel && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0);
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) {
    conn->want |= FUSE_CAP_SPLICE_WRITE;
    ctx->splice_pipe_bytes.store(ctx->pipe_bytes);
  }
  conn->max_read = ctx->max_read;
  conn->max_readahead = ctx->max_readahead;
  // Readahead and async reads are "background" requests: the kernel holds back all beyond
  // max_background (default 12) until one is answered. With its default, a dozen readers stuck on
  // a stalled origin would keep every other reader's reads, cached ones included, from reaching
  // us. So the kernel passes on up to kMaxBackground: cached reads are answered at once, the
  // others wait in the remote slots or the remote pool's queue (memory, not threads), each until
  // its deadline. (The kernel sends no INTERRUPT for background requests: a killed reader's
  // readahead ends at its deadline.) The kernel caps it at fs.fuse.max_user_bgreq for a mount by
  // an unprivileged user.
  conn->max_background = ctx->max_background;
  conn->congestion_threshold = std::max(1U, ctx->max_background * 3 / 4);
  RaiseKernelReadahead(*ctx);
  Logger(Module::kFuse)
      .info(
          "fuse connection: protocol {}.{}, max_read {}, max_readahead {}, max_background {}, "
          "readdirplus {}, parallel_dirops {}, opens in the kernel {}, splice pipe {} bytes "
          "(capable {:#x} want {:#x})",
          conn->proto_major, conn->proto_minor, conn->max_read, conn->max_readahead,
          conn->max_background, (conn->want & FUSE_CAP_READDIRPLUS) != 0,
          (conn->want & FUSE_CAP_PARALLEL_DIROPS) != 0, ctx->no_open.load(),
          ctx->splice_pipe_bytes.load(), conn->capable, conn->want);
}

// ---- lookup / forget / getattr ----

// A positive entry, or a negative one (ino 0 with negative_timeout) so the kernel caches the miss.
Result<fuse_entry_param> DoLookup(Context* ctx, fuse_ino_t parent, const char* name) {
  auto r = ctx->fs->Lookup(parent, name);
  if (!r.ok()) {
    if (r.status().IsNotFound() && ctx->negative_timeout > 0) {
      fuse_entry_param e{};
      e.ino = 0;
      e.entry_timeout = ctx->negative_timeout;
      return e;
    }
    return r.status();
  }
  return ToEntry(*ctx, *r);
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Context* ctx = Ctx(req);
  const auto start = OpTimer::Start(ctx);
  // `name` lives in libfuse's request buffer, reused once this handler returns: copied.
  ctx->remote->Dispatch(req,
                        [ctx, parent, n = std::string(name), start](fuse_req_t r, RequestToken* t) {
                          OpTimer timer(ctx, Op::kLookup, start);
                          auto e = DoLookup(ctx, parent, n.c_str());
                          t->Detach();
                          if (!e.ok()) {
                            fuse_reply_err(r, ToErrno(e.status()));
                            return;
                          }
                          // An interrupted lookup never reached the kernel: take back the lookup
                          // count it added.
                          if (fuse_reply_entry(r, &*e) == -ENOENT && e->ino != 0)
                            ctx->fs->Forget(e->ino, 1);
                        });
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Context* ctx = Ctx(req);
  OpTimer timer(ctx, Op::kForget);
  if (ctx->fs->Forget(ino, nlookup) && ctx->passthrough_negotiated.load()) ForgetOpenIo(ctx, ino);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
  Context* ctx = Ctx(req);
  OpTimer timer(ctx, Op::kForget);
  const bool io = ctx->passthrough_negotiated.load();
  for (size_t i = 0; i < count; ++i) {
    if (ctx->fs->Forget(forgets[i].ino, forgets[i].nlookup) && io) {
      ForgetOpenIo(ctx, forgets[i].ino);
    }
  }
  fuse_reply_none(req);
}

Result<struct stat> DoGetAttr(Context* ctx, fuse_ino_t ino) {
  TIERFS_ASSIGN_OR_RETURN(InodeAttr a, ctx->fs->GetAttr(ino));
  return ToStat(a);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  Context* ctx = Ctx(req);
  const auto start = OpTimer::Start(ctx);
  // A file's attributes come from its directory's listing, which may be (re)listed.
  ctx->remote->Dispatch(req, [ctx, ino, start](fuse_req_t r, RequestToken* t) {
    OpTimer timer(ctx, Op::kGetAttr, start);
    auto st = DoGetAttr(ctx, ino);
    t->Detach();
    if (!st.ok()) {
      fuse_reply_err(r, ToErrno(st.status()));
      return;
    }
    fuse_reply_attr(r, &*st, ctx->attr_timeout);
  });
}

// ---- directories ----

void OpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Context* ctx = Ctx(req);
  OpTimer timer(ctx, Op::kOpenDir);
  auto dh = ctx->fs->OpenDir(ino);
  if (!dh.ok()) {
    fuse_reply_err(
        req, dh.status().code() == Status::Code::kInvalidArgument ? ENOTDIR : ToErrno(dh.status()));
    return;
  }
  fi->fh = *dh;
  if (fuse_reply_open(req, fi) == -ENOENT) ctx->fs->ReleaseDir(*dh);  // interrupted
}

struct DirReply {
  std::span<const char> buf;       // the filled part of the calling thread's reply buffer
  std::vector<InodeId> looked_up;  // readdirplus entries that added a lookup
};

// The reply buffer of this worker thread, at least `size` bytes. The kernel asks for up to
// 1 MiB per readdir with large max_pages; allocating (and zero-filling) that per call was the
// main cost of a warm `find`, so each thread keeps one, uninitialised.
char* ReplyBuffer(size_t size) {
  thread_local std::unique_ptr<char[]> buf;
  thread_local size_t cap = 0;
  if (cap < size) {
    buf = std::make_unique_for_overwrite<char[]>(size);
    cap = size;
  }
  return buf.get();
}

// Fills one reply buffer of at most `size` bytes from `off`. For readdirplus each entry that
// fits adds a lookup (the kernel creates its dentry); "." and ".." go with ino 0, which the
// kernel skips.
Result<DirReply> DoReadDir(Context* ctx, fuse_req_t req, fuse_ino_t ino, uint64_t dh, size_t size,
                           off_t off, bool plus) {
  DirReply reply;
  char* const out = ReplyBuffer(size);
  size_t used = 0;
  uint64_t pos = static_cast<uint64_t>(off);
  const size_t batch = std::clamp<size_t>(size / 64, 8, 512);
  std::vector<DirItem> items;
  bool full = false;
  while (!full) {
    Status s = ctx->fs->ReadDir(dh, pos, batch, &items);
    if (!s.ok()) {
      if (used > 0) break;  // hand out what fits; the kernel asks again
      return s;
    }
    if (items.empty()) break;  // end of directory
    for (const DirItem& item : items) {
      const size_t rem = size - used;
      char* at = out + used;
      if (!plus) {
        struct stat st {};
        st.st_ino = item.ino;
        st.st_mode = item.is_dir ? S_IFDIR : S_IFREG;
        size_t need = fuse_add_direntry(req, at, rem, item.name.c_str(), &st,
                                        static_cast<off_t>(item.next_offset));
        if (need > rem) {
          full = true;
          break;
        }
        used += need;
      } else {
        fuse_entry_param e{};
        size_t need = fuse_add_direntry_plus(req, nullptr, 0, item.name.c_str(), &e,
                                             static_cast<off_t>(item.next_offset));
        if (need > rem) {
          full = true;
          break;
        }
        if (item.is_dot) {
          e.attr.st_ino = item.ino;
          e.attr.st_mode = S_IFDIR;
        } else {
          auto le = ctx->fs->LookupDirItem(ino, item);
          if (!le.ok()) {
            if (used > 0) {
              full = true;
              break;
            }
            return le.status();
          }
          e = ToEntry(*ctx, *le);
          reply.looked_up.push_back(e.ino);
        }
        used += fuse_add_direntry_plus(req, at, rem, item.name.c_str(), &e,
                                       static_cast<off_t>(item.next_offset));
      }
      pos = item.next_offset;
    }
  }
  reply.buf = std::span<const char>(out, used);
  return reply;
}

void ReadDirCommon(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info* fi, bool plus) {
  Context* ctx = Ctx(req);
  const uint64_t dh = fi->fh;
  const auto start = OpTimer::Start(ctx);
  ctx->remote->Dispatch(req, [=](fuse_req_t q, RequestToken* t) {
    OpTimer timer(ctx, plus ? Op::kReadDirPlus : Op::kReadDir, start);
    auto r = DoReadDir(ctx, q, ino, dh, size, off, plus);
    t->Detach();
    if (!r.ok()) {
      fuse_reply_err(q, ToErrno(r.status()));
      return;
    }
    if (fuse_reply_buf(q, r->buf.data(), r->buf.size()) == -ENOENT) {
      for (InodeId i : r->looked_up) ctx->fs->Forget(i, 1);  // interrupted: the kernel saw none
    }
  });
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, /*plus=*/false);
}

void ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                 struct fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, /*plus=*/true);
}

void ReleaseDir(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  OpTimer timer(Ctx(req), Op::kReleaseDir);
  Ctx(req)->fs->ReleaseDir(fi->fh);
  fuse_reply_err(req, 0);
}

// ---- files ----

bool StoreInKernel(Context* ctx, fuse_ino_t ino, uint64_t fh);

void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Context* ctx = Ctx(req);
  // Read-only: write access is refused here, before anything is fetched (the mount is not
  // MS_RDONLY so that user.tierfs.* setxattr reaches us; see Mount).
  if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
    fuse_reply_err(req, EROFS);
    return;
  }
  // Open revalidates the object (a HEAD when its metadata is stale). `fi` lives in libfuse's
  // request handling, gone once this handler returns: copied.
  const auto start = OpTimer::Start(ctx);
  ctx->remote->Dispatch(req, [ctx, ino, f = *fi, start](fuse_req_t q, RequestToken* t) mutable {
    OpTimer timer(ctx, Op::kOpen, start);
    auto r = ctx->fs->Open(ino);
    t->Detach();
    if (!r.ok()) {
      fuse_reply_err(
          q, r.status().code() == Status::Code::kInvalidArgument ? EISDIR : ToErrno(r.status()));
      return;
    }
    if (ctx->no_open.load()) {
      // Opens in the kernel: this one did its checks (and pinned the version at the inode); ENOSYS
      // tells the kernel to open files itself from now on, keeping their pages (FOPEN_KEEP_CACHE;
      // AUTO_INVAL_DATA drops them when getattr shows another size or mtime). Reads then come
      // with fh 0 (Filesystem::ReadInode).
      ctx->fs->Release(r->fh);
      fuse_reply_err(q, ENOSYS);
      if (r->attr_changed && ctx->se != nullptr)
        fuse_lowlevel_notify_inval_inode(ctx->se, ino, -1, 0);
      return;
    }
    bool may_store = false;
    if (ctx->passthrough_negotiated.load()) {
      const OpenIo io = ChooseOpenIo(ctx, ino, *r);
      may_store = io.may_store;
      if (io.refused) {
        Logger(Module::kFuse)
            .warn(
                "open of inode {}: the object changed while open files of this host read the "
                "previous version through passthrough; ESTALE until they are closed",
                ino);
        ctx->fs->Release(r->fh);
        fuse_reply_err(q, ESTALE);
        // The inode took the new size: the kernel's attributes go, as after any open that saw it.
        if (r->attr_changed && ctx->se != nullptr) {
          fuse_lowlevel_notify_inval_inode(ctx->se, ino, -1, 0);
        }
        return;
      }
      if (io.passthrough) {
        kabi::OpenOut out{};
        out.fh = r->fh | kFhPassthrough;
        out.open_flags = kabi::kOpenPassthrough | kabi::kOpenNoFlush;
        out.backing_id = io.backing_id;
        if (fuse_reply_buf(q, reinterpret_cast<const char*>(&out), sizeof(out)) == -ENOENT) {
          ctx->fs->Release(r->fh);  // interrupted
          ReleaseOpenIo(ctx, ino, /*passthrough=*/true);
          return;
        }
        ctx->fs->NotePassthroughOpen();
        if (r->attr_changed && ctx->se != nullptr) {
          fuse_lowlevel_notify_inval_inode(ctx->se, ino, -1, 0);  // as below
        }
        return;
      }
    }
    f.fh = r->fh;
    // A first open finds no pages of the file in the kernel, so a store now needs no keep_cache
    // check; a changed size waits for the kernel to learn it (notify_store would extend i_size).
    const bool stored = (r->first_open || may_store) && !r->attr_changed &&
                        ctx->store_on_open_max > 0 && StoreInKernel(ctx, ino, r->fh);
    f.keep_cache = r->keep_cache || stored ? 1 : 0;
    f.direct_io = 0;
    f.noflush = 1;  // nothing to flush on close(2) of a read-only file
    if (fuse_reply_open(q, &f) == -ENOENT) {
      ctx->fs->Release(r->fh);  // interrupted
      if (ctx->passthrough_negotiated.load()) ReleaseOpenIo(ctx, ino, /*passthrough=*/false);
      return;
    }
    if (r->attr_changed && ctx->se != nullptr) {
      // A new version of another size (seen at once after an ESTALE, whatever the attribute
      // timeout): drop the kernel's cached attributes (offset -1: not the pages), so its i_size is
      // fetched again instead of cutting reads at the old size. After the reply: not in the path
      // of this open.
      fuse_lowlevel_notify_inval_inode(ctx->se, ino, -1, 0);
    }
  });
}

void ReplyRead(fuse_req_t req, const Result<std::vector<BlockSlice>>& slices);

// fh 0: no open handle (opens in the kernel, FuseOptions::open_in_kernel): the inode's version.
Result<std::vector<BlockSlice>> ReadFile(Context* ctx, fuse_ino_t ino, uint64_t fh, uint64_t offset,
                                         size_t size, const CancelToken* token) {
  if (fh != 0) return ctx->fs->Read(fh, offset, size, token);
  auto r = ctx->fs->ReadInode(ino, offset, size, token);
  if (r.status().code() == Status::Code::kFailedPrecondition && ctx->se != nullptr) {
    // The inode took the origin's new version: drop the kernel's attributes (offset -1: not the
    // pages, so no page lock is waited for here), so getattr shows the new size and mtime and
    // AUTO_INVAL_DATA drops the old pages.
    fuse_lowlevel_notify_inval_inode(ctx->se, ino, -1, 0);
  }
  return r;
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info* fi) {
  Context* ctx = Ctx(req);
  if (off < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  const uint64_t fh = fi->fh & ~kFhPassthrough;  // (the kernel reads passthrough files itself)
  const auto offset = static_cast<uint64_t>(off);
  const auto start = OpTimer::Start(ctx);
  if (fh == 0 ? ctx->fs->ReadInodeIsLocal(ino, offset, size)
              : ctx->fs->ReadIsLocal(fh, offset, size)) {
    // Every block is in L1/L2: served here, without a remote slot.
    OpTimer timer(ctx, Op::kRead, start);
    ReplyRead(req, ReadFile(ctx, ino, fh, offset, size, nullptr));
    return;
  }
  ctx->remote->Dispatch(req, [ctx, ino, fh, offset, size, start](fuse_req_t q, RequestToken* t) {
    OpTimer timer(ctx, Op::kRead, start);
    auto slices = ReadFile(ctx, ino, fh, offset, size, t->token());
    t->Detach();
    ReplyRead(q, slices);
  });
}

// This thread's buffer for bytes read out of cache files (ReplyFromFilesCopied, StoreInKernel):
// kept from request to request, so at most one per thread, of the largest size it was asked for.
std::vector<std::byte>& ThreadBuffer(size_t bytes) {
  thread_local std::vector<std::byte> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf;
}

// A reply with file slices that libfuse could not splice: the file bytes are read into this
// thread's buffer (ThreadBuffer), kept from reply to reply (libfuse's fallback would allocate,
// fault in and free one per reply: 11% of the daemon's time in a warm L2 read), and written with
// the memory slices in one writev. A failed read of a cache file is EIO (never a short reply).
void ReplyFromFilesCopied(fuse_req_t req, const std::vector<BlockSlice>& v) {
  size_t file_bytes = 0;
  for (const BlockSlice& s : v) file_bytes += s.file ? s.length : 0;
  std::vector<std::byte>& buf = ThreadBuffer(file_bytes);
  std::vector<struct iovec> iov(v.size());
  size_t at = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].file) {
      std::span<std::byte> out(buf.data() + at, v[i].length);
      if (!v[i].file->ReadAt(v[i].offset, out).ok()) {
        fuse_reply_err(req, EIO);
        return;
      }
      iov[i].iov_base = out.data();
      at += v[i].length;
    } else {
      iov[i].iov_base = const_cast<std::byte*>(v[i].block->data().data() + v[i].offset);
    }
    iov[i].iov_len = v[i].length;
  }
  fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
}

// A fuse_bufvec over the slices `v` (not empty), built in `storage` (fuse_bufvec ends in a
// one-element array: room for v.size() buffers): a cache-file slice is a file buffer libfuse
// splices from (with SPLICE_WRITE: the file's page-cache pages into a pipe and on to /dev/fuse),
// a memory slice a memory buffer. The slices must outlive the bufvec's use.
fuse_bufvec* SpliceBufvec(const std::vector<BlockSlice>& v, std::vector<std::byte>* storage) {
  storage->assign(sizeof(fuse_bufvec) + (v.size() - 1) * sizeof(fuse_buf), std::byte{0});
  auto* bv = new (storage->data()) fuse_bufvec{};
  bv->count = v.size();
  for (size_t i = 0; i < v.size(); ++i) {
    fuse_buf& b = bv->buf[i];
    b = fuse_buf{};
    b.size = v[i].length;
    if (v[i].file) {
      // FD_RETRY: libfuse splices until the slice is complete (one splice call may move less).
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY);
      b.fd = v[i].file->fd();
      b.pos = static_cast<off_t>(v[i].file->offset() + v[i].offset);
    } else {
      b.mem = const_cast<std::byte*>(v[i].block->data().data() + v[i].offset);
    }
  }
  return bv;
}

// Store at open: the whole file, if small and in L1/L2, into the kernel's page cache. Slices
// from cache files go as a bufvec libfuse splices (memory slices riding along), when the splice
// pipe holds them; one memory slice goes as it is; anything else is gathered into ThreadBuffer
// first (libfuse would copy a bufvec of several buffers, or a file it cannot splice, into a fresh
// buffer itself).
// False if nothing was stored (the reads then come as usual). The kernel locks each page-cache
// folio it fills; only a read of the same file holds one meanwhile (another process's open after
// this one is no first open and may read at once), and another thread answers that read.
bool StoreInKernel(Context* ctx, fuse_ino_t ino, uint64_t fh) {
  if (ctx->se == nullptr) return false;
  auto slices = ctx->fs->ReadWholeIfLocal(fh, ctx->store_on_open_max);
  if (!slices.ok() || slices->empty()) return false;
  const std::vector<BlockSlice>& v = *slices;
  size_t bytes = 0;
  for (const BlockSlice& s : v) bytes += s.length;
  const bool from_files =
      std::any_of(v.begin(), v.end(), [](const BlockSlice& s) { return s.file != nullptr; });
  // A file L2 holds goes from its cache file into the kernel without crossing user space, as an
  // L2 read reply does, when the splice pipe holds it (the notification's header is two iovecs:
  // fuse_out_header and fuse_notify_store_out, 24 bytes).
  constexpr size_t kNotifyStoreOut = 24;
  if (from_files &&
      SplicePipeNeed(bytes + kNotifyStoreOut, v.size() + 1) <= ctx->splice_pipe_bytes.load()) {
    std::vector<std::byte> storage;
    const int rc = fuse_lowlevel_notify_store(ctx->se, ino, 0, SpliceBufvec(v, &storage),
                                              static_cast<fuse_buf_copy_flags>(0));
    if (rc != 0) {
      Logger(Module::kFuse)
          .debug("store at open of inode {} (spliced): {}", ino, std::strerror(-rc));
      return false;
    }
    ctx->fs->HandedToKernel(fh);
    return true;
  }
  fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
  if (v.size() == 1 && v[0].file == nullptr) {
    bv.buf[0].mem = const_cast<std::byte*>(v[0].block->data().data() + v[0].offset);
    bv.buf[0].size = v[0].length;
  } else {
    const size_t total = bytes;
    std::vector<std::byte>& buf = ThreadBuffer(total);
    size_t at = 0;
    for (const BlockSlice& s : v) {
      std::span<std::byte> out(buf.data() + at, s.length);
      if (s.file) {
        if (!s.file->ReadAt(s.offset, out).ok()) return false;  // the read path will say why
      } else {
        std::memcpy(out.data(), s.block->data().data() + s.offset, s.length);
      }
      at += s.length;
    }
    bv.buf[0].mem = buf.data();
    bv.buf[0].size = total;
  }
  const int rc = fuse_lowlevel_notify_store(ctx->se, ino, 0, &bv, FUSE_BUF_NO_SPLICE);
  if (rc != 0) {
    Logger(Module::kFuse).debug("store at open of inode {}: {}", ino, std::strerror(-rc));
    return false;
  }
  ctx->fs->HandedToKernel(fh);
  return true;
}

// The slices (and their BlockRefs) stay alive in the caller until the reply returns.
void ReplyRead(fuse_req_t req, const Result<std::vector<BlockSlice>>& slices) {
  const Context* ctx = Ctx(req);
  if (!slices.ok()) {
    fuse_reply_err(req, ToErrno(slices.status()));
    return;
  }
  const std::vector<BlockSlice>& v = *slices;
  const bool from_files =
      std::any_of(v.begin(), v.end(), [](const BlockSlice& s) { return s.file != nullptr; });
  size_t bytes = 0;
  for (const BlockSlice& s : v) bytes += s.length;
  if (v.empty()) {
    fuse_reply_buf(req, nullptr, 0);  // EOF
  } else if (from_files && SplicePipeNeed(bytes, v.size()) > ctx->splice_pipe_bytes.load()) {
    ReplyFromFilesCopied(req, v);
  } else if (from_files) {
    std::vector<std::byte> storage;
    fuse_reply_data(req, SpliceBufvec(v, &storage), static_cast<fuse_buf_copy_flags>(0));
  } else if (v.size() == 1) {
    fuse_bufvec bv = FUSE_BUFVEC_INIT(v[0].length);
    bv.buf[0].mem = const_cast<std::byte*>(v[0].block->data().data() + v[0].offset);
    fuse_reply_data(req, &bv, FUSE_BUF_NO_SPLICE);
  } else {
    std::vector<struct iovec> iov(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      iov[i].iov_base = const_cast<std::byte*>(v[i].block->data().data() + v[i].offset);
      iov[i].iov_len = v[i].length;
    }
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
  }
}

void Release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Context* ctx = Ctx(req);
  OpTimer timer(ctx, Op::kRelease);
  ctx->fs->Release(fi->fh & ~kFhPassthrough);
  if (ctx->passthrough_negotiated.load()) {
    ReleaseOpenIo(ctx, ino, (fi->fh & kFhPassthrough) != 0);
  }
  fuse_reply_err(req, 0);
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  OpTimer timer(Ctx(req), Op::kStatFs);
  FsStatsInfo s = Ctx(req)->fs->StatFs();
  struct statvfs st {};
  st.f_bsize = s.block_size;
  st.f_frsize = s.block_size;
  st.f_blocks = s.total_blocks;
  st.f_bfree = s.free_blocks;
  st.f_bavail = s.free_blocks;
  st.f_files = s.files;
  st.f_ffree = 0;
  st.f_favail = 0;
  st.f_namemax = s.name_max;
  st.f_flag = ST_RDONLY;
  fuse_reply_statfs(req, &st);
}

// ---- extended attributes ----

// Replies a value to getxattr/listxattr: its size when asked with size 0, ERANGE if it does not
// fit, else the bytes.
void ReplyXattrValue(fuse_req_t req, const std::string& value, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (value.size() > size) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  OpTimer timer(Ctx(req), Op::kGetXattr);
  auto v = Ctx(req)->fs->GetXattr(ino, name);
  if (!v.ok()) {
    fuse_reply_err(req, ToErrno(v.status(), ErrnoContext::kXattr));
    return;
  }
  ReplyXattrValue(req, *v, size);
}

Result<std::string> DoListXattr(Context* ctx, fuse_ino_t ino) {
  TIERFS_ASSIGN_OR_RETURN(std::vector<std::string> names, ctx->fs->ListXattr(ino));
  std::string out;
  for (const auto& n : names) {
    out += n;
    out.push_back('\0');
  }
  return out;
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  OpTimer timer(Ctx(req), Op::kListXattr);
  auto v = DoListXattr(Ctx(req), ino);
  if (!v.ok()) {
    fuse_reply_err(req, ToErrno(v.status(), ErrnoContext::kXattr));
    return;
  }
  ReplyXattrValue(req, *v, size);
}

// The caller of `req` with its groups: the request's gid and the supplementary groups libfuse
// reads from /proc/PID/task/TID/status (none when that fails, e.g. the caller has exited).
XattrCaller CallerOf(fuse_req_t req) {
  const fuse_ctx* c = fuse_req_ctx(req);
  XattrCaller caller{static_cast<uint32_t>(c->uid), {static_cast<uint32_t>(c->gid)}};
  if (c->uid == 0) return caller;
  std::vector<gid_t> groups(64);
  int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
  if (n > static_cast<int>(groups.size())) {
    groups.resize(static_cast<size_t>(n));
    n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
  }
  for (int i = 0; i < std::min(n, static_cast<int>(groups.size())); ++i) {
    caller.gids.push_back(static_cast<uint32_t>(groups[static_cast<size_t>(i)]));
  }
  return caller;
}

// Evict and pin walk the files below a directory and the blocks the host holds of each: run with
// a token, so that an interrupt or the end of the session stops the walk (EINTR).
void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
              int flags) {
  Context* ctx = Ctx(req);
  const auto start = OpTimer::Start(ctx);
  ctx->remote->RunInline(req, [ctx, ino, n = std::string(name), v = std::string(value, size),
                               caller = CallerOf(req), start](fuse_req_t r, RequestToken* t) {
    OpTimer timer(ctx, Op::kSetXattr, start);
    Status s = ctx->fs->SetXattr(ino, n, v, caller);
    t->Detach();
    fuse_reply_err(r, ToErrno(s, ErrnoContext::kXattr));
  });
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  OpTimer timer(Ctx(req), Op::kRemoveXattr);
  Status s = Ctx(req)->fs->RemoveXattr(ino, name);
  fuse_reply_err(req, ToErrno(s, ErrnoContext::kXattr));
}

// ---- every write operation: EROFS ----

void MkNod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { fuse_reply_err(req, EROFS); }
void MkDir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { fuse_reply_err(req, EROFS); }
void Unlink(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RmDir(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void SymLink(fuse_req_t req, const char*, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void Rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned int) {
  fuse_reply_err(req, EROFS);
}
void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void SetAttr(fuse_req_t req, fuse_ino_t, struct stat*, int, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void Write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void Create(fuse_req_t req, fuse_ino_t, const char*, mode_t, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void Fallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void CopyFileRange(fuse_req_t req, fuse_ino_t, off_t, struct fuse_file_info*, fuse_ino_t, off_t,
                   struct fuse_file_info*, size_t, int) {
  fuse_reply_err(req, EROFS);
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.forget = Forget;
  ops.forget_multi = ForgetMulti;
  ops.getattr = GetAttr;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.readdirplus = ReadDirPlus;
  ops.releasedir = ReleaseDir;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  ops.statfs = StatFs;
  ops.getxattr = GetXattr;
  ops.listxattr = ListXattr;
  ops.setxattr = SetXattr;
  ops.removexattr = RemoveXattr;
  ops.mknod = MkNod;
  ops.mkdir = MkDir;
  ops.unlink = Unlink;
  ops.rmdir = RmDir;
  ops.symlink = SymLink;
  ops.rename = Rename;
  ops.link = Link;
  ops.setattr = SetAttr;
  ops.write = Write;
  ops.create = Create;
  ops.fallocate = Fallocate;
  ops.copy_file_range = CopyFileRange;
  // flush, fsync, access: left unset; the kernel gets ENOSYS once and stops asking.
  return ops;
}

// fuse_opt treats ',' as a separator and '\' as an escape.
std::string EscapeOpt(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == ',' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

uint32_t FitReadToPipe(uint32_t max_read, size_t pipe) {
  constexpr size_t kSlices = 2;
  constexpr size_t kMinRead = 128 << 10;
  if (SplicePipeNeed(max_read, kSlices) <= pipe) return max_read;
  const size_t overhead = SplicePipeNeed(0, kSlices);
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (pipe < overhead + kMinRead) return max_read;
  return static_cast<uint32_t>(std::min<size_t>(max_read, (pipe - overhead) / page * page));
}

namespace {

// The SIGINT/SIGTERM handler's state (one FuseServer serves per process): the first stop
// signal, and the write end of the server's stop pipe, which wakes the supervisor thread
// (FuseServer::Supervise). Lock-free atomics: async-signal-safe.
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_fd{-1};

extern "C" void OnStopSignal(int sig) {
  const int saved_errno = errno;
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
  const int fd = g_stop_fd.load();
  if (fd >= 0) {
    const char c = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &c, 1);  // a full pipe already holds a wakeup
  }
  errno = saved_errno;
}

// SIGINT and SIGTERM → OnStopSignal, in place of libfuse's handler (which would end the loop at
// once, abandoning the requests in flight). No SA_RESTART: the loop's sem_wait wakes up.
bool InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  return sigaction(SIGINT, &sa, nullptr) == 0 && sigaction(SIGTERM, &sa, nullptr) == 0;
}

// Puts SIGINT/SIGTERM back to the default, dropping one that is pending (sent to wake the loop).
void RemoveStopHandlers() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) {
    sa.sa_handler = SIG_IGN;  // discards a pending one
    sigaction(sig, &sa, nullptr);
    sa.sa_handler = SIG_DFL;
    sigaction(sig, &sa, nullptr);
  }
}

// Detaches the mount at `mountpoint` (MNT_DETACH; fusermount3 -u -z when not root): no new
// path reaches it; files still open keep their connection until closed.
Status DetachMount(const std::string& mountpoint) {
  if (geteuid() == 0) {
    if (umount2(mountpoint.c_str(), MNT_DETACH) == 0) return Status::OK();
    return Status::FromErrno(errno, "umount2(MNT_DETACH) " + mountpoint);
  }
  std::vector<std::string> args = {"fusermount3", "-u", "-q", "-z", "--", mountpoint};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawnp(&pid, "fusermount3", nullptr, nullptr, argv.data(), environ);
      err != 0) {
    return Status::FromErrno(err, "spawning fusermount3 -u -z " + mountpoint);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::OK();
  return Status::IOError("fusermount3 -u -z " + mountpoint + " failed");
}

}  // namespace

FuseServer::FuseServer(const FuseOptions& options, std::unique_ptr<Context> ctx, fuse_session* se,
                       std::string mountpoint)
    : options_(options), ctx_(std::move(ctx)), se_(se), mountpoint_(std::move(mountpoint)) {}

Result<std::unique_ptr<FuseServer>> FuseServer::Mount(const FuseOptions& options, Filesystem* fs,
                                                      const std::string& mountpoint) {
  fuse_set_log_func(FuseLog);
  TakeLastFuseError();
  auto ctx = std::make_unique<Context>();
  ctx->fs = fs;
  ctx->mountpoint = mountpoint;
  ctx->entry_timeout = TimeoutSeconds(options.entry_timeout);
  ctx->attr_timeout = TimeoutSeconds(options.attr_timeout);
  ctx->negative_timeout = TimeoutSeconds(options.negative_timeout);
  ctx->max_read = options.max_read;
  ctx->max_readahead = options.max_readahead;
  ctx->pipe_bytes = ProbeSplicePipe(options.max_read);
  if (options.fit_reads_to_splice_pipe) {
    // Reads the pipe can splice from cache files (FuseOptions::fit_reads_to_splice_pipe); the
    // kernel's readahead no larger, or it would split each window into a full read and a sliver.
    ctx->max_read = FitReadToPipe(options.max_read, ctx->pipe_bytes);
    ctx->max_readahead = std::min(options.max_readahead, ctx->max_read);
  }
  ctx->max_background = kMaxBackground;
  ctx->open_in_kernel = options.open_in_kernel;
  ctx->store_on_open_max = options.store_on_open_max;
  ctx->passthrough_wanted = options.passthrough && !options.open_in_kernel;
  if (options.metrics != nullptr) {
    for (size_t i = 0; i < static_cast<size_t>(Op::kCount); ++i) {
      ctx->op_latency.push_back(std::make_unique<metrics::Histogram>());
    }
    const Context* c = ctx.get();
    ctx->metrics_reg =
        options.metrics->Add([c](metrics::Exposition* e) { CollectFuseMetrics(*c, e); });
  }

  // Not "ro": the VFS refuses setxattr on a read-only mount (EROFS before the request reaches
  // us), and the control plane is user.tierfs.* setxattr. Every write operation is refused
  // here instead (EROFS from Open for writing, Create, Write, SetAttr, MkDir, ...).
  std::string o = "subtype=tierfs,fsname=" + EscapeOpt(options.fsname) +
                  ",max_read=" + std::to_string(ctx->max_read);
  if (options.allow_other) o += ",allow_other";
  if (options.allow_root) o += ",allow_root";
  if (options.default_permissions) o += ",default_permissions";
  for (const auto& extra : options.extra_options) o += "," + extra;
  std::vector<std::string> args = {"tierfs"};
  if (options.debug) args.push_back("-d");
  args.push_back("-o");
  args.push_back(o);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(args.size()), argv.data());

  static const fuse_lowlevel_ops kOps = MakeOps();
  fuse_session* se = fuse_session_new(&fargs, &kOps, sizeof(kOps), ctx.get());
  fuse_opt_free_args(&fargs);
  if (se == nullptr) {
    return Status::InvalidArgument("cannot create the FUSE session with options '" + o +
                                   "': " + TakeLastFuseError());
  }
  ctx->se = se;
  // libfuse ends the loop on SIGHUP too; tierfs keeps serving and leaves SIGHUP to the daemon
  // (which reopens its log file, as logrotate expects): its disposition is put back as it was.
  struct sigaction hup_before {};
  sigaction(SIGHUP, nullptr, &hup_before);
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return Status::Internal("cannot install the FUSE signal handlers");
  }
  sigaction(SIGHUP, &hup_before, nullptr);
  // SIGINT/SIGTERM start the drain (FuseServer::Drain) instead of ending the loop at once.
  int stop_pipe[2];
  if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return Status::FromErrno(errno, "pipe for the stop signals");
  }
  ctx->stop_read = UniqueFd(stop_pipe[0]);
  ctx->stop_write = UniqueFd(stop_pipe[1]);
  g_stop_signal.store(0);
  g_stop_fd.store(stop_pipe[1]);
  if (!InstallStopHandlers()) {
    g_stop_fd.store(-1);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return Status::Internal("cannot install the SIGINT/SIGTERM handlers");
  }
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    std::string why = TakeLastFuseError();
    g_stop_fd.store(-1);
    RemoveStopHandlers();
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return Status::IOError("cannot mount at " + mountpoint + (why.empty() ? "" : ": " + why));
  }
  if (ctx->passthrough_wanted) {
    // Our own read/writev on the mounted fd, to amend INIT (see the file comment). Nothing else
    // changes: libfuse closes the fd as before.
    static const fuse_custom_io kIo = {IoWritev, IoRead, IoSpliceReceive, IoSpliceSend};
    if (fuse_session_custom_io(se, &kIo, fuse_session_fd(se)) != 0) {
      Logger(Module::kFuse).warn("passthrough off: libfuse refused the custom I/O");
    }
  }
  Logger(Module::kFuse).info("mounted {} at {} (-o {})", options.fsname, mountpoint, o);
  return std::unique_ptr<FuseServer>(new FuseServer(options, std::move(ctx), se, mountpoint));
}

Status FuseServer::Run() {
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  if (cfg == nullptr) return Status::Internal("fuse_loop_cfg_create failed");
  fuse_loop_cfg_set_clone_fd(cfg, options_.clone_fd ? 1 : 0);
  fuse_loop_cfg_set_max_threads(cfg, static_cast<unsigned>(std::max(1, options_.max_threads)));
  if (!ctx_->remote) {
    // The libfuse workers' share of network-bound requests: all but `reserved` of them.
    const int workers = std::max(1, options_.max_threads);
    const int reserved = std::max(2, workers / 4);
    ctx_->remote = std::make_unique<RemoteWork>(std::max(0, workers - reserved),
                                                std::max(0, options_.remote_threads),
                                                options_.request_timeout);
  }
  // Beside the loop: the supervisor ends the session on SIGINT/SIGTERM once the requests in
  // flight are answered (Drain), and cancels the requests still waiting on the network once the
  // session has ended otherwise (unmounted), so that libfuse's join of its workers does not wait
  // for their deadlines. Its thread takes no signal.
  loop_thread_ = pthread_self();
  loop_done_.store(false);
  std::thread supervisor;
  {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    supervisor = std::thread([this] { Supervise(); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  // This thread takes SIGINT/SIGTERM while the loop runs: its sem_wait is what the drain's
  // pthread_kill interrupts.
  sigset_t stop_signals, before;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, &before);
  int rc = fuse_session_loop_mt(se_, cfg);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  fuse_loop_cfg_destroy(cfg);
  loop_done_.store(true);
  WakeSupervisor();
  supervisor.join();
  // 0: unmounted (fusermount3 -u / umount, or by the drain); < 0: the loop failed.
  if (rc > 0) Logger(Module::kFuse).info("signal {}: unmounting {}", rc, mountpoint_);
  if (rc == -ECONNABORTED && detached_.load()) {
    // The drain detached the mount and the last open file was closed while a worker was taking
    // a request (the kernel's RELEASE racing the connection's end): the session is over, as
    // with ENODEV, which libfuse itself takes as the end.
    Logger(Module::kFuse).info("the connection of {} ended while a request was read", mountpoint_);
    return Status::OK();
  }
  if (rc < 0) return Status::FromErrno(-rc, "fuse session loop");
  return Status::OK();
}

void FuseServer::WakeSupervisor() {
  const char c = 0;
  [[maybe_unused]] ssize_t n = ::write(ctx_->stop_write.get(), &c, 1);
}

// Waits up to `d` for a byte on the stop pipe (a signal, or the loop's end); drains the pipe.
static void WaitStopPipe(int fd, std::chrono::milliseconds d) {
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(d.count())) > 0) {
    char buf[64];
    while (::read(fd, buf, sizeof(buf)) > 0) {
    }
  }
}

void FuseServer::Supervise() {
  pthread_setname_np(pthread_self(), "tierfs-stop");
  while (!loop_done_.load()) {
    if (const int sig = g_stop_signal.load(); sig != 0) {
      Drain(sig);
      return;
    }
    if (fuse_session_exited(se_)) {
      ctx_->remote->CancelAll();
      return;
    }
    WaitStopPipe(ctx_->stop_read.get(), std::chrono::milliseconds(200));
  }
}

void FuseServer::Drain(int sig) {
  using SteadyClock = std::chrono::steady_clock;
  const auto grace = std::chrono::duration_cast<std::chrono::milliseconds>(options_.shutdown_grace);
  RemoteWork* remote = ctx_->remote.get();
  // 1. Nothing new waits on the network; what was asked before gets up to the grace period.
  remote->BeginShutdown();
  const size_t waiting = remote->ActiveCount();
  Logger(Module::kFuse)
      .info(
          "signal {}: stopping; {} requests wait on the network (answered within {} ms, else "
          "EIO), then unmounting {}",
          sig, waiting, grace.count(), mountpoint_);
  if (!remote->WaitIdle(SteadyClock::now() + grace)) {
    Logger(Module::kFuse)
        .warn("{} requests still wait on the network {} ms after signal {}: answering them EIO",
              remote->ActiveCount(), grace.count(), sig);
    remote->CancelAllForShutdown();
    if (!remote->WaitIdle(SteadyClock::now() + std::chrono::seconds(5))) {
      Logger(Module::kFuse)
          .error("{} requests did not end 5 s after their cancellation", remote->ActiveCount());
    }
  }
  // 2. Every request asked before the signal is answered. Detach the mount: no new path reaches
  // it, and the kernel ends the session once the files still open are closed. A reader whose
  // read just failed asks again at once (the kernel retries a failed readahead page): the loop
  // keeps answering (EIO for what would wait on the network) for up to kLinger.
  constexpr auto kLinger = std::chrono::seconds(1);
  if (Status s = DetachMount(mountpoint_); s.ok()) {
    detached_.store(true);
  } else {
    Logger(Module::kFuse).warn("detaching {}: {}", mountpoint_, s.ToString());
  }
  const auto linger_end = SteadyClock::now() + kLinger;
  while (!fuse_session_exited(se_) && !loop_done_.load() && SteadyClock::now() < linger_end) {
    WaitStopPipe(ctx_->stop_read.get(), std::chrono::milliseconds(20));
  }
  // 3. End the loop: its main thread waits in sem_wait, which a signal interrupts (our handler
  // only notes it); repeated until the loop has returned, so a wakeup cannot be lost.
  fuse_session_exit(se_);
  while (!loop_done_.load()) {
    pthread_kill(loop_thread_, SIGTERM);
    WaitStopPipe(ctx_->stop_read.get(), std::chrono::milliseconds(50));
  }
  Logger(Module::kFuse).info("signal {}: unmounted {}", sig, mountpoint_);
}

void FuseServer::Unmount() {
  if (!mounted_) return;
  mounted_ = false;
  // Detached by the drain already: the path may hold another mount by now; the session's fd is
  // closed by fuse_session_destroy.
  if (detached_.load()) return;
  fuse_session_unmount(se_);
  Logger(Module::kFuse).info("unmounted {}", mountpoint_);
}

FuseServer::~FuseServer() {
  ctx_->metrics_reg.Reset();  // no scrape reads this server any more
  // Pool requests end first (cancelled: EINTR to a kernel that no longer listens), while the
  // session they reply on still exists.
  if (ctx_->remote) ctx_->remote->Stop();
  Unmount();
  g_stop_fd.store(-1);
  RemoveStopHandlers();
  fuse_remove_signal_handlers(se_);
  fuse_session_destroy(se_);
}

}  // namespace tierfs
