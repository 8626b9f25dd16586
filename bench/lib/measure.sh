# bench/run.sh: how one measurement is taken (fio, find, the DataLoader, prefetch, CPU snapshots) and
# the origin's own figures (curl, nullfs side mounts). Sourced by run.sh.

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

# bench/loader.py over DIR, 2 epochs (more loader.py args may change that), into raw/TOOL/NAME.json
# (a status record when it wrote none)
loader_run() { # TOOL NAME DIR [loader.py args...]
  local tool="$1" name="$2" dir="$3" out="$OUT/raw/$1/$2.json" rc t0 t1
  shift 3
  t0="$(now)"
  timeout -k 10 $((2 * LOADER_CAP + 180)) $PY "$BENCH/loader.py" "$dir" --epochs 2 --workers 4 \
    --batch 64 --cap "$LOADER_CAP" --expect "$N_SMALL" --out "$out" "$@" 2>&1 | grep -v Warning | tee -a "$LOG" >&2
  rc=${PIPESTATUS[0]}
  t1="$(now)"
  if [[ ! -s $out ]]; then
    local st=error; [[ $rc == 124 || $rc == 137 ]] && st=timeout
    status_json "$out" "$st" "loader exit $rc" "$(elapsed "$t0" "$t1")"
  fi
  log "$tool: $name finished (exit $rc) in $(elapsed "$t0" "$t1") s"
}

# The DataLoader over the mount's small/, with the CPU of the origin, the proxy and the daemon
run_loader() { # TOOL NAME [loader.py args...]
  local c cpu=()
  for c in $(cpu_pid_args); do cpu+=(--cpu "$c"); done
  loader_run "$1" "$2" "$MNT/small" "${cpu[@]}" "${@:3}"
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
  loader_run "$1" "$2" "$3" --compute-ms "$STALL_COMPUTE_MS" "${@:4}"
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
  nullfs_available || { log "no nullfs ($NULLFS; cmake --build build --target bench_nullfs), no $1"; return 1; }
  mkdir -p "$nm"
  "$NULLFS" "$nm" -f -o max_read=1048576 --layout "$NULLFS_LAYOUT" "${backing[@]}" >>"$LOG" 2>&1 &
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

