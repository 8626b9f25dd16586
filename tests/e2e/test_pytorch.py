#!/usr/bin/python3
"""A PyTorch DataLoader (num_workers=2) over a directory of the mount returns every file byte-exact.

    test_pytorch.py MNT MANIFEST [--dir train] [--epochs 2] [--prefetch-sampler]

The Dataset reads each file's raw bytes and returns (uint8 tensor, relative path); batch_size=None
keeps samples uncollated, so the tensor's bytes are exactly the file's. Every file of the directory
must be seen exactly once per epoch, with the manifest's sha256. Epoch 1 reads cold, epoch 2 from
the cache (shuffled differently).

With --prefetch-sampler (the python/tierfs package, from the checkout), on a fresh mount:
  - a PrefetchSampler(ahead=40) is advanced by one sample without any read: the daemon's list job
    (user.tierfs.prefetch_list) must hold exactly those 40 files and, once done, exactly those 40
    of the directory are in L2 (user.tierfs.residency) and the other files in no tier;
  - epoch 1 then runs with PrefetchSampler(ahead=64) wrapping the shuffle: the loader must read
    the samples in the sampler's order, every hand-over of the sampler must have been accepted
    (300 samples in all), and the list job must end done holding the files of its last hand-overs
    (a job that finished before the next hand-over is followed by a new one).
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


class Recording(torch.utils.data.Sampler):
    """Remembers the order it hands out (the wrapped sampler's, drawn once per epoch)."""

    def __init__(self, inner):
        super().__init__(None)
        self.inner = inner
        self.order = []

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        self.order = list(self.inner)
        return iter(self.order)


def wait_list_done(tierfs, mnt, errors, what, timeout=60):
    t0 = time.monotonic()
    while True:
        s = tierfs.list_status(mnt)
        if s["state"] in ("done", "failed", "cancelled") or time.monotonic() - t0 > timeout:
            break
        time.sleep(0.05)
    if s["state"] != "done" or s["files"][0] != s["files"][1]:
        errors.append("%s: the list job ended %s" % (what, s))
    return s


def sampler_prefix_check(mnt, rels, errors):
    """Advances a PrefetchSampler without reading: the daemon gets exactly its first `ahead`."""
    import tierfs
    from tierfs.torch import PrefetchSampler
    s0 = tierfs.list_status(mnt)
    if s0["state"] != "none":
        errors.append("fresh mount: list job state %s, expected none" % s0)
    inner = Recording(torch.utils.data.RandomSampler(range(len(rels)),
                                                     generator=torch.Generator().manual_seed(7)))
    paths = [os.path.join(mnt, r) for r in rels]
    ps = PrefetchSampler(inner, paths, ahead=40)
    it = iter(ps)
    next(it)
    if not ps.active or ps.sent != 40:
        errors.append("prefix: sampler active=%s sent=%d, expected 40 sent" % (ps.active, ps.sent))
    s = wait_list_done(tierfs, mnt, errors, "prefix")
    if s["files"][1] != 40:
        errors.append("prefix: the list job holds %s files, expected 40" % (s["files"],))
    told = {rels[i] for i in inner.order[:40]}
    for r in rels:
        res = tierfs.residency(os.path.join(mnt, r))
        l2 = res.get("l2", (0, 0))
        held = sum(v[0] for v in res.values() if isinstance(v, tuple))
        if r in told and (l2[1] == 0 or l2[0] != l2[1]):
            errors.append("prefix: %s was listed but is not in L2: %s" % (r, res))
        elif r not in told and held:
            errors.append("prefix: %s was not listed but is cached: %s" % (r, res))
    it.close()
    print("pytorch: PrefetchSampler handed the daemon the first 40 of the order; exactly those are in L2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mnt")
    ap.add_argument("manifest")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--prefetch-sampler", action="store_true")
    args = ap.parse_args()
    if args.prefetch_sampler:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
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
    if args.prefetch_sampler:
        import tierfs
        from tierfs.torch import PrefetchSampler
        sampler_prefix_check(args.mnt, rels, errors)
    for epoch in range(args.epochs):
        g = torch.Generator()
        g.manual_seed(epoch)
        ps = None
        if args.prefetch_sampler and epoch == 0:
            inner = Recording(torch.utils.data.RandomSampler(range(len(rels)), generator=g))
            ps = PrefetchSampler(inner, [os.path.join(args.mnt, r) for r in rels], ahead=64)
            loader = DataLoader(ds, batch_size=None, sampler=ps, num_workers=2, timeout=120,
                                persistent_workers=False)
        else:
            loader = DataLoader(ds, batch_size=None, shuffle=True, generator=g, num_workers=2,
                                timeout=120, persistent_workers=False)
        seen = collections.Counter()
        order = []
        nbytes, t0 = 0, time.monotonic()
        for tensor, rel in loader:
            seen[rel] += 1
            order.append(rel)
            data = tensor.numpy().tobytes()
            nbytes += len(data)
            meta = want.get(rel)
            if meta is None:
                errors.append("epoch %d: unexpected sample %r" % (epoch, rel))
            elif len(data) != meta["size"] or hashlib.sha256(data).hexdigest() != meta["sha256"]:
                errors.append("epoch %d: %r: %d bytes, sha256 differs from the manifest" % (
                    epoch, rel, len(data)))
        dt = time.monotonic() - t0
        if ps is not None:
            if order != [rels[i] for i in inner.order]:
                errors.append("epoch %d: the loader did not read in the sampler's order" % epoch)
            if not ps.active or ps.sent != len(rels):
                errors.append("epoch %d: PrefetchSampler active=%s sent %d of %d" % (
                    epoch, ps.active, ps.sent, len(rels)))
            s = wait_list_done(tierfs, args.mnt, errors, "epoch %d" % epoch)
            # Every hand-over was accepted (a refused set would have made the sampler pass through)
            # and appended to the list job; a job that finished between two hand-overs is followed
            # by a new one, so the last job holds the files of the last k hand-overs, for some k.
            suffix = {sum(ps.handovers[k:]) for k in range(len(ps.handovers))}
            if sum(ps.handovers) != len(rels) or len(ps.handovers) < 3 or s["files"][1] not in suffix:
                errors.append("epoch %d: the list job holds %s files; hand-overs %s" % (
                    epoch, s["files"], ps.handovers))
            print("pytorch: epoch %d: PrefetchSampler told the daemon all %d samples in %d sets, "
                  "list job %s" % (epoch, ps.sent, ps.sets, s))
        dup = [r for r, c in seen.items() if c != 1]
        missing = sorted(set(want) - set(seen))
        if dup:
            errors.append("epoch %d: samples seen more than once: %s" % (epoch, dup[:5]))
        if missing:
            errors.append("epoch %d: %d samples never seen: %s" % (epoch, len(missing), missing[:5]))
        print("pytorch: epoch %d: %d samples, %.1f MiB in %.2fs (%.0f samples/s)" % (
            epoch, sum(seen.values()), nbytes / 2**20, dt, sum(seen.values()) / max(dt, 1e-9)))
    if args.prefetch_sampler:
        # the rest of the package's API against the real daemon: stats, prefetch of a file and of
        # the directory (everything is cached by now, so the jobs end at once)
        st = tierfs.stats(args.mnt)
        if not isinstance(st.get("origin.requests"), int) or st["origin.requests"] < len(rels):
            errors.append("tierfs.stats: origin.requests=%r, expected >= %d" % (
                st.get("origin.requests"), len(rels)))
        seen_states = []
        h = tierfs.prefetch([os.path.join(args.mnt, rels[0]), os.path.join(args.mnt, d)],
                            wait=True, timeout=60, progress=lambda s: seen_states.append(s["state"]))
        s = h.status()
        if s["state"] != "done" or seen_states[-1:] != ["done"] or s["files"][1] != 1 + len(rels):
            errors.append("tierfs.prefetch: %s (states seen %s)" % (s, seen_states))
        print("pytorch: tierfs.stats and tierfs.prefetch(file, dir, wait=True) work on the mount")
    for e in errors[:20]:
        print("  ERROR:", e, file=sys.stderr)
    if errors:
        return 1
    print("pytorch: DataLoader(num_workers=2) returned all %d files byte-exact, each once per epoch"
          % len(want))
    return 0


if __name__ == "__main__":
    sys.exit(main())
