# bench/run.sh: the cache-policy workloads (group policy, dataset policy / policy-quick), tierfs
# only. Each runs phases on its own mounts; a phase writes raw/policy/CASE/PHASE.json (bench/policy.py:
# bytes read, whether they equal the local copy's) and the delay proxy's counts per top directory
# before and after it (PHASE.origin0.json, PHASE.origin1.json). The report (report_jobs.py) turns
# them into origin GETs, origin bytes per byte read and each shape's target, pass or fail.
# Sourced by run.sh.

POLICY_L1=""  # tierfs --l1-size / --l2-size of the next policy_mount ("" = TIERFS_L1 / TIERFS_L2)
POLICY_L2=""

policy_mount() { # CASE SESSION [keep]: a tierfs mount; with "keep", on the cache left by the last
  local save_l1="$TIERFS_L1" save_l2="$TIERFS_L2" rc=0
  TIERFS_L1="${POLICY_L1:-$TIERFS_L1}"; TIERFS_L2="${POLICY_L2:-$TIERFS_L2}"
  mkdir -p "$OUT/raw/tierfs" "$OUT/raw/policy/$1"
  drop_caches
  if [[ ${3:-} == keep ]]; then KEEP_CACHE=1 mount_tool tierfs "policy-$1-$2" || rc=1
  else mount_tool tierfs "policy-$1-$2" || rc=1; fi
  TIERFS_L1="$save_l1"; TIERFS_L2="$save_l2"
  ((rc == 0)) || status_json "$OUT/raw/policy/$1/mount.json" error "tierfs did not mount (raw/tierfs/daemon-policy-$1-$2.log)"
  return $rc
}

policy_unmount() { # [keep]: unmount tierfs; with "keep" its cache stays for the next mount
  if [[ ${1:-} == keep ]]; then KEEP_CACHE=1 unmount_tool tierfs; else unmount_tool tierfs; fi
}

# A phase: the proxy's counts around bench/policy.py COMMAND run on the mount.
policy_phase() { # CASE PHASE COMMAND ARGS...
  local d="$OUT/raw/policy/$1" phase="$2" cmd="$3"
  shift 3
  origin_counts "$d/$phase.origin0.json"
  timeout -k 10 $((CAP * 3)) $PY "$BENCH/policy.py" "$cmd" "$d/$phase.json" "$MNT" "$LOCAL_DATA" "$@" \
    2>&1 | tee -a "$LOG" >&2
  [[ -s $d/$phase.json ]] || status_json "$d/$phase.json" error "policy.py $cmd exit ${PIPESTATUS[0]}"
  origin_counts "$d/$phase.origin1.json"
}

policy_files() { # DIR -> the layout's files of DIR, relative to the dataset's root
  (cd "$LOCAL_DATA" && find "$1" -type f | sort)
}

# Read once with room in L2: a file read once, then (remounted on the same cache, page cache
# dropped: L1 empty) read again; the second read's origin GETs (target 0). Two L2 sizes: the run's
# (1 GiB file; quick 256 MiB) and ten times the file (10 GiB at full size, the daemon's default).
wl_policy_once() {
  local c file size
  file="$(policy_files once | head -1)"
  size="$(stat -c %s "$LOCAL_DATA/$file")"
  for c in l2-run l2-10x; do
    mkdir -p "$OUT/raw/policy/once-$c"
    POLICY_L1=""; POLICY_L2=""
    [[ $c == l2-10x ]] && POLICY_L2="$((size * 10 >> 20))MiB"
    policy_mount "once-$c" first || continue
    policy_phase "once-$c" first read "$file"
    policy_unmount keep
    policy_mount "once-$c" second keep || continue
    policy_phase "once-$c" second read "$file"
    policy_unmount
  done
  POLICY_L2=""
}

# A hot set survives a scan: L2 64 MiB, L1 8 MiB or 1 GiB, L2 empty or first filled with fill/:
# hot/ (32 MiB) read, scan/ (4x L2) read once, hot/ read again; the re-read's origin GETs
# (target <= 2) and the scan's origin bytes per byte (target <= 1.05).
wl_policy_scan() {
  local l1 state c hot=()
  mapfile -t hot < <(policy_files hot)
  for l1 in 8MiB 1GiB; do
    for state in empty full; do
      c="scan-l1-$l1-l2-$state"
      mkdir -p "$OUT/raw/policy/$c"
      POLICY_L1="$l1"; POLICY_L2=64MiB
      policy_mount "$c" run || continue
      if [[ $state == full ]]; then
        # shellcheck disable=SC2046  # the file names
        policy_phase "$c" fill read $(policy_files fill)
      fi
      policy_phase "$c" hot read "${hot[@]}"
      # shellcheck disable=SC2046  # the file names
      policy_phase "$c" scan read $(policy_files scan)
      policy_phase "$c" reread read "${hot[@]}"
      policy_unmount
    done
  done
  POLICY_L1=""; POLICY_L2=""
}

# Projections, each on a fresh mount with empty caches: 25% of one 64 MiB file and 25% of each
# of many 4 MiB files in random 16-64 KiB ranges (target: origin bytes / bytes read <= 1.3), and
# 90% of the one file (target <= 1.15; and its read IOPS against cold-90's, the same reader on a
# mount that never hydrates: every read a round trip). A file of 4x L2 (scan/, L1 8 MiB, L2
# 64 MiB), which the host tiers cannot keep: 40% of it in ranges (big-40) and 2% in 4 KiB reads
# (big-4k); target: origin bytes / bytes read <= 1.3 (each block fetched once, not hydrated,
# evicted and fetched again).
wl_policy_proj() {
  local c save_opts="${WL_OPTS:-}"
  printf '[cache]\nrandom_hydrate_misses = 0\n' >"$WORK/policy-nohydrate.toml"
  for c in one-25 many-25 one-90 cold-90 big-40 big-4k; do
    mkdir -p "$OUT/raw/policy/proj-$c"
    POLICY_L1=""; POLICY_L2=""; WL_OPTS="$save_opts"
    case "$c" in
      cold-90) WL_OPTS="$save_opts --config $WORK/policy-nohydrate.toml" ;;
      big-*) POLICY_L1=8MiB; POLICY_L2=64MiB ;;
    esac
    policy_mount "proj-$c" run || continue
    # shellcheck disable=SC2046  # the file names
    case "$c" in
      one-25) policy_phase "proj-$c" read ranges --fraction 0.25 $(policy_files proj) ;;
      many-25) policy_phase "proj-$c" read ranges --fraction 0.25 $(policy_files projmany) ;;
      one-90 | cold-90) policy_phase "proj-$c" read ranges --fraction 0.9 $(policy_files proj) ;;
      big-40) policy_phase "proj-$c" read ranges --fraction 0.4 $(policy_files scan) ;;
      big-4k) policy_phase "proj-$c" read ranges --fraction 0.02 --min 4096 --max 4096 $(policy_files scan) ;;
    esac
    policy_unmount
  done
  POLICY_L1=""; POLICY_L2=""; WL_OPTS="$save_opts"
}

# A memory limit (the workload's tierfs flags, --memory-limit 512MiB): 32 cold sequential readers
# of distinct files, 8 random readers and a prefetch job (mempf/ into L2) at once; the daemon's
# peak RSS (VmRSS sampled every 50 ms, and VmHWM; target <= 560 MiB) and exact bytes.
wl_policy_memory() {
  local c=memory
  mkdir -p "$OUT/raw/policy/$c"
  policy_mount "$c" run || return 0
  "$TIERFS" prefetch --tier l2 "$MNT/mempf" >>"$LOG" 2>&1 || log "policy-memory: the prefetch job did not start"
  # shellcheck disable=SC2046
  policy_phase "$c" readers memory --pid "$DPID" --seq $(policy_files mem) --rand $(policy_files memrand) \
    --rand-readers 8
  timeout "$CAP" "$TIERFS" prefetch --wait "$MNT/mempf" >>"$LOG" 2>&1
  policy_unmount  # records the daemon's VmHWM at the end (raw/tierfs/rss.jsonl)
}
