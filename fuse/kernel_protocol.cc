// The kernel's side of the connection (fuse/internal/kernel_protocol.h): INIT, the custom I/O and
// backing-file ioctls of passthrough, and the splice pipe's size.

#include "fuse/internal/kernel_protocol.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/logging.h"

namespace tierfs {
namespace fuse_internal {
namespace {

// Notes the kernel's INIT request in `buf` (`n` bytes read) on the Context.
void NoteInit(Context* ctx, const void* buf, ssize_t n) {
  if (n < static_cast<ssize_t>(sizeof(kabi::InHeader) + sizeof(kabi::InitIn)) ||
      ctx->init_seen.load(std::memory_order_relaxed)) {
    return;
  }
  kabi::InHeader h;
  std::memcpy(&h, buf, sizeof(h));
  if (h.opcode != kabi::kOpInit) return;
  kabi::InitIn in;
  std::memcpy(&in, static_cast<const char*>(buf) + sizeof(h), sizeof(in));
  ctx->init_unique = h.unique;
  ctx->init_in = in;
  ctx->init_offers_passthrough =
      (in.flags & kabi::kInitExt) != 0 && (in.flags2 & kabi::kPassthroughFlag2) != 0;
  ctx->init_seen.store(true, std::memory_order_release);
}

// The custom I/O (fuse_session_custom_io): plain read/writev/splice on the same fd, except for
// INIT (kept, amended, or synthetic) and the ReadGate around each read.
ssize_t IoRead(int fd, void* buf, size_t len, void* userdata) {
  auto* ctx = static_cast<Context*>(userdata);
  if (ctx->synthetic_init_pending.exchange(false)) {
    const std::string& init = ctx->synthetic_init;
    const size_t n = std::min(len, init.size());
    std::memcpy(buf, init.data(), n);
    NoteInit(ctx, buf, static_cast<ssize_t>(n));
    return static_cast<ssize_t>(n);
  }
  ssize_t n;
  while (true) {
    if (!ctx->gate.Enter()) {
      errno = ENODEV;  // handed over: libfuse ends the session's loop
      return -1;
    }
    n = ::read(fd, buf, len);
    const int err = errno;
    ctx->gate.Leave(n > 0);
    if (n < 0 && err == EINTR) continue;  // woken for a pause: meet the gate again
    errno = err;
    break;
  }
  NoteInit(ctx, buf, n);
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
      kabi::InitOut out{};
      const size_t n = std::min(sizeof(out), iov[1].iov_len);
      std::memcpy(&out, iov[1].iov_base, n);
      if (h.error == 0 && ctx->passthrough_wanted && ctx->init_offers_passthrough) {
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
      ctx->init_out = out;
      if (h.unique == kSyntheticInitUnique) {
        // The kernel had its answer from the daemon that mounted: this one is not sent.
        size_t total = 0;
        for (int i = 0; i < count; ++i) total += iov[i].iov_len;
        return static_cast<ssize_t>(total);
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

}  // namespace

const fuse_custom_io& SessionCustomIo() {
  static const fuse_custom_io kIo = {IoWritev, IoRead, IoSpliceReceive, IoSpliceSend};
  return kIo;
}

std::string SyntheticInit(const kabi::InitIn& in) {
  kabi::InHeader h{};
  // The kernel's fuse_init_in has unused words after flags2 (64 bytes in all since 7.36).
  constexpr size_t kInitInBytes = 64;
  h.len = static_cast<uint32_t>(sizeof(h) + kInitInBytes);
  h.opcode = kabi::kOpInit;
  h.unique = kSyntheticInitUnique;
  std::string out(h.len, '\0');
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), &in, sizeof(in));
  return out;
}

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

size_t SplicePipeNeed(size_t bytes, size_t buffers) {
  constexpr size_t kOutHeader = 16;  // struct fuse_out_header
  return static_cast<size_t>(::sysconf(_SC_PAGESIZE)) * (buffers + 2) + kOutHeader + bytes;
}

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

void InitConnection(void* userdata, struct fuse_conn_info* conn) {
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
  // Splice for replies from cache files only (fuse/internal/read_reply.h); memory replies are
  // written directly (FUSE_BUF_NO_SPLICE, fuse_reply_iov).
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

}  // namespace fuse_internal

uint32_t FitReadToPipe(uint32_t max_read, size_t pipe) {
  constexpr size_t kSlices = 2;
  constexpr size_t kMinRead = 128 << 10;
  if (fuse_internal::SplicePipeNeed(max_read, kSlices) <= pipe) return max_read;
  const size_t overhead = fuse_internal::SplicePipeNeed(0, kSlices);
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (pipe < overhead + kMinRead) return max_read;
  return static_cast<uint32_t>(std::min<size_t>(max_read, (pipe - overhead) / page * page));
}

}  // namespace tierfs
