#!/usr/bin/env bash
# End-to-end: s3rver on loopback → upload the generated dataset → mount s3://BUCKET with tierfs
# through /dev/fuse → tree, bytes, concurrency, EROFS/ENOENT, xattrs, stats → unmount → remount on
# the same cache dir and check that no byte comes from the origin.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
e2e_dataset
BUCKET=tierfs-e2e
s3rver_start "$BUCKET"
s3_upload "$BUCKET"
mount_cycle "s3://$BUCKET" --endpoint "$S3_ENDPOINT"
