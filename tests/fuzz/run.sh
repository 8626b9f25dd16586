#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang 14 with -fsanitize=fuzzer,address,undefined,
# into build-fuzz/) and runs each from its committed seed corpus (tests/fuzz/corpus/TARGET/) for
# a short bounded time. Exits non-zero if a target crashes, leaks, hits a sanitizer report, times
# out on one input or fails to build; the crashing input is kept in build-fuzz/artifacts/ (or DIR/artifacts).
#   tests/fuzz/run.sh [--time SECONDS] [--build-only] [--build-dir DIR] [TARGET...]
# --build-dir DIR: use (and only update) an existing tree configured with -DTIERFS_FUZZ=ON, e.g.
# scripts/test.sh's build-asan/ (ASan unit tests and fuzz targets from one clang build).
# Environment: FUZZ_TIME (seconds per target, default 10), FUZZ_RUNS (input bound per target,
# default 5000000), JOBS (build parallelism, default 2). New inputs a run finds go to a temporary
# directory, not into the committed corpus; to keep one, copy it into tests/fuzz/corpus/TARGET/.
# Reproduce a crash: build-fuzz/tests/fuzz/TARGET build-fuzz/artifacts/TARGET-crash-...
# The last line is "N passed, M failed" (scripts/test.sh counts it).
set -uo pipefail
cd "$(dirname "$0")/../.."

all_targets=(list_xml_fuzz config_fuzz units_fuzz xattr_fuzz l2_trailer_fuzz l3_header_fuzz l3_listing_fuzz
  metrics_http_fuzz)
time_per="${FUZZ_TIME:-10}"
runs="${FUZZ_RUNS:-5000000}"
jobs="${JOBS:-2}"
build_only=""
bdir=build-fuzz
configure=1
targets=()
while (( $# )); do
  case "$1" in
    --time) time_per="$2"; shift ;;
    --build-only) build_only=1 ;;
    --build-dir) bdir="$2"; configure=""; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
(( ${#targets[@]} )) || targets=("${all_targets[@]}")

if ! command -v clang++ >/dev/null; then
  echo "run.sh: clang++ is not installed (scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi

# -O1 with line tables, as the sanitizer stages of scripts/test.sh: quick to build, fast enough
# to run, readable stack traces.
# A cold build of the instrumented libraries is ~6 CPU-minutes; ccache (when installed) makes
# the next one seconds.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
echo "building ${targets[*]} in $bdir/"
if [[ -z "$configure" ]] && ! grep -q '^TIERFS_FUZZ:BOOL=ON' "$bdir/CMakeCache.txt" 2>/dev/null; then
  echo "run.sh: $bdir is not a build tree configured with -DTIERFS_FUZZ=ON"
  echo "0 passed, ${#targets[@]} failed"
  exit 1
fi
if [[ -n "$configure" ]] && ! CC=clang CXX=clang++ cmake -S . -B "$bdir" -G Ninja \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo '-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1' \
      '-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1' -DTIERFS_FUZZ=ON -DTIERFS_BUILD_TESTS=OFF \
      -DTIERFS_WERROR=ON "${launcher[@]}" >/dev/null; then
  echo "run.sh: cmake failed for $bdir"
  echo "0 passed, ${#targets[@]} failed"
  exit 1
fi
if ! ninja -C "$bdir" -j "$jobs" "${targets[@]}"; then
  echo "run.sh: the fuzz targets did not build"
  echo "0 passed, ${#targets[@]} failed"
  exit 1
fi
[[ -n "$build_only" ]] && exit 0

mkdir -p "$bdir/artifacts"
work="$(mktemp -d /tmp/tierfs-fuzz.XXXXXX)"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
for t in "${targets[@]}"; do
  corpus="tests/fuzz/corpus/$t"
  mkdir -p "$work/$t"
  log="$bdir/artifacts/$t.log"
  # New inputs go to $work/$t (first directory); the committed corpus is only read.
  "$bdir/tests/fuzz/$t" -max_total_time="$time_per" -runs="$runs" -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -timeout=10 -max_len=131072 -print_final_stats=1 \
    -artifact_prefix="$bdir/artifacts/$t-" "$work/$t" "$corpus" >"$log" 2>&1
  rc=$?
  execs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')"
  cov="$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1)"
  if (( rc == 0 )); then
    passed=$((passed + 1))
    printf 'PASS %-16s %9s inputs in %ss, %s, corpus %s seeds + %s new\n' "$t" "${execs:-?}" \
      "$time_per" "${cov:-cov: ?}" "$(ls "$corpus" | wc -l)" "$(ls "$work/$t" | wc -l)"
  else
    failed=$((failed + 1))
    echo "FAIL $t (exit $rc): log $log"
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written|==[0-9]+==' "$log" | head -n 20
  fi
done
echo "$passed passed, $failed failed"
(( failed == 0 ))
