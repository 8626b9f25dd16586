# Shell helpers shared by the end-to-end tests (tests/e2e/lib.sh), the benchmarks (bench/*.sh),
# the demo and the test servers (scripts/demo.sh, s3rver.sh, rgw.sh); sourced, not run. bash
# only. One definition each of "is this directory a mount", "is this process still running" (and
# "wait until it is not"), and "a free TCP port on 127.0.0.1".

is_mounted() {  # is_mounted DIR: non-blocking (reads mountinfo; never stats the mount)
  local dir
  dir="$(realpath -s "$1")"
  dir="${dir// /\\\\040}"  # mountinfo has "\040" for a space (and awk -v halves backslashes)
  awk -v d="$dir" '$5 == d { found = 1 } END { exit !found }' /proc/self/mountinfo
}

pid_alive() {  # pid_alive PID: running (a zombie counts as exited)
  [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null || return 1
  local state
  state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ "$state" != Z ]]
}

wait_pid_exit() {  # wait_pid_exit PID SECONDS -> 0 when it exited in time
  local pid="$1" deadline=$((SECONDS + $2))
  while pid_alive "$pid"; do
    (( SECONDS >= deadline )) && return 1
    sleep 0.1
  done
  return 0
}

free_port() {  # free_port: a TCP port on 127.0.0.1 that nothing listens on right now
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
