#!/usr/bin/env bash
# tierfs benchmark: one command. Starts its own S3 origin (s3rver) behind a delay proxy, seeds it,
# mounts each tool on empty caches, runs the selected workloads, and writes results.json,
# results.md and results.png (bench/report.py).
#
#   bench/run.sh [--quick] [--workload NAME|GROUP[,...]] [--tools tierfs,s3fs,rclone,local,nullfs,raw]
#                [--delay-ms 5] [--cap SECONDS] [--out DIR] [--set KEY=VALUE]... [--list]
#
#   --quick      the smaller dataset of the selected workloads (quick: 2 x 256 MiB, 400 x 128 KiB,
#                500 tiny) and shorter runs: a few minutes. Without it the full dataset (2 x 1 GiB,
#                10,000 x 128 KiB, 20,000 tiny): up to ~45 minutes on 2 cores.
#   --workload   which workloads: names or groups of the WORKLOADS table below (default, or "all":
#                the group "full", or "quick" with --quick); --list prints the table
#   --tools      which tools to measure (default: all; a tool whose binary is missing is skipped)
#   --delay-ms   delay per origin request chunk, each way (default 5; 0 = plain loopback)
#   --cap        seconds a single workload may run before it is cut short (default 120, quick 60);
#                a cut-short result is reported as a lower bound / "timeout", never as a failure
#   --set K=V    a parameter of the PARAMS table below (e.g. --set tierfs_l1=256MiB)
#   --stall      = --workload stall;  --only NAME = --workload NAME
#   --au         = --workload au; with it --only names shapes (unet3d,resnet50,cosmoflow)
#
# Environment: TIERFS (the tierfs binary, default build/daemon/tierfs). Every other setting is a
# --set parameter. Needs root (drop_caches, mounts), fio, curl, fusermount3, node/npm (s3rver),
# /usr/bin/python3 with torch, boto3, matplotlib; s3fs and rclone for those peers
# (scripts/install-deps.sh --bench); nullfs is the CMake target bench_nullfs (built on first use).
# Results: bench/out/<UTC timestamp>/ and bench/out/latest. Benchmarks report numbers; nothing
# here fails on timing, and the test suite never runs it. bench/README.md says what each workload
# measures.
set -uo pipefail

BENCH="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$BENCH/.." && pwd)"
source "$ROOT/scripts/lib.sh"  # is_mounted, pid_alive, wait_pid_exit, free_port
PY=/usr/bin/python3

# ---------------------------------------------------------------------------------------------
# The workloads. Each is declared once: its name, the groups that select it, its dataset (std:
# seed.py's "full", or "quick" with --quick; policy: "policy", or "policy-quick"), the tools it runs
# for ("-": it runs once and takes the tools it needs itself), extra tierfs mount flags ("-": none;
# a flag the tierfs binary does not know makes the workload "skipped", with the reason, in the
# report), the function that runs it (per tool: FUNCTION TOOL) and what it writes under raw/.
WORKLOADS='
# name            groups                       dataset  tools                           tierfs flags           function              writes
seq1              quick,full,warm,seq          std      tierfs,s3fs,rclone,local,nullfs -                      wl_seq1               TOOL/seq1-{cold,warm,next}, TOOL/rand{4k,128k}-warm
seq2              full,seq                     std      tierfs,s3fs,rclone,local,nullfs -                      wl_seq2               TOOL/seq2-{cold,warm}
rand              quick,full,rand              std      tierfs,s3fs,rclone,local,nullfs -                      wl_rand               TOOL/rand{4k,128k}-cold
find              quick,full                   std      tierfs,s3fs,rclone,local,nullfs -                      wl_find               TOOL/find-{cold,warm}
loader            quick,full,loader            std      tierfs,s3fs,rclone,local,nullfs -                      wl_loader             TOOL/loader, tierfs/loader-sampler
loader-prefetched quick,full                   std      tierfs,s3fs,rclone,local,nullfs -                      wl_loader_prefetched  TOOL/prefetch, TOOL/loader-prefetched
stall             quick,full,stall             std      tierfs,s3fs,rclone,local        -                      wl_stall              TOOL/stall-*
raw               quick,full,seq,loader        std      raw                             -                      wl_raw                raw/{seq1,seq2,seqpar,rand4k,rand128k,small*}
seqrounds         full,seqrounds               std      -                               -                      run_seq_rounds        TOOL/seq{1,2}-round-N, raw/seqpar*-round-N
loaderrounds      full,loaderrounds            std      -                               -                      run_loader_rounds     tierfs/loader-round-N, raw/loaderpar*-round-N
stallrounds       full,stallrounds             std      -                               -                      run_stall_rounds      TOOL/stall-*-round-N
l2                l2                           std      -                               -                      run_l2                l2/*, TOOL/l2-*, TOOL/loader*-N
prefetch          prefetch                     prefetch -                               -                      run_prefetch_workload prefetch.jsonl
multijob          multijob                     multijob -                               -                      run_multijob          multijob/*
au                au                           au       -                               -                      run_au                au/*
policy-once       policy                       policy   -                               -                      wl_policy_once        policy/once-*/
policy-scan       policy                       policy   -                               -                      wl_policy_scan        policy/scan-*/
policy-proj       policy                       policy   -                               -                      wl_policy_proj        policy/proj-*/
policy-memory     policy                       policy   -                               --memory-limit%512MiB  wl_policy_memory      policy/memory/
'

# The parameters: --set KEY=VALUE (KEY in lower case), each with its default; "quick" is the
# default under --quick where it differs.
PARAMS='
# key               default                     quick     meaning
tierfs_l1           1GiB                        =         tierfs --l1-size
tierfs_l2           16GiB                       =         tierfs --l2-size
tierfs_opts         --metadata-ttl%10m          =         more tierfs mount flags (metadata kept 10 minutes: like the peers, it never expires within a workload)
s3fs_opts           -                           =         more s3fs options
rclone_opts         -                           =         more rclone mount options (e.g. --use-server-modtime)
origin_nice         0                           =         nice value of every thread of the origin (s3rver) and the delay proxy
loader_cap          60                          =         seconds before a DataLoader epoch is cut short
rand_rt             15                          3         seconds of each random-read fio run
raw_rand_n          1500                        300       random ranged GETs of raw
raw_small_par_n     4000                        2000      small objects of raw with 64 and 128 GETs in flight
stall_compute_ms    20                          =         simulated compute per batch in the stall view
stall_ahead         1024                        =         PrefetchSampler look-ahead (samples)
stall_sessions      plain%sampler%prefetched    =         the stall view sessions of tierfs (a subset for A/B runs)
seq_rounds          3                           =         rounds of seqrounds
loader_rounds       3                           =         rounds of loaderrounds
stall_rounds        5                           =         rounds of stallrounds
l2_repeat           5                           =         pairs of the l2 workload
l2_l1               64MiB                       =         tierfs --l1-size in the l2 workload
l2_perf             -                           =         1: perf profile of the daemon during the first warm read of l2
mj_l1               128MiB                      =         tierfs --l1-size of multijob
mj_l2               256MiB                      =         tierfs --l2-size of multijob
mj_modes            always%default              =         multijob admission modes (always, default, noproj, reuse)
mj_repeat           1                           =         runs of each multijob mode
mj_hot_passes       4                           =         passes of multijob hot job
au_ranks            1,2,4                       1,2       emulated accelerators of au
au_workers          4                           =         DataLoader workers per rank in au
au_l1               128MiB                      =         tierfs --l1-size of au
au_cap              40                          =         seconds before an au epoch is cut short
'

param_rows() { # TABLE -> rows without comments and blank lines
  grep -v '^[[:space:]]*\(#\|$\)' <<<"$1"
}

usage() {
  sed -n "2,$(grep -n -m1 '^set -uo pipefail' "$0" | cut -d: -f1)p" "$0" | sed '$d'
}

QUICK=""
SELECT=""
TOOLS="tierfs,s3fs,rclone,local,nullfs,raw"
DELAY_MS=5
CAP=""
OUT=""
ONLY=""
AU=""
SETS=()
while (($#)); do
  case "$1" in
    --quick) QUICK=1 ;;
    --workload) SELECT="${SELECT:+$SELECT,}$2"; shift ;;
    --workload=*) SELECT="${SELECT:+$SELECT,}${1#*=}" ;;
    --tools) TOOLS="$2"; shift ;;
    --tools=*) TOOLS="${1#*=}" ;;
    --delay-ms) DELAY_MS="$2"; shift ;;
    --delay-ms=*) DELAY_MS="${1#*=}" ;;
    --cap) CAP="$2"; shift ;;
    --cap=*) CAP="${1#*=}" ;;
    --out) OUT="$2"; shift ;;
    --out=*) OUT="${1#*=}" ;;
    --set) SETS+=("$2"); shift ;;
    --set=*) SETS+=("${1#*=}") ;;
    --stall) SELECT="${SELECT:+$SELECT,}stall" ;;
    --au) AU=1 ;;
    --only) ONLY="$2"; shift ;;
    --only=*) ONLY="${1#*=}" ;;
    --list) param_rows "$WORKLOADS" | awk '{printf "%-18s %-28s %-9s %s\n", $1, $2, $3, $4}'; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
  shift
done
AU_SHAPES="unet3d,resnet50,cosmoflow"
if [[ -n $AU ]]; then  # --au: its own dataset; --only names shapes
  SELECT="${SELECT:+$SELECT,}au"; AU_SHAPES="${ONLY:-$AU_SHAPES}"
elif [[ -n $ONLY ]]; then
  SELECT="${SELECT:+$SELECT,}$ONLY"
fi
DEFAULT_GROUP="$([[ -n $QUICK ]] && echo quick || echo full)"
SELECT="${SELECT:-all}"
SELECT=",$SELECT,"; SELECT="${SELECT//,all,/,$DEFAULT_GROUP,}"; SELECT="${SELECT#,}"; SELECT="${SELECT%,}"

# Parameters: the defaults, then --set. A parameter set in the environment under its old name is
# refused with the --set that replaces it, rather than silently ignored.
while read -r key def quick _; do
  var="${key^^}"
  if [[ -n ${!var+x} ]]; then
    echo "run.sh: $var in the environment is no longer read; use --set $key=VALUE" >&2; exit 2
  fi
  [[ -n $QUICK && $quick != = ]] && def="$quick"
  [[ $def == - ]] && def=""
  printf -v "$var" '%s' "${def//%/ }"
done < <(param_rows "$PARAMS")
for kv in "${SETS[@]}"; do
  key="${kv%%=*}"
  if [[ $kv != *=* ]] || ! param_rows "$PARAMS" | awk '{print $1}' | grep -qx -- "$key"; then
    echo "run.sh: --set $kv: unknown parameter (known: $(param_rows "$PARAMS" | awk '{print $1}' | paste -sd' '))" >&2
    exit 2
  fi
  printf -v "${key^^}" '%s' "${kv#*=}"
done
CAP="${CAP:-$([[ -n $QUICK ]] && echo 60 || echo 120)}"
TIERFS="${TIERFS:-$ROOT/build/daemon/tierfs}"
NULLFS="$ROOT/build/bench/nullfs"
BUCKET=bench

# The selection: every workload whose name or one of whose groups is named, in table order.
SELECTED=""
for s in ${SELECT//,/ }; do
  param_rows "$WORKLOADS" | awk -v s="$s" '$1 == s || ("," $2 ",") ~ ("," s ",") {f = 1} END {exit !f}' ||
    { echo "run.sh: --workload: no workload or group $s (bench/run.sh --list)" >&2; exit 2; }
done
while read -r name groups _; do
  for s in ${SELECT//,/ }; do
    if [[ $name == "$s" || ",$groups," == *",$s,"* ]]; then SELECTED+="$name "; break; fi
  done
done < <(param_rows "$WORKLOADS")
wl_field() { # NAME COLUMN (1-based) -> that column of the workload's row
  param_rows "$WORKLOADS" | awk -v n="$1" -v c="$2" '$1 == n {print $c}'
}
# One dataset a run: the selected workloads must share it.
LAYOUT=""
for w in $SELECTED; do
  ds="$(wl_field "$w" 3)"
  case "$ds" in
    std) ds="$([[ -n $QUICK ]] && echo quick || echo full)" ;;
    policy) ds="$([[ -n $QUICK ]] && echo policy-quick || echo policy)" ;;
  esac
  if [[ -n $LAYOUT && $ds != "$LAYOUT" ]]; then
    echo "run.sh: the selected workloads need two datasets ($LAYOUT, $ds); run them separately" >&2; exit 2
  fi
  LAYOUT="$ds"
done

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="${OUT:-$BENCH/out/$STAMP}"
WORK="$BENCH/out/work"
LAYOUT_ID="$(cd "$BENCH" && $PY seed.py id "$LAYOUT")"   # data dirs are cached per layout
ORIGIN_DATA="$BENCH/out/origin-$LAYOUT_ID"
LOCAL_DATA="$BENCH/out/local-$LAYOUT_ID"
mkdir -p "$OUT/raw" "$WORK"
LOG="$OUT/run.log"

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$LOG" >&2; }
die() { log "FATAL: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root (drop_caches and mounts need it)"
for c in fio curl fusermount3 getfattr setfattr timeout; do
  command -v "$c" >/dev/null || die "$c not found (scripts/install-deps.sh --bench)"
done
$PY -c 'import torch, boto3, matplotlib' 2>/dev/null || die "$PY lacks torch/boto3/matplotlib"

source "$BENCH/lib/setup.sh"
source "$BENCH/lib/measure.sh"
source "$BENCH/lib/rounds.sh"
source "$BENCH/lib/workloads.sh"
source "$BENCH/lib/policy.sh"
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# The tierfs flags of a workload the binary does not accept: "" when it takes them all.
tierfs_refuses() { # FLAGS
  local f missing=()
  [[ -x $TIERFS ]] || { echo "no tierfs binary $TIERFS"; return; }
  local help; help="$("$TIERFS" mount --help 2>&1)"
  for f in $1; do
    [[ $f == --* ]] || continue
    grep -qE -- "(^|[ ,])${f%%=*}([ ,=]|$)" <<<"$help" || missing+=("$f")
  done
  ((${#missing[@]})) && echo "tierfs ($TIERFS) has no mount flag ${missing[*]}"
}

# Runs one workload (for TOOL, or once): its tierfs flags in WL_OPTS, or a "skipped" record with
# the reason in raw/skipped/NAME.json when the binary refuses them.
run_workload() { # NAME [TOOL]
  local w="$1" opts fn why
  opts="$(wl_field "$w" 5)"; fn="$(wl_field "$w" 6)"
  [[ $opts == - ]] && opts=""
  opts="${opts//%/ }"
  if [[ -n $opts ]]; then
    why="$(tierfs_refuses "$opts")"
    if [[ -n $why ]]; then
      mkdir -p "$OUT/raw/skipped"
      status_json "$OUT/raw/skipped/$w.json" skipped "$why"
      log "$w: skipped: $why"
      return 0
    fi
  fi
  WL_OPTS="$opts" "$fn" "${@:2}"
}

log "layout=$LAYOUT workloads=$SELECTED tools=$TOOLS delay=${DELAY_MS}ms cap=${CAP}s out=$OUT"
start_origin
write_meta

T_START=$SECONDS
IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
# Per-tool workloads: for each tool (in --tools order) the selected workloads that run for it.
for t in "${TOOL_LIST[@]}"; do
  case "$t" in tierfs|s3fs|rclone|local|nullfs|raw) ;; *) log "unknown tool $t, skipped"; continue ;; esac
  mine=()
  for w in $SELECTED; do
    [[ ",$(wl_field "$w" 4)," == *",$t,"* ]] && mine+=("$w")
  done
  ((${#mine[@]})) || continue
  mkdir -p "$OUT/raw/$t"
  if ! tool_available "$t"; then
    log "$t: not available, skipped"
    status_json "$OUT/raw/$t/skipped.json" skipped "not available on this machine"
    continue
  fi
  log "==== $t: ${mine[*]} ===="
  for w in "${mine[@]}"; do run_workload "$w" "$t"; done
done
# Workloads that run once.
for w in $SELECTED; do
  [[ $(wl_field "$w" 4) == - ]] || continue
  log "==== $w ===="
  run_workload "$w"
done
log "workloads done in $((SECONDS - T_START)) s"

$PY "$BENCH/report.py" "$OUT" 2>&1 | tee -a "$LOG" >&2
if [[ $OUT == "$BENCH/out/"* ]]; then
  ln -sfn "$(basename "$OUT")" "$BENCH/out/latest"
fi
log "results: $OUT/results.md, $OUT/results.json"
