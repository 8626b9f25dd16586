// fuse/internal/read_reply — how read replies and stores at open carry the bytes to the kernel.
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
// Thread-safety: thread-safe; each thread has its own buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.h"
#include "fuse/filesystem.h"
#include "fuse/internal/context.h"

namespace tierfs::fuse_internal {

// Replies `slices` (or their error) to the read `req`. The slices (and their BlockRefs) stay
// alive in the caller until this returns.
void ReplyRead(fuse_req_t req, const Result<std::vector<BlockSlice>>& slices);

// Store at open: the whole file, if small and in L1/L2, into the kernel's page cache. Slices
// from cache files go as a bufvec libfuse splices (memory slices riding along), when the splice
// pipe holds them; one memory slice goes as it is; anything else is gathered into a per-thread
// buffer first (libfuse would copy a bufvec of several buffers, or a file it cannot splice, into a
// fresh buffer itself). False if nothing was stored (the reads then come as usual). The kernel
// locks each page-cache folio it fills; only a read of the same file holds one meanwhile (another
// process's open after this one is no first open and may read at once), and another thread answers
// that read.
bool StoreInKernel(Context* ctx, fuse_ino_t ino, uint64_t fh);

}  // namespace tierfs::fuse_internal
