#!/usr/bin/env bash
# End-to-end: `kill -9` of the daemon mid-hydration. The origin is s3rver behind the fault proxy,
# which delays every ranged GET, so reading a 12 MiB file takes seconds; once L2 holds some of its
# blocks the daemon is killed with SIGKILL (by its PID), the dead mount is unmounted with
# fusermount3 -u, and a new daemon on the same cache dir (origin at full speed) must read every
# file byte-exact, reusing the blocks stored before the crash: L2 hits > 0 and fewer origin bytes
# than the file's size. Then the whole dataset is read with the origin down (from the cache).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
e2e_init
fault_dataset
BUCKET=tierfs-crash
s3rver_start "$BUCKET"
fault_upload "$BUCKET"
fault_proxy_start origin "$S3_PORT"
CFG="$E2E_WORK/tierfs.toml"
fault_config "$CFG"
MNT="$E2E_WORK/mnt" CACHE="$E2E_WORK/cache" LOGF="$E2E_WORK/daemon.log"
BIG=f/big/e.bin
BIG_SIZE="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["files"][sys.argv[2]]["size"])' "$FMANIFEST" "$BIG")"
mount_args=(--endpoint "$PROXY_ENDPOINT" --config "$CFG" --l1-size 8MiB --l2-size 256MiB)

# A slow origin: every ranged GET waits 1.5 s (the transfer itself is fast, so each answered GET
# is stored whole).
fault_set origin '{"rules":[{"action":"delay","kind":"range","seconds":1.5}]}'
pf_mount "s3://$BUCKET" "$MNT" "$CACHE" "$LOGF" "${mount_args[@]}"
pid1=$TIERFS_PID
# The reader runs in the background; it dies with the mount (ENOTCONN), which is expected.
(exec dd if="$MNT/$BIG" of=/dev/null bs=1M 2>/dev/null) &
reader=$!
E2E_BG_PIDS+=("$reader")
deadline=$((SECONDS + 60))
while :; do
  used="$(stat_of "$MNT" l2.used)"
  [[ -n "$used" ]] || fail "no l2.used in the stats"
  (( used >= 2 * 1048576 )) && break
  pid_alive "$reader" || fail "the reader finished before the crash (l2.used=$used); the origin is too fast"
  (( SECONDS < deadline )) || fail "L2 holds only $used bytes after 60 s"
  sleep 0.2
done
log "L2 holds $used bytes of $BIG_SIZE; kill -9 $pid1 mid-hydration"
kill -KILL "$pid1"
wait_pid_exit "$pid1" 20 || fail "the daemon survived SIGKILL"
rc="$(daemon_exit_code "$pid1")"
log "daemon killed (status $rc)"
wait_pid_exit "$reader" 20 || fail "the reader still runs 20 s after the daemon died"
step "fusermount3 -u the dead mount" 30 fusermount3 -u "$MNT"
is_mounted "$MNT" && fail "$MNT still mounted"

fault_set origin '{}'
pf_mount "s3://$BUCKET" "$MNT" "$CACHE" "$LOGF" "${mount_args[@]}"
pid2=$TIERFS_PID
fault_read "after the crash: $BIG byte-exact" 60 "$MNT" --files "^$BIG\$" --require ok --max-seconds 30
stats="$(stats_xattr "$MNT")"
log "stats after re-reading $BIG: $stats"
"$PY" "$E2E_DIR/verify.py" stats "$stats" --gt l2.hits=0 || fail "no block stored before the crash was reused"
origin_bytes="$(stat_of "$MNT" origin.bytes)"
(( origin_bytes < BIG_SIZE )) || fail "origin.bytes=$origin_bytes: the whole file ($BIG_SIZE) was fetched again"
log "ok: $origin_bytes of $BIG_SIZE bytes came from the origin; the rest from blocks stored before the crash"
fault_read "after the crash: every file byte-exact" 60 "$MNT" --require ok --max-seconds 30

# Everything is cached now: with the origin down, every read is still byte-exact.
fault_set origin '{"rules":[{"action":"drop","kind":"any"}]}'
fault_read "origin down: every file byte-exact from the cache" 60 "$MNT" --require ok --max-seconds 10
tierfs_umount "$MNT" "$pid2" || { print_log_tail "$LOGF"; fail "unclean unmount"; }
rc="$(daemon_exit_code "$pid2")"
[[ "$rc" == 0 ]] || { print_log_tail "$LOGF"; fail "daemon exited with $rc"; }
grep -q "swept" "$LOGF" && log "$(grep 'l2 opened' "$LOGF" | tail -n 1)"
