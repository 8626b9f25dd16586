#!/usr/bin/python3
"""Readers for the fault tests: every read gives the right bytes or an error, in bounded time.

    fault_check.py gen OUTDIR MANIFEST
        a small dataset (a few multi-block files and small ones under f/) and, for every file,
        a second version of the same size in OUTDIR.v2/ (its sha256 is "sha256_v2" in the
        manifest, which otherwise has gen_dataset.py's format)
    fault_check.py read MNT MANIFEST [--files REGEX] [--require ok|error|any] [--max-seconds S]
                        [--allow-v2] [--threads N] [--rounds N]
        reads each matching file whole (N threads, each its own order); a read is "ok" (sha256
        of the manifest), "v2" (the second version, accepted only with --allow-v2), an error
        (errno) or WRONG (any other bytes: e.g. a mix of two versions). Fails on any wrong read,
        on a read (success or error) slower than --max-seconds, and when --require ok/error is
        not met by every read.
    fault_check.py soak MNT MANIFEST --seconds S [--threads 16]
        random whole-file reads and random preads (checked against the generator's bytes) until
        S seconds passed, each dropping the file's page cache first (so reads reach the daemon); fails on any wrong byte or a read slower than --max-seconds; at least
        one read must succeed (with --no-errors: every read).
"""
import argparse
import concurrent.futures
import errno
import hashlib
import json
import os
import random
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_dataset import content  # noqa: E402

MiB = 1024 * 1024
FILES = {  # rel -> size: multi-block files with short last blocks, and small ones
    "f/a.bin": 3 * MiB + 123,
    "f/b.bin": 2 * MiB,
    "f/c.bin": 5 * MiB + 7,
    "f/d.bin": MiB - 1,
    "f/small/s1.bin": 40000,
    "f/small/s2.bin": 700,
    "f/small/s3.bin": 131072,
    "f/big/e.bin": 12 * MiB + 5,
}


def v2_content(rel, size):
    return content("v2:" + rel, size)


def cmd_gen(args):
    files, dirs = {}, set()
    for rel, size in sorted(FILES.items()):
        for root, data in ((args.outdir, content(rel, size)), (args.outdir + ".v2", v2_content(rel, size))):
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        files[rel] = {"size": size, "sha256": hashlib.sha256(content(rel, size)).hexdigest(),
                      "sha256_v2": hashlib.sha256(v2_content(rel, size)).hexdigest()}
        d = os.path.dirname(rel)
        while d:
            dirs.add(d)
            d = os.path.dirname(d)
    with open(args.manifest, "w", encoding="utf-8") as f:
        json.dump({"files": files, "dirs": sorted(dirs), "markers": []}, f, indent=1, sort_keys=True)
    print("fault_check: %d files, %.1f MiB in %s (second versions in %s.v2)" % (
        len(files), sum(FILES.values()) / MiB, args.outdir, args.outdir))
    return 0


def drop_page_cache(fd):
    """The kernel's page cache of this file goes, so the next reads reach the daemon."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass


def read_whole(path, uncached=False):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        if uncached:
            drop_page_cache(f.fileno())
        while True:
            b = f.read(MiB)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.wrong = []
        self.slow = []
        self.max_dt = 0.0

    def add(self, what, rel, dt, max_seconds, detail=""):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1
            self.max_dt = max(self.max_dt, dt)
            if what == "WRONG":
                self.wrong.append("%s: %s" % (rel, detail))
            if dt > max_seconds:
                self.slow.append("%s: %s after %.1fs (bound %.1fs)" % (rel, what, dt, max_seconds))


def classify(meta, digest, allow_v2):
    if digest == meta["sha256"]:
        return "ok"
    if digest == meta.get("sha256_v2"):
        return "v2" if allow_v2 else "WRONG"
    return "WRONG"


def one_read(mnt, rel, meta, tally, args, uncached=False):
    t0 = time.monotonic()
    try:
        digest = read_whole(os.path.join(mnt, rel), uncached)
        what = classify(meta, digest, args.allow_v2)
        detail = "sha256 %s is neither version" % digest[:16] if what == "WRONG" else ""
        if what == "WRONG" and digest == meta.get("sha256_v2"):
            detail = "the second version, not allowed here"
    except OSError as e:
        what, detail = errno.errorcode.get(e.errno, str(e.errno)), str(e)
    tally.add(what, rel, time.monotonic() - t0, args.max_seconds, detail)


def summary(tally, name):
    print("%s: %s, slowest read %.1fs" % (
        name, " ".join("%s=%d" % kv for kv in sorted(tally.counts.items())), tally.max_dt))
    for w in tally.wrong[:20]:
        print("  WRONG BYTES:", w, file=sys.stderr)
    for s in tally.slow[:20]:
        print("  TOO SLOW:", s, file=sys.stderr)


def cmd_read(args):
    with open(args.manifest, encoding="utf-8") as f:
        m = json.load(f)
    rx = re.compile(args.files)
    rels = sorted(r for r in m["files"] if rx.search(r))
    if not rels:
        print("read: no file matches %r" % args.files, file=sys.stderr)
        return 1
    tally = Tally()

    def worker(i):
        order = rels[:]
        random.Random(i).shuffle(order)
        for _ in range(args.rounds):
            for rel in order:
                one_read(args.mnt, rel, m["files"][rel], tally, args)

    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(worker, range(args.threads)))
    summary(tally, "read %s" % args.files)
    rc = 1 if tally.wrong or tally.slow else 0
    n_ok = tally.counts.get("ok", 0) + tally.counts.get("v2", 0)
    n_all = sum(tally.counts.values())
    if args.require == "ok" and n_ok != n_all:
        print("read: want every read to succeed", file=sys.stderr)
        rc = 1
    if args.require == "error" and n_ok:
        print("read: want every read to fail", file=sys.stderr)
        rc = 1
    if args.errnos:
        allowed = set(args.errnos.split(","))
        bad = {k for k in tally.counts if k not in ("ok", "v2", "WRONG")} - allowed
        if bad:
            print("read: errors %s, want only %s" % (sorted(bad), sorted(allowed)), file=sys.stderr)
            rc = 1
    if args.out:
        with open(args.out, "w") as f:
            json.dump(tally.counts, f)
    return rc


def pread_full(fd, ln, off):
    """pread until ln bytes or end of file. A read cut short by a failing block returns the
    bytes before it (kernel semantics); the next pread then fails (OSError), or returns 0 bytes,
    which before the end of the file is a wrong answer (a truncated file)."""
    out = b""
    while len(out) < ln:
        b = os.pread(fd, ln - len(out), off + len(out))
        if not b:
            break
        out += b
    return out


def cmd_soak(args):
    with open(args.manifest, encoding="utf-8") as f:
        m = json.load(f)
    rels = sorted(m["files"])
    data = {r: content(r, m["files"][r]["size"]) for r in rels}
    tally = Tally()
    end = time.monotonic() + args.seconds

    def worker(i):
        rng = random.Random(1000 + i)
        while time.monotonic() < end:
            rel = rng.choice(rels)
            if rng.random() < 0.3:
                one_read(args.mnt, rel, m["files"][rel], tally, args, uncached=True)
                continue
            size = len(data[rel])
            t0 = time.monotonic()
            try:
                fd = os.open(os.path.join(args.mnt, rel), os.O_RDONLY)
                try:
                    drop_page_cache(fd)
                    for _ in range(8):
                        off = rng.randrange(0, size + 1)
                        ln = rng.choice([1, 4096, 65536, MiB, 3 * MiB])
                        want = data[rel][off:off + ln]
                        got = pread_full(fd, ln, off)
                        if got != want:
                            tally.add("WRONG", rel, time.monotonic() - t0, args.max_seconds,
                                      "pread(%d, %d): %d bytes, want %d%s" % (
                                          off, ln, len(got), len(want),
                                          " (content differs)" if len(got) == len(want) else ""))
                            break
                    else:
                        tally.add("ok", rel, time.monotonic() - t0, args.max_seconds)
                finally:
                    os.close(fd)
            except OSError as e:
                tally.add(errno.errorcode.get(e.errno, str(e.errno)), rel, time.monotonic() - t0,
                          args.max_seconds)

    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(worker, range(args.threads)))
    summary(tally, "soak %d threads %ds" % (args.threads, args.seconds))
    if not tally.counts.get("ok"):
        print("soak: no read succeeded", file=sys.stderr)
        return 1
    if args.no_errors and sum(tally.counts.values()) != tally.counts["ok"]:
        print("soak: --no-errors, but some reads failed: %s" % dict(tally.counts), file=sys.stderr)
        return 1
    return 1 if tally.wrong or tally.slow else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gen")
    p.add_argument("outdir")
    p.add_argument("manifest")
    for name in ("read", "soak"):
        p = sub.add_parser(name)
        p.add_argument("mnt")
        p.add_argument("manifest")
        p.add_argument("--max-seconds", type=float, default=30.0)
        p.add_argument("--threads", type=int, default=1 if name == "read" else 16)
        p.add_argument("--allow-v2", action="store_true")
        if name == "read":
            p.add_argument("--files", default=".")
            p.add_argument("--require", choices=["ok", "error", "any"], default="any")
            p.add_argument("--errnos", help="comma-separated errno names allowed, e.g. EIO,ESTALE")
            p.add_argument("--rounds", type=int, default=1)
            p.add_argument("--out", help="write the counts here (JSON)")
        else:
            p.add_argument("--seconds", type=int, required=True)
            p.add_argument("--no-errors", action="store_true",
                           help="fail on any read that fails (EIO, ...), not only on wrong bytes")
    args = ap.parse_args()
    return globals()["cmd_" + args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
