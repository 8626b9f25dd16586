#!/usr/bin/env bash
# End-to-end: L3 authenticity (cache.l3_key_file) and `tierfs l3 gc` leaving foreign objects
# alone. Two s3rver instances on loopback: the origin and the L3 store.
#   1. host A, with a key, reads the dataset; every L3 object it wrote is version 2 (with a MAC);
#   2. someone with write access to the L3 bucket but not the key replaces two objects by
#      well-formed ones holding other bytes (right block key, valid XXH3 checksum): one unsigned
#      (version 1), one signed with another key. Host B, with the key, serves every byte exact,
#      counts both as corruptions, reads those blocks from the origin and writes them back signed;
#   3. a key file readable by group/others, or too short, stops the mount with a message naming
#      cache.l3_key_file (the key itself never appears in the output);
#   4. `tierfs l3 gc` deletes the (expired) tierfs blocks and leaves a foreign object under
#      blocks/ alone, reporting it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
e2e_dataset
BUCKET=tierfs-e2e
L3_BUCKET=tierfs-l3
L3_PREFIX=region-k
s3rver_start "$BUCKET" s3rver-origin
ORIGIN_ENDPOINT="$S3_ENDPOINT"
s3rver_start "$L3_BUCKET" s3rver-l3
L3_ENDPOINT="$S3_ENDPOINT"
S3_ENDPOINT="$ORIGIN_ENDPOINT"
s3_upload "$BUCKET"

KEY="$E2E_WORK/l3.key"
head -c 48 /dev/urandom | base64 -w0 >"$KEY"  # 64 printable bytes
chmod 600 "$KEY"
export TIERFS_E2E_L3_KEY=S3RVER TIERFS_E2E_L3_SECRET=S3RVER
write_config() {  # write_config FILE KEYFILE
  cat >"$1" <<EOF
[cache]
l3_access_key_id_env = "TIERFS_E2E_L3_KEY"
l3_secret_access_key_env = "TIERFS_E2E_L3_SECRET"
l3_write_queue = 4096
l3_key_file = "$2"
EOF
}
write_config "$E2E_WORK/tierfs.toml" "$KEY"
MOUNT_ARGS=(--endpoint "$ORIGIN_ENDPOINT" --config "$E2E_WORK/tierfs.toml"
  --l3 "s3://$L3_BUCKET/$L3_PREFIX" --l3-endpoint "$L3_ENDPOINT")

# l3py ARGS... <<'EOF': a Python snippet with boto3 client `s3` for the L3 store, bucket `B`,
# prefix `P` (".../blocks/"), and xxh3(bytes) from the system libxxhash.
l3py() {
  env -u AWS_CA_BUNDLE "$PY" -c '
import ctypes, hashlib, hmac, struct, sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="S3RVER",
                  aws_secret_access_key="S3RVER", region_name="us-east-1")
B, P = sys.argv[2], sys.argv[3]
_x = ctypes.CDLL("libxxhash.so.0")
_x.XXH3_64bits.restype = ctypes.c_uint64
_x.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
xxh3 = lambda b: _x.XXH3_64bits(b, len(b))
objs = lambda: [o for p in s3.get_paginator("list_objects_v2").paginate(Bucket=B, Prefix=P)
                for o in p.get("Contents", [])]
sys.argv = sys.argv[3:]
exec(sys.stdin.read())
' "$L3_ENDPOINT" "$L3_BUCKET" "$L3_PREFIX/blocks/" "$@"
}

# ---- 1. host A writes signed objects
host_mount a
step "host A: sha256 of every file (from the origin)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
wait_l3_drained "$MNT" 180
check_stats "$MNT" --gt l3.inserts=0 --eq l3.write.dropped=0 --eq l3.write.errors=0
grep -q "l3_mac=hmac-sha256" "$E2E_WORK/daemon-a.log" || fail "the start-up line does not say l3_mac=hmac-sha256"
grep -qF "$(cat "$KEY")" "$E2E_WORK/daemon-a.log" && fail "the key appears in the daemon log"
host_umount a
log "-> every L3 object is version 2 (with a MAC)"
l3py <<'EOF' || fail "L3 objects without a MAC"
all_ = objs()
v = [s3.get_object(Bucket=B, Key=o["Key"], Range="bytes=0-7")["Body"].read() for o in all_]
bad = [x for x in v if x[:4] != b"TFL3" or struct.unpack("<I", x[4:8])[0] != 2]
print("%d objects, %d not version 2" % (len(v), len(bad)))
sys.exit(0 if all_ and not bad else 1)
EOF

# ---- 2. poison from writers without the key
poisoned="$(l3py <<'EOF'
big = sorted((o for o in objs() if o["Size"] > 80 + 4096), key=lambda o: o["Key"])[:2]
out = []
for i, o in enumerate(big):
    body = s3.get_object(Bucket=B, Key=o["Key"])["Body"].read()
    length, = struct.unpack("<Q", body[8:16])
    key16 = body[32:48]
    data = b"P" * length
    fixed = b"TFL3" + struct.pack("<IQQQ", 1 if i == 0 else 2, length, xxh3(data), 1) + key16
    mac = b"" if i == 0 else hmac.new(b"another key, 32 bytes or more!!!", fixed + data, hashlib.sha256).digest()
    s3.put_object(Bucket=B, Key=o["Key"], Body=fixed + mac + data)
    out.append(o["Key"])
print(" ".join(out))
EOF
)" || fail "could not poison L3"
log "poisoned L3 objects (unsigned, other key): $poisoned"
host_mount b
step "host B: sha256 of every file (two L3 objects poisoned)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$MNT" "$MANIFEST"
check_stats "$MNT" --eq l3.corruptions=2 --gt l3.hits=0 --gt origin.requests=0
wait_l3_drained "$MNT" 60
host_umount b
log "-> the poisoned objects were rewritten signed"
l3py $poisoned <<'EOF' || fail "the poisoned objects were not rewritten signed"
for k in sys.argv[1:]:
    h = s3.get_object(Bucket=B, Key=k)["Body"].read()
    assert h[:4] == b"TFL3" and struct.unpack("<I", h[4:8])[0] == 2, k
    assert h[80:] != b"P" * (len(h) - 80), k
print("ok")
EOF

# ---- 3. unsafe key files stop the mount
refused() {  # refused NAME KEYFILE WHY
  write_config "$E2E_WORK/bad.toml" "$2"
  local out rc=0
  mkdir -p "$E2E_WORK/mnt-$1"
  E2E_MOUNTS+=("$E2E_WORK/mnt-$1")  # unmounted by the cleanup should the refusal not happen
  out="$(AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 timeout 30 \
    "$TIERFS" mount "s3://$BUCKET" "$E2E_WORK/mnt-$1" --cache-dir "$E2E_WORK/cache-$1" \
    --endpoint "$ORIGIN_ENDPOINT" --config "$E2E_WORK/bad.toml" --l3 "s3://$L3_BUCKET/$L3_PREFIX" \
    --l3-endpoint "$L3_ENDPOINT" -f 2>&1)" || rc=$?
  is_mounted "$E2E_WORK/mnt-$1" && fail "mounted with $1 key file"
  (( rc != 0 )) || fail "mount with a $1 key file succeeded"
  grep -q "cache.l3_key_file" <<<"$out" && grep -q "$3" <<<"$out" || fail "no clear error for a $1 key file: $out"
  grep -qF "$(cat "$2" 2>/dev/null || echo NOKEY)" <<<"$out" && fail "the key appears in the error"
  log "ok $1 key file refused: $out"
}
cp "$KEY" "$E2E_WORK/l3-group.key" && chmod 640 "$E2E_WORK/l3-group.key"
refused group "$E2E_WORK/l3-group.key" "group or others"
head -c 16 /dev/urandom | base64 -w0 >"$E2E_WORK/l3-short.key" && chmod 600 "$E2E_WORK/l3-short.key"
refused short "$E2E_WORK/l3-short.key" "at least 32"

# ---- 4. gc deletes only tierfs blocks
l3py <<'EOF'
s3.put_object(Bucket=B, Key=P + "README.txt", Body=b"not a block\n" * 10)
s3.put_object(Bucket=B, Key=P + "0123456789abcdef0123456789abcdef", Body=b"x" * 200)
EOF
sleep 2
gc_out="$(AWS_REGION=us-east-1 timeout 120 "$TIERFS" l3 gc --config "$E2E_WORK/tierfs.toml" \
  --l3 "s3://$L3_BUCKET/$L3_PREFIX" --l3-endpoint "$L3_ENDPOINT" --l3-ttl 1s 2>&1)" ||
  fail "tierfs l3 gc failed: $gc_out"
log "gc: $(tr '\n' ';' <<<"$gc_out")"
grep -q "left alone 2 objects" <<<"$gc_out" || fail "gc did not report the 2 foreign objects"
grep -q "remaining 0 blocks" <<<"$gc_out" || fail "gc did not delete every expired tierfs block"
log "-> gc left the foreign objects, deleted every tierfs block"
l3py <<'EOF' || fail "gc deleted a foreign object or left a tierfs block"
keys = sorted(o["Key"][len(P):] for o in objs())
print(keys)
sys.exit(0 if keys == ["0123456789abcdef0123456789abcdef", "README.txt"] else 1)
EOF
log "ok L3 authenticity and gc"
