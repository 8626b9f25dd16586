#!/usr/bin/env bash
# Dataset scale: a file:// origin with 200,000 files in one directory and a
# 2,000,000-file tree (2,000 dirs x 1,000 files), served by tierfs beside local disk.
#
#   bench/scale.sh [--cases flat,tree] [--out DIR] [--keep] [--daemonized]
#
# Per case it reports, for tierfs and for the same tree on local disk:
#   cold list   `find DIR -printf '%s\n'` (a listing with a stat of every entry) right after
#               the mount, tierfs's cache empty (the origin tree itself is in the page cache, as
#               it is for local disk);
#   warm list   the same again (everything cached in the kernel and the daemon);
#   warm stat   the kernel's dentries and inodes dropped (echo 2 > drop_caches: every stat is a
#               FUSE lookup answered by the daemon from its metadata cache), then a stat of every
#               file by path (bench/stat_all.py, one process);
#   memory      the daemon's VmRSS and RssAnon before the cold listing and after the warm stat,
#               divided by the number of entries (bytes per cached entry).
# --daemonized mounts as `tierfs mount` does by default (a supervised daemon that logs its
# inode table for crash resume) instead of in the foreground; memory is then the serving
# daemon's, and the supervisor's VmRSS after the warm stat is reported too.
# Trees are zero-byte files made once under bench/out/scale/ (2M files take ~2M inodes and a few
# minutes to create; --keep leaves them for the next run, otherwise they are removed at the end).
#
# Environment: TIERFS (default build/daemon/tierfs), TIERFS_OPTS (extra mount flags). Needs root.
set -uo pipefail
BENCH="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$BENCH/.." && pwd)"
source "$ROOT/scripts/lib.sh"  # is_mounted DIR, pid_alive PID
PY=/usr/bin/python3
CASES="flat,tree"
OUT=""
KEEP=0
DAEMONIZED=0
while (($#)); do
  case "$1" in
    --cases) CASES="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --keep) KEEP=1 ;;
    --daemonized) DAEMONIZED=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "scale.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
TIERFS="${TIERFS:-$ROOT/build/daemon/tierfs}"
WORK="$BENCH/out/scale"
OUT="${OUT:-$WORK/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT" "$WORK"
[[ $(id -u) == 0 ]] || { echo "run as root (drop_caches, mounts)" >&2; exit 1; }

MNT="$WORK/mnt"
DPID=""
cleanup() {
  is_mounted "$MNT" && { fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT"; }
  pid_alive "$DPID" && kill "$DPID"
  if ((!KEEP)); then rm -rf "$WORK/src-flat" "$WORK/src-tree"; fi
  rm -rf "$WORK/cache"
}
trap cleanup EXIT

make_tree() { # CASE -> creates $WORK/src-CASE once
  local dir="$WORK/src-$1"
  [[ -f $dir/.complete ]] && return 0
  rm -rf "$dir"; mkdir -p "$dir"
  echo "creating the $1 tree in $dir ..." >&2
  $PY - "$dir" "$1" <<'EOF'
import os, sys
root, case = sys.argv[1], sys.argv[2]
flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
if case == "flat":
    d = os.path.join(root, "big")
    os.mkdir(d)
    for i in range(200_000):
        os.close(os.open(f"{d}/f{i:07d}.jpg", flags, 0o644))
else:
    for j in range(2_000):
        d = os.path.join(root, f"c{j:04d}")
        os.mkdir(d)
        for i in range(1_000):
            os.close(os.open(f"{d}/f{i:04d}.jpg", flags, 0o644))
EOF
  touch "$dir/.complete"
}

timeit() { # CMD... -> prints seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l | xargs printf '%.3f'
}
list_all() { find "$1" -printf '%s\n'; }
stat_all() { $PY "$BENCH/stat_all.py" "$1"; }
drop_dentries() { sync; echo 2 >/proc/sys/vm/drop_caches; }
mem() { awk '/^VmRSS|^RssAnon/ {printf "%s ", $2}' "/proc/$1/status"; } # "rss_kib anon_kib"
cpu_ms() { # PID -> its user + system CPU time so far, ms ("0" if gone)
  awk -v hz="$(getconf CLK_TCK)" '{printf "%d", ($14 + $15) * 1000 / hz}' "/proc/$1/stat" 2>/dev/null || echo 0
}
daemon_field() { # KEY -> its value in the mount root's user.tierfs.daemon ("pid=N ...")
  getfattr --only-values -n user.tierfs.daemon "$MNT" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p"
}

for c in ${CASES//,/ }; do
  case "$c" in
    flat) sub="big"; n=200000 ;;
    tree) sub=""; n=2002000 ;;  # 2,000,000 files + 2,000 dirs
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
  make_tree "$c"
  src="$WORK/src-$c"
  # The names list for stat_all (from local disk; same names through tierfs).
  (cd "$src" && find "./$sub" -type f -printf '%P\n' | sed "s|^|$sub${sub:+/}|") >"$WORK/names-$c.txt"
  # Local disk: warm the page cache once, then measure.
  list_all "$src/$sub" >/dev/null
  l_cold=$(timeit list_all "$src/$sub")
  l_warm=$(timeit list_all "$src/$sub")
  drop_dentries
  l_stat=$(cd "$src" && timeit stat_all "$WORK/names-$c.txt")

  rm -rf "$WORK/cache"; mkdir -p "$WORK/cache" "$MNT"
  mount_args=("file://$src" "$MNT" --cache-dir "$WORK/cache" --l1-size 256MiB --l2-size 4GiB
    --metadata-ttl 10m)
  if ((DAEMONIZED)); then
    # shellcheck disable=SC2086  # TIERFS_OPTS: flags
    "$TIERFS" mount "${mount_args[@]}" ${TIERFS_OPTS:-} --log-file "$OUT/daemon-$c.log" \
      >"$OUT/mount-$c.out" 2>&1 || { echo "mount failed" >&2; cat "$OUT/mount-$c.out"; exit 1; }
    DPID=$(daemon_field pid)
  else
    # shellcheck disable=SC2086
    "$TIERFS" mount "${mount_args[@]}" ${TIERFS_OPTS:-} -f >"$OUT/daemon-$c.log" 2>&1 &
    DPID=$!
  fi
  for _ in $(seq 300); do is_mounted "$MNT" && break; sleep 0.1; done
  is_mounted "$MNT" || { echo "mount failed" >&2; cat "$OUT/daemon-$c.log"; exit 1; }
  stat "$MNT" >/dev/null
  m0=$(mem "$DPID")
  t_cold=$(timeit list_all "$MNT/$sub")
  got=$(list_all "$MNT/$sub" | wc -l)
  t_warm=$(timeit list_all "$MNT/$sub")
  drop_dentries
  spid=$(daemon_field supervisor_pid)
  [[ $spid =~ ^[0-9]+$ ]] || spid=""
  d_cpu0=$(cpu_ms "$DPID") s_cpu0=$([[ -n $spid ]] && cpu_ms "$spid" || echo 0)
  t_stat=$(cd "$MNT" && timeit stat_all "$WORK/names-$c.txt")
  d_cpu1=$(cpu_ms "$DPID") s_cpu1=$([[ -n $spid ]] && cpu_ms "$spid" || echo 0)
  m1=$(mem "$DPID")
  echo "scale $c: warm stat CPU: daemon $((d_cpu1 - d_cpu0)) ms, supervisor $((s_cpu1 - s_cpu0)) ms" |
    tee -a "$OUT/summary.txt"
  [[ -n $spid ]] && echo "scale $c: supervisor VmRSS $(awk '/^VmRSS/ {print $2}' "/proc/$spid/status") KiB" |
    tee -a "$OUT/summary.txt"
  getfattr --only-values -n user.tierfs.stats "$MNT" >"$OUT/stats-$c.txt" 2>/dev/null
  fusermount3 -u "$MNT"
  if ((DAEMONIZED)); then
    for _ in $(seq 300); do pid_alive "$DPID" || break; sleep 0.1; done
  else
    wait "$DPID" 2>/dev/null
  fi
  DPID=""
  $PY - "$c" "$n" "$got" "$l_cold" "$l_warm" "$l_stat" "$t_cold" "$t_warm" "$t_stat" $m0 $m1 <<'EOF' | tee -a "$OUT/summary.txt"
import sys
c, n, got = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lc, lw, ls, tc, tw, ts = map(float, sys.argv[4:10])
r0, a0, r1, a1 = map(int, sys.argv[10:14])
print(f"scale {c}: entries={n} listed={got - 1}")
print(f"  cold list  tierfs {tc:8.3f} s  local {lc:7.3f} s  ratio {tc / lc:6.1f}x")
print(f"  warm list  tierfs {tw:8.3f} s  local {lw:7.3f} s  ratio {tw / lw:6.1f}x")
print(f"  warm stat  tierfs {ts:8.3f} s  local {ls:7.3f} s  ratio {ts / ls:6.1f}x")
print(f"  memory     VmRSS +{(r1 - r0) / 1024:.1f} MiB = {(r1 - r0) * 1024 / n:.0f} B/entry, "
      f"RssAnon +{(a1 - a0) / 1024:.1f} MiB = {(a1 - a0) * 1024 / n:.0f} B/entry")
EOF
done
echo "results in $OUT/summary.txt"
