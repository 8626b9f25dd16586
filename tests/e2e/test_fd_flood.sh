#!/usr/bin/env bash
# End-to-end: the daemon's file descriptors under pressure. A file:// mount warms L2, then:
#  rlimit: the daemon raises its soft RLIMIT_NOFILE to the hard limit at start (started under
#          prlimit --nofile=200:1024, /proc/PID/limits says 1024).
#  flood:  remounted under prlimit --nofile=256:256 with --metrics-address, 1000 connections are
#          opened to the metrics port and held while files in L2 and files not yet cached are
#          read: every byte is right, the L2 blocks stay indexed, the daemon holds a bounded
#          number of descriptors, the log stays small, and /metrics answers again once the
#          flood ends.
#  l2:     the live daemon's soft limit is lowered to the descriptors it holds (every open fails
#          with EMFILE) while files whose blocks are only in L2 are read: those reads may fail,
#          but the blocks stay indexed (a shortage is not damage), and once the limit is back
#          they are read byte-exact from L2.
# FD_FLOOD_PARTS="rlimit flood l2" (the default) picks the parts to run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
PARTS=" ${FD_FLOOD_PARTS:-rlimit flood l2} "
command -v prlimit >/dev/null || fail "prlimit (util-linux) is missing"

SRC="$E2E_WORK/src" MNT="$E2E_WORK/mnt" CACHE="$E2E_WORK/cache"
mkdir -p "$SRC"
# Group a: in L2, read during the flood; group b: in L2, read with the limit lowered; group c:
# not cached before the flood.
"$PY" - "$SRC" "$E2E_WORK/manifest.json" "$MNT" <<'PYEOF'
import hashlib, json, os, sys
src, out, mnt = sys.argv[1:4]
sizes = [3 << 20, (3 << 19) + 17, 5 << 20, 100000]
sha = {}
for g in "abc":
    os.makedirs(os.path.join(src, g), exist_ok=True)
    for i, n in enumerate(sizes):
        data = os.urandom(n)
        rel = f"{g}/f{i}.bin"
        with open(os.path.join(src, rel), "wb") as f:
            f.write(data)
        sha[rel] = hashlib.sha256(data).hexdigest()
json.dump({"mount": mnt, "sha256": sha}, open(out, "w"))
PYEOF
group() { for i in 0 1 2 3; do echo "$1/f$i.bin"; done; }
mapfile -t A < <(group a)
mapfile -t B < <(group b)
mapfile -t C < <(group c)

# prlimit_tierfs SOFT:HARD: a wrapper that starts tierfs under that limit (exec: the daemon keeps
# the PID tierfs_mount records).
REAL_TIERFS="$TIERFS"
prlimit_tierfs() {
  local w="$E2E_WORK/tierfs-nofile-${1/:/-}"
  printf '#!/bin/sh\nexec prlimit --nofile=%s -- %q "$@"\n' "$1" "$REAL_TIERFS" >"$w"
  chmod +x "$w"
  echo "$w"
}
open_files_limit() {  # open_files_limit PID: "SOFT HARD" from /proc/PID/limits
  awk '/^Max open files/ { print $4, $5 }' "/proc/$1/limits"
}
# l2_full FILE: every block of FILE is in L2 (user.tierfs.residency "... l2=N/N").
l2_full() {
  local v
  v="$(xattr_of "$1" user.tierfs.residency)" || fail "getfattr residency of $1"
  [[ "$v" =~ l2=([0-9]+)/([0-9]+) ]] && (( BASH_REMATCH[1] == BASH_REMATCH[2] && BASH_REMATCH[2] > 0 ))
}
wait_l2_full() {
  local deadline=$((SECONDS + 20))
  until l2_full "$1"; do
    (( SECONDS < deadline )) || fail "residency of $1 is '$(xattr_of "$1" user.tierfs.residency)', want all of it in l2"
    sleep 0.1
  done
}
# verify FILE...: sha256 through the mount, as in the manifest.
cat >"$E2E_WORK/verify_sha.py" <<'PYEOF'
import hashlib, json, os, sys
m = json.load(open(sys.argv[1]))
bad = []
for rel in sys.argv[2:]:
    with open(os.path.join(m["mount"], rel), "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != m["sha256"][rel]:
            bad.append(rel)
sys.exit(f"wrong bytes: {bad}" if bad else 0)
PYEOF
VERIFY=("$PY" "$E2E_WORK/verify_sha.py" "$E2E_WORK/manifest.json")

# Warm L2 with groups a and b (and check the start-up limit raise on the way).
TIERFS="$(prlimit_tierfs 200:1024)"
tierfs_mount "file://$SRC" "$MNT" "$CACHE" "$E2E_WORK/warm.log"
TIERFS="$REAL_TIERFS"
if [[ "$PARTS" == *" rlimit "* ]]; then
  lim="$(open_files_limit "$TIERFS_PID")"
  log "daemon started under prlimit --nofile=200:1024: open files limit now $lim"
  [[ "$lim" == "1024 1024" ]] || fail "the daemon did not raise its soft open files limit to the hard one: $lim"
  grep -q "soft limit raised from 200" "$E2E_WORK/warm.log" || fail "no log line about the raised limit"
  log "ok the soft RLIMIT_NOFILE is raised to the hard limit at start"
fi
step "read groups a and b" 120 "${VERIFY[@]}" "${A[@]}" "${B[@]}"
for f in "${A[@]}" "${B[@]}"; do wait_l2_full "$MNT/$f"; done
tierfs_umount "$MNT" "$TIERFS_PID" || fail "unclean unmount"
log "ok groups a and b are in L2"

# Remount on the same cache (L1 empty) with 256 descriptors at most, serving metrics.
PORT="$(free_port)"
LOGF="$E2E_WORK/flood.log"
TIERFS="$(prlimit_tierfs 256:256)"
tierfs_mount "file://$SRC" "$MNT" "$CACHE" "$LOGF" --metrics-address "127.0.0.1:$PORT"
TIERFS="$REAL_TIERFS"
PID="$TIERFS_PID"
log "daemon pid $PID, open files limit $(open_files_limit "$PID"), $(ls "/proc/$PID/fd" | wc -l) open"

if [[ "$PARTS" == *" flood "* ]]; then
  lines0="$(wc -l <"$LOGF")"
  rc=0
  timeout -k 5 120 "$PY" "$E2E_DIR/fd_flood.py" "$PORT" "$PID" 8 "$E2E_WORK/manifest.json" \
    "${A[@]}" "${C[@]}" >"$E2E_WORK/flood.json" || rc=$?
  lines=$(($(wc -l <"$LOGF") - lines0))
  kept=0
  for f in "${A[@]}" "${B[@]}"; do l2_full "$MNT/$f" && kept=$((kept + 1)); done
  dropped="$(grep -c "l2 block .* dropped" "$LOGF" || true)"
  peak="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["fds_peak"])' "$E2E_WORK/flood.json")"
  log "flood: $(cat "$E2E_WORK/flood.json")"
  log "flood: $lines log lines, $dropped L2 blocks dropped, $kept of 8 files still wholly in L2, l2.corruptions+errors $(stat_value "$(stats_xattr "$MNT")" l2.corruptions)+$(stat_value "$(stats_xattr "$MNT")" l2.errors)"
  (( rc == 0 )) || fail "reads failed or /metrics did not answer again during or after the flood (exit $rc)"
  (( kept == 8 && dropped == 0 )) || fail "L2 blocks were dropped in the flood"
  (( lines <= 20 )) || { print_log_tail "$LOGF"; fail "$lines log lines during the flood"; }
  (( peak <= 200 )) || fail "the daemon held $peak descriptors in the flood"
  log "ok 1000 connections to the metrics port: reads byte-exact, L2 kept, $peak descriptors at most, $lines log lines"
fi

if [[ "$PARTS" == *" l2 "* ]]; then
  # A new descriptor takes the lowest free number and fails with EMFILE when that is not below
  # the soft limit: the limit is set to the lowest free number.
  n="$(ls "/proc/$PID/fd" | sort -n | awk '$1 != NR - 1 { print NR - 1; found = 1; exit } END { if (!found) print NR }')"
  lines0="$(wc -l <"$LOGF")"
  prlimit --pid "$PID" --nofile="$n:256" || fail "prlimit --pid $PID failed"
  log "soft open files limit of the daemon lowered to $n, its lowest free descriptor: $(open_files_limit "$PID")"
  failed=0
  for f in "${B[@]}"; do
    timeout -k 2 30 cat "$MNT/$f" >/dev/null 2>&1 || failed=$((failed + 1))
  done
  prlimit --pid "$PID" --nofile=256:256 || fail "prlimit --pid $PID failed"
  log "$failed of ${#B[@]} reads failed while no descriptor was left"
  grep -q "Too many open files" "$LOGF" || { print_log_tail "$LOGF"; fail "the daemon never ran out of descriptors"; }
  for f in "${B[@]}"; do l2_full "$MNT/$f" || fail "$f lost L2 blocks to EMFILE: $(xattr_of "$MNT/$f" user.tierfs.residency)"; done
  ! grep -q "l2 block .* dropped" "$LOGF" || { grep "l2 block .* dropped" "$LOGF" | head -n 5; fail "L2 blocks were dropped for EMFILE"; }
  step "read group b again" 60 "${VERIFY[@]}" "${B[@]}"
  hits="$(stat_value "$(stats_xattr "$MNT")" l2.hits)"
  log "ok out of descriptors: L2 blocks kept, then read byte-exact (l2.hits=$hits, $(($(wc -l <"$LOGF") - lines0)) log lines)"
fi
tierfs_umount "$MNT" "$PID" || { print_log_tail "$LOGF"; fail "unclean unmount"; }
