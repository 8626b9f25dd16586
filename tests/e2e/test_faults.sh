#!/usr/bin/env bash
# End-to-end: injected origin faults (tests/e2e/fault_proxy.py between tierfs and s3rver). For each
# fault, a fresh mount (small L1, fresh cache dir, short S3 timeouts and 3 attempts):
#   * transient (the first few ranged GETs fail): every read is byte-exact (the retries absorb it);
#   * persistent (every ranged GET fails): cached files still read byte-exact, an uncached one fails
#     with EIO within a bound, and reads it byte-exact once the fault is gone, without a remount;
#   * for 503 SlowDown, 500, reset mid-body, short body, stall before the answer, stall mid-body.
# Then: a server ignoring Range (200 with the whole object) and a rewritten response ETag give
# correct bytes or a bounded error; an object replaced between two ranged reads (s3rver ignores
# If-Match; the proxy also strips it) gives entirely the old or entirely the new version, never a
# mix; with a server honouring If-Match, the replaced object gives ESTALE/EIO, and the next open
# reads the new version without a remount (metadata ttl = forever).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
e2e_init
fault_dataset
BUCKET=tierfs-faults
s3rver_start "$BUCKET"
fault_upload "$BUCKET"
fault_proxy_start origin "$S3_PORT"
ORIGIN="$PROXY_ENDPOINT"
CFG="$E2E_WORK/tierfs.toml"
fault_config "$CFG"
CFG_FOREVER="$E2E_WORK/tierfs-forever.toml"
fault_config "$CFG_FOREVER" "[metadata]" 'ttl = "forever"'
CACHED='^f/(a|b|c|d|small/.*)\.bin$'   # read first, then served from L1/L2
UNCACHED='^f/big/e\.bin$'                # 12 MiB, read only under the persistent fault

MNT="" PID="" LOGF=""
# FAULTS_ONLY="stall norange ...": run only these scenarios (for debugging).
mount_s() {  # mount_s NAME CONFIG: a fresh mount (own cache dir) through the fault proxy
  scenario_mount "$1" "s3://$BUCKET" "$E2E_WORK/cache-$1" "$E2E_WORK/daemon-$1.log" \
    --endpoint "$ORIGIN" --config "$2" --l1-size 8MiB --l2-size 256MiB
}
put_v1() {  # put_v1 REL: the first version of REL back into the bucket (directly, unsigned)
  curl -sf -X PUT --data-binary @"$FDATA/$1" "$S3_ENDPOINT/$BUCKET/$1" -o /dev/null ||
    fail "cannot restore $1"
}
must_fire() {  # must_fire ACTION WHAT: the proxy injected ACTION at least once
  local n
  n="$(fault_fired origin "$1")"
  (( n > 0 )) || fail "$2: the fault $1 never fired (the test tested nothing)"
  log "$2: fault $1 fired $n times"
}
read_step() {  # read_step NAME TIMEOUT ARGS...: fault_read on the scenario's mount
  local name="$1" secs="$2"
  shift 2
  fault_read "$name" "$secs" "$MNT" "$@" || { print_log_tail "$LOGF"; exit 1; }
}

# transient_and_persistent NAME RULE-JSON BOUND: see the header.
transient_and_persistent() {
  local name="$1" rule="$2" bound="$3" t0 action replayed
  action="$(sed 's/.*"action":"\([^"]*\)".*/\1/' <<<"$rule")"
  fault_set origin '{}'
  mount_s "$name" "$CFG"
  fault_set origin "{\"rules\":[$(sed 's/}$/,"count":2}/' <<<"$rule")]}"
  read_step "$name transient: every read byte-exact" 60 --files "$CACHED" --require ok --max-seconds 30
  must_fire "$action" "$name transient"
  fault_set origin "{\"rules\":[$rule]}"
  read_step "$name persistent: cached files still byte-exact" 60 --files "$CACHED" --require ok \
    --max-seconds 5
  t0=$SECONDS
  read_step "$name persistent: an uncached file fails with EIO within ${bound}s" 60 \
    --files "$UNCACHED" --require error --errnos EIO --max-seconds "$bound"
  must_fire "$action" "$name persistent"
  replayed="$(stat_value "$(stats_xattr "$MNT")" fetch.failures_replayed)"
  log "$name: EIO after $((SECONDS - t0))s (reads answered with a block's recent failure: $replayed)"
  # The kernel's synchronous retry of the failed readahead READ got the block's failure, not a
  # second fetch (docs/failure-and-security.md).
  (( ${replayed:-0} >= 1 )) || fail "$name: no read got the block's recent failure (did the kernel's retry fetch it again?)"
  fault_set origin '{}'
  sleep 1  # a block's origin failure is replayed to its readers for 1 s (docs/failure-and-security.md)
  read_step "$name cleared: the uncached file reads byte-exact without a remount" 40 \
    --files "$UNCACHED" --require ok --max-seconds 30
  scenario_umount
}

# A server that ignores Range: 200 with the whole object for every ranged GET.
norange() {
  fault_set origin '{}'
  mount_s norange "$CFG"
  fault_set origin '{"rules":[{"action":"strip_range","kind":"range"}]}'
  read_step "Range ignored: every read byte-exact" 120 --require ok --max-seconds 30
  must_fire strip_range "Range ignored"
  scenario_umount
}

# The response ETag differs from the object's: right bytes or a bounded error, never wrong ones.
etag() {
  fault_set origin '{}'
  mount_s etag "$CFG"
  fault_set origin '{"rules":[{"action":"etag","kind":"range"}]}'
  read_step "ETag rewritten: correct bytes or EIO/ESTALE" 120 --errnos EIO,ESTALE --max-seconds 30 \
    --out "$E2E_WORK/etag.json"
  must_fire etag "ETag rewritten"
  log "ETag rewritten: $(cat "$E2E_WORK/etag.json") (with version checks: EIO/ESTALE)"
  scenario_umount
}

# The object is replaced (same size) between two ranged reads; the server ignores If-Match. The
# first MiB is read (and cached) first, then the object is replaced right before the next ranged
# GET: without version checks the rest of the file comes from the new version.
replace() {
  fault_set origin '{}'
  put_v1 f/big/e.bin
  mount_s replace "$CFG_FOREVER"
  step "replaced: read the first MiB of f/big/e.bin" 30 dd if="$MNT/f/big/e.bin" of=/dev/null bs=1M count=1 status=none
  fault_set origin "{\"rules\":[{\"action\":\"strip_if_match\",\"kind\":\"range\"},
    {\"action\":\"replace\",\"kind\":\"range\",\"key\":\"^f/big/e.bin\$\",\"count\":1,
     \"body_file\":\"$FDATA_V2/f/big/e.bin\"}]}"
  read_step "replaced, If-Match ignored: entirely old, entirely new, or EIO/ESTALE" 120 \
    --files "$UNCACHED" --allow-v2 --errnos EIO,ESTALE --max-seconds 30
  must_fire replace "replaced, If-Match ignored"
  fault_set origin '{}'
  read_step "replaced, If-Match ignored: the next open reads the new version (no remount)" 60 \
    --files "$UNCACHED" --allow-v2 --require ok --max-seconds 30 --out "$E2E_WORK/replace.json"
  grep -q '"v2"' "$E2E_WORK/replace.json" ||
    fail "after the change the next open did not read the new version: $(cat "$E2E_WORK/replace.json")"
  scenario_umount
}

# The same with a server that honours If-Match (412): ESTALE/EIO, then the new version.
ifmatch() {
  fault_set origin '{}'
  put_v1 f/big/e.bin
  mount_s ifmatch "$CFG_FOREVER"
  step "If-Match honoured: read the first MiB of f/big/e.bin" 30 dd if="$MNT/f/big/e.bin" of=/dev/null bs=1M count=1 status=none
  fault_set origin "{\"enforce_if_match\":true,\"rules\":[{\"action\":\"replace\",\"kind\":\"range\",
    \"key\":\"^f/big/e.bin\$\",\"count\":1,\"body_file\":\"$FDATA_V2/f/big/e.bin\"}]}"
  read_step "replaced, If-Match honoured: old version or EIO/ESTALE" 120 --files "$UNCACHED" \
    --errnos EIO,ESTALE --max-seconds 30
  must_fire replace "replaced, If-Match honoured"
  read_step "replaced, If-Match honoured: the next open reads the new version (no remount)" 60 \
    --files "$UNCACHED" --allow-v2 --require ok --max-seconds 30 --out "$E2E_WORK/ifmatch.json"
  grep -q '"v2"' "$E2E_WORK/ifmatch.json" ||
    fail "after the 412 the next open did not read the new version: $(cat "$E2E_WORK/ifmatch.json")"
  scenario_umount
}

run_scenario slowdown transient_and_persistent slowdown '{"action":"503","kind":"range"}' 15
run_scenario error500 transient_and_persistent error500 '{"action":"500","kind":"range"}' 15
run_scenario reset transient_and_persistent reset '{"action":"reset","kind":"range"}' 15
run_scenario short transient_and_persistent short '{"action":"short","kind":"range"}' 15
# A stalled origin: EIO within one fetch's budget (request_timeout 3 s x max_attempts 3, plus
# backoff and waits for an origin connection slot: 6-13 s here). It took 15-30 s in CI (9-15 s
# here): the kernel answers a failed readahead FUSE READ with a synchronous READ of the reader's
# page at once, which fetched the block a second time; now that READ gets the block's recent
# failure (docs/failure-and-security.md). 20 s stays under two budgets (with margin for a loaded machine), and
# fetch.failures_replayed shows the kernel's retry was answered without a second fetch.
run_scenario stall transient_and_persistent stall '{"action":"stall","kind":"range","seconds":20}' 20
run_scenario stall_body transient_and_persistent stall_body '{"action":"stall_body","kind":"range","seconds":20}' 20
run_scenario norange norange
run_scenario etag etag
run_scenario replace replace
run_scenario ifmatch ifmatch
scenarios_done
