#!/usr/bin/env bash
# End-to-end: memory.limit (--memory-limit) through /dev/fuse. A mount limited to 160MiB (with
# cache.l1_size 1GiB asked for) serves sequential readers of distinct files each larger than the
# limit, random readers and a prefetch job at once: the daemon's peak RSS (VmHWM) stays within the
# limit plus a margin, every byte matches the origin, and `tierfs status`, user.tierfs.daemon and
# /metrics report the limit and the budget's use by consumer. A limit too small to run with, or
# not a size, is refused with a message naming the key or flag; `tierfs config check` reports the
# limit and where it comes from.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init

LIMIT_MIB=160
# Beyond the budget: what is resident but not a block (libfuse's request buffers, the stacks of
# the threads that run, allocator slack) and the block storage freed in the last few seconds the
# pool keeps for reuse.
MARGIN_MIB=16
FILE_MIB=200   # each sequential reader's file: larger than the limit
READERS=6

# ---- refused values ----
src="$E2E_WORK/src"
mkdir -p "$src/seq" "$src/jobs" "$E2E_WORK/mnt-bad"
out="$E2E_WORK/bad.out"
rc=0
timeout -k 2 20 "$TIERFS" mount "file://$src" "$E2E_WORK/mnt-bad" --cache-dir "$E2E_WORK/cache-bad" \
  --memory-limit 16MiB -f >"$out" 2>&1 || rc=$?
(( rc == 2 )) || { cat "$out"; fail "a 16MiB limit: exit $rc, want 2 (usage)"; }
grep -q "memory.limit (--memory-limit): 16MiB is too small to run with" "$out" ||
  { cat "$out"; fail "the refusal does not name memory.limit"; }
rc=0
timeout -k 2 20 "$TIERFS" mount "file://$src" "$E2E_WORK/mnt-bad" --cache-dir "$E2E_WORK/cache-bad" \
  --memory-limit lots -f >"$out" 2>&1 || rc=$?
if (( rc != 2 )) || ! grep -q -- "--memory-limit" "$out"; then
  cat "$out"
  fail "'lots' not refused naming --memory-limit"
fi
is_mounted "$E2E_WORK/mnt-bad" && fail "a refused mount is mounted"
log "ok bad limits refused, naming the key"

printf '[memory]\nlimit = "512MiB"\n' >"$E2E_WORK/limit.toml"
"$TIERFS" config check "$E2E_WORK/limit.toml" >"$out" 2>&1 || { cat "$out"; fail "config check failed"; }
grep -q '^memory limit 512MiB (memory.limit)' "$out" || { cat "$out"; fail "config check does not report the limit"; }
printf '[cache]\nl1_size = "1GiB"\n' >"$E2E_WORK/default.toml"
"$TIERFS" config check "$E2E_WORK/default.toml" >"$out" 2>&1 || { cat "$out"; fail "config check failed"; }
grep -qE '^memory limit .* \((a quarter of physical memory|three quarters of the cgroup memory limit)' "$out" ||
  { cat "$out"; fail "config check does not say where the default limit comes from"; }
log "ok config check reports the limit and its source"
# An L1 the user set is kept: a derived limit too small for it is raised (as far as the host's
# memory; config check says so), never a silent smaller L1.
derived=$(sed -n 's/^memory limit \([0-9.]*[KMGT]iB\) .*/\1/p' "$out")
derived_bytes=$("$PY" -c 'import sys; n, u = sys.argv[1][:-3], sys.argv[1][-3:]; print(int(float(n) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[u]))' "$derived")
mem_bytes=$(( $(awk '/^MemTotal/ {print $2}' /proc/meminfo) * 1024 ))
if (( derived_bytes + (1 << 30) < mem_bytes )); then
  l1_mib=$(( derived_bytes >> 20 ))
  printf '[cache]\nl1_size = "%sMiB"\n' "$l1_mib" >"$E2E_WORK/l1.toml"
  "$TIERFS" config check "$E2E_WORK/l1.toml" >"$out" 2>&1 || { cat "$out"; fail "config check of an explicit l1_size failed"; }
  grep -q "raised to hold cache.l1_size" "$out" || { cat "$out"; fail "the derived limit was not raised for cache.l1_size"; }
  grep -q "fitted to the limit: cache.l1_size" "$out" && { cat "$out"; fail "cache.l1_size was fitted down"; }
  log "ok an explicit cache.l1_size of ${l1_mib}MiB raises the derived limit ($derived) instead of shrinking"
else
  log "explicit cache.l1_size above the derived limit: not checked (host memory $mem_bytes too close to $derived)"
fi

# ---- the load ----
for i in $(seq 1 "$READERS"); do
  head -c "$((FILE_MIB << 20))" /dev/urandom >"$src/seq/f$i"
done
head -c "$((FILE_MIB << 20))" /dev/urandom >"$src/random.bin"
for i in 1 2 3 4; do head -c "$((40 << 20))" /dev/urandom >"$src/jobs/j$i"; done
log "origin: $READERS x ${FILE_MIB}MiB sequential, one ${FILE_MIB}MiB random, 4 x 40MiB to prefetch"

mnt="$E2E_WORK/mnt" logf="$E2E_WORK/daemon.log"
port="$(free_port)"
tierfs_mount "file://$src" "$mnt" "$E2E_WORK/cache" "$logf" --memory-limit "${LIMIT_MIB}MiB" \
  --l1-size 1GiB --metrics-address "127.0.0.1:$port"
pid="$TIERFS_PID"
grep -q "memory limit ${LIMIT_MIB}MiB (memory.limit)" "$logf" || { print_log_tail "$logf"; fail "no log line about the limit"; }
grep -q "warning.*cache.l1_size (--l1-size) 1GiB does not fit memory.limit (--memory-limit) ${LIMIT_MIB}MiB: L1 holds" "$logf" ||
  { print_log_tail "$logf"; fail "no warning that the L1 asked for does not fit the limit"; }

# Sampled for the log; the check is VmHWM, the kernel's own peak.
( while kill -0 "$pid" 2>/dev/null; do
    awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true
    sleep 0.2
  done ) >"$E2E_WORK/rss.samples" &
sampler=$!
E2E_BG_PIDS+=("$sampler")

step "prefetch job on jobs/" 20 setfattr -n user.tierfs.prefetch -v l2 "$mnt/jobs"
# The readers, all at once, under one hard timeout: each sequential reader's sha256 goes to a file,
# the random readers compare every range with the origin themselves.
export mnt src READERS PY E2E_DIR W="$E2E_WORK"
# shellcheck disable=SC2016  # expanded by the inner bash, from the exported variables
step "$READERS sequential + 8 random readers" 300 bash -c '
  pids=()
  for i in $(seq 1 "$READERS"); do
    ( sha256sum <"$mnt/seq/f$i" | cut -d" " -f1 >"$W/got$i" ) &
    pids+=($!)
  done
  "$PY" "$E2E_DIR/memory_load.py" "$mnt/random.bin" "$src/random.bin" 8 150 >"$W/random.out" 2>&1 &
  pids+=($!)
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  (( rc == 0 )) || cat "$W/random.out" >&2
  exit $rc'
cat "$E2E_WORK/random.out"
for i in $(seq 1 "$READERS"); do
  want="$(sha256sum <"$src/seq/f$i" | cut -d' ' -f1)"
  [[ "$(cat "$E2E_WORK/got$i")" == "$want" ]] || fail "seq/f$i: sha256 differs from the origin"
done
log "ok $READERS sequential readers: every sha256 matches the origin"
deadline=$((SECONDS + 120))
until [[ "$(xattr_of "$mnt/jobs" user.tierfs.prefetch)" == state=done* ]]; do
  (( SECONDS < deadline )) || fail "prefetch job not done within 120 s: $(xattr_of "$mnt/jobs" user.tierfs.prefetch)"
  sleep 0.5
done
for i in 1 2 3 4; do
  cmp -s "$mnt/jobs/j$i" "$src/jobs/j$i" || fail "jobs/j$i differs from the origin"
done
log "ok prefetch job done, its files match the origin"

hwm_kib="$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")"
max_sampled="$(sort -n "$E2E_WORK/rss.samples" | tail -1)"
log "daemon peak RSS: VmHWM $((hwm_kib >> 10))MiB (sampled max $((max_sampled >> 10))MiB), limit ${LIMIT_MIB}MiB + ${MARGIN_MIB}MiB"
(( hwm_kib <= (LIMIT_MIB + MARGIN_MIB) << 10 )) ||
  fail "peak RSS $((hwm_kib >> 10))MiB is over the limit ${LIMIT_MIB}MiB + ${MARGIN_MIB}MiB"

# ---- reported ----
d="$(xattr_of "$mnt" user.tierfs.daemon)"
[[ "$d" == *"memory_limit=$((LIMIT_MIB << 20)) memory_limit_from=config "* ]] || fail "user.tierfs.daemon: $d"
"$TIERFS" status >"$E2E_WORK/status.txt" 2>&1 || true
grep -A4 "^$mnt " "$E2E_WORK/status.txt" | grep -qE "^  memory   rss .* of limit ${LIMIT_MIB}MiB \(config\)  budget .*: l1 " ||
  { cat "$E2E_WORK/status.txt"; fail "tierfs status does not show the memory budget"; }
"$TIERFS" status --json >"$E2E_WORK/status.json" 2>&1 || true
"$PY" - "$E2E_WORK/status.json" "$mnt" "$((LIMIT_MIB << 20))" <<'PYEOF' || fail "tierfs status --json lacks the limit"
import json, sys
doc = json.load(open(sys.argv[1]))
m = [m for m in doc["mounts"] if m["mountpoint"] == sys.argv[2]][0]
assert m["daemon"]["memory_limit"] == sys.argv[3], m["daemon"]
assert "memory_l1" in m["daemon"] and "rss" in m["daemon"], m["daemon"]
PYEOF
metrics="$(curl -sf "http://127.0.0.1:$port/metrics")" || fail "no /metrics"
for want in "process_resident_memory_bytes " "process_open_fds " \
  "tierfs_memory_limit_bytes{source=\"config\"} $((LIMIT_MIB << 20))" \
  'tierfs_memory_budget_bytes{consumer="l1"} ' 'tierfs_memory_budget_bytes{consumer="blocks"} ' \
  'tierfs_memory_budget_bytes{consumer="listings"} '; do
  grep -qF "$want" <<<"$metrics" || fail "/metrics lacks $want"
done
rss_metric="$(awk '/^process_resident_memory_bytes / {print $2}' <<<"$metrics")"
(( ${rss_metric%.*} > 0 && ${rss_metric%.*} <= (LIMIT_MIB + MARGIN_MIB) << 20 )) ||
  fail "process_resident_memory_bytes $rss_metric"
log "ok status, user.tierfs.daemon and /metrics report the limit and the budget"
tierfs_umount "$mnt" "$pid" || fail "unmount failed"
log "PASS"
