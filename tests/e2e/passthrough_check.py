#!/usr/bin/env python3
"""Checks of files opened through FUSE passthrough (tests/e2e/test_passthrough.sh).

  passthrough_check.py files MNT_DIR SRC_DIR     every file byte-exact, read whole, past EOF,
                                                 with pread, mmap and two opens at once
  passthrough_check.py change MNT_FILE SRC_FILE TTL
      the object changes at the origin while an open of the old version is kept: a new open gets
      the new version on a new inode (its own pages and backing file; the daemon answers the open
      on the old inode ESTALE and the kernel looks the path up again), the old open keeps reading
      the old version, and after it is closed the new version still opens and reads whole
"""
import mmap
import os
import sys
import time


def fail(msg):
    print(f"passthrough_check: {msg}", file=sys.stderr)
    sys.exit(1)


def check_files(mnt, src):
    n = 0
    for name in sorted(os.listdir(src)):
        want = open(os.path.join(src, name), "rb").read()
        p = os.path.join(mnt, name)
        if os.stat(p).st_size != len(want):
            fail(f"{name}: size {os.stat(p).st_size}, want {len(want)}")
        with open(p, "rb") as a, open(p, "rb") as b:
            if a.read() != want:
                fail(f"{name}: bytes differ")
            if a.read(4096) != b"":
                fail(f"{name}: bytes past the end of the file")
            if len(want) > 20 and os.pread(b.fileno(), 100, len(want) - 20) != want[-20:]:
                fail(f"{name}: pread of the last bytes differs")
            if want:
                with mmap.mmap(b.fileno(), 0, prot=mmap.PROT_READ) as m:
                    if m[:] != want:
                        fail(f"{name}: mmap differs")
        n += 1
    print(f"{n} files byte-exact (read, EOF, pread, mmap, two opens at once)")


def check_change(mnt_file, src_file, ttl):
    old = open(src_file, "rb").read()
    h = open(mnt_file, "rb")
    if h.read(10) != old[:10]:
        fail("the old version's first bytes differ")
    new = os.urandom(len(old) // 2 + 1)
    tmp = src_file + ".tmp"
    with open(tmp, "wb") as f:
        f.write(new)
    os.rename(tmp, src_file)
    time.sleep(ttl + 1.5)  # the mount's metadata TTL passes: the next open revalidates
    with open(mnt_file, "rb") as f:
        if os.fstat(f.fileno()).st_ino == os.fstat(h.fileno()).st_ino:
            fail("the new version was opened on the inode an open of the old one reads")
        got = f.read()
        if got != new:
            fail(f"beside the old open, read {len(got)} bytes that are not the new version")
    h.seek(0)
    if h.read() != old:
        fail("the open of the old version no longer reads the old version")
    h.close()
    with open(mnt_file, "rb") as f:
        got = f.read()
        if got != new:
            fail(f"after closing the old open, read {len(got)} bytes that are not the new version")
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            if m[:] != new:
                fail("mmap of the new version differs")
    print("changed object: the new version on a new inode beside the old open, and after it")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "files":
        check_files(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 5 and sys.argv[1] == "change":
        check_change(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
