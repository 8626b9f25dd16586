#!/usr/bin/env bash
# End-to-end: `kill -9` of the daemon mid-hydration. The origin is s3rver behind the fault proxy,
# which delays every ranged GET, so reading a 12 MiB file takes seconds; once L2 holds some of its
# blocks the daemon is killed with SIGKILL (by its PID), the dead mount is unmounted with
# fusermount3 -u, and a new daemon on the same cache dir (origin at full speed) must read every
# file byte-exact, reusing the blocks stored before the crash: L2 hits > 0, and none of the
# blocks L2 held at the remount is asked from the origin again (the proxy's request log). Then
# the whole dataset is read with the origin down (from the cache).
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
# The origin is slow but healthy here: default timeouts.
printf '[s3]\nmax_attempts = 3\n' >"$CFG"
MNT="$E2E_WORK/mnt" CACHE="$E2E_WORK/cache" LOGF="$E2E_WORK/daemon.log"
BIG=f/big/e.bin
BIG_SIZE="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["files"][sys.argv[2]]["size"])' "$FMANIFEST" "$BIG")"
mount_args=(--endpoint "$PROXY_ENDPOINT" --config "$CFG" --l1-size 8MiB --l2-size 256MiB)

# A slow origin: every ranged GET waits 3 s (the transfer itself is fast, so each answered GET
# is stored whole).
fault_set origin '{"rules":[{"action":"delay","kind":"range","seconds":3}]}'
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
# The L2 index is committed without fsync and synced every second: give it that second (a crash
# may lose the last index updates: those blocks are only fetched again).
sleep 2.5
pid_alive "$reader" || fail "the reader finished before the crash; the origin is too fast"
used="$(stat_of "$MNT" l2.used)"
log "L2 holds $used bytes of $BIG_SIZE; kill -9 $pid1 mid-hydration"
kill -KILL "$pid1"
wait_pid_exit "$pid1" 20 || fail "the daemon survived SIGKILL"
daemon_exit_code "$pid1"; rc=$DAEMON_RC
log "daemon killed (status $rc)"
wait_pid_exit "$reader" 20 || fail "the reader still runs 20 s after the daemon died"
step "fusermount3 -u the dead mount" 30 fusermount3 -u "$MNT"
is_mounted "$MNT" && fail "$MNT still mounted"

fault_set origin '{}'
log_mark=$(wc -l <"$E2E_WORK/origin.log")
pf_mount "s3://$BUCKET" "$MNT" "$CACHE" "$LOGF" "${mount_args[@]}"
pid2=$TIERFS_PID
log "remounted: $(grep 'l2 opened' "$LOGF" | tail -n 1 | sed 's/.*\] //')"
fault_read "after the crash: $BIG byte-exact" 60 "$MNT" --files "^$BIG\$" --require ok --max-seconds 30
stats="$(stats_xattr "$MNT")"
log "stats after re-reading $BIG: $stats"
"$PY" "$E2E_DIR/verify.py" stats "$stats" --gt l2.hits=0 || fail "no block stored before the crash was reused"
# Which bytes of the file were asked from the origin after the remount (the proxy logs every
# ranged GET): none of the blocks L2 held at the remount may be among them.
kept="$(grep 'l2 opened' "$LOGF" | tail -n 1 | sed -n 's/.*l2 opened: [0-9]* blocks, \([0-9]*\) bytes.*/\1/p')"
[[ -n "$kept" ]] || fail "no 'l2 opened' line in $LOGF"
refetched="$(tail -n +"$((log_mark + 1))" "$E2E_WORK/origin.log" | "$PY" -c '
import re, sys
spans = sorted((int(a), int(b) + 1) for a, b in re.findall(r"range " + re.escape(sys.argv[1]) + r" bytes=(\d+)-(\d+)", sys.stdin.read()))
total, end = 0, 0
for a, b in spans:
    a = max(a, end)
    if b > a:
        total += b - a
        end = b
print(total)' "$BIG")"
log "after the remount: L2 held $kept bytes; $refetched distinct bytes of $BIG_SIZE asked from the origin (origin.bytes=$(stat_of "$MNT" origin.bytes), with duplicates)"
(( kept > 0 )) || fail "L2 held nothing after the crash"
(( refetched <= BIG_SIZE - kept )) || fail "blocks L2 held after the crash were fetched from the origin again ($refetched distinct bytes > $BIG_SIZE - $kept)"
log "ok: the $kept bytes stored before the crash were reused"
fault_read "after the crash: every file byte-exact" 60 "$MNT" --require ok --max-seconds 30

# Everything is cached now: with the origin down, every read is still byte-exact.
fault_set origin '{"rules":[{"action":"drop","kind":"any"}]}'
fault_read "origin down: every file byte-exact from the cache" 60 "$MNT" --require ok --max-seconds 10
tierfs_umount "$MNT" "$pid2" || { print_log_tail "$LOGF"; fail "unclean unmount"; }
daemon_exit_code "$pid2"; rc=$DAEMON_RC
[[ "$rc" == 0 ]] || { print_log_tail "$LOGF"; fail "daemon exited with $rc"; }
