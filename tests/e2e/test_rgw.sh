#!/usr/bin/env bash
# End-to-end against Ceph RADOS Gateway (scripts/rgw.sh), an S3 server that verifies SigV4 (s3rver
# does not): a small awkward dataset (names that need percent-encoding in the signed canonical
# request, a 9 MiB file read in parallel parts, more than one listing page, folder markers) is
# uploaded with boto3, mounted with signed requests, read byte-exact, listed, unmounted and
# remounted from the cache. Then the mount-time check must fail fast with a clear message for a
# wrong secret, an unknown access key and a bucket that does not exist.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
BUCKET=tierfs-rgw
AK=TIERFSRGWTEST0000001
SK=tierfs-rgw-secret-0123456789abcdefghij
rgw_start "$AK" "$SK"
export E2E_S3_ACCESS_KEY="$AK" E2E_S3_SECRET="$SK"
e2e_cred_env

DATASET="$E2E_WORK/dataset"
MANIFEST="$E2E_WORK/manifest.json"
step "generate the rgw dataset" 60 "$PY" "$E2E_DIR/gen_dataset.py" "$DATASET" "$MANIFEST" --profile rgw
step "upload to RGW (boto3, creates the bucket)" 120 env "${E2E_ENV[@]}" "$PY" "$E2E_DIR/upload.py" \
  "$DATASET" "$MANIFEST" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" --create-bucket

# Cold, warm, ranges, 8 threads, EROFS/ENOENT, xattrs, stats; unmount; remount from the cache.
mount_cycle "s3://$BUCKET" --endpoint "$S3_ENDPOINT"

# mount_must_fail NAME TEXT [ENV...] -- SOURCE: the mount fails (no hang: within 30 s), its error
# names TEXT, nothing is left mounted, and the secret in use appears in no output.
mount_must_fail() {
  local name="$1" text="$2"
  shift 2
  local envs=()
  while [[ "$1" != -- ]]; do envs+=("$1"); shift; done
  shift
  local src="$1" mnt="$E2E_WORK/mnt-$name" out="$E2E_WORK/$name.txt" rc=0 t0=$SECONDS
  mkdir -p "$mnt"
  log "-> $name: the mount must fail naming '$text'"
  env "${E2E_ENV[@]}" "${envs[@]}" timeout -k 5 30 "$TIERFS" mount "$src" "$mnt" \
    --cache-dir "$E2E_WORK/cache-$name" --endpoint "$S3_ENDPOINT" -f >"$out" 2>&1 </dev/null || rc=$?
  if is_mounted "$mnt"; then
    fusermount3 -u -z "$mnt" || true
    fail "$name: $mnt got mounted"
  fi
  (( rc != 0 )) || fail "$name: the mount succeeded"
  (( rc != 124 && rc != 137 )) || fail "$name: the mount hung (no answer within 30 s)"
  sed 's/^/    /' "$out" | tail -n 5
  grep -qF -- "$text" "$out" || fail "$name: the error does not name '$text'"
  grep -qF -- "$SK" "$out" && fail "$name: the secret appears in the output"
  grep -qF -- "wrong-secret-value" "$out" && fail "$name: the secret appears in the output"
  log "ok $name: failed in $((SECONDS - t0))s (exit $rc) with a clear message"
}
mount_must_fail wrong-secret "SignatureDoesNotMatch" \
  AWS_SECRET_ACCESS_KEY=wrong-secret-value -- "s3://$BUCKET"
mount_must_fail wrong-secret-names-key "$AK" \
  AWS_SECRET_ACCESS_KEY=wrong-secret-value -- "s3://$BUCKET"
mount_must_fail unknown-key "InvalidAccessKeyId" AWS_ACCESS_KEY_ID=NOSUCHKEY0000000000 -- "s3://$BUCKET"
mount_must_fail no-such-bucket "bucket tierfs-no-such-bucket does not exist" -- "s3://tierfs-no-such-bucket"
