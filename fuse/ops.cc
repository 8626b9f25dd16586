// The handlers of lookup, forget, getattr, the directory operations, statfs, the extended
// attributes and the refused write operations (fuse/internal/ops.h); open, read and release are
// in fuse/file_ops.cc.

#include "fuse/internal/ops.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fuse/filesystem.h"
#include "fuse/internal/context.h"
#include "fuse/internal/kernel_protocol.h"
#include "fuse/internal/passthrough.h"

namespace tierfs::fuse_internal {
namespace {

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
                          ctx->LogState();
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
  ctx->LogState();
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
    if (!r->looked_up.empty()) ctx->LogState();
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

}  // namespace

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops{};
  ops.init = InitConnection;
  ops.lookup = Lookup;
  ops.forget = Forget;
  ops.forget_multi = ForgetMulti;
  ops.getattr = GetAttr;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.readdirplus = ReadDirPlus;
  ops.releasedir = ReleaseDir;
  AddFileOps(&ops);  // open, read, release
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

}  // namespace tierfs::fuse_internal
