#!/usr/bin/python3
"""Checks a mounted tree against a gen_dataset.py manifest. Exit 0 when all checks pass.

    verify.py tree MNT MANIFEST          `find` output equals the manifest: same dirs (folder markers
                                         are directories), same files, same sizes
    verify.py hashes MNT MANIFEST        sha256 of every file equals the manifest
    verify.py ranges MNT MANIFEST        pread at block boundaries and random offsets, byte-exact
    verify.py concurrent MNT MANIFEST [--threads 8]
                                         N threads each read every file in its own order, hashes equal
    verify.py errors MNT MANIFEST        writes get EROFS, missing names get ENOENT
    verify.py xattrs MNT MANIFEST        user.tierfs.{etag,source,residency} readable on a file,
                                         an unknown user.tierfs.* name gets ENODATA
    verify.py stats "k=v k=v ..." [--has KEY]... [--eq KEY=N]... [--gt KEY=N]...
                                         checks the user.tierfs.stats value
"""
import argparse
import concurrent.futures
import errno
import hashlib
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_dataset import BLOCK, content  # noqa: E402

MiB = 1024 * 1024


def load(manifest):
    with open(manifest, encoding="utf-8") as f:
        return json.load(f)


def sha256_file(path, bufsize=4 * MiB):
    h = hashlib.sha256()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bufsize)
            if not b:
                break
            h.update(b)
            n += len(b)
    return h.hexdigest(), n


def report(errors, what):
    for e in errors[:30]:
        print("  MISMATCH:", e, file=sys.stderr)
    if len(errors) > 30:
        print("  ... and %d more" % (len(errors) - 30), file=sys.stderr)
    if errors:
        print("%s: %d error(s)" % (what, len(errors)), file=sys.stderr)
        return 1
    return 0


def cmd_tree(args, m):
    out = subprocess.run(["find", args.mnt, "-mindepth", "1", "-printf", r"%y %s %P\0"],
                         check=True, stdout=subprocess.PIPE, timeout=120).stdout
    got_dirs, got_files, errors = set(), {}, []
    for rec in out.split(b"\0"):
        if not rec:
            continue
        kind, size, rel = rec.decode("utf-8", "surrogateescape").split(" ", 2)
        if kind == "d":
            got_dirs.add(rel)
        elif kind == "f":
            got_files[rel] = int(size)
        else:
            errors.append("%r has type %r" % (rel, kind))
    want_dirs, want_files = set(m["dirs"]), {k: v["size"] for k, v in m["files"].items()}
    for d in sorted(want_dirs - got_dirs):
        errors.append("missing directory %r%s" % (d, " (as a file)" if d in got_files else ""))
    for d in sorted(got_dirs - want_dirs):
        errors.append("unexpected directory %r" % d)
    for f in sorted(set(want_files) - set(got_files)):
        errors.append("missing file %r" % f)
    for f in sorted(set(got_files) - set(want_files)):
        errors.append("unexpected file %r%s" % (f, " (a folder marker shown as a file)"
                                                 if f + "/" in m["markers"] else ""))
    for f in sorted(set(got_files) & set(want_files)):
        if got_files[f] != want_files[f]:
            errors.append("%r: size %d, want %d" % (f, got_files[f], want_files[f]))
    for mk in m["markers"]:
        p = os.path.join(args.mnt, mk)  # "dir/" resolves only if dir is a directory
        if not os.path.isdir(p):
            errors.append("folder marker %r is not a directory" % mk)
    # readdir of a directory holding only sub-directories, and of the root
    for d in ["", "small"] if "small" in want_dirs else [""]:
        want = sorted(x.rsplit("/", 1)[-1] for x in list(want_dirs) + list(want_files)
                      if os.path.dirname(x) == d)
        got = sorted(os.listdir(os.path.join(args.mnt, d)))
        if got != want:
            errors.append("listdir(%r) = %s, want %s" % (d, got[:10], want[:10]))
    rc = report(errors, "tree")
    if not rc:
        print("tree: %d directories and %d files as in the manifest" % (len(got_dirs), len(got_files)))
    return rc


def cmd_hashes(args, m):
    errors, total, t0 = [], 0, time.monotonic()
    for rel, meta in sorted(m["files"].items()):
        try:
            h, n = sha256_file(os.path.join(args.mnt, rel))
        except OSError as e:
            errors.append("%r: %s" % (rel, e))
            continue
        total += n
        if n != meta["size"] or h != meta["sha256"]:
            errors.append("%r: %d bytes sha256 %s, want %d bytes %s" % (
                rel, n, h[:16], meta["size"], meta["sha256"][:16]))
    dt = time.monotonic() - t0
    rc = report(errors, "hashes")
    if not rc:
        print("hashes: %d files, %.1f MiB byte-exact in %.2fs (%.0f MiB/s)" % (
            len(m["files"]), total / MiB, dt, total / MiB / max(dt, 1e-9)))
    return rc


def cmd_ranges(args, m):
    errors, n = [], 0
    rng = random.Random(1234)
    for rel, meta in sorted(m["files"].items()):
        size = meta["size"]
        if size < BLOCK - 1 and not rel.startswith("l1/"):
            continue
        data = content(rel, size)
        offsets = {0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK - 3, size - 1, size, size + 10}
        offsets |= {rng.randrange(0, size + 1) for _ in range(8)}
        lengths = [1, 4095, 4096, 131072, BLOCK + 2, 3 * BLOCK + 5]
        fd = os.open(os.path.join(args.mnt, rel), os.O_RDONLY)
        try:
            for off in sorted(o for o in offsets if o >= 0):
                for ln in lengths:
                    got = os.pread(fd, ln, off)
                    want = data[off:off + ln]
                    n += 1
                    if got != want:
                        errors.append("%r: pread(off=%d, len=%d) -> %d bytes, want %d%s" % (
                            rel, off, ln, len(got), len(want),
                            " (content differs)" if len(got) == len(want) else ""))
        finally:
            os.close(fd)
    rc = report(errors, "ranges")
    if not rc:
        print("ranges: %d preads at block boundaries and random offsets byte-exact" % n)
    return rc


def cmd_concurrent(args, m):
    rels = sorted(m["files"])
    t0 = time.monotonic()

    def worker(i):
        order = rels[:]
        random.Random(i).shuffle(order)
        if i % 2:
            order.reverse()
        errs, total = [], 0
        for rel in order:
            try:
                h, n = sha256_file(os.path.join(args.mnt, rel), bufsize=(64 << 10) << (i % 4))
            except OSError as e:
                errs.append("thread %d: %r: %s" % (i, rel, e))
                continue
            total += n
            if h != m["files"][rel]["sha256"]:
                errs.append("thread %d: %r: sha256 %s, want %s" % (i, rel, h[:16],
                                                                    m["files"][rel]["sha256"][:16]))
        return errs, total

    errors, total = [], 0
    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        for errs, n in pool.map(worker, range(args.threads)):
            errors += errs
            total += n
    dt = time.monotonic() - t0
    rc = report(errors, "concurrent")
    if not rc:
        print("concurrent: %d threads x %d files, %.1f MiB byte-exact in %.2fs (%.0f MiB/s)" % (
            args.threads, len(rels), total / MiB, dt, total / MiB / max(dt, 1e-9)))
    return rc


def expect_errno(errors, what, want, fn):
    try:
        r = fn()
    except OSError as e:
        if e.errno != want:
            errors.append("%s: %s, want %s" % (what, errno.errorcode.get(e.errno, e.errno),
                                               errno.errorcode[want]))
        return
    if isinstance(r, int):
        os.close(r)
    errors.append("%s: succeeded, want %s" % (what, errno.errorcode[want]))


def cmd_errors(args, m):
    errors = []
    mnt = args.mnt
    some = os.path.join(mnt, sorted(m["files"])[0])
    somedir = os.path.join(mnt, sorted(m["dirs"])[0])
    expect_errno(errors, "open(O_WRONLY) existing", errno.EROFS, lambda: os.open(some, os.O_WRONLY))
    expect_errno(errors, "open(O_RDWR) existing", errno.EROFS, lambda: os.open(some, os.O_RDWR))
    expect_errno(errors, "open(O_WRONLY|O_TRUNC)", errno.EROFS,
                 lambda: os.open(some, os.O_WRONLY | os.O_TRUNC))
    expect_errno(errors, "open(O_CREAT) new file (touch)", errno.EROFS,
                 lambda: os.open(os.path.join(mnt, "new-file"), os.O_WRONLY | os.O_CREAT, 0o644))
    r = subprocess.run(["touch", os.path.join(mnt, "touched")], stderr=subprocess.PIPE, timeout=30)
    if r.returncode == 0 or b"Read-only file system" not in r.stderr:
        errors.append("touch new file: rc=%d %r, want 'Read-only file system'" % (
            r.returncode, r.stderr.decode(errors="replace").strip()))
    expect_errno(errors, "mkdir", errno.EROFS, lambda: os.mkdir(os.path.join(mnt, "newdir")))
    expect_errno(errors, "mkdir in subdir", errno.EROFS,
                 lambda: os.mkdir(os.path.join(somedir, "newdir")))
    expect_errno(errors, "unlink", errno.EROFS, lambda: os.unlink(some))
    expect_errno(errors, "rmdir", errno.EROFS, lambda: os.rmdir(somedir))
    expect_errno(errors, "rename", errno.EROFS, lambda: os.rename(some, some + ".x"))
    expect_errno(errors, "truncate", errno.EROFS, lambda: os.truncate(some, 0))
    expect_errno(errors, "chmod", errno.EROFS, lambda: os.chmod(some, 0o600))
    expect_errno(errors, "symlink", errno.EROFS,
                 lambda: os.symlink("x", os.path.join(mnt, "link")))
    expect_errno(errors, "stat missing", errno.ENOENT,
                 lambda: os.stat(os.path.join(mnt, "no-such-file")))
    expect_errno(errors, "open missing", errno.ENOENT,
                 lambda: os.open(os.path.join(mnt, "no-such-dir", "x"), os.O_RDONLY))
    expect_errno(errors, "open missing in subdir", errno.ENOENT,
                 lambda: os.open(os.path.join(somedir, "no-such-file"), os.O_RDONLY))
    expect_errno(errors, "file used as a directory", errno.ENOTDIR,
                 lambda: os.stat(os.path.join(some, "x")))
    # the mount must still be intact afterwards
    if not os.path.exists(some):
        errors.append("after the write attempts, %r is gone" % some)
    rc = report(errors, "errors")
    if not rc:
        print("errors: writes get EROFS, missing names ENOENT, a file as a directory ENOTDIR")
    return rc


def getxattr(path, name):
    return os.getxattr(path, name).decode("utf-8", "replace")


def cmd_xattrs(args, m):
    errors = []
    rel = "blocks/one_block_plus_one.bin" if "blocks/one_block_plus_one.bin" in m["files"] \
        else sorted(m["files"])[0]
    path = os.path.join(args.mnt, rel)
    with open(path, "rb") as f:
        f.read()
    for name in ["user.tierfs.etag", "user.tierfs.source", "user.tierfs.residency"]:
        try:
            v = getxattr(path, name)
            print("xattrs: %s on %s = %r" % (name, rel, v))
            if not v.strip():
                errors.append("%s is empty" % name)
        except OSError as e:
            errors.append("getxattr(%r, %s): %s" % (rel, name, e))
    try:
        v = getxattr(path, "user.tierfs.no-such-attribute")
        errors.append("unknown xattr returned %r, want ENODATA" % v)
    except OSError as e:
        if e.errno != errno.ENODATA:
            errors.append("unknown xattr: %s, want ENODATA" % errno.errorcode.get(e.errno))
    try:
        names = os.listxattr(path)
        print("xattrs: listxattr = %s" % names)
    except OSError as e:
        errors.append("listxattr: %s" % e)
    return report(errors, "xattrs")


def parse_stats(text):
    kv = {}
    for tok in text.split():
        if "=" not in tok:
            raise ValueError("stats token %r is not key=value" % tok)
        k, v = tok.split("=", 1)
        kv[k] = v
    return kv


def cmd_stats(args):
    errors = []
    try:
        kv = parse_stats(args.text)
    except ValueError as e:
        print("stats: %s in %r" % (e, args.text), file=sys.stderr)
        return 1

    def num(k):
        try:
            return int(kv[k])
        except (KeyError, ValueError):
            errors.append("stats: %s missing or not an integer (%r)" % (k, kv.get(k)))
            return None

    for k in args.has:
        if k not in kv:
            errors.append("stats: no key %s" % k)
    for spec in args.eq:
        k, v = spec.split("=")
        n = num(k)
        if n is not None and n != int(v):
            errors.append("stats: %s = %d, want %s" % (k, n, v))
    for spec in args.gt:
        k, v = spec.split("=")
        n = num(k)
        if n is not None and not n > int(v):
            errors.append("stats: %s = %d, want > %s" % (k, n, v))
    for spec in args.lt:
        k, v = spec.split("=")
        n = num(k)
        if n is not None and not n < int(v):
            errors.append("stats: %s = %d, want < %s" % (k, n, v))
    return report(errors, "stats")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ["tree", "hashes", "ranges", "concurrent", "errors", "xattrs"]:
        p = sub.add_parser(name)
        p.add_argument("mnt")
        p.add_argument("manifest")
        if name == "concurrent":
            p.add_argument("--threads", type=int, default=8)
    p = sub.add_parser("stats")
    p.add_argument("text")
    p.add_argument("--has", action="append", default=[])
    p.add_argument("--eq", action="append", default=[])
    p.add_argument("--gt", action="append", default=[])
    p.add_argument("--lt", action="append", default=[])
    args = ap.parse_args()
    if args.cmd == "stats":
        return cmd_stats(args)
    m = load(args.manifest)
    return globals()["cmd_" + args.cmd](args, m)


if __name__ == "__main__":
    sys.exit(main())
