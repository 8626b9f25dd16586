#!/usr/bin/env bash
# End-to-end: where a mount may go.
#   * a directory that holds files is refused ("is not empty (it holds 'keep.txt')"), exit 2,
#     nothing mounted; with -o nonempty it mounts, hides the file while mounted, and the file is
#     there again after the unmount;
#   * a mount point that is already one is refused, even with -o nonempty: over a live tierfs
#     mount the message names that daemon's PID, the first mount keeps serving and is the only
#     one there; over a tmpfs it names the file system type.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
W="$E2E_WORK"
src="$W/src"
mkdir -p "$src/d"
head -c 300000 /dev/urandom >"$src/d/one.bin"

# try_mount NAME MNT [ARGS...]: a daemonized mount; sets RC and OUT (its output).
try_mount() {
  local name="$1" mnt="$2"
  shift 2
  E2E_MOUNTS+=("$mnt")  # unmounted by the cleanup should it mount after all
  E2E_PIDS+=("")
  RC=0
  timeout -k 2 60 "$TIERFS" mount "file://$src" "$mnt" --cache-dir "$W/c-$name" --l1-size 64MiB \
    --l2-size 256MiB --log-file "$W/$name.log" "$@" >"$W/$name.out" 2>&1 </dev/null || RC=$?
  OUT="$(cat "$W/$name.out")"
}
mounts_at() { awk -v d="$1" '$5 == d' /proc/self/mountinfo | wc -l; }

# 1. A directory that holds a file.
mnt="$W/full"
mkdir -p "$mnt"
echo keep >"$mnt/keep.txt"
try_mount nonempty "$mnt"
is_mounted "$mnt" && fail "mounted over $mnt, which holds keep.txt"
[[ $RC == 2 && "$OUT" == *"MOUNTPOINT $mnt is not empty (it holds 'keep.txt')"*"-o nonempty"* ]] ||
  fail "non-empty mount point: rc $RC, $OUT"
log "ok refused: $OUT"

tierfs_mount "file://$src" "$mnt" "$W/c-full" "$W/full.log" -o nonempty
pid=$TIERFS_PID
cmp "$src/d/one.bin" "$mnt/d/one.bin" || fail "d/one.bin differs (-o nonempty)"
[[ ! -e "$mnt/keep.txt" ]] || fail "keep.txt shows through the mount"
tierfs_umount "$mnt" "$pid" || fail "unclean unmount"
[[ "$(cat "$mnt/keep.txt")" == keep ]] || fail "keep.txt is gone after the unmount"
log "ok -o nonempty mounts over it; keep.txt is back after the unmount"

# 2. Over a live tierfs mount, with and without -o nonempty.
mnt="$W/mnt"
tierfs_mount "file://$src" "$mnt" "$W/c-first" "$W/first.log"
pid=$TIERFS_PID
for opt in "" nonempty; do
  try_mount "second${opt:+-$opt}" "$mnt" ${opt:+-o "$opt"}
  [[ $RC == 2 && "$OUT" == *"MOUNTPOINT $mnt is already a mount point (tierfs pid $pid, tierfs:file://$src); unmount it first"* ]] ||
    fail "mount over a live mount${opt:+ with -o $opt}: rc $RC, $OUT"
  (( "$(mounts_at "$mnt")" == 1 )) || fail "$(mounts_at "$mnt") mounts at $mnt"
  log "ok refused${opt:+ with -o $opt}: $OUT"
done
cmp "$src/d/one.bin" "$mnt/d/one.bin" || fail "the first mount stopped serving"
tierfs_umount "$mnt" "$pid" || fail "unclean unmount"

# 3. Over a tmpfs: the tmpfs is unmounted right after the attempt (and a tierfs mount on top of
#    it first, should there be one).
tmnt="$W/tmpfs"
mkdir -p "$tmnt"
mount -t tmpfs -o size=1m tierfs-test "$tmnt"
try_mount tmpfs "$tmnt" -o nonempty
while [[ "$(awk -v d="$tmnt" '$5 == d { t = $9 } END { print t }' /proc/self/mountinfo)" == fuse.tierfs ]]; do
  timeout -k 2 10 fusermount3 -u -z "$tmnt" || break
done
umount "$tmnt"
[[ $RC == 2 && "$OUT" == *"MOUNTPOINT $tmnt is already a mount point (fstype tmpfs, tierfs-test)"* ]] ||
  fail "mount over a tmpfs: rc $RC, $OUT"
log "ok refused: $OUT"
log "PASS"
