#!/usr/bin/env bash
# End-to-end security (runs as root; the other local user is `nobody`):
#   * the cache directory is 0700 with 0600 files, unreadable by nobody;
#   * a mount without allow_other is closed to nobody (EACCES on ls/cat);
#   * with allow_other nobody reads, but its user.tierfs.* sets are refused (by the kernel under
#     default_permissions, with EPERM by the daemon without it) while root's succeed; a non-root
#     mounter keeps its own controls under default_permissions;
#   * a second daemon on the same cache directory fails naming the first one's PID, and the
#     first one's blocks survive;
#   * a file:// source with a symlink to /etc/shadow, a `..` loop, a FIFO, a socket-like special
#     and a name holding a newline: the mount lists none of the specials, `find` terminates,
#     nothing hangs, the log line about the odd name is escaped;
#   * the fake secret access key and an endpoint userinfo password appear in no log, xattr, error
#     message, mount table entry or cache file.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
# nobody must be able to reach the work dir for its denials to mean anything.
chmod 755 "$E2E_WORK"

export E2E_S3_SECRET="TierfsFakeSecret-Q7x9Zk2Lw"
PASSWD="TierfsUserinfoPw-3Jd8Hq"
BUCKET=tierfs-sec
s3rver_start "$BUCKET"
step "upload test objects" 60 env AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER \
  "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" \
  "d/one.bin=3000000:1" "two.bin=5000:2"

as_nobody() { timeout -k 2 20 runuser -u nobody -- "$@"; }
# denied_to_nobody TEXT CMD...: CMD run as nobody must fail with TEXT in its message.
denied_to_nobody() {
  local want="$1" out
  shift
  if out="$(as_nobody "$@" 2>&1)"; then fail "as nobody, '$*' succeeded: $out"; fi
  [[ "$out" == *"$want"* ]] || fail "as nobody, '$*': '$out', expected '$want'"
}

# ---- 1. private cache, closed mount, lock ----
mnt="$E2E_WORK/mnt" cache="$E2E_WORK/cache" logf="$E2E_WORK/daemon1.log"
tierfs_mount "s3://$BUCKET" "$mnt" "$cache" "$logf" --endpoint "$S3_ENDPOINT"
pid1=$TIERFS_PID
want="$("$PY" "$E2E_DIR/s3put.py" --sha "d/one.bin=3000000:1")"
[[ "$(sha256sum <"$mnt/d/one.bin" | cut -d' ' -f1)" == "$want" ]] || fail "d/one.bin bytes differ"
wait_residency "$mnt/d/one.bin" "l2=3/3"
[[ "$(stat -c %a "$cache")" == 700 ]] || fail "cache dir mode $(stat -c %a "$cache"), want 700"
nblocks="$(find "$cache/blocks" -type f | wc -l)"
(( nblocks >= 3 )) || fail "expected the blocks of d/one.bin on flash, found $nblocks files"
bad="$(find "$cache" -type f ! -perm 0600 -printf '%m %p\n')"
[[ -z "$bad" ]] || fail "cache files not 0600: $bad"
bad="$(find "$cache" -type d ! -perm 0700 -printf '%m %p\n')"
[[ -z "$bad" ]] || fail "cache dirs not 0700: $bad"
[[ "$(cat "$cache/lock")" == "$pid1" ]] || fail "$cache/lock holds '$(cat "$cache/lock")', want $pid1"
denied_to_nobody "Permission denied" ls "$cache"
denied_to_nobody "Permission denied" cat "$cache/meta/data.mdb"
denied_to_nobody "Permission denied" cat "$(find "$cache/blocks" -type f | head -n 1)"
log "ok cache dir 0700, files 0600, unreadable by nobody"

denied_to_nobody "Permission denied" ls "$mnt"
denied_to_nobody "Permission denied" cat "$mnt/two.bin"
denied_to_nobody "Permission denied" stat "$mnt/d"
# `tierfs status` as nobody: the mount is listed, unreadable, with the reason (exit 1).
denied_to_nobody "Permission denied (a mount without allow_other is open to its mounting user only" \
  "$TIERFS" status "$mnt"
log "ok without allow_other the mount is closed to nobody"

mkdir -p "$E2E_WORK/mnt2"
out="$(AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY="$E2E_S3_SECRET" timeout -k 2 20 \
  "$TIERFS" mount "s3://$BUCKET" "$E2E_WORK/mnt2" --cache-dir "$cache" --endpoint "$S3_ENDPOINT" \
  -f 2>&1 </dev/null)" && fail "a second daemon on $cache started"
[[ "$out" == *"pid $pid1"* ]] || fail "second daemon's error does not name pid $pid1: $out"
log "second daemon refused: $out"
echo "$out" >"$E2E_WORK/second-daemon.err"
(( "$(find "$cache/blocks" -type f | wc -l)" == nblocks )) || fail "the second daemon touched the blocks"
[[ "$(sha256sum <"$mnt/d/one.bin" | cut -d' ' -f1)" == "$want" ]] || fail "first mount stopped serving"
wait_residency "$mnt/d/one.bin" "l2=3/3"
log "ok the first daemon's cache is untouched"
getfattr --absolute-names -d -m - "$mnt/d/one.bin" "$mnt" >"$E2E_WORK/xattrs1.txt" 2>&1 || true
tierfs_umount "$mnt" "$pid1" || { print_log_tail "$logf"; fail "unclean unmount"; }

# ---- 2. allow_other: reads open, controls closed to nobody ----
logf="$E2E_WORK/daemon2.log"
tierfs_mount "s3://$BUCKET" "$mnt" "$cache" "$logf" --endpoint "$S3_ENDPOINT" -o allow_other
pid2=$TIERFS_PID
as_nobody cat "$mnt/d/one.bin" >/dev/null || fail "nobody cannot read with allow_other"
as_nobody ls -l "$mnt" >/dev/null || fail "nobody cannot list with allow_other"
as_nobody getfattr -n user.tierfs.residency "$mnt/d/one.bin" >/dev/null || fail "nobody cannot get xattrs"
# default_permissions is on with allow_other: the kernel refuses nobody's sets (no write bit).
for kv in user.tierfs.evict=1 user.tierfs.ttl=1ns user.tierfs.pin=1 user.tierfs.prefetch=l2 \
  user.tierfs.policy=ttl; do
  denied_to_nobody "Permission denied" setfattr -n "${kv%%=*}" -v "${kv#*=}" "$mnt/d/one.bin"
  denied_to_nobody "Permission denied" setfattr -n "${kv%%=*}" -v "${kv#*=}" "$mnt"
done
denied_to_nobody "only root and the user who mounted" "$TIERFS" prefetch "$mnt/d"
wait_residency "$mnt/d/one.bin" "l2=3/3"
step "root sets user.tierfs.evict" 20 setfattr -n user.tierfs.evict -v 1 "$mnt/d/one.bin"
wait_residency "$mnt/d/one.bin" "l2=0/3"
log "ok allow_other + default_permissions: nobody reads, nobody's sets refused, root's work"
getfattr --absolute-names -d -m - "$mnt/d/one.bin" "$mnt" >"$E2E_WORK/xattrs2.txt" 2>&1 || true
tierfs_umount "$mnt" "$pid2" || { print_log_tail "$logf"; fail "unclean unmount"; }

# Without default_permissions the daemon itself refuses: EPERM.
logf="$E2E_WORK/daemon3.log"
tierfs_mount "s3://$BUCKET" "$mnt" "$cache" "$logf" --endpoint "$S3_ENDPOINT" \
  -o allow_other,nodefault_permissions
pid3=$TIERFS_PID
cat "$mnt/d/one.bin" >/dev/null
wait_residency "$mnt/d/one.bin" "l2=3/3"
for kv in user.tierfs.evict=1 user.tierfs.ttl=1ns user.tierfs.pin=1 user.tierfs.prefetch=l2 \
  user.tierfs.policy=ttl; do
  denied_to_nobody "Operation not permitted" setfattr -n "${kv%%=*}" -v "${kv#*=}" "$mnt/d/one.bin"
  denied_to_nobody "Operation not permitted" setfattr -n "${kv%%=*}" -v "${kv#*=}" "$mnt"
done
wait_residency "$mnt/d/one.bin" "l2=3/3"
[[ "$(xattr_of "$mnt" user.tierfs.ttl)" == forever ]] || fail "nobody's ttl was applied"
grep -q "by uid 65534 refused" "$logf" || fail "no log line for nobody's refused setxattr"
step "root sets user.tierfs.evict" 20 setfattr -n user.tierfs.evict -v 1 "$mnt/d/one.bin"
wait_residency "$mnt/d/one.bin" "l2=0/3"
log "ok allow_other without default_permissions: nobody's sets get EPERM from the daemon"
tierfs_umount "$mnt" "$pid3" || { print_log_tail "$logf"; fail "unclean unmount"; }

# ---- 3. file:// safety; the owner passes the kernel's check, the daemon still decides ----
src="$E2E_WORK/src"
mkdir -p "$src/sub"
echo "real" >"$src/real.txt"
echo "inner" >"$src/sub/inner.txt"
ln -s /etc/shadow "$src/shadow"
ln -s .. "$src/sub/loop"
ln -s /etc "$src/etc"
mkfifo "$src/fifo"
ln -s real.txt "$src/"$'evil\nFAKE-LOG-LINE'
fmnt="$E2E_WORK/fmnt" fcache="$E2E_WORK/fcache" logf="$E2E_WORK/daemon-file.log"
# Files owned by nobody: under default_permissions the kernel lets the owner's setxattr through
# (the owner has the write bit), so what answers nobody below is the daemon's own check.
tierfs_mount "file://$src" "$fmnt" "$fcache" "$logf" -o allow_other,uid=65534,gid=65534
fpid=$TIERFS_PID
listing="$(as_nobody find "$fmnt" | sed "s|^$fmnt||" | sort | tr '\n' ' ')" || fail "find failed or hung"
[[ "$listing" == " /real.txt /sub /sub/inner.txt " ]] || fail "file:// listing: '$listing'"
as_nobody ls -laR "$fmnt" >/dev/null || fail "ls -laR failed or hung"
for name in shadow fifo etc sub/loop etc/passwd sub/loop/real.txt; do
  denied_to_nobody "No such file or directory" cat "$fmnt/$name"
  if out="$(timeout -k 2 10 cat "$fmnt/$name" 2>&1)"; then fail "root read $name: $out"; fi
done
[[ "$(as_nobody cat "$fmnt/real.txt")" == real ]] || fail "real.txt"
log "ok file://: no symlink or FIFO listed or served, find terminates, nothing hangs"
[[ "$(stat -c %U:%a "$fmnt/real.txt")" == nobody:644 ]] || fail "owner/mode: $(stat -c %U:%a "$fmnt/real.txt")"
denied_to_nobody "Operation not permitted" setfattr -n user.tierfs.ttl -v 1ns "$fmnt/sub"
denied_to_nobody "Operation not permitted" setfattr -n user.tierfs.evict -v 1 "$fmnt"
step "root sets user.tierfs.ttl" 20 setfattr -n user.tierfs.ttl -v 1h "$fmnt/sub"
[[ "$(as_nobody getfattr --only-values -n user.tierfs.ttl "$fmnt/sub/inner.txt")" == 1h ]] ||
  fail "root's ttl did not apply"
log "ok the owner passes the kernel's check; the daemon refuses a non-mounting owner (EPERM)"
grep -q "hiding 'shadow'" "$logf" || { print_log_tail "$logf"; fail "no log line for the hidden symlink"; }
if grep -q "^FAKE-LOG-LINE" "$logf"; then fail "a file name forged a log line"; fi
grep -qF "hiding 'evil\\nFAKE-LOG-LINE'" "$logf" || { print_log_tail "$logf"; fail "odd name not escaped"; }
(( "$(grep -c "hiding 'shadow'" "$logf")" == 1 )) || fail "the hidden symlink was logged more than once"
log "ok odd names are logged once, escaped"
tierfs_umount "$fmnt" "$fpid" || { print_log_tail "$logf"; fail "unclean unmount"; }

# A non-root mounter keeps its own controls under default_permissions (needs /dev/fuse open to
# nobody; Debian's default is 0666, some containers make it 0600).
if as_nobody test -r /dev/fuse -a -w /dev/fuse; then
  umnt="$E2E_WORK/umnt" ucache="$E2E_WORK/ucache" logf="$E2E_WORK/daemon-user.log"
  mkdir -p "$umnt"
  chown nobody:nogroup "$umnt"
  E2E_MOUNTS+=("$umnt")
  setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$TIERFS" mount "file://$src" "$umnt" \
    --cache-dir "$ucache" --l1-size 64MiB --l2-size 1GiB -o default_permissions -f \
    >"$logf" 2>&1 </dev/null &
  upid=$!
  E2E_PIDS+=("$upid")
  deadline=$((SECONDS + MOUNT_TIMEOUT))
  until is_mounted "$umnt"; do
    pid_alive "$upid" || { print_log_tail "$logf"; fail "nobody's tierfs exited before mounting"; }
    (( SECONDS < deadline )) || { print_log_tail "$logf"; fail "nobody's mount did not appear"; }
    sleep 0.1
  done
  as_nobody setfattr -n user.tierfs.evict -v 1 "$umnt/real.txt" || fail "the mounter's evict was refused"
  as_nobody setfattr -n user.tierfs.ttl -v 1h "$umnt/sub" || fail "the mounter's ttl was refused"
  [[ "$(stat -c %U:%a "$ucache")" == nobody:700 ]] || fail "nobody's cache dir: $(stat -c %U:%a "$ucache")"
  timeout -k 2 "$UMOUNT_TIMEOUT" fusermount3 -u "$umnt" || fail "fusermount3 -u $umnt"
  wait_pid_exit "$upid" "$UMOUNT_TIMEOUT" || fail "nobody's daemon did not exit"
  log "ok a non-root mounter sets its own user.tierfs.* under default_permissions"
else
  log "skip the non-root mounter: /dev/fuse is $(stat -c %a /dev/fuse) here (nobody cannot open it)"
fi

# ---- 4. credentials and userinfo appear nowhere ----
out="$(AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY="$E2E_S3_SECRET" timeout -k 2 20 \
  "$TIERFS" mount "s3://$BUCKET" "$E2E_WORK/mnt2" --cache-dir "$E2E_WORK/cache-ui" \
  --endpoint "http://user:$PASSWD@127.0.0.1:$S3_PORT" -f 2>&1 </dev/null)" &&
  fail "a mount with endpoint userinfo started"
echo "$out" >"$E2E_WORK/userinfo.err"
log "endpoint with userinfo refused: $out"
out="$(AWS_ACCESS_KEY_ID=WRONGKEY AWS_SECRET_ACCESS_KEY="$E2E_S3_SECRET" timeout -k 2 20 \
  "$TIERFS" mount "s3://$BUCKET" "$E2E_WORK/mnt2" --cache-dir "$E2E_WORK/cache-wk" \
  --endpoint "$S3_ENDPOINT" --log-level debug -f 2>&1 </dev/null)" &&
  fail "a mount with a wrong access key started"
echo "$out" >"$E2E_WORK/wrongkey.err"
log "wrong access key refused: $out"
for secret in "$E2E_S3_SECRET" "$PASSWD"; do
  if hits="$(grep -rlaF -- "$secret" "$E2E_WORK"/*.log "$E2E_WORK"/*.err "$E2E_WORK"/*.txt \
    "$cache" "$fcache" /proc/self/mountinfo 2>/dev/null)"; then
    fail "'$secret' found in: $hits"
  fi
done
log "ok no secret in logs, xattrs, errors, mount table or cache files"
