#!/usr/bin/env bash
# The shipped packaging files, checked without a cluster or a Docker engine:
#   1. every YAML under packaging/ against the Kubernetes (and Prometheus-operator) schemas
#      (scripts/validate-yaml.js: types, enums, required and unknown fields);
#   2. the validator itself on the manifests of this directory: each must give exactly the
#      problems its "# expect: TEXT" lines name (each TEXT a substring of one reported line), and
#      valid.yaml none: a typo'd field, a wrong type, an unknown kind are caught;
#   3. packaging/docker/Dockerfile's syntax (check_dockerfile.py here; broken.Dockerfile must
#      give exactly its expected problems), and that the image's build-stage package list
#      (scripts/install-deps.sh --build) installs.
# Prints "ok"/"FAIL" per check and a last line "N passed, M failed"; exits non-zero on a failure.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
passed=0
failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

out="$(cd "$root" && timeout 120 node scripts/validate-yaml.js 2>&1)"
rc=$?
printf '%s\n' "$out"
if (( rc == 0 )); then ok "every YAML under packaging/ is valid"; else bad "packaging/ YAML (exit $rc)"; fi

# expect_problems LABEL FIXTURE COMMAND...: runs COMMAND (from this directory) on FIXTURE, whose
# "# expect: TEXT" lines name every problem it must report (none: it must pass); each reported
# problem is a line starting with the fixture's name.
expect_problems() {
  local label="$1" fixture="$2" out rc problems why="" e
  shift 2
  local name
  name="$(basename "$fixture")"
  mapfile -t expects < <(sed -n 's/^# expect: //p' "$fixture")
  out="$(cd "$here" && timeout 60 "$@" "$name" 2>&1)"
  rc=$?
  problems="$(grep -c "^$name:" <<<"$out")"
  if (( ${#expects[@]} == 0 )); then
    (( rc == 0 && problems == 0 )) || why="expected no problem, got exit $rc"
  else
    (( rc == 1 )) || why="expected exit 1, got $rc"
    for e in "${expects[@]}"; do
      grep -qF -- "$e" <<<"$out" || why="${why:+$why; }missing: $e"
    done
    (( problems == ${#expects[@]} )) || why="${why:+$why; }$problems problems reported, ${#expects[@]} expected"
  fi
  if [[ -z "$why" ]]; then
    ok "$label $name: ${#expects[@]} expected problems"
  else
    printf '%s\n' "$out"
    bad "$label $name: $why"
  fi
}

for f in "$here"/*.yaml; do
  expect_problems validate-yaml "$f" node "$root/scripts/validate-yaml.js"
done

# The Dockerfile: the shipped one is clean, the broken one gives exactly its expected problems.
out="$(timeout 60 /usr/bin/python3 "$here/check_dockerfile.py" --context "$root" \
  "$root/packaging/docker/Dockerfile" 2>&1)"
rc=$?
printf '%s\n' "$out"
if (( rc == 0 )); then ok "packaging/docker/Dockerfile syntax"; else bad "packaging/docker/Dockerfile (exit $rc)"; fi
expect_problems check_dockerfile "$here/broken.Dockerfile" /usr/bin/python3 "$here/check_dockerfile.py" \
  --context "$root"

# The image's build stage installs its packages with install-deps.sh --build: that list must be
# installable here too (as root: apt-get for what is missing; nothing once the deps stage ran).
if (( EUID == 0 )) && command -v apt-get >/dev/null 2>&1; then
  if out="$(timeout 900 "$root/scripts/install-deps.sh" --build 2>&1)"; then
    ok "scripts/install-deps.sh --build"
  else
    printf '%s\n' "$out"
    bad "scripts/install-deps.sh --build"
  fi
else
  echo "skip scripts/install-deps.sh --build: needs root and apt-get"
fi

echo "$passed passed, $failed failed"
(( failed == 0 ))
