#!/usr/bin/env bash
# End-to-end: SIGTERM while a read waits on the origin. s3rver behind a proxy that can stall →
# mount → list → stall → a reader's read(2) of an uncached file waits on the origin → SIGTERM:
#   1. the origin answers during the shutdown: the reader gets the file's bytes (sha256 checked);
#   2. the origin stays stalled: the reader gets EIO once the shutdown's wait for reads in flight
#      (fuse.shutdown_grace, 2 s) has passed, and the mount is detached then;
# never ENOTCONN ("Transport endpoint is not connected") or ECONNABORTED. Each time the daemon
# exits with 0 by itself (once its origin requests have ended) and nothing is mounted.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
BUCKET=tierfs-term
s3rver_start "$BUCKET"

PROXY_PID=""
READER=""
stop_extras() {
  [[ -z "$READER" ]] || kill -KILL "$READER" 2>/dev/null || true
  stall_proxy_stop
}
trap 'rc=$?; stop_extras; e2e_cleanup $rc' EXIT

step "upload" 60 "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" \
  a.bin=1048576:1 b.bin=1048576:2
stall_proxy_start

# 1: a stall that ends resets the connections and the retry reads the bytes. 2: one attempt of
# 8 s: longer than the shutdown's wait (fuse.shutdown_grace, 2 s here), so the shutdown answers
# the read (EIO); the daemon exits once that origin request has ended too.
cat >"$E2E_WORK/bytes.toml" <<TOML
[s3]
request_timeout = "20s"
max_attempts = 3
[cache]
prefetch_next_files = 0
TOML
cat >"$E2E_WORK/eio.toml" <<TOML
[s3]
request_timeout = "8s"
max_attempts = 1
[cache]
prefetch_next_files = 0
[fuse]
shutdown_grace = "2s"
TOML

# The reader: one read(2) of the first MiB of FILE, then "BYTES SHA256" or "ERRNO NAME".
cat >"$E2E_WORK/reader.py" <<'PY'
import errno, hashlib, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    b = os.read(fd, 1 << 20)
    print("BYTES", hashlib.sha256(b).hexdigest(), flush=True)
except OSError as e:
    print("ERRNO", errno.errorcode.get(e.errno, e.errno), flush=True)
PY

# wait_reading PID: until PID sits in read(2) (syscall 0 on x86_64, 63 on arm64), 10 s at most.
wait_reading() {
  local deadline=$((SECONDS + 10)) sc want=0
  [[ "$(uname -m)" == aarch64 ]] && want=63
  while :; do
    sc="$(cut -d' ' -f1 "/proc/$1/syscall" 2>/dev/null)" || sc=""
    [[ "$sc" == "$want" ]] && return 0
    pid_alive "$1" || fail "the reader exited before its read waited: $(cat "$E2E_WORK/reader.out")"
    (( SECONDS < deadline )) || fail "the reader is not in read(2) after 10 s (syscall '$sc')"
    sleep 0.05
  done
}
# wait_log TEXT FILE: until FILE holds TEXT, 10 s at most.
wait_log() {
  local deadline=$((SECONDS + 10))
  until grep -q "$1" "$2"; do
    (( SECONDS < deadline )) || { print_log_tail "$2"; fail "no '$1' in $2 after 10 s"; }
    sleep 0.05
  done
}

# run_case NAME FILE: mounts, stalls, starts the reader of FILE, SIGTERMs the daemon; leaves
# DPID, T_TERM and the reader running.
run_case() {
  MNT="$E2E_WORK/mnt-$1" LOGF="$E2E_WORK/tierfs-$1.log"
  tierfs_mount "s3://$BUCKET" "$MNT" "$E2E_WORK/cache-$1" "$LOGF" --endpoint "$PROXY" \
    --config "$E2E_WORK/$1.toml" --metadata-ttl 1h
  DPID=$TIERFS_PID
  step "list" 30 ls "$MNT"
  touch "$E2E_WORK/stall"
  "$PY" "$E2E_WORK/reader.py" "$MNT/$2" >"$E2E_WORK/reader.out" 2>&1 &
  READER=$!
  wait_reading "$READER"
  log "reader $READER waits in read(2) on the stalled origin; SIGTERM to the daemon $DPID"
  kill -TERM "$DPID"
  T_TERM=$SECONDS
  T_TERM_NS=$(date +%s%N)
  wait_log "signal 15" "$LOGF"
}

# finish_case WANT: the reader printed WANT; the daemon exited 0 and nothing is mounted.
finish_case() {
  wait_pid_exit "$READER" 30 || fail "the reader still waits 30 s after SIGTERM"
  local out
  out="$(cat "$E2E_WORK/reader.out")"
  READER=""
  log "reader: $out"
  [[ "$out" == "$1" ]] || { print_log_tail "$LOGF"; fail "reader: '$out', want '$1'"; }
  wait_pid_exit "$DPID" 30 || fail "the daemon still runs 30 s after SIGTERM"
  daemon_exit_code "$DPID"
  (( DAEMON_RC == 0 )) || { print_log_tail "$LOGF"; fail "the daemon exited $DAEMON_RC"; }
  ! is_mounted "$MNT" || fail "$MNT is still mounted after the daemon exited"
  log "daemon exited 0 $((SECONDS - T_TERM)) s after SIGTERM; $MNT unmounted"
  rm -f "$E2E_WORK/stall"
}

# ---- 1. the origin answers while the daemon shuts down: bytes ----
run_case bytes a.bin
pid_alive "$READER" || fail "the reader ended at SIGTERM: $(cat "$E2E_WORK/reader.out")"
rm -f "$E2E_WORK/stall"
finish_case "BYTES $("$PY" "$E2E_DIR/s3put.py" --sha a.bin=1048576:1)"

# ---- 2. the origin stays stalled: EIO after the bounded wait ----
run_case eio b.bin
wait_pid_exit "$READER" 30 || fail "the reader still waits 30 s after SIGTERM"
ms=$(( ($(date +%s%N) - T_TERM_NS) / 1000000 ))
log "the reader was answered ${ms} ms after SIGTERM"
(( ms >= 1500 && ms <= 4500 )) || fail "the reader was answered ${ms} ms after SIGTERM, want about 2 s"
# Detached once the reads in flight are answered, while the origin request may still run.
deadline=$((SECONDS + 3))
while is_mounted "$MNT"; do
  (( SECONDS < deadline )) || fail "$MNT still mounted 3 s after the reader was answered"
  sleep 0.05
done
finish_case "ERRNO EIO"
(( SECONDS - T_TERM <= 15 )) || fail "the daemon exited $((SECONDS - T_TERM)) s after SIGTERM"
