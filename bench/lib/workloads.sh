# bench/run.sh: the workloads of the registry (run.sh's WORKLOADS table), one function each. Sourced
# by run.sh.

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

# The per-tool workloads of the table (run.sh WORKLOADS), each on fresh mounts with empty caches.
wl_seq1() { run_group_a "$1" next; }  # A: 1 stream cold, warm, warm random reads, the next file

wl_seq2() { # B: 2 streams (one per big file), cold then warm
  local t="$1"
  drop_caches
  mount_tool "$t" seq2 || return 0
  fio_seq "$t" seq2-cold "$BIG0" "$BIG1"
  drop_caches; fio_seq "$t" seq2-warm "$BIG0" "$BIG1"
  unmount_tool "$t"
}

wl_rand() { # C: random reads on empty caches, 4 KiB over one big file, 128 KiB over the other
  local t="$1"
  drop_caches
  mount_tool "$t" rand-cold || return 0
  fio_rand "$t" rand4k-cold 4k "$BIG0"
  fio_rand "$t" rand128k-cold 128k "$BIG1"
  unmount_tool "$t"
}

wl_find() { # D: find/stat over the tiny files, cold then warm
  local t="$1"
  drop_caches
  mount_tool "$t" find || return 0
  run_find "$t" find-cold
  drop_caches; run_find "$t" find-warm
  unmount_tool "$t"
}

wl_loader() { run_loader_groups "$1"; }  # E and E' (tierfs with PrefetchSampler)

wl_loader_prefetched() { # F: the DataLoader after prefetching the directory into the tool's cache
  local t="$1"
  drop_caches
  mount_tool "$t" loader-prefetched || return 0
  prefetch "$t"
  drop_caches
  run_loader "$t" loader-prefetched
  unmount_tool "$t"
}

wl_stall() { run_stall "$1"; }  # G: the GPU-stall view

wl_raw() { run_raw; }  # the origin's own figures (curl)

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
  local d="$OUT/raw/l2" plain="$WORK/l2-plain.bin" i reps="$L2_REPEAT"
  mkdir -p "$d" "$OUT/raw/local" "$OUT/raw/tierfs"
  local l1="$L2_L1" save_mnt="$MNT" save_l1="$TIERFS_L1"
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
        if [[ $i == 1 && -n $L2_PERF ]] && command -v perf >/dev/null; then  # daemon profile
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
      mv "$OUT/raw/tierfs/prefetch.json" "$OUT/raw/tierfs/l2-prefetch.json"  # not group F's
    else
      KEEP_CACHE=1 mount_tool tierfs "loader-prefetched-$i" || break
    fi
    drop_caches
    run_loader tierfs "loader-prefetched-$i"
    KEEP_CACHE=1 unmount_tool tierfs
  done
  rm -rf "$WORK/cache-tierfs"
  $PY "$BENCH/report_jobs.py" l2 "$OUT" 2>&1 | tee -a "$LOG" >&2  # the "l2:" lines
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
  TIERFS_L1="$MJ_L1"; TIERFS_L2="$MJ_L2"
  for rep in $(seq "$MJ_REPEAT"); do
    for mode in $MJ_MODES; do
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
        --passes "$MJ_HOT_PASSES" --max-passes "$MJ_HOT_PASSES" --while-file "$WORK/stream-running" ${PROXY_PID:+--proxy-pid "$PROXY_PID"} \
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
  timeout -k 10 $((3 * $AU_CAP + 300)) $PY "$BENCH/au.py" run --shape "$shape" --source "$src" \
    --root "$dir" --ranks "$ranks" --out-dir "$OUT/au" --workers "$AU_WORKERS" \
    --cap "$AU_CAP" --drop-caches "$@" 2>&1 | grep -v Warning | tee -a "$LOG" >&2
}

run_au() {
  local shape r pf ranks="$AU_RANKS" save_l1="$TIERFS_L1"
  mkdir -p "$OUT/au" "$OUT/raw/tierfs"
  TIERFS_L1="$AU_L1"
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
}

T_START=$SECONDS
