#!/usr/bin/env bash
# End-to-end: cache sizes the host cannot give, and start-up failures that must be explained.
#   * --l1-size above the host's memory (MemTotal, or the cgroup's limit) is refused, naming the
#     flag; nothing is mounted;
#   * --l2-size 1PiB and 1EiB (far above the cache file system) mount with a warning naming the
#     flag, and the daemon's peak RSS (VmHWM) stays small (nothing is sized from the nominal L2);
#   * `tierfs config check` refuses an l1_size above the memory and warns about an l2_size above
#     the cache file system;
#   * a daemon that cannot start its threads (prlimit --as) exits 1 with the reason, in the
#     foreground and daemonized (where the parent prints it and the log holds it), never with an
#     abort.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
W="$E2E_WORK"
src="$W/src"
mkdir -p "$src"
head -c 3000000 /dev/urandom >"$src/one.bin"
# The most the daemon's peak RSS may reach with --l1-size 64MiB (about 80 MiB measured).
HWM_LIMIT_KB=$((512 * 1024))

# 1. L1 above the memory.
mem_kb="$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)"
l1="$((mem_kb / 1048576 + 2))GiB"
mnt="$W/mnt-l1"
mkdir -p "$mnt"
E2E_MOUNTS+=("$mnt")  # unmounted by the cleanup should it mount after all
E2E_PIDS+=("")
rc=0
timeout -k 2 60 "$TIERFS" mount "file://$src" "$mnt" --cache-dir "$W/c-l1" --l1-size "$l1" \
  --l2-size 256MiB --log-file "$W/l1.log" >"$W/l1.out" 2>&1 </dev/null || rc=$?
is_mounted "$mnt" && fail "--l1-size $l1 (MemTotal ${mem_kb} kB) mounted"
[[ $rc == 2 ]] && grep -q -- "cache.l1_size (--l1-size): $l1 is more than" "$W/l1.out" ||
  fail "--l1-size $l1: rc $rc, $(cat "$W/l1.out")"
log "ok --l1-size $l1 refused: $(cat "$W/l1.out")"

# 2. L2 far above the file system: mounts with a warning; the peak RSS stays bounded. The daemon is
#    watched while it starts and stopped (by its PID) as soon as it passes the bound.
huge_l2() {
  local size="$1" mnt="$W/mnt-$1" logf="$W/l2-$1.log" pid hwm=0 deadline
  mkdir -p "$mnt"
  "$TIERFS" mount "file://$src" "$mnt" --cache-dir "$W/c-$size" --l1-size 64MiB \
    --l2-size "$size" -f >"$logf" 2>&1 </dev/null &
  pid=$!
  E2E_PIDS+=("$pid")
  E2E_MOUNTS+=("$mnt")
  deadline=$((SECONDS + MOUNT_TIMEOUT))
  until is_mounted "$mnt"; do
    hwm="$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)"
    if (( ${hwm:-0} > HWM_LIMIT_KB )); then
      kill -KILL "$pid" 2>/dev/null || true
      fail "--l2-size $size: the daemon's peak RSS reached ${hwm} kB before mounting"
    fi
    pid_alive "$pid" || { print_log_tail "$logf"; fail "--l2-size $size: the daemon exited"; }
    (( SECONDS < deadline )) || fail "--l2-size $size: not mounted within ${MOUNT_TIMEOUT}s"
    sleep 0.1
  done
  cmp "$src/one.bin" "$mnt/one.bin" || fail "--l2-size $size: one.bin differs"
  wait_residency "$mnt/one.bin" "l2=3/3"
  hwm="$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")"
  (( hwm <= HWM_LIMIT_KB )) || fail "--l2-size $size: peak RSS ${hwm} kB"
  grep -q -- "warning: cache.l2_size (--l2-size): $size is more than the whole file system" \
    "$logf" || fail "--l2-size $size: no warning: $(head -n 5 "$logf")"
  tierfs_umount "$mnt" "$pid" || fail "--l2-size $size: unclean unmount"
  log "ok --l2-size $size mounted, peak RSS ${hwm} kB: $(grep -o 'warning: .*' "$logf" | head -n 1)"
}
huge_l2 1PiB
huge_l2 1EiB

# 3. config check.
printf '[cache]\nl1_size = "%s"\n' "$l1" >"$W/l1.toml"
printf '[cache]\nl2_size = "1PiB"\n' >"$W/l2.toml"
rc=0
"$TIERFS" config check "$W/l1.toml" >/dev/null 2>"$W/check-l1.err" || rc=$?
[[ $rc == 2 ]] && grep -q "cache.l1_size (--l1-size): $l1 is more than" "$W/check-l1.err" ||
  fail "config check of l1_size $l1: rc $rc, $(cat "$W/check-l1.err")"
rc=0
"$TIERFS" config check "$W/l2.toml" >/dev/null 2>"$W/check-l2.err" || rc=$?
[[ $rc == 0 ]] && grep -q "warning: cache.l2_size (--l2-size): 1PiB is more than" "$W/check-l2.err" ||
  fail "config check of l2_size 1PiB: rc $rc, $(cat "$W/check-l2.err")"
log "ok config check: $(cat "$W/check-l1.err") / $(cat "$W/check-l2.err")"

# 4. No room for the daemon's threads: explained, exit 1, no abort. (A small LMDB map, so that
#    the store still opens within the limit and the threads are what fails.)
printf '[metastore]\nmap_size = "16MiB"\n' >"$W/small.toml"
mnt="$W/mnt-as"
mkdir -p "$mnt"
E2E_MOUNTS+=("$mnt")
E2E_PIDS+=("")
rc=0
timeout -k 2 60 prlimit --as=250000000 "$TIERFS" mount "file://$src" "$mnt" --config "$W/small.toml" \
  --cache-dir "$W/c-as" --l1-size 64MiB --l2-size 256MiB -f >"$W/as-fg.out" 2>&1 </dev/null || rc=$?
is_mounted "$mnt" && fail "mounted under prlimit --as"
[[ $rc == 1 ]] && grep -q "error daemon: Internal: while opening the caches: " "$W/as-fg.out" &&
  ! grep -q "terminate called" "$W/as-fg.out" || fail "prlimit --as, foreground: rc $rc, $(cat "$W/as-fg.out")"
log "ok foreground: $(grep 'while opening' "$W/as-fg.out")"
rc=0
timeout -k 2 60 prlimit --as=250000000 "$TIERFS" mount "file://$src" "$mnt" --config "$W/small.toml" \
  --cache-dir "$W/c-as" --l1-size 64MiB --l2-size 256MiB --log-file "$W/as-d.log" \
  >"$W/as-d.out" 2>&1 </dev/null || rc=$?
is_mounted "$mnt" && fail "mounted under prlimit --as (daemonized)"
[[ $rc == 1 ]] && grep -q "^tierfs: Internal: while opening the caches: " "$W/as-d.out" ||
  fail "prlimit --as, daemonized: rc $rc, $(cat "$W/as-d.out")"
grep -q "while opening the caches" "$W/as-d.log" || fail "the log does not say why: $(cat "$W/as-d.log")"
log "ok daemonized: $(cat "$W/as-d.out")"
log "PASS"
