#!/usr/bin/env bash
# End-to-end: the credential chain under a real mount of s3rver, with temporary credentials that
# expire 16 s after each fetch, so the daemon refreshes them (at E - (E-F)/2, ~8 s) while it serves.
#  1. credential_process (a profile in AWS_CONFIG_FILE): the script is run again for the refresh.
#  2. EC2 IMDSv2 (tests/e2e/fake_imds.py on 127.0.0.1): the token PUT, then the role and its
#     credentials; the fake's request log shows the dance and the refresh, and no request without
#     a token.
# Reads before and after each refresh return the dataset's bytes. s3rver checks only the access key
# (not signatures), so the sources' use is asserted on their own logs and the daemon's.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
e2e_dataset
BUCKET=tierfs-creds
s3rver_start "$BUCKET"
sub="$(cd "$DATASET" && find . -mindepth 1 -maxdepth 1 -type d | sort | head -n 1)"
sub="${sub#./}"
[[ -n "$sub" ]] || fail "no directory in the dataset"
s3_upload "$BUCKET" --only "$sub"
mapfile -t files < <(cd "$DATASET" && find "$sub" -type f | sort)
(( ${#files[@]} >= 2 )) || fail "need at least 2 files under $sub"
half=$(( ${#files[@]} / 2 ))

# tierfs_mount exports s3rver's keys as AWS_ACCESS_KEY_ID/...: they would win over every other
# source, so the daemon runs through a wrapper that drops them.
real="$TIERFS"
TIERFS="$E2E_WORK/tierfs-noenv"
printf '#!/bin/sh\nunset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN\nexec "%s" "$@"\n' \
  "$real" >"$TIERFS"
chmod +x "$TIERFS"
export AWS_SHARED_CREDENTIALS_FILE="$E2E_WORK/no-credentials-file"
export AWS_CONFIG_FILE="$E2E_WORK/aws-config"
: >"$AWS_CONFIG_FILE"

# compare MNT FROM TO: files[FROM..TO) read through the mount equal the dataset's.
compare() {
  local mnt="$1" i
  for ((i = $2; i < $3; i++)); do
    timeout -k 2 60 cmp "$DATASET/${files[$i]}" "$mnt/${files[$i]}" || fail "${files[$i]} differs"
  done
  log "ok files $2..$(($3 - 1)) equal the dataset"
}

# wait_lines FILE PATTERN N SECONDS: until FILE has N lines matching PATTERN.
wait_lines() {
  local deadline=$((SECONDS + $4)) n=0
  while :; do
    n="$(grep -c -- "$2" "$1" 2>/dev/null || true)"
    (( n >= $3 )) && return 0
    (( SECONDS < deadline )) || fail "$1: $n lines matching '$2' after $4 s, want $3"
    sleep 0.2
  done
}

# ---- 1. credential_process ----
proc_log="$E2E_WORK/process.log"
cat >"$E2E_WORK/creds.sh" <<EOF
#!/bin/sh
echo run >>"$proc_log"
exp=\$(date -u -d '+16 seconds' +%Y-%m-%dT%H:%M:%SZ)
printf '{"Version": 1, "AccessKeyId": "S3RVER", "SecretAccessKey": "S3RVER", "SessionToken": "proc-session", "Expiration": "%s"}\n' "\$exp"
EOF
chmod +x "$E2E_WORK/creds.sh"
printf '[profile e2e-proc]\ncredential_process = %s\n' "$E2E_WORK/creds.sh" >"$AWS_CONFIG_FILE"
export AWS_EC2_METADATA_DISABLED=true
mnt="$E2E_WORK/mnt-proc" logf="$E2E_WORK/daemon-proc.log"
tierfs_mount "s3://$BUCKET" "$mnt" "$E2E_WORK/cache-proc" "$logf" --endpoint "$S3_ENDPOINT" \
  --profile e2e-proc
grep -q "credentials from profile e2e-proc (credential_process '$E2E_WORK/creds.sh')" "$logf" ||
  { print_log_tail "$logf"; fail "the daemon does not log the credential_process source"; }
grep -q "proc-session\|S3RVER" "$logf" && fail "a credential is in the daemon log"
compare "$mnt" 0 "$half"
wait_lines "$proc_log" run 2 30
wait_lines "$logf" "refreshed, valid until" 1 10
log "ok credential_process ran again for the refresh"
compare "$mnt" "$half" "${#files[@]}"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unmount failed"

# ---- 2. EC2 IMDSv2 ----
unset AWS_EC2_METADATA_DISABLED
: >"$AWS_CONFIG_FILE"
imds_log="$E2E_WORK/imds.log"
: >"$imds_log"
"$PY" "$E2E_DIR/fake_imds.py" "$E2E_WORK/imds.port" "$imds_log" --key S3RVER --secret S3RVER \
  --life 16 &
E2E_BG_PIDS+=("$!")
for _ in $(seq 100); do [[ -s "$E2E_WORK/imds.port" ]] && break; sleep 0.1; done
[[ -s "$E2E_WORK/imds.port" ]] || fail "fake IMDS did not start"
export AWS_EC2_METADATA_SERVICE_ENDPOINT="http://127.0.0.1:$(cat "$E2E_WORK/imds.port")"
mnt="$E2E_WORK/mnt-imds" logf="$E2E_WORK/daemon-imds.log"
tierfs_mount "s3://$BUCKET" "$mnt" "$E2E_WORK/cache-imds" "$logf" --endpoint "$S3_ENDPOINT"
grep -q "credentials from EC2 instance metadata (IMDSv2 .*, role e2e-role)" "$logf" ||
  { print_log_tail "$logf"; fail "the daemon does not log the IMDS source"; }
head -n 3 "$imds_log" | sed 's/^/    /'
[[ "$(sed -n 1p "$imds_log")" == "PUT /latest/api/token 200" ]] || fail "IMDS: no token PUT first"
grep -q "^GET /latest/meta-data/iam/security-credentials/ 200" "$imds_log" || fail "IMDS: no role listing"
grep -q "^GET /latest/meta-data/iam/security-credentials/e2e-role 200" "$imds_log" ||
  fail "IMDS: no credentials fetch"
compare "$mnt" 0 "$half"
wait_lines "$imds_log" "security-credentials/e2e-role 200" 2 30
log "ok the daemon fetched the role's credentials again before they expired"
grep -q " 401$" "$imds_log" && fail "IMDS: a request without a valid token"
compare "$mnt" "$half" "${#files[@]}"
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unmount failed"

# ---- 3. Nothing configured: a clear error listing what was tried ----
export AWS_EC2_METADATA_DISABLED=true
out="$E2E_WORK/none.out"
mkdir -p "$E2E_WORK/mnt-none"
if timeout -k 2 30 env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$real" mount "s3://$BUCKET" \
  "$E2E_WORK/mnt-none" --endpoint "$S3_ENDPOINT" --cache-dir "$E2E_WORK/cache-none" -f \
  >"$out" 2>&1; then
  fail "mount without credentials succeeded"
fi
grep -q "no credentials for the S3 origin: no AWS credentials found; tried: " "$out" ||
  { cat "$out"; fail "no clear error without credentials"; }
log "ok without credentials: $(grep -o 'no credentials for the S3 origin.*' "$out" | head -c 300)"
