#!/usr/bin/env bash
# Builds the Debian package dist/tierfs_<version>_<arch>.deb with CPack (packaging/CMakeLists.txt
# says what goes where). Reuses the Release build in build/ when there is one (CI's: nothing is
# compiled again; only tierfs and the man page are brought up to date); otherwise configures a
# Release build of the daemon alone in build-package/.
#   scripts/package.sh                 prints the path of the .deb on its last line
# Env: TIERFS_BUILD_DIR=DIR  use (or create) this build directory instead.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dist="$root/dist"

cache_value() {  # cache_value BUILD_DIR VAR: the value of VAR in BUILD_DIR/CMakeCache.txt
  sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" 2>/dev/null | head -n 1
}
reusable() {  # a plain Release build of the whole tree (no sanitizer, no fuzzing, daemon built)
  [[ -f "$1/CMakeCache.txt" ]] &&
    [[ "$(cache_value "$1" CMAKE_BUILD_TYPE)" == Release ]] &&
    [[ -z "$(cache_value "$1" TIERFS_SANITIZE)" ]] &&
    [[ "$(cache_value "$1" TIERFS_UNIT_ONLY)" != ON ]] &&
    [[ "$(cache_value "$1" TIERFS_FUZZ)" != ON ]]
}

build="${TIERFS_BUILD_DIR:-}"
if [[ -z "$build" ]]; then
  if reusable "$root/build"; then build="$root/build"; else build="$root/build-package"; fi
fi
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
if [[ -f "$build/CMakeCache.txt" ]]; then
  reusable "$build" || { echo "package: $build is not a plain Release build" >&2; exit 2; }
  echo "package: reusing the Release build in $build"
  # Only so that cpack's install step does not build every target (the unit tests) first.
  cmake -S "$root" -B "$build" -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >/dev/null
else
  echo "package: configuring a Release build in $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIERFS_BUILD_TESTS=OFF \
    -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON "${launcher[@]}" >/dev/null
fi
cmake --build "$build" --target tierfs tierfs_manpage tierfs_changelog -j "$(nproc)"

staging="$build/cpack"
rm -rf "$staging"
(cd "$build" && cpack -G DEB -B "$staging" >/dev/null)
shopt -s nullglob
debs=("$staging"/tierfs_*.deb)
(( ${#debs[@]} == 1 )) || { echo "package: cpack made ${#debs[@]} .deb files in $staging" >&2; exit 1; }
mkdir -p "$dist"
deb="$dist/$(basename "${debs[0]}")"
mv -f "${debs[0]}" "$deb"
rm -rf "$staging"
dpkg-deb --field "$deb" Package Version Architecture Depends
echo "$deb"
