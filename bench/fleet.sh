#!/usr/bin/env bash
# Multi-host simulation (not part of the test suite): N tierfs daemons on this
# machine, each with its own cache dir and mount point, all sharing one L3 bucket on an s3rver and
# one origin s3rver behind bench/delay_proxy.py (DELAY ms each way), read the same dataset. Every
# origin request is attributed to its host: the proxy logs the pid of the daemon owning each
# connection (delay_proxy.py --log). All hosts use the same origin endpoint, as a fleet does: the
# endpoint is part of the block keys, so per-host ports or addresses would split L3.
#
#   bench/fleet.sh [--hosts 1,4,16] [--dirs 8] [--files 16] [--file-mib 2] [--start wave|once]
#                  [--par 4] [--delay-ms 5] [--l3-engine s3rver|memcached] [--out DIR]
#
# Dataset: DIRS directories (ds/dNN/) of FILES files of FILE_MIB MiB each, random bytes, uploaded
# once to the origin. For every N in --hosts, N fresh daemons (fresh cache dirs, their own L3
# prefix fleet-l3/nN, so each N starts with an empty L3) mount the origin and each host
#   lists the tree (`find ds -type f`: one listing per directory) and reads every file
#   (`cat`, PAR files at a time), in its own shuffled order.
# --start wave (default): host 0 reads first (cold: origin, writing back to L3), its write-back is
#   drained, then hosts 1..N-1 read at once (they should hit L3 for every block).
# --start once: all N hosts start together (no cross-host single-flight: hosts that reach a block
#   before anyone wrote it back fetch it from the origin too; the shuffled orders spread that).
# --l3-engine memcached: L3 is a pool of three memcached servers (`--l3 memcached://...`, started
#   fresh for every N, -I 16m, 512 MiB each) instead of the s3rver bucket.
# The report counts, per N: origin object GETs per distinct object and origin bytes per dataset
# byte, origin LISTs per directory listed, HEADs, the L3 hit rate (l3.hits / (l3.hits +
# l3.misses + l3.errors + l3.skipped) over the hosts' user.tierfs.stats), and per-host throughput (MB/s of the
# dataset, wall time of the host's find + reads): host 0 (wave: from the origin) and the median
# of the others (wave: from L3), with their ratio. A table goes to stdout and OUT/fleet.md, every
# figure to OUT/fleet.json, the proxy log, stats and daemon logs under OUT/.
#
# Env: TIERFS (binary, default build/daemon/tierfs), FLEET_OPTS (more `tierfs mount` options for
# every host, e.g. the shared-listings switch), FLEET_L1 (default 64MiB), FLEET_L2 (default 2GiB),
# KEEP=1 (keep the work dir). Needs /dev/fuse (root); runs in a few minutes at the defaults.
set -euo pipefail
HOSTS=1,4,16
DIRS=8
FILES=16
FILE_MIB=2
START=wave
PAR=4
DELAY_MS=5
L3_ENGINE=s3rver
OUT=""
while (($#)); do
  case "$1" in
    --hosts) HOSTS="$2"; shift 2 ;;
    --dirs) DIRS="$2"; shift 2 ;;
    --files) FILES="$2"; shift 2 ;;
    --file-mib) FILE_MIB="$2"; shift 2 ;;
    --start) START="$2"; shift 2 ;;
    --par) PAR="$2"; shift 2 ;;
    --delay-ms) DELAY_MS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --l3-engine) L3_ENGINE="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fleet.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$START" == wave || "$START" == once ]] || { echo "fleet.sh: --start wave|once" >&2; exit 2; }
[[ "$L3_ENGINE" == s3rver || "$L3_ENGINE" == memcached ]] ||
  { echo "fleet.sh: --l3-engine s3rver|memcached" >&2; exit 2; }

E2E_NAME=fleet
source "$(dirname "$0")/../tests/e2e/lib.sh"
e2e_init
[[ -n "${KEEP:-}" ]] && E2E_KEEP_ON_FAIL=1
OUT="${OUT:-$E2E_ROOT/bench/out/fleet-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
IFS=, read -r -a NS <<<"$HOSTS"

s3rver_start fleet-origin s3rver-origin
ORIGIN_PORT="$S3_PORT"
UPLOAD_ENDPOINT="$S3_ENDPOINT"
MC_PIDS=()
if [[ "$L3_ENGINE" == s3rver ]]; then
  s3rver_start fleet-l3 s3rver-l3
  L3="$S3_ENDPOINT"
fi
# One delay proxy for every host, logging every request with the pid of the daemon that sent it.
"$PY" "$E2E_ROOT/bench/delay_proxy.py" --upstream-port "$ORIGIN_PORT" --delay-ms "$DELAY_MS" \
  --log "$OUT/origin-requests.log" --port-file "$E2E_WORK/proxy.port" \
  >"$E2E_WORK/proxy.out" 2>&1 &
PROXY_PID=$!
trap 'rc=$?; kill "$PROXY_PID" 2>/dev/null; e2e_cleanup $rc' EXIT
for _ in $(seq 100); do [[ -s "$E2E_WORK/proxy.port" ]] && break; sleep 0.1; done
[[ -s "$E2E_WORK/proxy.port" ]] || fail "delay proxy did not start (see $E2E_WORK/proxy.out)"
ORIGIN="http://127.0.0.1:$(cat "$E2E_WORK/proxy.port")"

TOTAL_MIB=$((DIRS * FILES * FILE_MIB))
log "dataset: $DIRS dirs x $FILES files x $FILE_MIB MiB = $TOTAL_MIB MiB; hosts: $HOSTS; start: $START"
mkdir -p "$E2E_WORK/data"
for d in $(seq 0 $((DIRS - 1))); do
  mkdir -p "$E2E_WORK/data/d$(printf %02d "$d")"
  for f in $(seq 0 $((FILES - 1))); do
    head -c "$((FILE_MIB * 1024 * 1024))" /dev/urandom \
      >"$E2E_WORK/data/d$(printf %02d "$d")/f$(printf %03d "$f").bin"
  done
done
step "upload" 900 env -u AWS_CA_BUNDLE "$PY" - "$UPLOAD_ENDPOINT" "$E2E_WORK/data" <<'EOF'
import os, sys, boto3
from concurrent.futures import ThreadPoolExecutor
from boto3.s3.transfer import TransferConfig
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="S3RVER",
                  aws_secret_access_key="S3RVER", region_name="us-east-1")
root = sys.argv[2]
files = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]
cfg = TransferConfig(multipart_threshold=1 << 40)
with ThreadPoolExecutor(8) as ex:
    list(ex.map(lambda r: s3.upload_file(os.path.join(root, r), "fleet-origin", "ds/" + r,
                                         Config=cfg), files))
EOF
(cd "$E2E_WORK/data" && find . -type f | sed 's|^\./||' | sort >"$E2E_WORK/files" &&
  xargs -a "$E2E_WORK/files" sha256sum >"$E2E_WORK/sums")

cat >"$E2E_WORK/l3.toml" <<EOF
[cache]
# Room for the whole dataset in the write-back queue: no write is dropped.
l3_write_queue = $((TOTAL_MIB + 64))
l3_write_threads = 4
EOF


# host_read N K: host K of run N lists the tree, then reads every file in its own order; writes
# "<t0> <t1>" to $RUN/time-K.
host_read() {
  local n="$1" k="$2" mnt="$E2E_WORK/mnt-$1-$2" run="$OUT/n$1" t0 t1
  t0=$(date +%s.%N)
  find "$mnt/ds" -type f >"$run/list-$k"
  sed "s|^$mnt/ds/||" "$run/list-$k" | "$PY" -c '
import random, sys
files = sorted(sys.stdin.read().split())
random.Random(int(sys.argv[1])).shuffle(files)
print("\n".join(files))' "$k" >"$run/order-$k"
  (cd "$mnt/ds" && xargs -a "$run/order-$k" -P "$PAR" -n 4 cat >/dev/null)
  t1=$(date +%s.%N)
  echo "$t0 $t1" >"$run/time-$k"
}

for n in "${NS[@]}"; do
  run="$OUT/n$n"
  mkdir -p "$run"
  echo "n=$n start $(date +%s.%N)" >>"$OUT/origin-requests.log"
  pids=()
  if [[ "$L3_ENGINE" == memcached ]]; then
    # A fresh pool for every N (block keys do not depend on N: an old pool would be warm).
    for p in "${MC_PIDS[@]}"; do kill "$p" 2>/dev/null; wait_pid_exit "$p" 10 || true; done
    MC_PIDS=()
    pool=""
    for i in 0 1 2; do
      port="$(free_port)"
      memcached -l 127.0.0.1 -p "$port" -U 0 -I 16m -m 512 -u nobody \
        >"$run/memcached-$i.log" 2>&1 &
      MC_PIDS+=($!)
      E2E_BG_PIDS+=($!)
      pool="$pool${pool:+,}127.0.0.1:$port"
      for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
      done
    done
    L3_ARGS=(--l3 "memcached://$pool")
  else
    L3_ARGS=(--l3 "s3://fleet-l3/n$n" --l3-endpoint "$L3")
  fi
  for k in $(seq 0 $((n - 1))); do
    tierfs_mount "s3://fleet-origin" "$E2E_WORK/mnt-$n-$k" "$E2E_WORK/cache-$n-$k" \
      "$run/daemon-$k.log" --endpoint "$ORIGIN" \
      --config "$E2E_WORK/l3.toml" "${L3_ARGS[@]}" \
      --l1-size "${FLEET_L1:-64MiB}" --l2-size "${FLEET_L2:-2GiB}" --metadata-ttl 10m \
      ${FLEET_OPTS:-}
    pids+=("$TIERFS_PID")
    echo "$TIERFS_PID" >"$run/pid-$k"
  done
  t0=$(date +%s.%N)
  if [[ "$START" == wave ]]; then
    host_read "$n" 0
    wait_l3_drained "$E2E_WORK/mnt-$n-0" 900
    log "n=$n: host 0 done, L3 written back; hosts 1..$((n - 1)) read at once"
    rp=()
    for k in $(seq 1 $((n - 1))); do host_read "$n" "$k" & rp+=($!); done
  else
    rp=()
    for k in $(seq 0 $((n - 1))); do host_read "$n" "$k" & rp+=($!); done
  fi
  for p in "${rp[@]}"; do wait "$p" || fail "n=$n: a host's read failed"; done
  t1=$(date +%s.%N)
  echo "$t0 $t1" >"$run/time-all"
  # Bytes checked on the first and the last host (every host's L3 blocks are checksum-verified).
  for k in 0 $((n - 1)); do
    (cd "$E2E_WORK/mnt-$n-$k/ds" && sha256sum -c --quiet "$E2E_WORK/sums") ||
      fail "n=$n host $k: checksum mismatch"
  done
  for k in $(seq 0 $((n - 1))); do
    wait_l3_drained "$E2E_WORK/mnt-$n-$k" 900
    stats_xattr "$E2E_WORK/mnt-$n-$k" >"$run/stats-$k"
  done
  echo "n=$n end $(date +%s.%N)" >>"$OUT/origin-requests.log"
  for k in $(seq 0 $((n - 1))); do
    tierfs_umount "$E2E_WORK/mnt-$n-$k" "${pids[$k]}" || fail "unmount n=$n host $k"
  done
  log "n=$n done in $(awk '{ printf "%.1f", $2 - $1 }' "$run/time-all") s"
done

"$PY" - "$OUT" "$HOSTS" "$START" "$TOTAL_MIB" "$DIRS" "$FILES" "$FILE_MIB" "$DELAY_MS" "$L3_ENGINE" <<'EOF'
import json, os, statistics, sys
from urllib.parse import parse_qs, unquote, urlsplit
out, hosts, start, total_mib = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
dirs, files, file_mib, delay = (int(x) for x in sys.argv[5:9])
engine = sys.argv[9]
objects = dirs * files
# Split the proxy log by run: "n=N start|end T" lines around each run's requests.
runs, cur = {}, None
for line in open(os.path.join(out, "origin-requests.log")):
    p = line.split()
    if p[0].startswith("n="):
        cur = int(p[0][2:]) if p[1] == "start" else None
        if cur is not None:
            runs[cur] = []
        continue
    if cur is not None and len(p) >= 4:
        runs[cur].append((p[1], p[2], p[3]))
rows = []
for n in (int(x) for x in hosts.split(",")):
    reqs = runs.get(n, [])
    run = os.path.join(out, "n%d" % n)
    host_of = {open(os.path.join(run, "pid-%d" % k)).read().strip(): str(k) for k in range(n)}
    gets, lists, heads, per_host = {}, {}, 0, {}
    for host, method, target in reqs:
        u = urlsplit(target)
        q = parse_qs(u.query)
        h = host_of.get(host, "?")
        per_host[h] = per_host.get(h, 0) + 1
        if method == "HEAD":
            heads += 1
        elif method == "GET" and "list-type" in q:
            pre = q.get("prefix", [""])[0]
            lists[pre] = lists.get(pre, 0) + 1
        elif method == "GET":
            key = unquote(u.path).split("/", 2)[-1]
            gets[key] = gets.get(key, 0) + 1
    l3h = l3m = l3e = obytes = later_h = later_m = 0
    for k in range(n):
        st = dict(kv.split("=", 1) for kv in open(os.path.join(run, "stats-%d" % k)).read().split()
                  if "=" in kv)
        l3h += int(st.get("l3.hits", 0))
        # A lookup that erred (timeout) or was skipped (circuit open) is a miss too.
        miss = sum(int(st.get("l3." + c, 0)) for c in ("misses", "errors", "skipped"))
        l3m += miss
        l3e += int(st.get("l3.errors", 0)) + int(st.get("l3.skipped", 0))
        obytes += int(st.get("origin.bytes", 0))
        if k > 0:
            later_h += int(st.get("l3.hits", 0))
            later_m += miss
    rate = []
    for k in range(n):
        t0, t1 = (float(x) for x in open(os.path.join(run, "time-%d" % k)).read().split())
        rate.append(total_mib * 1.048576 / (t1 - t0))
    t0, t1 = (float(x) for x in open(os.path.join(run, "time-all")).read().split())
    dir_lists = {p: c for p, c in lists.items() if p.startswith("ds/d")}
    later = rate[1:]
    row = {
        "hosts": n, "start": start,
        "origin_gets": sum(gets.values()), "objects_read": len(gets),
        "gets_per_object": sum(gets.values()) / objects,
        "origin_bytes_per_dataset_byte": obytes / (total_mib << 20),
        "origin_lists": sum(lists.values()), "prefixes_listed": len(lists),
        "lists_per_dir": (sum(dir_lists.values()) / len(dir_lists)) if dir_lists else 0.0,
        "origin_heads": heads,
        "origin_requests_per_host": [per_host.get(str(k), 0) for k in range(n)],
        "origin_requests_unattributed": per_host.get("?", 0),
        "l3_hits": l3h, "l3_misses": l3m, "l3_errors_or_skipped": l3e,
        "l3_hit_rate": l3h / (l3h + l3m) if l3h + l3m else 0.0,
        "l3_hit_rate_later_hosts": later_h / (later_h + later_m) if later_h + later_m else None,
        "host_mbps": rate, "host0_mbps": rate[0],
        "others_median_mbps": statistics.median(later) if later else None,
        "aggregate_mbps": n * total_mib * 1.048576 / (t1 - t0), "wall_s": t1 - t0,
    }
    row["others_vs_host0"] = (row["others_median_mbps"] / rate[0]) if later else None
    rows.append(row)
json.dump({"dataset": {"dirs": dirs, "files_per_dir": files, "file_mib": file_mib,
                       "total_mib": total_mib, "objects": objects},
           "delay_ms": delay, "start": start, "l3_engine": engine, "runs": rows}, open(os.path.join(out, "fleet.json"), "w"),
          indent=1)
f = lambda x, p=2: "–" if x is None else ("%.*f" % (p, x))
lines = [
    "Fleet simulation: %d dirs x %d files x %d MiB = %d MiB, origin delay %d ms each way, start=%s, L3 on %s"
    % (dirs, files, file_mib, total_mib, delay, start, engine), "",
    "| N | origin GETs / object | origin bytes / dataset | LISTs / dir | HEADs | L3 hit rate "
    "| L3 hit rate, hosts 1.. | host 0 MB/s | other hosts MB/s (median) | others / host 0 | aggregate MB/s | wall s |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    lh = r["l3_hit_rate_later_hosts"]
    lines.append("| %d | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
        r["hosts"], f(r["gets_per_object"]), f(r["origin_bytes_per_dataset_byte"]),
        f(r["lists_per_dir"]), r["origin_heads"], f(100 * r["l3_hit_rate"], 1) + " %",
        "–" if lh is None else f(100 * lh, 1) + " %",
        f(r["host0_mbps"], 0), f(r["others_median_mbps"], 0), f(r["others_vs_host0"]),
        f(r["aggregate_mbps"], 0), f(r["wall_s"], 1)))
lines.append("")
for r in rows:
    lines.append("N=%d: origin requests per host %s, unattributed %d; L3 lookups that erred or "
                 "were skipped (circuit open) %d" % (
        r["hosts"], r["origin_requests_per_host"], r["origin_requests_unattributed"],
        r["l3_errors_or_skipped"]))
open(os.path.join(out, "fleet.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
log "results in $OUT (fleet.md, fleet.json)"
