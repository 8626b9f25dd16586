#!/usr/bin/env bash
# The S3 test origin: s3rver 3.7.1 from npm, installed into tools/s3rver/ (gitignored), patched for
# two listing bugs (see below), bound to 127.0.0.1 only.
#
#   scripts/s3rver.sh install                       npm install + patch (idempotent)
#   scripts/s3rver.sh start DATADIR PORT BUCKET...  start in the background; PID in DATADIR/s3rver.pid,
#                                                   log in DATADIR/s3rver.log; returns once the port answers
#   scripts/s3rver.sh stop DATADIR                  stop the server started on DATADIR (by its PID)
#   scripts/s3rver.sh check                         self-test of the patched listing on a free port
#   scripts/s3rver.sh free-port                     print a free TCP port on 127.0.0.1
#
# Credentials: access key S3RVER, secret S3RVER, any region.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
S3RVER_VERSION=3.7.1
S3RVER_DIR="$here/tools/s3rver"
S3RVER_PKG="$S3RVER_DIR/node_modules/s3rver"
S3RVER_BIN="$S3RVER_PKG/bin/s3rver.js"
STORE_JS="$S3RVER_PKG/lib/stores/filesystem.js"
START_TIMEOUT="${S3RVER_START_TIMEOUT:-30}"
STOP_TIMEOUT="${S3RVER_STOP_TIMEOUT:-10}"

die() { echo "s3rver.sh: $*" >&2; exit 1; }

# Two bugs of s3rver 3.7.1 are patched in the installed copy (each patch carries a marker comment;
# applying is idempotent, and a patch whose target text is not found fails loudly):
#
# 1. Listing: FilesystemStore.listObjects walks the bucket directory with a filter that prunes every
#    directory beneath a common prefix *before* looking inside it. A common prefix is only recorded
#    when an object is found, so `small/` holding only `small/cls0/x` and `small/cls1/y` never shows
#    up in CommonPrefixes (real S3 lists it). Fix: when pruning such a directory, record its common
#    prefix if its subtree holds any object and the prefix sorts after startAfter.
# 2. Continuation tokens: ListObjectsV2 encrypts NextContinuationToken with DES, which OpenSSL 3
#    (Node >= 17) no longer offers, so every truncated listing (more than 1000 keys) fails with
#    InternalError ERR_OSSL_EVP_UNSUPPORTED. Fix: the token stays opaque (8 random bytes + the
#    "region/bucket/key" string, base64) without the cipher.
LISTING_MARK="tierfs-patch: common-prefix-of-subdirs"
TOKEN_MARK="tierfs-patch: continuation-token-without-des"
BUCKET_JS="$S3RVER_PKG/lib/controllers/bucket.js"

patch_s3rver() {
  [[ -f "$STORE_JS" && -f "$BUCKET_JS" ]] || die "s3rver sources missing under $S3RVER_PKG (install failed?)"
  if grep -q "$LISTING_MARK" "$STORE_JS" && grep -q "$TOKEN_MARK" "$BUCKET_JS"; then
    return 0
  fi
  STORE_JS="$STORE_JS" BUCKET_JS="$BUCKET_JS" LISTING_MARK="$LISTING_MARK" TOKEN_MARK="$TOKEN_MARK" \
    /usr/bin/python3 - <<'EOF'
import os, sys

def patch(path, mark, old, new):
    src = open(path, encoding="utf-8").read()
    if mark in src:
        return
    if src.count(old) != 1:
        sys.exit("s3rver.sh: patch target for '%s' not found exactly once in %s "
                 "(s3rver version changed?)" % (mark, path))
    open(path, "w", encoding="utf-8").write(src.replace(old, new))
    print("s3rver.sh: applied %s to %s" % (mark, path))

patch(os.environ["STORE_JS"], os.environ["LISTING_MARK"],
"""          // avoid directories occurring beneath a common prefix
          return false;
""",
"""          // avoid directories occurring beneath a common prefix
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
""" % os.environ["LISTING_MARK"])

patch(os.environ["BUCKET_JS"], os.environ["TOKEN_MARK"],
"""  const cipher = crypto.createCipheriv('des', key, iv);
  return Buffer.concat([
    iv,
    cipher.update(`${region}/${bucket}/${keyName}`, 'utf8'),
    cipher.final(),
  ]).toString('base64');
""",
"""  // %s: DES is gone from OpenSSL 3; keep the token opaque
  // but unencrypted.
  void key;
  return Buffer.concat([
    iv,
    Buffer.from(`${region}/${bucket}/${keyName}`, 'utf8'),
  ]).toString('base64');
""" % os.environ["TOKEN_MARK"])

patch(os.environ["BUCKET_JS"], os.environ["TOKEN_MARK"] + " (decode)",
"""  const decipher = crypto.createDecipheriv('des', key, iv);
  const ciphertext = buf.slice(8);
  return Buffer.concat([
    decipher.update(ciphertext),
    decipher.final(),
  ]).toString('utf8');
""",
"""  // %s (decode)
  void key;
  void iv;
  return buf.slice(8).toString('utf8');
""" % os.environ["TOKEN_MARK"])
EOF
  grep -q "$LISTING_MARK" "$STORE_JS" || die "listing patch of $STORE_JS did not apply"
  grep -q "$TOKEN_MARK (decode)" "$BUCKET_JS" || die "token patch of $BUCKET_JS did not apply"
  grep -q "createCipheriv('des'" "$BUCKET_JS" && die "token patch of $BUCKET_JS incomplete"
  node -e "require('$STORE_JS'); require('$BUCKET_JS')" || die "patched s3rver sources do not load"
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
  patch_s3rver
}

port_answers() {
  # Any HTTP answer (s3rver replies 403 to an anonymous GET /) means it listens.
  curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$1/" 2>/dev/null
}

source "$here/scripts/lib.sh"  # pid_alive PID, free_port

cmd_start() {
  (( $# >= 3 )) || die "usage: start DATADIR PORT BUCKET..."
  local datadir="$1" port="$2"
  shift 2
  [[ -f "$S3RVER_BIN" ]] || die "s3rver not installed: run scripts/s3rver.sh install"
  grep -q "$LISTING_MARK" "$STORE_JS" && grep -q "$TOKEN_MARK" "$BUCKET_JS" ||
    die "s3rver not patched: run scripts/s3rver.sh install"
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

# Self-test: the patched listing returns "small/" for keys small/cls0/x and small/cls1/y, and a
# truncated listing pages through continuation tokens.
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
# Pagination: a truncated listing needs a working continuation token (pages of 100 here).
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(16) as pool:
    list(pool.map(lambda i: s3.put_object(Bucket="check-bucket", Key="many/k%04d" % i, Body=b"x"),
                  range(250)))
pages = list(s3.get_paginator("list_objects_v2").paginate(
    Bucket="check-bucket", Prefix="many/", PaginationConfig={"PageSize": 100}))
n = sum(len(p.get("Contents", [])) for p in pages)
ok = n == 250 and len(pages) == 3
bad += not ok
print("  paginated list('many/') -> %d keys in %d pages %s" % (n, len(pages), "ok" if ok else "WRONG"))
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
