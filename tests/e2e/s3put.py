#!/usr/bin/python3
"""Puts objects of deterministic bytes into an S3 bucket (for the prefetch/policy e2e tests).

    s3put.py --endpoint URL --bucket B KEY=SIZE[:SEED] ...   writes pattern bytes
    s3put.py --endpoint URL --bucket B --sha KEY=SIZE[:SEED]  prints the sha256 only (no upload)

The bytes of (SIZE, SEED) are the same every time, so a test can check what it reads. Credentials
are s3rver's unless AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are set.
"""
import argparse
import hashlib
import os
import random
import sys

os.environ.pop("AWS_CA_BUNDLE", None)


def pattern(size, seed):
    rng = random.Random(seed)
    return rng.randbytes(size)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--endpoint")
    ap.add_argument("--bucket")
    ap.add_argument("--sha", action="store_true")
    ap.add_argument("objects", nargs="+")
    a = ap.parse_args()
    client = None
    if not a.sha:
        import boto3
        from botocore.config import Config
        client = boto3.client(
            "s3", endpoint_url=a.endpoint,
            aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "S3RVER"),
            aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "S3RVER"),
            region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
    for spec in a.objects:
        key, _, rest = spec.partition("=")
        size, _, seed = rest.partition(":")
        data = pattern(int(size), int(seed or 0))
        if a.sha:
            print(hashlib.sha256(data).hexdigest())
        else:
            client.put_object(Bucket=a.bucket, Key=key, Body=data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
