#!/usr/bin/env bash
# THE demo. As root on Debian 12:
#   installs the dependencies, builds tierfs, starts an S3 server (s3rver) on 127.0.0.1 with a
#   sample dataset (~400 MiB: a 256 MiB checkpoint, 16 MiB shards, 400 small files), mounts it with
#   tierfs, reads files cold (from the origin) and warm (kernel page cache, L1 memory, and after a
#   remount L2 flash), and shows from the daemon's counters where the bytes came from. Everything
#   it starts is stopped and unmounted at the end, also on failure or Ctrl-C.
#   scripts/demo.sh [--skip-deps] [--skip-build] [--keep]   (--keep: leave the work dir in /tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
PY=/usr/bin/python3
skip_deps="" skip_build="" keep=""
for a in "$@"; do
  case "$a" in
    --skip-deps) skip_deps=1 ;;
    --skip-build) skip_build=1 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done

t_start=$SECONDS
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '  $ %s\n' "$*"; "$@"; }

if [[ -z "$skip_deps" ]]; then
  say "Installing dependencies (scripts/install-deps.sh)"
  scripts/install-deps.sh
fi
TIERFS="$root/build/daemon/tierfs"
if [[ -z "$skip_build" ]]; then
  say "Building tierfs (Release, build/)"
  t0=$SECONDS
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build -j "${JOBS:-2}" daemon/tierfs | tail -n 3
  echo "  built $TIERFS in $((SECONDS - t0))s"
fi
[[ -x "$TIERFS" ]] || { echo "demo.sh: $TIERFS not found" >&2; exit 1; }
scripts/s3rver.sh install >/dev/null

work="$(mktemp -d /tmp/tierfs-demo.XXXXXX)"
mnt="$work/mnt" cache="$work/cache" s3dir="$work/s3rver"
daemon_pid=""
mkdir -p "$mnt" "$cache"

source "$root/scripts/lib.sh"  # is_mounted DIR, pid_alive PID, wait_pid_exit PID SECONDS

unmount() {  # unmount: fusermount3 -u, then wait (bounded) for the daemon to exit
  if is_mounted "$mnt"; then
    timeout -k 2 20 fusermount3 -u "$mnt" || timeout -k 2 10 fusermount3 -u -z "$mnt" || true
  fi
  if [[ -n "$daemon_pid" ]]; then
    if ! wait_pid_exit "$daemon_pid" 20; then
      echo "  daemon pid $daemon_pid did not exit after unmount; stopping it" >&2
      kill -TERM "$daemon_pid" 2>/dev/null || true
      sleep 2
      kill -KILL "$daemon_pid" 2>/dev/null || true
    fi
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
  fi
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  say "Cleaning up"
  unmount
  scripts/s3rver.sh stop "$s3dir" 2>/dev/null | sed 's/^/  /'
  if [[ -n "$keep" ]] || is_mounted "$mnt"; then
    echo "  work dir kept: $work"
  else
    rm -rf "$work"
  fi
  (( rc == 0 )) && echo "  demo finished in $((SECONDS - t_start))s" || echo "  demo FAILED (exit $rc)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "Generating the sample dataset"
"$PY" tests/e2e/gen_dataset.py --profile demo "$work/dataset" "$work/manifest.json"

say "Starting the S3 origin (s3rver on 127.0.0.1) and uploading the dataset"
port="$(scripts/s3rver.sh free-port)"
scripts/s3rver.sh start "$s3dir" "$port" demo-datasets | sed 's/^/  /'
endpoint="http://127.0.0.1:$port"
timeout 600 "$PY" tests/e2e/upload.py "$work/dataset" "$work/manifest.json" \
  --endpoint "$endpoint" --bucket demo-datasets | sed 's/^/  /'

export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1

mount_it() {
  local log="$1"
  printf '  $ tierfs mount s3://demo-datasets %s --endpoint %s --cache-dir %s --l1-size 512MiB --l2-size 4GiB\n' \
    "$mnt" "$endpoint" "$cache"
  "$TIERFS" mount s3://demo-datasets "$mnt" --endpoint "$endpoint" --cache-dir "$cache" \
    --l1-size 512MiB --l2-size 4GiB -f >"$log" 2>&1 </dev/null &
  daemon_pid=$!
  local deadline=$((SECONDS + 30))
  until is_mounted "$mnt"; do
    if ! pid_alive "$daemon_pid" || (( SECONDS >= deadline )); then
      echo "demo.sh: mount failed; daemon log:" >&2
      tail -n 30 "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "  mounted (daemon pid $daemon_pid, log $log)"
}

say "Mounting the bucket with tierfs"
mount_it "$work/daemon1.log"
run ls -la "$mnt"
echo "  $(find "$mnt" -type f | wc -l) files, $(du -sh --apparent-size "$mnt" | cut -f1) in total"

reads() { timeout 600 "$PY" scripts/demo_read.py "$mnt" "$@"; }

say "Cold reads: every byte comes from the origin (S3)"
reads "cold (origin)" models/checkpoint-256MiB.bin
reads "cold (origin)" shards
reads "cold (origin)" images

say "Warm reads in the same mount"
reads "warm, 2nd open (page cache)" models/checkpoint-256MiB.bin
reads "warm (L1 memory)" models/checkpoint-256MiB.bin --drop-page-cache
reads "warm (L1 memory)" images --drop-page-cache

say "Where the bytes came from so far"
run "$TIERFS" status "$mnt" || true
run getfattr -n user.tierfs.stats "$mnt" || true

say "Remount with the same cache dir: a new daemon, empty memory, L2 flash kept"
unmount
mount_it "$work/daemon2.log"
reads "after remount (L2 flash)" models/checkpoint-256MiB.bin
reads "after remount (L2 flash)" images
reads "after remount (L1 memory)" images --drop-page-cache
run getfattr -d -m 'user.tierfs' "$mnt/models/checkpoint-256MiB.bin" || true
run "$TIERFS" status "$mnt" || true

say "Checking every byte against the dataset (sha256)"
timeout 600 "$PY" tests/e2e/verify.py hashes "$mnt" "$work/manifest.json" | sed 's/^/  /'
