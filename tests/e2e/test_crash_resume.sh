#!/usr/bin/env bash
# End-to-end: crash resume of a daemonized mount (daemon/supervisor.h). s3rver → `tierfs mount`
# without -f (a supervisor and the serving daemon) → while a sequential reader, a shuffled
# 4-process epoch, an O_DIRECT reader (every read reaches the daemon) and a reader holding open
# fds run, with the page cache dropped so the buffered readers reach the daemon too:
#   1. kill -9 of the serving daemon: the supervisor starts a new one on the same /dev/fuse
#      descriptor; no reader sees an error, every byte is the pattern's (sha256), no single
#      read(2)/open(2) waits over 5 s, the held fds read on with the same inode numbers, and the
#      new daemon asks the origin for no byte (L2 held the whole dataset before the kill);
#   2. a read waiting on a stalled origin when the daemon is killed: the kernel sends it again to
#      the new daemon (FUSE_NOTIFY_RESEND), and it gets its bytes once the origin answers;
#   3. a live restart (`tierfs restart`) of the supervised mount: the supervisor adopts the new
#      daemon (its state log too), and a kill -9 of that one is resumed as well;
#   4. a crash loop: the installed binary is replaced by one that exits at once and the serving
#      daemon is killed again: the supervisor backs off, then unmounts with a clear log line;
#      a reader then gets an error (no hang) and the supervisor has exited.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
source "$(dirname "$0")/lib_readers.sh"
e2e_init
BUCKET=tierfs-crash-resume
s3rver_start "$BUCKET"
trap 'rc=$?; stall_proxy_stop; e2e_cleanup $rc' EXIT
SEQ="seq.bin=33554432:1"
DIRECT="direct.bin=16777216:2"
HOLD=(h1.bin=4194304:11 h2.bin=1048577:12)
LATE="late.bin=67108864:3"
TRAIN=()
for i in $(seq 0 79); do TRAIN+=("train/f$(printf %03d "$i").bin=262144:$((100 + i))"); done
step "upload" 120 "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" \
  "$SEQ" "$DIRECT" "$LATE" "${HOLD[@]}" "${TRAIN[@]}"
# The origin through a proxy that stalls every request while $E2E_WORK/stall exists (part 2).
stall_proxy_start

# The mount runs a copy of the binary: part 2 replaces it ("the installed binary").
BIN="$E2E_WORK/bin/tierfs"
mkdir -p "$E2E_WORK/bin"
cp "$TIERFS" "$BIN"
MNT="$E2E_WORK/mnt" CACHE="$E2E_WORK/cache" LOGF="$E2E_WORK/tierfs.log"
mkdir -p "$MNT" "$CACHE"
CONF="$E2E_WORK/tierfs.toml" METRICS="127.0.0.1:$(free_port)"
printf '[metrics]\naddress = "%s"\n' "$METRICS" >"$CONF"
e2e_cred_env
step "mount (daemonized)" 60 env "${E2E_ENV[@]}" "$BIN" mount "s3://$BUCKET" "$MNT" --cache-dir "$CACHE" \
  --endpoint "$PROXY" --l1-size 64MiB --l2-size 1GiB --metadata-ttl 1h --log-file "$LOGF" \
  --log-level info --config "$CONF" >"$E2E_WORK/mount.out"
cat "$E2E_WORK/mount.out"
SUPERVISOR=$(sed -n 's/.*(pid \([0-9]*\),.*/\1/p' "$E2E_WORK/mount.out")
[[ -n "$SUPERVISOR" ]] || fail "no pid in the mount's output"
E2E_MOUNTS+=("$MNT")
E2E_PIDS+=("$SUPERVISOR")
is_mounted "$MNT" || fail "$MNT is not mounted"

# check_status PID RESUMES [RESTARTS]: tierfs status --json names the serving daemon PID and the
# supervisor, RESUMES crash resumes and RESTARTS live restarts (default 0); the metric counts the
# resumes too.
check_status() {
  "$TIERFS" status "$MNT" --json | "$PY" -c '
import json, sys
m = json.load(sys.stdin)["mounts"][0]
pid, sup, resumes, restarts = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
assert m["pid"] == pid, (m["pid"], pid)
assert m["supervisor_pid"] == sup, (m["supervisor_pid"], sup)
assert m["daemon"]["resumes"] == resumes, m["daemon"]
assert m["daemon"]["restarts"] == restarts, m["daemon"]' "$1" "$SUPERVISOR" "$2" "${3:-0}"
  "$TIERFS" status "$MNT" | grep -q "supervisor pid $SUPERVISOR  crash resumes $2" ||
    fail "tierfs status: $("$TIERFS" status "$MNT")"
  local metrics
  metrics=$(curl -s "http://$METRICS/metrics")
  grep -qx "tierfs_crash_resumes_total $2" <<<"$metrics" ||
    fail "metrics: $(grep resumes <<<"$metrics")"
}
daemon_pid() { xattr_of "$MNT" user.tierfs.daemon | sed -n 's/^pid=\([0-9]*\).*/\1/p'; }
# next_daemon OLD: waits (up to 30 s) until a daemon other than OLD serves the mount; its pid.
next_daemon() {
  local deadline=$((SECONDS + 30)) pid
  until pid=$(daemon_pid 2>/dev/null) && [[ -n "$pid" && "$pid" != "$1" ]]; do
    (( SECONDS < deadline )) || fail "no new daemon within 30 s of pid $1"
    sleep 0.1
  done
  echo "$pid"
}

log "1. kill -9 of the serving daemon under readers"
PID1=$(daemon_pid)
[[ -n "$PID1" && "$PID1" != "$SUPERVISOR" ]] || fail "serving daemon pid '$PID1' (supervisor $SUPERVISOR)"
check_status "$PID1" 0 || fail "tierfs status before the kill"
start_holder "$MNT" "${HOLD[@]}"
# Every byte into L2 first (one cold pass of each file): the new daemon must not fetch it again.
COLD=()
for f in "$SEQ" "$DIRECT" "${HOLD[@]}" "${TRAIN[@]}"; do COLD+=("$MNT/${f%%=*}"); done
step "cold pass" 120 sh -c 'cat "$@" >/dev/null' cat "${COLD[@]}"
start_readers "$MNT" "$SEQ" "${TRAIN[@]}"
"$PY" "$E2E_DIR/restart_reader.py" direct "$MNT" "$DIRECT" "$E2E_WORK/stop" \
  >"$E2E_WORK/direct.out" 2>"$E2E_WORK/direct.err" &
DIRECTR=$!
E2E_BG_PIDS+=("$DIRECTR")
wait_line "$E2E_WORK/seq.err" "pass 1" 120
wait_line "$E2E_WORK/epoch.err" "epoch 1" 120
INO_BEFORE=$(stat -c '%n %i' "$MNT/seq.bin" "$MNT/train/f007.bin" "$MNT/train")
# The buffered readers read through the daemon again, not the page cache, when the kill comes.
echo 1 >/proc/sys/vm/drop_caches
sleep 0.3
kill -KILL "$PID1"
log "killed the serving daemon (pid $PID1)"
PID2=$(next_daemon "$PID1")
log "pid $PID2 serves $MNT"
check_status "$PID2" 1 || fail "tierfs status after the resume"
# One more full pass of each reader on the new daemon, then they stop.
touch "$E2E_WORK/stop"
echo go >&8
exec 8>&-
# A request the dead daemon had read and the kernel never sent again would hang its reader.
for r in "$HOLDER" "$SEQR" "$EPOCHR" "$DIRECTR"; do
  wait_pid_exit "$r" 120 || fail "a reader (pid $r) still waits 120 s after the resume"
done
wait "$HOLDER" || fail "the holding reader failed: $(cat "$E2E_WORK/hold.out")"
wait "$SEQR" || fail "the sequential reader failed: $(cat "$E2E_WORK/seq.err")"
wait "$EPOCHR" || fail "the epoch reader failed: $(cat "$E2E_WORK/epoch.err")"
wait "$DIRECTR" || fail "the O_DIRECT reader failed: $(cat "$E2E_WORK/direct.err")"
check_result "$E2E_WORK/seq.out" "sequential reader" 5.0
check_result "$E2E_WORK/epoch.out" "shuffled epoch" 5.0
check_result "$E2E_WORK/direct.out" "O_DIRECT reader" 5.0
check_result "$E2E_WORK/hold.out" "held fds" 5.0
INO_AFTER=$(stat -c '%n %i' "$MNT/seq.bin" "$MNT/train/f007.bin" "$MNT/train")
[[ "$INO_BEFORE" == "$INO_AFTER" ]] || fail "inode numbers changed: $INO_BEFORE / $INO_AFTER"
ob=$(stat_of "$MNT" origin.bytes)
log "new daemon: origin.requests=$(stat_of "$MNT" origin.requests) origin.bytes=$ob l2.hits=$(stat_of "$MNT" l2.hits)"
[[ "$ob" == 0 ]] || fail "the new daemon fetched $ob bytes from the origin that L2 held"
grep -q "supervisor: pid $PID2 serves $MNT (crash resume 1)" "$LOGF" || fail "no resume line in the log"

log "2. a read waiting on the origin when the daemon dies gets its bytes from the next one"
touch "$E2E_WORK/stall"
# Its last MiB, O_DIRECT (no readahead): no tier holds it.
WANT=$("$PY" -c 'import hashlib,random; print(hashlib.sha256(random.Random(3).randbytes(67108864)[-1048576:]).hexdigest())')
(timeout -k 2 60 dd if="$MNT/late.bin" bs=1M skip=63 count=1 iflag=direct 2>/dev/null |
  sha256sum >"$E2E_WORK/late.out" 2>&1) &
LATER=$!
E2E_BG_PIDS+=("$LATER")
# The read (or its open) reaches the daemon and waits on the stalled origin.
sleep 1
pid_alive "$LATER" || fail "the read of late.bin ended with the origin stalled: $(cat "$E2E_WORK/late.out")"
kill -KILL "$PID2"
PID3=$(next_daemon "$PID2")
log "pid $PID3 serves $MNT; the origin answers again"
rm -f "$E2E_WORK/stall"
wait_pid_exit "$LATER" 70 || fail "the read of late.bin still waits"
wait "$LATER" || fail "the read of late.bin failed: $(cat "$E2E_WORK/late.out")"
[[ "$(cut -d' ' -f1 "$E2E_WORK/late.out")" == "$WANT" ]] ||
  fail "late.bin: wrong bytes: $(cat "$E2E_WORK/late.out")"
log "the read in flight at the kill got its bytes"
check_status "$PID3" 2 || fail "tierfs status after the second resume"
PID2=$PID3

log "3. a live restart keeps the mount supervised"
"$TIERFS" restart "$MNT" >"$E2E_WORK/restart.out" 2>&1 || fail "tierfs restart: $(cat "$E2E_WORK/restart.out")"
PID4=$(daemon_pid)
[[ -n "$PID4" && "$PID4" != "$PID2" ]] || fail "no new daemon after the live restart ($PID4)"
wait_pid_exit "$PID2" 30 || fail "the old daemon (pid $PID2) still runs after the live restart"
pid_alive "$SUPERVISOR" || fail "the supervisor ended with the live restart"
wait_line "$LOGF" "supervisor: pid $PID4 took $MNT over from pid $PID2 (live restart)" 30
check_status "$PID4" 2 1 || fail "tierfs status after the live restart"
kill -KILL "$PID4"
PID5=$(next_daemon "$PID4")
check_status "$PID5" 3 1 || fail "tierfs status after a resume of the restarted daemon"
[[ "$(stat -c '%n %i' "$MNT/seq.bin" "$MNT/train/f007.bin" "$MNT/train")" == "$INO_BEFORE" ]] ||
  fail "inode numbers changed across the live restart and the resume"
want=$("$PY" -c 'import hashlib,random; print(hashlib.sha256(random.Random(1).randbytes(33554432)).hexdigest())')
[[ "$(sha256sum <"$MNT/seq.bin" | cut -d' ' -f1)" == "$want" ]] || fail "seq.bin: wrong bytes after the resume"
log "pid $PID5 serves $MNT after a live restart and a crash resume"
PID2=$PID5

log "4. a crash loop ends in an unmount"
printf '#!/bin/sh\necho started >>"%s"\nexit 1\n' "$E2E_WORK/starts" >"$E2E_WORK/broken"
chmod +x "$E2E_WORK/broken"
mv "$E2E_WORK/broken" "$BIN"
T0=$SECONDS
kill -KILL "$PID2"
wait_pid_exit "$SUPERVISOR" 60 || fail "the supervisor did not give up within 60 s"
log "the supervisor gave up after $((SECONDS - T0)) s, $(wc -l <"$E2E_WORK/starts") starts"
grep "supervisor:" "$LOGF" | sed 's/^/    /'
# A live restart counts quick deaths afresh: the daemon it started died quickly (1), as did the
# one killed here (2); four starts of the broken binary make six.
(( $(wc -l <"$E2E_WORK/starts") == 4 )) || fail "want 4 starts of the broken binary"
grep -q "died 6 times in a row, each within 30 s of its start; unmounting $MNT" "$LOGF" ||
  fail "no crash loop line in the log: $(tail -5 "$LOGF")"
grep -q "waiting 2000 ms before the next start" "$LOGF" || fail "no backoff in the log"
is_mounted "$MNT" && fail "$MNT is still mounted"
rc=0
timeout -k 2 10 cat "$MNT/seq.bin" >/dev/null 2>&1 || rc=$?
(( rc != 0 && rc != 124 )) || fail "a read after the crash loop: exit $rc (want an error, no hang)"
log "PASS: crash resume and crash loop"
