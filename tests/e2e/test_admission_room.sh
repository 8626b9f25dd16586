#!/usr/bin/env bash
# End-to-end: L2 admission stores what it can store without evicting (probationary blocks).
#   1. A file of more than 10% of L2 (a scan for admission) read once through /dev/fuse, the mount
#      unmounted and mounted again on the same cache (L1 and the page cache empty), read again:
#      every byte comes from L2, the second mount sends the origin nothing.
#   2. A hot set read first (protected), then a scan of 4x L2 (probationary: it may take only free
#      room and its own blocks' room) with an 8 MiB L1, fetched once (at most 1.05x its bytes);
#      remounted, the hot set is read without the origin.
# Every byte is checked against the origin.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init

src="$E2E_WORK/src"
mkdir -p "$src/hot" "$src/scan"
head -c $((110 << 20)) /dev/urandom >"$src/once.bin"  # 10.7% of a 1 GiB L2: a scan
for i in 1 2 3 4 5 6 7 8; do head -c $((4 << 20)) /dev/urandom >"$src/hot/h$i"; done  # 32 MiB
for i in 1 2 3 4; do head -c $((64 << 20)) /dev/urandom >"$src/scan/s$i"; done   # 4 x a 64 MiB L2

origin_requests() { stat_value "$(stats_xattr "$1")" origin.requests; }
check_bytes() {  # MNT FILE...: each file through MNT equals the origin's
  local mnt="$1" f
  shift
  for f in "$@"; do cmp -s "$mnt/$f" "$src/$f" || fail "$f read through $mnt differs from the origin"; done
}

# ---- 1. read once with room in L2 ----
mnt="$E2E_WORK/mnt1" cache="$E2E_WORK/cache1" logf="$E2E_WORK/daemon1.log"
# (L1 larger than the file: readahead's blocks wait there for the reader, none is fetched twice.)
tierfs_mount "file://$src" "$mnt" "$cache" "$logf" --l1-size 256MiB --l2-size 1GiB
check_bytes "$mnt" once.bin
stats="$(stats_xattr "$mnt")"
(( $(stat_value "$stats" admit.scans) >= 1 )) || fail "once.bin was not taken for a scan: $stats"
(( $(stat_value "$stats" origin.bytes) <= (110 << 20) * 105 / 100 )) ||
  fail "the first read fetched $(stat_value "$stats" origin.bytes) bytes for a 110 MiB file"
# Blocks reach L2 after the reply that needed them (L1 first): wait for the last ones.
deadline=$((SECONDS + 30))
until [[ "$(xattr_of "$mnt/once.bin" user.tierfs.residency)" == *"l2=110/110"* ]]; do
  (( SECONDS < deadline )) || break  # the second read tells what L2 kept
  sleep 0.1
done
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
tierfs_mount "file://$src" "$mnt" "$cache" "$logf" --l1-size 256MiB --l2-size 1GiB
check_bytes "$mnt" once.bin
got="$(origin_requests "$mnt")"
(( got == 0 )) || fail "the second read of once.bin sent $got requests to the origin, want 0"
log "ok a scan of 10.7% of L2 read once is in L2: the second read sent the origin nothing"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"

# ---- 2. a hot set survives a scan of 4x L2 ----
mnt="$E2E_WORK/mnt2" cache="$E2E_WORK/cache2" logf="$E2E_WORK/daemon2.log"
tierfs_mount "file://$src" "$mnt" "$cache" "$logf" --l1-size 8MiB --l2-size 64MiB
check_bytes "$mnt" hot/h{1..8}
for i in 1 2 3 4 5 6 7 8; do wait_residency "$mnt/hot/h$i" "l2=4/4"; done
o0="$(stat_value "$(stats_xattr "$mnt")" origin.bytes)"
check_bytes "$mnt" scan/s{1..4}
stats="$(stats_xattr "$mnt")"
(( $(stat_value "$stats" admit.scans) >= 4 )) || fail "the scan files were not taken for scans: $stats"
# Readahead fetches no further ahead than L1 keeps: no block of the scan is fetched twice.
ob=$(( $(stat_value "$stats" origin.bytes) - o0 ))
(( ob <= (256 << 20) * 105 / 100 )) || fail "the 256 MiB scan cost the origin $ob bytes (> 1.05x): $stats"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
tierfs_mount "file://$src" "$mnt" "$cache" "$logf" --l1-size 8MiB --l2-size 64MiB
check_bytes "$mnt" hot/h{1..8}
got="$(origin_requests "$mnt")"
(( got == 0 )) || fail "the hot set's re-read sent $got requests to the origin, want 0"
log "ok the 32 MiB hot set survived a 256 MiB scan of a 64 MiB L2, which cost the origin $ob bytes"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
log "PASS"
