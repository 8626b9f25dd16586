#!/usr/bin/env bash
# End-to-end: the regional L3 tier shared by two "hosts". Two s3rver instances on loopback: the
# origin (bucket tierfs-e2e) and the L3 store (bucket tierfs-l3), so L3 can be stopped alone.
#   1. host A (own L1/L2 cache dir) lists and reads the whole dataset from the origin; its L3
#      write-back (blocks and directory listings) drains (no write dropped);
#   2. host B (another cache dir, same origin and L3) lists every directory and reads all of it
#      byte-exact with zero origin LISTs (the listings come from L3) and zero origin block
#      requests; its df shows its own L2;
#   3. one L3 object is overwritten with wrong bytes (boto3): host C detects it by checksum,
#      reads that block from the origin, serves every byte exact, and rewrites the object;
#   4. the L3 server is stopped: host D still reads everything byte-exact from the origin.
# The L3 credentials are the tier's own (cache.l3_access_key_id_env / l3_secret_access_key_env).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
e2e_dataset
BUCKET=tierfs-e2e
L3_BUCKET=tierfs-l3
L3_PREFIX=region-1
s3rver_start "$BUCKET" s3rver-origin
ORIGIN_ENDPOINT="$S3_ENDPOINT"
s3rver_start "$L3_BUCKET" s3rver-l3
L3_ENDPOINT="$S3_ENDPOINT"
S3_ENDPOINT="$ORIGIN_ENDPOINT"
s3_upload "$BUCKET"

export TIERFS_E2E_L3_KEY=S3RVER TIERFS_E2E_L3_SECRET=S3RVER
cat >"$E2E_WORK/tierfs.toml" <<EOF
[cache]
l3_access_key_id_env = "TIERFS_E2E_L3_KEY"
l3_secret_access_key_env = "TIERFS_E2E_L3_SECRET"
# The whole test dataset fits in the queue, so host A's write-back drops nothing.
l3_write_queue = 4096
l3_ttl = "1d"
[metadata]
# Host B must find host A's listings younger than this (they are shared while fresh).
ttl = "1h"
EOF
MOUNT_ARGS=(--endpoint "$ORIGIN_ENDPOINT" --config "$E2E_WORK/tierfs.toml"
  --l3 "s3://$L3_BUCKET/$L3_PREFIX" --l3-endpoint "$L3_ENDPOINT")

# ---- 1. host A hydrates L3
host_mount a
t0=$SECONDS
step "host A: tree (find) equals the manifest" 120 "$PY" "$E2E_DIR/verify.py" tree "$MNT" "$MANIFEST"
step "host A: sha256 of every file (from the origin)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
log "host A read the dataset in $((SECONDS - t0)) s"
wait_l3_drained "$MNT" 180
check_stats "$MNT" --gt origin.requests=0 --gt l3.inserts=0 --eq l3.write.dropped=0 \
  --eq l3.write.errors=0 --eq l3.hits=0 --gt catalog.list_requests=0 --gt l3.listings.stored=0 \
  --eq l3.listings.hits=0
stats_a="$(stats_xattr "$MNT")"
n_dirs="$(stat_value "$stats_a" l3.listings.stored)"
lists_a="$(stat_value "$stats_a" catalog.list_requests)"
log "host A: $lists_a origin LIST pages for $n_dirs directories (stored to L3)"
host_umount a
n_objects="$(env -u AWS_CA_BUNDLE "$PY" - "$L3_ENDPOINT" "$L3_BUCKET" "$L3_PREFIX/blocks/" <<'EOF'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="S3RVER",
                  aws_secret_access_key="S3RVER", region_name="us-east-1")
n = 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[2], Prefix=sys.argv[3]):
    n += len(page.get("Contents", []))
print(n)
EOF
)"
log "L3 holds $n_objects block objects under $L3_PREFIX/blocks/"
(( n_objects > 0 )) || fail "no block objects in L3"

# ---- 2. host B reads everything from L3
host_mount b
t0=$SECONDS
step "host B: tree (find) equals the manifest (listings from L3)" 120 "$PY" "$E2E_DIR/verify.py" tree "$MNT" "$MANIFEST"
check_stats "$MNT" --eq catalog.list_requests=0 --eq catalog.listing_misses=0 \
  --eq "l3.listings.hits=$n_dirs" --eq l3.listings.rejected=0 --eq l3.listings.stored=0
log "ok host B: listed all $n_dirs directories with zero origin LISTs (host A: $lists_a)"
step "host B: sha256 of every file (from L3)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
log "host B read the dataset in $((SECONDS - t0)) s"
step "host B: pread at block boundaries" 180 "$PY" "$E2E_DIR/verify.py" ranges "$MNT" "$MANIFEST"
check_stats "$MNT" --eq origin.requests=0 --eq origin.bytes=0 --gt l3.hits=0 --eq l3.corruptions=0 \
  --eq l3.inserts=0 --eq catalog.list_requests=0
log "ok host B: zero origin block requests"
# df is this host's cache, L2, however much L3 holds (docs/semantics.md).
read -r df_blocks df_bsize < <(stat -f -c '%b %S' "$MNT")
l2_capacity="$(stat_value "$(stats_xattr "$MNT")" l2.capacity)"
(( df_blocks == l2_capacity / df_bsize )) ||
  fail "df of host B: $df_blocks blocks of $df_bsize, want l2.capacity=$l2_capacity"
log "ok df: $df_blocks blocks of $df_bsize bytes (L2)"
host_umount b

# ---- 3. a corrupted L3 object is detected and refetched
corrupt_out="$(env -u AWS_CA_BUNDLE "$PY" - "$L3_ENDPOINT" "$L3_BUCKET" "$L3_PREFIX/blocks/" \
  "$E2E_WORK/l3-original.bin" <<'EOF'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="S3RVER",
                  aws_secret_access_key="S3RVER", region_name="us-east-1")
bucket, prefix, save = sys.argv[2], sys.argv[3], sys.argv[4]
objs = [o for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in p.get("Contents", []) if o["Size"] > 48 + 4096]
key = sorted(objs, key=lambda o: o["Key"])[0]["Key"]
body = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
open(save, "wb").write(body)
body[48 + 1000] ^= 0xFF  # one payload byte: only the checksum can tell
s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
print(key)
EOF
)" || fail "could not corrupt an L3 object"
log "corrupted L3 object $corrupt_out (one payload byte flipped)"
host_mount c
step "host C: sha256 of every file (one L3 block corrupt)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
check_stats "$MNT" --eq l3.corruptions=1 --gt origin.requests=0 --gt l3.hits=0
wait_l3_drained "$MNT" 60
host_umount c
step "the corrupt L3 object was rewritten with the right bytes" 60 env -u AWS_CA_BUNDLE "$PY" - \
  "$L3_ENDPOINT" "$L3_BUCKET" "$corrupt_out" "$E2E_WORK/l3-original.bin" <<'EOF'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="S3RVER",
                  aws_secret_access_key="S3RVER", region_name="us-east-1")
now = s3.get_object(Bucket=sys.argv[2], Key=sys.argv[3])["Body"].read()
orig = open(sys.argv[4], "rb").read()
# Equal except the stored-at time (header bytes 24..31).
ok = len(now) == len(orig) and now[:24] == orig[:24] and now[32:] == orig[32:]
print("rewritten object %s the original" % ("matches" if ok else "DIFFERS from"))
sys.exit(0 if ok else 1)
EOF

# ---- 4. L3 down: reads come from the origin
"$E2E_ROOT/scripts/s3rver.sh" stop "$E2E_WORK/s3rver-l3" >/dev/null
log "L3 server stopped"
host_mount d
t0=$SECONDS
step "host D: sha256 of every file (L3 down)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
log "host D read the dataset in $((SECONDS - t0)) s with L3 down"
check_stats "$MNT" --gt origin.requests=0 --eq l3.hits=0 --gt l3.errors=0 --gt l3.breaker.trips=0
grep -q "does not answer" "$E2E_WORK/daemon-d.log" || fail "no warning about the unreachable L3 in the log"
host_umount d
log "ok L3 down: every read served by the origin"
