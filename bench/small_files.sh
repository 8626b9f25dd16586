#!/usr/bin/env bash
# Small files from a warm mount: FUSE operations per file and DataLoader samples/s over the
# benchmark's 10,000 x 128 KiB files (10 dirs x 1,000; bench/seed.py's "small" group), 4 workers,
# batch 64, shuffled. Measures tierfs (epoch 1 fills the cache, epochs 2..3 are warm), the
# do-nothing FUSE ceiling (bench/nullfs.c), the same serving the local files (`fuselocal`:
# nullfs --backing, the ceiling of a FUSE file system reading local files) and local disk (page
# cache dropped before each epoch set). The origin is a file:// copy of the dataset: the warm
# epochs never reach it (metadata TTL 10 minutes), so its speed does not matter here. FUSE ops
# come from tierfs's /metrics (tierfs_fuse_requests_total{op}) around each epoch.
#
# --drop-each drops the page cache before every epoch: tierfs's epochs after the first are then
# served from L2 (the shape of an epoch after a prefetch into L2), local disk's and fuselocal's
# from the disk.
#
#   bench/small_files.sh [--tools tierfs,nullfs,fuselocal,local] [--epochs 3] [--drop-each]
#                        [--out DIR]
#
# Environment: TIERFS (default build/daemon/tierfs), TIERFS_OPTS (extra mount flags). Needs root.
set -uo pipefail
BENCH="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$BENCH/.." && pwd)"
source "$ROOT/scripts/lib.sh"  # is_mounted DIR, pid_alive PID
PY=/usr/bin/python3
TOOLS="tierfs,nullfs,local"
EPOCHS=3
DROP_EACH=""
OUT=""
while (($#)); do
  case "$1" in
    --tools) TOOLS="$2"; shift ;;
    --epochs) EPOCHS="$2"; shift ;;
    --drop-each) DROP_EACH=1 ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "small_files.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
TIERFS="${TIERFS:-$ROOT/build/daemon/tierfs}"
WORK="$BENCH/out/small-files"
SRC="$WORK/src"
OUT="${OUT:-$WORK/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT" "$WORK"
[[ $(id -u) == 0 ]] || { echo "run as root (drop_caches, mounts)" >&2; exit 1; }

MOUNTED=(); PIDS=()
cleanup() {
  local m p
  for m in "${MOUNTED[@]}"; do
    is_mounted "$m" && { fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m"; }
  done
  for p in "${PIDS[@]}"; do pid_alive "$p" && kill "$p"; done
}
trap cleanup EXIT

if [[ ! -f $SRC/.complete ]]; then
  $PY - "$SRC/small" <<'EOF'
import os, sys
root = sys.argv[1]
for d in range(10):
    os.makedirs(f"{root}/d{d:03d}", exist_ok=True)
    for f in range(1000):
        n = d * 1000 + f
        with open(f"{root}/d{d:03d}/f{f:05d}.bin", "wb") as out:
            out.write(n.to_bytes(8, "little") * (128 * 1024 // 8))
EOF
  touch "$SRC/.complete"
fi

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
wait_mounted() {
  for _ in $(seq 300); do is_mounted "$1" && return 0; pid_alive "$2" || return 1; sleep 0.1; done
  return 1
}
fuse_ops() { # PORT -> "op=count ..." of tierfs_fuse_requests_total
  curl -s "http://127.0.0.1:$1/metrics" |
    sed -n 's/^tierfs_fuse_requests_total{op="\([a-z_]*\)"} \([0-9.e+]*\)$/\1=\2/p' | tr '\n' ' '
}

for tool in ${TOOLS//,/ }; do
  mnt="$WORK/mnt-$tool"; mkdir -p "$mnt"; port=""
  case "$tool" in
    local) mnt="$SRC" ;;
    tierfs)
      rm -rf "$WORK/cache"; mkdir -p "$WORK/cache"
      port="$("$ROOT/scripts/s3rver.sh" free-port)"
      "$TIERFS" mount "file://$SRC" "$mnt" --cache-dir "$WORK/cache" --l1-size 1GiB --l2-size 16GiB \
        --metadata-ttl 10m --metrics-address "127.0.0.1:$port" ${TIERFS_OPTS:-} -f >"$OUT/daemon.log" 2>&1 &
      PIDS+=($!); MOUNTED+=("$mnt")
      wait_mounted "$mnt" $! || { echo "tierfs mount failed" >&2; cat "$OUT/daemon.log"; exit 1; } ;;
    nullfs|fuselocal)
      gcc -O2 -Wall -o "$WORK/nullfs" "$BENCH/nullfs.c" $(pkg-config --cflags --libs fuse3) || exit 1
      backing=(); [[ $tool == fuselocal ]] && backing=(--backing "$SRC")
      "$WORK/nullfs" "$mnt" -f -o max_read=1048576 --layout small:10:1000:131072 "${backing[@]}" \
        >"$OUT/$tool.log" 2>&1 &
      PIDS+=($!); MOUNTED+=("$mnt")
      wait_mounted "$mnt" $! || { echo "$tool mount failed" >&2; exit 1; } ;;
  esac
  drop_caches
  # One loader run per epoch, each counted for FUSE ops: epoch 1 fills the cache; the first warm
  # epoch after it still costs a getattr per file (docs/semantics.md), later ones not.
  for ((e = 1; e <= EPOCHS; e++)); do
    [[ -n $DROP_EACH && $e -gt 1 ]] && drop_caches
    before=""; [[ -n $port ]] && before="$(fuse_ops "$port")"
    $PY "$BENCH/loader.py" "$mnt/small" --epochs 1 --workers 4 --batch 64 --cap 300 \
      --expect 10000 --out "$OUT/$tool-e$e.json" 2>&1 | grep -v Warning
    if [[ -n $port ]]; then
      after="$(fuse_ops "$port")"
      $PY - "$e" "$before" "$after" <<'EOF' | tee -a "$OUT/$tool-ops.txt"
import sys
def parse(s): return {k: float(v) for k, v in (kv.split("=") for kv in s.split())}
b, a = parse(sys.argv[2]), parse(sys.argv[3])
d = {k: a[k] - b.get(k, 0) for k in a if a[k] - b.get(k, 0) > 0}
total = sum(d.values())
print(f"epoch {sys.argv[1]} FUSE ops: " + " ".join(f"{k}={int(v)}" for k, v in sorted(d.items()))
      + f" ({total / 10000:.2f}/file)")
EOF
    fi
  done
  # shellcheck disable=SC2046  # one path per epoch, in epoch order
  $PY - "$tool" $(for ((e = 1; e <= EPOCHS; e++)); do echo "$OUT/$tool-e$e.json"; done) <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
eps = []
for f in sys.argv[2:]:
    eps += [e.get("samples_per_s") for e in json.load(open(f)).get("epochs", [])]
print(sys.argv[1], "samples/s per epoch:", " ".join(f"{x:.0f}" if x else "-" for x in eps))
EOF
  if [[ $tool != local ]]; then
    fusermount3 -u "$mnt"; sleep 0.5
  fi
done
