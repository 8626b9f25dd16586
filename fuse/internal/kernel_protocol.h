// fuse/internal/kernel_protocol — the kernel's side of the connection: the INIT negotiation
// (InitConnection, libfuse's init op), the parts of the FUSE protocol libfuse 3.14 lacks and
// tierfs speaks by hand for passthrough (Linux 6.9+: the INIT flag through a custom I/O on the
// /dev/fuse descriptor, the backing-file ioctls, the open reply naming a backing file), and the
// sizing of the pipe libfuse splices replies through.
//
// Passthrough: a custom I/O (fuse_session_custom_io on the mounted fd, installed by the Session)
// notes whether the kernel's INIT offers FUSE_PASSTHROUGH and sets it, with max_stack_depth 1,
// in our INIT reply; backing files are registered with the FUSE_DEV_IOC_BACKING_OPEN ioctl and
// named in an open reply built with fuse_reply_buf (fuse/internal/passthrough.h decides when).
//
// Thread-safety: the custom I/O runs on libfuse's workers (INIT is handled on one thread before
// any other request); the rest is thread-safe.
#pragma once

#include <sys/ioctl.h>

#include <cstddef>
#include <cstdint>

#include "fuse/internal/context.h"
#include "fuse/internal/libfuse.h"

namespace tierfs::fuse_internal {

// ---- the kernel ABI libfuse 3.14 lacks (<linux/fuse.h> of Linux 6.9+) ----

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

// The custom I/O of a session that wants passthrough: plain read/writev/splice on the /dev/fuse
// fd, except that the INIT request is looked at and the reply to it is amended. Its userdata is
// the session's, the Context.
const fuse_custom_io& PassthroughCustomIo();

// Registers `fd` as a backing file of the connection: its id (> 0), or 0 if the kernel refused
// (then passthrough goes off for this mount: the reason holds for every cache file).
int32_t BackingOpen(Context* ctx, int fd);
void BackingClose(Context* ctx, int32_t id);

// libfuse's init op: asks the kernel for what tierfs uses (readdirplus always, async reads,
// parallel dirops, splice writes for cache files, max_read/max_readahead/max_background).
void InitConnection(void* userdata, struct fuse_conn_info* conn);

// The pipe libfuse needs to splice a reply of `bytes` in `buffers` buffers (fuse_lowlevel.c,
// fuse_send_data_iov: a page per buffer, one for the header and one spare, plus the bytes).
size_t SplicePipeNeed(size_t bytes, size_t buffers);

// The largest pipe this process can have for a reply of up to `max_read` bytes: F_SETPIPE_SZ
// beyond fs.pipe-max-size (1 MiB by default) needs CAP_SYS_RESOURCE, which a root daemon in a
// container often lacks. Then a 1 MiB read reply (1 MiB + header) cannot be spliced, and
// libfuse's fallback allocates (and page-faults) a reply-sized buffer for every reply.
size_t ProbeSplicePipe(uint32_t max_read);

}  // namespace tierfs::fuse_internal
