#!/usr/bin/env bash
# End-to-end deep prefetch: s3rver → upload the dataset → mount → `tierfs prefetch --tier l2
# --wait` of the whole tree (and setfattr on a directory) → user.tierfs.prefetch says done with
# the right totals → stop the origin server → every file reads byte-exact from the cache, with no
# origin request. Also times the prefetch (bytes/s in the log).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
e2e_init
e2e_dataset
BUCKET=tierfs-pf
s3rver_start "$BUCKET"
s3_upload "$BUCKET"

mnt="$E2E_WORK/mnt" cache="$E2E_WORK/cache" logf="$E2E_WORK/daemon.log"
# L1 smaller than the dataset: the reads after the origin is gone must come from L2.
pf_mount "s3://$BUCKET" "$mnt" "$cache" "$logf" --endpoint "$S3_ENDPOINT" \
  --l1-size 16MiB --l2-size 4GiB --metadata-ttl 1h

want_files="$("$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(len(m["files"]))' "$MANIFEST")"
want_bytes="$("$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(sum(f["size"] for f in m["files"].values()))' "$MANIFEST")"

# A sub-directory through setfattr first (the xattr interface), polled until done.
step "setfattr user.tierfs.prefetch=l2 on a directory" 20 setfattr -n user.tierfs.prefetch -v l2 "$mnt/small"
wait_prefetch "$mnt/small" done 120
v="$(xget "$mnt/small" user.tierfs.prefetch)"
[[ "$v" =~ ^state=done\ tier=l2\ files=([0-9]+)/([0-9]+)\ bytes=([0-9]+)/([0-9]+)$ ]] || fail "bad value: $v"
[[ "${BASH_REMATCH[1]}" == "${BASH_REMATCH[2]}" && "${BASH_REMATCH[3]}" == "${BASH_REMATCH[4]}" ]] ||
  fail "done but not complete: $v"
(( BASH_REMATCH[2] > 100 )) || fail "small/ should hold ~200 files: $v"

# The bulk list (user.tierfs.prefetch_list on the root): a set naming a missing file queues
# nothing (EINVAL); then every file outside small/ in two sets of one value each (the first over
# 4 KiB), listed in reverse order; the list job ends done with the right totals.
"$PY" - "$mnt" "$MANIFEST" <<'PYEOF' || fail "prefetch_list checks failed"
import errno, json, os, sys, time
mnt, man = sys.argv[1], json.load(open(sys.argv[2]))
files = sorted((p, f["size"]) for p, f in man["files"].items() if not p.startswith("small/"))
files.reverse()
name = "user.tierfs.prefetch_list"
def state():
    return os.getxattr(mnt, name).decode()
assert state().startswith("state=none"), state()
try:
    os.setxattr(mnt, name, b"tier=l2\n" + files[0][0].encode() + b"\nno/such/file.bin\n")
    sys.exit("a missing path was accepted")
except OSError as e:
    assert e.errno == errno.EINVAL, e
assert state().startswith("state=none"), state()
half = len(files) // 2
for part in (files[:half], files[half:]):
    value = ("tier=l2\n" + "".join("/" + p + "\n" for p, _ in part)).encode()
    os.setxattr(mnt, name, value)
assert len(("".join(p + "\n" for p, _ in files[:half])).encode()) > 4096 or len(files) < 60
total = sum(s for _, s in files)
want = f"state=done tier=l2 files={len(files)}/{len(files)} bytes={total}/{total}"
deadline = time.time() + 120
while state() != want:
    assert time.time() < deadline, f"list job: {state()}, want {want}"
    time.sleep(0.2)
assert name in os.listxattr(mnt), os.listxattr(mnt)
os.setxattr(mnt, name, b"cancel")  # nothing queued: fine
print(f"prefetch_list: {len(files)} files, {total} bytes done")
PYEOF
v="$(xget "$mnt/blocks/big_100MiB.bin" user.tierfs.residency)"
[[ "$v" == *"l2=100/100"* ]] || fail "listed big_100MiB.bin residency: $v"

# The same through the CLI: `--from-file` (paths relative to the working directory, or stdin).
printf 'l1/top.bin\nnames/with space.bin\n\n' >"$E2E_WORK/list.txt"
step "tierfs prefetch --wait --from-file" 60 \
  bash -c 'cd "$1" && "$2" prefetch --tier l2 --wait --from-file "$3"' _ "$mnt" "$TIERFS" "$E2E_WORK/list.txt"
v="$(xget "$mnt" user.tierfs.prefetch_list)"
[[ "$v" == "state=done tier=l2 files=2/2 bytes=4234/4234" ]] || fail "--from-file list job: $v"
rc=0; printf '%s\n' "$mnt/l1/nope.bin" | "$TIERFS" prefetch --from-file - >/dev/null 2>&1 || rc=$?
[[ "$rc" == 1 ]] || fail "tierfs prefetch --from-file with a missing file: exit $rc, want 1"
rc=0; printf '/etc/hostname\n' | "$TIERFS" prefetch --from-file - >/dev/null 2>&1 || rc=$?
[[ "$rc" == 2 ]] || fail "tierfs prefetch --from-file off tierfs: exit $rc, want 2"

# The whole tree through the CLI, timed.
t0=$(date +%s.%N)
step "tierfs prefetch --tier l2 --wait (whole mount)" 600 "$TIERFS" prefetch --tier l2 --wait "$mnt"
t1=$(date +%s.%N)
v="$(xget "$mnt" user.tierfs.prefetch)"
log "root job: $v"
[[ "$v" == "state=done tier=l2 files=$want_files/$want_files bytes=$want_bytes/$want_bytes" ]] ||
  fail "root job: '$v', want files=$want_files bytes=$want_bytes"
log "prefetch of $want_bytes bytes in $want_files files took $(echo "$t1 - $t0" | bc) s"

# Residency of a multi-block file: every block in L2.
v="$(xget "$mnt/blocks/big_100MiB.bin" user.tierfs.residency)"
[[ "$v" == *"l2=100/100"* ]] || fail "big_100MiB.bin residency: $v"

before="$(stat_of "$mnt" origin.requests)"
step "stop the origin server" 30 "$E2E_ROOT/scripts/s3rver.sh" stop "$E2E_WORK/s3rver"
step "tree equals the manifest (origin down)" 120 "$PY" "$E2E_DIR/verify.py" tree "$mnt" "$MANIFEST"
step "sha256 of every file (origin down)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$mnt" "$MANIFEST"
after="$(stat_of "$mnt" origin.requests)"
[[ "$before" == "$after" ]] || fail "origin.requests went from $before to $after with the origin down"
log "ok no origin request after the prefetch (origin.requests=$after)"

# CLI exit codes: a bad tier is a usage error; cancel without a job fails.
rc=0; "$TIERFS" prefetch --tier l9 "$mnt" >/dev/null 2>&1 || rc=$?
[[ "$rc" == 2 ]] || fail "tierfs prefetch --tier l9: exit $rc, want 2"
rc=0; "$TIERFS" prefetch --tier l3 "$mnt/small" >/dev/null 2>&1 || rc=$?
[[ "$rc" == 1 ]] || fail "tierfs prefetch --tier l3 without an L3: exit $rc, want 1"

tierfs_umount "$mnt" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
