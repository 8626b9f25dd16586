#!/usr/bin/env bash
# End-to-end: a deep prefetch survives a daemon restart. The origin is s3rver behind a delay proxy
# (bench/delay_proxy.py, 25 ms per chunk each way) so the prefetch of the dataset takes a while;
# the daemon is stopped with SIGTERM (by its PID) mid-way, remounted on the same cache dir, and
# the job — persisted in LMDB — resumes by itself and completes. Then the origin is stopped and
# every file must read byte-exact from the cache.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
e2e_init
e2e_dataset
BUCKET=tierfs-pfr
s3rver_start "$BUCKET"
s3_upload "$BUCKET"

proxy_port_file="$E2E_WORK/proxy.port"
"$PY" "$E2E_ROOT/bench/delay_proxy.py" --upstream-port "$S3_PORT" --delay-ms 25 \
  --port-file "$proxy_port_file" >"$E2E_WORK/proxy.log" 2>&1 &
PROXY_PID=$!
stop_proxy() { kill -TERM "$PROXY_PID" 2>/dev/null || true; wait_pid_exit "$PROXY_PID" 10 || kill -KILL "$PROXY_PID" 2>/dev/null || true; }
trap 'rc=$?; stop_proxy; e2e_cleanup $rc' EXIT
deadline=$((SECONDS + 20))
until [[ -s "$proxy_port_file" ]]; do
  (( SECONDS < deadline )) || fail "delay proxy did not start"
  sleep 0.1
done
SLOW_ENDPOINT="http://127.0.0.1:$(cat "$proxy_port_file")"
log "slow origin at $SLOW_ENDPOINT (25 ms per chunk each way)"

mnt="$E2E_WORK/mnt" cache="$E2E_WORK/cache" logf="$E2E_WORK/daemon.log"
cfg="$E2E_WORK/tierfs.toml"
printf '[cache]\nprefetch_job_threads = 2\n' >"$cfg"
mount_args=(--endpoint "$SLOW_ENDPOINT" --config "$cfg" --l1-size 16MiB --l2-size 4GiB --metadata-ttl 1h)
pf_mount "s3://$BUCKET" "$mnt" "$cache" "$logf" "${mount_args[@]}"
pid1=$TIERFS_PID

step "start the prefetch of the whole mount" 120 "$TIERFS" prefetch --tier l2 "$mnt"
# Wait until it is running with some files done, then stop the daemon mid-way.
deadline=$((SECONDS + 300))
while :; do
  v="$(xget "$mnt" user.tierfs.prefetch)"
  [[ "$v" =~ state=running\ tier=l2\ files=([0-9]+)/([0-9]+) ]] && (( BASH_REMATCH[1] >= 20 )) && break
  [[ "$v" == state=done* ]] && fail "prefetch finished before the restart; the origin is too fast: $v"
  (( SECONDS < deadline )) || fail "prefetch made no progress: $v"
  sleep 0.2
done
log "before the restart: $v"
log "-> kill -TERM $pid1 (the daemon) mid-prefetch"
kill -TERM "$pid1"
wait_pid_exit "$pid1" 60 || fail "daemon did not exit after SIGTERM"
daemon_exit_code "$pid1"; rc=$DAEMON_RC
log "daemon exited with $rc"
if is_mounted "$mnt"; then timeout -k 2 20 fusermount3 -u "$mnt" || true; fi

pf_mount "s3://$BUCKET" "$mnt" "$cache" "$logf" "${mount_args[@]}"
pid2=$TIERFS_PID
v="$(xget "$mnt" user.tierfs.prefetch)"
log "right after the remount: $v"
[[ "$v" == state=queued* || "$v" == state=running* || "$v" == state=done* ]] ||
  fail "the job did not come back after the restart: $v"
grep -q "resuming 1 job" "$logf" || fail "no 'resuming 1 job' in the daemon log"
wait_prefetch "$mnt" done 600
want_files="$("$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(len(m["files"]))' "$MANIFEST")"
v="$(xget "$mnt" user.tierfs.prefetch)"
[[ "$v" == *"files=$want_files/$want_files"* ]] || fail "after the resume: $v (want $want_files files)"

stop_proxy
step "stop the origin server" 30 "$E2E_ROOT/scripts/s3rver.sh" stop "$E2E_WORK/s3rver"
step "sha256 of every file (origin down)" 300 "$PY" "$E2E_DIR/verify.py" hashes "$mnt" "$MANIFEST"
tierfs_umount "$mnt" "$pid2" || { print_log_tail "$logf"; fail "unclean unmount"; }
