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
