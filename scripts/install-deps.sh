#!/usr/bin/env bash
# Installs everything tierfs needs to build, test and benchmark on Debian 12, as root.
# Idempotent: packages already present are skipped by apt; npm modules by their lock dir or the
# versions recorded beside them.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --build    only what building tierfs and its .deb needs (apt only)
#   scripts/install-deps.sh --bench    also the peers the benchmark compares against
#   scripts/install-deps.sh --rgw      also Ceph RADOS Gateway, the SigV4-verifying test server
#                                      (tests/e2e/test_rgw*.sh; scripts/rgw.sh)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

# What building tierfs and its .deb needs (packaging/docker/Dockerfile's build stage installs only
# these: --build). file and dpkg-dev: CPack's dpkg-shlibdeps step. gRPC++ and protobuf: only the
# CSI driver (tierfs-csi) links them.
build_pkgs=(
  build-essential cmake ninja-build pkg-config git ca-certificates file dpkg-dev
  libfuse3-dev
  libcurl4-openssl-dev libssl-dev
  liblmdb-dev libxxhash-dev libspdlog-dev libfmt-dev
  libtomlplusplus-dev libcli11-dev libpugixml-dev
  libsystemd-dev
  nlohmann-json3-dev
  libzstd-dev
  libmemcached-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  python3
)
# What the tests, the sanitizer builds, the benchmarks' basics and the demo need besides.
test_pkgs=(
  clang clang-format libclang-rt-14-dev
  fuse3
  lmdb-utils
  libgtest-dev libgmock-dev
  python3-yaml
  man-db
  bsdextrautils
  memcached
  python3-grpcio python3-protobuf
  python3-torch python3-numpy python3-boto3
  python3-setuptools
  python3-pip
  fio attr curl procps psmisc
)
build_only=""
extra=()
for arg in "$@"; do
  case "$arg" in
    --build) build_only=1 ;;
    --bench) extra+=(s3fs rclone python3-matplotlib) ;;
    --rgw)
      # A single-node Ceph with radosgw (scripts/rgw.sh); no mgr, hence no recommends.
      extra+=(radosgw)
      extra+=(ceph-mon)
      extra+=(ceph-osd)
      extra+=(ceph-base)
      ;;
    *) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
  esac
done
pkgs=("${build_pkgs[@]}")
if [[ -z "$build_only" ]]; then
  pkgs+=("${test_pkgs[@]}" "${extra[@]}")
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi

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

[[ -z "$build_only" ]] || exit 0

# The test origin: s3rver from the npm registry, installed into tools/s3rver (not in git).
"$here/scripts/s3rver.sh" install

# The Kubernetes and Prometheus-operator schemas and a YAML parser for scripts/validate-yaml.js
# (the manifests under packaging/), installed into tools/k8s-models (not in git). Versions for
# Node.js 14 and later (kubernetes-models 5 needs Node.js 22).
k8s_models=(kubernetes-models@4.5.1 @kubernetes-models/prometheus-operator@4.4.4 yaml@2.9.1)
k8s_dir="$here/tools/k8s-models"
if [[ "$(cat "$k8s_dir/installed" 2>/dev/null)" != "${k8s_models[*]}" ]]; then
  echo "install-deps: npm install ${k8s_models[*]} into $k8s_dir"
  mkdir -p "$k8s_dir"
  rm -f "$k8s_dir/installed"
  (cd "$k8s_dir" && timeout 600 npm install --no-audit --no-fund --save-exact --loglevel=error \
    "${k8s_models[@]}")
  echo "${k8s_models[*]}" >"$k8s_dir/installed"
fi
