#!/usr/bin/env bash
# tierfs benchmark: one command. Starts its own S3 origin (s3rver) behind a delay proxy, seeds it,
# mounts each tool on empty caches, runs the same workloads, and writes JSON + markdown + PNG.
#
#   bench/run.sh [--quick] [--stall] [--tools tierfs,s3fs,rclone,local,nullfs,raw] [--delay-ms 5]
#   bench/run.sh --workload prefetch   # only the deep prefetch workload, a few min
#                [--cap SECONDS] [--out DIR]
#   bench/run.sh --workload multijob   # only the multi-job hit-rate workload: on one
#                mount (L1 128 MiB, L2 256 MiB) at once a hot job reading hot/ (128 MiB) 4 times
#                (MJ_HOT_PASSES) while a stream job reads big/ (1 GiB) once and a projection job reads
#                25% of proj/ (4 x 16 MiB) in 16-64 KiB ranges; per admission mode (MJ_MODES,
#                default "always default"; "always" is cache.admit "always" with no scan detection
#                and no projected reads; MJ_REPEAT runs each, default 1). Per job: bytes by
#                serving tier, origin bytes per byte read (counted by the delay proxy), MiB/s,
#                p99/max read latency. Results: raw/multijob/*.json and multijob.md, ~1-2 min a run
#   bench/run.sh --au [--only unet3d,resnet50,cosmoflow] [--quick] [--out DIR]
#                accelerator utilization on MLPerf-Storage-shaped workloads (bench/au.py):
#                per shape, R = 1, 2, 4 emulated accelerators on local disk, tierfs warm from L2,
#                tierfs cold and tierfs cold with a prefetch running ahead, and the origin's ceiling;
#                ~10 min for the three shapes, --only one shape 2-4 min, --quick R = 1, 2 only.
#                Results: au/*.json, au/au.md (the table) and an "au:" line per run in run.log.
#                AU_RANKS (1,2,4), AU_WORKERS (DataLoader workers per rank, 4), AU_L1 (tierfs
#                --l1-size, 128MiB), AU_CAP (seconds per epoch, 40), AU_COMPUTE_SCALE (1)
#
#   --quick      smaller dataset (2 x 256 MiB, 2,000 x 128 KiB, 2,000 tiny) and shorter random-read
#                runs: a few minutes. The full run (2 x 1 GiB, 10,000 x 128 KiB, 20,000 tiny) takes
#                up to ~45 minutes on 2 cores, most of it in the slowest peers.
#   --stall      only the GPU-stall view (group G: a DataLoader with 20 ms of "compute" per batch,
#                tierfs plain / with PrefetchSampler / after a prefetch, the peers, local disk, and
#                copy-first with rclone copy --transfers 32); a full run includes it
#   --tools      which tools to measure (default: all; a tool whose binary is missing is skipped)
#   --delay-ms   delay per origin request chunk, each way (default 5; 0 = plain loopback)
#   --only l2    run only the L2 workload (tierfs and a plain file, see "l2 workload" below):
#                warm sequential read of a file held only in L2 (L1 smaller than the file, page
#                cache dropped) vs the same bytes from one plain file on the cache's filesystem
#                (and, with nullfs in --tools, from that file through nullfs --backing: the
#                FUSE ceiling), and DataLoader epochs after a prefetch into L2 vs local disk, in L2_REPEAT
#                (default 5) back-to-back pairs; the median of the pairs' ratios is the result.
#                Results: raw/l2/*.json and "l2:" summary lines in run.log. L2_PERF=1: perf
#                profile of the daemon during the first warm read (raw/l2/perf-warm.txt).
#   --only rand  run only the cold random reads (group C: 4 fio jobs of 4 KiB on one cold 1 GiB
#                file, then of 128 KiB on the other, empty caches) for each of --tools; a "rand:"
#                IOPS line per tool in run.log, results in raw/<tool>/rand{4k,128k}-cold.json
#   --only seq   run only the cold sequential reads (group A's seq1-cold, then seq1-next: the other
#                file, cold, in the same mount; group B's seq2-cold on empty caches) for each of
#                --tools (tierfs, s3fs, rclone; raw: the origin's own one-GET, two-GET and 8-way
#                ranged throughput), with the CPU each cost; a "seq:" line per tool in run.log
#   --only seqrounds  only the interleaved cold sequential rounds (SEQ_ROUNDS, default 3; also at
#                the end of a full run): per round, back to back in a rotating order, the 8 ranged
#                GETs (alone; next to a process spinning on one core; while nullfs delivers the
#                same 1 GiB; and that plus a 1 GiB O_DIRECT write: the FUSE ceilings; and coupled in
#                one FUSE process, nullfs --origin: the GETs to the reader, and to flash too, and
#                as 128 GETs of 8 MiB, tierfs's request shape: the coupled ceilings) and for
#                tierfs, s3fs and rclone a cold 1 GiB read, then two cold streams (both big
#                files), each on a fresh mount; the report compares the tools within each round (results.md "Cold sequential,
#                interleaved rounds"; --only prints it to run.log), ~3 min
#   --only loaderrounds  only the interleaved cold DataLoader rounds (LOADER_ROUNDS, default 3; also
#                at the end of a full run): per round, in a rotating order, every object of small/ with 128
#                GETs in flight (alone; while the DataLoader reads the same files through nullfs;
#                and that plus as many L2-like file writes, or appends to one segment file: the
#                FUSE ceilings of a cold epoch) and
#                tierfs's cold epoch 1 on a fresh mount; use --tools raw,tierfs; ~4 min
#   --only stallrounds  only the interleaved rounds of the GPU-stall view after a prefetch
#                (STALL_ROUNDS, default 5; also at the end of a full run): per round, in a rotating
#                order, tierfs's "after a prefetch" session, the same epochs from local disk and
#                (with nullfs in --tools) through nullfs --backing over local disk (the FUSE
#                ceiling); the report compares their stalls and waits within each round; use
#                --tools tierfs,local,nullfs; ~5 min
#   --only warm  run only group A's warm reads (a cold read of one 1 GiB file, then after
#                drop_caches: sequential 1 MiB, random 4 KiB and random 128 KiB over it) for each of
#                --tools (tierfs, s3fs, rclone, local, nullfs); a "warm:" line per tool in run.log
#   --only loader  run only the cold DataLoader (group E: 2 epochs over small/ from empty caches)
#                for each of --tools, and for raw the origin's rate for whole small objects with 4,
#                64 and 128 GETs in flight (its small-object ceiling), and with 128 while a process
#                spins on one core; a "loader:" line per tool (tierfs: also with PrefetchSampler,
#                group E')
#                and "raw: small objects" lines in run.log
#   --cap        seconds a single workload may run before it is cut short (default 120, quick 60);
#                a cut-short result is reported as a lower bound / "timeout", never as a failure;
#                a DataLoader epoch is cut after LOADER_CAP seconds (default 60)
#
# Environment: TIERFS (path of the tierfs binary, default build/daemon/tierfs), TIERFS_L1 / TIERFS_L2
# (cache sizes, default 1GiB / 16GiB), TIERFS_OPTS (default --metadata-ttl 10m), S3FS_OPTS, RCLONE_OPTS (extra mount options),
# STALL_SESSIONS (group G's tierfs sessions, default "plain sampler prefetched"; a subset for A/B runs),
# ORIGIN_NICE (default 0: the nice value the origin, s3rver, and the delay proxy run at, every thread;
# e.g. -10 gives them the CPU first, as an origin on other machines would not lose it to the client).
#
# Needs root (drop_caches, mounts), fio, curl, fusermount3, gcc + libfuse3-dev, node/npm (s3rver),
# /usr/bin/python3 with torch, boto3, matplotlib; s3fs and rclone for those peers
# (scripts/install-deps.sh --bench). Results: bench/out/<UTC timestamp>/ and bench/out/latest.
# Benchmarks report numbers; nothing here fails on timing, and the test suite never runs it.
set -uo pipefail

BENCH="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$BENCH/.." && pwd)"
source "$ROOT/scripts/lib.sh"  # is_mounted, pid_alive, wait_pid_exit, free_port
PY=/usr/bin/python3

LAYOUT=full
WORKLOAD=all
STALL_ONLY=""
AU=""
TOOLS="tierfs,s3fs,rclone,local,nullfs,raw"
DELAY_MS=5
CAP=""
OUT=""
ONLY=""
while (($#)); do
  case "$1" in
    --quick) LAYOUT=quick ;;
    --workload) WORKLOAD="$2"; shift ;;
    --workload=*) WORKLOAD="${1#*=}" ;;
    --tools) TOOLS="$2"; shift ;;
    --tools=*) TOOLS="${1#*=}" ;;
    --delay-ms) DELAY_MS="$2"; shift ;;
    --delay-ms=*) DELAY_MS="${1#*=}" ;;
    --cap) CAP="$2"; shift ;;
    --cap=*) CAP="${1#*=}" ;;
    --out) OUT="$2"; shift ;;
    --stall) STALL_ONLY=1 ;;
    --au) AU=1 ;;
    --only) ONLY="$2"; shift ;;
    --only=*) ONLY="${1#*=}" ;;
    -h|--help) sed -n "2,$(grep -n -m1 '^set -uo pipefail' "$0" | cut -d: -f1)p" "$0" | sed '$d'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

if [[ -n $AU ]]; then  # --au: its own dataset; --only names shapes, --quick cuts R to 1,2
  [[ $LAYOUT == quick ]] && AU_RANKS="${AU_RANKS:-1,2}"
  LAYOUT=au; TOOLS="tierfs,local,raw"
  AU_SHAPES="${ONLY:-unet3d,resnet50,cosmoflow}"; ONLY=""
fi
case "$WORKLOAD" in
  all) ;;
  prefetch) LAYOUT=prefetch; TOOLS="tierfs,rclone,raw" ;;
  multijob) LAYOUT=multijob; TOOLS="tierfs" ;;
  *) echo "run.sh: unknown workload $WORKLOAD (all, prefetch, multijob)" >&2; exit 2 ;;
esac
case "$ONLY" in  # checked before anything starts (with --au, --only named shapes, above)
  ""|l2|loader|loaderrounds|rand|seq|seqrounds|stallrounds|warm) ;;
  *) echo "run.sh: --only: unknown workload $ONLY (known: l2, loader, loaderrounds, rand, seq, seqrounds, stallrounds, warm)" >&2
     exit 2 ;;
esac
if [[ $LAYOUT == quick ]]; then
  CAP="${CAP:-60}"; RAND_RT=3; RAW_RAND_N=300; RAW_SMALL_PAR_N=2000
else
  CAP="${CAP:-120}"; RAND_RT=15; RAW_RAND_N=1500; RAW_SMALL_PAR_N=4000
fi
# A DataLoader epoch is cut after this long (samples/s is then measured over the part that ran):
# two loader runs of two epochs each per tool would otherwise dominate the run on a slow peer.
LOADER_CAP="${LOADER_CAP:-60}"
# The GPU-stall view: simulated compute per batch, and PrefetchSampler's look-ahead (samples)
STALL_COMPUTE_MS="${STALL_COMPUTE_MS:-20}"
STALL_AHEAD="${STALL_AHEAD:-1024}"
STALL_SESSIONS="${STALL_SESSIONS:-plain sampler prefetched}"  # group G's tierfs sessions
TIERFS="${TIERFS:-$ROOT/build/daemon/tierfs}"
TIERFS_L1="${TIERFS_L1:-1GiB}"
TIERFS_L2="${TIERFS_L2:-16GiB}"
# Metadata kept 10 minutes: like the peers' defaults (s3fs stat cache 15 min, rclone dir cache 5 min),
# it never expires within one workload.
TIERFS_OPTS="${TIERFS_OPTS:---metadata-ttl 10m}"
BUCKET=bench

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="${OUT:-$BENCH/out/$STAMP}"
WORK="$BENCH/out/work"
LAYOUT_ID="$(cd "$BENCH" && $PY seed.py id "$LAYOUT")"   # data dirs are cached per layout
ORIGIN_DATA="$BENCH/out/origin-$LAYOUT_ID"
LOCAL_DATA="$BENCH/out/local-$LAYOUT_ID"
mkdir -p "$OUT/raw" "$WORK"
LOG="$OUT/run.log"

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$LOG" >&2; }
die() { log "FATAL: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root (drop_caches and mounts need it)"
for c in fio curl fusermount3 gcc pkg-config getfattr setfattr timeout; do
  command -v "$c" >/dev/null || die "$c not found (scripts/install-deps.sh --bench)"
done
$PY -c 'import torch, boto3, matplotlib' 2>/dev/null || die "$PY lacks torch/boto3/matplotlib"

# ---------------------------------------------------------------------------------------------
# cleanup: unmount what we mounted (by mountpoint), stop what we started (by PID)
MOUNTED=()        # mountpoints
PIDS=()           # daemons + proxy
S3RVER_STARTED=""
# A process spinning on one core while the origin is measured (raw_seqpar spin, raw_small's
# 128-spin): what the origin gives a client that takes CPU of its own on this machine. At most
# CAP seconds; spin_stop (also run by cleanup) ends it.
SPIN_PID=""
spin_start() {
  timeout "$CAP" bash -c 'while :; do :; done' &
  SPIN_PID=$!
}
spin_stop() {
  [[ -n $SPIN_PID ]] || return 0
  kill "$SPIN_PID" 2>/dev/null
  wait "$SPIN_PID" 2>/dev/null
  SPIN_PID=""
}

cleanup() {
  local m p
  spin_stop
  for m in "${MOUNTED[@]}"; do
    if is_mounted "$m"; then
      fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
    fi
  done
  for p in "${PIDS[@]}"; do
    pid_alive "$p" && kill "$p" 2>/dev/null
  done
  sleep 0.5
  for p in "${PIDS[@]}"; do
    pid_alive "$p" && kill -KILL "$p" 2>/dev/null
  done
  if [[ -n $S3RVER_STARTED ]]; then
    "$ROOT/scripts/s3rver.sh" stop "$ORIGIN_DATA" >/dev/null 2>&1
  fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.4f", b-a}'; }
has_tool() { [[ ",$TOOLS," == *",$1,"* ]]; }

# A status record for a workload that produced no tool output (timeout, error, skipped).
status_json() { # FILE STATUS MESSAGE [SECONDS]
  printf '{"status": "%s", "message": "%s", "seconds": %s}\n' "$2" "${3//\"/\'}" "${4:-null}" >"$1"
}

# ---------------------------------------------------------------------------------------------
# origin: s3rver (scripts/s3rver.sh) on a cached, seeded data dir, and the delay proxy in front
log "layout=$LAYOUT tools=$TOOLS delay=${DELAY_MS}ms cap=${CAP}s out=$OUT"
"$ROOT/scripts/s3rver.sh" install >>"$LOG" 2>&1 || die "scripts/s3rver.sh install failed (see $LOG)"

log "local copy: $LOCAL_DATA"
$PY "$BENCH/seed.py" local "$LAYOUT" "$LOCAL_DATA" 2>&1 | tee -a "$LOG" >&2
[[ -f $LOCAL_DATA/.complete ]] || die "writing the local copy failed"

S3PORT="$(free_port)"
"$ROOT/scripts/s3rver.sh" start "$ORIGIN_DATA" "$S3PORT" "$BUCKET" >>"$LOG" 2>&1 || die "s3rver did not start (see $LOG)"
S3RVER_STARTED=1
log "s3rver on 127.0.0.1:$S3PORT, data $ORIGIN_DATA"
timeout 1800 $PY "$BENCH/seed.py" origin "$LAYOUT" "$LOCAL_DATA" "http://127.0.0.1:$S3PORT" "$BUCKET" \
  2>&1 | tee -a "$LOG" >&2
[[ ${PIPESTATUS[0]} == 0 ]] || die "seeding the origin failed"
sync

PROXY_PID=""
[[ $WORKLOAD == multijob ]] && PROXY_COUNT_FILE="$WORK/origin-counts.json"
if [[ $DELAY_MS != 0 ]]; then
  rm -f "$WORK/proxy.port"
  $PY "$BENCH/delay_proxy.py" --upstream-port "$S3PORT" --delay-ms "$DELAY_MS" \
    --port-file "$WORK/proxy.port" ${PROXY_COUNT_FILE:+--count-file "$PROXY_COUNT_FILE"} >>"$LOG" 2>&1 &
  PIDS+=($!)
  PROXY_PID=$!
  for _ in $(seq 50); do [[ -s $WORK/proxy.port ]] && break; sleep 0.1; done
  [[ -s $WORK/proxy.port ]] || die "delay proxy did not start"
  PORT="$(cat "$WORK/proxy.port")"
else
  PORT="$S3PORT"
fi
# ORIGIN_NICE: every thread of the origin and of the proxy (each thread has its own nice value).
origin_nice() {
  local p t
  [[ ${ORIGIN_NICE:-0} == 0 ]] && return 0
  for p in "$(cat "$ORIGIN_DATA/s3rver.pid" 2>/dev/null)" "$PROXY_PID"; do
    [[ -n $p && -d /proc/$p ]] || continue
    for t in /proc/"$p"/task/*; do renice -n "$ORIGIN_NICE" -p "${t##*/}" >/dev/null 2>&1; done
  done
  log "origin and proxy threads at nice $ORIGIN_NICE"
}
origin_nice
ENDPOINT="http://127.0.0.1:$PORT"
log "origin endpoint for the tools: $ENDPOINT (${DELAY_MS} ms each way)"

# Dataset facts for the workloads
read -r BIG_SIZE N_SMALL N_TINY < <(cd "$BENCH" && $PY -c "
import seed
g = {n: (d, f, s) for n, d, f, s in seed.LAYOUTS['$LAYOUT']}
z = (0, 0, 0)
print(g.get('big', z)[2], max(g.get('small', z)[0],1)*g.get('small', z)[1], max(g.get('tiny', z)[0],1)*g.get('tiny', z)[1])")
NULLFS_LAYOUT="$(cd "$BENCH" && $PY seed.py layout "$LAYOUT")"
BIG0=big/f00000.bin
BIG1=big/f00001.bin

# meta.json: machine, date, versions, parameters
$PY - "$OUT/meta.json" <<EOF
import json, os, platform, subprocess, sys, datetime
def sh(c):
    try: return subprocess.run(c, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception: return ""
cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
mem = int(sh("awk '/MemTotal/{print \$2}' /proc/meminfo") or 0) // 1024
meta = {
  "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
  "host": platform.node(), "kernel": platform.release(), "cpu": cpu, "cores": os.cpu_count(),
  "mem_mib": mem, "layout": "$LAYOUT", "stall_only": bool("$STALL_ONLY"),
  "stall": {"compute_ms": float("$STALL_COMPUTE_MS"), "ahead": int("$STALL_AHEAD")}, "delay_ms": float("$DELAY_MS"), "origin_nice": int("${ORIGIN_NICE:-0}"), "cap_s": float("$CAP"), "loader_cap_s": float("$LOADER_CAP"),
  "rand_runtime_s": $RAND_RT, "tools": "$TOOLS".split(","),
  "dataset": {"big_size": $BIG_SIZE, "small_files": $N_SMALL, "tiny_files": $N_TINY},
  "versions": {
    "fio": sh("fio --version"), "s3fs": sh("s3fs --version 2>&1 | head -1"),
    "rclone": sh("rclone version 2>/dev/null | head -1"), "libfuse": sh("pkg-config --modversion fuse3"),
    "torch": sh("$PY -c 'import torch; print(torch.__version__)'"),
    "tierfs": sh("git -C '$ROOT' rev-parse --short HEAD"),
  },
  "tierfs_opts": {"l1": "$TIERFS_L1", "l2": "$TIERFS_L2", "extra": "${TIERFS_OPTS:-}"},
}
json.dump(meta, open(sys.argv[1], "w"), indent=1)
EOF

# ---------------------------------------------------------------------------------------------
# mounting
MNT=""; DPID=""; CACHE=""; RSS_MAX_KB=0; SESSION=""

build_nullfs() {
  local src="$BENCH/nullfs.c" bin="$WORK/nullfs"
  if [[ ! -x $bin || $src -nt $bin ]]; then
    gcc -O2 -Wall -o "$bin" "$src" $(pkg-config --cflags --libs fuse3 libcurl) -lpthread >>"$LOG" 2>&1 || return 1
  fi
}

tool_available() {
  case "$1" in
    tierfs) [[ -x $TIERFS ]] ;;
    s3fs) command -v s3fs >/dev/null ;;
    rclone) command -v rclone >/dev/null ;;
    nullfs) build_nullfs ;;
    local|raw) true ;;
  esac
}

wait_mounted() { # MNT PID -> 0 when mounted
  local i
  for i in $(seq 300); do
    if is_mounted "$1"; then return 0; fi
    pid_alive "$2" || return 1
    sleep 0.1
  done
  return 1
}

write_rclone_conf() {
  cat >"$WORK/rclone.conf" <<EOF
[origin]
type = s3
provider = Other
env_auth = false
access_key_id = S3RVER
secret_access_key = S3RVER
endpoint = $ENDPOINT
region = us-east-1
force_path_style = true
EOF
}

mount_tool() { # TOOL SESSION -> sets MNT DPID
  local tool="$1"; SESSION="$2"
  DPID=""
  if [[ $tool == local ]]; then MNT="$LOCAL_DATA"; return 0; fi
  MNT="$WORK/mnt-$tool"
  CACHE="$WORK/cache-$tool"
  mkdir -p "$MNT"
  if is_mounted "$MNT"; then fusermount3 -u -z "$MNT"; fi
  # fresh, empty caches for every session (KEEP_CACHE=1: remount on the cache left before)
  [[ ${KEEP_CACHE:-} == 1 ]] || rm -rf "$CACHE"
  mkdir -p "$CACHE"
  local dlog="$OUT/raw/$tool/daemon-$SESSION.log"
  case "$tool" in
    tierfs)
      env AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER "$TIERFS" mount "s3://$BUCKET" "$MNT" \
        --endpoint "$ENDPOINT" --cache-dir "$CACHE" --l1-size "$TIERFS_L1" --l2-size "$TIERFS_L2" \
        ${TIERFS_OPTS:-} -f >"$dlog" 2>&1 &
      DPID=$! ;;
    s3fs)
      printf 'S3RVER:S3RVER\n' >"$WORK/s3fs.passwd"; chmod 600 "$WORK/s3fs.passwd"
      s3fs "$BUCKET" "$MNT" -f -o "ro,use_path_request_style,url=$ENDPOINT,passwd_file=$WORK/s3fs.passwd" \
        -o "use_cache=$CACHE,dbglevel=warn" ${S3FS_OPTS:-} >"$dlog" 2>&1 &
      DPID=$! ;;
    rclone)
      write_rclone_conf
      # rclone 1.60 fails when AWS_CA_BUNDLE names a file it does not need; unset the TLS overrides.
      env -u AWS_CA_BUNDLE -u CURL_CA_BUNDLE -u SSL_CERT_FILE -u SSL_CERT_DIR \
        rclone mount "origin:$BUCKET" "$MNT" --config "$WORK/rclone.conf" --read-only \
        --vfs-cache-mode full --cache-dir "$CACHE" --log-level NOTICE ${RCLONE_OPTS:-} >"$dlog" 2>&1 &
      DPID=$! ;;
    nullfs)
      "$WORK/nullfs" "$MNT" -f -o max_read=1048576 --layout "$NULLFS_LAYOUT" >"$dlog" 2>&1 &
      DPID=$! ;;
  esac
  PIDS+=("$DPID")
  MOUNTED+=("$MNT")
  if ! wait_mounted "$MNT" "$DPID"; then
    log "$tool: mount failed (see $dlog)"
    unmount_tool "$tool"
    return 1
  fi
  # Touch the root so the first workload does not pay for FUSE_INIT; then check the layout.
  local check="big"; [[ $LAYOUT == au ]] && check="${AU_SHAPES%%,*}"
  if ! timeout 60 ls "$MNT/$check" >/dev/null 2>&1; then
    log "$tool: mounted but $MNT/$check is not listable"
    unmount_tool "$tool"
    return 1
  fi
  return 0
}

record_rss() { # TOOL
  [[ -n $DPID ]] || return 0
  local kb cpu
  kb="$(awk '/VmHWM/{print $2}' "/proc/$DPID/status" 2>/dev/null)"
  [[ -n $kb ]] || return 0
  # The daemon's CPU time so far (user + system, fields 14 and 15 of /proc/PID/stat, in ticks).
  cpu="$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$DPID/stat" 2>/dev/null)"
  echo "{\"session\": \"$SESSION\", \"vmhwm_kb\": $kb, \"cpu_s\": ${cpu:-null}}" >>"$OUT/raw/$1/rss.jsonl"
}

unmount_tool() { # TOOL
  local tool="$1"
  [[ $tool == local ]] && return 0
  record_rss "$tool"
  if [[ $tool == tierfs ]]; then
    timeout 10 getfattr --only-values -n user.tierfs.stats "$MNT" >"$OUT/raw/tierfs/stats-$SESSION.txt" 2>/dev/null
  fi
  if is_mounted "$MNT"; then
    timeout 30 fusermount3 -u "$MNT" 2>>"$LOG" || timeout 10 fusermount3 -u -z "$MNT" 2>>"$LOG"
  fi
  if [[ -n $DPID ]]; then
    if ! wait_pid_exit "$DPID" 10; then
      log "$tool: daemon $DPID still running 10 s after unmount, SIGTERM"
      kill "$DPID" 2>/dev/null; sleep 2; kill -KILL "$DPID" 2>/dev/null
    fi
    wait "$DPID" 2>/dev/null
  fi
  [[ ${KEEP_CACHE:-} == 1 ]] || rm -rf "$CACHE"
  DPID=""
}

# ---------------------------------------------------------------------------------------------
# workloads

# fio in a hard timeout. The job is also capped by --runtime, so a slow tool yields a partial
# (lower-bound) result rather than nothing.
run_fio() { # TOOL NAME -- fio args...
  local tool="$1" name="$2"; shift 3
  local out="$OUT/raw/$tool/$name.json" t0 t1 rc
  t0="$(now)"
  timeout -k 10 $((CAP + 60)) fio --output-format=json --output="$out.tmp" \
    --readonly --ioengine=psync --direct=0 --invalidate=1 --percentile_list=50:99 "$@" \
    >>"$LOG" 2>&1
  rc=$?
  t1="$(now)"
  if [[ $rc == 0 ]] && $PY -c "import json,sys; json.load(open(sys.argv[1]))" "$out.tmp" 2>/dev/null; then
    mv "$out.tmp" "$out"
    log "$tool: $name done in $(elapsed "$t0" "$t1") s"
  else
    rm -f "$out.tmp"
    local st=error; [[ $rc == 124 || $rc == 137 ]] && st=timeout
    status_json "$out" "$st" "fio exit $rc" "$(elapsed "$t0" "$t1")"
    log "$tool: $name $st (fio exit $rc)"
  fi
}

fio_seq() { # TOOL NAME FILE... (one job per file, 1 MiB blocks; with the CPU it cost)
  local tool="$1" name="$2"; shift 2
  local args=(--rw=read --bs=1M --runtime="$CAP" --group_reporting)
  local f
  for f in "$@"; do args+=(--name="${f##*/}" --filename="$MNT/$f"); done
  cpu_snap 0
  run_fio "$tool" "$name" -- "${args[@]}"
  cpu_snap 1
  cpu_attach "$OUT/raw/$tool/$name.json"
}

fio_rand() { # TOOL NAME BS FILE (4 jobs, time based)
  local tool="$1" name="$2" bs="$3" f="$4"
  run_fio "$tool" "$name" -- --name="$name" --filename="$MNT/$f" --rw=randread --bs="$bs" \
    --numjobs=4 --time_based --runtime="$RAND_RT" --group_reporting
}

run_find() { # TOOL NAME: stat every file under tiny/
  local tool="$1" name="$2" out="$OUT/raw/$1/$2.json" t0 t1 rc n
  t0="$(now)"
  timeout -k 5 "$CAP" find "$MNT/tiny" -type f -printf '%s\n' >"$WORK/find.out" 2>>"$LOG"
  rc=$?
  t1="$(now)"
  n="$(wc -l <"$WORK/find.out")"
  local st=ok
  if [[ $rc == 124 || $rc == 137 ]]; then st=timeout; elif [[ $n != "$N_TINY" ]]; then st=error; fi
  printf '{"status": "%s", "seconds": %s, "files": %s, "expected": %s}\n' \
    "$st" "$(elapsed "$t0" "$t1")" "$n" "$N_TINY" >"$out"
  log "$tool: $name $st: $n files in $(elapsed "$t0" "$t1") s"
}

# NAME=PID words for bench/cpustat.py: the origin (s3rver), the delay proxy and the mounted daemon
# (a missing one is counted as 0)
cpu_pid_args() {
  echo "origin=$(cat "$ORIGIN_DATA/s3rver.pid" 2>/dev/null) proxy=$PROXY_PID daemon=$DPID"
}

# cpu_snap 0|1: a CPU snapshot (bench/cpustat.py) of the machine and those processes, before (0)
# and after (1) a measurement; cpu_attach FILE adds the CPU between the two to the result FILE
# (the report's CPU rows).
cpu_snap() {
  # shellcheck disable=SC2046  # NAME=PID words
  $PY "$BENCH/cpustat.py" snap $(cpu_pid_args) >"$WORK/cpu$1.json"
}
cpu_attach() {
  $PY "$BENCH/cpustat.py" attach "$1" "$WORK/cpu0.json" "$WORK/cpu1.json" || log "no CPU figures for $1"
}

run_loader() { # TOOL NAME [loader.py args...]
  local tool="$1" name="$2" out="$OUT/raw/$1/$2.json" rc t0 t1 c cpu=()
  shift 2
  for c in $(cpu_pid_args); do cpu+=(--cpu "$c"); done
  t0="$(now)"
  timeout -k 10 $((2 * LOADER_CAP + 180)) $PY "$BENCH/loader.py" "$MNT/small" --epochs 2 --workers 4 \
    --batch 64 --cap "$LOADER_CAP" --expect "$N_SMALL" --out "$out" "${cpu[@]}" "$@" 2>&1 | grep -v Warning | tee -a "$LOG" >&2
  rc=${PIPESTATUS[0]}
  t1="$(now)"
  if [[ ! -s $out ]]; then
    local st=error; [[ $rc == 124 || $rc == 137 ]] && st=timeout
    status_json "$out" "$st" "loader exit $rc" "$(elapsed "$t0" "$t1")"
  fi
  log "$tool: $name finished (exit $rc) in $(elapsed "$t0" "$t1") s"
}

# "E1 / E2" samples/s of a loader.py result
loader_rates() { # FILE
  $PY -c 'import json,sys; print(" / ".join("%.0f" % e["samples_per_s"] for e in json.load(open(sys.argv[1]))["epochs"]))' "$1" 2>/dev/null
}

# Groups E and E', each on a fresh mount with empty caches: the DataLoader's two epochs, then, for
# tierfs, the same with tierfs.torch.PrefetchSampler, which tells tierfs the epoch's order; a
# "loader:" line in run.log for each.
run_loader_groups() { # TOOL
  local t="$1"
  drop_caches
  if mount_tool "$t" loader; then
    run_loader "$t" loader
    unmount_tool "$t"
    log "loader: $t epoch 1 / 2 $(loader_rates "$OUT/raw/$t/loader.json") samples/s"
  fi
  [[ $t == tierfs ]] || return 0
  drop_caches
  if mount_tool "$t" loader-sampler; then
    run_loader "$t" loader-sampler --sampler prefetch --ahead "$STALL_AHEAD"
    unmount_tool "$t"
    log "loader: $t with PrefetchSampler epoch 1 / 2 $(loader_rates "$OUT/raw/$t/loader-sampler.json") samples/s"
  fi
}

# The GPU-stall view of the loader: 20 ms of "compute" per batch, 2 epochs (loader.py --compute-ms)
run_stall_loader() { # TOOL NAME DIR [loader.py args...]
  local tool="$1" name="$2" dir="$3" out="$OUT/raw/$1/$2.json" rc t0 t1
  shift 3
  t0="$(now)"
  timeout -k 10 $((2 * LOADER_CAP + 180)) $PY "$BENCH/loader.py" "$dir" --epochs 2 --workers 4 \
    --batch 64 --cap "$LOADER_CAP" --expect "$N_SMALL" --compute-ms "$STALL_COMPUTE_MS" \
    --out "$out" "$@" 2>&1 | grep -v Warning | tee -a "$LOG" >&2
  rc=${PIPESTATUS[0]}
  t1="$(now)"
  if [[ ! -s $out ]]; then
    local st=error; [[ $rc == 124 || $rc == 137 ]] && st=timeout
    status_json "$out" "$st" "loader exit $rc" "$(elapsed "$t0" "$t1")"
  fi
  log "$tool: $name finished (exit $rc) in $(elapsed "$t0" "$t1") s"
}

# copy-first: rclone copy the directory to local disk (32 transfers), then the same epochs from
# there. The copy lands in the page cache, as it would right before a training run.
run_copy_first() {
  local out="$OUT/raw/rclone/stall-copyfirst-copy.json" dst="$WORK/copy-first" t0 t1 rc n
  write_rclone_conf
  rm -rf "$dst"; mkdir -p "$dst"
  drop_caches
  t0="$(now)"
  env -u AWS_CA_BUNDLE -u CURL_CA_BUNDLE -u SSL_CERT_FILE -u SSL_CERT_DIR \
    timeout -k 10 "$((CAP * 3))" rclone copy "origin:$BUCKET/small" "$dst/small" \
    --config "$WORK/rclone.conf" --transfers 32 --checkers 32 --log-level ERROR >>"$LOG" 2>&1
  rc=$?
  t1="$(now)"
  n="$(find "$dst/small" -type f 2>/dev/null | wc -l)"
  local st=ok
  if [[ $rc == 124 || $rc == 137 ]]; then st=timeout; elif [[ $rc != 0 || $n != "$N_SMALL" ]]; then st=error; fi
  printf '{"status": "%s", "how": "rclone copy --transfers 32", "seconds": %s, "files": %s}\n' \
    "$st" "$(elapsed "$t0" "$t1")" "$n" >"$out"
  log "copy-first: rclone copy $st: $n files in $(elapsed "$t0" "$t1") s"
  [[ $st == ok ]] && run_stall_loader rclone stall-copyfirst "$dst/small"
  rm -rf "$dst"
}

# The stall view's "after a prefetch" session: a fresh mount, small/ prefetched into L2, the page
# cache dropped, then the two epochs (raw/TOOL/NAME.json; the prefetch's record in
# raw/TOOL/stall-prefetch[-round-N].json, named after NAME).
stall_prefetched_session() { # TOOL NAME
  local t="$1" name="$2"
  drop_caches
  mount_tool "$t" "$name" || return 0
  prefetch "$t"
  mv "$OUT/raw/$t/prefetch.json" "$OUT/raw/$t/${name/prefetched/prefetch}.json"
  drop_caches
  run_stall_loader "$t" "$name" "$MNT/small"
  unmount_tool "$t"
}

# G: the GPU-stall view (each on a fresh mount, empty caches)
run_stall() { # TOOL
  local t="$1"
  case "$t" in tierfs|s3fs|rclone|local) ;; *) return 0 ;; esac
  # tierfs's sessions: those STALL_SESSIONS names (the peers always run the plain one)
  session() { [[ $t != tierfs || " $STALL_SESSIONS " == *" $1 "* ]]; }
  drop_caches
  if session plain && mount_tool "$t" stall; then
    run_stall_loader "$t" stall-plain "$MNT/small"
    unmount_tool "$t"
  fi
  if [[ $t == tierfs ]] && session sampler; then
    drop_caches
    if mount_tool "$t" stall-sampler; then
      run_stall_loader "$t" stall-sampler "$MNT/small" --sampler prefetch --ahead "$STALL_AHEAD"
      timeout 10 getfattr --absolute-names --only-values -n user.tierfs.prefetch_list "$MNT" \
        >"$OUT/raw/tierfs/stall-sampler-list.txt" 2>&1
      unmount_tool "$t"
    fi
  fi
  [[ $t == tierfs ]] && session prefetched && stall_prefetched_session "$t" stall-prefetched
  [[ $t == rclone ]] && run_copy_first
  return 0
}

# Read a directory once, 16 files at a time (the peers' way to prefetch, and tierfs' fallback).
read_dir_parallel() { # DIR
  find "$1" -type f -print0 | timeout -k 5 "$CAP" xargs -0 -P 16 -n 32 cat >/dev/null
}

prefetch() { # TOOL -> writes prefetch.json
  local tool="$1" out="$OUT/raw/$1/prefetch.json" t0 t1 how rc st=ok v=""
  t0="$(now)"
  local err=""
  if [[ $tool == tierfs ]] && err="$(setfattr -n user.tierfs.prefetch -v l2 "$MNT/small" 2>&1)"; then
    how="xattr user.tierfs.prefetch=l2"
    st=timeout
    local deadline=$((SECONDS + CAP))
    while ((SECONDS < deadline)); do
      v="$(timeout 10 getfattr --only-values -n user.tierfs.prefetch "$MNT/small" 2>/dev/null)"
      if [[ $v =~ (^|[^a-z])(done|complete|completed|idle)([^a-z]|$) || $v =~ 100(\.0+)?% ]]; then
        st=ok; break
      fi
      if [[ $v =~ (fail|error) ]]; then st=error; break; fi
      sleep 0.2
    done
  else
    how="read once (cat, 16 parallel)"
    if [[ $tool == tierfs ]]; then
      echo "$err" >>"$LOG"
      how="prefetch via read: setxattr user.tierfs.prefetch failed (${err##*: })"
    fi
    read_dir_parallel "$MNT/small"
    rc=$?
    [[ $rc == 0 ]] || st=timeout
  fi
  t1="$(now)"
  printf '{"status": "%s", "how": "%s", "seconds": %s, "last_value": "%s"}\n' \
    "$st" "$how" "$(elapsed "$t0" "$t1")" "${v//[$'\n\"']/ }" >"$out"
  log "$tool: prefetch ($how) $st in $(elapsed "$t0" "$t1") s"
}

# ---------------------------------------------------------------------------------------------
# the raw origin: curl straight at the (delayed) endpoint, no file system
# A do-nothing FUSE file system (nullfs, serving the layout from memory, as mount_tool mounts it)
# on a side mount, $WORK/nullmnt, for the FUSE ceilings (raw_seqpar, raw_loaderpar; with BACKING,
# nullfs --backing: the files' bytes come from that directory's files, each read spliced from the
# file it opened, for stall_round's fuselocal): sets NULL_PID, registered in MOUNTED and PIDS;
# non-zero (logged, naming WHAT) when it does not mount.
NULL_PID=""
side_nullfs_mount() { # WHAT [BACKING | --origin URL [--ranges N] [--flash PREFIX]]
  local nm="$WORK/nullmnt" backing=()
  if [[ ${2:-} == --origin ]]; then backing=("${@:2}"); elif [[ -n ${2:-} ]]; then backing=(--backing "$2"); fi
  NULL_PID=""
  build_nullfs || { log "nullfs does not build, no $1"; return 1; }
  mkdir -p "$nm"
  "$WORK/nullfs" "$nm" -f -o max_read=1048576 --layout "$NULLFS_LAYOUT" "${backing[@]}" >>"$LOG" 2>&1 &
  NULL_PID=$!
  PIDS+=("$NULL_PID")
  MOUNTED+=("$nm")
  if ! wait_mounted "$nm" "$NULL_PID" || ! timeout 60 ls "$nm/big" >/dev/null 2>&1; then
    log "nullfs side mount failed, no $1"
    side_nullfs_unmount
    return 1
  fi
}
side_nullfs_unmount() { # unmounts the side mount and waits for its process (by its PID)
  [[ -n $NULL_PID ]] || return 0
  local nm="$WORK/nullmnt"
  if is_mounted "$nm"; then
    timeout 30 fusermount3 -u "$nm" 2>>"$LOG" || timeout 10 fusermount3 -u -z "$nm" 2>>"$LOG"
  fi
  wait_pid_exit "$NULL_PID" 10 || { kill "$NULL_PID" 2>/dev/null; wait "$NULL_PID" 2>/dev/null; }
  NULL_PID=""
}

# The coupled ceiling of a cold sequential read (raw/raw/NAME.json, with the CPU it cost): BIG0 read
# (dd, 1 MiB) through nullfs --origin, a FUSE file system whose first open fetches the whole file
# with the GETs raw_seqpar times (16 ranges, 8 at a time) and answers each read as soon as its bytes
# have arrived; with "flash" (nullfs --flash) each MiB is also written to one file on the cache's
# filesystem with O_DIRECT once it has arrived, by a thread of its own. The least a FUSE cache of
# this origin does, in one process, each byte passing from the GET to the reader as it would in a
# cache. RANGES (default 16, the GETs of raw_seqpar): 128 is tierfs's request shape for BIG0 (8 MiB
# runs, 8 in flight), with no window: the GETs never wait for the reader.
raw_fetchfs() { # NAME [flash|-] [RANGES]
  local d="$OUT/raw/raw" nm="$WORK/nullmnt" t0 t1 rc extra=(--ranges "${3:-16}")
  mkdir -p "$d"
  [[ ${2:-} == flash ]] && extra+=(--flash "$WORK/l2probe")
  side_nullfs_mount "$1" --origin "$ENDPOINT/$BUCKET" "${extra[@]}" || return 0
  drop_caches
  cpu_snap 0
  t0="$(now)"
  timeout "$CAP" dd if="$nm/$BIG0" of=/dev/null bs=1M status=none 2>>"$LOG"; rc=$?
  t1="$(now)"
  cpu_snap 1
  side_nullfs_unmount
  rm -f "$WORK"/l2probe.*
  printf '{"status": "%s", "seconds": %s, "bytes": %s, "streams": 8, "ranges": %s, "with": "fetchfs%s"}\n' \
    "$([[ $rc == 0 ]] && echo ok || echo error)" "$(elapsed "$t0" "$t1")" "$BIG_SIZE" "${3:-16}" \
    "$([[ ${2:-} == flash ]] && echo " flash")" >"$d/$1.json"
  cpu_attach "$d/$1.json"
}

# The origin's parallel ranged throughput: BIG0 in 16 ranges, 8 GETs at a time, page cache dropped
# (raw/raw/NAME.json, with the CPU it cost). With "spin", while a process spins on one core: what
# the origin gives a client that takes CPU of its own on this machine, as a file system does
# (the sequential counterpart of raw_small's small-par128-spin).
# With "fuse", while the same 1 GiB is read through nullfs (from its memory, by dd with 1 MiB
# reads, on a side mount): the GETs' work and a FUSE file system's delivery of the same bytes
# at once, the least any FUSE cache of the origin must do; "fusel2" adds a 1 GiB O_DIRECT write
# of one file on the cache's filesystem (dd, 1 MiB), the least a cache that keeps what it read
# adds. "seconds" is until all of them are done (the GETs alone: "get_seconds").
raw_seqpar() { # NAME [spin|fuse|fusel2]
  local d="$OUT/raw/raw" cfg="$WORK/curl-ranges.cfg" part=$((BIG_SIZE / 16)) i t0 t1 rc
  local nm="$WORK/nullmnt" side=() tget
  mkdir -p "$d"
  if [[ ${2:-} == fuse* ]]; then side_nullfs_mount "$1" || return 0; fi
  : >"$cfg"
  for i in $(seq 0 15); do
    ((i)) && echo next >>"$cfg"
    printf 'url = "%s"\nrange = "%d-%d"\noutput = "/dev/null"\n' "$ENDPOINT/$BUCKET/$BIG0" \
      $((i * part)) $((i * part + part - 1)) >>"$cfg"
  done
  drop_caches
  [[ ${2:-} == spin ]] && spin_start
  cpu_snap 0
  t0="$(now)"
  if [[ -n $NULL_PID ]]; then
    timeout "$CAP" dd if="$nm/$BIG0" of=/dev/null bs=1M status=none 2>>"$LOG" &
    side+=($!)
  fi
  if [[ ${2:-} == fusel2 ]]; then
    timeout "$CAP" dd if=/dev/zero of="$WORK/l2probe" bs=1M count=$((BIG_SIZE >> 20)) \
      oflag=direct status=none 2>>"$LOG" &
    side+=($!)
  fi
  timeout "$CAP" curl -sSf --no-progress-meter --parallel --parallel-max 8 -K "$cfg" 2>>"$LOG"; rc=$?
  tget="$(now)"
  for i in "${side[@]}"; do wait "$i" || rc=1; done
  t1="$(now)"
  cpu_snap 1
  spin_stop
  rm -f "$WORK/l2probe"
  side_nullfs_unmount
  printf '{"status": "%s", "seconds": %s, "get_seconds": %s, "bytes": %s, "streams": 8, "with": "%s"}\n' \
    "$([[ $rc == 0 ]] && echo ok || echo error)" "$(elapsed "$t0" "$t1")" "$(elapsed "$t0" "$tget")" \
    "$BIG_SIZE" "${2:-}" >"$d/$1.json"
  cpu_attach "$d/$1.json"
}

# Cold sequential reads in interleaved rounds (SEQ_ROUNDS, default 3; --only seqrounds, and at the
# end of a full run): the origin's rate drifts by a quarter from minute to minute here, so one cold
# read per tool minutes apart compares the minutes as much as the tools. Each round runs, back to
# back and in an order that rotates from round to round, the 8 ranged GETs (raw), alone, next
# to a process spinning on one core, and with a FUSE delivery of the same bytes (and a flash
# write) beside them (raw_seqpar fuse, fusel2), the same work coupled in one FUSE process (raw_fetchfs:
# to the reader; to the reader and to flash; that with tierfs's 8 MiB GETs), and for each of tierfs,
# s3fs and rclone a cold 1 GiB read of BIG0, then both big files at once (two streams), each on a
# fresh mount with empty caches (raw/<tool>/seq{1,2}-round-N.json,
# raw/raw/seqpar{,-spin,-fuse,-fusel2,-fetchfs,-fetchfsl2,-fetchfs8m}-round-N.json); the report
# gives every round and the medians of the per-round ratios.
# rotate_rounds WHAT N FUNC TOOL...: FUNC TOOL ROUND for every TOOL in each round 1..N, in an
# order that rotates from round to round (run_seq_rounds, run_loader_rounds).
rotate_rounds() {
  local what="$1" rounds="$2" fn="$3" i k
  shift 3
  local order=("$@")
  ((${#order[@]})) || return 0
  for i in $(seq "$rounds"); do
    for k in $(seq 0 $((${#order[@]} - 1))); do
      "$fn" "${order[$(((k + i - 1) % ${#order[@]}))]}" "$i"
    done
    log "$what rounds: round $i of $rounds done"
  done
}

seq_round() { # TOOL ROUND
  local t="$1" i="$2"
  mkdir -p "$OUT/raw/$t"
  if [[ $t == raw ]]; then
    raw_seqpar "seqpar-round-$i"
    raw_seqpar "seqpar-spin-round-$i" spin
    raw_seqpar "seqpar-fuse-round-$i" fuse
    raw_seqpar "seqpar-fusel2-round-$i" fusel2
    raw_fetchfs "seqpar-fetchfs-round-$i"
    raw_fetchfs "seqpar-fetchfsl2-round-$i" flash
    raw_fetchfs "seqpar-fetchfs8m-round-$i" flash 128
    return 0
  fi
  drop_caches
  if mount_tool "$t" "seq-round-$i"; then
    fio_seq "$t" "seq1-round-$i" "$BIG0"
    unmount_tool "$t"
  fi
  drop_caches
  if mount_tool "$t" "seq2-round-$i"; then
    fio_seq "$t" "seq2-round-$i" "$BIG0" "$BIG1"
    unmount_tool "$t"
  fi
}

run_seq_rounds() {
  local t order=()
  for t in raw tierfs s3fs rclone; do
    has_tool "$t" && { [[ $t == raw ]] || tool_available "$t"; } && order+=("$t")
  done
  rotate_rounds seq "${SEQ_ROUNDS:-3}" seq_round "${order[@]}"
}

run_raw() {
  local d="$OUT/raw/raw" t0 t1
  mkdir -p "$d"
  local url0="$ENDPOINT/$BUCKET/$BIG0" url1="$ENDPOINT/$BUCKET/$BIG1"
  drop_caches
  # 1 stream: one GET of the whole object
  t0="$(now)"
  timeout "$CAP" curl -sf -o /dev/null "$url0"; local rc=$?
  t1="$(now)"
  printf '{"status": "%s", "seconds": %s, "bytes": %s}\n' "$([[ $rc == 0 ]] && echo ok || echo error)" \
    "$(elapsed "$t0" "$t1")" "$BIG_SIZE" >"$d/seq1.json"
  # 2 streams: both objects at once
  drop_caches
  t0="$(now)"
  timeout "$CAP" curl -sf -o /dev/null "$url1" & local p=$!
  timeout "$CAP" curl -sf -o /dev/null "$url0"; rc=$?
  wait $p || rc=1
  t1="$(now)"
  printf '{"status": "%s", "seconds": %s, "bytes": %s}\n' "$([[ $rc == 0 ]] && echo ok || echo error)" \
    "$(elapsed "$t0" "$t1")" $((2 * BIG_SIZE)) >"$d/seq2.json"
  raw_seqpar seqpar
  # random ranged GETs, 4 in flight (like fio's 4 jobs), per-request latency from curl
  local bs name cfg="$WORK/curl-ranges.cfg"
  for bs in 4096 131072; do
    name=rand4k; [[ $bs == 131072 ]] && name=rand128k
    $PY - "$url0" "$BIG_SIZE" "$bs" "$RAW_RAND_N" >"$cfg" <<'EOF'
import random, sys
url, size, bs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(7)
for i in range(n):
    off = r.randrange(0, size // bs) * bs
    if i:
        print("next")
    print('url = "%s"\nrange = "%d-%d"\noutput = "/dev/null"\nwrite-out = "%%{time_total}\\n"' % (url, off, off + bs - 1))
EOF
    drop_caches
    t0="$(now)"
    timeout "$CAP" curl -sSf --no-progress-meter --parallel --parallel-max 4 -K "$cfg" >"$WORK/curl-lat.txt" 2>>"$LOG"; rc=$?
    t1="$(now)"
    $PY "$BENCH/report.py" --latencies "$WORK/curl-lat.txt" "$(elapsed "$t0" "$t1")" "$rc" >"$d/$name.json"
  done
  raw_small
  log "raw: origin measured"
}

# The origin's rate for whole small objects (small/, shuffled, page cache dropped): 4 GETs in
# flight, like the DataLoader's 4 workers (small.json), and its ceiling with many in flight
# (small-par64.json, small-par128.json: RAW_SMALL_PAR_N objects each, curl --parallel-max 64 /
# 128; the report takes the better one as the origin's small-object ceiling), and that ceiling
# again while a process spins on one core (small-par128-spin.json): what the origin gives a
# client that shares this machine with work of its own, as a loader and a file system do.
raw_small() {
  local d="$OUT/raw/raw" cfg="$WORK/curl-small.cfg" t0 t1 rc run par n f
  mkdir -p "$d"
  (cd "$LOCAL_DATA" && find small -type f | sort) >"$WORK/small-keys.txt"
  for run in 4 64 128 128-spin; do
    par="${run%-spin}"
    n=2000; [[ $par != 4 ]] && n=$RAW_SMALL_PAR_N
    $PY - "$ENDPOINT/$BUCKET" "$WORK/small-keys.txt" "$n" "$par" >"$cfg" <<'EOF'
import random, sys
keys = [l.strip() for l in open(sys.argv[2]) if l.strip()]
random.Random(3 if sys.argv[4] == "4" else 3 + int(sys.argv[4])).shuffle(keys)
for i, k in enumerate(keys[:int(sys.argv[3])]):
    if i:
        print("next")
    print('url = "%s/%s"\noutput = "/dev/null"\nwrite-out = "%%{time_total}\\n"' % (sys.argv[1], k))
EOF
    drop_caches
    [[ $run == *-spin ]] && spin_start
    cpu_snap 0
    t0="$(now)"
    timeout "$CAP" curl -sSf --no-progress-meter --parallel --parallel-max "$par" -K "$cfg" \
      >"$WORK/curl-lat.txt" 2>>"$LOG"; rc=$?
    t1="$(now)"
    cpu_snap 1
    spin_stop
    f="$d/small.json"; [[ $run != 4 ]] && f="$d/small-par$run.json"
    $PY "$BENCH/report.py" --latencies "$WORK/curl-lat.txt" "$(elapsed "$t0" "$t1")" "$rc" >"$f"
    cpu_attach "$f"  # where the CPU went: the report's CPU-per-object rows
    log "raw: small objects, $run GETs in flight: $($PY -c 'import json,sys; print(round(json.load(open(sys.argv[1])).get("iops") or 0))' "$f") objects/s"
  done
}

# The ceilings of a cold DataLoader epoch over small/, the counterpart of raw_seqpar's for small
# objects (raw/raw/NAME.json, with the CPU it cost): all N_SMALL objects of small/, shuffled, with
# 128 GETs in flight (page cache dropped) -- alone; "fuse": while group E's DataLoader (loader.py:
# 4 workers, batch 64, shuffled, one epoch) reads the same files through nullfs (a side mount,
# from its memory): the origin's work, a FUSE file system's delivery and the loader's own work
# at once, the least any FUSE cache of this origin must do for that epoch; "fusel2" adds writing
# as many files of the same bytes on the cache's filesystem as L2 writes its blocks
# (bench/flash_writer.py: a file each, created, written with O_DIRECT, renamed), the least a
# cache that keeps what it fetched adds; "fuseseg" instead appends them to one segment file
# (flash_writer.py --segment), the least a log-structured cache adds. The GETs and the writer start when the loader's epoch
# starts (loader.py --start-file); "seconds" runs from then until all are done, "objects" is
# N_SMALL: objects/s is comparable with a tool's epoch-1 samples/s.
raw_loaderpar() { # NAME [fuse|fusel2|fuseseg]
  local d="$OUT/raw/raw" cfg="$WORK/curl-small-all.cfg" nm="$WORK/nullmnt" start="$WORK/loader-start"
  local probe="$WORK/l2probe-dir" t0 t1 rc=0 lpid="" wpid="" bytes
  mkdir -p "$d"
  if [[ ${2:-} == fuse* ]]; then side_nullfs_mount "$1" || return 0; fi
  (cd "$LOCAL_DATA" && find small -type f | sort) >"$WORK/small-keys.txt"
  bytes="$(cd "$LOCAL_DATA" && find small -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')"
  $PY - "$ENDPOINT/$BUCKET" "$WORK/small-keys.txt" >"$cfg" <<'EOF'
import random, sys
keys = [l.strip() for l in open(sys.argv[2]) if l.strip()]
random.Random(5).shuffle(keys)
for i, k in enumerate(keys):
    if i:
        print("next")
    print('url = "%s/%s"\noutput = "/dev/null"' % (sys.argv[1], k))
EOF
  rm -rf "$probe" "$start"
  drop_caches
  if [[ -n $NULL_PID ]]; then
    timeout -k 10 $((LOADER_CAP + 180)) $PY "$BENCH/loader.py" "$nm/small" --epochs 1 --workers 4 \
      --batch 64 --cap "$LOADER_CAP" --expect "$N_SMALL" --out "$d/$1-loader.json" \
      --start-file "$start" >>"$LOG" 2>&1 &
    lpid=$!
    for _ in $(seq 1200); do
      if [[ -s $start ]] || ! pid_alive "$lpid"; then break; fi
      sleep 0.05
    done
    [[ -s $start ]] || { log "raw: the loader on nullfs did not start its epoch, no $1"; rc=1; }
  fi
  cpu_snap 0
  t0="$(now)"
  [[ -s $start ]] && t0="$(cat "$start")"
  if [[ ${2:-} == fusel2 || ${2:-} == fuseseg ]]; then
    local seg=(); [[ $2 == fuseseg ]] && seg=(--segment)
    timeout "$CAP" $PY "$BENCH/flash_writer.py" "${seg[@]}" "$probe" "$N_SMALL" $((bytes / N_SMALL)) \
      2>>"$LOG" &
    wpid=$!
  fi
  timeout "$CAP" curl -sSf --no-progress-meter --parallel --parallel-max 128 -K "$cfg" 2>>"$LOG" || rc=1
  if [[ -n $wpid ]]; then wait "$wpid" || rc=1; fi
  t1="$(now)"
  if [[ -n $lpid ]]; then wait "$lpid" || rc=1; fi
  cpu_snap 1
  rm -rf "$probe" "$start"
  side_nullfs_unmount
  # until the last of them ended: the GETs (and writer) here, the loader by its own clock
  $PY - "$d/$1.json" "$t0" "$t1" "$rc" "$N_SMALL" "${2:-}" "$d/$1-loader.json" <<'EOF'
import json, os, sys
out, t0, t1, rc, n, with_, lj = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
r = {"status": "ok" if rc == 0 else "error", "get_seconds": t1 - t0, "objects": n, "with": with_}
end = t1
if with_:
    try:
        ep = json.load(open(lj))["epochs"][0]
        end = max(end, ep["end_unix"])
        r["loader_seconds"] = ep["seconds"]
        if ep.get("samples") != n or ep.get("capped"):
            r["status"] = "error"
    except (OSError, ValueError, KeyError, IndexError):
        r["status"] = "error"
r["seconds"] = end - t0
r["iops"] = n / r["seconds"] if r["seconds"] > 0 else None
json.dump(r, open(out, "w"))
EOF
  cpu_attach "$d/$1.json"
}

# Cold DataLoader epochs in interleaved rounds (--only loaderrounds, and at the end of a full run
# after group S; LOADER_ROUNDS, default 3):
# per round, back to back in an order that rotates, the small-object ceilings of raw_loaderpar
# (alone, with the FUSE delivery and the loader, and with the flash writes too: a file per object,
# or one segment file) and tierfs's cold epoch 1 of the same DataLoader on a fresh mount with
# empty caches (raw/raw/loaderpar{,-fuse,-fusel2,-fuseseg}-round-N.json,
# raw/tierfs/loader-round-N.json); the report
# (report.py --loader-rounds) compares them within each round.
loader_round() { # TOOL ROUND
  local t="$1" i="$2"
  mkdir -p "$OUT/raw/$t"
  if [[ $t == raw ]]; then
    raw_loaderpar "loaderpar-round-$i"
    raw_loaderpar "loaderpar-fuse-round-$i" fuse
    raw_loaderpar "loaderpar-fusel2-round-$i" fusel2
    raw_loaderpar "loaderpar-fuseseg-round-$i" fuseseg
    return 0
  fi
  drop_caches
  if mount_tool "$t" "loader-round-$i"; then
    run_loader "$t" "loader-round-$i" --epochs 1
    unmount_tool "$t"
  fi
}

run_loader_rounds() {
  local t order=()
  for t in raw tierfs; do has_tool "$t" && order+=("$t"); done
  rotate_rounds loader "${LOADER_ROUNDS:-3}" loader_round "${order[@]}"
}

# The GPU-stall view after a prefetch, in interleaved rounds (--only stallrounds, and at the end of
# a full run after group L; STALL_ROUNDS, default 5): per round, in an order that rotates, tierfs's
# "after a prefetch" session of group G (fresh mount, prefetch into L2, page cache dropped, two
# epochs: raw/tierfs/stall-prefetched-round-N.json), the same two epochs from local disk
# (raw/local/stall-plain-round-N.json) and, with nullfs among the tools, from local disk through a
# FUSE file system that only opens each local file and splices its reads (nullfs --backing: the
# least any FUSE file system serving files from local flash does; raw/fuselocal/...). A longest
# wait is one sample of each epoch's tail, and local disk's own moves 3-59 ms from run to run
# here: the report (report.py --stall-rounds) compares them within each round and takes the
# median of the per-round ratios.
stall_round() { # TOOL ROUND
  local t="$1" i="$2"
  mkdir -p "$OUT/raw/$t"
  if [[ $t == local ]]; then
    drop_caches
    run_stall_loader local "stall-plain-round-$i" "$LOCAL_DATA/small"
    return 0
  fi
  if [[ $t == fuselocal ]]; then
    side_nullfs_mount "stall-plain-round-$i of fuselocal" "$LOCAL_DATA" || return 0
    drop_caches
    run_stall_loader fuselocal "stall-plain-round-$i" "$WORK/nullmnt/small"
    side_nullfs_unmount
    return 0
  fi
  stall_prefetched_session "$t" "stall-prefetched-round-$i"
}

run_stall_rounds() {
  local t order=()
  for t in tierfs local; do has_tool "$t" && order+=("$t"); done
  has_tool nullfs && order+=(fuselocal)
  rotate_rounds stall "${STALL_ROUNDS:-5}" stall_round "${order[@]}"
}

# Group A on one mount: a cold read of the first big file, then after drop_caches the warm reads
# of it (sequential, random 4 KiB, random 128 KiB); with "next", the other big file cold in the
# same mount. Returns non-zero when the tool did not mount.
run_group_a() { # TOOL [next]
  local t="$1"
  drop_caches
  mount_tool "$t" seq1 || return 1
  fio_seq "$t" seq1-cold "$BIG0"
  drop_caches; fio_seq "$t" seq1-warm "$BIG0"
  drop_caches; fio_rand "$t" rand4k-warm 4k "$BIG0"
  drop_caches; fio_rand "$t" rand128k-warm 128k "$BIG0"
  if [[ ${2:-} == next ]]; then
    # the other 1 GiB file, cold, in the same mount: the daemon's memory is in use already
    drop_caches; fio_seq "$t" seq1-next "$BIG1"
  fi
  unmount_tool "$t"
  return 0
}

# ---------------------------------------------------------------------------------------------
run_tool() {
  local t="$1"
  mkdir -p "$OUT/raw/$t"
  if ! tool_available "$t"; then
    log "$t: not available, skipped"
    status_json "$OUT/raw/$t/skipped.json" skipped "not available on this machine"
    return
  fi
  log "==== $t ===="
  if [[ -n $STALL_ONLY ]]; then run_stall "$t"; return; fi
  if [[ $t == raw ]]; then run_raw; return; fi

  # A: sequential 1 stream cold, then warm; warm random reads on the file it has now cached
  run_group_a "$t" next
  # B: sequential 2 streams (one per 1 GiB file), cold then warm (not in --quick)
  [[ $LAYOUT == quick ]] || drop_caches
  if [[ $LAYOUT != quick ]] && mount_tool "$t" seq2; then
    fio_seq "$t" seq2-cold "$BIG0" "$BIG1"
    drop_caches; fio_seq "$t" seq2-warm "$BIG0" "$BIG1"
    unmount_tool "$t"
  fi
  # C: random reads on empty caches
  drop_caches
  if mount_tool "$t" rand-cold; then
    fio_rand "$t" rand4k-cold 4k "$BIG0"
    fio_rand "$t" rand128k-cold 128k "$BIG1"
    unmount_tool "$t"
  fi
  # D: find/stat over the tiny files, cold then warm
  drop_caches
  if mount_tool "$t" find; then
    run_find "$t" find-cold
    drop_caches; run_find "$t" find-warm
    unmount_tool "$t"
  fi
  # E: DataLoader, 2 epochs, from empty caches; E': the same with tierfs.torch.PrefetchSampler
  run_loader_groups "$t"
  # F: DataLoader after prefetching the directory into the tool's own cache
  drop_caches
  if mount_tool "$t" loader-prefetched; then
    prefetch "$t"
    drop_caches
    run_loader "$t" loader-prefetched
    unmount_tool "$t"
  fi
  # G: the GPU-stall view
  run_stall "$t"
}

# ---------------------------------------------------------------------------------------------
# The prefetch workload (--workload prefetch): deep prefetch against copying.
#  - small: `tierfs prefetch --tier l2 --wait` of small/ (4,000 x 128 KiB) vs
#    `rclone copy --transfers 32` of small/ to local disk;
#  - large: `tierfs prefetch --tier l2 --wait` of big/ (2 x 256 MiB) vs the origin's 8-way
#    ranged GET throughput (curl, one object in 16 ranges, 8 at a time), compared as MB/s;
#  - reader: bench/pf_reader.py opens and reads whole 128 KiB files one after another, p50/p99/max
#    per file, on uncached and cached files, without and with a prefetch job running (big/ and
#    small/d000-d007 into L2; the reader uses d008/d009, which no job touches).
pf_json() { # NAME KEY=VALUE... -> one JSON line in prefetch.jsonl
  local name="$1"; shift
  $PY -c 'import json,sys; d={"name":sys.argv[1]}
for kv in sys.argv[2:]:
    k,v=kv.split("=",1)
    try: v=float(v)
    except ValueError: pass
    d[k]=v
print(json.dumps(d))' "$name" "$@" | tee -a "$OUT/prefetch.jsonl" >&2
}

run_prefetch_workload() {
  local t0 t1 rc small_bytes big_bytes
  small_bytes=$((N_SMALL * 128 * 1024))
  big_bytes=$((2 * BIG_SIZE))
  mkdir -p "$OUT/raw/tierfs" "$OUT/raw/rclone" "$OUT/raw/raw"
  # the origin's 8-way ranged GET throughput
  raw_seqpar seqpar-prefetch
  local secs
  read -r secs rc < <($PY -c 'import json,sys; j = json.load(open(sys.argv[1])); print(j["seconds"], 0 if j["status"] == "ok" else 1)' "$OUT/raw/raw/seqpar-prefetch.json")
  pf_json raw-ranged8 rc="$rc" seconds="$secs" bytes="$BIG_SIZE" \
    mbps="$(awk -v b="$BIG_SIZE" -v s="$secs" 'BEGIN{printf "%.1f", b/s/1e6}')"
  # rclone copy --transfers 32 of small/ to local disk
  printf '[origin]\ntype = s3\nprovider = Other\nenv_auth = false\naccess_key_id = S3RVER\nsecret_access_key = S3RVER\nendpoint = %s\nregion = us-east-1\nforce_path_style = true\n' \
    "$ENDPOINT" >"$WORK/rclone.conf"
  rm -rf "$WORK/rclone-copy"; drop_caches
  t0="$(now)"
  env -u AWS_CA_BUNDLE -u CURL_CA_BUNDLE -u SSL_CERT_FILE -u SSL_CERT_DIR \
    timeout "$CAP" rclone copy "origin:$BUCKET/small" "$WORK/rclone-copy" --config "$WORK/rclone.conf" \
    --transfers 32 --log-level ERROR 2>>"$LOG"; rc=$?
  t1="$(now)"
  pf_json rclone-copy-small rc=$rc seconds="$(elapsed "$t0" "$t1")" bytes="$small_bytes" \
    files="$(find "$WORK/rclone-copy" -type f | wc -l)"
  rm -rf "$WORK/rclone-copy"
  # tierfs prefetch of small/ and of big/ (fresh caches each)
  local what b
  for what in small big; do
    drop_caches
    mount_tool tierfs "prefetch-$what" || { pf_json "tierfs-prefetch-$what" rc=1; continue; }
    t0="$(now)"
    timeout "$CAP" "$TIERFS" prefetch --tier l2 --wait "$MNT/$what" >"$OUT/raw/tierfs/prefetch-$what.txt" 2>&1; rc=$?
    t1="$(now)"
    b=$small_bytes; [[ $what == big ]] && b=$big_bytes
    pf_json "tierfs-prefetch-$what" rc=$rc seconds="$(elapsed "$t0" "$t1")" bytes="$b" \
      mbps="$(awk -v b="$b" -v s="$(elapsed "$t0" "$t1")" 'BEGIN{printf "%.1f", b/s/1e6}')"
    unmount_tool tierfs
  done
  # a reader's latency without and with a running job
  drop_caches
  mount_tool tierfs prefetch-reader || return
  local r="$BENCH/pf_reader.py" k v
  $PY "$r" "$MNT/small/d008" 200 >"$WORK/r-uncached-alone.json"
  $PY "$r" "$MNT/small/d008" 200 >"$WORK/r-cached-alone.json"
  "$TIERFS" prefetch --tier l2 "$MNT/big" "$MNT"/small/d00[0-7] >>"$LOG" 2>&1
  sleep 0.5
  $PY "$r" "$MNT/small/d009" 200 >"$WORK/r-uncached-job.json"
  $PY "$r" "$MNT/small/d008" 200 >"$WORK/r-cached-job.json"
  v="$(getfattr --only-values -n user.tierfs.prefetch "$MNT/big" 2>/dev/null)"
  log "job state after the reader runs: big: $v"
  for k in uncached-alone cached-alone uncached-job cached-job; do
    # shellcheck disable=SC2046
    pf_json "reader-$k" $($PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join("%s=%s" % kv for kv in d.items()))' "$WORK/r-$k.json")
  done
  "$TIERFS" prefetch --wait "$MNT/big" >/dev/null 2>&1
  unmount_tool tierfs
  $PY "$BENCH/pf_report.py" "$OUT/prefetch.jsonl" | tee "$OUT/prefetch.md" >&2
}

# ---------------------------------------------------------------------------------------------
# l2 workload (--only l2): warm reads from L2 against the same bytes from a plain file.
# L2_REPEAT (default 5) pairs, each pair measured back to back so both halves see the same disk
# (a VM's disk speed drifts by 2-3x from minute to minute here), and the median of the pairs' ratios reported:
#  plain:  BIG0 copied once to one plain file on the cache's filesystem; per pair, page cache
#          dropped, fio seq (raw/l2/plain-seq-N.json);
#  fuse:   with nullfs among the tools, per pair, the same plain file through nullfs --backing on
#          a side mount (page cache dropped; raw/l2/fuse-plain-seq-N.json): the least a FUSE file
#          system serving that file does, the ceiling of any FUSE cache's warm read of it;
#  tierfs: BIG0 read once cold with L1 = L2_L1 (smaller than the file); per pair, remounted on
#          the same cache (L1 empty: the file is held only in L2, not yet verified by the new
#          daemon), page cache dropped, fio seq (raw/tierfs/l2-warm-seq-N.json);
#  loader: per pair, 2 DataLoader epochs over small/ from local disk, then on tierfs: the first
#          mount prefetches small/ into L2 (prefetch()), later ones remount on that cache; page
#          cache dropped before the epochs (raw/{local,tierfs}/loader[-prefetched]-N.json).
run_l2() {
  local d="$OUT/raw/l2" plain="$WORK/l2-plain.bin" i reps="${L2_REPEAT:-5}"
  mkdir -p "$d" "$OUT/raw/local" "$OUT/raw/tierfs"
  local l1="${L2_L1:-64MiB}" save_mnt="$MNT" save_l1="$TIERFS_L1"
  cp "$LOCAL_DATA/$BIG0" "$plain"; sync
  # the plain file at BIG0's path under a directory of its own, for nullfs --backing
  local fbacking="$WORK/l2-backing"
  rm -rf "$fbacking"; mkdir -p "$fbacking/${BIG0%/*}"; ln "$plain" "$fbacking/$BIG0"
  if tool_available tierfs; then
    TIERFS_L1="$l1"
    drop_caches
    if mount_tool tierfs l2-fill; then
      fio_seq tierfs l2-fill-cold "$BIG0"
      KEEP_CACHE=1 unmount_tool tierfs
      for i in $(seq "$reps"); do
        MNT="$WORK"; drop_caches
        fio_seq l2 "plain-seq-$i" "l2-plain.bin"
        if has_tool nullfs && side_nullfs_mount "l2 fuse-plain-seq-$i" "$fbacking"; then
          MNT="$WORK/nullmnt"; drop_caches
          fio_seq l2 "fuse-plain-seq-$i" "$BIG0"
          side_nullfs_unmount
        fi
        KEEP_CACHE=1 mount_tool tierfs "l2-warm-$i" || break
        drop_caches
        local perf_pid=""
        if [[ $i == 1 && -n ${L2_PERF:-} ]] && command -v perf >/dev/null; then  # daemon profile
          perf record -g -p "$DPID" -o "$d/perf-warm.data" >>"$LOG" 2>&1 & perf_pid=$!
          sleep 0.5
        fi
        fio_seq tierfs "l2-warm-seq-$i" "$BIG0"
        if [[ -n $perf_pid ]]; then
          kill -INT "$perf_pid"; wait "$perf_pid"
          perf report -i "$d/perf-warm.data" --no-children --percent-limit 1.5 --stdio \
            >"$d/perf-warm.txt" 2>>"$LOG"
        fi
        KEEP_CACHE=1 unmount_tool tierfs
      done
      rm -rf "$CACHE"
    fi
  fi
  MNT="$save_mnt"; TIERFS_L1="$save_l1"
  rm -rf "$plain" "$fbacking"
  for i in $(seq "$reps"); do
    mount_tool local loader; drop_caches; run_loader local "loader-$i"
    if [[ $i == 1 ]]; then
      mount_tool tierfs "loader-prefetched-$i" || break
      prefetch tierfs
    else
      KEEP_CACHE=1 mount_tool tierfs "loader-prefetched-$i" || break
    fi
    drop_caches
    run_loader tierfs "loader-prefetched-$i"
    KEEP_CACHE=1 unmount_tool tierfs
  done
  rm -rf "$WORK/cache-tierfs"
  $PY - "$OUT/raw" "$reps" <<'EOF2' 2>&1 | tee -a "$LOG" >&2
import json, statistics, sys
r, reps = sys.argv[1], int(sys.argv[2])
def bw(p):
    try: j = json.load(open(p)); return j["jobs"][0]["read"]["bw_bytes"] / 2**20
    except Exception: return None
def sps(p):
    try: j = json.load(open(p)); return [e.get("samples_per_s") for e in j.get("epochs", [])]
    except Exception: return []
def med(xs):
    xs = [x for x in xs if x]
    return statistics.median(xs) if xs else float("nan")
pairs = [(bw(f"{r}/l2/plain-seq-{i}.json"), bw(f"{r}/tierfs/l2-warm-seq-{i}.json"))
         for i in range(1, reps + 1)]
ratios = [t / p for p, t in pairs if p and t]
print("l2: plain file / tierfs warm from L2, MiB/s per pair:",
      ", ".join(f"{p or 0:.0f}/{t or 0:.0f}" for p, t in pairs))
print(f"l2: median plain {med([p for p, _ in pairs]):.0f} MiB/s, tierfs {med([t for _, t in pairs]):.0f}"
      f" MiB/s, median ratio {med(ratios):.2f} (range {min(ratios, default=0):.2f}-{max(ratios, default=0):.2f})")
# the FUSE ceiling over the same plain file (nullfs --backing), where measured
fuse = [bw(f"{r}/l2/fuse-plain-seq-{i}.json") for i in range(1, reps + 1)]
fuse_ratios = {}
if any(fuse):
    print("l2: the plain file through FUSE (nullfs --backing), MiB/s per pair:",
          ", ".join(f"{x or 0:.0f}" for x in fuse))
    for what, rs in (("FUSE / plain file", [f / p for (p, _), f in zip(pairs, fuse) if p and f]),
                     ("tierfs / FUSE", [t / f for (_, t), f in zip(pairs, fuse) if t and f])):
        fuse_ratios[what] = rs
        print(f"l2: {what}, per pair:", ", ".join(f"{x:.2f}" for x in rs), f"median {med(rs):.2f}")
for e in (0, 1):
    rs = []
    for i in range(1, reps + 1):
        loc, tf = sps(f"{r}/local/loader-{i}.json"), sps(f"{r}/tierfs/loader-prefetched-{i}.json")
        if len(loc) > e and len(tf) > e and loc[e] and tf[e]: rs.append(tf[e] / loc[e])
    print(f"l2: loader epoch {e + 1} after a prefetch / local disk, per pair:",
          ", ".join(f"{x:.2f}" for x in rs), f"median {med(rs):.2f}")
with open(f"{r}/l2/summary.json", "w") as f:
    json.dump({"pairs_mib_s": pairs, "ratios": ratios, "median_ratio": med(ratios),
               "fuse_plain_mib_s": fuse, "fuse_ratios": fuse_ratios}, f)
EOF2
}

# ---------------------------------------------------------------------------------------------
# multijob workload (--workload multijob): three jobs at once on one mount; see the top.
origin_counts() { # OUT: the delay proxy's ranged-GET bytes per top directory, now
  [[ -n $PROXY_PID ]] || { echo '{}' >"$1"; return; }
  rm -f "$PROXY_COUNT_FILE"
  kill -USR1 "$PROXY_PID"
  for _ in $(seq 50); do [[ -s $PROXY_COUNT_FILE ]] && break; sleep 0.1; done
  cp "$PROXY_COUNT_FILE" "$1" 2>/dev/null || echo '{}' >"$1"
}

run_multijob() {
  local d="$OUT/raw/multijob" mode rep cfg hp sp pp
  mkdir -p "$d" "$OUT/raw/tierfs"
  local save_l1="$TIERFS_L1" save_l2="$TIERFS_L2" save_opts="$TIERFS_OPTS"
  TIERFS_L1="${MJ_L1:-128MiB}"; TIERFS_L2="${MJ_L2:-256MiB}"
  for rep in $(seq "${MJ_REPEAT:-1}"); do
    for mode in ${MJ_MODES:-always default}; do
      cfg="$WORK/multijob-$mode.toml"
      case "$mode" in
        always) printf '[cache]\nadmit = "always"\nadmit_scan_percent = 0\nsparse_read_max = 0\n' ;;  # no scan detection, no projected reads
        default) printf '# the defaults\n' ;;
        noproj) printf '[cache]\nsparse_read_max = 0\n' ;;  # the defaults without projected reads
        reuse) printf '[cache]\nadmit = "reuse"\n' ;;
        *) log "multijob: unknown mode $mode"; continue ;;
      esac >"$cfg"
      TIERFS_OPTS="$save_opts --config $cfg"
      drop_caches
      mount_tool tierfs "multijob-$mode-$rep" || continue
      local tag="$mode-$rep"
      origin_counts "$d/$tag-origin0.json"
      touch "$WORK/stream-running"
      timeout 600 $PY "$BENCH/multijob.py" hot "$d/$tag-hot.json" "$MNT"/hot/*.bin \
        --passes "${MJ_HOT_PASSES:-4}" --max-passes "${MJ_HOT_PASSES:-4}" --while-file "$WORK/stream-running" ${PROXY_PID:+--proxy-pid "$PROXY_PID"} \
        --count-file "$PROXY_COUNT_FILE" --group hot & hp=$!
      ( timeout 600 $PY "$BENCH/multijob.py" stream "$d/$tag-stream.json" "$MNT"/big/*.bin
        rm -f "$WORK/stream-running" ) & sp=$!
      timeout 600 $PY "$BENCH/multijob.py" proj "$d/$tag-proj.json" "$MNT"/proj/*.bin & pp=$!
      wait "$hp" "$sp" "$pp"
      rm -f "$WORK/stream-running"
      origin_counts "$d/$tag-origin1.json"
      timeout 10 getfattr --only-values -n user.tierfs.stats "$MNT" >"$d/$tag-stats.txt" 2>/dev/null
      unmount_tool tierfs
      log "multijob: $tag done"
    done
  done
  TIERFS_L1="$save_l1"; TIERFS_L2="$save_l2"; TIERFS_OPTS="$save_opts"
  $PY "$BENCH/multijob_report.py" "$d" | tee "$OUT/multijob.md" >&2
}

# ---------------------------------------------------------------------------------------------
# --au: bench/au.py per shape and source; one epoch per R, page cache dropped before each.
#  local:           the local copy;
#  tierfs-l2:       one mount (L1 = AU_L1), the shape prefetched into L2 (tierfs prefetch --wait),
#                   then every R on it (page cache dropped, L1 smaller than the shape's data);
#  tierfs-cold:     a fresh mount on empty caches for every R;
#  tierfs-prefetch: the same, with a prefetch running ahead of the ranks: PrefetchSampler in every
#                   rank (unet3d, cosmoflow: one sample per file) or a deep prefetch of the
#                   directory started with the epoch (resnet50: random samples of large files);
#  origin ceiling:  every object of the shape, 16 ranged GETs in flight, straight from the proxy.
au_run() { # SHAPE SOURCE DIR RANKS [au.py args...]
  local shape="$1" src="$2" dir="$3" ranks="$4"; shift 4
  timeout -k 10 $((3 * ${AU_CAP:-40} + 300)) $PY "$BENCH/au.py" run --shape "$shape" --source "$src" \
    --root "$dir" --ranks "$ranks" --out-dir "$OUT/au" --workers "${AU_WORKERS:-4}" \
    --cap "${AU_CAP:-40}" --drop-caches "$@" 2>&1 | grep -v Warning | tee -a "$LOG" >&2
}

run_au() {
  local shape r pf ranks="${AU_RANKS:-1,2,4}" save_l1="$TIERFS_L1"
  mkdir -p "$OUT/au" "$OUT/raw/tierfs"
  TIERFS_L1="${AU_L1:-128MiB}"
  IFS=, read -r -a shapes <<<"$AU_SHAPES"
  IFS=, read -r -a rlist <<<"$ranks"
  for shape in "${shapes[@]}"; do
    [[ -d $LOCAL_DATA/$shape ]] || { log "au: unknown shape $shape"; continue; }
    log "==== au: $shape ===="
    drop_caches
    $PY "$BENCH/au.py" ceiling --shape "$shape" --root "$LOCAL_DATA/$shape" \
      --url "$ENDPOINT/$BUCKET/$shape" --out-dir "$OUT/au" 2>&1 | tee -a "$LOG" >&2
    au_run "$shape" local "$LOCAL_DATA/$shape" "$ranks"
    tool_available tierfs || { log "au: no tierfs binary ($TIERFS), tierfs sources skipped"; continue; }
    drop_caches
    if mount_tool tierfs "au-$shape-l2"; then
      timeout "$((CAP * 3))" "$TIERFS" prefetch --tier l2 --wait "$MNT/$shape" >>"$LOG" 2>&1 ||
        log "au: prefetch of $shape into L2 failed or timed out"
      au_run "$shape" tierfs-l2 "$MNT/$shape" "$ranks"
      unmount_tool tierfs
    fi
    pf=sampler; [[ $shape == resnet50 ]] && pf=deep
    for r in "${rlist[@]}"; do
      drop_caches
      if mount_tool tierfs "au-$shape-cold-r$r"; then
        au_run "$shape" tierfs-cold "$MNT/$shape" "$r"
        unmount_tool tierfs
      fi
      drop_caches
      if mount_tool tierfs "au-$shape-prefetch-r$r"; then
        au_run "$shape" tierfs-prefetch "$MNT/$shape" "$r" --prefetch "$pf"
        unmount_tool tierfs
      fi
    done
  done
  TIERFS_L1="$save_l1"
  $PY "$BENCH/au.py" report "$OUT/au" 2>&1 | tee -a "$LOG" >&2
}

T_START=$SECONDS
if [[ $WORKLOAD == multijob ]]; then
  run_multijob
  log "multijob workload done in $((SECONDS - T_START)) s: $OUT/multijob.md"
  exit 0
elif [[ -n $AU ]]; then
  run_au
  if [[ $OUT == "$BENCH/out/"* ]]; then ln -sfn "$(basename "$OUT")" "$BENCH/out/latest"; fi
  log "au done in $((SECONDS - T_START)) s: $OUT/au/au.md"
  exit 0
elif [[ $WORKLOAD == prefetch ]]; then
  run_prefetch_workload
  log "prefetch workload done in $((SECONDS - T_START)) s: $OUT/prefetch.md"
  exit 0
elif [[ $ONLY == l2 ]]; then
  run_l2
  log "l2 workload done in $((SECONDS - T_START)) s"
  exit 0
elif [[ $ONLY == rand ]]; then
  IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
  for t in "${TOOL_LIST[@]}"; do
    [[ $t == tierfs || $t == s3fs || $t == rclone ]] || continue
    mkdir -p "$OUT/raw/$t"
    drop_caches
    if mount_tool "$t" rand-cold; then  # as group C: 4 KiB over BIG0, 128 KiB over BIG1
      fio_rand "$t" rand4k-cold 4k "$BIG0"
      fio_rand "$t" rand128k-cold 128k "$BIG1"
      unmount_tool "$t"
      log "rand: $t rand4k-cold / rand128k-cold $($PY -c 'import json,sys; print(" / ".join(str(round(json.load(open(p))["jobs"][0]["read"]["iops"])) for p in sys.argv[1:]))' "$OUT/raw/$t/rand4k-cold.json" "$OUT/raw/$t/rand128k-cold.json" 2>/dev/null) IOPS"
    fi
  done
  log "rand workload done in $((SECONDS - T_START)) s"
  exit 0
elif [[ $ONLY == seq ]]; then
  IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
  for t in "${TOOL_LIST[@]}"; do
    mkdir -p "$OUT/raw/$t"
    if [[ $t == raw ]]; then run_raw; continue; fi
    [[ $t == tierfs || $t == s3fs || $t == rclone ]] || continue
    drop_caches
    if mount_tool "$t" seq1; then
      fio_seq "$t" seq1-cold "$BIG0"
      drop_caches; fio_seq "$t" seq1-next "$BIG1"
      unmount_tool "$t"
    fi
    drop_caches
    if mount_tool "$t" seq2; then fio_seq "$t" seq2-cold "$BIG0" "$BIG1"; unmount_tool "$t"; fi
    log "seq: $t cold 1 stream / the next file / 2 streams $($PY -c 'import json,sys; print(" / ".join("%.0f MB/s" % (json.load(open(p))["jobs"][0]["read"]["bw_bytes"] / 1e6) for p in sys.argv[1:]))' "$OUT/raw/$t/seq1-cold.json" "$OUT/raw/$t/seq1-next.json" "$OUT/raw/$t/seq2-cold.json" 2>/dev/null)"
  done
  log "seq workload done in $((SECONDS - T_START)) s"
  exit 0
elif [[ $ONLY == warm ]]; then
  IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
  for t in "${TOOL_LIST[@]}"; do
    mkdir -p "$OUT/raw/$t"
    [[ $t == tierfs || $t == s3fs || $t == rclone || $t == local || $t == nullfs ]] || continue
    tool_available "$t" || { log "$t: not available, skipped"; continue; }
    if run_group_a "$t"; then
      log "warm: $t seq MB/s / rand 4k / rand 128k IOPS $($PY -c 'import json,sys; j=[json.load(open(p))["jobs"][0]["read"] for p in sys.argv[1:]]; print("%.0f / %.0f / %.0f" % (j[0]["bw_bytes"] / 1e6, j[1]["iops"], j[2]["iops"]))' "$OUT/raw/$t/seq1-warm.json" "$OUT/raw/$t/rand4k-warm.json" "$OUT/raw/$t/rand128k-warm.json" 2>/dev/null)"
    fi
  done
  log "warm workload done in $((SECONDS - T_START)) s"
  exit 0
elif [[ $ONLY == loader ]]; then
  IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
  for t in "${TOOL_LIST[@]}"; do
    mkdir -p "$OUT/raw/$t"
    if [[ $t == raw ]]; then raw_small; continue; fi
    [[ $t == tierfs || $t == s3fs || $t == rclone || $t == local || $t == nullfs ]] || continue
    tool_available "$t" || { log "$t: not available, skipped"; continue; }
    run_loader_groups "$t"
  done
  log "loader workload done in $((SECONDS - T_START)) s"
  exit 0
elif [[ $ONLY == seqrounds ]]; then
  run_seq_rounds
  $PY "$BENCH/report.py" --rounds "$OUT" 2>&1 | tee -a "$LOG" >&2
  log "seqrounds workload done in $((SECONDS - T_START)) s"
  exit 0
elif [[ $ONLY == loaderrounds ]]; then
  run_loader_rounds
  $PY "$BENCH/report.py" --loader-rounds "$OUT" 2>&1 | tee -a "$LOG" >&2
  log "loaderrounds workload done in $((SECONDS - T_START)) s"
  exit 0
elif [[ $ONLY == stallrounds ]]; then
  run_stall_rounds
  $PY "$BENCH/report.py" --stall-rounds "$OUT" 2>&1 | tee -a "$LOG" >&2
  log "stallrounds workload done in $((SECONDS - T_START)) s"
  exit 0
fi
IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
for t in "${TOOL_LIST[@]}"; do
  case "$t" in tierfs|s3fs|rclone|local|nullfs|raw) run_tool "$t" ;; *) log "unknown tool $t, skipped" ;; esac
done
log "all tools done in $((SECONDS - T_START)) s"
if [[ $LAYOUT == full && -z $STALL_ONLY ]]; then
  run_seq_rounds
  run_loader_rounds
  run_stall_rounds
fi

$PY "$BENCH/report.py" "$OUT" 2>&1 | tee -a "$LOG" >&2
if [[ $OUT == "$BENCH/out/"* ]]; then
  ln -sfn "$(basename "$OUT")" "$BENCH/out/latest"
fi
log "results: $OUT/results.md, $OUT/results.json, $OUT/results.png"
