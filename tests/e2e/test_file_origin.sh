#!/usr/bin/env bash
# End-to-end: what a file:// origin's directory tree can do to a mount.
#   * A directory the daemon cannot read (mode 000 with the daemon's CAP_DAC_OVERRIDE and
#     CAP_DAC_READ_SEARCH dropped, or no file descriptor left: EMFILE) lists as EIO, never as an
#     empty directory; nothing of the failure is stored: once readable it lists whole, also after
#     a remount with a long metadata TTL; a listing already cached is kept when its directory
#     turns unreadable.
#   * Through an allow_other mount, `nobody` meets the origin's owner, group and mode (the kernel's
#     default_permissions check): a root-only 0600 file is EACCES, a 0644 one reads, a 0700
#     directory cannot be listed, a 0600 file nobody owns reads; with --uid/--gid/--file-mode/
#     --dir-mode given those apply to every inode instead.
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

# Already cached, then unreadable: the cached listing stays. Listed (and read) here, then
# served by a remount with a 1 s TTL, where every ls refreshes it in the background and each
# refresh fails.
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

# ---- 3. the origin's owner, group and mode through allow_other ----
chmod 755 "$E2E_WORK"  # nobody must reach the mountpoint for its denials to mean anything
own="$E2E_WORK/own"
mkdir -p "$own/private" "$own/shared"
echo "root only" >"$own/secret.txt"
echo "for all" >"$own/public.txt"
echo "nobody's" >"$own/mine.txt"
echo "in private" >"$own/private/x.txt"
echo "in shared" >"$own/shared/y.txt"
chmod 600 "$own/secret.txt" "$own/mine.txt"
chmod 644 "$own/public.txt" "$own/private/x.txt" "$own/shared/y.txt"
chmod 700 "$own/private"
chmod 755 "$own" "$own/shared"
chown nobody:nogroup "$own/mine.txt" 2>/dev/null || chown nobody "$own/mine.txt"
as_nobody() { timeout -k 2 20 runuser -u nobody -- "$@"; }
# denied_to_nobody CMD...: CMD run as nobody must fail with "Permission denied".
denied_to_nobody() {
  local out
  if out="$(as_nobody "$@" 2>&1)"; then fail "as nobody, '$*' succeeded: $out"; fi
  [[ "$out" == *"Permission denied"* ]] || fail "as nobody, '$*': '$out' (want Permission denied)"
}
mnt="$E2E_WORK/mnt-own"
tierfs_mount "file://$own" "$mnt" "$E2E_WORK/cache-own" "$E2E_WORK/daemon-own.log" --allow-other
[[ "$(stat -c '%a %U' "$mnt/secret.txt")" == "600 root" ]] ||
  fail "secret.txt shows '$(stat -c '%a %U' "$mnt/secret.txt")', want '600 root'"
[[ "$(stat -c '%a %U' "$mnt/private")" == "700 root" ]] ||
  fail "private/ shows '$(stat -c '%a %U' "$mnt/private")', want '700 root'"
[[ "$(stat -c '%a %U' "$mnt/mine.txt")" == "600 nobody" ]] ||
  fail "mine.txt shows '$(stat -c '%a %U' "$mnt/mine.txt")', want '600 nobody'"
denied_to_nobody cat "$mnt/secret.txt"
denied_to_nobody ls "$mnt/private"
denied_to_nobody cat "$mnt/private/x.txt"
[[ "$(as_nobody cat "$mnt/public.txt")" == "for all" ]] || fail "nobody cannot read public.txt"
[[ "$(as_nobody cat "$mnt/mine.txt")" == "nobody's" ]] || fail "nobody cannot read its own mine.txt"
[[ "$(as_nobody cat "$mnt/shared/y.txt")" == "in shared" ]] || fail "nobody cannot read shared/y.txt"
[[ "$(cat "$mnt/secret.txt")" == "root only" ]] || fail "root cannot read secret.txt"
log "ok nobody meets the origin's owner and mode (0600 root file EACCES, 0700 dir unlistable)"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"

# Set by the user, --uid/--gid/--file-mode/--dir-mode apply to every inode (same cache: the
# stored listings carry the origin's owners, and the flags still win).
tierfs_mount "file://$own" "$mnt" "$E2E_WORK/cache-own" "$E2E_WORK/daemon-own2.log" --allow-other \
  --uid "$(id -u nobody)" --gid "$(id -g nobody)" --file-mode 0444 --dir-mode 0555
[[ "$(stat -c '%a %U' "$mnt/secret.txt")" == "444 nobody" ]] ||
  fail "secret.txt shows '$(stat -c '%a %U' "$mnt/secret.txt")' with the flags, want '444 nobody'"
[[ "$(as_nobody cat "$mnt/secret.txt")" == "root only" ]] || fail "nobody cannot read secret.txt (flags)"
[[ "$(as_nobody ls "$mnt/private")" == "x.txt" ]] || fail "nobody cannot list private/ (flags)"
log "ok with --uid/--gid/--file-mode/--dir-mode those apply instead"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
