#!/usr/bin/env bash
# End-to-end: the CSI node plug-in tierfs-csi, driven over its real gRPC unix socket by a Python
# CSI client (tests/e2e/csi_client.py, message classes generated from csi/csi.proto with
# protoc --python_out) as the kubelet would, with a real s3rver origin and real mounts:
#   * Identity (GetPluginInfo, Probe) and NodeGetInfo answer; Controller and NodeStageVolume are
#     UNIMPLEMENTED; a second plug-in on the same state directory is refused;
#   * two pods' volumes of one source and secret -> one daemon, both target paths read the
#     dataset byte for byte as an unprivileged user (nobody); publishing again is OK;
#   * the driver killed by its PID and started again keeps the daemon and both mounts;
#   * unpublishing one target leaves the other reading; a different secret and no secret (the
#     node's identity) -> a daemon each, each with its own cache directory;
#   * a bad source, an option off the allow-list, block or writable access -> INVALID_ARGUMENT
#     naming what is wrong; a key the origin refuses -> PERMISSION_DENIED with the daemon's
#     message; an origin nobody listens on -> UNAVAILABLE; another volume at a used target ->
#     ALREADY_EXISTS; each leaves nothing mounted and no daemon;
#   * a daemon that ended (SIGTERM) while the driver was down is dropped at the driver's start,
#     its pod mount removed; unpublishing an unknown target is OK;
#   * unpublishing the last targets stops every daemon (their PIDs exit) and nothing tierfs stays
#     mounted; the state file holds no secret.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
chmod 755 "$E2E_WORK"  # nobody must reach the pods' mounts for its reads to mean anything
e2e_dataset
CSI_BIN="${TIERFS_CSI:-$(dirname "$TIERFS")/../csi/tierfs-csi}"
[[ -x "$CSI_BIN" ]] || fail "tierfs-csi not found at $CSI_BIN (build it: ninja -C build tierfs-csi)"
command -v protoc >/dev/null || fail "protoc is missing (scripts/install-deps.sh)"

BUCKET=tierfs-csi
s3rver_start "$BUCKET"
# small/: ~200 small files in nested directories (the dataset's other trees are big or many).
sub=small
[[ -d "$DATASET/$sub" ]] || fail "no $sub/ in the dataset"
s3_upload "$BUCKET" --only "$sub"
mapfile -t files < <(cd "$DATASET" && find "$sub" -type f | sort | head -n 60)
(( ${#files[@]} >= 20 )) || fail "need at least 20 files under $sub"

GEN="$E2E_WORK/gen"
mkdir -p "$GEN"
step "generate the CSI message classes" 60 protoc --python_out="$GEN" -I "$E2E_ROOT/csi" \
  "$E2E_ROOT/csi/csi.proto"
SOCK="$E2E_WORK/csi/csi.sock"
STATE="$E2E_WORK/state"
CACHE="$E2E_WORK/cache"
PODS="$E2E_WORK/pods"
mkdir -p "$E2E_WORK/csi" "$PODS"
CSI_PID=""
DAEMON_PIDS=()  # every daemon PID seen in the state file, stopped by the cleanup if still alive

# The cleanup: the driver, then every pod mount and daemon mount under the work dir (binds first),
# then the daemons by PID; e2e_cleanup stops s3rver and removes the work dir.
csi_cleanup() {
  local rc=$? m p
  set +e
  [[ -n "$CSI_PID" ]] && stop_pid "$CSI_PID"
  if [[ -f "$STATE/state.json" ]]; then
    mapfile -t -O "${#DAEMON_PIDS[@]}" DAEMON_PIDS < <(state_pids)
  fi
  # The pods' binds first, then the daemons' own mounts.
  while read -r m; do
    log "cleanup: unmounting $m"
    timeout -k 2 10 umount -l "$m"
  done < <(awk -v w="$E2E_WORK/" 'index($5, w) == 1 { print ($5 ~ "/pods/" ? 0 : 1), $5 }' \
             /proc/self/mountinfo | sort | cut -d' ' -f2-)
  for p in "${DAEMON_PIDS[@]}"; do stop_pid "$p"; done
  e2e_cleanup "$rc"
}
trap csi_cleanup EXIT

state_pids() { "$PY" -c 'import json,sys
for d in json.load(open(sys.argv[1]))["daemons"].values(): print(d["pid"])' "$STATE/state.json"; }
# daemons: the number of daemons in the state file; targets KEY-OF-SOURCE...: see state_summary.
daemons() { "$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["daemons"]))' \
  "$STATE/state.json"; }
# pid_of TARGET: the PID of the daemon whose record holds TARGET.
pid_of() { "$PY" -c 'import json,sys
for d in json.load(open(sys.argv[1]))["daemons"].values():
    if sys.argv[2] in d["targets"]: print(d["pid"])' "$STATE/state.json" "$1"; }
cache_of() { "$PY" -c 'import json,sys
for d in json.load(open(sys.argv[1]))["daemons"].values():
    if sys.argv[2] in d["targets"]: print(d["cache_dir"])' "$STATE/state.json" "$1"; }
# tierfs_mounts: the tierfs mounts (daemons' and binds) under the work dir.
tierfs_mounts() {
  awk -v w="$E2E_WORK/" 'index($5, w) == 1 && $0 ~ / - fuse\.tierfs / { n++ } END { print n + 0 }' \
    /proc/self/mountinfo
}

csi() { timeout -k 5 200 "$PY" "$E2E_DIR/csi_client.py" --socket "$SOCK" --gen "$GEN" "$@"; }
csi_start() {
  # The node's own identity: s3rver's key in the driver's environment.
  env -u AWS_PROFILE AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER \
    AWS_EC2_METADATA_DISABLED=true AWS_REGION=us-east-1 \
    "$CSI_BIN" --endpoint "unix://$SOCK" --node-id e2e-node --state-dir "$STATE" \
    --cache-dir "$CACHE" --tierfs "$TIERFS" >>"$E2E_WORK/csi.log" 2>&1 </dev/null &
  CSI_PID=$!
  local deadline=$((SECONDS + 30)) out=""
  until out="$(csi info 2>&1)" && [[ "$out" == OK* ]]; do
    pid_alive "$CSI_PID" || { cat "$E2E_WORK/csi.log" >&2; fail "tierfs-csi exited at start"; }
    (( SECONDS < deadline )) || fail "tierfs-csi does not answer within 30 s: $out"
    sleep 0.2
  done
  log "tierfs-csi pid $CSI_PID: $out"
}
csi_kill() {  # csi_kill: SIGKILL the driver by its PID (a crash), reap it
  kill -KILL "$CSI_PID"
  wait "$CSI_PID" 2>/dev/null || true
  CSI_PID=""
}

# publish VOLUME POD [client args...]: expects OK.
publish() {
  local vol="$1" pod="$2" out
  shift 2
  mkdir -p "$PODS/$pod"
  chmod 755 "$PODS/$pod"  # the kubelet's pod directory
  out="$(csi publish --volume-id "$vol" --target "$PODS/$pod/mount" "$@")" ||
    { tail -n 20 "$E2E_WORK/csi.log" >&2; fail "publish $vol at $pod: $out"; }
  is_mounted "$PODS/$pod/mount" || fail "publish $vol at $pod answered OK but nothing is mounted"
  log "ok published $vol at $pod"
}
# refused CODE TEXT VOLUME POD [client args...]: the publish fails with CODE and TEXT in the
# message, and leaves no mount and no new daemon.
refused() {
  local code="$1" text="$2" vol="$3" pod="$4" out n0 m0
  shift 4
  n0="$(daemons)" m0="$(tierfs_mounts)"
  mkdir -p "$PODS/$pod"
  if out="$(csi publish --volume-id "$vol" --target "$PODS/$pod/mount" "$@")"; then
    fail "publish $vol at $pod succeeded; expected $code"
  fi
  [[ "$out" == "ERROR $code: "*"$text"* ]] || fail "publish $vol at $pod: '$out', expected $code ... $text"
  is_mounted "$PODS/$pod/mount" && fail "a refused publish left $PODS/$pod/mount mounted"
  [[ "$(daemons)" == "$n0" ]] || fail "a refused publish changed the daemons ($n0 -> $(daemons))"
  [[ "$(tierfs_mounts)" == "$m0" ]] || fail "a refused publish left a tierfs mount behind"
  log "ok refused: $out"
}
# reads POD: every file reads byte-exact through the pod's mount as nobody (who opens and reads
# it; root compares what nobody read with the dataset, which nobody may not reach).
reads() {
  local f
  for f in "${files[@]}"; do
    timeout -k 2 60 runuser -u nobody -- cat "$PODS/$1/mount/$f" | cmp - "$DATASET/$f" ||
      fail "$f differs through pod $1 (read as nobody)"
  done
  log "ok ${#files[@]} files read byte-exact through pod $1 as nobody"
}

SRC=(--attr "source=s3://$BUCKET" --attr "endpoint=$S3_ENDPOINT" --attr region=us-east-1)
SECRET_A=(--secret access_key_id=S3RVER --secret secret_access_key=secret-of-team-a)
SECRET_B=(--secret access_key_id=S3RVER --secret secret_access_key=secret-of-team-b)

# ---- identity
csi_start
out="$(csi info)"
[[ "$out" == "OK name=csi.tierfs.io "*"ready=True node_id=e2e-node"* ]] || fail "info: $out"
for m in "Controller CreateVolume" "Node NodeStageVolume" "Node NodeGetVolumeStats"; do
  # shellcheck disable=SC2086
  out="$(csi call $m)" && fail "$m answered OK"
  [[ "$out" == "ERROR UNIMPLEMENTED"* ]] || fail "$m: $out"
done
log "ok Identity and Node info; Controller and staging UNIMPLEMENTED"
# A second plug-in on the same state directory is refused, naming the first.
out="$(timeout -k 2 20 "$CSI_BIN" --endpoint "unix://$E2E_WORK/csi/second.sock" --node-id e2e-node \
  --state-dir "$STATE" --cache-dir "$CACHE" --tierfs "$TIERFS" 2>&1)" && fail "a second tierfs-csi started"
[[ "$out" == *"another tierfs-csi (pid $CSI_PID) uses the state directory $STATE"* ]] ||
  fail "a second tierfs-csi: $out"
log "ok a second plug-in on the same state is refused: $out"

# ---- two pods, one source, one secret: one daemon
publish vol-data pod-a "${SRC[@]}" "${SECRET_A[@]}" --attr options=metadata-ttl=10m
publish vol-data pod-b "${SRC[@]}" "${SECRET_A[@]}" --attr options=metadata-ttl=10m \
  --attr csi.storage.k8s.io/pod.namespace=other
[[ "$(daemons)" == 1 ]] || fail "two pods of one volume: $(daemons) daemons, expected 1"
pid1="$(pid_of "$PODS/pod-a/mount")"
[[ "$(pid_of "$PODS/pod-b/mount")" == "$pid1" ]] || fail "the pods' mounts have different daemons"
DAEMON_PIDS+=("$pid1")
pid_alive "$pid1" || fail "daemon $pid1 is not running"
reads pod-a
reads pod-b
grep -q "secret-of-team" "$STATE/state.json" && fail "a secret is in the state file"
tr '\0' ' ' <"/proc/$pid1/cmdline" | grep -q "secret-of-team" && fail "a secret is in the daemon's argv"
[[ "$(stat -c %a "$STATE")" == 700 && "$(stat -c %a "$STATE/state.json")" == 600 ]] ||
  fail "state dir/file modes: $(stat -c %a "$STATE") $(stat -c %a "$STATE/state.json")"
publish vol-data pod-a "${SRC[@]}" "${SECRET_A[@]}" --attr options=metadata-ttl=10m
[[ "$(daemons)" == 1 && "$(pid_of "$PODS/pod-a/mount")" == "$pid1" ]] ||
  fail "publishing the same target again changed the daemons"
log "ok publishing the same volume at the same target again is OK and changes nothing"

# ---- the driver crashes and starts again: nothing changes
csi_kill
reads pod-a  # the mounts do not depend on the driver
csi_start
[[ "$(daemons)" == 1 && "$(pid_of "$PODS/pod-b/mount")" == "$pid1" ]] ||
  fail "after the driver's restart: $(daemons) daemons, pod-b's is $(pid_of "$PODS/pod-b/mount")"
reads pod-b
log "ok the driver's restart kept the daemon (pid $pid1) and both mounts"

# ---- unpublish one: the other still reads
[[ "$(csi unpublish --volume-id vol-data --target "$PODS/pod-a/mount")" == OK ]] || fail "unpublish pod-a"
is_mounted "$PODS/pod-a/mount" && fail "pod-a is still mounted after its unpublish"
[[ -e "$PODS/pod-a/mount" ]] && fail "the driver left pod-a's target directory"
pid_alive "$pid1" || fail "the daemon exited while pod-b still uses it"
reads pod-b

# ---- another secret and no secret: a daemon each
publish vol-team-b pod-c "${SRC[@]}" "${SECRET_B[@]}" --attr options=metadata-ttl=10m
publish vol-node pod-d "${SRC[@]}"
[[ "$(daemons)" == 3 ]] || fail "three credential identities: $(daemons) daemons, expected 3"
pid_c="$(pid_of "$PODS/pod-c/mount")" pid_d="$(pid_of "$PODS/pod-d/mount")"
DAEMON_PIDS+=("$pid_c" "$pid_d")
[[ "$pid_c" != "$pid1" && "$pid_d" != "$pid1" && "$pid_c" != "$pid_d" ]] ||
  fail "daemons are shared across credentials: $pid1 $pid_c $pid_d"
c_b="$(cache_of "$PODS/pod-b/mount")" c_c="$(cache_of "$PODS/pod-c/mount")" c_d="$(cache_of "$PODS/pod-d/mount")"
[[ "$c_b" != "$c_c" && "$c_c" != "$c_d" && "$c_b" != "$c_d" ]] || fail "a cache dir is shared across credentials"
grep -q '^AWS_SECRET_ACCESS_KEY=secret-of-team-b$' <(tr '\0' '\n' <"/proc/$pid_c/environ") ||
  fail "daemon $pid_c does not have team b's secret in its environment"
grep -q '^AWS_SECRET_ACCESS_KEY=S3RVER$' <(tr '\0' '\n' <"/proc/$pid_d/environ") ||
  fail "daemon $pid_d does not run with the node's identity"
[[ "$(stat -c %a "/proc/$pid_c/environ")" == 400 ]] || fail "the daemon's environment is readable by others"
reads pod-c
reads pod-d
log "ok another secret and no secret: a daemon each (pids $pid1 $pid_c $pid_d), own caches"

# ---- refusals: a clear code and message, nothing left behind
refused INVALID_ARGUMENT "volumeAttributes.source" vol-bad pod-e \
  --attr source=http://example.com/x
refused INVALID_ARGUMENT "option 'cache-dir' is not allowed" vol-bad pod-e "${SRC[@]}" \
  --attr options=l1-size=64MiB,cache-dir=/etc
refused INVALID_ARGUMENT "option 'config' is not allowed" vol-bad pod-e "${SRC[@]}" \
  --mount-flag config=/etc/tierfs/tierfs.toml
refused INVALID_ARGUMENT "secret key 'password'" vol-bad pod-e "${SRC[@]}" --secret password=x
refused INVALID_ARGUMENT "block access" vol-bad pod-e "${SRC[@]}" --block
refused INVALID_ARGUMENT "read-only" vol-bad pod-e "${SRC[@]}" --mode SINGLE_NODE_WRITER
refused PERMISSION_DENIED "InvalidAccessKeyId" vol-bad pod-e "${SRC[@]}" \
  --secret access_key_id=NOT-A-KEY --secret secret_access_key=x
refused NOT_FOUND "NoSuchBucket" vol-bad pod-e --attr source=s3://no-such-bucket \
  --attr "endpoint=$S3_ENDPOINT" "${SECRET_A[@]}"
dead_port="$(free_port)"
refused UNAVAILABLE "127.0.0.1" vol-bad pod-e --attr "source=s3://$BUCKET" \
  --attr "endpoint=http://127.0.0.1:$dead_port" "${SECRET_A[@]}"
out="$(csi publish --volume-id vol-other --target "$PODS/pod-b/mount" "${SRC[@]}" "${SECRET_B[@]}")" &&
  fail "another volume at pod-b's target was published"
[[ "$out" == "ERROR ALREADY_EXISTS: "*"already holds volume vol-data"* ]] || fail "another volume at pod-b: $out"
[[ "$(daemons)" == 3 ]] || fail "another volume at a used target changed the daemons"
reads pod-b
log "ok another volume at a used target: $out"

# ---- the workload pod of packaging/k8s/csi: its script, as a non-root user whose supplementary
# group is the volume's control-group, reads every file and hands the daemon its order
CTL_GID="$(getent group users | cut -d: -f3)"
[[ -n "$CTL_GID" ]] || fail "no 'users' group on this host"
publish vol-train pod-f "${SRC[@]}" --attr "options=control-group=$CTL_GID"
DAEMON_PIDS+=("$(pid_of "$PODS/pod-f/mount")")
"$PY" - "$E2E_ROOT/packaging/k8s/csi/workload-pod.yaml" "$PODS/pod-f/mount/$sub" \
  >"$E2E_WORK/workload.py" <<'PYEOF'
import sys, yaml
pod = yaml.safe_load(open(sys.argv[1]))
script = pod["spec"]["containers"][0]["args"][0]
assert 'root = "/data/train"' in script, "the workload's dataset root changed"
print(script.replace('root = "/data/train"', "root = %r" % sys.argv[2]))
PYEOF
out="$(cd "$E2E_WORK" && timeout -k 5 300 runuser -u nobody -G users -- env \
  PYTHONPATH="$E2E_ROOT/python" "$PY" "$E2E_WORK/workload.py" 2>&1)" ||
  fail "the workload pod's script failed: $out"
[[ "$out" == *"epoch 1 read $(find "$DATASET/$sub" -type f | wc -l) files; prefetch active: True"* ]] ||
  fail "the workload pod's script: $out"
[[ "$out" != *RuntimeWarning* ]] || fail "the workload pod's script warned: $out"
stats="$(stats_xattr "$PODS/pod-f/mount")" || fail "getfattr user.tierfs.stats through pod-f"
[[ " $stats " =~ \ prefetch\.blocks=[1-9] ]] || fail "the daemon prefetched nothing: $stats"
log "ok the workload pod's PrefetchSampler script ran as nobody in group $CTL_GID: $(tail -n 1 <<<"$out")"
# Writes fail whatever the bind: the file system is read-only.
out="$(runuser -u nobody -G users -- touch "$PODS/pod-f/mount/$sub/new" 2>&1)" && fail "a write succeeded"
[[ "$out" == *"Read-only file system"* ]] || fail "a write through pod-f: $out"
# readonly=true (a PV's csi.readOnly, a pod's readOnly volume): a read-only bind, which also
# refuses the prefetch setxattr; reads work.
publish vol-train pod-g "${SRC[@]}" --attr "options=control-group=$CTL_GID" --readonly
awk -v m="$PODS/pod-g/mount" '$5 == m { split($6, o, ","); exit o[1] != "ro" }' /proc/self/mountinfo ||
  fail "readonly=true did not give a read-only bind"
out="$(runuser -u nobody -G users -- setfattr -n user.tierfs.prefetch -v l2 "$PODS/pod-g/mount/$sub" 2>&1)" &&
  fail "a prefetch through a read-only bind was accepted"
[[ "$out" == *"Read-only file system"* ]] || fail "prefetch through a read-only bind: $out"
reads pod-g
for pod in pod-f pod-g; do
  [[ "$(csi unpublish --volume-id vol-train --target "$PODS/$pod/mount")" == OK ]] || fail "unpublish $pod"
done

# ---- a daemon dies while the driver is down: dropped at the driver's start
csi_kill
# SIGTERM: a daemon started by the plug-in handles it (unmounts, exits) like one started by hand;
# it must not inherit the plug-in's blocked or ignored signals.
kill -TERM "$pid_d"
wait_pid_exit "$pid_d" 10 || fail "daemon $pid_d does not exit on SIGTERM"
csi_start
[[ "$(daemons)" == 2 ]] || fail "the dead daemon is still recorded: $(daemons) daemons"
is_mounted "$PODS/pod-d/mount" && fail "the dead daemon's pod mount is still there"
[[ "$(csi unpublish --volume-id vol-node --target "$PODS/pod-d/mount")" == OK ]] ||
  fail "unpublish of a target the driver dropped"
[[ "$(csi unpublish --volume-id vol-x --target "$PODS/never/mount")" == OK ]] ||
  fail "unpublish of an unknown target"
log "ok a daemon that died is dropped at start; unknown targets unpublish OK"

# ---- the last pods leave: every daemon stops, nothing stays mounted
for pod in pod-b pod-c; do
  [[ "$(csi unpublish --volume-id x --target "$PODS/$pod/mount")" == OK ]] || fail "unpublish $pod"
done
for p in "$pid1" "$pid_c"; do
  wait_pid_exit "$p" 20 || fail "daemon $p still runs after its last target was unpublished"
done
[[ "$(daemons)" == 0 ]] || fail "$(daemons) daemons still recorded"
[[ "$(tierfs_mounts)" == 0 ]] || fail "tierfs mounts left: $(grep "$E2E_WORK" /proc/self/mountinfo)"
[[ -d "$c_b" ]] || fail "the cache dir of a stopped daemon was removed (it is kept for the next one)"
kill -TERM "$CSI_PID"
wait_pid_exit "$CSI_PID" 10 || fail "tierfs-csi does not exit on SIGTERM"
CSI_PID=""
log "ok every daemon stopped with its last target; nothing mounted"
