# Helpers of the tests whose readers run across a change of daemon (test_restart.sh,
# test_crash_resume.sh): they read tests/e2e/restart_reader.py's output. Sourced after lib.sh.

# wait_line FILE PATTERN SECONDS
wait_line() {
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    (( SECONDS < deadline )) || fail "no '$2' in $1 within $3 s"
    sleep 0.1
  done
}
# check_result FILE NAME MAX_WAIT: the reader's JSON line has no error, no wrong byte, and its
# longest wait is at most MAX_WAIT seconds.
check_result() {
  "$PY" - "$1" "$2" "$3" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
name, limit = sys.argv[2], float(sys.argv[3])
print(f"{name}: {r['passes']} passes, longest wait {r['max_wait_s']:.3f} s")
assert not r["errors"], f"{name}: errors {r['errors'][:5]}"
assert not r["wrong"], f"{name}: wrong bytes in {r['wrong'][:5]}"
assert r["max_wait_s"] <= limit, f"{name}: a read waited {r['max_wait_s']:.3f} s (> {limit} s)"
if "inodes_before" in r:
    assert r["inodes_before"] == r["inodes_after"], f"inode numbers changed: {r}"
    print(f"{name}: inode numbers kept: {r['inodes_after']}")
PY
}
# start_holder MNT SPEC...: a reader that opens the files of SPEC (restart_reader.py hold), reads
# them once and holds them open until a line comes on fd 8 (`echo go >&8`); its pid in HOLDER,
# its output in $E2E_WORK/hold.out. Returns once the files are open.
start_holder() {
  local mnt="$1"
  shift
  mkfifo "$E2E_WORK/hold.in"
  "$PY" "$E2E_DIR/restart_reader.py" hold "$mnt" "$@" <"$E2E_WORK/hold.in" \
    >"$E2E_WORK/hold.out" 2>&1 &
  HOLDER=$!
  E2E_BG_PIDS+=("$HOLDER")
  exec 8>"$E2E_WORK/hold.in"
  wait_line "$E2E_WORK/hold.out" READY 60
}
# start_readers MNT SEQ TRAIN...: a sequential reader of SEQ (pid SEQR; seq.out, seq.err) and a
# shuffled 4-process epoch over TRAIN (pid EPOCHR; epoch.out, epoch.err) under $E2E_WORK, both
# passing until $E2E_WORK/stop exists.
start_readers() {
  local mnt="$1" seq="$2"
  shift 2
  "$PY" "$E2E_DIR/restart_reader.py" seq "$mnt" "$seq" "$E2E_WORK/stop" \
    >"$E2E_WORK/seq.out" 2>"$E2E_WORK/seq.err" &
  SEQR=$!
  "$PY" "$E2E_DIR/restart_reader.py" epoch "$mnt" "$E2E_WORK/stop" 4 "$@" \
    >"$E2E_WORK/epoch.out" 2>"$E2E_WORK/epoch.err" &
  EPOCHR=$!
  E2E_BG_PIDS+=("$SEQR" "$EPOCHR")
}
