#!/usr/bin/python3
"""Generates a deterministic dataset for the end-to-end tests and the demo.

    gen_dataset.py OUTDIR MANIFEST [--profile test|demo|rgw]

Every byte is derived from the file's relative path, so two runs produce identical trees. The
manifest (JSON) lists what a correct mount of the tree must show:

    {"files":   {"rel/path": {"size": N, "sha256": "..."}},
     "dirs":    ["rel/dir", ...],            # every directory, including empty ones
     "markers": ["rel/dir/", ...],           # directories also uploaded as folder-marker keys
     "pytorch_dir": "train"}                 # the directory the DataLoader test reads

The "test" profile covers the edge cases: nested directories (3 levels), an empty file, files of
exactly one block (1 MiB), one block + 1 byte and 100 MiB, a directory that holds only
sub-directories (small/), ~200 small files, 1100 files in one directory (listing pages), 300 files for the PyTorch test, names with spaces,
unicode, '%', '+' and '=', and folder markers (an empty one and one over a non-empty directory).
The "rgw" profile is a small subset of these shapes (with a 9 MiB file, more than one part of a
read) for the Ceph RGW tests. The "demo" profile is a few hundred MB: a 256 MiB file, 16 MiB shards and small files.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import sys

MiB = 1024 * 1024
BLOCK = MiB  # tierfs default block size


def content(rel, size):
    """Deterministic bytes for a path: a PRNG seeded by the path (distinct for every block)."""
    seed = int.from_bytes(hashlib.sha256(rel.encode("utf-8")).digest()[:8], "little")
    rng = random.Random(seed)
    chunk = 16 * MiB  # randbytes() of more than 256 MiB overflows
    return b"".join(rng.randbytes(min(chunk, size - off)) for off in range(0, size, chunk))


def test_profile():
    files = {}  # rel -> size
    # nested directories, 3 levels
    files["l1/top.bin"] = 3000
    files["l1/l2/mid.bin"] = 5000
    files["l1/l2/l3/deep.bin"] = 7000
    files["l1/l2/l3/deep2.bin"] = BLOCK + 4096
    # boundaries
    files["empty.bin"] = 0
    files["blocks/one_block.bin"] = BLOCK
    files["blocks/one_block_plus_one.bin"] = BLOCK + 1
    files["blocks/one_block_minus_one.bin"] = BLOCK - 1
    files["blocks/big_100MiB.bin"] = 100 * MiB
    # ~200 small files in a directory that holds only sub-directories (small/ has no object of
    # its own: the s3rver listing-bug shape, and a common real-bucket shape)
    rng = random.Random(42)
    for c in range(10):
        for i in range(20):
            files["small/cls%d/sample_%03d.bin" % (c, i)] = rng.randint(1, 64 * 1024)
    # 300 files for the PyTorch DataLoader test
    for c in range(6):
        for i in range(50):
            files["train/class_%d/img_%04d.raw" % (c, i)] = rng.randint(100, 48 * 1024)
    # awkward names
    files["names/with space.bin"] = 1234
    files["names/two  spaces .txt"] = 77
    files["données/日本語 file.bin"] = 4321
    files["données/é/ü.txt"] = 99
    files["names/100%.bin"] = 100
    files["names/%41%2F literal.bin"] = 101
    files["names/a+b=c.bin"] = 102
    files["names/plus+sign/x.bin"] = 103
    files["names/year=2024/month=01/part-0000.bin"] = 2048
    files["names/~tilde,comma;semi@at!.bin"] = 55
    files["names/(parens) [brackets] {braces}.bin"] = 66
    files["names/'quote'.bin"] = 12
    # more entries than one ListObjectsV2 page (1000 keys): the listing must follow continuations
    for i in range(1100):
        files["many/f_%04d.txt" % i] = 16 + (i * 37) % 200
    dirs_extra = ["markers/empty"]  # an empty directory: exists only as a folder marker in S3
    markers = ["markers/empty/", "l1/"]  # "l1/" marks a directory that also has children
    return files, dirs_extra, markers, "train"


def rgw_profile():
    """Small and awkward, for the Ceph RGW tests (which verify SigV4, so every name that needs
    percent-encoding in the canonical request is signed for real): a few seconds to upload."""
    files = {}
    files["l1/top.bin"] = 3000
    files["l1/l2/l3/deep.bin"] = BLOCK + 4096
    files["empty.bin"] = 0
    files["blocks/one_block.bin"] = BLOCK
    files["blocks/one_block_plus_one.bin"] = BLOCK + 1
    files["blocks/nine_MiB_plus_3.bin"] = 9 * MiB + 3  # more than one 8 MiB part
    rng = random.Random(43)
    for c in range(3):
        for i in range(10):
            files["small/cls%d/sample_%03d.bin" % (c, i)] = rng.randint(1, 64 * 1024)
    files["names/with space.bin"] = 1234
    files["données/日本語 file.bin"] = 4321
    files["names/100%.bin"] = 100
    files["names/%41%2F literal.bin"] = 101
    files["names/a+b=c.bin"] = 102
    files["names/year=2024/month=01/part-0000.bin"] = 2048
    files["names/~tilde,comma;semi@at!.bin"] = 55
    files["names/(parens) [brackets] {braces}.bin"] = 66
    files["names/'quote'.bin"] = 12
    # more than one ListObjectsV2 page (RGW percent-encodes '/' in keys with encoding-type=url)
    for i in range(1010):
        files["many/f_%04d.txt" % i] = 16 + (i * 37) % 200
    return files, ["markers/empty"], ["markers/empty/", "l1/"], "small"


def demo_profile():
    files = {}
    files["models/checkpoint-256MiB.bin"] = 256 * MiB
    for i in range(8):
        files["shards/train-%04d.tar" % i] = 16 * MiB
    rng = random.Random(7)
    for c in range(4):
        for i in range(100):
            files["images/class_%d/img_%05d.jpg" % (c, i)] = rng.randint(8 * 1024, 96 * 1024)
    files["README.txt"] = 600
    return files, [], ["images/"], "images"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("manifest")
    ap.add_argument("--profile", choices=["test", "demo", "rgw"], default="test")
    args = ap.parse_args()

    files, dirs_extra, markers, pytorch_dir = {"test": test_profile, "demo": demo_profile,
                                               "rgw": rgw_profile}[args.profile]()
    out = os.path.abspath(args.outdir)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)

    manifest_files = {}
    dirs = set(dirs_extra)
    for rel, size in sorted(files.items()):
        data = content(rel, size)
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        manifest_files[rel] = {"size": size, "sha256": hashlib.sha256(data).hexdigest()}
        parent = os.path.dirname(rel)
        while parent:
            dirs.add(parent)
            parent = os.path.dirname(parent)
    for d in dirs_extra:
        os.makedirs(os.path.join(out, d), exist_ok=True)
        parent = os.path.dirname(d)
        while parent:
            dirs.add(parent)
            parent = os.path.dirname(parent)
    for m in markers:
        assert m.endswith("/") and m[:-1] in dirs, m
    if args.profile == "test":
        only_subdirs = [d for d in dirs
                        if not any(os.path.dirname(f) == d for f in files)
                        and any(os.path.dirname(x) == d for x in dirs)]
        assert "small" in only_subdirs, only_subdirs

    manifest = {"files": manifest_files, "dirs": sorted(dirs), "markers": markers,
                "pytorch_dir": pytorch_dir}
    with open(args.manifest, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False, sort_keys=True)
    total = sum(files.values())
    print("gen_dataset: %d files, %d dirs, %.1f MiB in %s" % (len(files), len(dirs), total / MiB, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
