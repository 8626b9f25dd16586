# Shared helpers for the end-to-end tests (sourced, not run). bash only.
#
# Every wait has a hard timeout. What a test starts it stops by PID, and what it mounts it
# unmounts, also when it fails: tests call e2e_init, which installs an EXIT/INT/TERM trap that runs
# e2e_cleanup (unmount every mount made with tierfs_mount, stop every s3rver started with
# s3rver_start, remove the work directory once nothing is mounted in it).

E2E_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
E2E_DIR="$E2E_ROOT/tests/e2e"
PY=/usr/bin/python3
TIERFS="${TIERFS:-$E2E_ROOT/build/daemon/tierfs}"
MOUNT_TIMEOUT="${E2E_MOUNT_TIMEOUT:-30}"
UMOUNT_TIMEOUT="${E2E_UMOUNT_TIMEOUT:-20}"
# is_mounted DIR, pid_alive PID, wait_pid_exit PID SECONDS, free_port
source "$E2E_ROOT/scripts/lib.sh"

# A command tierfs_mount runs the daemon under, which must exec it (so TIERFS_PID stays the
# daemon's): e.g. TIERFS_WRAP=(setpriv --inh-caps=-dac_override ...) or (prlimit --nofile=N).
TIERFS_WRAP=()
E2E_MOUNTS=()        # mountpoints made by tierfs_mount
E2E_PIDS=()          # daemon PIDs started by tierfs_mount (foreground mode)
E2E_S3_DIRS=()       # s3rver data dirs started by s3rver_start
E2E_BG_PIDS=()       # other helpers started in the background (fault proxies), stopped by PID
E2E_RGW_DIRS=()      # Ceph RGW clusters started by rgw_start
E2E_WORK=""
E2E_NAME="${E2E_NAME:-$(basename "$0" .sh)}"
E2E_T0=$SECONDS

log() { printf '[%s %4ds] %s\n' "$E2E_NAME" "$((SECONDS - E2E_T0))" "$*"; }
fail() {
  log "FAIL: $*" >&2
  exit 1
}

# e2e_skip_unless_fuse: exit 77 (skip) when /dev/fuse or fusermount3 is missing.
e2e_skip_unless_fuse() {
  if [[ ! -c /dev/fuse ]]; then
    log "SKIP: /dev/fuse is missing"
    exit 77
  fi
  if ! command -v fusermount3 >/dev/null 2>&1; then
    log "SKIP: fusermount3 is missing"
    exit 77
  fi
}

e2e_init() {
  e2e_skip_unless_fuse
  [[ -x "$TIERFS" ]] || fail "tierfs binary not found at $TIERFS (build first: cmake -S . -B build -G Ninja && ninja -C build)"
  E2E_WORK="$(mktemp -d "/tmp/tierfs-e2e-$E2E_NAME.XXXXXX")"
  trap 'e2e_cleanup $?' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  log "work dir $E2E_WORK, binary $TIERFS"
}

# step NAME TIMEOUT CMD...: runs CMD under a hard timeout, logs the outcome and its duration,
# exits the test on failure.
step() {
  local name="$1" secs="$2"
  shift 2
  local t0=$SECONDS rc=0
  log "-> $name"
  timeout -k 5 "$secs" "$@" || rc=$?
  if (( rc == 124 || rc == 137 )); then
    fail "$name: timed out after ${secs}s"
  elif (( rc != 0 )); then
    fail "$name: exit code $rc"
  fi
  log "ok $name ($((SECONDS - t0))s)"
}

# The dataset: shared between tests when run_all.sh generated one (E2E_DATASET, E2E_MANIFEST).
e2e_dataset() {
  if [[ -n "${E2E_DATASET:-}" && -f "${E2E_MANIFEST:-}" ]]; then
    DATASET="$E2E_DATASET"
    MANIFEST="$E2E_MANIFEST"
  else
    DATASET="$E2E_WORK/dataset"
    MANIFEST="$E2E_WORK/manifest.json"
    step "generate dataset" 120 "$PY" "$E2E_DIR/gen_dataset.py" "$DATASET" "$MANIFEST"
  fi
}

# s3rver_start BUCKET [NAME]: starts s3rver on a free port with one bucket, data in
# $E2E_WORK/NAME (default s3rver; give each instance its own NAME to run several, and stop one
# alone with `scripts/s3rver.sh stop $E2E_WORK/NAME`); sets S3_PORT, S3_ENDPOINT.
s3rver_start() {
  local bucket="$1" dir="$E2E_WORK/${2:-s3rver}" tries=0
  "$E2E_ROOT/scripts/s3rver.sh" install >/dev/null || fail "s3rver install failed"
  while :; do
    S3_PORT="$(free_port)"
    E2E_S3_DIRS+=("$dir")
    if "$E2E_ROOT/scripts/s3rver.sh" start "$dir" "$S3_PORT" "$bucket"; then
      break
    fi
    tries=$((tries + 1))
    (( tries < 3 )) || fail "could not start s3rver"
  done
  S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
}

# rgw_start ACCESS_KEY SECRET [NAME]: a single-node Ceph cluster with radosgw on a free port of
# 127.0.0.1 (scripts/rgw.sh; state in $E2E_WORK/NAME, default rgw), one S3 user with these keys.
# Sets RGW_DIR, S3_ENDPOINT (so s3_upload and the mount helpers use it). Skips the test (77) when
# Ceph is not installed (scripts/install-deps.sh --rgw installs it) unless E2E_REQUIRE_RGW is set.
rgw_start() {
  local access="$1" secret="$2" t0=$SECONDS
  RGW_DIR="$E2E_WORK/${3:-rgw}"
  if ! command -v radosgw >/dev/null 2>&1 || ! command -v ceph-mon >/dev/null 2>&1; then
    [[ -n "${E2E_REQUIRE_RGW:-}" ]] && fail "Ceph RGW is not installed (scripts/install-deps.sh --rgw)"
    log "SKIP: Ceph RGW is not installed (scripts/install-deps.sh --rgw)"
    exit 77
  fi
  E2E_RGW_DIRS+=("$RGW_DIR")
  S3_ENDPOINT="$(timeout -k 5 120 "$E2E_ROOT/scripts/rgw.sh" start "$RGW_DIR" "$access" "$secret")" ||
    fail "could not start Ceph RGW (daemon logs above)"
  log "Ceph RGW at $S3_ENDPOINT ($((SECONDS - t0))s to start)"
}

# rgw_admin ARGS...: radosgw-admin against the cluster of rgw_start.
rgw_admin() { timeout -k 5 60 "$E2E_ROOT/scripts/rgw.sh" admin "$RGW_DIR" "$@"; }

s3_upload() {  # s3_upload BUCKET [--only DIR]
  local bucket="$1"
  shift
  step "upload dataset to s3://$bucket $*" 300 "$PY" "$E2E_DIR/upload.py" "$DATASET" "$MANIFEST" \
    --endpoint "$S3_ENDPOINT" --bucket "$bucket" "$@"
}

# e2e_cred_env: sets E2E_ENV, the `env` arguments giving a command the test's S3 credentials:
#   env "${E2E_ENV[@]}" CMD...
# access key $E2E_S3_ACCESS_KEY (default s3rver's S3RVER), secret $E2E_S3_SECRET (default S3RVER;
# s3rver checks only the access key, RGW both), region us-east-1; other AWS keys of the caller's
# environment are dropped. With E2E_NO_ENV_CREDS=1 no key is given (the daemon then finds its
# credentials elsewhere, e.g. a profile of AWS_CONFIG_FILE).
e2e_cred_env() {
  E2E_ENV=(-u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN AWS_REGION=us-east-1)
  if [[ -z "${E2E_NO_ENV_CREDS:-}" ]]; then
    E2E_ENV+=(AWS_ACCESS_KEY_ID="${E2E_S3_ACCESS_KEY:-S3RVER}" AWS_SECRET_ACCESS_KEY="${E2E_S3_SECRET:-S3RVER}")
  fi
}

# tierfs_mount SOURCE MNT CACHE LOGFILE [ARGS...]: runs the daemon in the foreground (-f) in the
# background, so its PID is known and its log is captured; returns once MNT is a mount. Sets
# TIERFS_PID. The S3 credentials: see e2e_cred_env. Caches: --l1-size 256MiB --l2-size 4GiB unless
# ARGS give their own.
tierfs_mount() {
  local src="$1" mnt="$2" cache="$3" logf="$4"
  shift 4
  mkdir -p "$mnt" "$cache"
  is_mounted "$mnt" && fail "$mnt is already a mount"
  local sizes=()  # defaults unless the caller gives its own
  [[ " $* " == *" --l1-size "* ]] || sizes+=(--l1-size 256MiB)
  [[ " $* " == *" --l2-size "* ]] || sizes+=(--l2-size 4GiB)
  local cmd=("${TIERFS_WRAP[@]}" "$TIERFS" mount "$src" "$mnt" --cache-dir "$cache" "${sizes[@]}" "$@" -f)
  log "mount: ${cmd[*]}"
  e2e_cred_env
  env "${E2E_ENV[@]}" "${cmd[@]}" >"$logf" 2>&1 </dev/null &
  TIERFS_PID=$!
  E2E_PIDS+=("$TIERFS_PID")
  E2E_MOUNTS+=("$mnt")
  local deadline=$((SECONDS + MOUNT_TIMEOUT))
  until is_mounted "$mnt"; do
    if ! pid_alive "$TIERFS_PID"; then
      local rc=0
      wait "$TIERFS_PID" || rc=$?
      log "daemon log ($logf):"
      sed 's/^/    /' "$logf" | tail -n 40 >&2
      fail "tierfs exited (code $rc) before $mnt was mounted"
    fi
    if (( SECONDS >= deadline )); then
      sed 's/^/    /' "$logf" | tail -n 40 >&2
      fail "$mnt not mounted within ${MOUNT_TIMEOUT}s"
    fi
    sleep 0.1
  done
  log "mounted $mnt (daemon pid $TIERFS_PID)"
}

# tierfs_umount MNT [PID]: fusermount3 -u, then the daemon must exit by itself. Falls back to a lazy
# unmount and killing the daemon by its PID (which also aborts the FUSE connection). Returns
# non-zero when the clean path did not work.
tierfs_umount() {
  local mnt="$1" pid="${2:-}" rc=0
  if is_mounted "$mnt"; then
    if ! timeout -k 2 "$UMOUNT_TIMEOUT" fusermount3 -u "$mnt"; then
      log "fusermount3 -u $mnt failed; lazy unmount" >&2
      rc=1
      timeout -k 2 10 fusermount3 -u -z "$mnt" || true
    fi
  fi
  if [[ -n "$pid" ]] && ! wait_pid_exit "$pid" "$UMOUNT_TIMEOUT"; then
    log "daemon pid $pid still running ${UMOUNT_TIMEOUT}s after unmount; SIGTERM" >&2
    rc=1
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_pid_exit "$pid" 5; then
      log "daemon pid $pid ignores SIGTERM; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      wait_pid_exit "$pid" 5 || true
    fi
  fi
  if is_mounted "$mnt"; then
    timeout -k 2 10 fusermount3 -u -z "$mnt" || true
    rc=1
  fi
  return $rc
}

# daemon_exit_code PID: sets DAEMON_RC to the exit status of a foreground daemon we started (after
# it exited). Call it in the shell that started the daemon, never inside $(...): a command
# substitution's subshell cannot wait for its parent's child and answers from the job table as it
# was at the fork, where a daemon that has exited but is not yet reaped (pid_alive counts a zombie
# as exited) still runs: status -1.
daemon_exit_code() {
  DAEMON_RC=0
  wait "$1" 2>/dev/null || DAEMON_RC=$?
}

# stop_pid PID: SIGTERM, then SIGKILL after 10 s (a helper this test started).
stop_pid() {
  pid_alive "$1" || return 0
  kill -TERM "$1" 2>/dev/null || true
  wait_pid_exit "$1" 10 || { kill -KILL "$1" 2>/dev/null || true; wait_pid_exit "$1" 5 || true; }
}

e2e_cleanup() {
  local rc="${1:-0}" i
  trap - EXIT INT TERM
  set +e
  for i in "${!E2E_MOUNTS[@]}"; do
    local mnt="${E2E_MOUNTS[$i]}" pid="${E2E_PIDS[$i]:-}"
    if is_mounted "$mnt" || pid_alive "$pid"; then
      log "cleanup: unmounting $mnt (daemon pid ${pid:-?})"
      tierfs_umount "$mnt" "$pid"
    fi
  done
  for i in "${E2E_BG_PIDS[@]}"; do
    stop_pid "$i"
  done
  for i in "${E2E_S3_DIRS[@]}"; do
    "$E2E_ROOT/scripts/s3rver.sh" stop "$i" >/dev/null 2>&1
  done
  for i in "${E2E_RGW_DIRS[@]}"; do
    "$E2E_ROOT/scripts/rgw.sh" stop "$i" >/dev/null 2>&1
  done
  log "cleanup: servers stopped"
  if [[ -n "$E2E_WORK" && -d "$E2E_WORK" ]]; then
    if (( rc != 0 )) && [[ -n "${E2E_KEEP_ON_FAIL:-}" ]]; then
      log "keeping $E2E_WORK for inspection"
    elif awk -v w="$E2E_WORK/" 'index($5 "/", w) == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; then
      log "cleanup: something is still mounted under $E2E_WORK; not removing it" >&2
    else
      rm -rf "$E2E_WORK"
      log "cleanup: removed $E2E_WORK"
    fi
  fi
  if (( rc == 0 )); then
    log "PASS ($((SECONDS - E2E_T0))s)"
  elif (( rc != 77 )); then
    log "FAIL (exit $rc, $((SECONDS - E2E_T0))s)"
  fi
  exit "$rc"
}

# xattr_of PATH NAME: prints the value of extended attribute NAME of PATH.
xattr_of() { timeout -k 2 20 getfattr --only-values --absolute-names -n "$2" "$1"; }

# stats_xattr MNT: prints the value of user.tierfs.stats (space-separated key=value).
stats_xattr() {
  xattr_of "$1" user.tierfs.stats
}

# wait_residency FILE TEXT: user.tierfs.residency of FILE contains TEXT within 10 s, else fail. A
# read is answered once its blocks are in L1; their L2 file writes follow (tiered_cache.cc, "L1
# first"), so a check right after the read can come before them.
wait_residency() {
  local deadline=$((SECONDS + 10)) v
  while :; do
    v="$(xattr_of "$1" user.tierfs.residency)" || fail "getfattr residency of $1"
    [[ "$v" == *"$2"* ]] && return 0
    (( SECONDS < deadline )) || fail "residency of $1 is '$v', want '$2'"
    sleep 0.1
  done
}

stat_value() {  # stat_value "STATS" KEY
  tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print "" }'
}

# wait_l3_drained MNT SECONDS: until l3.write.pending is 0 and l3.inserts stops moving.
wait_l3_drained() {
  local mnt="$1" deadline=$((SECONDS + $2)) stats pending inserts last=""
  while :; do
    stats="$(stats_xattr "$mnt")" || fail "cannot read stats of $mnt"
    pending="$(stat_value "$stats" l3.write.pending)"
    inserts="$(stat_value "$stats" l3.inserts)"
    [[ -n "$pending" ]] || fail "no l3.write.pending in the stats (is L3 configured?): $stats"
    if [[ "$pending" == 0 && "$inserts" == "$last" ]]; then
      log "L3 write-back drained: l3.inserts=$inserts"
      return 0
    fi
    last="$inserts"
    (( SECONDS < deadline )) || fail "L3 write-back not drained in $2 s (pending=$pending inserts=$inserts)"
    sleep 1
  done
}

# Tests that simulate several hosts on one L3 (test_l3_*): host_mount NAME mounts s3://$BUCKET as
# host NAME, with its own cache dir and daemon log and the options in the MOUNT_ARGS array; sets
# MNT and PID. host_umount NAME unmounts it and fails unless the daemon exited with 0.
host_mount() {
  MNT="$E2E_WORK/mnt-$1"
  tierfs_mount "s3://$BUCKET" "$MNT" "$E2E_WORK/cache-$1" "$E2E_WORK/daemon-$1.log" "${MOUNT_ARGS[@]}"
  PID=$TIERFS_PID
}

host_umount() {
  local rc
  tierfs_umount "$MNT" "$PID" || { print_log_tail "$E2E_WORK/daemon-$1.log"; fail "unclean unmount of host $1"; }
  daemon_exit_code "$PID"; rc=$DAEMON_RC
  [[ "$rc" == 0 ]] || { print_log_tail "$E2E_WORK/daemon-$1.log"; fail "host $1 daemon exited with $rc"; }
}

# print_log_tail FILE: the last lines of a daemon log, indented (for failure reports).
print_log_tail() {
  [[ -f "$1" ]] || return 0
  log "last lines of $1:"
  tail -n "${2:-30}" "$1" | sed 's/^/    /'
}

# The checks both mount tests run on a mounted tree. Usage: mount_checks MNT
mount_checks() {
  local mnt="$1"
  step "tree (find) equals the manifest" 120 "$PY" "$E2E_DIR/verify.py" tree "$mnt" "$MANIFEST"
  step "sha256 of every file (cold)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$mnt" "$MANIFEST"
  step "sha256 of every file (warm)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$mnt" "$MANIFEST"
  step "pread at block boundaries" 180 "$PY" "$E2E_DIR/verify.py" ranges "$mnt" "$MANIFEST"
  step "8 threads read everything concurrently" 300 \
    "$PY" "$E2E_DIR/verify.py" concurrent "$mnt" "$MANIFEST" --threads 8
  step "writes get EROFS, missing names ENOENT" 60 "$PY" "$E2E_DIR/verify.py" errors "$mnt" "$MANIFEST"
  step "user.tierfs.* xattrs on a file" 60 "$PY" "$E2E_DIR/verify.py" xattrs "$mnt" "$MANIFEST"
}

# check_stats MNT VERIFY-ARGS...: reads user.tierfs.stats with getfattr, prints it, checks it.
check_stats() {
  local mnt="$1" stats
  shift
  stats="$(stats_xattr "$mnt")" || fail "getfattr -n user.tierfs.stats $mnt failed"
  log "user.tierfs.stats: $stats"
  "$PY" "$E2E_DIR/verify.py" stats "$stats" "$@" || fail "stats check failed ($*)"
}

# A full cold/warm/remount cycle over SOURCE. Usage: mount_cycle SOURCE [MOUNT ARGS...]
mount_cycle() {
  local src="$1"
  shift
  local mnt="$E2E_WORK/mnt" cache="$E2E_WORK/cache" pid rc
  tierfs_mount "$src" "$mnt" "$cache" "$E2E_WORK/daemon1.log" "$@"
  pid=$TIERFS_PID
  mount_checks "$mnt"
  check_stats "$mnt" --has origin.bytes --gt origin.bytes=0

  log "-> unmount (fusermount3 -u) and wait for the daemon to exit"
  tierfs_umount "$mnt" "$pid" || { print_log_tail "$E2E_WORK/daemon1.log"; fail "unclean unmount"; }
  daemon_exit_code "$pid"; rc=$DAEMON_RC
  [[ "$rc" == 0 ]] || { print_log_tail "$E2E_WORK/daemon1.log"; fail "daemon exited with $rc after unmount"; }
  log "ok daemon exited 0"

  log "-> remount with the same cache dir (fresh daemon): every byte must come from the cache"
  tierfs_mount "$src" "$mnt" "$cache" "$E2E_WORK/daemon2.log" "$@"
  pid=$TIERFS_PID
  step "tree after remount" 120 "$PY" "$E2E_DIR/verify.py" tree "$mnt" "$MANIFEST"
  step "sha256 of every file after remount" 300 "$PY" "$E2E_DIR/verify.py" hashes "$mnt" "$MANIFEST"
  step "pread at block boundaries after remount" 180 "$PY" "$E2E_DIR/verify.py" ranges "$mnt" "$MANIFEST"
  # Small files came whole with their first open (fuse.store_on_open_max), byte-exact above.
  check_stats "$mnt" --has origin.bytes --eq origin.bytes=0 --gt fuse.open_stores=0
  log "ok no byte came from the origin after the remount"
  tierfs_umount "$mnt" "$pid" || { print_log_tail "$E2E_WORK/daemon2.log"; fail "unclean unmount"; }
  daemon_exit_code "$pid"; rc=$DAEMON_RC
  [[ "$rc" == 0 ]] || { print_log_tail "$E2E_WORK/daemon2.log"; fail "daemon exited with $rc after unmount"; }
}

# ---- fault injection (tests/e2e/fault_proxy.py)

# fault_proxy_start NAME UPSTREAM_PORT: starts a fault proxy in front of 127.0.0.1:UPSTREAM_PORT
# (log in $E2E_WORK/NAME.log); sets PROXY_PORT, PROXY_ENDPOINT, PROXY_PID. Control it with
# fault_set NAME / fault_stats NAME.
# stall_proxy_start: starts tests/e2e/stall_proxy.py in front of the s3rver of s3rver_start
# (S3_PORT); it stalls every request while $E2E_WORK/stall exists. Sets PROXY (its URL) and
# PROXY_PID. A test stops it with stall_proxy_stop in its own EXIT trap, before e2e_cleanup
# unmounts (a daemon waiting on a stalled origin would hold up the unmount).
stall_proxy_start() {
  local deadline
  rm -f "$E2E_WORK/proxy.port"
  "$PY" "$E2E_DIR/stall_proxy.py" --upstream-port "$S3_PORT" --stall-file "$E2E_WORK/stall" \
    --port-file "$E2E_WORK/proxy.port" &
  PROXY_PID=$!
  deadline=$((SECONDS + 10))
  until [[ -s "$E2E_WORK/proxy.port" ]]; do
    pid_alive "$PROXY_PID" || fail "the stall proxy exited"
    (( SECONDS < deadline )) || fail "the stall proxy did not start"
    sleep 0.1
  done
  PROXY="http://127.0.0.1:$(cat "$E2E_WORK/proxy.port")"
}

# stall_proxy_stop: ends the stall and stops the proxy of stall_proxy_start (if it runs).
stall_proxy_stop() {
  [[ -n "${PROXY_PID:-}" ]] || return 0
  rm -f "$E2E_WORK/stall"
  kill -TERM "$PROXY_PID" 2>/dev/null || true
  wait_pid_exit "$PROXY_PID" 5 || kill -KILL "$PROXY_PID" 2>/dev/null || true
  PROXY_PID=""
}

fault_proxy_start() {
  local name="$1" up="$2" pf="$E2E_WORK/$1.port" deadline
  rm -f "$pf"
  "$PY" "$E2E_DIR/fault_proxy.py" --upstream-port "$up" --port-file "$pf" --verbose \
    >"$E2E_WORK/$name.log" 2>&1 </dev/null &
  PROXY_PID=$!
  E2E_BG_PIDS+=("$PROXY_PID")
  deadline=$((SECONDS + 20))
  until [[ -s "$pf" ]]; do
    pid_alive "$PROXY_PID" || { cat "$E2E_WORK/$name.log" >&2; fail "fault proxy $name exited"; }
    (( SECONDS < deadline )) || fail "fault proxy $name did not start"
    sleep 0.1
  done
  PROXY_PORT="$(cat "$pf")"
  PROXY_ENDPOINT="http://127.0.0.1:$PROXY_PORT"
  log "fault proxy $name at $PROXY_ENDPOINT -> 127.0.0.1:$up (pid $PROXY_PID)"
}

# fault_wanted NAME: true unless FAULTS_ONLY (space-separated scenario names) leaves NAME out;
# lets a fault test run some of its scenarios only (for debugging).
fault_wanted() { [[ -z "${FAULTS_ONLY:-}" || " $FAULTS_ONLY " == *" $1 "* ]]; }

# fault_set NAME JSON: replaces the proxy's rules, e.g.
#   fault_set origin '{"rules":[{"action":"503","kind":"range","prob":0.3}]}'
#   fault_set origin '{}'            (no faults)
fault_set() {
  local port
  port="$(cat "$E2E_WORK/$1.port")" || fail "no fault proxy $1"
  timeout -k 2 10 curl -sf -X POST --data-binary "$2" "http://127.0.0.1:$port/__fault__" >/dev/null ||
    fail "fault_set $1 '$2' failed"
}

# fault_fired NAME ACTION: how often ACTION fired since the last fault_set.
fault_fired() {
  local port
  port="$(cat "$E2E_WORK/$1.port")" || fail "no fault proxy $1"
  timeout -k 2 10 curl -sf "http://127.0.0.1:$port/__fault__" |
    "$PY" -c 'import json,sys; print(json.load(sys.stdin)["fired"].get(sys.argv[1], 0))' "$2"
}

# fault_dataset: the small dataset of the fault tests (tests/e2e/fault_check.py gen): sets FDATA
# (first versions), FDATA_V2 (same names and sizes, other bytes) and FMANIFEST.
fault_dataset() {
  FDATA="$E2E_WORK/fdata"
  FDATA_V2="$E2E_WORK/fdata.v2"
  FMANIFEST="$E2E_WORK/fmanifest.json"
  step "generate the fault dataset" 60 "$PY" "$E2E_DIR/fault_check.py" gen "$FDATA" "$FMANIFEST"
}

# fault_upload BUCKET: uploads the fault dataset to $S3_ENDPOINT.
fault_upload() {
  step "upload the fault dataset to s3://$1" 120 "$PY" "$E2E_DIR/upload.py" "$FDATA" "$FMANIFEST" \
    --endpoint "$S3_ENDPOINT" --bucket "$1"
}

# fault_read NAME TIMEOUT MNT ARGS...: a step running fault_check.py read on the fault dataset
# (every read byte-exact or an error, in bounded time; see its --help for ARGS).
fault_read() {
  local name="$1" secs="$2" mnt="$3"
  shift 3
  step "$name" "$secs" "$PY" "$E2E_DIR/fault_check.py" read "$mnt" "$FMANIFEST" "$@"
}

# fault_config FILE [EXTRA TOML LINES...]: a config with short S3 timeouts and few attempts, so a
# failing origin gives a bounded EIO within seconds. Extra lines are appended as given (each one
# may start a [section]).
fault_config() {
  local f="$1"
  shift
  cat >"$f" <<CFG
[s3]
connect_timeout = "1s"
request_timeout = "3s"
low_speed_time = "2s"
max_attempts = 3
backoff_base = "20ms"
backoff_max = "200ms"
CFG
  local line
  for line in "$@"; do printf '%s\n' "$line" >>"$f"; done
}

# Scenarios: a test of several independent cases runs each one with run_scenario, so one failing
# case does not hide the others; scenarios_done fails the test when any of them failed.
#   run_scenario NAME FUNC [ARGS...]   runs FUNC in a subshell (a `fail` ends only the scenario);
#       when it fails, every daemon it started (scenario_mount) is unmounted and stopped by PID.
#       Skipped when FAULTS_ONLY is set and does not name it.
#   scenario_mount NAME SOURCE CACHE-DIR LOGFILE [ARGS...]   pf_mount (lib_pf.sh) at $E2E_WORK/mnt-NAME
#       (sets MNT, PID, LOGF) that run_scenario knows about; scenario_umount unmounts it and
#       checks the daemon exited 0.
E2E_FAILED=()
run_scenario() {
  local name="$1" rc=0 pidf
  shift
  fault_wanted "$name" || return 0
  log "=== scenario $name"
  ( "$@" ) || rc=$?
  if (( rc != 0 )); then
    E2E_FAILED+=("$name")
    log "=== scenario $name FAILED"
    for pidf in "$E2E_WORK"/pid-"$name"*; do
      [[ -f "$pidf" ]] || continue
      local mnt pid
      read -r pid mnt <"$pidf"
      if is_mounted "$mnt" || pid_alive "$pid"; then
        log "cleanup of scenario $name: unmounting $mnt (daemon pid $pid)"
        tierfs_umount "$mnt" "$pid" || true
      fi
    done
  else
    log "=== scenario $name passed"
  fi
}
scenarios_done() {
  (( ${#E2E_FAILED[@]} == 0 )) || fail "scenarios failed: ${E2E_FAILED[*]}"
}
scenario_mount() {
  local name="$1" src="$2" cache="$3"
  LOGF="$4"
  shift 4
  MNT="$E2E_WORK/mnt-$name"
  pf_mount "$src" "$MNT" "$cache" "$LOGF" "$@"
  PID=$TIERFS_PID
  echo "$PID $MNT" >"$E2E_WORK/pid-$name"
}
scenario_umount() {
  local rc
  tierfs_umount "$MNT" "$PID" || { print_log_tail "$LOGF"; fail "unclean unmount of $MNT"; }
  daemon_exit_code "$PID"; rc=$DAEMON_RC
  [[ "$rc" == 0 ]] || { print_log_tail "$LOGF"; fail "daemon exited with $rc"; }
}
