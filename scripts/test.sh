#!/usr/bin/env bash
# THE test command (CI runs exactly this through .ci/run). As root on Debian 12:
#   1. scripts/install-deps.sh --rgw (apt, Ceph RGW, the npm test origin and Kubernetes schemas)
#   2. Release build with -Werror into build/, unit tests (ctest)
#   3. unit tests under ASan+UBSan (clang, build-asan/; the same tree also builds the fuzz
#      targets: every library is compiled once with ASan/UBSan + libFuzzer coverage hooks)
#   4. unit tests under TSan (clang, build-tsan/; clang also checks -Wthread-safety)
#   5. fuzz targets (libFuzzer + ASan/UBSan, from build-asan/): each parser of untrusted input
#      run from its seed corpus for 10 s (tests/fuzz/run.sh)
#   6. clang-format --dry-run -Werror over the C++ sources
#   7. the Python package's unit tests (python/tests, unittest; a few seconds)
#   8. the packaging files (tests/manifests/run.sh): every YAML under packaging/ against the
#      Kubernetes schemas (scripts/validate-yaml.js, with its own tests), the Dockerfile's syntax
#   9. end-to-end tests through /dev/fuse (tests/e2e/run_all.sh)
# Every stage runs under a hard timeout and prints its time; later stages still run after a failed
# one (except those that need its output), and the script exits non-zero if any stage failed.
# The last line sums the tests: "total: N passed, M failed".
#   scripts/test.sh [--skip-deps] [--only STAGE[,STAGE...]]
#   stages: deps build unit asan tsan fuzz format python manifests e2e
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

JOBS="${JOBS:-2}"
only=""
skip_deps=""
while (( $# )); do
  case "$1" in
    --skip-deps) skip_deps=1 ;;
    --only) only="$2"; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
want() { [[ -z "$only" || ",$only," == *",$1,"* ]]; }

logdir="$(mktemp -d /tmp/tierfs-test.XXXXXX)"
declare -a summary=()
n_passed=0
n_failed=0
any_failed=0
t_start=$SECONDS

# stage NAME TIMEOUT 'COMMANDS': runs the bash COMMANDS (helper functions below are exported) under
# a hard timeout, tees the output to a log, records the time.
stage() {
  local name="$1" secs="$2" cmd="$3"
  local t0=$SECONDS rc=0
  echo
  echo "################ [$name] $(date -u +%H:%M:%S) $cmd"
  timeout -k 30 "$secs" bash -c "set -o pipefail; $cmd" 2>&1 | tee "$logdir/$name.log"
  rc=${PIPESTATUS[0]}
  local dt=$((SECONDS - t0))
  if (( rc == 0 )); then
    summary+=("$(printf '%-8s PASS  %5ds' "$name" "$dt")")
  else
    local why="exit $rc"
    (( rc == 124 )) && why="timed out after ${secs}s"
    summary+=("$(printf '%-8s FAIL  %5ds  (%s; log: %s)' "$name" "$dt" "$why" "$logdir/$name.log")")
    any_failed=1
  fi
  echo "################ [$name] $( ((rc == 0)) && echo PASS || echo FAIL) in ${dt}s"
  return $rc
}

skipped() { summary+=("$(printf '%-8s SKIP         (%s)' "$1" "$2")"); }

# count_ctest LOG: adds ctest's "N% tests passed, F tests failed out of T" to the totals.
count_ctest() {
  local line
  line="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n 1)"
  if [[ -z "$line" ]]; then
    n_failed=$((n_failed + 1))
    return
  fi
  local failed total
  failed="$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")"
  total="$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")"
  n_passed=$((n_passed + total - failed))
  n_failed=$((n_failed + failed))
}

# count_plain LOG: adds a closing "N passed, M failed" line (e2e) to the totals.
count_plain() {
  local line
  line="$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)"
  if [[ -z "$line" ]]; then
    n_failed=$((n_failed + 1))
    return
  fi
  n_passed=$((n_passed + $(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line")))
  n_failed=$((n_failed + $(sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/' <<<"$line")))
}

# count_unittest LOG: adds Python unittest's "Ran N tests" / "FAILED (failures=F, errors=E)".
count_unittest() {
  local ran bad
  ran="$(grep -E '^Ran [0-9]+ tests?' "$1" | tail -n 1 | sed -E 's/^Ran ([0-9]+).*/\1/')"
  if [[ -z "$ran" ]]; then
    n_failed=$((n_failed + 1))
    return
  fi
  bad="$(grep -E '^FAILED \(' "$1" | tail -n 1 | grep -oE '(failures|errors)=[0-9]+' |
         awk -F= '{n += $2} END {print n + 0}')"
  n_passed=$((n_passed + ran - bad))
  n_failed=$((n_failed + bad))
}

cmake_build() {  # cmake_build DIR CMAKE-ARGS...: configure + build
  local dir="$1"
  shift
  cmake -S . -B "$dir" -G Ninja "$@" && ninja -C "$dir" -j "$JOBS" -k 0
}

run_ctest() {  # run_ctest DIR: ctest with its normal summary
  ctest --test-dir "$1" --output-on-failure -j "$JOBS" --timeout 300
}

check_format() {
  local files=()
  mapfile -d '' files < <(git ls-files -z -- '*.cc' '*.h' ':!:third_party/**')
  echo "clang-format $(clang-format --version | grep -oE '[0-9]+\.[0-9.]+' | head -n1): ${#files[@]} files"
  (( ${#files[@]} )) || return 0
  clang-format --dry-run -Werror "${files[@]}"
}
export JOBS
export -f cmake_build run_ctest check_format

# --- 1. dependencies
if [[ -z "$skip_deps" ]] && want deps; then
  stage deps 1800 "scripts/install-deps.sh --rgw"
fi

# --- 2. Release build + unit tests
build_ok=""
if want build || want unit || want e2e; then
  if stage build 1800 'cmake_build build -DCMAKE_BUILD_TYPE=Release -DTIERFS_WERROR=ON'; then
    build_ok=1
  fi
fi
if want unit; then
  if [[ -n "$build_ok" ]]; then
    stage unit 900 'run_ctest build'
    count_ctest "$logdir/unit.log"
  else
    skipped unit "release build failed"
    n_failed=$((n_failed + 1))
  fi
fi

# Sanitizer builds: libraries and unit tests (no tierfs executable), -O1 with line tables (enough
# for sanitizer stack traces, much cheaper to compile than -O2 -g) and assertions on. The Release
# build above is gcc, the sanitizer builds clang: both compilers' warnings are errors.
SAN_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo '-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1' \
'-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1' -DTIERFS_UNIT_ONLY=ON -DTIERFS_WERROR=ON"

# --- 3. ASan + UBSan unit tests
if want asan; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  if stage asan-build 1800 "export CC=clang CXX=clang++; cmake_build build-asan $SAN_FLAGS -DTIERFS_SANITIZE=address -DTIERFS_FUZZ=ON"; then
    stage asan 1200 'run_ctest build-asan'
    count_ctest "$logdir/asan.log"
  else
    n_failed=$((n_failed + 1))
  fi
fi

# --- 4. TSan unit tests (clang; CMakeLists adds -Wthread-safety for clang)
if want tsan; then
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
  if stage tsan-build 1800 "export CC=clang CXX=clang++; cmake_build build-tsan $SAN_FLAGS -DTIERFS_SANITIZE=thread"; then
    stage tsan 1200 'run_ctest build-tsan'
    count_ctest "$logdir/tsan.log"
  else
    n_failed=$((n_failed + 1))
  fi
fi

# --- 5. fuzz targets: a bounded run of each (built in build-asan/ by stage 3; alone, run.sh
# builds its own tree)
if want fuzz; then
  if want asan; then
    stage fuzz 600 'tests/fuzz/run.sh --build-dir build-asan'
  else
    stage fuzz 600 tests/fuzz/run.sh
  fi
  count_plain "$logdir/fuzz.log"
fi

# --- 6. formatting
if want format; then
  if stage format 300 check_format; then
    n_passed=$((n_passed + 1))
  else
    n_failed=$((n_failed + 1))
  fi
fi

# --- 7. the Python package (python/tierfs): unit tests against a fake file system; the sampler
# tests use PyTorch (python3-torch)
if want python; then
  stage python 300 'cd python && /usr/bin/python3 -m unittest discover -v -s tests -t . 2>&1'
  count_unittest "$logdir/python.log"
fi

# --- 8. the packaging files: Kubernetes manifests (schemas from tools/k8s-models, installed by
# the deps stage), the Dockerfile
if want manifests; then
  stage manifests 300 tests/manifests/run.sh
  count_plain "$logdir/manifests.log"
fi

# --- 9. end-to-end tests through /dev/fuse
if want e2e; then
  if [[ -n "$build_ok" ]]; then
    stage e2e 1800 "E2E_REQUIRE_RGW=1 tests/e2e/run_all.sh"
    count_plain "$logdir/e2e.log"
  else
    skipped e2e "release build failed"
    n_failed=$((n_failed + 1))
  fi
fi

echo
echo "################ summary ($((SECONDS - t_start))s, logs in $logdir)"
for s in "${summary[@]}"; do echo "$s"; done
if (( any_failed )) && (( n_failed == 0 )); then
  n_failed=1  # a stage failed without failing a counted test (e.g. deps)
fi
echo "total: $n_passed passed, $n_failed failed"
(( any_failed == 0 && n_failed == 0 ))
