#!/usr/bin/env bash
# End-to-end: damaged and exhausted cache storage, and tiers going down.
#   1. flipped bits in L2 block files (cache/blocks/??/<key>): reads byte-exact, the corruptions
#      counted (l2.corruptions), the blocks refetched (a later mount reads them with the origin
#      down);
#   2. flipped bits in L3 objects (in the L3 s3rver's data dir): reads byte-exact from the origin,
#      l3.corruptions counted;
#   3. L2 on an 8 MiB tmpfs that fills up, with --l2-size 256MiB: reads byte-exact, no crash;
#   4. L3 and the origin both down (fault proxies reset every connection), then back: cached
#      reads never fail, an uncached file fails with EIO in bounded time and reads byte-exact once
#      they are back, without a remount;
#   5. a full LMDB map (metastore.map_size = 16MiB, filled to the brim by mdb_load between two
#      mounts): files listed and cached before, and a file of a directory never listed before,
#      read byte-exact, no crash. (With the code of 2026-11-30 the second part fails: the listing
#      cannot be stored, and the lookup gets ENOSPC.)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
e2e_init
fault_dataset
BUCKET=tierfs-damage
L3_BUCKET=tierfs-damage-l3
s3rver_start "$BUCKET" s3rver-origin
ORIGIN_PORT=$S3_PORT
fault_upload "$BUCKET"
s3rver_start "$L3_BUCKET" s3rver-l3
L3_PORT=$S3_PORT
fault_proxy_start origin "$ORIGIN_PORT"
ORIGIN="$PROXY_ENDPOINT"
fault_proxy_start l3 "$L3_PORT"
L3="$PROXY_ENDPOINT"
export TIERFS_E2E_L3_KEY=S3RVER TIERFS_E2E_L3_SECRET=S3RVER
CFG="$E2E_WORK/tierfs.toml"
fault_config "$CFG" "[cache]" 'l3_access_key_id_env = "TIERFS_E2E_L3_KEY"' \
  'l3_secret_access_key_env = "TIERFS_E2E_L3_SECRET"' 'l3_request_timeout = "2s"' \
  'l3_max_attempts = 1' 'l3_write_queue = 1024' 'l2_min_free = "0"'
CACHED='^f/(a|b|c|d|small/.*)\.bin$'
UNCACHED='^f/big/e\.bin$'
MNT="" PID="" LOGF=""

# mount_at NAME CACHE-DIR [ARGS...]: mounts the origin through its proxy (no L3 unless ARGS say
# so); the config is $CFG unless CONFIG is set.
mount_at() {
  local name="$1" cache="$2"
  shift 2
  scenario_mount "$name" "s3://$BUCKET" "$cache" "$E2E_WORK/daemon-$name.log" --endpoint "$ORIGIN" \
    --config "${CONFIG:-$CFG}" "$@"
}
umount_ok() { scenario_umount; }
reset_faults() { fault_set origin '{}'; fault_set l3 '{}'; }
check() {  # check STATS-ARGS...: verify.py stats on the current mount
  local stats
  stats="$(stats_xattr "$MNT")" || fail "cannot read the stats of $MNT"
  "$PY" "$E2E_DIR/verify.py" stats "$stats" "$@" || { log "stats: $stats"; fail "stats check failed ($*)"; }
}
flip_byte() {  # flip_byte FILE OFFSET
  "$PY" - "$1" "$2" <<'EOF'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0x10]))
EOF
}

# ---- 1. flipped bits in L2 block files
l2flip() {
reset_faults
L2C="$E2E_WORK/cache-l2"
mount_at l2flip-a "$L2C" --l1-size 0 --l2-size 256MiB
fault_read "L2: hydrate (every file byte-exact)" 60 "$MNT" --require ok
umount_ok
mapfile -t blocks < <(find "$L2C/blocks" -type f -size +100k ! -name '*.tmp.*' | sort)
(( ${#blocks[@]} >= 10 )) || fail "only ${#blocks[@]} L2 block files under $L2C/blocks"
n_flip=0
for b in "${blocks[@]:0:6}"; do
  flip_byte "$b" $(( ($(stat -c %s "$b") - 256) / 2 ))  # a payload byte (before the chunk trailer)
  n_flip=$((n_flip + 1))
done
log "flipped one bit in $n_flip of ${#blocks[@]} L2 block files"
mount_at l2flip-b "$L2C" --l1-size 0 --l2-size 256MiB
fault_read "L2 damaged: every file byte-exact" 60 "$MNT" --require ok
check --eq l2.corruptions=$n_flip --gt origin.requests=0
fault_read "L2 damaged: a second read byte-exact, no new corruption" 60 "$MNT" --require ok
check --eq l2.corruptions=$n_flip --gt l2.extent_reads=0  # verified blocks are spliced from their files
umount_ok
mount_at l2flip-c "$L2C" --l1-size 0 --l2-size 256MiB --metadata-ttl 1h
fault_set origin '{"rules":[{"action":"drop","kind":"any"}]}'  # after the start-up listing
fault_read "L2 refetched: every file byte-exact with the origin's reads down" 60 "$MNT" --require ok --max-seconds 10
check --eq l2.corruptions=0 --eq origin.bytes=0
umount_ok
fault_set origin '{}'
log "ok L2 corruption detected, counted and refetched"
}

# ---- 2. flipped bits in L3 objects (s3rver's files)
L3_ARGS=(--l3 "s3://$L3_BUCKET/r1" --l3-endpoint "$L3")
l3flip() {
reset_faults
mount_at l3flip-a "$E2E_WORK/cache-l3a" --l1-size 8MiB --l2-size 256MiB "${L3_ARGS[@]}"
fault_read "L3: hydrate" 60 "$MNT" --require ok
deadline=$((SECONDS + 60))
until [[ "$(stat_of "$MNT" l3.write.pending)" == 0 ]]; do
  (( SECONDS < deadline )) || fail "L3 write-back not drained"
  sleep 0.5
done
check --gt l3.inserts=0 --eq l3.write.dropped=0
umount_ok
mapfile -t objs < <(find "$E2E_WORK/s3rver-l3" -type f -name '*._S3rver_object' -size +100k | sort)
(( ${#objs[@]} >= 10 )) || fail "only ${#objs[@]} L3 objects in s3rver's data dir"
for o in "${objs[@]}"; do flip_byte "$o" $(( $(stat -c %s "$o") / 2 )); done
log "flipped one bit in each of the ${#objs[@]} L3 objects"
mount_at l3flip-b "$E2E_WORK/cache-l3b" --l1-size 8MiB --l2-size 256MiB "${L3_ARGS[@]}"
fault_read "L3 damaged: every file byte-exact" 60 "$MNT" --require ok
check --eq l3.corruptions=${#objs[@]} --gt origin.requests=0  # the unflipped small objects are hits
log "l3.corruptions=$(stat_of "$MNT" l3.corruptions) of ${#objs[@]} objects"
umount_ok
}

# ---- 3. L2 on a small filesystem that fills up
TMPFS="$E2E_WORK/tmpfs"
umount_tmpfs() { if is_mounted "$TMPFS"; then umount "$TMPFS" || umount -l "$TMPFS"; fi; }
trap 'rc=$?; umount_tmpfs; e2e_cleanup $rc' EXIT
tmpfs() {
reset_faults
mkdir -p "$TMPFS"
mount -t tmpfs -o size=8m tierfs-e2e-tmpfs "$TMPFS" || fail "cannot mount a tmpfs (root needed)"
mount_at tmpfs "$TMPFS/cache" --l1-size 4MiB --l2-size 256MiB
fault_read "L2 on an 8 MiB tmpfs: every file byte-exact" 120 "$MNT" --require ok --rounds 2
log "tmpfs: $(df -h --output=used,avail "$TMPFS" | tail -n 1); l2.used=$(stat_of "$MNT" l2.used) l2.errors=$(stat_of "$MNT" l2.errors) insert.errors=$(stat_of "$MNT" insert.errors)"
pid_alive "$PID" || fail "the daemon died"
umount_ok
}

# ---- 4. L3 and the origin down, then back
down() {
reset_faults
mount_at down "$E2E_WORK/cache-down" --l1-size 8MiB --l2-size 256MiB "${L3_ARGS[@]}"
fault_read "both up: the cached set byte-exact" 60 "$MNT" --files "$CACHED" --require ok
fault_set origin '{"rules":[{"action":"drop","kind":"any"}]}'
fault_set l3 '{"rules":[{"action":"drop","kind":"any"}]}'
fault_read "L3 and origin down: cached files byte-exact" 60 "$MNT" --files "$CACHED" --require ok --max-seconds 5
t0=$SECONDS
fault_read "L3 and origin down: an uncached file fails with EIO in bounded time" 60 "$MNT" \
  --files "$UNCACHED" --require error --errnos EIO --max-seconds 20
log "EIO after $((SECONDS - t0)) s"
fault_set origin '{}'
fault_set l3 '{}'
sleep 1  # a block's origin failure is replayed to its readers for 1 s (docs/failure-and-security.md)
fault_read "both back: the uncached file byte-exact without a remount" 60 "$MNT" --files "$UNCACHED" --require ok --max-seconds 30
fault_read "both back: every file byte-exact" 60 "$MNT" --require ok
umount_ok
}

# ---- 5. a full LMDB map (last: today it fails, see the header)
mapfull() {
reset_faults
MAPC="$E2E_WORK/cache-map"
CFG_MAP="$E2E_WORK/tierfs-map.toml"
cp "$CFG" "$CFG_MAP"
printf '[metastore]\nmap_size = "16MiB"\n' >>"$CFG_MAP"
CONFIG="$CFG_MAP" mount_at mapfull-0 "$MAPC" --l1-size 4MiB --l2-size 256MiB
fault_read "before the map fills: the cached set byte-exact" 60 "$MNT" --files "$CACHED" --require ok
umount_ok
# Fill the map with a sub-database tierfs never opens: 4 KiB values until MDB_MAP_FULL.
"$PY" - "$E2E_WORK/fill.dump" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    f.write("VERSION=3\nformat=bytevalue\ntype=btree\nHEADER=END\n")
    for i in range(8000):
        f.write(" %s\n %s\n" % (("fill%06d" % i).encode().hex(), "ab" * 4096))
    f.write("DATA=END\n")
EOF
mdb_load -s tierfs-e2e-fill -f "$E2E_WORK/fill.dump" "$MAPC/meta" >"$E2E_WORK/mdb_load.log" 2>&1 && fail "mdb_load filled 32 MiB into a 16 MiB map?"
grep -q "MDB_MAP_FULL" "$E2E_WORK/mdb_load.log" || { cat "$E2E_WORK/mdb_load.log"; fail "mdb_load did not stop at MDB_MAP_FULL"; }
log "LMDB map full: $(mdb_stat -e "$MAPC/meta" | grep -E 'Map size|Number of pages used' | tr -s ' ' | tr '\n' ' ')"
CONFIG="$CFG_MAP" mount_at mapfull-1 "$MAPC" --l1-size 4MiB --l2-size 256MiB --metadata-ttl 1h
fault_read "full LMDB map: files listed and cached before byte-exact" 60 "$MNT" --files "$CACHED" --require ok --rounds 2
fault_read "full LMDB map: a file of a directory never listed before byte-exact" 60 "$MNT" --files "$UNCACHED" --require ok --rounds 2
log "full map: l2.inserts=$(stat_of "$MNT" l2.inserts) insert.errors=$(stat_of "$MNT" insert.errors) l2.errors=$(stat_of "$MNT" l2.errors)"
umount_ok
}

run_scenario l2flip l2flip
run_scenario l3flip l3flip
run_scenario tmpfs tmpfs
run_scenario down down
run_scenario mapfull mapfull
scenarios_done
