#!/usr/bin/python3
"""Readers that run across a daemon restart (tests/e2e/test_restart.sh) and report what they saw.

    restart_reader.py seq MNT KEY=SIZE:SEED STOPFILE        reads the file again and again in
        1 MiB reads until STOPFILE exists (after the pass that saw it start)
    restart_reader.py epoch MNT STOPFILE WORKERS KEY=SIZE:SEED...   shuffled epochs over the
        files by WORKERS processes (a DataLoader's workers), until STOPFILE exists
    restart_reader.py direct MNT KEY=SIZE:SEED STOPFILE     O_DIRECT 1 MiB reads round the file
        (each one reaches the daemon, whatever the page cache holds) until STOPFILE exists; no
        byte check, only the waits: the pause a restart costs
    restart_reader.py hold MNT KEY=SIZE:SEED...             opens every file and notes its inode
        number, prints READY, waits for a line on stdin, then reads each through the fd it held

Each prints one JSON line: passes, errors (each "KEY: ERRNO"), wrong (keys whose bytes differed
from the pattern s3put.py wrote), max_wait_s (the longest single read(2) or open(2)), and for hold
the inode numbers before and after. The bytes of KEY=SIZE:SEED are s3put.py's pattern.
"""
import errno
import hashlib
import json
import mmap
import multiprocessing
import os
import random
import sys
import time


def spec(s):
    key, rest = s.split("=", 1)
    size, seed = rest.split(":")
    return key, int(size), int(seed)


def expected_sha(size, seed):
    return hashlib.sha256(random.Random(seed).randbytes(size)).hexdigest()


def read_fd(fd, waits):
    h = hashlib.sha256()
    while True:
        t0 = time.monotonic()
        b = os.read(fd, 1 << 20)
        waits.append(time.monotonic() - t0)
        if not b:
            return h.hexdigest()
        h.update(b)


def read_file(path, waits):
    t0 = time.monotonic()
    fd = os.open(path, os.O_RDONLY)
    waits.append(time.monotonic() - t0)
    try:
        return read_fd(fd, waits)
    finally:
        os.close(fd)


def err_name(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def seq(mnt, s, stop):
    key, size, seed = spec(s)
    want = expected_sha(size, seed)
    waits, errors, wrong, passes = [], [], [], 0
    while True:
        seen_stop = os.path.exists(stop)
        try:
            if read_file(os.path.join(mnt, key), waits) != want:
                wrong.append(key)
        except OSError as e:
            errors.append(f"{key}: {err_name(e)}")
        passes += 1
        print(f"pass {passes}", file=sys.stderr, flush=True)
        if seen_stop or errors:
            break
    return {"passes": passes, "errors": errors, "wrong": wrong, "max_wait_s": max(waits)}


def direct(mnt, s, stop):
    key, size, _ = spec(s)
    fd = os.open(os.path.join(mnt, key), os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 1 << 20)
    waits, errors, off = [], [], 0
    while not os.path.exists(stop):
        t0 = time.monotonic()
        try:
            os.preadv(fd, [buf], off)
        except OSError as e:
            errors.append(f"{key}: {err_name(e)}")
        waits.append(time.monotonic() - t0)
        off = (off + (1 << 20)) % max(1, size - (1 << 20))
    os.close(fd)
    return {"passes": len(waits), "errors": errors[:5], "wrong": [], "max_wait_s": max(waits)}


def epoch_worker(args):
    mnt, items = args
    waits, errors, wrong = [], [], []
    for key, want in items:
        try:
            if read_file(os.path.join(mnt, key), waits) != want:
                wrong.append(key)
        except OSError as e:
            errors.append(f"{key}: {err_name(e)}")
    return max(waits) if waits else 0.0, errors, wrong


def epoch(mnt, stop, workers, specs):
    items = [(k, expected_sha(n, s)) for k, n, s in map(spec, specs)]
    rng = random.Random(1)
    max_wait, errors, wrong, passes = 0.0, [], [], 0
    with multiprocessing.Pool(workers) as pool:
        while True:
            seen_stop = os.path.exists(stop)
            rng.shuffle(items)
            shards = [(mnt, items[i::workers]) for i in range(workers)]
            for w, e, bad in pool.map(epoch_worker, shards):
                max_wait = max(max_wait, w)
                errors += e
                wrong += bad
            passes += 1
            print(f"epoch {passes}", file=sys.stderr, flush=True)
            if seen_stop or errors:
                break
    return {"passes": passes, "errors": errors, "wrong": wrong, "max_wait_s": max_wait}


def hold(mnt, specs):
    files = []
    for k, n, s in map(spec, specs):
        path = os.path.join(mnt, k)
        fd = os.open(path, os.O_RDONLY)
        files.append((k, expected_sha(n, s), fd, os.fstat(fd).st_ino))
    print("READY", flush=True)
    sys.stdin.readline()
    waits, errors, wrong, before, after = [], [], [], {}, {}
    for k, want, fd, ino in files:
        before[k] = ino
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            if read_fd(fd, waits) != want:
                wrong.append(k)
            after[k] = os.stat(os.path.join(mnt, k)).st_ino
        except OSError as e:
            errors.append(f"{k}: {err_name(e)}")
        os.close(fd)
    return {"passes": 1, "errors": errors, "wrong": wrong, "max_wait_s": max(waits or [0]),
            "inodes_before": before, "inodes_after": after}


def main():
    mode = sys.argv[1]
    if mode == "seq":
        r = seq(sys.argv[2], sys.argv[3], sys.argv[4])
    elif mode == "epoch":
        r = epoch(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:])
    elif mode == "direct":
        r = direct(sys.argv[2], sys.argv[3], sys.argv[4])
    elif mode == "hold":
        r = hold(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(f"unknown mode {mode}")
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
