#!/usr/bin/env bash
# End-to-end: interrupts and isolation. s3rver behind a proxy that can stall (accepts,
# never answers) → mount → list and read one file (cached) → stall the origin → 24 concurrent
# `cat`s of uncached files and a lookup in a never-listed directory hang → a cached file still
# reads (bytes checked) and a lookup of a listed name is answered, within seconds →
# `timeout -s INT 2 cat UNCACHED` and kill -INT of the hung readers end them promptly (well before
# the origin timeout) → the stall ends → the hung lookup ends, a file never asked for reads
# without a remount → clean unmount, the daemon exits by itself.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
BUCKET=tierfs-intr
s3rver_start "$BUCKET"

PROXY_PID=""
READERS=()
stop_extras() {
  local p
  for p in "${READERS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  stall_proxy_stop
}
trap 'rc=$?; stop_extras; e2e_cleanup $rc' EXIT

objs=(warm.bin=4194304:1 fresh/new.bin=1048576:2)
for i in $(seq -w 0 23); do objs+=("cold/f$i.bin=2097152:$((100 + 10#$i))"); done
objs+=(cold/extra.bin=2097152:99 unlisted/a.bin=1024:3 unlisted/b.bin=1024:4)
step "upload ${#objs[@]} objects" 120 "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" \
  --bucket "$BUCKET" "${objs[@]}"
sha_of() { "$PY" "$E2E_DIR/s3put.py" --sha "$1"; }
warm_sha="$(sha_of warm.bin=4194304:1)"
new_sha="$(sha_of fresh/new.bin=1048576:2)"

stall_proxy_start

# One attempt of at most 20 s per request: an uncached read on a stalled origin gives EIO after
# about a minute at most (NetworkWaitBound); the interrupts below must act long before that.
cat >"$E2E_WORK/tierfs.toml" <<TOML
[s3]
request_timeout = "20s"
max_attempts = 1
[cache]
prefetch_next_files = 0
TOML
MNT="$E2E_WORK/mnt"
LOGF="$E2E_WORK/tierfs.log"
tierfs_mount "s3://$BUCKET" "$MNT" "$E2E_WORK/cache" "$LOGF" --endpoint "$PROXY" \
  --config "$E2E_WORK/tierfs.toml" --metadata-ttl 1h

# Not "unlisted/": its listing is fetched only when a name in it is looked up (while stalled).
step "list the tree" 30 ls "$MNT" "$MNT/cold" "$MNT/fresh"
got="$(timeout 30 sha256sum "$MNT/warm.bin" | cut -d' ' -f1)"
[[ "$got" == "$warm_sha" ]] || fail "warm.bin: sha256 $got, expected $warm_sha"
# Drop the kernel's page cache of warm.bin: the next read must be answered by the daemon (L1/L2).
dd if="$MNT/warm.bin" iflag=nocache count=0 status=none

log "stalling the origin"
touch "$E2E_WORK/stall"
t_stall=$SECONDS
for f in "$MNT"/cold/f*.bin; do
  # Background jobs of a script ignore SIGINT; restore it so that kill -INT acts as ^C would.
  env --default-signal=INT cat "$f" >/dev/null 2>&1 &
  READERS+=("$!")
done
sleep 2
alive=0
for p in "${READERS[@]}"; do pid_alive "$p" && alive=$((alive + 1)); done
log "$alive of ${#READERS[@]} readers of uncached files are hanging"
(( alive >= 20 )) || fail "expected the readers of uncached files to hang on the stalled origin"

t0=$(date +%s%N)
got="$(timeout 10 sha256sum "$MNT/warm.bin" | cut -d' ' -f1)" || fail "reading the cached file hung"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[[ "$got" == "$warm_sha" ]] || fail "warm.bin while stalled: sha256 $got, expected $warm_sha"
log "cached file read in ${ms} ms while $alive readers hang"
(( ms < 5000 )) || fail "the cached read took ${ms} ms"
# A lookup in a directory never listed waits for its listing (stalled); lookups elsewhere do not.
stat "$MNT/unlisted/a.bin" >/dev/null 2>&1 &
LEADER=$!
sleep 1
pid_alive "$LEADER" || fail "the lookup in an unlisted directory did not wait for the stalled origin"
t0=$(date +%s%N)
timeout 10 stat "$MNT/cold/extra.bin" >/dev/null || fail "stat of a listed file hung"
log "lookup of a listed file answered in $(( ($(date +%s%N) - t0) / 1000000 )) ms"

t0=$(date +%s%N)
rc=0
timeout -s INT 2 cat "$MNT/cold/extra.bin" >/dev/null 2>&1 || rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
log "timeout -s INT 2 cat UNCACHED: exit $rc after ${ms} ms"
(( rc != 0 )) || fail "cat of an uncached file succeeded on a stalled origin"
(( ms < 6000 )) || fail "the interrupted cat took ${ms} ms to exit"

t0=$(date +%s%N)
for p in "${READERS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
for p in "${READERS[@]}"; do
  wait_pid_exit "$p" 10 || fail "reader $p still running 10 s after SIGINT"
done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
log "all ${#READERS[@]} hung readers exited ${ms} ms after SIGINT"
READERS=()
(( SECONDS - t_stall < 20 )) || fail "the checks took longer than the origin timeout"
stats="$(stats_xattr "$MNT")" || fail "getfattr user.tierfs.stats failed"
for k in waits.cancelled waits.timed_out fetch.abandoned; do
  log "  $k=$(tr ' ' '\n' <<<"$stats" | sed -n "s/^$k=//p")"
done

log "ending the stall"
rm -f "$E2E_WORK/stall"
wait_pid_exit "$LEADER" 10 || fail "the lookup that listed the stalled directory did not end with the stall"
got="$(timeout 30 sha256sum "$MNT/fresh/new.bin" | cut -d' ' -f1)" || fail "read after the stall hung"
[[ "$got" == "$new_sha" ]] || fail "fresh/new.bin after the stall: sha256 $got, expected $new_sha"

t0=$SECONDS
tierfs_umount "$MNT" "$TIERFS_PID" || fail "unclean unmount"
daemon_exit_code "$TIERFS_PID"; rc=$DAEMON_RC
[[ "$rc" == 0 ]] || { print_log_tail "$LOGF"; fail "daemon exit code $rc"; }
log "unmounted; the daemon exited in $((SECONDS - t0)) s"
