#!/usr/bin/env python3
"""Random readers for test_memory_limit.sh: THREADS threads each read COUNT random ranges (4 KiB to
1 MiB) of FILE through the mount and compare every byte with the same range of ORIGIN_FILE.
Exits 1 on the first wrong byte (printing where), 0 when every range matched."""
import os
import random
import sys
import threading


def main():
    mounted, origin, threads, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    size = os.path.getsize(origin)
    errors = []

    def reader(seed):
        rng = random.Random(seed)
        with open(mounted, "rb", buffering=0) as m, open(origin, "rb", buffering=0) as o:
            for _ in range(count):
                n = rng.randint(4096, 1 << 20)
                off = rng.randrange(0, size - n)
                got = os.pread(m.fileno(), n, off)
                want = os.pread(o.fileno(), n, off)
                if got != want:
                    errors.append(f"{mounted}: {n} bytes at {off} differ from the origin")
                    return

    ts = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    print(f"{threads} random readers x {count} ranges of {mounted}: every byte matches the origin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
