// fuse/internal/kernel_protocol — the kernel's side of the connection: the INIT negotiation
// (InitConnection, libfuse's init op), the parts of the FUSE protocol libfuse 3.14 lacks and
// tierfs speaks by hand for passthrough (Linux 6.9+: the INIT flag through a custom I/O on the
// /dev/fuse descriptor, the backing-file ioctls, the open reply naming a backing file), and the
// sizing of the pipe libfuse splices replies through.
//
// Passthrough: the session's custom I/O (fuse_session_custom_io on the mounted fd) notes whether
// the kernel's INIT offers FUSE_PASSTHROUGH and sets it, with max_stack_depth 1, in our INIT
// reply; backing files are registered with the FUSE_DEV_IOC_BACKING_OPEN ioctl and
// named in an open reply built with fuse_reply_buf (fuse/internal/passthrough.h decides when).
//
// Thread-safety: the custom I/O runs on libfuse's workers (INIT is handled on one thread before
// any other request); the rest is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuse/internal/context.h"
#include "fuse/internal/kernel_abi.h"
#include "fuse/internal/libfuse.h"

namespace tierfs::fuse_internal {

// The handle of a passthrough open carries this bit (the kernel passes fh back unread): its
// release knows the mode it was counted in. Filesystem handles count up from 1 and never reach it.
constexpr uint64_t kFhPassthrough = 1ULL << 63;

// The unique of the INIT a daemon taking a mount over gives its libfuse (Context::synthetic_init):
// the kernel numbers requests from 1 up and never reaches it.
constexpr uint64_t kSyntheticInitUnique = ~0ULL;

// The custom I/O of every session: plain read/writev/splice on the /dev/fuse fd, except that the
// INIT request and its reply are kept (Context::init_in, init_out: a handover carries them), the
// reply is amended for passthrough, a synthetic INIT is read first where one is pending, and the
// reads pass the Context's ReadGate. Its userdata is the session's, the Context.
const fuse_custom_io& SessionCustomIo();

// The INIT request of `in` as the kernel sends it, numbered kSyntheticInitUnique.
std::string SyntheticInit(const kabi::InitIn& in);

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
