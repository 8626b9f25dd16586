#!/usr/bin/env bash
# End-to-end: `tierfs restart` hands a live mount to a new daemon. s3rver → mount (with a config
# file) → while a sequential reader, a shuffled 4-process epoch and a reader holding open fds run,
# and `mountpoint -q` is polled every 10 ms:
#   1. tierfs restart: a new daemon (new pid) serves; no reader sees an error, every byte is the
#      pattern's (sha256), no single read(2)/open(2) waits over 1 s, the mount is never absent,
#      the held fds read on, and the inode numbers are the same before and after;
#   2. a new binary that fails (exits 1): restart exits 1 saying so, the old daemon serves on; a
#      new daemon that fails after the old one released its cache (its metrics address cannot
#      be bound): the old one builds its components again and serves on, held fds read on;
#   3. the config file now sets fuse.allow_other (cannot change on a live mount): refused naming
#      the key, the old daemon serves on; a changed log level is taken (restart succeeds); SIGTERM
#      then unmounts as usual;
#   4. a read waits on a stalled origin: restart is refused after fuse.shutdown_grace (1 s) and
#      the read gets its bytes once the origin answers; with no read in flight a restart goes
#      through while the origin is stalled, and the cached file reads on;
#   5. a daemon of a release before live restarts (TIERFS_OLD, default /tmp/tierfs-8ad0dc5, if
#      present): restart exits 1 with a clear message and the mount stays.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_readers.sh"
e2e_init
BUCKET=tierfs-restart
s3rver_start "$BUCKET"
trap 'rc=$?; stop_extras; e2e_cleanup $rc' EXIT
POLLER=""
stop_extras() {
  [[ -z "$POLLER" ]] || stop_pid "$POLLER"
  stall_proxy_stop
  exec 8>&- 2>/dev/null || true
}

SEQ="seq.bin=50331648:1"
HOLD=(h1.bin=4194304:11 h2.bin=4194304:12 h3.bin=1048577:13)
TRAIN=()
for i in $(seq 0 119); do TRAIN+=("train/f$(printf %03d "$i").bin=262144:$((100 + i))"); done
step "upload" 120 "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" \
  "$SEQ" "${HOLD[@]}" "${TRAIN[@]}"

MNT="$E2E_WORK/mnt" LOGF="$E2E_WORK/tierfs.log" CONF="$E2E_WORK/tierfs.toml"
METRICS="127.0.0.1:$(free_port)"
printf '[log]\nlevel = "info"\n[metrics]\naddress = "%s"\n' "$METRICS" >"$CONF"
tierfs_mount "s3://$BUCKET" "$MNT" "$E2E_WORK/cache" "$LOGF" --endpoint "$S3_ENDPOINT" \
  --config "$CONF" --metadata-ttl 1h

# daemon_pid: the pid the mount's daemon reports (user.tierfs.daemon).
daemon_pid() { xattr_of "$MNT" user.tierfs.daemon | sed -n 's/^pid=\([0-9]*\).*/\1/p'; }
# check_history PID RESTARTS MOUNTED: tierfs status --json names the serving daemon PID, the
# mount's live restarts and its mount time; prints the mount time.
check_history() {
  "$TIERFS" status "$MNT" --json | "$PY" -c '
import json, sys
m = json.load(sys.stdin)["mounts"][0]
pid, restarts, mounted = int(sys.argv[1]), sys.argv[2], sys.argv[3]
d = m["daemon"]
assert m["pid"] == pid, (m["pid"], pid)
assert d["restarts"] == restarts, (d["restarts"], restarts)
assert mounted in ("", d["mounted"]), (d["mounted"], mounted)
print(d["mounted"])' "$@"
}
grep_metric() { curl -s "http://$METRICS/metrics" | grep "^$1 "; }
# adopt PID: the new daemon is the one cleanup stops.
adopt() { E2E_PIDS[0]=$1; TIERFS_PID=$1; }

log "1. tierfs restart under readers"
OLD_PID=$(daemon_pid)
[[ -n "$OLD_PID" ]] || fail "no daemon pid in user.tierfs.daemon"
MOUNTED=$(check_history "$OLD_PID" 0 "") || fail "tierfs status before the restart"
: >"$E2E_WORK/absent"
(
  while [[ ! -e "$E2E_WORK/poll.stop" ]]; do
    mountpoint -q "$MNT" || date +%s.%N >>"$E2E_WORK/absent"
    sleep 0.01
  done
) &
POLLER=$!
start_holder "$MNT" "${HOLD[@]}"
start_readers "$MNT" "$SEQ" "${TRAIN[@]}"
# Past the first pass (the cold one): the restart meets readers in full flight.
wait_line "$E2E_WORK/seq.err" "pass 1" 120
wait_line "$E2E_WORK/epoch.err" "epoch 1" 120
INO_BEFORE=$(stat -c '%n %i' "$MNT/seq.bin" "$MNT/train/f007.bin" "$MNT/train")
T0=$(date +%s%N)
step "tierfs restart" 120 "$TIERFS" restart "$MNT"
log "restart took $((($(date +%s%N) - T0) / 1000000)) ms"
NEW_PID=$(daemon_pid)
[[ -n "$NEW_PID" && "$NEW_PID" != "$OLD_PID" ]] || fail "the daemon is still pid $NEW_PID"
adopt "$NEW_PID"
wait_pid_exit "$OLD_PID" 30 || fail "the old daemon (pid $OLD_PID) did not exit"
check_history "$NEW_PID" 1 "$MOUNTED" >/dev/null || fail "tierfs status after the restart"
[[ "$(grep_metric tierfs_live_restarts_total)" == "tierfs_live_restarts_total 1" ]] ||
  fail "tierfs_live_restarts_total: $(grep_metric tierfs_live_restarts_total)"
INO_AFTER=$(stat -c '%n %i' "$MNT/seq.bin" "$MNT/train/f007.bin" "$MNT/train")
[[ "$INO_BEFORE" == "$INO_AFTER" ]] || fail "inode numbers changed: $INO_BEFORE / $INO_AFTER"
# One more full pass of each reader on the new daemon, then they stop.
touch "$E2E_WORK/stop"
echo go >&8
exec 8>&-
wait "$HOLDER" || fail "the holding reader failed: $(cat "$E2E_WORK/hold.out")"
wait "$SEQR" || fail "the sequential reader failed: $(cat "$E2E_WORK/seq.err")"
wait "$EPOCHR" || fail "the epoch reader failed: $(cat "$E2E_WORK/epoch.err")"
touch "$E2E_WORK/poll.stop"
wait "$POLLER" || true
POLLER=""
check_result "$E2E_WORK/seq.out" "sequential reader" 1.0
check_result "$E2E_WORK/epoch.out" "shuffled epoch" 1.0
check_result "$E2E_WORK/hold.out" "held fds" 1.0
[[ ! -s "$E2E_WORK/absent" ]] || fail "the mount was absent $(wc -l <"$E2E_WORK/absent") times"
grep -q "handed $MNT over to pid $NEW_PID" "$LOGF" || fail "no handover line in the log"

log "2. a new daemon that fails: the old one serves on"
printf '#!/bin/sh\necho "this build is broken" >&2\nexit 1\n' >"$E2E_WORK/broken"
chmod +x "$E2E_WORK/broken"
rc=0
"$TIERFS" restart "$MNT" --binary "$E2E_WORK/broken" >"$E2E_WORK/r2.out" 2>&1 || rc=$?
cat "$E2E_WORK/r2.out"
(( rc == 1 )) || fail "restart to a failing binary: exit $rc, want 1"
grep -q "did not take over" "$E2E_WORK/r2.out" || fail "no reason given"
[[ "$(daemon_pid)" == "$NEW_PID" ]] || fail "the daemon changed"
step "read after the failed restart" 60 "$PY" "$E2E_DIR/restart_reader.py" seq "$MNT" "$SEQ" \
  "$E2E_WORK/stop"

log "2b. a new daemon that fails after the old one released the cache: the old one takes it back"
# The new metrics address cannot be bound (TEST-NET-1 is on no interface): the new daemon fails
# while it builds its components, after the old daemon has released its own.
printf '[log]\nlevel = "info"\n[metrics]\naddress = "192.0.2.1:9100"\n' >"$CONF"
mkfifo "$E2E_WORK/hold2.in"
"$PY" "$E2E_DIR/restart_reader.py" hold "$MNT" "${HOLD[@]}" <"$E2E_WORK/hold2.in" \
  >"$E2E_WORK/hold2.out" 2>&1 &
HOLDER=$!
exec 8>"$E2E_WORK/hold2.in"
wait_line "$E2E_WORK/hold2.out" READY 60
rc=0
"$TIERFS" restart "$MNT" >"$E2E_WORK/r2b.out" 2>&1 || rc=$?
cat "$E2E_WORK/r2b.out"
(( rc == 1 )) || fail "restart to a daemon that fails late: exit $rc, want 1"
grep -q "failed after it took over" "$E2E_WORK/r2b.out" || fail "no reason given"
[[ "$(daemon_pid)" == "$NEW_PID" ]] || fail "the daemon changed"
echo go >&8
exec 8>&-
wait "$HOLDER" || fail "the holding reader failed: $(cat "$E2E_WORK/hold2.out")"
check_result "$E2E_WORK/hold2.out" "held fds across a failed late handover" 5.0
grep_metric tierfs_live_restarts_total >/dev/null || fail "the old daemon's metrics are not back"
step "read after the failed late restart" 60 "$PY" "$E2E_DIR/restart_reader.py" seq "$MNT" \
  "$SEQ" "$E2E_WORK/stop"

log "3. a setting that cannot change on a live mount is refused; the log level can change"
printf '[log]\nlevel = "info"\n[fuse]\nallow_other = true\n[metrics]\naddress = "%s"\n' "$METRICS" >"$CONF"
rc=0
"$TIERFS" restart "$MNT" >"$E2E_WORK/r3.out" 2>&1 || rc=$?
cat "$E2E_WORK/r3.out"
(( rc == 1 )) || fail "restart with allow_other changed: exit $rc, want 1"
grep -q "fuse.allow_other: running false, new true" "$E2E_WORK/r3.out" ||
  fail "the refusal does not name fuse.allow_other"
[[ "$(daemon_pid)" == "$NEW_PID" ]] || fail "the daemon changed"
step "read after the refusal" 60 cat "$MNT/h1.bin" >/dev/null
printf '[log]\nlevel = "debug"\n[metrics]\naddress = "%s"\n' "$METRICS" >"$CONF"
step "restart with a new log level" 120 "$TIERFS" restart "$MNT"
PID3=$(daemon_pid)
[[ "$PID3" != "$NEW_PID" ]] || fail "the daemon did not change"
adopt "$PID3"
check_history "$PID3" 2 "$MOUNTED" >/dev/null || fail "tierfs status after the second restart"
[[ "$(xattr_of "$MNT" user.tierfs.log_level)" == debug ]] || fail "the new log level is not in force"
step "read after the third daemon took over" 60 "$PY" "$E2E_DIR/restart_reader.py" seq "$MNT" \
  "$SEQ" "$E2E_WORK/stop"
# SIGTERM stops a daemon that took a mount over as it stops the one that mounted: unmounted, exit 0.
kill -TERM "$PID3"
wait_pid_exit "$PID3" 30 || fail "the daemon did not exit after SIGTERM"
! is_mounted "$MNT" || fail "$MNT is still mounted after SIGTERM"
grep -q "signal 15: unmounted $MNT" "$LOGF" || fail "no unmount line in the log"

log "4. a read waiting on a stalled origin: the pause is bounded, the restart refused, the read whole"
stall_proxy_start
MNT5="$E2E_WORK/mnt-stall" LOG5="$E2E_WORK/tierfs-stall.log"
printf '[fuse]\nshutdown_grace = "1s"\n[s3]\nrequest_timeout = "30s"\n[cache]\nprefetch_next_files = 0\n' \
  >"$E2E_WORK/stall.toml"
tierfs_mount "s3://$BUCKET" "$MNT5" "$E2E_WORK/cache-stall" "$LOG5" --endpoint "$PROXY" \
  --config "$E2E_WORK/stall.toml" --metadata-ttl 1h
PID5=$TIERFS_PID
step "list" 30 ls "$MNT5"
touch "$E2E_WORK/stall"
"$PY" "$E2E_DIR/restart_reader.py" hold "$MNT5" "h3.bin=1048577:13" <<<"go" >"$E2E_WORK/r5.out" 2>&1 &
READER5=$!
deadline=$((SECONDS + 10)) want=0
[[ "$(uname -m)" == aarch64 ]] && want=63
until [[ "$(cut -d' ' -f1 "/proc/$READER5/syscall" 2>/dev/null)" == "$want" ]]; do
  pid_alive "$READER5" || fail "the reader ended before its read waited: $(cat "$E2E_WORK/r5.out")"
  (( SECONDS < deadline )) || fail "the reader is not in read(2) after 10 s"
  sleep 0.05
done
rc=0
T0=$(date +%s%N)
"$TIERFS" restart "$MNT5" >"$E2E_WORK/r5r.out" 2>&1 || rc=$?
MS=$((($(date +%s%N) - T0) / 1000000))
cat "$E2E_WORK/r5r.out"
(( rc == 1 )) || fail "restart with a read waiting on the origin: exit $rc, want 1"
grep -q "still waiting on the network" "$E2E_WORK/r5r.out" || fail "no reason given"
(( MS < 5000 )) || fail "the refused restart took $MS ms (fuse.shutdown_grace is 1 s)"
rm -f "$E2E_WORK/stall"
wait "$READER5" || fail "the waiting reader failed: $(cat "$E2E_WORK/r5.out")"
check_result "$E2E_WORK/r5.out" "reader across a refused restart" 60
# With no request in flight, a restart while the origin does not answer goes through (the new
# daemon does not list the origin before serving), and what the cache holds reads on.
touch "$E2E_WORK/stall"
step "restart while the origin is stalled" 120 "$TIERFS" restart "$MNT5"
step "a cached file after it" 30 "$PY" "$E2E_DIR/restart_reader.py" hold "$MNT5" "h3.bin=1048577:13" \
  <<<"go"
rm -f "$E2E_WORK/stall"
adopt_pid=$(xattr_of "$MNT5" user.tierfs.daemon | sed -n 's/^pid=\([0-9]*\).*/\1/p')
[[ "$adopt_pid" != "$PID5" ]] || fail "the daemon did not change"
E2E_PIDS[1]=$adopt_pid
tierfs_umount "$MNT5" "$adopt_pid" || fail "unmount of $MNT5 was not clean"
stall_proxy_stop

OLD_BIN="${TIERFS_OLD:-/tmp/tierfs-8ad0dc5}"
if [[ -x "$OLD_BIN" ]]; then
  log "6. a daemon that predates live restarts ($OLD_BIN)"
  NEW_BIN="$TIERFS"
  MNT2="$E2E_WORK/mnt-old"
  TIERFS="$OLD_BIN" tierfs_mount "s3://$BUCKET" "$MNT2" "$E2E_WORK/cache-old" \
    "$E2E_WORK/tierfs-old.log" --endpoint "$S3_ENDPOINT"
  rc=0
  "$NEW_BIN" restart "$MNT2" >"$E2E_WORK/r4.out" 2>&1 || rc=$?
  cat "$E2E_WORK/r4.out"
  (( rc == 1 )) || fail "restart of an old daemon: exit $rc, want 1"
  grep -q "does not take live restarts" "$E2E_WORK/r4.out" || fail "no clear message"
  is_mounted "$MNT2" || fail "the old daemon's mount is gone"
  step "read from the old daemon" 60 cat "$MNT2/h2.bin" >/dev/null
  tierfs_umount "$MNT2" "$TIERFS_PID" || fail "unmount of $MNT2 was not clean"
else
  log "6. skipped: no binary of a release before live restarts at $OLD_BIN"
fi

log "7. another user may not restart a mount it can read, and is told why"
chmod 755 "$E2E_WORK"  # nobody reaches the mount point
mkdir -p "$E2E_WORK/src7/d" "$E2E_WORK/mnt7"
printf 'x\n' >"$E2E_WORK/src7/d/x.txt"
chmod -R a+rX "$E2E_WORK/src7"
tierfs_mount "file://$E2E_WORK/src7" "$E2E_WORK/mnt7" "$E2E_WORK/cache7" "$E2E_WORK/t7.log" --allow-other
PID7=$TIERFS_PID
rc=0
timeout -k 2 30 runuser -u nobody -- "$TIERFS" restart "$E2E_WORK/mnt7" >"$E2E_WORK/r7.out" 2>&1 || rc=$?
(( rc == 1 )) && grep -q "only root or uid 0 may restart this daemon (pid $PID7 serves" "$E2E_WORK/r7.out" ||
  fail "tierfs restart as nobody: rc $rc, $(cat "$E2E_WORK/r7.out")"
[[ "$(runuser -u nobody -- cat "$E2E_WORK/mnt7/d/x.txt")" == x ]] || fail "nobody cannot read the mount after the refusal"
log "ok refused as nobody: $(cat "$E2E_WORK/r7.out")"
tierfs_umount "$E2E_WORK/mnt7" "$PID7" || fail "unmount of mnt7 was not clean"
