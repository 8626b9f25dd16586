#!/usr/bin/env bash
# End-to-end: s3rver on loopback → upload the generated dataset → mount s3://BUCKET with tierfs
# through /dev/fuse → tree, bytes, concurrency, EROFS/ENOENT, xattrs, stats → unmount → remount on
# the same cache dir and check that no byte comes from the origin.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
e2e_dataset
BUCKET=tierfs-e2e
s3rver_start "$BUCKET"
s3_upload "$BUCKET"
mount_cycle "s3://$BUCKET" --endpoint "$S3_ENDPOINT"

# ---- dataset manifests: create one from s3rver, mount with it (stored as an object,
# through a counting proxy): the tree of the manifest, bytes exact, zero LIST and HEAD at the
# origin; an object overwritten behind it reads as ESTALE (every time); diff of two manifests;
# a damaged manifest fails the mount naming the file.
# s3_put_file FILE KEY: one PUT to s3rver (curl signs it; no Python start-up on a loaded machine).
s3_put_file() {
  local key
  key="$("$PY" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$2")"
  timeout -k 2 30 curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$1" "$S3_ENDPOINT/$BUCKET/$key" >/dev/null ||
    fail "PUT of $2 failed"
}
manifest_checks() {
  local m1="$E2E_WORK/v1.tfm" m2="$E2E_WORK/v2.tfm" mnt="$E2E_WORK/mmnt" cache="$E2E_WORK/mcache"
  local out sum got req files victim vsize pid rc
  e2e_cred_env
  out="$(env "${E2E_ENV[@]}" "$TIERFS" manifest create "s3://$BUCKET" -o "$m1" \
    --endpoint "$S3_ENDPOINT" 2>&1)" || fail "manifest create failed: $out"
  log "manifest create: $out"
  sum="$(sed -n 's/.*checksum \([0-9a-f]\{32\}\).*/\1/p' <<<"$out")"
  [[ -n "$sum" ]] || fail "manifest create printed no checksum"
  # Stored beside the dataset after the listing: not in the manifest, so not in the mounted tree.
  s3_put_file "$m1" manifests/v1.tfm
  fault_proxy_start morigin "$S3_PORT"
  # No next-file prefetch: the file overwritten below must not be cached before it is.
  printf '[cache]\nprefetch_next_files = 0\n' >"$E2E_WORK/manifest.toml"
  tierfs_mount "s3://$BUCKET" "$mnt" "$cache" "$E2E_WORK/mdaemon.log" --endpoint "$PROXY_ENDPOINT" \
    --manifest "s3://$BUCKET/manifests/v1.tfm" --config "$E2E_WORK/manifest.toml"
  pid=$TIERFS_PID
  step "manifest mount: tree (find) equals the dataset" 60 "$PY" "$E2E_DIR/verify.py" tree "$mnt" "$MANIFEST"
  # Four files compared byte for byte with the originals; the fifth is overwritten below.
  mapfile -t files < <("$PY" -c 'import json,sys
m = json.load(open(sys.argv[1]))["files"]
for k in sorted(k for k, v in m.items() if v["size"] > 0)[:5]: print(k)' "$MANIFEST")
  (( ${#files[@]} == 5 )) || fail "dataset has fewer than 5 files"
  for f in "${files[@]:0:4}"; do
    cmp "$DATASET/$f" "$mnt/$f" || fail "manifest mount: $f differs"
  done
  got="$(getfattr --only-values --absolute-names -n user.tierfs.manifest "$mnt")" ||
    fail "getfattr user.tierfs.manifest failed"
  [[ "$got" == "$sum" ]] || fail "user.tierfs.manifest is '$got', want '$sum'"
  getfattr --absolute-names -d -m user.tierfs "$mnt" | grep -q '^user.tierfs.manifest=' ||
    fail "listxattr of the root does not list user.tierfs.manifest"
  victim="${files[4]}"
  vsize="$(stat -c %s "$DATASET/$victim")"
  head -c "$vsize" /dev/urandom >"$E2E_WORK/victim.v2"
  s3_put_file "$E2E_WORK/victim.v2" "$victim"
  for i in 1 2; do
    if out="$(cat "$mnt/$victim" 2>&1 >/dev/null)"; then
      fail "read $i of $victim, overwritten after the manifest, succeeded"
    fi
    [[ "$out" == *"Stale file handle"* ]] || fail "read $i of $victim: '$out', want ESTALE"
  done
  log "ok $victim, overwritten at the origin, reads as ESTALE (twice)"
  req="$(curl -sf "$PROXY_ENDPOINT/__fault__")" || fail "proxy counters unreadable"
  log "origin requests through the proxy: $req"
  "$PY" -c 'import json,sys
r = json.loads(sys.argv[1])["requests"]
bad = {k: r.get(k, 0) for k in ("list", "head") if r.get(k, 0)}
assert not bad, "LIST/HEAD sent to the origin: %s" % bad
assert r.get("get", 0) + r.get("range", 0) > 0, "no GET at all: %s" % r' "$req" ||
    fail "the manifest mount sent LIST or HEAD requests"
  log "ok zero LIST and HEAD requests at the origin"
  tierfs_umount "$mnt" "$pid" || { print_log_tail "$E2E_WORK/mdaemon.log"; fail "unclean unmount"; }

  out="$(env "${E2E_ENV[@]}" "$TIERFS" manifest create "s3://$BUCKET" -o "$m2" \
    --endpoint "$S3_ENDPOINT" 2>&1)" || fail "second manifest create failed: $out"
  rc=0
  out="$("$TIERFS" manifest diff "$m1" "$m2")" || rc=$?
  log "manifest diff: $out"
  [[ "$rc" == 1 ]] || fail "manifest diff of different manifests exited $rc, want 1"
  grep -qF -- "~ $victim " <<<"$out" || fail "diff does not show $victim as changed"
  grep -qF -- "+ manifests/v1.tfm " <<<"$out" || fail "diff does not show manifests/v1.tfm as added"
  "$TIERFS" manifest diff -q "$m1" "$m1" || fail "manifest diff of one manifest with itself is not 0"

  head -c 100 "$m1" >"$E2E_WORK/cut.tfm"
  mkdir -p "$E2E_WORK/mmnt2"
  E2E_MOUNTS+=("$E2E_WORK/mmnt2")
  rc=0
  out="$(env "${E2E_ENV[@]}" "$TIERFS" mount "s3://$BUCKET" "$E2E_WORK/mmnt2" --cache-dir "$cache" \
    --endpoint "$S3_ENDPOINT" --manifest "$E2E_WORK/cut.tfm" 2>&1)" || rc=$?
  [[ "$rc" != 0 ]] || fail "a mount with a truncated manifest succeeded"
  [[ "$out" == *"cut.tfm"*"truncated"* ]] || fail "truncated manifest: unclear error '$out'"
  log "ok a truncated manifest fails the mount: $out"
}
manifest_checks
