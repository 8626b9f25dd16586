#!/usr/bin/env bash
# L3 measurement (not part of the test suite): how long a second host takes to read a dataset
# that a first host already pulled through the shared L3, against the first host reading it from
# the origin alone.
#
#   bench/l3_host_b.sh [SIZE_MIB [FILES]]     default: 1024 MiB in 4 files (4 x 256 MiB)
#
# Two s3rver instances on loopback (origin, L3), the dataset made of random bytes and uploaded to
# the origin; then
#   A  (cold, L3 configured):       host A reads everything: origin → L1/L2, write-back to L3
#   B  (cold host, L3 warm):        host B, fresh cache dir, reads everything from L3
#   O  (cold host, no L3):          host O, fresh cache dir, no L3: the origin alone
# Each read is `cat` of every file to /dev/null after dropping nothing (fresh mounts, fresh cache
# dirs, so the page cache of the mount is empty). Prints the seconds and MB/s of each, and the
# origin/L3 counters. Env: TIERFS (binary), KEEP=1 (keep the work dir), ORIGIN_DELAY_MS=N (the
# mounts reach the origin through bench/delay_proxy.py, N ms per chunk each way: a remote origin
# against a near L3; unset: both s3rver instances on plain loopback).
set -euo pipefail
SIZE_MIB="${1:-1024}"
FILES="${2:-4}"
E2E_NAME=l3_host_b
source "$(dirname "$0")/../tests/e2e/lib.sh"
e2e_init
[[ -n "${KEEP:-}" ]] && E2E_KEEP_ON_FAIL=1

s3rver_start bench-origin s3rver-origin
ORIGIN="$S3_ENDPOINT"
UPLOAD_ENDPOINT="$ORIGIN"
if [[ -n "${ORIGIN_DELAY_MS:-}" ]]; then
  # The mounts reach the origin through a latency proxy (a remote origin); L3 stays near.
  "$PY" "$E2E_ROOT/bench/delay_proxy.py" --upstream-port "$S3_PORT" --delay-ms "$ORIGIN_DELAY_MS" \
    --port-file "$E2E_WORK/proxy.port" >"$E2E_WORK/proxy.log" 2>&1 &
  PROXY_PID=$!
  trap 'rc=$?; kill "$PROXY_PID" 2>/dev/null; e2e_cleanup $rc' EXIT
  for _ in $(seq 100); do [[ -s "$E2E_WORK/proxy.port" ]] && break; sleep 0.1; done
  ORIGIN="http://127.0.0.1:$(cat "$E2E_WORK/proxy.port")"
  log "origin through a ${ORIGIN_DELAY_MS} ms delay proxy at $ORIGIN"
fi
s3rver_start bench-l3 s3rver-l3
L3="$S3_ENDPOINT"

per=$((SIZE_MIB / FILES))
log "dataset: $FILES files of $per MiB"
mkdir -p "$E2E_WORK/data"
for i in $(seq 0 $((FILES - 1))); do
  head -c "$((per * 1024 * 1024))" /dev/urandom >"$E2E_WORK/data/part-$i.bin"
done
step "upload" 900 env -u AWS_CA_BUNDLE "$PY" - "$UPLOAD_ENDPOINT" "$E2E_WORK/data" <<'EOF'
import os, sys, boto3
from boto3.s3.transfer import TransferConfig
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="S3RVER",
                  aws_secret_access_key="S3RVER", region_name="us-east-1")
for name in sorted(os.listdir(sys.argv[2])):
    s3.upload_file(os.path.join(sys.argv[2], name), "bench-origin", "ds/" + name,
                   Config=TransferConfig(multipart_threshold=1 << 40))
EOF
(cd "$E2E_WORK/data" && sha256sum part-*.bin >"$E2E_WORK/sums")

cat >"$E2E_WORK/l3.toml" <<EOF
[cache]
# Enough queue for the whole dataset, so no write-back is dropped.
l3_write_queue = $((SIZE_MIB + 64))
l3_write_threads = 4
EOF

read_all() {  # read_all NAME MNT: cat every file, print seconds; check sha256
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$2/ds" && cat part-*.bin >/dev/null)
  t1=$(date +%s.%N)
  (cd "$2/ds" && sha256sum -c --quiet "$E2E_WORK/sums") || fail "$1: checksum mismatch"
  echo "$t0 $t1" | awk -v n="$1" -v mib="$SIZE_MIB" '{ d = $2 - $1; printf "%s %.2f s %.0f MB/s\n", n, d, mib * 1.048576 / d }'
}


results=()
one() {  # one NAME ARGS...: mount, read, report, unmount
  local name="$1"
  shift
  local mnt="$E2E_WORK/mnt-$name"
  tierfs_mount "s3://bench-origin" "$mnt" "$E2E_WORK/cache-$name" "$E2E_WORK/daemon-$name.log" \
    --endpoint "$ORIGIN" "$@"
  local pid=$TIERFS_PID r
  r="$(read_all "$name" "$mnt")"
  results+=("$r")
  log "$r"
  if [[ " $* " == *" --l3 "* ]]; then wait_l3_drained "$mnt" 900; fi
  local st
  st="$(stats_xattr "$mnt")"
  results+=("  $(tr ' ' '\n' <<<"$st" | grep -E '^(origin\.(requests|bytes)|l3\.(hits|bytes|inserts|write\.dropped|corruptions))=' | tr '\n' ' ')")
  tierfs_umount "$mnt" "$pid" || fail "unmount $name"
}

L3ARGS=(--config "$E2E_WORK/l3.toml" --l3 s3://bench-l3/r1 --l3-endpoint "$L3")
one A_origin_with_l3_writeback "${L3ARGS[@]}"
one B_from_l3 "${L3ARGS[@]}"
one O_origin_only_no_l3

echo
echo "=== L3 host-B measurement: $SIZE_MIB MiB in $FILES files, s3rver origin and L3 on loopback, origin delay ${ORIGIN_DELAY_MS:-0} ms"
for r in "${results[@]}"; do echo "$r"; done
