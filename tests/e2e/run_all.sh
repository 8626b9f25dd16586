#!/usr/bin/env bash
# Runs every end-to-end test (tests/e2e/test_*.sh, plus the s3rver listing self-check), each under a
# hard timeout, and prints PASS/FAIL/SKIP per test and a last line "N passed, M failed".
# Exit status: non-zero when any test failed. Tests are skipped (with the reason) only when
# /dev/fuse or fusermount3 is missing.
#   tests/e2e/run_all.sh [TEST-NAME...]     e.g. run_all.sh test_file_mount
# Env: TIERFS (binary, default build/daemon/tierfs), E2E_TEST_TIMEOUT (seconds per test, 900),
#      E2E_KEEP_ON_FAIL=1 (keep a failed test's work dir), E2E_JOBS (tests run at once, default 2:
#      most tests wait on servers, timeouts and the kernel more than on CPU).
# Each test has its own servers on free ports, work dir and mounts, so tests run side by side; a
# test's output is printed in one piece when it ends. Tests listed in `alone` (they change the
# machine, e.g. install a package) run after the others, one at a time.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
PY=/usr/bin/python3
per_test_timeout="${E2E_TEST_TIMEOUT:-900}"
jobs="${E2E_JOBS:-2}"
# Longest first, so two lanes finish together; tests not named here run after these.
long_first=(test_soak_short test_prefetch_restart test_faults test_l3_key test_l3_faults
            test_l3_shared test_s3_mount)
alone=(test_package)

tests=()
if (( $# )); then
  for t in "$@"; do tests+=("${t%.sh}"); done
else
  tests=(s3rver_listing)
  for f in "$here"/test_*.sh; do tests+=("$(basename "$f" .sh)"); done
fi

skip_reason=""
[[ -c /dev/fuse ]] || skip_reason="/dev/fuse is missing"
command -v fusermount3 >/dev/null 2>&1 || skip_reason="${skip_reason:+$skip_reason; }fusermount3 is missing"

work="$(mktemp -d /tmp/tierfs-e2e-run.XXXXXX)"
trap 'rm -rf "$work"' EXIT
# One dataset for all tests (deterministic; ~120 MiB).
if ! timeout 300 "$PY" "$here/gen_dataset.py" "$work/dataset" "$work/manifest.json"; then
  echo "run_all: dataset generation failed"
  echo "0 passed, 1 failed"
  exit 1
fi
export E2E_DATASET="$work/dataset" E2E_MANIFEST="$work/manifest.json"

# run_one TEST: runs one test in the foreground; its exit status is the test's.
run_one() {
  local t="$1" rc
  echo "=== $t"
  if [[ "$t" == s3rver_listing ]]; then
    timeout -k 10 300 "$root/scripts/s3rver.sh" check
    rc=$?
  elif [[ -n "$skip_reason" ]]; then
    echo "$t: SKIP: $skip_reason"
    rc=77
  elif [[ ! -f "$here/$t.sh" ]]; then
    echo "$t: no such test ($here/$t.sh)"
    rc=1
  else
    timeout -k 30 "$per_test_timeout" bash "$here/$t.sh"
    rc=$?
    (( rc == 124 )) && echo "$t: timed out after ${per_test_timeout}s"
  fi
  return $rc
}

passed=0 failed=0 skipped=0
results=()
t_all=$SECONDS
declare -A pid_test=() t_start=()

# finish PID RC: prints the test's output and records its result.
finish() {
  local t="${pid_test[$1]}" rc="$2"
  local dt=$((SECONDS - ${t_start[$t]}))
  cat "$work/$t.out"
  if (( rc == 0 )); then
    passed=$((passed + 1)); results+=("PASS  $t (${dt}s)")
  elif (( rc == 77 )); then
    skipped=$((skipped + 1)); results+=("SKIP  $t ($skip_reason)")
  else
    failed=$((failed + 1)); results+=("FAIL  $t (exit $rc, ${dt}s)")
  fi
  unset "pid_test[$1]"
}

# wait_one: waits for any running test to end.
wait_one() {
  local pid rc
  wait -n -p pid "${!pid_test[@]}"
  rc=$?
  finish "$pid" "$rc"
}

# Order: the long tests first, then the rest in name order; `alone` tests last.
in_list() { local x="$1"; shift; local y; for y in "$@"; do [[ "$x" == "$y" ]] && return 0; done; return 1; }
queue=() last=()
for t in "${long_first[@]}"; do in_list "$t" "${tests[@]}" && queue+=("$t"); done
for t in "${tests[@]}"; do
  if in_list "$t" "${alone[@]}"; then last+=("$t")
  elif ! in_list "$t" "${long_first[@]}"; then queue+=("$t"); fi
done

for t in "${queue[@]}"; do
  while (( ${#pid_test[@]} >= jobs )); do wait_one; done
  t_start[$t]=$SECONDS
  run_one "$t" >"$work/$t.out" 2>&1 &
  pid_test[$!]="$t"
done
while (( ${#pid_test[@]} )); do wait_one; done
for t in "${last[@]}"; do
  t_start[$t]=$SECONDS
  run_one "$t" >"$work/$t.out" 2>&1 &
  pid_test[$!]="$t"
  wait_one
done

echo
echo "=== e2e results ($((SECONDS - t_all))s)"
for r in "${results[@]}"; do echo "$r"; done
if (( skipped )); then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
(( failed == 0 ))
