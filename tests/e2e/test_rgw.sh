#!/usr/bin/env bash
# End-to-end against Ceph RADOS Gateway (scripts/rgw.sh), an S3 server that verifies SigV4 (s3rver
# does not): a small awkward dataset (names that need percent-encoding in the signed canonical
# request, a 9 MiB file read in parallel parts, more than one listing page, folder markers) is
# uploaded with boto3, mounted with signed requests, read byte-exact, listed, unmounted and
# remounted from the cache. Then L3 on RGW: host A mounts with a second RGW bucket as its L3 tier
# (every L3 GET/PUT signed and verified) and lists and reads everything (blocks and directory
# listings stored to L3, the 1010-entry directory listed in more than one page); host B, with its
# own cache, lists every directory from the L3 listings (no origin LIST) and reads every byte from
# L3 (no origin GET); host C with a wrong L3 secret is refused by RGW and lists from the origin.
# Then the mount-time check must fail fast with a clear message for a wrong secret, an unknown
# access key and a bucket that does not exist.
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

# ---- L3 on RGW (SigV4-verified), shared by two hosts
L3_BUCKET=tierfs-rgw-l3
step "create the L3 bucket on RGW" 60 env -u AWS_CA_BUNDLE "${E2E_ENV[@]}" "$PY" -c '
import sys, boto3
boto3.client("s3", endpoint_url=sys.argv[1]).create_bucket(Bucket=sys.argv[2])' "$S3_ENDPOINT" "$L3_BUCKET"
export TIERFS_E2E_L3_KEY="$AK" TIERFS_E2E_L3_SECRET="$SK" TIERFS_E2E_L3_BAD_SECRET=wrong-l3-secret
l3_config() {  # l3_config FILE SECRET_ENV
  cat >"$1" <<EOF
[cache]
l3_access_key_id_env = "TIERFS_E2E_L3_KEY"
l3_secret_access_key_env = "$2"
l3_write_queue = 4096
[metadata]
ttl = "1h"
EOF
}
l3_config "$E2E_WORK/l3.toml" TIERFS_E2E_L3_SECRET
l3_config "$E2E_WORK/l3-bad.toml" TIERFS_E2E_L3_BAD_SECRET
l3_host() {  # l3_host NAME CONFIG: mounts host NAME (own cache) with L3 on RGW; sets MNT, PID
  MNT="$E2E_WORK/mnt-l3-$1"
  tierfs_mount "s3://$BUCKET" "$MNT" "$E2E_WORK/cache-l3-$1" "$E2E_WORK/daemon-l3-$1.log" \
    --endpoint "$S3_ENDPOINT" --config "$2" --l3 "s3://$L3_BUCKET/region-1" --l3-endpoint "$S3_ENDPOINT"
  PID=$TIERFS_PID
}
l3_host_umount() {  # l3_host_umount NAME
  tierfs_umount "$MNT" "$PID" || { print_log_tail "$E2E_WORK/daemon-l3-$1.log"; fail "unclean unmount of host $1"; }
}
l3_host a "$E2E_WORK/l3.toml"
step "L3 host A: tree (find) equals the manifest" 120 "$PY" "$E2E_DIR/verify.py" tree "$MNT" "$MANIFEST"
step "L3 host A: sha256 of every file (from the origin)" 120 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
wait_l3_drained "$MNT" 120
check_stats "$MNT" --gt origin.requests=0 --gt l3.inserts=0 --eq l3.write.errors=0 \
  --eq l3.write.dropped=0 --gt l3.listings.stored=0 --eq l3.errors=0
stats_a="$(stats_xattr "$MNT")"
n_dirs="$(stat_value "$stats_a" l3.listings.stored)"
lists_a="$(stat_value "$stats_a" catalog.list_requests)"
# One page per directory, and at least one more for many/ (1010 keys: ListObjectsV2 pages of 1000).
(( lists_a > n_dirs )) || fail "host A: $lists_a LIST pages for $n_dirs directories: no second page"
log "ok L3 host A: $n_dirs listings and every block stored to L3 on RGW ($lists_a LIST pages)"
l3_host_umount a
l3_host b "$E2E_WORK/l3.toml"
step "L3 host B: tree (find) equals the manifest (listings from L3)" 120 "$PY" "$E2E_DIR/verify.py" tree "$MNT" "$MANIFEST"
step "L3 host B: sha256 of every file (from L3)" 120 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
check_stats "$MNT" --eq catalog.list_requests=0 --eq "l3.listings.hits=$n_dirs" \
  --eq l3.listings.rejected=0 --eq origin.requests=0 --gt l3.hits=0 --eq l3.corruptions=0 --eq l3.errors=0
log "ok L3 host B: $n_dirs directories listed and every byte read from L3 on RGW, nothing from the origin"
l3_host_umount b
l3_host c "$E2E_WORK/l3-bad.toml"
step "L3 host C (wrong L3 secret): tree (find) equals the manifest" 120 "$PY" "$E2E_DIR/verify.py" tree "$MNT" "$MANIFEST"
check_stats "$MNT" --gt catalog.list_requests=0 --eq l3.listings.hits=0 --gt l3.listings.errors=0
grep -q "SignatureDoesNotMatch" "$E2E_WORK/daemon-l3-c.log" || fail "host C: no SignatureDoesNotMatch from RGW in the log"
log "ok L3 host C: RGW refused the wrongly signed L3 requests; listed from the origin"
l3_host_umount c

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
