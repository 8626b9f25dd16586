#!/usr/bin/env python3
"""Publishing a new tree by rename under a file:// mount (tests/e2e/test_file_origin.sh).

file_swap_check.py MNT PUB: PUB/current is the mounted root, PUB/new the tree to publish. Opens
MNT/big.bin and reads its first MiB, then `mv current old && mv new current`, waits (at most 30 s)
until a fresh open of MNT/big.bin reads the new bytes, and reads the rest of the old handle: every
read must give the old file's bytes at that offset or fail with ESTALE, never bytes of the new
file. Prints "old handle: old bytes" or "old handle: ESTALE after N bytes"; exits 1 on a failure.
"""
import errno
import hashlib
import os
import sys
import time

MIB = 1 << 20


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    mnt, pub = sys.argv[1], sys.argv[2]
    old_bytes = open(os.path.join(pub, "current", "big.bin"), "rb").read()
    new_sha = sha(os.path.join(pub, "new", "big.bin"))
    fd = os.open(os.path.join(mnt, "big.bin"), os.O_RDONLY)
    first = os.pread(fd, MIB, 0)
    if first != old_bytes[:MIB]:
        print("first MiB of the old handle differs from the old file")
        return 1
    os.rename(os.path.join(pub, "current"), os.path.join(pub, "old"))
    os.rename(os.path.join(pub, "new"), os.path.join(pub, "current"))
    t0 = time.monotonic()
    seen = None
    while time.monotonic() - t0 < 30:
        try:
            seen = sha(os.path.join(mnt, "big.bin"))
        except OSError as e:
            seen = "error %s" % e
        if seen == new_sha:
            break
        time.sleep(0.2)
    else:
        print("the mount still serves the old big.bin 30 s after the swap (last: %s)" % seen)
        return 1
    print("new tree served %.1f s after the swap" % (time.monotonic() - t0))
    off = MIB
    while off < len(old_bytes):
        try:
            got = os.pread(fd, MIB, off)
        except OSError as e:
            if e.errno == errno.ESTALE:
                print("old handle: ESTALE after %d bytes" % off)
                return 0
            print("old handle: read at %d failed: %s" % (off, e))
            return 1
        if not got or got != old_bytes[off:off + len(got)]:
            print("old handle: bytes at %d are not the old file's" % off)
            return 1
        off += len(got)
    os.close(fd)
    print("old handle: old bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
