#!/usr/bin/env bash
# End-to-end: L3 in a pool of three memcached servers (--l3 memcached://HOST:PORT,...), spare
# host memory shared by the hosts of a region. s3rver on loopback is the origin.
#   1. host A (own cache dir) reads the dataset (20 files of 4 MiB) from the origin; its L3
#      write-back (blocks and listings, as memcached items) drains with no write dropped;
#   2. host B (another cache dir) reads it all byte-exact with zero origin requests (blocks and
#      directory listings come from memcached);
#   3. host C reads it while one of the three servers is killed (by its PID) a third of the way
#      through: every read succeeds byte-exact, the L3 circuit never opens, and the origin serves
#      only about the dead server's share;
#   4. `tierfs l3 gc` says a memcached L3 needs none; --l3-endpoint with memcached is refused.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
if ! command -v memcached >/dev/null 2>&1; then
  log "SKIP: memcached is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
BUCKET=tierfs-e2e
N_FILES=20
FILE_MIB=4

# ---- the dataset: deterministic bytes, the manifest format of gen_dataset.py
DATASET="$E2E_WORK/dataset"
MANIFEST="$E2E_WORK/manifest.json"
step "generate dataset ($N_FILES files of $FILE_MIB MiB)" 60 "$PY" - "$DATASET" "$MANIFEST" \
  "$N_FILES" "$FILE_MIB" <<'EOF'
import hashlib, json, os, random, sys
out, manifest, n, mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(os.path.join(out, "mc"), exist_ok=True)
files = {}
for i in range(n):
    rel = "mc/shard-%03d.bin" % i
    data = random.Random(i).randbytes(mib << 20)
    with open(os.path.join(out, rel), "wb") as f:
        f.write(data)
    files[rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
json.dump({"files": files, "dirs": ["mc"], "markers": []}, open(manifest, "w"))
EOF
s3rver_start "$BUCKET"
s3_upload "$BUCKET"

# ---- three memcached servers on loopback, items up to 16 MiB (blocks are 1 MiB + header)
MC_PIDS=()
MC_PORTS=()
for i in 0 1 2; do
  port="$(free_port)"
  memcached -l 127.0.0.1 -p "$port" -U 0 -I 16m -m 256 -u nobody >"$E2E_WORK/memcached-$i.log" 2>&1 &
  MC_PIDS+=($!)
  E2E_BG_PIDS+=($!)
  MC_PORTS+=("$port")
done
for i in 0 1 2; do
  step "memcached $i answers on 127.0.0.1:${MC_PORTS[$i]} (pid ${MC_PIDS[$i]})" 20 "$PY" - \
    "${MC_PORTS[$i]}" <<'EOF'
import socket, sys, time
deadline = time.monotonic() + 15
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("memcached does not answer")
        time.sleep(0.05)
EOF
done
POOL="memcached://127.0.0.1:${MC_PORTS[0]},127.0.0.1:${MC_PORTS[1]},127.0.0.1:${MC_PORTS[2]}"

cat >"$E2E_WORK/tierfs.toml" <<EOF
[cache]
# The whole dataset fits in the queue, so host A's write-back drops nothing.
l3_write_queue = 4096
l3_ttl = "1d"
[metadata]
# Host B must find host A's listings younger than this (they are shared while fresh).
ttl = "1h"
EOF
MOUNT_ARGS=(--endpoint "$S3_ENDPOINT" --config "$E2E_WORK/tierfs.toml" --l3 "$POOL")

# ---- 1. host A hydrates the pool
host_mount a
step "host A: sha256 of every file (from the origin)" 120 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
wait_l3_drained "$MNT" 60
check_stats "$MNT" --gt origin.requests=0 --gt l3.inserts=0 --eq l3.write.dropped=0 \
  --eq l3.write.errors=0 --eq l3.hits=0 --gt l3.listings.stored=0
host_umount a

# ---- 2. host B reads everything from memcached
host_mount b
step "host B: sha256 of every file (from memcached)" 120 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
check_stats "$MNT" --eq origin.requests=0 --eq origin.bytes=0 --gt l3.hits=0 --eq l3.corruptions=0 \
  --eq l3.misses=0 --eq catalog.list_requests=0 --gt l3.listings.hits=0
log "ok host B: every block and listing from memcached, zero origin requests"
host_umount b

# ---- 3. host C reads while one memcached server dies
# No readahead and no next-file prefetch on host C: each block is fetched when read, so the
# files read after the kill really are read after it (with prefetch the whole 80 MiB is
# hydrated in well under a second).
sed -e 's/^\[cache\]$/[cache]\nprefetch_threads = 0\nprefetch_next_files = 0\nrandom_hydrate_misses = 0/' \
  "$E2E_WORK/tierfs.toml" >"$E2E_WORK/tierfs-c.toml"
MOUNT_ARGS=(--endpoint "$S3_ENDPOINT" --config "$E2E_WORK/tierfs-c.toml" --l3 "$POOL")
host_mount c
victim=1
step "host C: sha256 of every file, memcached $victim (pid ${MC_PIDS[$victim]}) killed mid-read" 120 \
  "$PY" - "$MNT" "$MANIFEST" "${MC_PIDS[$victim]}" <<'EOF'
import hashlib, json, os, signal, sys, time
mnt, manifest, victim = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
files = sorted(manifest["files"].items())
errors, killed_after = [], len(files) // 3
for i, (rel, meta) in enumerate(files):
    if i == killed_after:
        os.kill(victim, signal.SIGKILL)
        print("killed memcached pid %d after %d of %d files" % (victim, i, len(files)))
    time.sleep(0.05)  # a reader that takes its time: the kill lands mid-read
    h, n = hashlib.sha256(), 0
    try:
        with open(os.path.join(mnt, rel), "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                n += len(chunk)
    except OSError as e:
        errors.append("%s: %s" % (rel, e))
        continue
    if n != meta["size"] or h.hexdigest() != meta["sha256"]:
        errors.append("%s: %d bytes sha256 %s, want %d bytes %s" % (
            rel, n, h.hexdigest()[:16], meta["size"], meta["sha256"][:16]))
for e in errors:
    print("FAIL", e)
print("%d files read, %d failed" % (len(files), len(errors)))
sys.exit(1 if errors else 0)
EOF
wait_pid_exit "${MC_PIDS[$victim]}" 5 || fail "memcached $victim did not die"
stats_c="$(stats_xattr "$MNT")"
total=$((N_FILES * FILE_MIB * 1048576))
origin_bytes="$(stat_value "$stats_c" origin.bytes)"
l3_hits="$(stat_value "$stats_c" l3.hits)"
log "host C: origin served $origin_bytes of $total bytes ($((origin_bytes * 100 / total))%), l3.hits=$l3_hits"
check_stats "$MNT" --gt origin.bytes=0 --gt l3.hits=0 --eq l3.breaker.trips=0 --eq l3.corruptions=0
# The dead server held about a third of the blocks, and only those read after its death (two
# thirds of the dataset) miss: about 2/9 of the bytes; half is a generous bound.
(( origin_bytes * 2 <= total )) || fail "origin served $origin_bytes of $total bytes: more than the dead server's share"
grep -q "memcached: server 127.0.0.1:${MC_PORTS[$victim]} failed" "$E2E_WORK/daemon-c.log" ||
  fail "no log line about the dead server"
host_umount c
log "ok one of three memcached servers died under a running read: zero failed reads"

# ---- 4. the CLI around a memcached L3
out="$(timeout -k 2 20 "$TIERFS" l3 gc --l3 "$POOL")" || fail "tierfs l3 gc failed: $out"
[[ "$out" == *"no gc is needed"* ]] || fail "tierfs l3 gc: '$out'"
log "ok tierfs l3 gc: $out"
rc=0
mkdir -p "$E2E_WORK/mnt-x"
err="$(timeout -k 2 20 "$TIERFS" mount "s3://$BUCKET" "$E2E_WORK/mnt-x" --cache-dir "$E2E_WORK/cache-x" \
  --endpoint "$S3_ENDPOINT" --l3 "$POOL" --l3-endpoint http://127.0.0.1:1 -f 2>&1)" || rc=$?
(( rc != 0 )) || fail "--l3-endpoint with a memcached L3 was accepted"
[[ "$err" == *"not used with a memcached L3"* ]] || fail "--l3-endpoint with memcached: '$err'"
log "ok --l3-endpoint with memcached refused: $(head -n 1 <<<"$err")"
