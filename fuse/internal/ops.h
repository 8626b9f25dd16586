// fuse/internal/ops — the handlers of libfuse's low-level operations. Each is split in two
// (conventions C5): DoX(ctx, ...) calls the Filesystem and returns a value (Result), X(req, ...)
// replies exactly once with it. No lock is held while replying (C6); the Filesystem returns
// values, not references into its tables. Errors become errno only through ToErrno (C4).
// Requests that may wait on the network go through RemoteWork (fuse/internal/remote_work.h).
// Every write operation is refused with EROFS.
//
// Thread-safety: the handlers run on libfuse's workers and the remote pool, and touch only the
// thread-safe parts of the Context.
#pragma once

#include "fuse/internal/libfuse.h"

namespace tierfs::fuse_internal {

// Every operation tierfs serves (fuse/ops.cc), the file ones included.
fuse_lowlevel_ops MakeOps();

// Open, read and release (fuse/file_ops.cc).
void AddFileOps(fuse_lowlevel_ops* ops);

}  // namespace tierfs::fuse_internal
