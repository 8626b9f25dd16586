#!/usr/bin/python3
"""A PyTorch DataLoader (num_workers=2) over a directory of the mount returns every file byte-exact.

    test_pytorch.py MNT MANIFEST [--dir train] [--epochs 2]

The Dataset reads each file's raw bytes and returns (uint8 tensor, relative path); batch_size=None
keeps samples uncollated, so the tensor's bytes are exactly the file's. Every file of the directory
must be seen exactly once per epoch, with the manifest's sha256. Epoch 1 reads cold, epoch 2 from
the cache (shuffled differently).
"""
import argparse
import collections
import hashlib
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class RawFiles(Dataset):
    def __init__(self, root, rels):
        self.root = root
        self.rels = rels

    def __len__(self):
        return len(self.rels)

    def __getitem__(self, i):
        rel = self.rels[i]
        with open(os.path.join(self.root, rel), "rb") as f:
            data = f.read()
        return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
            torch.empty(0, dtype=torch.uint8), rel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mnt")
    ap.add_argument("manifest")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    with open(args.manifest, encoding="utf-8") as f:
        m = json.load(f)
    d = args.dir or m["pytorch_dir"]
    want = {rel: meta for rel, meta in m["files"].items() if rel.startswith(d + "/")}
    # the file list comes from the mount (readdir), not from the manifest
    rels = []
    for root, dirs, files in os.walk(os.path.join(args.mnt, d)):
        dirs.sort()
        for name in sorted(files):
            rels.append(os.path.relpath(os.path.join(root, name), args.mnt))
    errors = []
    if sorted(rels) != sorted(want):
        errors.append("listing of %s/ differs from the manifest: missing %s, extra %s" % (
            d, sorted(set(want) - set(rels))[:5], sorted(set(rels) - set(want))[:5]))
    ds = RawFiles(args.mnt, rels)
    for epoch in range(args.epochs):
        g = torch.Generator()
        g.manual_seed(epoch)
        loader = DataLoader(ds, batch_size=None, shuffle=True, generator=g, num_workers=2,
                            timeout=120, persistent_workers=False)
        seen = collections.Counter()
        nbytes, t0 = 0, time.monotonic()
        for tensor, rel in loader:
            seen[rel] += 1
            data = tensor.numpy().tobytes()
            nbytes += len(data)
            meta = want.get(rel)
            if meta is None:
                errors.append("epoch %d: unexpected sample %r" % (epoch, rel))
            elif len(data) != meta["size"] or hashlib.sha256(data).hexdigest() != meta["sha256"]:
                errors.append("epoch %d: %r: %d bytes, sha256 differs from the manifest" % (
                    epoch, rel, len(data)))
        dt = time.monotonic() - t0
        dup = [r for r, c in seen.items() if c != 1]
        missing = sorted(set(want) - set(seen))
        if dup:
            errors.append("epoch %d: samples seen more than once: %s" % (epoch, dup[:5]))
        if missing:
            errors.append("epoch %d: %d samples never seen: %s" % (epoch, len(missing), missing[:5]))
        print("pytorch: epoch %d: %d samples, %.1f MiB in %.2fs (%.0f samples/s)" % (
            epoch, sum(seen.values()), nbytes / 2**20, dt, sum(seen.values()) / max(dt, 1e-9)))
    for e in errors[:20]:
        print("  ERROR:", e, file=sys.stderr)
    if errors:
        return 1
    print("pytorch: DataLoader(num_workers=2) returned all %d files byte-exact, each once per epoch"
          % len(want))
    return 0


if __name__ == "__main__":
    sys.exit(main())
