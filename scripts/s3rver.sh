#!/usr/bin/env bash
# The S3 test origin: s3rver 3.7.1 from npm, installed into tools/s3rver/ (gitignored), patched for
# its ListObjects common-prefix bug (see below), bound to 127.0.0.1 only.
#
#   scripts/s3rver.sh install                       npm install + patch (idempotent)
#   scripts/s3rver.sh start DATADIR PORT BUCKET...  start in the background; PID in DATADIR/s3rver.pid,
#                                                   log in DATADIR/s3rver.log; returns once the port answers
#   scripts/s3rver.sh stop DATADIR                  stop the server started on DATADIR (by its PID)
#   scripts/s3rver.sh check                         self-test of the patched listing on a free port
#
# Credentials: access key S3RVER, secret S3RVER, any region.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
S3RVER_VERSION=3.7.1
S3RVER_DIR="$here/tools/s3rver"
S3RVER_PKG="$S3RVER_DIR/node_modules/s3rver"
S3RVER_BIN="$S3RVER_PKG/bin/s3rver.js"
STORE_JS="$S3RVER_PKG/lib/stores/filesystem.js"
PATCH_MARK="tierfs-patch: common-prefix-of-subdirs"
START_TIMEOUT="${S3RVER_START_TIMEOUT:-30}"
STOP_TIMEOUT="${S3RVER_STOP_TIMEOUT:-10}"

die() { echo "s3rver.sh: $*" >&2; exit 1; }

# The listing bug: FilesystemStore.listObjects walks the bucket directory with a filter that prunes
# every directory beneath a common prefix *before* looking inside it. A common prefix is only
# recorded when an object is found, so `small/` holding only `small/cls0/x` and `small/cls1/y`
# never shows up in CommonPrefixes (real S3 lists it). The patch: when pruning such a directory,
# record its common prefix if its subtree holds any object and the prefix sorts after startAfter.
patch_listing() {
  [[ -f "$STORE_JS" ]] || die "$STORE_JS missing (install failed?)"
  if grep -q "$PATCH_MARK" "$STORE_JS"; then
    return 0
  fi
  STORE_JS="$STORE_JS" PATCH_MARK="$PATCH_MARK" /usr/bin/python3 - <<'EOF'
import os, sys
path = os.environ["STORE_JS"]
mark = os.environ["PATCH_MARK"]
src = open(path, encoding="utf-8").read()
old = """          // avoid directories occurring beneath a common prefix
          return false;
"""
new = """          // avoid directories occurring beneath a common prefix
          // %s: before pruning, record the common prefix if the
          // pruned subtree holds any object (s3rver 3.7.1 drops prefixes whose
          // directory holds only sub-directories).
          const relPath = dirPath.slice(prefixPath.length);
          const commonPrefix =
            prefix +
            FilesystemStore.decodeKeyPath(
              relPath.slice(0, relPath.indexOf(delimiterEnc)),
            ) +
            delimiter;
          if (commonPrefix > startAfter && !commonPrefixes.has(commonPrefix)) {
            for (const p of walk(dirPath)) {
              if (p.endsWith(objectSuffix)) {
                commonPrefixes.add(commonPrefix);
                break;
              }
            }
          }
          return false;
""" % mark
if src.count(old) != 1:
    sys.exit("s3rver.sh: patch target not found exactly once in %s (s3rver version changed?)" % path)
open(path, "w", encoding="utf-8").write(src.replace(old, new))
EOF
  grep -q "$PATCH_MARK" "$STORE_JS" || die "patch of $STORE_JS did not apply"
  node -e "require('$STORE_JS')" || die "patched $STORE_JS does not load"
  echo "s3rver.sh: patched listObjects common-prefix bug in $STORE_JS"
}

cmd_install() {
  command -v node >/dev/null || die "node not found (scripts/install-deps.sh installs nodejs)"
  command -v npm >/dev/null || die "npm not found (scripts/install-deps.sh installs npm)"
  local have=""
  if [[ -f "$S3RVER_PKG/package.json" ]]; then
    have="$(node -p "require('$S3RVER_PKG/package.json').version" 2>/dev/null || true)"
  fi
  if [[ "$have" != "$S3RVER_VERSION" ]]; then
    mkdir -p "$S3RVER_DIR"
    echo "s3rver.sh: npm install s3rver@$S3RVER_VERSION into $S3RVER_DIR"
    (cd "$S3RVER_DIR" && timeout 600 npm install --no-audit --no-fund --save-exact --loglevel=error \
      "s3rver@$S3RVER_VERSION") || die "npm install s3rver@$S3RVER_VERSION failed"
  fi
  patch_listing
}

port_answers() {
  # Any HTTP answer (s3rver replies 403 to an anonymous GET /) means it listens.
  curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$1/" 2>/dev/null
}

pid_alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

cmd_start() {
  (( $# >= 3 )) || die "usage: start DATADIR PORT BUCKET..."
  local datadir="$1" port="$2"
  shift 2
  [[ -f "$S3RVER_BIN" ]] || die "s3rver not installed: run scripts/s3rver.sh install"
  grep -q "$PATCH_MARK" "$STORE_JS" || die "s3rver not patched: run scripts/s3rver.sh install"
  mkdir -p "$datadir"
  datadir="$(cd "$datadir" && pwd)"
  if [[ -f "$datadir/s3rver.pid" ]] && pid_alive "$(cat "$datadir/s3rver.pid")"; then
    die "already running on $datadir (pid $(cat "$datadir/s3rver.pid"))"
  fi
  if port_answers "$port"; then
    die "port $port already in use"
  fi
  local args=(-d "$datadir" -a 127.0.0.1 -p "$port" -s)
  local b
  for b in "$@"; do args+=(--configure-bucket "$b"); done
  node "$S3RVER_BIN" "${args[@]}" >"$datadir/s3rver.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$datadir/s3rver.pid"
  local deadline=$((SECONDS + START_TIMEOUT))
  until port_answers "$port"; do
    if ! pid_alive "$pid"; then
      cat "$datadir/s3rver.log" >&2 || true
      rm -f "$datadir/s3rver.pid"
      die "s3rver exited during start-up (log above)"
    fi
    if (( SECONDS >= deadline )); then
      kill "$pid" 2>/dev/null || true
      rm -f "$datadir/s3rver.pid"
      die "s3rver did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s"
    fi
    sleep 0.2
  done
  echo "s3rver.sh: started pid $pid on http://127.0.0.1:$port (buckets: $*)"
}

cmd_stop() {
  (( $# == 1 )) || die "usage: stop DATADIR"
  local pidfile="$1/s3rver.pid"
  [[ -f "$pidfile" ]] || { echo "s3rver.sh: no pid file in $1, nothing to stop"; return 0; }
  local pid
  pid="$(cat "$pidfile")"
  if pid_alive "$pid"; then
    kill "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while pid_alive "$pid"; do
      if (( SECONDS >= deadline )); then
        echo "s3rver.sh: pid $pid still alive after ${STOP_TIMEOUT}s, SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
        break
      fi
      sleep 0.1
    done
  fi
  rm -f "$pidfile"
  echo "s3rver.sh: stopped pid $pid"
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Self-test: the patched listing returns "small/" for keys small/cls0/x and small/cls1/y.
cmd_check() {
  local tmp port rc=0
  tmp="$(mktemp -d /tmp/s3rver-check.XXXXXX)"
  port="$(free_port)"
  cmd_start "$tmp" "$port" check-bucket >/dev/null
  timeout 60 env -u AWS_CA_BUNDLE PORT="$port" /usr/bin/python3 - <<'EOF' || rc=$?
import os, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:%s" % os.environ["PORT"],
                  aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
                  region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}))
for k in ["small/cls0/x", "small/cls1/y", "deep/a/b/c/z", "top.bin", "mixed/own", "mixed/sub/o"]:
    s3.put_object(Bucket="check-bucket", Key=k, Body=k.encode())
def ls(prefix="", start_after=""):
    kw = dict(Bucket="check-bucket", Delimiter="/", Prefix=prefix)
    if start_after:
        kw["StartAfter"] = start_after
    r = s3.list_objects_v2(**kw)
    return ([p["Prefix"] for p in r.get("CommonPrefixes", [])], [o["Key"] for o in r.get("Contents", [])])
cases = [
    (("",), (["deep/", "mixed/", "small/"], ["top.bin"])),
    (("small/",), (["small/cls0/", "small/cls1/"], [])),
    (("deep/",), (["deep/a/"], [])),
    (("deep/a/",), (["deep/a/b/"], [])),
    (("mixed/",), (["mixed/sub/"], ["mixed/own"])),
    (("", "e"), (["mixed/", "small/"], ["top.bin"])),  # startAfter skips "deep/"
    (("", "small0"), ([], ["top.bin"])),
]
bad = 0
for args, want in cases:
    got = ls(*args)
    ok = got == want
    bad += not ok
    print("  list%r -> %r %s" % (args, got, "ok" if ok else "WRONG, want %r" % (want,)))
raise SystemExit(1 if bad else 0)
EOF
  cmd_stop "$tmp" >/dev/null
  rm -rf "$tmp"
  if (( rc == 0 )); then
    echo "s3rver.sh: listing check passed"
  else
    die "listing check FAILED"
  fi
}

case "${1:-}" in
  install) shift; cmd_install "$@" ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  check) shift; cmd_check "$@" ;;
  free-port) free_port ;;
  *) die "usage: $0 install | start DATADIR PORT BUCKET... | stop DATADIR | check | free-port" ;;
esac
