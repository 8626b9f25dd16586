#!/usr/bin/env bash
# End-to-end: what a file:// origin's directory tree can do to a mount.
#   * A directory the daemon cannot read (mode 000 with the daemon's CAP_DAC_OVERRIDE and
#     CAP_DAC_READ_SEARCH dropped, or no file descriptor left: EMFILE) lists as EIO, never as an
#     empty directory; nothing of the failure is stored: once readable it lists whole, also after
#     a remount with a long metadata TTL; a listing already cached is kept when its directory
#     turns unreadable.
#   * A new tree published by rename (`mv current old && mv new current`) is served byte-exact once
#     the metadata TTL has passed; a handle opened on the old tree reads old bytes or fails with
#     ESTALE, never bytes of the new file.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init

# expect_eio CMD...: CMD must fail with "Input/output error".
expect_eio() {
  local out
  if out="$(timeout -k 2 20 "$@" 2>&1)"; then fail "'$*' succeeded: '$out' (want EIO)"; fi
  [[ "$out" == *"Input/output error"* ]] || fail "'$*': '$out' (want Input/output error)"
}
# listing_is DIR WANT: `ls DIR` (sorted, one name per line, joined by spaces) must be WANT.
listing_is() {
  local got
  got="$(timeout -k 2 20 ls "$1" | tr '\n' ' ')" || fail "ls $1 failed"
  [[ "$got" == "$2 " ]] || fail "ls $1: '$got', want '$2'"
}

# ---- 1. unreadable directories ----
origin="$E2E_WORK/origin"
mkdir -p "$origin/locked" "$origin/cached" "$origin/many"
for f in locked/a.bin locked/b.bin cached/c.bin many/m.bin; do
  head -c 300000 /dev/urandom >"$origin/$f"
done
# Without these capabilities root is refused a mode-000 directory like everyone else.
TIERFS_WRAP=(setpriv --inh-caps=-dac_override,-dac_read_search
  --bounding-set=-dac_override,-dac_read_search)
cache="$E2E_WORK/cache" mnt="$E2E_WORK/mnt"

chmod 000 "$origin/locked"
tierfs_mount "file://$origin" "$mnt" "$cache" "$E2E_WORK/daemon1.log" --metadata-ttl 1h
capeff="$(awk '/^CapEff:/ {print $2}' "/proc/$TIERFS_PID/status")"
(( (0x$capeff & 0x6) == 0 )) || fail "daemon still has CAP_DAC_OVERRIDE/READ_SEARCH (CapEff $capeff)"
expect_eio ls "$mnt/locked"
expect_eio ls "$mnt/locked"  # the failure was not cached either
log "ok an unreadable directory lists as EIO"
chmod 755 "$origin/locked"
listing_is "$mnt/locked" "a.bin b.bin"
cmp "$origin/locked/a.bin" "$mnt/locked/a.bin" || fail "locked/a.bin bytes differ"
log "ok readable again: listed whole at once (metadata TTL 1h)"

# Already cached, then unreadable: the cached listing stays (the mount uses a 1 s TTL, so every
# ls below refreshes it in the background and each refresh fails).
listing_is "$mnt/cached" "c.bin"
cmp "$origin/cached/c.bin" "$mnt/cached/c.bin" || fail "cached/c.bin bytes differ"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"

cp "$origin/cached/c.bin" "$E2E_WORK/c.want"
chmod 000 "$origin/locked"
tierfs_mount "file://$origin" "$mnt" "$cache" "$E2E_WORK/daemon2.log" --metadata-ttl 1s
logf="$E2E_WORK/daemon2.log"
chmod 000 "$origin/cached"
deadline=$((SECONDS + 20))
until grep -q "background refresh of 'cached' failed\|cannot refresh listing of 'cached'" "$logf"; do
  listing_is "$mnt/cached" "c.bin"
  (( SECONDS < deadline )) || { print_log_tail "$logf"; fail "no failed refresh of 'cached' within 20s"; }
  sleep 0.3
done
listing_is "$mnt/cached" "c.bin"
cmp "$E2E_WORK/c.want" "$mnt/cached/c.bin" || fail "cached/c.bin differs (served from the cache)"
grep -q "Permission denied" "$logf" || fail "the log does not name the cause (Permission denied)"
listing_is "$mnt/locked" "a.bin b.bin"  # listed by the first mount: kept too
log "ok a cached listing is kept when its directory turns unreadable"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
chmod 755 "$origin/locked" "$origin/cached"

# A remount with a long TTL on the same cache: nothing of the failures was stored.
tierfs_mount "file://$origin" "$mnt" "$cache" "$E2E_WORK/daemon3.log" --metadata-ttl 1h
listing_is "$mnt/locked" "a.bin b.bin"
listing_is "$mnt/cached" "c.bin"
cmp "$origin/locked/b.bin" "$mnt/locked/b.bin" || fail "locked/b.bin bytes differ"
log "ok after a remount with a 1h TTL every file is listed"

# No file descriptor left (EMFILE): the soft limit of open files set to the lowest free
# descriptor number of the daemon, so no open can succeed.
pid=$TIERFS_PID
lowest=0
while [[ -e "/proc/$pid/fd/$lowest" ]]; do lowest=$((lowest + 1)); done
soft="$(prlimit --pid "$pid" --nofile --output SOFT --noheadings | tr -d ' ')"
prlimit --pid "$pid" --nofile="$lowest:" || fail "prlimit --pid $pid failed"
expect_eio ls "$mnt/many"
prlimit --pid "$pid" --nofile="$soft:" || fail "prlimit --pid $pid (restore) failed"
listing_is "$mnt/many" "m.bin"
grep -q "Too many open files" "$E2E_WORK/daemon3.log" || fail "the log does not name EMFILE"
log "ok with no descriptor left (EMFILE) a listing is EIO, and whole once one is free"
tierfs_umount "$mnt" "$pid" || fail "unclean unmount"
TIERFS_WRAP=()

# ---- 2. a new tree published by rename ----
pub="$E2E_WORK/pub"
mkdir -p "$pub/current/sub" "$pub/new/sub"
head -c $((6 << 20)) /dev/urandom >"$pub/current/big.bin"
head -c $((6 << 20)) /dev/urandom >"$pub/new/big.bin"
echo "old small" >"$pub/current/sub/s.txt"
echo "new small!" >"$pub/new/sub/s.txt"
echo "only new" >"$pub/new/added.txt"
mnt="$E2E_WORK/mnt-pub"
tierfs_mount "file://$pub/current" "$mnt" "$E2E_WORK/cache-pub" "$E2E_WORK/daemon-pub.log" \
  --metadata-ttl 1s
cmp "$pub/current/sub/s.txt" "$mnt/sub/s.txt" || fail "sub/s.txt differs before the swap"
step "open big.bin, swap the tree, read on" 60 "$PY" "$E2E_DIR/file_swap_check.py" "$mnt" "$pub"
for f in big.bin sub/s.txt added.txt; do
  cmp "$pub/current/$f" "$mnt/$f" || fail "$f differs from the new tree after the swap"
done
log "ok the new tree is served byte-exact after the TTL"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
