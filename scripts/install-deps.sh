#!/usr/bin/env bash
# Installs everything tierfs needs to build, test and benchmark on Debian 12, as root.
# Idempotent: packages already present are skipped by apt; npm modules by their lock dir.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --bench    also the peers the benchmark compares against
#   scripts/install-deps.sh --rgw      also Ceph RADOS Gateway, the SigV4-verifying test server
#                                      (tests/e2e/test_rgw*.sh; scripts/rgw.sh)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

pkgs=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang clang-format libclang-rt-14-dev
  libfuse3-dev fuse3
  libcurl4-openssl-dev libssl-dev
  liblmdb-dev lmdb-utils libxxhash-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev
  libtomlplusplus-dev libcli11-dev libpugixml-dev
  libsystemd-dev
  python3-yaml
  man-db
  bsdextrautils
  nlohmann-json3-dev
  libzstd-dev
  libmemcached-dev memcached
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  python3-grpcio python3-protobuf
  python3 python3-torch python3-numpy python3-boto3
  python3-setuptools
  python3-pip
  fio attr curl procps psmisc
)
for arg in "$@"; do
  case "$arg" in
    --bench) pkgs+=(s3fs rclone python3-matplotlib) ;;
    --rgw)
      # A single-node Ceph with radosgw (scripts/rgw.sh); no mgr, hence no recommends.
      pkgs+=(radosgw)
      pkgs+=(ceph-mon)
      pkgs+=(ceph-osd)
      pkgs+=(ceph-base)
      ;;
    *) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
  esac
done
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "install-deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The test origin: s3rver from the npm registry, installed into tools/s3rver (not in git).
"$here/scripts/s3rver.sh" install
