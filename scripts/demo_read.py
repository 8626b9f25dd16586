#!/usr/bin/python3
"""Helper of scripts/demo.sh: reads files of a tierfs mount, timing each set, and shows which tier
served the bytes (the change of the user.tierfs.stats counters during the read).

    demo_read.py MNT LABEL PATH... [--drop-page-cache] [--manifest M]

PATH is a file or a directory (read recursively), relative to MNT. --drop-page-cache first drops
the kernel's cached pages of those files (posix_fadvise DONTNEED), so the read reaches the daemon
(L1/L2) instead of being served by the page cache. With --manifest, every file's sha256 is checked.
"""
import argparse
import hashlib
import json
import os
import sys
import time

MiB = 1024 * 1024


def stats(mnt):
    try:
        raw = os.getxattr(mnt, "user.tierfs.stats").decode()
    except OSError as e:
        return {"error": str(e)}
    out = {}
    for tok in raw.split():
        k, _, v = tok.partition("=")
        out[k] = v
    return out


def human(n):
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if n < 1024 or unit == "GiB":
            return "%.1f %s" % (n, unit) if unit != "B" else "%d B" % n
        n /= 1024.0


def files_of(mnt, rel):
    p = os.path.join(mnt, rel)
    if os.path.isdir(p):
        for root, dirs, files in os.walk(p):
            dirs.sort()
            for f in sorted(files):
                yield os.path.relpath(os.path.join(root, f), mnt)
    else:
        yield rel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mnt")
    ap.add_argument("label")
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--drop-page-cache", action="store_true")
    ap.add_argument("--manifest")
    args = ap.parse_args()
    manifest = None
    if args.manifest:
        with open(args.manifest, encoding="utf-8") as f:
            manifest = json.load(f)["files"]

    rels = [r for p in args.paths for r in files_of(args.mnt, p)]
    if args.drop_page_cache:
        for rel in rels:
            fd = os.open(os.path.join(args.mnt, rel), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    before = stats(args.mnt)
    bad = 0
    total = 0
    t0 = time.monotonic()
    for rel in rels:
        h = hashlib.sha256() if manifest else None
        with open(os.path.join(args.mnt, rel), "rb", buffering=0) as f:
            while True:
                b = f.read(4 * MiB)
                if not b:
                    break
                total += len(b)
                if h:
                    h.update(b)
        if manifest and h.hexdigest() != manifest[rel]["sha256"]:
            print("    WRONG BYTES in %s" % rel)
            bad += 1
    dt = time.monotonic() - t0
    after = stats(args.mnt)

    what = args.paths[0] if len(args.paths) == 1 else "%d paths" % len(args.paths)
    print("  %-34s %-22s %5d file(s) %10s in %7.3fs  %8.1f MiB/s%s" % (
        args.label, what, len(rels), human(total), dt, total / MiB / max(dt, 1e-9),
        "" if not manifest else ("  sha256 ok" if not bad else "  %d WRONG" % bad)))
    # Where the bytes came from: the counters that moved, bytes first.
    moved = []
    for k, v in after.items():
        try:
            d = int(v) - int(before.get(k, "0"))
        except ValueError:
            continue
        if d and (k.endswith("bytes") or k.endswith("hits") or k.endswith("misses")):
            moved.append((k, d))
    moved.sort(key=lambda kv: (not kv[0].endswith("bytes"), kv[0]))
    if moved:
        print("  %-34s %s" % ("", "  ".join("%s +%s" % (k, human(d) if k.endswith("bytes") else d)
                                          for k, d in moved)))
    else:
        print("  %-34s (no daemon counter moved: served by the kernel page cache)" % "")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
