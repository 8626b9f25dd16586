#!/usr/bin/python3
"""Writes N files of SIZE bytes the way tierfs's L2 writes one block file each (tiercache/FORMAT.md,
"Insert"): into one of 256 fan-out directories named by the first two hex digits of a 32-hex-digit
name, under a temporary name created with O_EXCL, its whole pages with O_DIRECT (the rest, if any,
through the page cache), closed, then renamed over the final name. No fsync (L2's default) and no
index record (tierfs also writes a metastore record per block; not modelled: this is the least).

  flash_writer.py [--segment] DIR N SIZE

With --segment the N objects are appended to one file, DIR/segment (whole pages with O_DIRECT, each
object at a page-aligned offset; created once), the way a log-structured cache (CacheLib's flash
cache, a segment-file L2) writes them: no file creation per object.

The flash side of run.sh raw_loaderpar's "fusel2": what keeping each fetched object on flash costs
a cache at the least, as a job of its own beside the origin's GETs and a FUSE delivery.
"""
import hashlib
import mmap
import os
import sys


def main():
    args = sys.argv[1:]
    segment = bool(args) and args[0] == "--segment"
    if segment:
        args = args[1:]
    if len(args) != 3:
        sys.exit(__doc__)
    root, n, size = args[0], int(args[1]), int(args[2])
    page = mmap.PAGESIZE
    if segment:
        return append(root, n, size, page)
    whole = size // page * page
    buf = mmap.mmap(-1, max(page, whole))  # page-aligned, as O_DIRECT needs
    buf.write(b"\xa5" * whole)
    rest = b"\x5a" * (size - whole)
    made = set()
    for i in range(n):
        name = hashlib.md5(b"block-%d" % i).hexdigest()
        d = os.path.join(root, name[:2])
        if d not in made:
            os.makedirs(d, exist_ok=True)
            made.add(d)
        final = os.path.join(d, name)
        tmp = "%s.tmp.%d.%d" % (final, os.getpid(), i)
        if whole:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
            try:
                os.write(fd, memoryview(buf)[:whole])
            finally:
                os.close(fd)
        if rest:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.pwrite(fd, rest, whole)
            finally:
                os.close(fd)
        os.rename(tmp, final)
    return 0


def append(root, n, size, page):
    """N objects of SIZE bytes appended to one file, each at a page-aligned offset (O_DIRECT)."""
    slot = (size + page - 1) // page * page
    buf = mmap.mmap(-1, slot)
    buf.write(b"\xa5" * size)
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, "segment"), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
    try:
        for i in range(n):
            os.pwrite(fd, memoryview(buf), i * slot)
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
