#!/usr/bin/env bash
# Soak: 16 concurrent readers for SOAK_SECONDS against a mount whose origin (s3rver) sits behind
# tests/e2e/fault_proxy.py injecting random faults: 503 SlowDown, 500, resets and short bodies on
# ranged GETs, rare stalls, and 503s on listings and HEADs (short metadata ttl, so listings are
# refreshed under fire). Small L1 and L2, so blocks are evicted and fetched again all the time.
#   * zero wrong bytes: every whole-file read and every pread either verifies or fails
#     (fault_check.py soak checks each against the generator's bytes), no read slower than 60 s;
#   * the daemon's open fds (/proc/PID/fd), threads (/proc/PID/status Threads) and RSS, sampled
#     with the readers idle after a warm-up and again at the end, stay within bounds:
#     fds other than pipes +-16, threads +-8, RSS growth < 64 MiB; pipes at most two per thread
#     (libfuse gives each FUSE worker thread that splices a reply its own pipe pair, created at
#     its first spliced reply and closed when the thread ends: they follow the thread count).
#
#   SOAK_SECONDS=300 tests/e2e/soak.sh        (default 300; test_soak_short.sh runs 45)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
SOAK_SECONDS="${SOAK_SECONDS:-300}"
SOAK_THREADS="${SOAK_THREADS:-16}"
E2E_NAME="${E2E_NAME:-soak}"
e2e_init
fault_dataset
BUCKET=tierfs-soak
s3rver_start "$BUCKET"
fault_upload "$BUCKET"
fault_proxy_start origin "$S3_PORT"
CFG="$E2E_WORK/tierfs.toml"
fault_config "$CFG"
MNT="$E2E_WORK/mnt" LOGF="$E2E_WORK/daemon.log"
pf_mount "s3://$BUCKET" "$MNT" "$E2E_WORK/cache" "$LOGF" --endpoint "$PROXY_ENDPOINT" --config "$CFG" \
  --l1-size 4MiB --l2-size 12MiB --metadata-ttl 5s
PID=$TIERFS_PID

fault_set origin '{"rules":[
  {"action":"503","kind":"range","prob":0.04},
  {"action":"500","kind":"range","prob":0.02},
  {"action":"reset","kind":"range","prob":0.02},
  {"action":"short","kind":"range","prob":0.02},
  {"action":"stall_body","kind":"range","prob":0.003,"seconds":5},
  {"action":"stall","kind":"range","prob":0.003,"seconds":5},
  {"action":"503","kind":"list","prob":0.1},
  {"action":"503","kind":"head","prob":0.1}]}'

sample() {  # sample: "fds threads rss_kib pipes" of the daemon (fds: all but pipes)
  local all pipes threads rss
  all="$(find "/proc/$PID/fd" -mindepth 1 -maxdepth 1 | wc -l)"
  pipes="$(find "/proc/$PID/fd" -mindepth 1 -maxdepth 1 -lname 'pipe:*' | wc -l)"
  threads="$(awk '$1 == "Threads:" { print $2 }' "/proc/$PID/status")"
  rss="$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$PID/status")"
  echo "$((all - pipes)) $threads $rss $pipes"
}
soak() {  # soak NAME SECONDS
  step "$1" $(($2 + 120)) "$PY" "$E2E_DIR/fault_check.py" soak "$MNT" "$FMANIFEST" \
    --seconds "$2" --threads "$SOAK_THREADS" --max-seconds 60 || { print_log_tail "$LOGF"; exit 1; }
}

warm=$(( SOAK_SECONDS / 4 < 20 ? SOAK_SECONDS / 4 : 20 ))
(( warm >= 5 )) || warm=5
soak "warm-up: $SOAK_THREADS readers for ${warm}s under random faults" "$warm"
sleep 2
read -r fd0 th0 rss0 pipes0 <<<"$(sample)"
log "after the warm-up: fds=$fd0 (+$pipes0 pipes) threads=$th0 rss=${rss0}KiB"
soak "soak: $SOAK_THREADS readers for ${SOAK_SECONDS}s under random faults" "$SOAK_SECONDS"
sleep 2
pid_alive "$PID" || fail "the daemon died"
read -r fd1 th1 rss1 pipes1 <<<"$(sample)"
log "at the end: fds=$fd1 (+$pipes1 pipes) threads=$th1 rss=${rss1}KiB"
stats="$(stats_xattr "$MNT")"
log "stats: $stats"
port="$(cat "$E2E_WORK/origin.port")"
log "faults injected: $(curl -sf "http://127.0.0.1:$port/__fault__" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["fired"], "requests", d["requests"])')"
(( fd1 - fd0 <= 16 && fd0 - fd1 <= 16 )) || fail "open fds went from $fd0 to $fd1"
(( th1 - th0 <= 8 && th0 - th1 <= 8 )) || fail "threads went from $th0 to $th1"
(( pipes1 <= 2 * th1 )) || fail "$pipes1 pipes for $th1 threads (splice pipes are two per thread)"
(( rss1 - rss0 < 64 * 1024 )) || fail "RSS grew from ${rss0} KiB to ${rss1} KiB"
fault_set origin '{}'
fault_read "faults off: every file byte-exact" 120 "$MNT" --require ok
tierfs_umount "$MNT" "$PID" || { print_log_tail "$LOGF"; fail "unclean unmount"; }
daemon_exit_code "$PID"; rc=$DAEMON_RC
[[ "$rc" == 0 ]] || { print_log_tail "$LOGF"; fail "daemon exited with $rc"; }
