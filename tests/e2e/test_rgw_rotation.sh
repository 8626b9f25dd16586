#!/usr/bin/env bash
# Credential rotation under a live mount, against Ceph RGW (which verifies SigV4, so a deleted key
# is really refused): the daemon gets its keys from a `credential_process` profile of
# AWS_CONFIG_FILE whose script prints the key pair of a file with an Expiration 20 s ahead. With
# no L1/L2 every read goes to the origin (and every read drops the page cache first). While 4
# threads keep reading for 30 s, a second key is added to the RGW user, the file switched to it,
# and the old key deleted. Every read must stay byte-exact and none may fail (no EIO): the daemon
# refreshes the credentials before they expire (at E - min(5 min, (E-F)/2), here 10 s after each
# fetch) and a 403 InvalidAccessKeyId forces one refresh and one retry.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init
BUCKET=tierfs-rotation
AK1=TIERFSROTATEKEY00001
SK1=rotation-secret-one-0123456789abcdefgh
AK2=TIERFSROTATEKEY00002
SK2=rotation-secret-two-0123456789abcdefgh
rgw_start "$AK1" "$SK1"

fault_dataset
step "upload the fault dataset to RGW" 60 env AWS_ACCESS_KEY_ID="$AK1" AWS_SECRET_ACCESS_KEY="$SK1" \
  "$PY" "$E2E_DIR/upload.py" "$FDATA" "$FMANIFEST" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" \
  --create-bucket

# The credential source: the current pair in a file, handed out for 20 s at a time; each call is
# logged (the key id only) so the test can tell that the daemon fetched the new key.
KEYFILE="$E2E_WORK/current-key"
CALLS="$E2E_WORK/credential-process.calls"
printf '%s %s\n' "$AK1" "$SK1" >"$KEYFILE"
cat >"$E2E_WORK/credential-process.sh" <<EOF
#!/bin/sh
read -r id secret <"$KEYFILE"
echo "\$(date -u +%H:%M:%S) \$id" >>"$CALLS"
printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "%s", "Expiration": "%s"}\n' \\
  "\$id" "\$secret" "\$(date -u -d '+20 seconds' +%Y-%m-%dT%H:%M:%SZ)"
EOF
chmod +x "$E2E_WORK/credential-process.sh"
cat >"$E2E_WORK/aws-config" <<EOF
[profile rotation]
credential_process = $E2E_WORK/credential-process.sh
EOF
export AWS_CONFIG_FILE="$E2E_WORK/aws-config" AWS_PROFILE=rotation
export AWS_SHARED_CREDENTIALS_FILE="$E2E_WORK/no-such-credentials-file"
export E2E_NO_ENV_CREDS=1

MNT="$E2E_WORK/mnt"
tierfs_mount "s3://$BUCKET" "$MNT" "$E2E_WORK/cache" "$E2E_WORK/daemon.log" \
  --endpoint "$S3_ENDPOINT" --l1-size 0 --l2-size 0
PID=$TIERFS_PID
grep -q "$AK1" "$CALLS" || fail "the daemon did not run the credential_process"
fault_read "first read of every file (key 1)" 60 "$MNT" --require ok

origin_requests() { stats_xattr "$MNT" | tr ' ' '\n' | awk -F= '$1 == "origin.requests" { print $2 }'; }

# 30 s of reads across the rotation.
READER_OUT="$E2E_WORK/reader.txt"
"$PY" "$E2E_DIR/fault_check.py" soak "$MNT" "$FMANIFEST" --seconds 30 --threads 4 --no-errors \
  --max-seconds 20 >"$READER_OUT" 2>&1 &
READER=$!
E2E_BG_PIDS+=("$READER")
sleep 5
step "add a second key to the RGW user" 30 "$E2E_ROOT/scripts/rgw.sh" admin "$RGW_DIR" key create --uid tierfs --key-type s3 \
  --access-key "$AK2" --secret-key "$SK2"
printf '%s %s\n' "$AK2" "$SK2" >"$KEYFILE.new"
mv "$KEYFILE.new" "$KEYFILE"
log "credential_process now hands out $AK2"
sleep 2
step "delete the old key" 30 "$E2E_ROOT/scripts/rgw.sh" admin "$RGW_DIR" key rm --uid tierfs --key-type s3 --access-key "$AK1"
before="$(origin_requests)"
# The old key is really refused now (else this test could not fail).
if env -u AWS_PROFILE AWS_ACCESS_KEY_ID="$AK1" AWS_SECRET_ACCESS_KEY="$SK1" AWS_CONFIG_FILE=/dev/null \
  "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" rotation-probe=1 \
  >"$E2E_WORK/old-key-probe.txt" 2>&1; then
  fail "RGW still accepts the deleted key $AK1"
fi
why="$(grep -oE "InvalidAccessKeyId|AccessDenied|SignatureDoesNotMatch" "$E2E_WORK/old-key-probe.txt" | head -n 1)" ||
  { cat "$E2E_WORK/old-key-probe.txt"; fail "the deleted key failed, but not with a 403"; }
log "ok RGW refuses the deleted key $AK1 ($why)"

rc=0
wait "$READER" || rc=$?
sed 's/^/    /' "$READER_OUT"
if (( rc != 0 )); then
  print_log_tail "$E2E_WORK/daemon.log" 40
  fail "reads failed across the rotation (reader exit $rc)"
fi
after="$(origin_requests)"
log "origin requests: $before when the old key was deleted, $after at the end"
(( after > before + 20 )) || fail "too few reads reached the origin after the old key was deleted"
grep -q "$AK2" "$CALLS" || fail "the daemon never fetched the new key"
log "credential_process calls: $(wc -l <"$CALLS") ($(grep -c "$AK2" "$CALLS") with the new key);" \
  "requests retried after a forced refresh: $(grep -c "retrying once with refreshed credentials" "$E2E_WORK/daemon.log" || true)"
fault_read "every file after the rotation (key 2 only)" 60 "$MNT" --require ok
grep -qF -- "$SK1" "$E2E_WORK/daemon.log" && fail "a secret appears in the daemon log"
grep -qF -- "$SK2" "$E2E_WORK/daemon.log" && fail "a secret appears in the daemon log"

tierfs_umount "$MNT" "$PID" || { print_log_tail "$E2E_WORK/daemon.log"; fail "unclean unmount"; }
daemon_exit_code "$PID"; rc=$DAEMON_RC
[[ "$rc" == 0 ]] || { print_log_tail "$E2E_WORK/daemon.log"; fail "daemon exited with $rc"; }
