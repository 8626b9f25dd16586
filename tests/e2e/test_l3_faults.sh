#!/usr/bin/env bash
# End-to-end: faults of the L3 tier (tests/e2e/fault_proxy.py between tierfs and the L3 s3rver,
# the mount's --l3-endpoint). Host A fills L3; then for each fault on L3's GETs — 503 SlowDown,
# reset mid-body, stall (half of the GETs), a corrupted body byte, a rewritten ETag — a fresh host
# (own cache dir) reads every file byte-exact (from the origin where L3 fails), each read within
# 20 s, and the stats show the fault (l3.errors or l3.corruptions).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
e2e_init
fault_dataset
BUCKET=tierfs-l3f
L3_BUCKET=tierfs-l3f-cache
s3rver_start "$BUCKET" s3rver-origin
ORIGIN="$S3_ENDPOINT"
fault_upload "$BUCKET"
s3rver_start "$L3_BUCKET" s3rver-l3
fault_proxy_start l3 "$S3_PORT"
export TIERFS_E2E_L3_KEY=S3RVER TIERFS_E2E_L3_SECRET=S3RVER
CFG="$E2E_WORK/tierfs.toml"
fault_config "$CFG" "[cache]" 'l3_access_key_id_env = "TIERFS_E2E_L3_KEY"' \
  'l3_secret_access_key_env = "TIERFS_E2E_L3_SECRET"' 'l3_request_timeout = "1s"' \
  'l3_max_attempts = 2' 'l3_write_queue = 1024'
MNT="" PID="" LOGF=""
host() {  # host NAME: mounts a fresh host with L3 behind the proxy
  scenario_mount "$1" "s3://$BUCKET" "$E2E_WORK/cache-$1" "$E2E_WORK/daemon-$1.log" \
    --endpoint "$ORIGIN" --config "$CFG" --l1-size 8MiB --l2-size 256MiB \
    --l3 "s3://$L3_BUCKET/r1" --l3-endpoint "$PROXY_ENDPOINT"
}
host_down() { scenario_umount; }
check() {
  local stats
  stats="$(stats_xattr "$MNT")" || fail "cannot read the stats of $MNT"
  "$PY" "$E2E_DIR/verify.py" stats "$stats" "$@" || { log "stats: $stats"; fail "stats check failed ($*)"; }
}

host a
fault_read "host A: every file byte-exact (fills L3)" 60 "$MNT" --require ok
deadline=$((SECONDS + 60))
until [[ "$(stat_of "$MNT" l3.write.pending)" == 0 ]]; do
  (( SECONDS < deadline )) || fail "L3 write-back not drained"
  sleep 0.5
done
check --gt l3.inserts=0 --eq l3.write.dropped=0
host_down
host b
fault_read "host B: every file byte-exact from L3" 60 "$MNT" --require ok
check --gt l3.hits=0 --eq origin.bytes=0
host_down

# l3_fault NAME RULE STATS-CHECK...: a fresh host reads everything byte-exact under the fault.
l3_fault() {
  local name="$1" rule="$2" action
  shift 2
  action="$(sed 's/.*"action":"\([^"]*\)".*/\1/' <<<"$rule")"
  fault_set l3 "{\"rules\":[$rule]}"
  host "$name"
  fault_read "L3 $name: every file byte-exact" 60 "$MNT" --require ok --max-seconds 20
  (( $(fault_fired l3 "$action") > 0 )) || fail "L3 $name: the fault never fired"
  check "$@"
  log "L3 $name: l3.errors=$(stat_of "$MNT" l3.errors) l3.corruptions=$(stat_of "$MNT" l3.corruptions) l3.hits=$(stat_of "$MNT" l3.hits)"
  host_down
}
run_scenario slowdown l3_fault slowdown '{"action":"503","kind":"range"}' --gt l3.errors=0 --gt origin.bytes=0
run_scenario reset l3_fault reset '{"action":"reset","kind":"range"}' --gt l3.errors=0 --gt origin.bytes=0
run_scenario stall l3_fault stall '{"action":"stall","kind":"range","seconds":10,"prob":0.5}' --gt l3.errors=0 \
  --gt origin.bytes=0
run_scenario corrupt l3_fault corrupt '{"action":"corrupt","kind":"range"}' --gt l3.corruptions=0 --gt origin.bytes=0 \
  --gt l3.listings.rejected=0
# A rewritten ETag: the bytes are right (the object's header names the block and its checksum
# matches), so either they are used or the answer is refused; in both cases the read is
# byte-exact.
run_scenario etag l3_fault etag '{"action":"etag","kind":"range"}'
scenarios_done
