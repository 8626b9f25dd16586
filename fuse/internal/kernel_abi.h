// fuse/internal/kernel_abi — the parts of the kernel's FUSE ABI (<linux/fuse.h> of Linux 6.9+)
// that libfuse 3.14 lacks and tierfs speaks by hand: the INIT request and reply, passthrough's
// open reply and backing-file ioctls, and notifications. Internal to fuse/.
#pragma once

#include <sys/ioctl.h>

#include <cstdint>

namespace tierfs::fuse_internal {

// ---- the kernel ABI libfuse 3.14 lacks (<linux/fuse.h> of Linux 6.9+) ----

namespace kabi {
constexpr uint32_t kOpInit = 26;                 // FUSE_INIT
constexpr uint32_t kInitExt = 1U << 30;          // FUSE_INIT_EXT: flags2 is valid
constexpr uint32_t kPassthroughFlag2 = 1U << 5;  // FUSE_PASSTHROUGH (1ULL << 37), in flags2
// FUSE_NOTIFY_RESEND (Linux 6.9+): the kernel queues again every request a daemon of the
// connection read and did not answer.
constexpr int32_t kNotifyResend = 7;
constexpr uint32_t kOpenNoFlush = 1U << 5;      // FOPEN_NOFLUSH
constexpr uint32_t kOpenPassthrough = 1U << 7;  // FOPEN_PASSTHROUGH
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

}  // namespace tierfs::fuse_internal
