#!/usr/bin/env bash
# The shipped packaging files, checked without a cluster or a Docker engine:
#   1. every YAML under packaging/ against the Kubernetes (and Prometheus-operator) schemas
#      (scripts/validate-yaml.js: types, enums, required and unknown fields);
#   2. the validator itself on the manifests of this directory: each must give exactly the
#      problems its "# expect: TEXT" lines name (each TEXT a substring of one reported line), and
#      valid.yaml none: a typo'd field, a wrong type, an unknown kind are caught;
#   3. packaging/docker/Dockerfile's syntax (scripts/check-dockerfile.py).
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

for f in "$here"/*.yaml; do
  name="$(basename "$f")"
  mapfile -t expects < <(sed -n 's/^# expect: //p' "$f")
  out="$(cd "$here" && timeout 60 node "$root/scripts/validate-yaml.js" "$name" 2>&1)"
  rc=$?
  problems="$(grep -c "^$name:" <<<"$out")"
  why=""
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
    ok "validate-yaml $name: ${#expects[@]} expected problems"
  else
    printf '%s\n' "$out"
    bad "validate-yaml $name: $why"
  fi
done

echo "$passed passed, $failed failed"
(( failed == 0 ))
