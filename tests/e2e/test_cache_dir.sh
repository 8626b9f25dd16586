#!/usr/bin/env bash
# End-to-end: the root daemon's cache directory against another local user (`nobody`).
#   * nobody plants CACHE -> VICTIM (a root-owned directory holding `precious` and a `lock`) in a
#     directory others may write without the sticky bit, in a sticky one, and in a directory of
#     its own: every mount is refused with a message naming the way in, and VICTIM keeps its mode, its `lock` and its
#     contents (no meta/ or blocks/ appear in it);
#   * root's own symlink to a cache directory, and a cache directory in a sticky directory, work;
#   * once mounted, swapping the cache directory's name for a symlink to VICTIM changes nothing:
#     new blocks land in the directory that was checked (held open), never in VICTIM.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
# nobody must reach the work dir to plant its symlinks.
chmod 755 "$E2E_WORK"
W="$E2E_WORK"
as_nobody() { timeout -k 2 20 runuser -u nobody -- "$@"; }

src="$W/src"
mkdir -p "$src/d"
head -c 3000000 /dev/urandom >"$src/d/one.bin"
head -c 2000000 /dev/urandom >"$src/d/two.bin"
victim="$W/victim"
mkdir -m 0755 "$victim"
echo keep >"$victim/lock"
echo data >"$victim/precious"
victim_state() { (cd "$victim" && stat -c '%a %U' . && ls -A && cat lock precious); }
want_victim="$(victim_state)"
check_victim() {
  local now
  now="$(victim_state)"
  [[ "$now" == "$want_victim" ]] || fail "$1: the victim changed: '$now', was '$want_victim'"
}

# refused NAME CACHE WANT: a mount on CACHE fails naming WANT, mounts nothing, leaves the victim.
refused() {
  local name="$1" cache="$2" want="$3" mnt="$W/mnt-$1" rc=0
  mkdir -p "$mnt"
  E2E_MOUNTS+=("$mnt")  # unmounted by the cleanup should it mount after all
  E2E_PIDS+=("")
  timeout -k 2 30 "$TIERFS" mount "file://$src" "$mnt" --cache-dir "$cache" --l1-size 64MiB \
    --l2-size 256MiB -f >"$W/$name.out" 2>&1 </dev/null || rc=$?
  check_victim "$name"
  is_mounted "$mnt" && fail "$name: mounted with the cache at $cache"
  (( rc != 0 )) || fail "$name: exit 0"
  grep -qF -- "$want" "$W/$name.out" || fail "$name: rc $rc, no '$want' in: $(cat "$W/$name.out")"
  log "ok $name refused (rc $rc): $(grep -F -- "$want" "$W/$name.out" | tail -n 1)"
}

# 1. A directory anyone may write, without the sticky bit: nobody's symlink, and a plain name.
mkdir -m 0777 "$W/open"
chmod 0777 "$W/open"
as_nobody ln -s "$victim" "$W/open/cache"
refused open-symlink "$W/open/cache" \
  "cache directory $W/open/cache: $W/open has mode 0777: writable by other users without the sticky bit"
refused open-plain "$W/open/other" "$W/open has mode 0777: writable by other users without the sticky bit"
[[ ! -e "$W/open/other" ]] || fail "a cache directory was created in $W/open"

# 2. A sticky directory (like /tmp): nobody's symlink is not followed.
mkdir "$W/sticky"
chmod 1777 "$W/sticky"
as_nobody ln -s "$victim" "$W/sticky/cache"
refused sticky-symlink "$W/sticky/cache" \
  "cache directory $W/sticky/cache: $W/sticky/cache is a symlink owned by uid 65534"

# nobody's own directory (in the sticky one), open to all, holding its symlink: refused at the
# directory nobody owns, before the symlink is looked at.
as_nobody mkdir -m 0777 "$W/sticky/x"
as_nobody ln -s "$victim" "$W/sticky/x/cache"
refused nobody-dir "$W/sticky/x/cache" \
  "cache directory $W/sticky/x/cache: $W/sticky/x is owned by uid 65534 (nobody)"

# 3. Root's own symlink is followed (the cache lands in its target), and a cache directory of its
#    own in the sticky directory works.
mkdir -p "$W/real"
ln -s "$W/real" "$W/link"
mnt="$W/mnt"
tierfs_mount "file://$src" "$mnt" "$W/link" "$W/link.log" --l2-size 256MiB
cmp "$src/d/one.bin" "$mnt/d/one.bin" || fail "d/one.bin differs"
wait_residency "$mnt/d/one.bin" "l2=3/3"
[[ -f "$W/real/meta/data.mdb" && "$(cat "$W/real/lock")" == "$TIERFS_PID" ]] ||
  fail "the store is not in $W/real: $(ls -lA "$W/real")"
(( "$(find "$W/real/blocks" -type f | wc -l)" >= 3 )) || fail "no blocks in $W/real/blocks"
log "ok root's symlink followed: store and blocks in $W/real"

# 4. The name swapped under the live mount: root moves the directory away and puts a symlink to
#    the victim in its place. Blocks read from now on go where the checked directory went.
mv "$W/real" "$W/real.moved"
ln -s "$victim" "$W/real"
cmp "$src/d/two.bin" "$mnt/d/two.bin" || fail "d/two.bin differs"
wait_residency "$mnt/d/two.bin" "l2=2/2"
check_victim "swap under the mount"
(( "$(find "$W/real.moved/blocks" -type f | wc -l)" >= 5 )) || fail "new blocks not in $W/real.moved"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
check_victim "after the unmount"
log "ok a swapped name does not redirect the store or the blocks"

mkdir -p "$W/sticky/mine"
tierfs_mount "file://$src" "$mnt" "$W/sticky/mine" "$W/mine.log" --l2-size 256MiB
cmp "$src/d/one.bin" "$mnt/d/one.bin" || fail "d/one.bin differs (sticky parent)"
[[ "$(stat -c %a "$W/sticky/mine")" == 700 ]] || fail "$W/sticky/mine not 0700"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
log "ok a cache directory of root's own in a sticky directory works"
log "PASS"
