#!/usr/bin/env bash
# End-to-end: a file of 2^62 bytes (sparse, on a tmpfs: ext4 stops at 16 TiB) served from
# file:// → three of its blocks read (far apart) → user.tierfs.residency answers at once and
# counts them; evict, pin and unpin answer at once; 16 concurrent residency reads never hold up a
# `cat` of another file; SIGTERM while 16 readers loop on residency ends the daemon promptly and
# the mount goes away. Then a deep prefetch of the huge file starts at once, is cancelled at once,
# and the daemon's memory stays flat (its tasks are cut as they run, never all planned up front).
# A residency, evict or pin cost what the cache holds of the file, never its nominal size (2^42
# blocks of 1 MiB: hours of CPU per call when it walked them).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init

ORIGIN="$E2E_WORK/origin"
LOOPERS=()
stop_extras() {
  local p
  for p in "${LOOPERS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${LOOPERS[@]}"; do wait "$p" 2>/dev/null || true; done
  LOOPERS=()
}
huge_cleanup() {
  local rc="$1" i
  stop_extras
  # The daemons read the origin: they go first, then its tmpfs (e2e_cleanup keeps a work dir
  # that still has a mount in it).
  for i in "${!E2E_MOUNTS[@]}"; do
    if is_mounted "${E2E_MOUNTS[$i]}" || pid_alive "${E2E_PIDS[$i]:-}"; then
      tierfs_umount "${E2E_MOUNTS[$i]}" "${E2E_PIDS[$i]:-}" || true
    fi
  done
  if is_mounted "$ORIGIN"; then umount "$ORIGIN" || umount -l "$ORIGIN" || true; fi
  e2e_cleanup "$rc"
}
trap 'huge_cleanup $?' EXIT

mkdir -p "$ORIGIN"
mount -t tmpfs -o size=64m,mode=0755 tierfs-huge "$ORIGIN" || fail "cannot mount a tmpfs for the origin"
HUGE=$((2 ** 62))
BS=$((1 << 20))
BLOCKS=$((HUGE / BS))
truncate -s "$HUGE" "$ORIGIN/huge.bin" || fail "tmpfs refuses a file of 2^62 bytes"
# Three blocks with bytes of their own: the first, block 2^40, and the last.
FAR=$((1 << 40))
LAST=$((BLOCKS - 1))
for b in 0 "$FAR" "$LAST"; do
  printf 'block %d\n' "$b" | dd of="$ORIGIN/huge.bin" bs=1 seek=$((b * BS)) conv=notrunc status=none
done
head -c 3000000 /dev/urandom >"$ORIGIN/small.bin"
small_sha="$(sha256sum "$ORIGIN/small.bin" | cut -d' ' -f1)"

cat >"$E2E_WORK/tierfs.toml" <<TOML
[cache]
prefetch_next_files = 0
readahead_max = 0
pin_quota = "8EiB"
TOML
MNT="$E2E_WORK/mnt"
LOGF="$E2E_WORK/tierfs.log"
tierfs_mount "file://$ORIGIN" "$MNT" "$E2E_WORK/cache" "$LOGF" --l2-size 256MiB \
  --config "$E2E_WORK/tierfs.toml"
[[ "$(stat -c %s "$MNT/huge.bin")" == "$HUGE" ]] || fail "huge.bin is not 2^62 bytes on the mount"

# read_blocks: reads the three blocks (O_DIRECT and no readahead: exactly these blocks, and
# nothing still in flight when the read returns) and checks their first bytes.
read_blocks() {
  local b got
  for b in 0 "$FAR" "$LAST"; do
    got="$(timeout 30 dd if="$MNT/huge.bin" bs="$BS" skip="$b" count=1 iflag=direct status=none | tr -d '\0')"
    [[ "$got" == "block $b" ]] || fail "block $b of huge.bin reads '$got'"
  done
}
read_blocks
log "ok three blocks of huge.bin read (0, 2^40, last)"

# ms_of CMD...: runs CMD (timeout 20 s), prints how long it took in ms; fails the test if CMD
# failed or timed out.
ms_of() {
  local t0 t1 rc=0
  t0=$(date +%s%N)
  timeout -k 2 20 "$@" >/dev/null || rc=$?
  t1=$(date +%s%N)
  (( rc == 0 )) || fail "$* failed or timed out (exit $rc) after $(((t1 - t0) / 1000000)) ms"
  echo $(((t1 - t0) / 1000000))
}
ms="$(ms_of getfattr --absolute-names -n user.tierfs.residency "$MNT/huge.bin")"
v="$(xattr_of "$MNT/huge.bin" user.tierfs.residency)"
log "residency of huge.bin: '$v' in ${ms} ms"
(( ms < 2000 )) || fail "a residency read of huge.bin took ${ms} ms"
[[ "$v" == "l1=3/$BLOCKS l2=3/$BLOCKS" ]] || fail "residency of huge.bin is '$v', want the 3 blocks read in L1 and L2"

ms="$(ms_of setfattr -n user.tierfs.pin -v 1 "$MNT/huge.bin")"
log "pin of huge.bin: ${ms} ms"
ms2="$(ms_of setfattr -n user.tierfs.pin -v 0 "$MNT/huge.bin")"
log "unpin of huge.bin: ${ms2} ms"
(( ms < 2000 && ms2 < 2000 )) || fail "pin/unpin of huge.bin took ${ms}/${ms2} ms"
ms="$(ms_of setfattr -n user.tierfs.evict -v 1 "$MNT/huge.bin")"
v="$(xattr_of "$MNT/huge.bin" user.tierfs.residency)"
log "evict of huge.bin: ${ms} ms, then residency '$v'"
(( ms < 2000 )) || fail "evict of huge.bin took ${ms} ms"
[[ "$v" == *"l1=0/$BLOCKS"* && "$v" == *"l2=0/$BLOCKS"* ]] || fail "huge.bin still cached after evict: '$v'"

# 16 residency reads at once (every FUSE worker, when each took hours) and a cat of another
# file: the cat gets its bytes at once.
read_blocks
pids=()
t0=$(date +%s%N)
for _ in $(seq 16); do
  timeout -k 2 60 getfattr --absolute-names -n user.tierfs.residency "$MNT/huge.bin" >/dev/null &
  pids+=($!)
done
got="$(timeout -k 2 10 sha256sum "$MNT/small.bin" | cut -d' ' -f1)" || fail "cat of small.bin waited behind 16 residency reads"
t1=$(date +%s%N)
[[ "$got" == "$small_sha" ]] || fail "small.bin has the wrong bytes"
log "ok cat of small.bin beside 16 residency reads: $(((t1 - t0) / 1000000)) ms"
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent residency read failed (exit $?)"; done
log "ok 16 concurrent residency reads done in $((($(date +%s%N) - t0) / 1000000)) ms"

# A deep prefetch of the huge file: starts at once, is cancelled at once, and the daemon's memory
# does not grow with the file's size.
rss_before="$(awk '/^VmRSS:/ {print $2}' "/proc/$TIERFS_PID/status")"
ms="$(ms_of setfattr -n user.tierfs.prefetch -v l2 "$MNT/huge.bin")"
log "prefetch of huge.bin started in ${ms} ms"
deadline=$((SECONDS + 20))
until [[ "$(xattr_of "$MNT/huge.bin" user.tierfs.prefetch)" == *bytes=[1-9]* ]]; do
  (( SECONDS < deadline )) || fail "prefetch of huge.bin made no progress in 20 s: $(xattr_of "$MNT/huge.bin" user.tierfs.prefetch)"
  sleep 0.2
done
ms="$(ms_of setfattr -n user.tierfs.prefetch -v cancel "$MNT/huge.bin")"
deadline=$((SECONDS + 20))
until [[ "$(xattr_of "$MNT/huge.bin" user.tierfs.prefetch)" == state=cancelled* ]]; do
  (( SECONDS < deadline )) || fail "prefetch of huge.bin not cancelled in 20 s: $(xattr_of "$MNT/huge.bin" user.tierfs.prefetch)"
  sleep 0.2
done
rss_after="$(awk '/^VmRSS:/ {print $2}' "/proc/$TIERFS_PID/status")"
log "prefetch cancelled (cancel took ${ms} ms): $(xattr_of "$MNT/huge.bin" user.tierfs.prefetch); RSS ${rss_before} -> ${rss_after} KiB"
(( rss_after < rss_before + 512 * 1024 )) || fail "the daemon's RSS grew from ${rss_before} to ${rss_after} KiB during the prefetch"

# SIGTERM while 16 readers loop on residency: the daemon exits promptly and unmounts.
for i in $(seq 16); do
  (
    getfattr --absolute-names -n user.tierfs.residency "$MNT/huge.bin" >/dev/null 2>&1 && : >"$E2E_WORK/looping.$i"
    while getfattr --absolute-names -n user.tierfs.residency "$MNT/huge.bin" >/dev/null 2>&1; do :; done
  ) &
  LOOPERS+=($!)
done
deadline=$((SECONDS + 20))
until (( $(find "$E2E_WORK" -maxdepth 1 -name 'looping.*' | wc -l) == 16 )); do
  (( SECONDS < deadline )) || fail "the 16 residency loops did not all get an answer within 20 s"
  sleep 0.05
done
kill -TERM "$TIERFS_PID"
t0=$SECONDS
wait_pid_exit "$TIERFS_PID" 15 || fail "the daemon did not exit within 15 s of SIGTERM during residency reads"
daemon_exit_code "$TIERFS_PID"
log "daemon exited $((SECONDS - t0)) s after SIGTERM (code $DAEMON_RC)"
deadline=$((SECONDS + 10))
while is_mounted "$MNT"; do
  (( SECONDS < deadline )) || fail "$MNT still mounted 10 s after the daemon exited"
  sleep 0.1
done
stop_extras
(( DAEMON_RC == 0 )) || { print_log_tail "$LOGF"; fail "the daemon exited with code $DAEMON_RC after SIGTERM"; }
log "ok SIGTERM during 16 looping residency reads: clean exit, unmounted"
