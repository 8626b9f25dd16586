#!/usr/bin/env bash
# A second, stricter S3 test server: Ceph RADOS Gateway (Debian 12: Ceph Pacific) on 127.0.0.1.
# Unlike s3rver it verifies SigV4 signatures (a wrong secret gets 403 SignatureDoesNotMatch), so
# signing, credential rotation and error messages are tested against a real implementation.
#
#   scripts/rgw.sh install                          apt packages (scripts/install-deps.sh --rgw)
#   scripts/rgw.sh start DIR ACCESS_KEY SECRET      single-node cluster with all state in DIR;
#                                                   prints the endpoint (http://127.0.0.1:PORT) last
#   scripts/rgw.sh stop DIR                         stops the daemons started on DIR (by their PIDs)
#   scripts/rgw.sh admin DIR ARGS...                radosgw-admin against the cluster in DIR
#
# The cluster (in the style of Ceph's vstart.sh): one mon, one OSD with the memstore object store
# (data in RAM, about twice the stored bytes; memstore_device_bytes caps it), no mgr, pool size 1,
# no cephx between daemons ("auth none"; `ms mon client mode = crc`, without which radosgw cannot
# reach the mon: error -13), radosgw with the beast frontend on a free port of 127.0.0.1, and one
# S3 user "tierfs" with the given keys. Every daemon runs in the foreground of a background job;
# its PID is kept in DIR/pids and `stop` ends exactly those. Logs: DIR/log/*.log (printed when the
# start fails). Start-up takes a few seconds.
#
# Env: RGW_START_TIMEOUT (seconds, 60), RGW_MEMSTORE_BYTES (1 GiB), RGW_PORT (a free port).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
START_TIMEOUT="${RGW_START_TIMEOUT:-60}"
STOP_TIMEOUT=10
RGW_UID=tierfs

die() { echo "rgw.sh: $*" >&2; exit 1; }

need_bins() {
  local b missing=()
  for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  (( ${#missing[@]} == 0 )) ||
    die "missing ${missing[*]}: run scripts/rgw.sh install (apt: radosgw ceph-mon ceph-osd ceph-base)"
}

cmd_install() {
  if command -v radosgw >/dev/null 2>&1 && command -v ceph-mon >/dev/null 2>&1 &&
    command -v ceph-osd >/dev/null 2>&1; then
    return 0
  fi
  "$here/scripts/install-deps.sh" --rgw
}

source "$here/scripts/lib.sh"  # pid_alive PID, free_port

show_logs() {  # the daemon logs of DIR, last lines of each, on stderr
  local f
  for f in "$1"/log/*.log "$1"/log/*.out; do
    [[ -s "$f" ]] || continue
    echo "---- $f (last 25 lines)" >&2
    tail -n 25 "$f" >&2
  done
}

# start_daemon DIR NAME CMD...: CMD in the background (foreground mode), PID recorded.
start_daemon() {
  local dir="$1" name="$2"
  shift 2
  "$@" >"$dir/log/$name.out" 2>&1 </dev/null &
  echo "$! $name" >>"$dir/pids"
}

# until_ok DIR WHAT CMD...: retries CMD until it succeeds, the deadline passes or a daemon died.
until_ok() {
  local dir="$1" what="$2" pid name
  shift 2
  until "$@" >/dev/null 2>&1; do
    while read -r pid name; do
      pid_alive "$pid" || { show_logs "$dir"; fail_start "$dir" "$name (pid $pid) exited while waiting for $what"; }
    done <"$dir/pids"
    if (( SECONDS >= DEADLINE )); then
      show_logs "$dir"
      fail_start "$dir" "$what did not happen within ${START_TIMEOUT}s"
    fi
    sleep 0.2
  done
}

fail_start() {
  cmd_stop "$1" >/dev/null 2>&1 || true
  die "start failed: $2 (logs above; state in $1)"
}

osd_up() { ceph -c "$CEPH_CONF" --connect-timeout 10 osd dump 2>/dev/null | grep -q '^osd\.0 up'; }

cmd_start() {
  (( $# == 3 )) || die "usage: start DIR ACCESS_KEY SECRET"
  local dir="$1" access="$2" secret="$3"
  need_bins
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if [[ -f "$dir/pids" ]]; then
    local pid name
    while read -r pid name; do
      pid_alive "$pid" && die "a cluster is already running on $dir ($name pid $pid)"
    done <"$dir/pids"
  fi
  rm -rf "$dir/mon" "$dir/osd" "$dir/run" "$dir/log" "$dir/pids" "$dir/monmap" "$dir/keyring" "$dir/endpoint"
  mkdir -p "$dir/mon" "$dir/osd" "$dir/run" "$dir/log"
  : >"$dir/pids"
  local mon_port rgw_port fsid
  mon_port="$(free_port)"
  rgw_port="${RGW_PORT:-$(free_port)}"
  fsid="$(cat /proc/sys/kernel/random/uuid)"
  local conf="$dir/ceph.conf"
  cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
keyring = $dir/keyring
run dir = $dir/run
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
mon data = $dir/mon
osd data = $dir/osd
osd objectstore = memstore
memstore device bytes = ${RGW_MEMSTORE_BYTES:-1073741824}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
paxos propose interval = 0.01
paxos min wait = 0.001
mon tick interval = 1
osd mon report interval = 1
mon osd down out interval = 0
mon osd min in ratio = 0
mon osd min up ratio = 0
osd max object name len = 460
osd max object namespace len = 64
debug ms = 0
debug mon = 1
debug osd = 1
debug rgw = 1
crash dir = $dir/run
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
rgw data = $dir/run
rgw dns name = 127.0.0.1
rgw thread pool size = 64
EOF
  DEADLINE=$((SECONDS + START_TIMEOUT))
  local t0=$SECONDS
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  monmaptool --create --addv a "[v2:127.0.0.1:$mon_port]" --fsid "$fsid" "$dir/monmap" \
    >"$dir/log/monmaptool.out" 2>&1 || { cat "$dir/log/monmaptool.out" >&2; die "monmaptool failed"; }
  ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >"$dir/log/mon-mkfs.out" 2>&1 ||
    { cat "$dir/log/mon-mkfs.out" >&2; die "ceph-mon --mkfs failed"; }
  start_daemon "$dir" mon.a ceph-mon -c "$conf" -f -i a
  local ceph=(ceph -c "$conf" --connect-timeout 10)
  until_ok "$dir" "the mon answering" "${ceph[@]}" mon stat
  local osd_id
  osd_id="$("${ceph[@]}" osd create)" || fail_start "$dir" "ceph osd create failed"
  [[ "$osd_id" == 0 ]] || fail_start "$dir" "ceph osd create gave id '$osd_id', want 0"
  ceph-osd -c "$conf" -i 0 --mkfs >"$dir/log/osd-mkfs.out" 2>&1 ||
    { cat "$dir/log/osd-mkfs.out" >&2; fail_start "$dir" "ceph-osd --mkfs failed"; }
  start_daemon "$dir" osd.0 ceph-osd -c "$conf" -f -i 0
  CEPH_CONF="$conf"
  until_ok "$dir" "osd.0 up" osd_up
  start_daemon "$dir" client.rgw radosgw -c "$conf" -f -n client.rgw
  until_ok "$dir" "radosgw answering on 127.0.0.1:$rgw_port" \
    curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$rgw_port/"
  radosgw-admin -c "$conf" user create --uid "$RGW_UID" --display-name "tierfs tests" \
    --access-key "$access" --secret-key "$secret" >"$dir/log/user-create.out" 2>&1 ||
    { cat "$dir/log/user-create.out" >&2; fail_start "$dir" "radosgw-admin user create failed"; }
  echo "http://127.0.0.1:$rgw_port" >"$dir/endpoint"
  echo "rgw.sh: cluster up in $((SECONDS - t0))s (mon 127.0.0.1:$mon_port, user $RGW_UID, state in $dir)" >&2
  echo "http://127.0.0.1:$rgw_port"
}

cmd_stop() {
  (( $# == 1 )) || die "usage: stop DIR"
  local dir="$1" pid name
  [[ -f "$dir/pids" ]] || { echo "rgw.sh: no pids file in $dir, nothing to stop"; return 0; }
  # radosgw first, the mon last (the others talk to it while they shut down).
  local pids=()
  while read -r pid name; do pids=("$pid" "${pids[@]}"); done <"$dir/pids"
  for pid in "${pids[@]}"; do
    pid_alive "$pid" || continue
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while pid_alive "$pid"; do
      if (( SECONDS >= deadline )); then
        echo "rgw.sh: pid $pid still alive after ${STOP_TIMEOUT}s, SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.1
    done
  done
  rm -f "$dir/pids"
  echo "rgw.sh: stopped ${#pids[@]} daemon(s) of $dir"
}

cmd_admin() {
  (( $# >= 1 )) || die "usage: admin DIR ARGS..."
  local dir="$1"
  shift
  [[ -f "$dir/ceph.conf" ]] || die "no cluster in $dir"
  radosgw-admin -c "$dir/ceph.conf" "$@"
}

case "${1:-}" in
  install) shift; cmd_install "$@" ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  admin) shift; cmd_admin "$@" ;;
  *) die "usage: $0 install | start DIR ACCESS_KEY SECRET | stop DIR | admin DIR ARGS..." ;;
esac
