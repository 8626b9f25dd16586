#!/usr/bin/python3
"""A reader for run.sh --workload prefetch: opens and reads whole files of DIR one after another
(sorted, at most N), timing each; prints {"n", "p50_ms", "p99_ms", "max_ms"} as JSON.

  pf_reader.py DIR N
"""
import json
import os
import sys
import time


def main():
    d, n = sys.argv[1], int(sys.argv[2])
    lat = []
    for name in sorted(os.listdir(d))[:n]:
        t0 = time.perf_counter()
        with open(os.path.join(d, name), "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
        lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()

    def pick(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))]

    print(json.dumps({"n": len(lat), "p50_ms": round(pick(0.5), 2), "p99_ms": round(pick(0.99), 2),
                      "max_ms": round(lat[-1], 2)}))


if __name__ == "__main__":
    main()
