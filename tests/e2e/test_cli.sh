#!/usr/bin/env bash
# End-to-end: the command line around a live mount.
#   two mounts of one s3rver bucket (one daemonized, one in the foreground) → `tierfs status`
#   lists both, `--json` parses, `--watch` shows rates → the log level changes at run time through
#   the xattr (a debug line appears) and `tierfs log-level` → SIGHUP after moving the log file
#   makes a new log file and the mount still answers → `tierfs prefetch` on /tmp fails and leaves
#   no xattr → --uid/--gid/--file-mode/--dir-mode show in stat, --endpoint-url and --read-only are
#   accepted → a stopped daemon's mount shows as hung after 5 s (status and log-level return)
#   → a killed daemon's mount shows as stale, `tierfs log-level` for every mount skips it with a
#   note (a named stale mount is an error), and mounting over it names it with the fix → SIGTERM
#   still unmounts cleanly.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
command -v getfattr >/dev/null && command -v setfattr >/dev/null || fail "attr tools missing"
BUCKET=tierfs-cli
s3rver_start "$BUCKET"
step "put objects" 60 "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" \
  a/one.bin=3000000:1 a/two.txt=100:2 "b/with space.bin=5000:3"

W="$E2E_WORK"
M1="$W/m one" M2="$W/m2"
mkdir -p "$M1" "$M2" "$W/c1" "$W/c2" "$W/outside"

# Mount 1: daemonized (the way users run it) with the mountpoint-s3 style flags; the confirmation
# line names source, mountpoint, pid, cache and log.
log "mount 1 (daemonized)"
AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 \
  timeout 60 "$TIERFS" mount "s3://$BUCKET/a" "$M1" --endpoint-url "$S3_ENDPOINT" \
  --cache-dir "$W/c1" --l1-size 64MiB --l2-size 256MiB --log-file "$W/one.log" \
  --uid 4321 --gid 5432 --file-mode 0440 --dir-mode 0550 --read-only >"$W/mount1.out" 2>&1 ||
  { cat "$W/mount1.out" >&2; fail "daemonized mount failed"; }
cat "$W/mount1.out"
grep -q "^tierfs: mounted s3://$BUCKET/a at $M1 (pid [0-9]*, cache $W/c1, log $W/one.log)$" \
  "$W/mount1.out" || fail "no confirmation line after the daemonized mount"
# The pid of a daemonized mount: its supervisor (which passes SIGTERM and SIGHUP on).
PID1="$(sed -n 's/.*(pid \([0-9]*\),.*/\1/p' "$W/mount1.out")"
pid_alive "$PID1" || fail "daemon pid $PID1 from the confirmation line is not running"
E2E_MOUNTS+=("$M1")
E2E_PIDS+=("$PID1")
is_mounted "$M1" || fail "$M1 is not mounted"

# Mount 2: foreground (lib.sh), JSON log lines.
tierfs_mount "s3://$BUCKET" "$M2" "$W/c2" "$W/two.out" --endpoint "$S3_ENDPOINT" \
  --log-file "$W/two.log" --log-format json
PID2=$TIERFS_PID

# --uid/--gid/--file-mode/--dir-mode
[[ "$(stat -c '%u %g %a' "$M1/one.bin")" == "4321 5432 440" ]] ||
  fail "file attributes: $(stat -c '%u %g %a' "$M1/one.bin")"
[[ "$(stat -c '%u %g %a' "$M1")" == "4321 5432 550" ]] || fail "dir attributes: $(stat -c '%u %g %a' "$M1")"
# A bad mode names the flag and mounts nothing.
rc=0
"$TIERFS" mount "s3://$BUCKET" "$W/outside" --file-mode 0999 -f >"$W/bad.out" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q -- "--file-mode" "$W/bad.out" || fail "bad --file-mode: rc $rc, $(cat "$W/bad.out")"
is_mounted "$W/outside" && fail "a bad flag mounted"

cmp <("$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" --sha a/one.bin=3000000:1) \
  <(sha256sum <"$M1/one.bin" | cut -d' ' -f1) || fail "bytes of one.bin"
cat "$M2/b/with space.bin" >/dev/null

# ---- status ----
# `tierfs status` lists every tierfs mount of the host: other tests running beside this one (run_all
# runs two at a time) add theirs, some of them stale for a moment (test_crash), or too busy to
# answer within status's 5 s (test_faults stalls its origin). Checks below look only at this
# test's mounts; a non-zero exit is accepted only when a stale or hung mount is not ours.
rc=0
"$TIERFS" status >"$W/status.txt" 2>&1 || rc=$?
cat "$W/status.txt"
if (( rc != 0 )); then
  grep -E "  (stale|hung)$" "$W/status.txt" | grep -vqE "^($M1|$M2)  " ||
    fail "tierfs status failed (exit $rc) with no other test's stale or hung mount to explain it"
fi
grep -q "^$M1  s3://$BUCKET/a  ok$" "$W/status.txt" || fail "status does not list $M1"
grep -q "^$M2  s3://$BUCKET  ok$" "$W/status.txt" || fail "status does not list $M2"
grep -q "pid $PID1 " "$W/status.txt" || fail "status does not show pid $PID1"
grep -q "pid $PID2 " "$W/status.txt" || fail "status does not show pid $PID2"
"$TIERFS" status --json >"$W/status.json" || true
"$PY" - "$W/status.json" "$M1" "$M2" "$PID1" "$PID2" <<'PY' || fail "status --json"
import json, sys
doc = json.load(open(sys.argv[1]))
by = {m["mountpoint"]: m for m in doc["mounts"]}
# Mount 1 is daemonized: the pid its confirmation line names is its supervisor's; mount 2 runs
# in the foreground, unsupervised.
m1, m2 = by[sys.argv[2]], by[sys.argv[3]]
assert m1["supervisor_pid"] == int(sys.argv[4]) and m1["pid"] != m1["supervisor_pid"], m1
assert m2["pid"] == int(sys.argv[5]) and m2["supervisor_pid"] is None, m2
for m in (m1, m2):
    assert m["state"] == "ok", m
    assert m["stats"]["fuse.reads"] > 0, m["stats"]
    assert isinstance(m["hit_ratio"], float), m
assert by[sys.argv[3]]["daemon"]["log_format"] == "json"
print("status --json: %d mounts" % len(doc["mounts"]))
PY
"$TIERFS" status "$M1" --json | "$PY" -c 'import json,sys; d=json.load(sys.stdin); assert len(d["mounts"]) == 1' ||
  fail "status MOUNTPOINT --json"
# --watch: two samples, the second with rates (JSON lines), then ^C.
# O_DIRECT: the page cache would serve repeated reads without asking the daemon.
( for _ in $(seq 20); do dd if="$M1/one.bin" of=/dev/null bs=1M iflag=direct status=none; sleep 0.1; done ) &
reader=$!
E2E_BG_PIDS+=("$reader")
timeout -s INT 2.5 "$TIERFS" status "$M1" --json --watch 1 >"$W/watch.jsonl" || true
wait "$reader" || true
[[ "$(wc -l <"$W/watch.jsonl")" -ge 2 ]] || fail "--watch printed $(wc -l <"$W/watch.jsonl") samples"
tail -n 1 "$W/watch.jsonl" | "$PY" -c '
import json, sys
m = json.load(sys.stdin)["mounts"][0]
r = m["rates"]
assert r["reads_per_s"] > 0 and r["bytes_per_s"]["l1"] > 0, r
print("watch rates: %.0f reads/s, l1 %.0f B/s" % (r["reads_per_s"], r["bytes_per_s"]["l1"]))' ||
  fail "--watch rates"

# ---- log level at run time ----
grep -q " debug " "$W/one.log" && fail "debug lines before the level was raised"
[[ "$(getfattr --absolute-names --only-values -n user.tierfs.log_level "$M1")" == "info" ]] || fail "log_level is not info"
setfattr -n user.tierfs.log_level -v debug "$M1"
cat "$M1/two.txt" >/dev/null
grep -q " debug fuse: open 'two.txt'" "$W/one.log" || { tail "$W/one.log" >&2; fail "no debug line after setfattr"; }
if setfattr -n user.tierfs.log_level -v chatty "$M1" 2>"$W/setf.err"; then fail "a bad level was accepted"; fi
grep -q "Invalid argument" "$W/setf.err" || fail "bad level: $(cat "$W/setf.err")"
"$TIERFS" log-level info "$M1" | grep -q "log level info" || fail "tierfs log-level"
[[ "$(getfattr --absolute-names --only-values -n user.tierfs.log_level "$M1")" == "info" ]] || fail "log-level did not apply"
n=$(grep -c " debug " "$W/one.log")
cat "$M1/two.txt" >/dev/null
[[ "$(grep -c " debug " "$W/one.log")" == "$n" ]] || fail "debug lines after going back to info"
# Without MOUNTPOINT: every mount. The JSON log gets the change as one object per line.
# Other tests' mounts (run_all runs two tests at a time) may be stopping or failing on purpose: a
# non-zero exit is accepted only when no line of it names one of ours.
rc=0
"$TIERFS" log-level debug >/dev/null 2>"$W/loglevel.err" || rc=$?
cat "$W/loglevel.err" >&2
if (( rc != 0 )); then
  grep -qE "^tierfs log-level: ($M1|$M2): " "$W/loglevel.err" && fail "tierfs log-level without MOUNTPOINT"
  grep -q "^tierfs log-level: " "$W/loglevel.err" || fail "tierfs log-level without MOUNTPOINT: exit $rc, no reason"
fi
[[ "$(getfattr --absolute-names --only-values -n user.tierfs.log_level "$M2")" == "debug" ]] || fail "log-level on $M2"
cat "$M2/a/two.txt" >/dev/null
"$PY" - "$W/two.log" <<'PY' || fail "JSON log lines"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert lines and all(set(("time", "level", "thread", "message")) <= set(l) for l in lines)
assert any(l["level"] == "debug" and "open 'a/two.txt'" in l["message"] for l in lines), lines[-3:]
print("json log: %d lines, all objects" % len(lines))
PY
"$TIERFS" log-level info >/dev/null

# ---- SIGHUP: a new log file, the mount stays ----
mv "$W/one.log" "$W/one.log.1"
kill -HUP "$PID1"
for _ in $(seq 50); do [[ -s "$W/one.log" ]] && break; sleep 0.1; done
[[ -s "$W/one.log" ]] || fail "no new log file after SIGHUP"
grep -q "log file reopened" "$W/one.log" || fail "new log: $(cat "$W/one.log")"
is_mounted "$M1" && pid_alive "$PID1" || fail "SIGHUP ended the mount"
cmp <("$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" --sha a/one.bin=3000000:1) \
  <(sha256sum <"$M1/one.bin" | cut -d' ' -f1) || fail "the mount does not answer after SIGHUP"
"$TIERFS" status "$M1" | grep -q " ok$" || fail "status after SIGHUP"

# ---- prefetch refuses a path off tierfs and leaves nothing ----
echo data >"$W/outside/f"
rc=0
"$TIERFS" prefetch "$W/outside/f" >"$W/pf.out" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "prefetch off tierfs: rc $rc"
grep -q "is not on a tierfs mount" "$W/pf.out" || fail "prefetch message: $(cat "$W/pf.out")"
grep -q queued "$W/pf.out" && fail "prefetch said queued"
[[ -z "$(getfattr -d -m 'user.tierfs' "$W/outside/f" 2>/dev/null)" ]] || fail "stray xattr left on $W/outside/f"
"$TIERFS" prefetch --wait "$M1/one.bin" >/dev/null || fail "prefetch on tierfs"

# ---- a stopped daemon's mount is hung: status and log-level answer at their deadline (5 s) ----
kill -STOP "$PID2"
rc=0
timeout 30 "$TIERFS" status >"$W/status3.txt" 2>&1 || rc=$?
rc2=0
timeout 30 "$TIERFS" log-level info >"$W/ll3.out" 2>"$W/ll3.err" || rc2=$?
rc3=0
timeout 30 "$TIERFS" log-level info "$M2" 2>/dev/null || rc3=$?
kill -CONT "$PID2"
cat "$W/status3.txt" "$W/ll3.err"
[[ $rc == 1 ]] || fail "status with a stopped daemon: rc $rc (124: it hung)"
grep -q "^$M2  s3://$BUCKET  hung$" "$W/status3.txt" || fail "stopped daemon's mount not shown as hung"
grep -q "no answer in 5.0 s" "$W/status3.txt" || fail "hung reason missing"
grep -q "^$M1  s3://$BUCKET/a  ok$" "$W/status3.txt" || fail "the live mount is missing next to the hung one"
[[ $rc2 == 0 ]] || fail "log-level for every mount with a stopped daemon: rc $rc2"
grep -q "$M2: skipped, hung" "$W/ll3.err" || fail "hung mount not noted: $(cat "$W/ll3.err")"
grep -q "^$M1: log level info$" "$W/ll3.out" || fail "live mount not changed next to the hung one"
[[ $rc3 == 1 ]] || fail "log-level on a named hung mount: rc $rc3"
"$TIERFS" status "$M2" | grep -q "^$M2  s3://$BUCKET  ok$" || fail "status after SIGCONT"

# ---- a dead daemon's mount is stale, not a crash ----
kill -KILL "$PID2"
wait_pid_exit "$PID2" 10 || fail "daemon 2 did not die"
rc=0
"$TIERFS" status >"$W/status2.txt" 2>&1 || rc=$?
cat "$W/status2.txt"
[[ $rc == 1 ]] || fail "status with a stale mount: rc $rc"
grep -q "^$M2  s3://$BUCKET  stale$" "$W/status2.txt" || fail "stale mount not shown as stale"
grep -q "Transport endpoint is not connected" "$W/status2.txt" || fail "stale reason missing"
grep -q "^$M1  s3://$BUCKET/a  ok$" "$W/status2.txt" || fail "the live mount is missing next to the stale one"
{ "$TIERFS" status --json || true; } | "$PY" -c '
import json, sys
s = {m["mountpoint"]: m["state"] for m in json.load(sys.stdin)["mounts"]}
assert s.get(sys.argv[1]) == "ok" and s.get(sys.argv[2]) == "stale", s' "$M1" "$M2" ||
  fail "stale in --json"
# log-level for every mount skips the stale one (with a note) and still changes the live one.
"$TIERFS" log-level info >"$W/ll.out" 2>"$W/ll.err" || fail "log-level with a stale mount: $(cat "$W/ll.err")"
grep -q "^$M2: skipped, stale" <(sed 's/^tierfs log-level: //' "$W/ll.err") || fail "stale mount not noted: $(cat "$W/ll.err")"
grep -q "^$M1: log level info$" "$W/ll.out" || fail "live mount not changed: $(cat "$W/ll.out")"
rc=0
"$TIERFS" log-level info "$M2" 2>/dev/null || rc=$?
[[ $rc == 1 ]] || fail "log-level on a named stale mount: rc $rc"
# Mounting over the stale mount says what it is and how to clear it.
rc=0
"$TIERFS" mount "s3://$BUCKET" "$M2" --endpoint "$S3_ENDPOINT" -f >"$W/over.out" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "mount over a stale mount: rc $rc"
grep -q "MOUNTPOINT $M2 is a stale mount (Transport endpoint is not connected: its daemon is gone); unmount it first: fusermount3 -u $M2" \
  "$W/over.out" || fail "mount over a stale mount: $(cat "$W/over.out")"
timeout 10 fusermount3 -u "$M2" || fail "unmount of the stale mount"

# ---- SIGTERM still unmounts cleanly ----
kill -TERM "$PID1"
wait_pid_exit "$PID1" 20 || fail "daemon 1 did not exit on SIGTERM"
is_mounted "$M1" && fail "SIGTERM left $M1 mounted"
grep -q "tierfs stopped" "$W/one.log" || fail "no orderly stop in the log"
log "PASS"
