# bench/run.sh: the interleaved rounds (seqrounds, loaderrounds, stallrounds). Sourced by run.sh.

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
  rotate_rounds seq "$SEQ_ROUNDS" seq_round "${order[@]}"
}

# Cold DataLoader epochs in interleaved rounds (--only loaderrounds, and at the end of a full run
# after group S; LOADER_ROUNDS, default 3):
# per round, back to back in an order that rotates, the small-object ceilings of raw_loaderpar
# (alone, with the FUSE delivery and the loader, and with the flash writes too: a file per object,
# or one segment file) and tierfs's cold epoch 1 of the same DataLoader on a fresh mount with
# empty caches (raw/raw/loaderpar{,-fuse,-fusel2,-fuseseg}-round-N.json,
# raw/tierfs/loader-round-N.json); the report
# (report_rounds.py) compares them within each round.
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
  rotate_rounds loader "$LOADER_ROUNDS" loader_round "${order[@]}"
}

# The GPU-stall view after a prefetch, in interleaved rounds (--only stallrounds, and at the end of
# a full run after group L; STALL_ROUNDS, default 5): per round, in an order that rotates, tierfs's
# "after a prefetch" session of group G (fresh mount, prefetch into L2, page cache dropped, two
# epochs: raw/tierfs/stall-prefetched-round-N.json), the same two epochs from local disk
# (raw/local/stall-plain-round-N.json) and, with nullfs among the tools, from local disk through a
# FUSE file system that only opens each local file and splices its reads (nullfs --backing: the
# least any FUSE file system serving files from local flash does; raw/fuselocal/...). A longest
# wait is one sample of each epoch's tail, and local disk's own moves 3-59 ms from run to run
# here: the report (report_rounds.py) compares them within each round and takes the
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
  rotate_rounds stall "$STALL_ROUNDS" stall_round "${order[@]}"
}

