# Helpers of the prefetch/policy end-to-end tests (sourced after lib.sh). bash only.

# pf_mount SOURCE MNT CACHE LOGFILE [ARGS...]: like tierfs_mount, without its default cache sizes
# (the caller passes --l1-size/--l2-size). Sets TIERFS_PID.
pf_mount() {
  local src="$1" mnt="$2" cache="$3" logf="$4"
  shift 4
  mkdir -p "$mnt" "$cache"
  is_mounted "$mnt" && fail "$mnt is already a mount"
  local cmd=("$TIERFS" mount "$src" "$mnt" --cache-dir "$cache" "$@" -f)
  log "mount: ${cmd[*]}"
  AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 \
    "${cmd[@]}" >>"$logf" 2>&1 </dev/null &
  TIERFS_PID=$!
  E2E_PIDS+=("$TIERFS_PID")
  E2E_MOUNTS+=("$mnt")
  local deadline=$((SECONDS + MOUNT_TIMEOUT))
  until is_mounted "$mnt"; do
    if ! pid_alive "$TIERFS_PID"; then
      sed 's/^/    /' "$logf" | tail -n 40 >&2
      fail "tierfs exited before $mnt was mounted"
    fi
    (( SECONDS < deadline )) || { tail -n 40 "$logf" >&2; fail "$mnt not mounted within ${MOUNT_TIMEOUT}s"; }
    sleep 0.1
  done
  log "mounted $mnt (daemon pid $TIERFS_PID)"
}

# xget PATH NAME: the value of an xattr (fails the test if getfattr fails).
xget() {
  xattr_of "$1" "$2" 2>/dev/null || fail "getfattr -n $2 $1 failed"
}

# xset_fails PATH NAME VALUE ERRTEXT: setfattr must fail with the given error text.
xset_fails() {
  local out
  if out="$(timeout -k 2 20 setfattr -n "$2" -v "$3" "$1" 2>&1)"; then
    fail "setfattr -n $2 -v '$3' $1 succeeded; expected '$4'"
  fi
  [[ "$out" == *"$4"* ]] || fail "setfattr -n $2 -v '$3' $1: '$out', expected '$4'"
}

# stat_of MNT KEY: one counter of user.tierfs.stats.
stat_of() {
  stats_xattr "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { print $2 }'
}

# wait_prefetch PATH STATE SECONDS: polls user.tierfs.prefetch until its state is STATE.
wait_prefetch() {
  local p="$1" want="$2" deadline=$((SECONDS + $3)) v
  while :; do
    v="$(xget "$p" user.tierfs.prefetch)"
    [[ "$v" == "state=$want "* ]] && { log "prefetch of $p: $v"; return 0; }
    [[ "$v" == state=failed* || "$v" == state=cancelled* ]] && fail "prefetch of $p: $v"
    (( SECONDS < deadline )) || fail "prefetch of $p not $want within $3s: $v"
    sleep 0.5
  done
}
