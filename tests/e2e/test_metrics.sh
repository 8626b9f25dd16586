#!/usr/bin/env bash
# End-to-end: the Prometheus endpoint (--metrics-address). s3rver on loopback → mount with
# --metrics-address 127.0.0.1:PORT → scrape (strictly parsed by metrics_check.py) → cold reads →
# scrape: origin bytes, origin read latency and FUSE op counts moved → re-reads with the page
# cache dropped (posix_fadvise DONTNEED, so L0 does not hide them) → scrape: L1/L2 hits and their
# latency counts moved, no origin bytes → the scrape agrees with user.tierfs.stats → every metric
# of packaging/grafana-dashboard.json is served → 404/405 → a second mount on the same port fails
# with a clear error → unmount closes the port → a remount on the same cache reads from L2 (L2
# hits and latency counts move, no origin bytes).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
BUCKET=tierfs-metrics
s3rver_start "$BUCKET"
OBJS=("data/a.bin=3145728:11" "data/b.bin=1048576:12" "small.txt=1000:13")
step "put ${#OBJS[@]} objects" 60 "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" \
  --bucket "$BUCKET" "${OBJS[@]}"
mapfile -t SHAS < <("$PY" "$E2E_DIR/s3put.py" --sha "${OBJS[@]}")

MNT="$E2E_WORK/mnt"
PORT="$(free_port)"
URL="http://127.0.0.1:$PORT/metrics"
CHECK=("$PY" "$E2E_DIR/metrics_check.py")
"${CHECK[@]}" selftest || fail "the text-format checker accepts malformed input"
tierfs_mount "s3://$BUCKET" "$MNT" "$E2E_WORK/cache" "$E2E_WORK/tierfs.log" \
  --endpoint "$S3_ENDPOINT" --metrics-address "127.0.0.1:$PORT"
grep -q "serving metrics on http://127.0.0.1:$PORT/metrics" "$E2E_WORK/tierfs.log" ||
  fail "the log does not say where metrics are served"

scrape() {  # scrape NAME: saves the body in $E2E_WORK/NAME.txt and checks the format
  local out="$E2E_WORK/$1.txt" hdr="$E2E_WORK/$1.hdr"
  timeout -k 2 10 curl -sS --fail -D "$hdr" -o "$out" "$URL" || fail "scrape $1 failed"
  grep -qi '^content-type: text/plain; version=0.0.4' "$hdr" || fail "scrape $1: content type: $(cat "$hdr")"
  "${CHECK[@]}" parse "$out" || fail "scrape $1 does not parse"
}
delta() {  # delta BEFORE AFTER SERIES OP N
  "${CHECK[@]}" delta "$E2E_WORK/$1.txt" "$E2E_WORK/$2.txt" "$3" "$4" "$5" || fail "$1 -> $2: $3"
}
value() { "${CHECK[@]}" value "$E2E_WORK/$1.txt" "$2"; }
# read_files.py: reads each file whole, checks its sha256 (in OBJS order), then drops its pages
# from the kernel page cache so that the next read reaches the daemon.
cat >"$E2E_WORK/read_files.py" <<'EOF'
import hashlib, os, sys
mnt, shas = sys.argv[1], sys.argv[2:]
for name, want in zip(["data/a.bin", "data/b.bin", "small.txt"], shas):
    fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
    h = hashlib.sha256()
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        h.update(b)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    if h.hexdigest() != want:
        sys.exit(f"{name}: sha256 {h.hexdigest()} != {want}")
EOF
read_files=("$PY" "$E2E_WORK/read_files.py" "$MNT" "${SHAS[@]}")

scrape s0
[[ "$(value s0 'tierfs_build_info{version="'"$("$TIERFS" --version | awk '{print $NF}')"'"}')" == 1 ]] ||
  fail "tierfs_build_info does not carry the version of $("$TIERFS" --version)"
start="$(value s0 tierfs_start_time_seconds)"
"$PY" -c "import sys,time; t=float(sys.argv[1]); sys.exit(0 if time.time()-600 < t <= time.time() else 1)" "$start" ||
  fail "tierfs_start_time_seconds $start is not a recent time"
log "first lines of the scrape:"
head -n 40 "$E2E_WORK/s0.txt" | sed 's/^/    /'

step "cold read of every file" 60 "${read_files[@]}"
scrape s1
total=$((3145728 + 1048576 + 1000))
delta s0 s1 'tierfs_tier_served_bytes_total{tier="origin"}' '>=' "$total"
delta s0 s1 'tierfs_store_downloaded_bytes_total{store="origin"}' '>=' "$total"
delta s0 s1 'tierfs_store_requests_total{store="origin"}' '>' 0
delta s0 s1 'tierfs_read_duration_seconds_count{tier="origin"}' '>' 0
delta s0 s1 'tierfs_read_duration_seconds_bucket{tier="origin",le="+Inf"}' '>' 0
delta s0 s1 'tierfs_fuse_requests_total{op="open"}' '>=' 3
delta s0 s1 'tierfs_fuse_requests_total{op="read"}' '>=' 3
delta s0 s1 'tierfs_fuse_request_duration_seconds_count{op="read"}' '>=' 3
delta s0 s1 'tierfs_fuse_requests_total{op="lookup"}' '>=' 3
delta s0 s1 'tierfs_fuse_read_bytes_total' '>=' "$total"
delta s0 s1 'tierfs_tier_used_bytes{tier="l1"}' '>=' "$total"
delta s0 s1 'tierfs_tier_used_bytes{tier="l2"}' '>=' "$total"

step "warm re-read of every file (page cache dropped)" 60 "${read_files[@]}"
scrape s2
delta s1 s2 'tierfs_tier_served_bytes_total{tier="origin"}' '==' 0
delta s1 s2 'tierfs_store_requests_total{store="origin"}' '==' 0
delta s1 s2 'tierfs_tier_hits_total{tier="l1"}' '>=' 4  # 3 MiB + 1 MiB + small: >= 5 blocks
delta s1 s2 'tierfs_tier_served_bytes_total{tier="l1"}' '>=' "$total"
delta s1 s2 'tierfs_read_duration_seconds_count{tier="l1"}' '>' 0
delta s1 s2 'tierfs_read_duration_seconds_count{tier="origin"}' '==' 0
delta s1 s2 'tierfs_fuse_requests_total{op="read"}' '>=' 3
delta s1 s2 'tierfs_fuse_request_duration_seconds_count{op="read"}' '>=' 3

# The xattr and the endpoint read the same counters: no reads between the two, so equal.
stats="$(stats_xattr "$MNT")"
scrape s3
xv() { tr ' ' '\n' <<<"$stats" | awk -F= -v k="$1" '$1 == k { print $2 }'; }
for pair in "l1.hits:tierfs_tier_hits_total{tier=\"l1\"}" "l1.misses:tierfs_tier_misses_total{tier=\"l1\"}" \
  "l2.hits:tierfs_tier_hits_total{tier=\"l2\"}" "l1.used:tierfs_tier_used_bytes{tier=\"l1\"}" \
  "origin.bytes:tierfs_tier_served_bytes_total{tier=\"origin\"}" "fuse.reads:tierfs_fuse_reads_total"; do
  k="${pair%%:*}" series="${pair#*:}"
  x="$(xv "$k")" m="$(value s3 "$series")"
  [[ -n "$x" ]] || fail "user.tierfs.stats has no $k: $stats"
  "$PY" -c "import sys; sys.exit(0 if int(sys.argv[1]) == float(sys.argv[2]) else 1)" "$x" "$m" ||
    fail "user.tierfs.stats $k=$x but /metrics $series $m"
  log "agree: $k=$x == $series $m"
done

# Every metric the example Grafana dashboard queries exists in the scrape (and the JSON is valid).
"$PY" - "$E2E_ROOT/packaging/grafana-dashboard.json" "$E2E_WORK/s3.txt" <<'EOF' || fail "grafana dashboard"
import json, re, sys
dash = json.load(open(sys.argv[1]))
scrape = open(sys.argv[2]).read()
names = set()
for p in dash["panels"]:
    for t in p["targets"]:
        names |= set(re.findall(r"tierfs_[a-z0-9_]+", t["expr"]))
missing = sorted(n for n in names if not re.search(r"^" + n + r"[{ ]", scrape, re.M))
if missing:
    sys.exit(f"the dashboard queries metrics the daemon does not serve: {missing}")
print(f"grafana dashboard: {len(dash['panels'])} panels, {len(names)} metrics, all served")
EOF

code() { timeout -k 2 10 curl -s -o /dev/null -w '%{http_code}' "$@"; }
[[ "$(code "http://127.0.0.1:$PORT/")" == 404 ]] || fail "GET / is not 404"
[[ "$(code -X POST "$URL")" == 405 ]] || fail "POST /metrics is not 405"
[[ "$(code -I "$URL")" == 200 ]] || fail "HEAD /metrics is not 200"
# The liveness endpoint of the Kubernetes manifests: 200 and what is served, once mounted.
health="$(timeout -k 2 10 curl -sS --fail "http://127.0.0.1:$PORT/healthz")" || fail "GET /healthz is not 200"
[[ "$health" == "serving s3://$BUCKET at $MNT" ]] || fail "GET /healthz: '$health'"
log "ok /healthz: $health"

# A second mount asking for the same port fails at mount time, saying why.
MNT2="$E2E_WORK/mnt2"
mkdir -p "$MNT2" "$E2E_WORK/cache2"
E2E_MOUNTS+=("$MNT2")
rc=0
AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER timeout -k 2 30 "$TIERFS" mount "s3://$BUCKET" \
  "$MNT2" --endpoint "$S3_ENDPOINT" --cache-dir "$E2E_WORK/cache2" \
  --metrics-address "127.0.0.1:$PORT" >"$E2E_WORK/mount2.log" 2>&1 || rc=$?
(( rc == 1 )) || fail "second mount on a taken port: exit $rc, expected 1: $(cat "$E2E_WORK/mount2.log")"
is_mounted "$MNT2" && fail "second mount on a taken port mounted anyway"
grep -q "already in use" "$E2E_WORK/mount2.log" || fail "no clear error: $(cat "$E2E_WORK/mount2.log")"
log "second mount refused: $(grep -m1 'already in use' "$E2E_WORK/mount2.log")"
scrape s4  # the first mount still serves

tierfs_umount "$MNT" "$TIERFS_PID" || fail "unmount was not clean"
daemon_exit_code "$TIERFS_PID"; [[ "$DAEMON_RC" == 0 ]] || fail "daemon exit code not 0"
if timeout -k 2 5 curl -s -o /dev/null "$URL"; then fail "the port still answers after unmount"; fi
log "the endpoint is gone with the mount"

# Remount on the same cache: L1 is empty, L2 holds every block, so reads are L2 hits.
PORT="$(free_port)"
URL="http://127.0.0.1:$PORT/metrics"
tierfs_mount "s3://$BUCKET" "$MNT" "$E2E_WORK/cache" "$E2E_WORK/tierfs2.log" \
  --endpoint "$S3_ENDPOINT" --metrics-address "127.0.0.1:$PORT"
scrape s5
step "re-read after a remount (from L2)" 60 "${read_files[@]}"
scrape s6
delta s5 s6 'tierfs_tier_hits_total{tier="l2"}' '>=' 5
delta s5 s6 'tierfs_tier_served_bytes_total{tier="l2"}' '>=' "$total"
delta s5 s6 'tierfs_read_duration_seconds_count{tier="l2"}' '>' 0
delta s5 s6 'tierfs_tier_served_bytes_total{tier="origin"}' '==' 0
tierfs_umount "$MNT" "$TIERFS_PID" || fail "second unmount was not clean"
