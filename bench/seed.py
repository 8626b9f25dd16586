#!/usr/bin/python3
"""The benchmark dataset: its layout, a local-disk copy and the origin bucket.

Layout (same names as bench/nullfs.c generates):
    GROUP/dNNN/fNNNNN.bin    (NDIRS > 0)     GROUP/fNNNNN.bin    (NDIRS == 0)

  full:  big    2 files of 1 GiB
         small  10 dirs x 1,000 files of 128 KiB   (10,000 files, the DataLoader set)
         tiny   200 dirs x 100 files of 1 KiB     (20,000 files, the find/stat set)
  quick: big 2 x 256 MiB, small 10 x 40 x 128 KiB, tiny 10 x 50 x 1 KiB
  policy, policy-quick: the cache-policy workloads' files (LAYOUTS below)
  au:    unet3d 224 x 4.375 MiB, resnet50 8 x 1,251 x 114,660 B, cosmoflow 320 x 2.7 MiB (au.py)

Content is deterministic (a seeded pseudo-random 8 MiB block, sliced and rotated per file), so a
re-run produces the same bytes and the local copy equals the bucket.

  seed.py layout NAME                 print the nullfs --layout string
  seed.py id NAME                     print NAME-<hash of the layout>, used to name cached data dirs
  seed.py local NAME DIR              write the local copy (skipped if DIR/.complete matches)
  seed.py origin NAME DIR ENDPOINT BUCKET [--threads 16]
                                      upload DIR to the bucket (skipped if the bucket's marker
                                      object matches)
"""
import concurrent.futures as cf
import json
import os
import random
import sys
import threading
import time

LAYOUTS = {
    "full": [("big", 0, 2, 1 << 30), ("small", 10, 1000, 128 << 10), ("tiny", 200, 100, 1024)],
    "quick": [("big", 0, 2, 256 << 20), ("small", 10, 40, 128 << 10), ("tiny", 10, 50, 1024)],
    # run.sh --workload prefetch: 4,000 small files (10 dirs of 400) and two large ones
    "prefetch": [("big", 0, 2, 256 << 20), ("small", 10, 400, 128 << 10), ("tiny", 1, 1, 1024)],
    # run.sh --workload multijob, for an L2 of 256 MiB: stream = big/ (4 x 256 MiB, 4x L2),
    # hot/ (8 x 16 MiB, half of L2), proj/ (4 x 16 MiB "Parquet-like" files, 25% read)
    "multijob": [("big", 0, 4, 256 << 20), ("hot", 0, 8, 16 << 20), ("proj", 0, 4, 16 << 20),
                 ("tiny", 1, 1, 1024)],
    # run.sh --workload policy (lib/policy.sh): once/ a file read once with room in L2; hot/ a
    # 32 MiB hot set, scan/ a file of 4x the 64 MiB L2, fill/ what fills that L2 first; proj/ and
    # projmany/ the projections; mem/ the memory-limit readers' files (32 sequential, memrand/ for
    # the random readers, mempf/ for the prefetch job)
    "policy": [("once", 0, 1, 1 << 30), ("hot", 0, 8, 4 << 20), ("scan", 0, 1, 256 << 20),
               ("fill", 0, 16, 4 << 20), ("proj", 0, 1, 64 << 20), ("projmany", 0, 64, 4 << 20),
               ("mem", 0, 32, 256 << 20), ("memrand", 0, 4, 64 << 20), ("mempf", 0, 8, 32 << 20)],
    "policy-quick": [("once", 0, 1, 256 << 20), ("hot", 0, 8, 4 << 20), ("scan", 0, 1, 256 << 20),
                     ("fill", 0, 16, 4 << 20), ("proj", 0, 1, 64 << 20), ("projmany", 0, 16, 4 << 20),
                     ("mem", 0, 32, 32 << 20), ("memrand", 0, 2, 64 << 20), ("mempf", 0, 4, 32 << 20)],
    # run.sh --au (bench/au.py): the MLPerf-Storage-shaped datasets, scaled (au.py's
    # docstring says how): unet3d 224 x 4.375 MiB (140 MiB / 32), resnet50 8 record files of
    # 1,251 x 114,660 B, cosmoflow 320 x 2.7 MiB
    "au": [("unet3d", 0, 224, (140 << 20) // 32), ("resnet50", 0, 8, 1251 * 114660),
           ("cosmoflow", 0, 320, 2831155)],
    # au.py smoke (the test suite): a few small files per shape, local directory only
    "au-smoke": [("unet3d", 0, 16, 64 << 10), ("resnet50", 0, 2, 40 * 114660), ("cosmoflow", 0, 24, 32 << 10)],
}
BLOCK = 8 << 20
MARKER_KEY = ".bench-seeded.json"


def layout_string(name):
    return ",".join("%s:%d:%d:%d" % g for g in LAYOUTS[name])


def files(name):
    """Yields (relative path, size, file number) for every file of the layout."""
    n = 0
    for group, ndirs, nfiles, size in LAYOUTS[name]:
        for d in range(max(ndirs, 1)):
            for f in range(nfiles):
                rel = ("%s/d%03d/f%05d.bin" % (group, d, f)) if ndirs else ("%s/f%05d.bin" % (group, f))
                yield rel, size, n
                n += 1


_block = None


def block():
    global _block
    if _block is None:
        _block = random.Random(20240229).randbytes(BLOCK)
    return _block


def content_chunks(size, num):
    """The file's bytes as chunks of at most BLOCK, without building the whole file."""
    b = block()
    if size <= BLOCK // 2:
        off = (num * 7919 * 64) % (BLOCK - size)
        yield b[off:off + size]
        return
    j = 0
    left = size
    while left > 0:
        rot = ((num * 131 + j) * 4099) % BLOCK
        chunk = b[rot:] + b[:rot]
        take = min(left, BLOCK)
        yield chunk[:take]
        left -= take
        j += 1


def layout_id(name):
    import hashlib
    return "%s-%s" % (name, hashlib.sha1(json.dumps(spec(name), sort_keys=True).encode()).hexdigest()[:8])


def spec(name):
    return {"layout": name, "groups": LAYOUTS[name], "version": 1}


def cmd_local(name, root):
    marker = os.path.join(root, ".complete")
    want = json.dumps(spec(name), sort_keys=True)
    if os.path.exists(marker) and open(marker).read() == want:
        print("seed: local copy %s is complete, skipping" % root)
        return
    t0 = time.time()
    count = 0
    total = 0
    for rel, size, num in files(name):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            for c in content_chunks(size, num):
                f.write(c)
        count += 1
        total += size
    os.sync()
    with open(marker, "w") as f:
        f.write(want)
    print("seed: wrote %d files, %.1f MiB to %s in %.1f s"
          % (count, total / 2**20, root, time.time() - t0))


def s3_client(endpoint, threads):
    # The machine's AWS_CA_BUNDLE points at a file a plain-http endpoint does not need.
    for v in ("AWS_CA_BUNDLE",):
        os.environ.pop(v, None)
    import boto3
    from botocore.config import Config
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=threads + 4,
                      retries={"max_attempts": 5, "mode": "standard"},
                      connect_timeout=10, read_timeout=300))


def cmd_origin(name, root, endpoint, bucket, threads):
    s3 = s3_client(endpoint, threads)
    want = json.dumps(spec(name), sort_keys=True)
    try:
        got = s3.get_object(Bucket=bucket, Key=MARKER_KEY)["Body"].read().decode()
        if got == want:
            print("seed: bucket %s already seeded with layout %s, skipping" % (bucket, name))
            return
    except Exception:
        pass
    try:
        s3.create_bucket(Bucket=bucket)
    except Exception:
        pass
    items = list(files(name))
    t0 = time.time()
    done = [0]
    lock = threading.Lock()

    def put(item):
        rel, size, _ = item
        path = os.path.join(root, rel)
        for attempt in range(5):
            try:
                with open(path, "rb") as f:
                    s3.put_object(Bucket=bucket, Key=rel, Body=f, ContentLength=size)
                break
            except Exception:
                if attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))
        with lock:
            done[0] += 1
            if done[0] % 2000 == 0:
                print("seed: %d/%d objects, %.0f obj/s" % (done[0], len(items), done[0] / (time.time() - t0)),
                      flush=True)

    # Big objects first, alone, so they do not hold 16 small uploads' worth of memory each.
    big = [i for i in items if i[1] > BLOCK]
    small = [i for i in items if i[1] <= BLOCK]
    with cf.ThreadPoolExecutor(max_workers=2) as ex:
        list(ex.map(put, big))
    with cf.ThreadPoolExecutor(max_workers=threads) as ex:
        list(ex.map(put, small))
    s3.put_object(Bucket=bucket, Key=MARKER_KEY, Body=want.encode())
    print("seed: uploaded %d objects to %s/%s in %.1f s" % (len(items), endpoint, bucket, time.time() - t0))


def main(argv):
    if len(argv) >= 2 and argv[0] == "layout":
        print(layout_string(argv[1]))
    elif len(argv) >= 2 and argv[0] == "id":
        print(layout_id(argv[1]))
    elif len(argv) == 3 and argv[0] == "local":
        cmd_local(argv[1], argv[2])
    elif len(argv) >= 5 and argv[0] == "origin":
        threads = 16
        if "--threads" in argv:
            threads = int(argv[argv.index("--threads") + 1])
        cmd_origin(argv[1], argv[2], argv[3], argv[4], threads)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
