#!/usr/bin/env bash
# End-to-end: mount a local directory (file:///DIR) with tierfs through /dev/fuse → tree, bytes,
# concurrency, EROFS/ENOENT, xattrs, stats → unmount → remount on the same cache dir and check that
# no byte comes from the origin. Then the daemonized mode (no -f): mount, read, unmount, exit.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
e2e_dataset
mount_cycle "file://$DATASET"

# Daemonized (the default without -f): the command returns, the mount stays until unmounted, and
# the daemon exits by itself after fusermount3 -u.
mnt="$E2E_WORK/mnt-daemon"
mkdir -p "$mnt"
log "-> daemonized mount (no -f)"
E2E_MOUNTS+=("$mnt")
E2E_PIDS+=("")
timeout -k 5 "$MOUNT_TIMEOUT" "$TIERFS" mount "file://$DATASET" "$mnt" --cache-dir "$E2E_WORK/cache-d" \
  --l1-size 64MiB --l2-size 1GiB --log-file "$E2E_WORK/daemon-d.log" >"$E2E_WORK/mount-d.out" 2>&1 ||
  { cat "$E2E_WORK/mount-d.out"; fail "tierfs mount (daemonized) failed"; }
deadline=$((SECONDS + MOUNT_TIMEOUT))
until is_mounted "$mnt"; do
  (( SECONDS < deadline )) || fail "daemonized mount did not appear within ${MOUNT_TIMEOUT}s"
  sleep 0.1
done
# The daemon's PID: the tierfs process whose arguments name this (unique, temporary) mountpoint.
dpid=""
for f in $(grep -lzxF -- "$mnt" /proc/[0-9]*/cmdline 2>/dev/null); do
  p="${f%/cmdline}"
  if [[ "$(readlink "$p/exe" 2>/dev/null)" == "$(readlink -f "$TIERFS")" ]]; then
    dpid="${p#/proc/}"
  fi
done
E2E_PIDS[${#E2E_PIDS[@]}-1]="$dpid"
log "daemonized tierfs pid: ${dpid:-not found}"
step "sha256 of every file (daemonized)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$mnt" "$MANIFEST"
timeout -k 2 "$UMOUNT_TIMEOUT" fusermount3 -u "$mnt" || fail "fusermount3 -u $mnt failed"
if [[ -n "$dpid" ]]; then
  wait_pid_exit "$dpid" "$UMOUNT_TIMEOUT" || fail "daemonized tierfs (pid $dpid) still running after unmount"
fi
log "ok daemonized mount unmounted, daemon exited"

# A damaged metadata store (what a power loss under MDB_NOSYNC can leave) costs a cold cache,
# never the mount: the daemon moves it aside, starts an empty index, and the L2 sweep drops the
# block files it no longer knows.
meta="$E2E_WORK/cache-d/meta"
[[ -f "$meta/data.mdb" ]] || fail "no metadata store at $meta"
dd if=/dev/urandom of="$meta/data.mdb" bs=4096 count=2 conv=notrunc status=none
# This mount also has the kernel handle opens (fuse.open_in_kernel): every byte is still right,
# and only the first open reaches the daemon (answered ENOSYS).
mnt="$E2E_WORK/mnt-recover" logf="$E2E_WORK/daemon-recover.log"
printf '[fuse]\nopen_in_kernel = true\n' >"$E2E_WORK/open-in-kernel.toml"
tierfs_mount "file://$DATASET" "$mnt" "$E2E_WORK/cache-d" "$logf" --config "$E2E_WORK/open-in-kernel.toml"
grep -q "is damaged" "$logf" || { print_log_tail "$logf"; fail "no log line about the damaged store"; }
[[ -d "$meta.corrupt" ]] || fail "the damaged store was not kept aside at $meta.corrupt"
step "sha256 of every file (after recovering the store)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$mnt" "$MANIFEST"
if grep -q "opens in the kernel true" "$logf"; then
  check_stats "$mnt" --eq fuse.opens=1 --gt fuse.reads=0
  log "ok opens in the kernel: one open request for the whole dataset"
else
  log "opens in the kernel not offered by this kernel: skipped"
fi
tierfs_umount "$mnt" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
log "ok a damaged metadata store was moved aside and the mount served every byte"

# cache.l1_prefault: L1's memory is faulted in at start by a thread of idle priority and stays
# resident (the daemon's RSS is L1's budget before any read), every byte is still right, and an
# unmount in the middle of a larger prefault stops it (the daemon exits in time).
printf '[cache]\nl1_prefault = true\n' >"$E2E_WORK/prefault.toml"
mnt="$E2E_WORK/mnt-prefault" logf="$E2E_WORK/daemon-prefault.log"
tierfs_mount "file://$DATASET" "$mnt" "$E2E_WORK/cache-prefault" "$logf" --l1-size 32MiB \
  --config "$E2E_WORK/prefault.toml"
# (Idle priority: on a machine kept busy by the other tests this takes longer than its 0.1 s.)
deadline=$((SECONDS + 120))
until grep -q "L1 memory faulted in: 32MiB" "$logf"; do
  (( SECONDS < deadline )) || { print_log_tail "$logf"; fail "L1's 32 MiB not faulted in within 120s"; }
  sleep 0.2
done
rss_kib="$(awk '/^VmRSS:/ {print $2}' "/proc/$TIERFS_PID/status")"
(( rss_kib >= 32 * 1024 )) || fail "daemon RSS ${rss_kib} KiB after faulting in a 32 MiB L1"
check_stats "$mnt" --gt blocks.pool_free_bytes=33554431
step "sha256 of every file (L1 prefaulted)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$mnt" "$MANIFEST"
tierfs_umount "$mnt" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
mnt="$E2E_WORK/mnt-prefault-stop" logf="$E2E_WORK/daemon-prefault-stop.log"
tierfs_mount "file://$DATASET" "$mnt" "$E2E_WORK/cache-prefault-stop" "$logf" --l1-size 8GiB \
  --config "$E2E_WORK/prefault.toml"
tierfs_umount "$mnt" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount during a prefault"; }
if grep -q "L1 memory faulted in: 8GiB" "$logf"; then fail "the prefault was not stopped by the unmount"; fi
log "ok L1 prefaulted at start (RSS ${rss_kib} KiB), bytes right; an unmount stops a prefault"

# A directory of 20,000 files (dataset scale): listed completely and every entry
# stat'able, its 20 pages of 1,000 names served from one walk of the origin directory.
wide="$E2E_WORK/wide"
mkdir -p "$wide/big"
"$PY" -c 'import os, sys
d = sys.argv[1]
for i in range(20000):
    os.close(os.open(f"{d}/f{i:06d}.jpg", os.O_WRONLY | os.O_CREAT, 0o644))' "$wide/big"
mnt="$E2E_WORK/mnt-wide" logf="$E2E_WORK/daemon-wide.log"
tierfs_mount "file://$wide" "$mnt" "$E2E_WORK/cache-wide" "$logf"
n="$(timeout 60 find "$mnt/big" -type f -printf '%s\n' | wc -l)"
[[ $n == 20000 ]] || fail "listed $n of 20000 files in a wide directory"
(cd "$mnt/big" && timeout 60 stat -c %s f000000.jpg f019999.jpg f010000.jpg >/dev/null) ||
  fail "files of the wide directory are not stat'able"
check_stats "$mnt" --eq catalog.list_requests=21 --eq catalog.listing_misses=2
tierfs_umount "$mnt" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
log "ok a directory of 20,000 files listed completely in 20 pages"
