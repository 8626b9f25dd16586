#!/usr/bin/env python3
"""stat() every path listed in FILE (one per line, relative to the current directory).

Used by bench/scale.sh for the warm stat-all figure; exits 1 if any stat fails.
"""
import os
import sys


def main() -> int:
    failed = 0
    with open(sys.argv[1], encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            try:
                os.stat(line.rstrip("\n"))
            except OSError:
                failed += 1
    if failed:
        print(f"stat_all: {failed} failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
