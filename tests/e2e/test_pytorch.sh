#!/usr/bin/env bash
# End-to-end: a PyTorch DataLoader(num_workers=2) over ~300 files of an s3:// mount (s3rver on
# loopback) returns every sample byte-exact, each exactly once per epoch; epoch 1 runs with
# tierfs.torch.PrefetchSampler (python/tierfs), which must hand the daemon the loader's exact order
# through user.tierfs.prefetch_list (test_pytorch.py --prefetch-sampler).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
e2e_dataset
BUCKET=tierfs-torch
s3rver_start "$BUCKET"
# Only the DataLoader's directory (300 files) goes up: the rest is test_s3_mount's business.
torch_dir="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["pytorch_dir"])' "$MANIFEST")"
s3_upload "$BUCKET" --only "$torch_dir"
mnt="$E2E_WORK/mnt"
tierfs_mount "s3://$BUCKET" "$mnt" "$E2E_WORK/cache" "$E2E_WORK/daemon.log" --endpoint "$S3_ENDPOINT"
pid=$TIERFS_PID
step "DataLoader(num_workers=2) over the mount, epoch 1 with tierfs.torch.PrefetchSampler" 300 \
  "$PY" "$E2E_DIR/test_pytorch.py" "$mnt" "$MANIFEST" --prefetch-sampler
tierfs_umount "$mnt" "$pid" || { print_log_tail "$E2E_WORK/daemon.log"; fail "unclean unmount"; }
