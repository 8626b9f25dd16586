# bench/run.sh: the run's plumbing: cleanup, small helpers, the origin (s3rver behind the delay
# proxy), meta.json, mounting and unmounting the tools. Sourced by run.sh.

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
# origin: s3rver (scripts/s3rver.sh) on a cached, seeded data dir (LAYOUT), and the delay proxy in
# front; sets ENDPOINT, PROXY_PID, PROXY_COUNT_FILE and the dataset facts (BIG_SIZE, N_SMALL, ...)
start_origin() {
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
  # the delay proxy counts the ranged GETs per top directory for the datasets whose workloads
  # report origin bytes (origin_counts)
  PROXY_COUNT_FILE=""
  [[ $LAYOUT == multijob || $LAYOUT == policy* ]] && PROXY_COUNT_FILE="$WORK/origin-counts.json"
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
    [[ $ORIGIN_NICE == 0 ]] && return 0
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
  TOP_DIR="${NULLFS_LAYOUT%%:*}"  # the layout's first directory: listed once a tool has mounted
  BIG0=big/f00000.bin
  BIG1=big/f00001.bin

}

# meta.json: machine, date, versions, parameters
write_meta() {
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
  "mem_mib": mem, "layout": "$LAYOUT", "workloads": "$SELECTED".split(),
  "stall": {"compute_ms": float("$STALL_COMPUTE_MS"), "ahead": int("$STALL_AHEAD")}, "delay_ms": float("$DELAY_MS"), "origin_nice": int("$ORIGIN_NICE"), "cap_s": float("$CAP"), "loader_cap_s": float("$LOADER_CAP"),
  "rand_runtime_s": $RAND_RT, "tools": "$TOOLS".split(","),
  "dataset": {"big_size": $BIG_SIZE, "small_files": $N_SMALL, "tiny_files": $N_TINY},
  "versions": {
    "fio": sh("fio --version"), "s3fs": sh("s3fs --version 2>&1 | head -1"),
    "rclone": sh("rclone version 2>/dev/null | head -1"), "libfuse": sh("pkg-config --modversion fuse3"),
    "torch": sh("$PY -c 'import torch; print(torch.__version__)'"),
    "tierfs": sh("git -C '$ROOT' rev-parse --short HEAD"),
  },
  "tierfs_opts": {"l1": "$TIERFS_L1", "l2": "$TIERFS_L2", "extra": "$TIERFS_OPTS"},
}
json.dump(meta, open(sys.argv[1], "w"), indent=1)
EOF
}

# ---------------------------------------------------------------------------------------------
# mounting
MNT=""; DPID=""; CACHE=""; SESSION=""

# nullfs (bench/nullfs.c) is the CMake target bench_nullfs of the build tree: built here when it is
# missing or older than its source.
nullfs_available() {
  if [[ ! -x $NULLFS || $BENCH/nullfs.c -nt $NULLFS ]]; then
    cmake --build "$ROOT/build" --target bench_nullfs >>"$LOG" 2>&1 || return 1
  fi
  [[ -x $NULLFS ]]
}

tool_available() {
  case "$1" in
    tierfs) [[ -x $TIERFS ]] ;;
    s3fs) command -v s3fs >/dev/null ;;
    rclone) command -v rclone >/dev/null ;;
    nullfs) nullfs_available ;;
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
        $TIERFS_OPTS ${WL_OPTS:-} -f >"$dlog" 2>&1 &
      DPID=$! ;;
    s3fs)
      printf 'S3RVER:S3RVER\n' >"$WORK/s3fs.passwd"; chmod 600 "$WORK/s3fs.passwd"
      s3fs "$BUCKET" "$MNT" -f -o "ro,use_path_request_style,url=$ENDPOINT,passwd_file=$WORK/s3fs.passwd" \
        -o "use_cache=$CACHE,dbglevel=warn" $S3FS_OPTS >"$dlog" 2>&1 &
      DPID=$! ;;
    rclone)
      write_rclone_conf
      # rclone 1.60 fails when AWS_CA_BUNDLE names a file it does not need; unset the TLS overrides.
      env -u AWS_CA_BUNDLE -u CURL_CA_BUNDLE -u SSL_CERT_FILE -u SSL_CERT_DIR \
        rclone mount "origin:$BUCKET" "$MNT" --config "$WORK/rclone.conf" --read-only \
        --vfs-cache-mode full --cache-dir "$CACHE" --log-level NOTICE $RCLONE_OPTS >"$dlog" 2>&1 &
      DPID=$! ;;
    nullfs)
      "$NULLFS" "$MNT" -f -o max_read=1048576 --layout "$NULLFS_LAYOUT" >"$dlog" 2>&1 &
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
  local check="$TOP_DIR"
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

