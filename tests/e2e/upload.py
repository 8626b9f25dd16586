#!/usr/bin/python3
"""Uploads a generated dataset to an S3 endpoint with boto3, then checks the bucket against it.

    upload.py DATADIR MANIFEST --endpoint http://127.0.0.1:PORT --bucket NAME

Files go up as objects named by their relative path (big ones as multipart uploads, as real
buckets hold them); every entry of the manifest's "markers" goes up as a zero-byte folder-marker
key ending in '/'. Afterwards the bucket's keys, sizes and (for single-part objects) ETags are
checked against the manifest, and ListObjectsV2 with Delimiter='/' must report every directory as
a common prefix (this fails on an unpatched s3rver: scripts/s3rver.sh install patches it).
Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, else s3rver's (S3RVER/S3RVER); region us-east-1.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import sys
import time

# An AWS_CA_BUNDLE set by the machine is irrelevant for a plain-http loopback endpoint.
os.environ.pop("AWS_CA_BUNDLE", None)

import boto3  # noqa: E402
from boto3.s3.transfer import TransferConfig  # noqa: E402
from botocore.config import Config  # noqa: E402

MiB = 1024 * 1024


def client(endpoint):
    return boto3.client(
        "s3", endpoint_url=endpoint,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "S3RVER"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "S3RVER"),
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                      retries={"max_attempts": 3}, connect_timeout=10, read_timeout=120))


def list_all(s3, bucket, prefix="", delimiter=""):
    keys, prefixes = {}, []
    kw = {"Bucket": bucket, "Prefix": prefix}
    if delimiter:
        kw["Delimiter"] = delimiter
    for page in s3.get_paginator("list_objects_v2").paginate(**kw):
        for o in page.get("Contents", []):
            keys[o["Key"]] = o
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    return keys, prefixes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("datadir")
    ap.add_argument("manifest")
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--create-bucket", action="store_true",
                    help="create the bucket first (s3rver makes it at start, RGW does not)")
    ap.add_argument("--only", metavar="DIR",
                    help="upload (and verify) only the files under this directory of the dataset")
    args = ap.parse_args()

    with open(args.manifest, encoding="utf-8") as f:
        manifest = json.load(f)
    if args.only:
        d = args.only.strip("/")
        manifest["files"] = {k: v for k, v in manifest["files"].items() if k.startswith(d + "/")}
        manifest["markers"] = [m for m in manifest["markers"] if m.startswith(d + "/")]
        keep = set()
        for k in manifest["files"]:
            p = os.path.dirname(k)
            while p:
                keep.add(p)
                p = os.path.dirname(p)
        manifest["dirs"] = sorted(keep)
    s3 = client(args.endpoint)
    if args.create_bucket:
        s3.create_bucket(Bucket=args.bucket)
    xfer = TransferConfig(multipart_threshold=32 * MiB, multipart_chunksize=16 * MiB,
                          max_concurrency=4)

    def put(rel):
        path = os.path.join(args.datadir, rel)
        if manifest["files"][rel]["size"] >= 32 * MiB:
            s3.upload_file(path, args.bucket, rel, Config=xfer)
        else:
            with open(path, "rb") as f:
                s3.put_object(Bucket=args.bucket, Key=rel, Body=f.read())

    t0 = time.monotonic()
    rels = sorted(manifest["files"], key=lambda r: -manifest["files"][r]["size"])
    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        futs = [pool.submit(put, r) for r in rels]
        futs += [pool.submit(s3.put_object, Bucket=args.bucket, Key=m, Body=b"")
                 for m in manifest["markers"]]
        for fu in concurrent.futures.as_completed(futs):
            fu.result()
    total = sum(v["size"] for v in manifest["files"].values())
    dt = time.monotonic() - t0
    print("upload: %d objects + %d folder markers, %.1f MiB in %.1fs to %s/%s" % (
        len(rels), len(manifest["markers"]), total / MiB, dt, args.endpoint, args.bucket))
    if args.no_verify:
        return 0

    # Verify: keys and sizes; single-part ETags are the MD5 of the content.
    errors = []
    keys, _ = list_all(s3, args.bucket)
    want = set(manifest["files"]) | set(manifest["markers"])
    if set(keys) != want:
        errors.append("keys differ: missing %s, extra %s" % (
            sorted(want - set(keys))[:10], sorted(set(keys) - want)[:10]))
    for rel, meta in manifest["files"].items():
        o = keys.get(rel)
        if o and o["Size"] != meta["size"]:
            errors.append("%s: size %d, want %d" % (rel, o["Size"], meta["size"]))
        if o and meta["size"] < 32 * MiB and "-" not in o["ETag"]:
            with open(os.path.join(args.datadir, rel), "rb") as f:
                md5 = hashlib.md5(f.read()).hexdigest()
            if o["ETag"].strip('"') != md5:
                errors.append("%s: etag %s, want %s" % (rel, o["ETag"], md5))
    # Delimited listing: every directory shows up as a common prefix of its parent.
    for d in [""] + manifest["dirs"]:
        prefix = d + "/" if d else ""
        _, prefixes = list_all(s3, args.bucket, prefix, "/")
        want_children = sorted(x + "/" for x in manifest["dirs"]
                               if os.path.dirname(x) == d)
        if sorted(prefixes) != want_children:
            errors.append("list(prefix=%r, delimiter='/'): common prefixes %s, want %s" % (
                prefix, sorted(prefixes), want_children))
    for e in errors:
        print("upload: VERIFY ERROR:", e, file=sys.stderr)
    if errors:
        return 1
    print("upload: verified %d keys and %d delimited listings" % (len(keys), len(manifest["dirs"]) + 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
