#!/usr/bin/env bash
# End-to-end: the control group (--control-group, fuse.control_group) on an allow_other mount
# (default_permissions on), as a Kubernetes pod's uid with a supplementary group uses it:
#   * the mount root belongs to the group and has its group write bit, so the kernel lets
#     members' setxattr through; below it a file:// source shows the origin's owner, group and
#     mode (a directory of the group with g+w at the origin takes members' prefetches, a file the
#     origin keeps from them stays unreadable to them); writes still get EROFS;
#   * a member by its primary group (runuser -g) and one by a supplementary group (runuser -G)
#     start prefetch jobs (user.tierfs.prefetch, `tierfs prefetch`, the Python package's list job)
#     and they run to the end;
#   * a member still gets EPERM from the daemon for pin, ttl, policy, evict and log_level;
#   * a non-member gets EACCES from the kernel (EPERM from the daemon without
#     default_permissions), the Python package says who may, and nothing is started;
#   * a group that does not exist stops the mount naming the flag;
#   * on an S3 source (objects have no owner) every inode belongs to the group with g+w, and a
#     member prefetches a directory below the root.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
chmod 755 "$E2E_WORK"  # nobody must reach the mount for its answers to mean anything

GROUP="tierfs-e2e-ctl"
if getent group "$GROUP" >/dev/null; then groupdel "$GROUP"; fi  # left by a killed run
groupadd --system "$GROUP"
trap 'rc=$?; groupdel "$GROUP" 2>/dev/null; e2e_cleanup $rc' EXIT
GID="$(getent group "$GROUP" | cut -d: -f3)"

src="$E2E_WORK/src"
mkdir -p "$src/a" "$src/b" "$src/c"
for d in a b c; do
  for i in 1 2 3; do head -c $((600000 + i)) /dev/urandom >"$src/$d/f$i.bin"; done
done
chmod -R a+rX "$src"
# a/ and b/ belong to the group at the origin, writable by it; c/ stays root's 0755.
chgrp -R "$GROUP" "$src/a" "$src/b"
chmod 775 "$src/a" "$src/b"
chmod 664 "$src"/a/*.bin
head -c 4096 /dev/urandom >"$src/a/private.bin"
chmod 640 "$src/a/private.bin"  # root:root 0640: the control group gives no read access to it

as_primary() { timeout -k 2 30 runuser -u nobody -g "$GROUP" -- "$@"; }
as_supp() { timeout -k 2 30 runuser -u nobody -G "$GROUP" -- "$@"; }
as_other() { timeout -k 2 30 runuser -u nobody -- "$@"; }
# refused TEXT CMD...: CMD must fail with TEXT in its message.
refused() {
  local want="$1" out
  shift
  if out="$("$@" 2>&1)"; then fail "'$*' succeeded: $out"; fi
  [[ "$out" == *"$want"* ]] || fail "'$*': '$out', expected '$want'"
}
# wait_job PATH ATTR: the job's state is done within 30 s.
wait_job() {
  local deadline=$((SECONDS + 30)) v
  while :; do
    v="$(xattr_of "$1" "$2")" || fail "getfattr $2 of $1"
    [[ "$v" == state=done* ]] && return 0
    [[ "$v" == state=failed* || "$v" == state=cancelled* ]] && fail "$2 of $1: $v"
    (( SECONDS < deadline )) || fail "$2 of $1 is '$v' after 30 s"
    sleep 0.1
  done
}

# ---- a group that does not exist: exit 2 naming the flag, nothing mounted ----
mkdir -p "$E2E_WORK/bad"
rc=0
out="$(timeout -k 2 20 "$TIERFS" mount "file://$src" "$E2E_WORK/bad" --cache-dir "$E2E_WORK/bcache" \
  --control-group no-such-group-e2e -f 2>&1 </dev/null)" || rc=$?
(( rc == 2 )) || fail "a missing group: exit $rc, want 2: $out"
[[ "$out" == *"--control-group"*"no group 'no-such-group-e2e'"* ]] || fail "message: $out"
! is_mounted "$E2E_WORK/bad" || fail "mounted with a missing group"
log "ok a missing group: $out"

# ---- allow_other + default_permissions with the control group ----
mnt="$E2E_WORK/mnt" cache="$E2E_WORK/cache" logf="$E2E_WORK/daemon.log"
tierfs_mount "file://$src" "$mnt" "$cache" "$logf" -o allow_other --control-group "$GROUP"
pid=$TIERFS_PID
[[ "$(stat -c %g:%a "$mnt")" == "$GID:775" ]] || fail "root: $(stat -c %g:%a "$mnt")"
[[ "$(stat -c %g:%a "$mnt/a/f1.bin")" == "$GID:664" ]] || fail "file: $(stat -c %g:%a "$mnt/a/f1.bin")"
[[ "$(stat -c %g:%a "$mnt/a")" == "$GID:775" ]] || fail "dir: $(stat -c %g:%a "$mnt/a")"
[[ "$(stat -c %g:%a "$mnt/c")" == "0:755" ]] || fail "c/ does not show the origin's: $(stat -c %g:%a "$mnt/c")"
[[ "$(stat -c %g:%a "$mnt/a/private.bin")" == "0:640" ]] ||
  fail "private.bin does not show the origin's: $(stat -c %g:%a "$mnt/a/private.bin")"
refused "Permission denied" as_supp cat "$mnt/a/private.bin"
refused "Read-only file system" as_primary sh -c "echo x >>'$mnt/a/f1.bin'"
log "ok the root is group $GID with g+w, below it the origin's owner and mode; writes are EROFS"

# Primary group: setfattr and the CLI.
as_primary setfattr -n user.tierfs.prefetch -v l2 "$mnt/a" || fail "member (primary group) refused"
wait_job "$mnt/a" user.tierfs.prefetch
for i in 1 2 3; do wait_residency "$mnt/a/f$i.bin" "l2=1/1"; done
as_primary "$TIERFS" prefetch "$mnt/b" --wait >"$E2E_WORK/cli.out" 2>&1 ||
  { cat "$E2E_WORK/cli.out"; fail "member's tierfs prefetch failed"; }
wait_residency "$mnt/b/f2.bin" "l2=1/1"
log "ok a member by its primary group starts prefetch jobs (setfattr, tierfs prefetch)"

# Supplementary group: the Python package's list job (what PrefetchSampler sends).
as_supp env PYTHONPATH="$E2E_ROOT/python" "$PY" -c "
import sys, tierfs
h = tierfs.prefetch(['$mnt/c/f1.bin', '$mnt/c/f3.bin'], tier='l2', wait=True, timeout=30)
print('list job done')" || fail "member (supplementary group) could not prefetch from Python"
wait_residency "$mnt/c/f1.bin" "l2=1/1"
wait_residency "$mnt/c/f3.bin" "l2=1/1"
wait_residency "$mnt/c/f2.bin" "l2=0/1"
log "ok a member by a supplementary group prefetches through the Python package"

# The other controls stay with root and the mounting user: EPERM from the daemon.
for kv in user.tierfs.evict=1 user.tierfs.pin=1 user.tierfs.ttl=1ns user.tierfs.policy=ttl; do
  refused "Operation not permitted" as_supp setfattr -n "${kv%%=*}" -v "${kv#*=}" "$mnt/a"
done
refused "Operation not permitted" as_supp setfattr -n user.tierfs.log_level -v debug "$mnt"
wait_residency "$mnt/a/f1.bin" "l2=1/1"
[[ "$(xattr_of "$mnt" user.tierfs.log_level)" != debug ]] || fail "a member changed the log level"
grep -q "setxattr user.tierfs.evict on 'a' by uid 65534 refused" "$logf" ||
  fail "no log line for the member's refused evict"
log "ok members get EPERM for evict, pin, ttl, policy and log_level"

# A non-member: the kernel refuses (no write permission), the Python package says who may.
refused "Permission denied" as_other setfattr -n user.tierfs.prefetch -v l2 "$mnt/c"
out="$(as_other env PYTHONPATH="$E2E_ROOT/python" "$PY" -c "
import tierfs
try:
    tierfs.prefetch(['$mnt/c'])
except PermissionError as e:
    print('refused:', e)
" 2>&1)" || fail "python as non-member: $out"
[[ "$out" == *"refused:"*"uid 65534 may not start prefetches"*"--control-group"* ]] ||
  fail "python as non-member: $out"
[[ "$(xattr_of "$mnt/c" user.tierfs.prefetch)" == state=none* ]] || fail "a non-member started a job"
wait_residency "$mnt/c/f2.bin" "l2=0/1"
log "ok a non-member gets EACCES; Python: $out"
tierfs_umount "$mnt" "$pid" || { print_log_tail "$logf"; fail "unclean unmount"; }

# ---- without default_permissions the daemon itself decides: EPERM for a non-member ----
logf="$E2E_WORK/daemon2.log"
tierfs_mount "file://$src" "$mnt" "$cache" "$logf" -o allow_other,nodefault_permissions \
  --control-group "$GID"
pid=$TIERFS_PID
refused "Operation not permitted" as_other setfattr -n user.tierfs.prefetch -v l2 "$mnt/c"
grep -q "by uid 65534 refused: only root and the mounting user (uid 0) and members of the control group (gid $GID) may set it" \
  "$logf" || { print_log_tail "$logf"; fail "no log line naming who may set prefetch"; }
as_supp setfattr -n user.tierfs.prefetch -v l2 "$mnt/c" || fail "member (numeric gid) refused"
wait_job "$mnt/c" user.tierfs.prefetch
wait_residency "$mnt/c/f2.bin" "l2=1/1"
log "ok without default_permissions: non-member EPERM from the daemon, member by gid works"
tierfs_umount "$mnt" "$pid" || { print_log_tail "$logf"; fail "unclean unmount"; }

# ---- an S3 source: objects have no owner, so every inode is the group's, with g+w ----
BUCKET=tierfs-ctl
s3rver_start "$BUCKET"
step "upload test objects" 60 env AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER \
  "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" \
  "d/one.bin=3000000:1" "d/two.bin=5000:2"
logf="$E2E_WORK/daemon3.log"
tierfs_mount "s3://$BUCKET" "$mnt" "$E2E_WORK/cache3" "$logf" --endpoint "$S3_ENDPOINT" \
  -o allow_other --control-group "$GROUP"
pid=$TIERFS_PID
[[ "$(stat -c %g:%a "$mnt/d/one.bin")" == "$GID:664" ]] || fail "S3 file: $(stat -c %g:%a "$mnt/d/one.bin")"
[[ "$(stat -c %g:%a "$mnt/d")" == "$GID:775" ]] || fail "S3 dir: $(stat -c %g:%a "$mnt/d")"
refused "Permission denied" as_other setfattr -n user.tierfs.prefetch -v l2 "$mnt/d"
as_supp setfattr -n user.tierfs.prefetch -v l2 "$mnt/d" || fail "member refused on an S3 directory"
wait_job "$mnt/d" user.tierfs.prefetch
wait_residency "$mnt/d/one.bin" "l2=3/3"
want="$("$PY" "$E2E_DIR/s3put.py" --sha "d/one.bin=3000000:1")"
[[ "$(as_other sha256sum <"$mnt/d/one.bin" | cut -d' ' -f1)" == "$want" ]] || fail "d/one.bin bytes differ"
log "ok an S3 source: every inode is group $GID with g+w; a member prefetches d/"
tierfs_umount "$mnt" "$pid" || { print_log_tail "$logf"; fail "unclean unmount"; }
