#!/usr/bin/env bash
# End-to-end: the Debian package. Builds dist/tierfs_<version>_<arch>.deb with
# scripts/package.sh (reusing the Release build in build/), checks its contents, the license
# (DEP-5 copyright) and control fields, the man page
# against `tierfs mount --help` and the Kubernetes YAML, installs it with dpkg -i, mounts s3rver
# through `mount -t tierfs` and through an fstab line (mount -T), runs the unit's ExecStart under
# a fake systemd notification socket (READY=1 only once the mount answers, STOPPING=1 at
# unmount), verifies the unit with systemd-analyze, starts it with systemctl where systemd is
# PID 1, then dpkg -r / dpkg -P and checks that the files are gone. The EXIT trap unmounts, stops
# what it started and purges the package if the test stops midway: the dpkg state is as before.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[[ $EUID -eq 0 ]] || { log "SKIP: needs root (dpkg -i)"; exit 77; }
for tool in dpkg dpkg-deb dpkg-query mount umount; do
  command -v "$tool" >/dev/null 2>&1 || { log "SKIP: $tool is missing"; exit 77; }
done
# Never touch an installation the test did not make.
if dpkg-query -W -f='${Status}' tierfs 2>/dev/null | grep -qv "not-installed"; then
  fail "a tierfs package is already installed ($(dpkg-query -W -f='${Status}' tierfs)); remove it first: dpkg -P tierfs"
fi
# An empty /etc/tierfs (left by an interrupted purge) holds nothing of the user's.
rmdir /etc/tierfs 2>/dev/null || true
for f in /etc/tierfs /sbin/mount.tierfs /usr/bin/tierfs "/lib/systemd/system/tierfs@.service"; do
  [[ ! -e "$f" ]] || fail "$f exists but no tierfs package is installed; remove it first"
done

e2e_init
BUCKET=pkgtest
INST="e2epkg$$"
PKG_INSTALLED=0
LISTENER_PID=""
PROXY_PID=""
DAEMON_PIDS=()
UNIT_STARTED=0

# Finds the daemon serving MNT (a daemonized mount's PID is not ours): the tierfs process whose
# arguments name this (unique, temporary) mountpoint.
daemon_pid_of() {
  local f p
  for f in $(grep -lzxF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null); do
    p="${f%/cmdline}"
    [[ "$(readlink "$p/exe" 2>/dev/null)" == /usr/bin/tierfs ]] && { echo "${p#/proc/}"; return 0; }
  done
  return 1
}

dpkg_locked() {  # dpkg ARGS... retried while another apt/dpkg holds the lock (up to 120 s)
  local deadline=$((SECONDS + 120)) out rc
  while :; do
    rc=0
    out="$(DEBIAN_FRONTEND=noninteractive dpkg "$@" 2>&1)" || rc=$?
    if (( rc == 0 )) || ! grep -q "lock" <<<"$out" || (( SECONDS >= deadline )); then
      printf '%s\n' "$out"
      return $rc
    fi
    sleep 2
  done
}

package_cleanup() {
  local rc=$? p
  set +e
  for p in "${DAEMON_PIDS[@]}"; do stop_pid "$p"; done
  [[ -n "$LISTENER_PID" ]] && stop_pid "$LISTENER_PID"
  if [[ -n "$PROXY_PID" ]]; then
    rm -f "$E2E_WORK/stall"
    stop_pid "$PROXY_PID"
  fi
  if (( UNIT_STARTED )); then
    timeout 90 systemctl stop "tierfs@$INST"
    systemctl reset-failed "tierfs@$INST" 2>/dev/null
  fi
  # Unmount before the package goes (e2e_cleanup would do it too, but after the purge).
  for p in "${E2E_MOUNTS[@]}"; do
    is_mounted "$p" && { timeout -k 2 20 umount "$p" || timeout -k 2 10 umount -l "$p"; }
  done
  rm -f "/etc/tierfs/$INST.env" "/etc/tierfs/$INST.toml"
  if (( PKG_INSTALLED )); then
    log "cleanup: purging the tierfs package"
    dpkg_locked -P tierfs >/dev/null || log "cleanup: dpkg -P tierfs failed" >&2
  fi
  e2e_cleanup "$rc"
}
trap package_cleanup EXIT

# ---- build ----
t_build=$SECONDS
log "-> scripts/package.sh"
timeout -k 10 900 "$E2E_ROOT/scripts/package.sh" >"$E2E_WORK/package.out" 2>&1 ||
  { cat "$E2E_WORK/package.out"; fail "scripts/package.sh failed"; }
deb="$(tail -n 1 "$E2E_WORK/package.out")"
arch="$(dpkg --print-architecture)"
[[ -f "$deb" && "$deb" == */dist/tierfs_*_"$arch".deb ]] ||
  { cat "$E2E_WORK/package.out"; fail "scripts/package.sh did not print a dist/tierfs_*_$arch.deb"; }
build_secs=$((SECONDS - t_build))
log "package: $deb (${build_secs}s)"
t_rest=$SECONDS

# ---- contents ----
dpkg-deb -c "$deb" >"$E2E_WORK/listing"
awk '{ print $NF }' "$E2E_WORK/listing" | sed 's#^\./#/#' >"$E2E_WORK/contents"
for f in /usr/bin/tierfs /sbin/mount.tierfs "/lib/systemd/system/tierfs@.service" \
  /usr/libexec/tierfs/tierfs-instance /etc/tierfs/tierfs.toml /etc/logrotate.d/tierfs \
  /usr/share/man/man1/tierfs.1.gz \
  /usr/share/doc/tierfs/copyright /usr/share/doc/tierfs/README.md /usr/share/doc/tierfs/CHANGELOG.md \
  /usr/share/doc/tierfs/docs/configuration.md /usr/share/doc/tierfs/docs/operations.md \
  /usr/share/doc/tierfs/examples/k8s/daemonset.yaml /usr/share/doc/tierfs/examples/k8s/podmonitor.yaml; do
  grep -qxF "$f" "$E2E_WORK/contents" || fail "the package lacks $f"
done
grep -q '^-rwxr-xr-x root/root .* ./sbin/mount.tierfs$' "$E2E_WORK/listing" ||
  fail "/sbin/mount.tierfs is not an executable owned by root"
[[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | sort | tr '\n' ' ')" == "/etc/logrotate.d/tierfs /etc/tierfs/tierfs.toml " ]] ||
  fail "conffiles is not exactly /etc/tierfs/tierfs.toml and /etc/logrotate.d/tierfs"
depends="$(dpkg-deb --field "$deb" Depends)"
for d in fuse3 libfuse3-3 libcurl4 liblmdb0 libsystemd0; do
  grep -qE "(^|, )$d( |,|$)" <<<"$depends" || fail "Depends lacks $d (dpkg-shlibdeps): $depends"
done
log "ok contents: binary, mount helper, unit, conffile, man page; Depends: $depends"

# ---- license and control fields (what lintian would ask of them) ----
dpkg-deb -f "$deb" >"$E2E_WORK/control"
for field in Package Version Architecture Maintainer Installed-Size Section Priority Homepage Description; do
  grep -qE "^$field: .+" "$E2E_WORK/control" || { cat "$E2E_WORK/control"; fail "the control file lacks $field"; }
done
maint="$(dpkg-deb -f "$deb" Maintainer)"
[[ "$maint" =~ ^[^\<]+\ \<[^@\>]+@[^\>]+\.[a-z]+\>$ && "$maint" != *example* ]] ||
  fail "Maintainer is not a 'Name <address>' of the project: $maint"
[[ "$(dpkg-deb -f "$deb" Homepage)" == https://* ]] || fail "Homepage is not an https URL"
# An extended description: lines after the synopsis, each starting with a space.
(( $(dpkg-deb -f "$deb" Description | wc -l) >= 3 )) || fail "the Description has no extended part"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/tierfs/copyright >"$E2E_WORK/copyright"
"$PY" - "$E2E_WORK/copyright" "$maint" <<'PYEOF' || fail "/usr/share/doc/tierfs/copyright is not DEP-5 with Files: * under Apache-2.0"
import sys
text = open(sys.argv[1]).read()
paras = [p for p in text.split("\n\n") if p.strip()]
def fields(p):
    out, key = {}, None
    for line in p.splitlines():
        if line.startswith((" ", "\t")):
            assert key, line
            out[key] += "\n" + line
        else:
            key, _, value = line.partition(":")
            assert _ and key and " " not in key, "not a field line: %r" % line
            out[key] = value.strip()
    return out
header = fields(paras[0])
assert header["Format"] == "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", header
assert header["Upstream-Name"] == "tierfs", header
assert header["Upstream-Contact"] == sys.argv[2], (header, sys.argv[2])
files = [fields(p) for p in paras[1:] if p.startswith("Files:")]
licenses = {fields(p)["License"].split("\n")[0]: fields(p)["License"] for p in paras[1:]
            if p.startswith("License:")}
star = [f for f in files if f["Files"] == "*"]
assert len(star) == 1 and star[0]["License"] == "Apache-2.0" and star[0]["Copyright"], files
for f in files:  # every license named has its text
    assert f["License"] in licenses, (f, list(licenses))
assert "/usr/share/common-licenses/Apache-2.0" in licenses["Apache-2.0"]
assert "unspecified" not in text.lower()
for lib in ("CLI11", "Niels Lohmann"):  # compiled into the binary: their notices travel with it
    assert lib in text, lib
assert {"BSD-3-clause", "Expat"} <= set(licenses), list(licenses)
PYEOF
cmp -s <(sed -n '/^ *Apache License$/,$p' "$E2E_ROOT/LICENSE") \
  <(sed -n '/^ *Apache License$/,$p' /usr/share/common-licenses/Apache-2.0) ||
  fail "LICENSE is not the standard text of /usr/share/common-licenses/Apache-2.0"
log "ok license: copyright is DEP-5 (Files: * Apache-2.0, CLI11 and JSON notices), LICENSE the standard text; Maintainer $maint, Homepage $(dpkg-deb -f "$deb" Homepage)"

# ---- man page: true to --help ----
dpkg-deb -x "$deb" "$E2E_WORK/root"
bin="$E2E_WORK/root/usr/bin/tierfs"
zcat "$E2E_WORK/root/usr/share/man/man1/tierfs.1.gz" >"$E2E_WORK/tierfs.1"
# roff writes '-' as '\-': compare on the page as man(1) renders it.
LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$E2E_WORK/tierfs.1" 2>"$E2E_WORK/man.err" | col -b >"$E2E_WORK/tierfs.txt"
[[ ! -s "$E2E_WORK/man.err" ]] || { cat "$E2E_WORK/man.err"; fail "man reports problems in tierfs.1"; }
flags="$("$bin" mount --help | awk '/^ +-/ { col = $0; sub(/^ +/, "", col); sub(/  .*$/, "", col);
  n = split(col, p, /[ ,]+/); for (i = 1; i <= n; i++) if (p[i] ~ /^--/) print p[i] }')"
(( $(wc -l <<<"$flags") >= 10 )) || fail "too few long flags parsed from tierfs mount --help: $flags"
for f in $flags; do
  grep -qE -- "(^|[ ,])$f([ ,]|$)" "$E2E_WORK/tierfs.txt" || fail "the man page lacks $f of tierfs mount --help"
done
for sub in mount status prefetch "l3 gc"; do
  grep -qF "tierfs $sub" "$E2E_WORK/tierfs.txt" || fail "the man page lacks tierfs $sub"
done
for section in "FSTAB AND MOUNT(8)" SYSTEMD FILES "EXIT STATUS"; do
  grep -qx "$section" "$E2E_WORK/tierfs.txt" || fail "the man page lacks the section $section"
done
log "ok man page: every long flag of tierfs mount --help ($(wc -l <<<"$flags")) and every subcommand"

# ---- Kubernetes YAML (schemas: the manifests stage of scripts/test.sh; here what ties the
# manifests to tierfs). Not run here: no Docker engine or cluster ----
"$PY" - "$E2E_ROOT/packaging" "$E2E_WORK" <<'PYEOF' || fail "packaging/k8s YAML check failed"
import os, sys, tomllib, yaml
root, work = sys.argv[1], sys.argv[2]
docs = {}
for name in ("daemonset.yaml", "pod-example.yaml", "podmonitor.yaml"):
    with open(f"{root}/k8s/{name}") as f:
        for d in yaml.safe_load_all(f):
            docs[(d["kind"], d["metadata"]["name"])] = d
sa = docs[("ServiceAccount", "tierfs")]
assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
cm = docs[("ConfigMap", "tierfs-config")]
toml = tomllib.loads(cm["data"]["tierfs.toml"])
with open(f"{work}/k8s-tierfs.toml", "w") as f:  # for `tierfs config check` below
    f.write(cm["data"]["tierfs.toml"])
with open(f"{work}/k8s-mount.sh", "w") as f:  # its flags are checked against --help below
    f.write(cm["data"]["mount.sh"])
ds = docs[("DaemonSet", "tierfs")]["spec"]["template"]["spec"]
assert ds["serviceAccountName"] == "tierfs"
vols = {v["name"]: v for v in ds["volumes"]}
assert vols["fuse"]["hostPath"]["path"] == "/dev/fuse"
assert "hostPath" in vols["mnt"] and "hostPath" in vols["cache"]
assert vols["config"]["configMap"]["name"] == "tierfs-config"
cs = ds["containers"]
assert len(cs) >= 2, "several buckets per DaemonSet: one container each"
seen = {k: set() for k in ("TIERFS_MOUNTPOINT", "TIERFS_CACHE_DIR", "TIERFS_METRICS_PORT")}
def gib(q):  # "8GiB" (tierfs) or "9Gi" (Kubernetes) -> GiB
    return float(q.removesuffix("B").removesuffix("Gi"))
for c in cs:
    env = {e["name"]: e["value"] for e in c["env"]}
    for k in seen:  # a mountpoint, a cache directory (one daemon each) and a port per container
        assert env[k] not in seen[k], (c["name"], k, env[k])
        seen[k].add(env[k])
    assert c["command"] == ["/bin/sh", "/etc/tierfs/mount.sh"], c["command"]
    assert c["securityContext"]["privileged"] is True
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["fuse"]["mountPath"] == "/dev/fuse"
    assert mounts["mnt"]["mountPropagation"] == "Bidirectional"
    assert mounts["config"]["mountPath"] == "/etc/tierfs"
    assert env["TIERFS_MOUNTPOINT"].startswith(mounts["mnt"]["mountPath"] + "/")
    assert env["TIERFS_CACHE_DIR"].startswith(mounts["cache"]["mountPath"] + "/")
    port = {p["name"]: p["containerPort"] for p in c["ports"]}
    name = [n for n, v in port.items() if v == int(env["TIERFS_METRICS_PORT"])]
    assert len(name) == 1, (c["name"], port, env["TIERFS_METRICS_PORT"])
    for probe in ("startupProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": name[0]}, (c["name"], probe)
    assert c["readinessProbe"]["exec"]["command"] == ["tierfs", "status", env["TIERFS_MOUNTPOINT"]]
    assert "fusermount3 -u" in " ".join(c["lifecycle"]["preStop"]["exec"]["command"])
    # Resources follow the formula of the manifest's header.
    r = c["resources"]
    assert gib(r["requests"]["memory"]) == gib(env["TIERFS_L1_SIZE"]) + 1, (c["name"], r)
    assert gib(r["limits"]["memory"]) == gib(r["requests"]["memory"]) + 1, (c["name"], r)
    assert "cpu" in r["requests"] and "cpu" not in r.get("limits", {})
pm = docs[("PodMonitor", "tierfs")]["spec"]
ports = [p["name"] for c in cs for p in c["ports"]]
assert sorted(e["port"] for e in pm["podMetricsEndpoints"]) == sorted(ports), (pm, ports)
assert pm["selector"]["matchLabels"].items() <= docs[("DaemonSet", "tierfs")]["spec"]["template"]["metadata"]["labels"].items()
pod = docs[("Pod", "tierfs-reader")]["spec"]
pm = pod["containers"][0]["volumeMounts"][0]
assert pm["mountPropagation"] == "HostToContainer"
pv = {v["name"]: v for v in pod["volumes"]}[pm["name"]]
assert pv["hostPath"]["path"] == vols["mnt"]["hostPath"]["path"]
# The pod (uid 1000) may start prefetches: one of its groups is the mounts' control group.
ctl = toml["fuse"]["control_group"]
assert int(ctl) in pod["securityContext"]["supplementalGroups"], (ctl, pod["securityContext"])
assert pod["containers"][0]["securityContext"]["runAsUser"] != 0
print("k8s: %d documents; %d mounts, each privileged with /dev/fuse, Bidirectional, its own cache "
      "directory and metrics port, /healthz startup and liveness probes, readiness tierfs status, "
      "preStop unmount, memory from L1; PodMonitor on every port; pod HostToContainer, in the "
      "control group" % (len(docs), len(cs)))
PYEOF
"$TIERFS" config check "$E2E_WORK/k8s-tierfs.toml" >"$E2E_WORK/k8s-config-check.out" 2>&1 ||
  { cat "$E2E_WORK/k8s-config-check.out"; fail "tierfs config check rejects the DaemonSet's ConfigMap"; }
k8s_flags="$(grep -oE -- '--[a-z0-9-]+' "$E2E_WORK/k8s-mount.sh" | sort -u)"
"$TIERFS" mount --help >"$E2E_WORK/mount-help.txt"
for f in $k8s_flags; do
  grep -qE -- "(^|[ ,])$f([ ,=]|$)" "$E2E_WORK/mount-help.txt" || fail "mount.sh of the DaemonSet uses $f, not a flag of tierfs mount"
done
log "ok the DaemonSet's ConfigMap passes tierfs config check; mount.sh's flags exist: $(echo $k8s_flags)"

# ---- install ----
PKG_INSTALLED=1
dpkg_locked -i "$deb" >"$E2E_WORK/dpkg-i.out" || { cat "$E2E_WORK/dpkg-i.out"; fail "dpkg -i failed"; }
[[ "$(dpkg-query -W -f='${Status}' tierfs)" == "install ok installed" ]] || fail "tierfs is not installed after dpkg -i"
for f in $(grep -v '/$' "$E2E_WORK/contents"); do
  [[ -e "$f" ]] || fail "$f missing after dpkg -i"
done
/usr/bin/tierfs --version | grep -q "^tierfs " || fail "/usr/bin/tierfs --version"
log "ok dpkg -i ($(/usr/bin/tierfs --version))"
# mount -f (fake): the helper prints the command it would run. (Options that are -o words today,
# such as uid= or allow_other, become flags once tierfs has --uid/--allow-other: not checked here.)
got="$(/sbin/mount.tierfs s3://b/p /mnt/x -f -o rw,_netdev,region=eu-west-1,cache_dir=/c,no_sign_request,noatime,nodev)"
want="/usr/bin/tierfs mount s3://b/p /mnt/x --region eu-west-1 --cache-dir /c --no-sign-request --config /etc/tierfs/tierfs.toml -o _netdev,noatime,nodev"
[[ "$got" == "$want" ]] || fail "mount.tierfs -f: got '$got', expected '$want'"
log "ok mount.tierfs maps fstab options: $got"

# ---- mount -t tierfs against s3rver ----
s3rver_start "$BUCKET"
step "upload objects" 60 "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" \
  data/big.bin=3145729:11 data/small.txt=1000:12
big_sha="$("$PY" "$E2E_DIR/s3put.py" --sha data/big.bin=3145729:11)"
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1

mount_and_read() {  # mount_and_read MNT MOUNT-ARGS...: mount(8), read byte-exact, umount
  local mnt="$1" pid got
  shift
  mkdir -p "$mnt"
  E2E_MOUNTS+=("$mnt")
  E2E_PIDS+=("")
  log "-> mount $*"
  timeout -k 5 "$MOUNT_TIMEOUT" mount "$@" >"$E2E_WORK/mount.out" 2>&1 ||
    { cat "$E2E_WORK/mount.out"; fail "mount $* failed"; }
  is_mounted "$mnt" || fail "mount $* returned but $mnt is not a mount"
  awk -v d="$mnt" '$5 == d' /proc/self/mountinfo | grep -q ' fuse.tierfs ' ||
    fail "$mnt is not of type fuse.tierfs"
  pid="$(daemon_pid_of "$mnt")" || fail "no tierfs daemon serves $mnt"
  got="$(timeout -k 2 30 sha256sum "$mnt/data/big.bin" | cut -d' ' -f1)"
  [[ "$got" == "$big_sha" ]] || fail "$mnt/data/big.bin: sha256 $got, expected $big_sha"
  timeout -k 2 20 /usr/bin/tierfs status "$mnt" >/dev/null || fail "tierfs status $mnt"
  timeout -k 2 "$UMOUNT_TIMEOUT" umount "$mnt" || fail "umount $mnt failed"
  wait_pid_exit "$pid" "$UMOUNT_TIMEOUT" || fail "tierfs (pid $pid) still running after umount $mnt"
  log "ok mounted, read byte-exact, unmounted, daemon exited"
}
mnt1="$E2E_WORK/mnt-t"
mount_and_read "$mnt1" -t tierfs \
  -o "endpoint_url=$S3_ENDPOINT,cache_dir=$E2E_WORK/cache-t,l1_size=64MiB,l2_size=256MiB,log_file=$E2E_WORK/mount-t.log,noatime" \
  "s3://$BUCKET" "$mnt1"

# The same through an fstab line (mount -T FILE reads it instead of /etc/fstab).
mnt2="$E2E_WORK/mnt-fstab"
printf 's3://%s  %s  tierfs  _netdev,nofail,endpoint_url=%s,cache_dir=%s,l2_size=256MiB,allow_other,uid=%s,file_mode=0640,log_file=%s  0 0\n' \
  "$BUCKET" "$mnt2" "$S3_ENDPOINT" "$E2E_WORK/cache-fstab" "$(id -u nobody)" "$E2E_WORK/mount-fstab.log" \
  >"$E2E_WORK/fstab"
log "fstab line: $(cat "$E2E_WORK/fstab")"
mount_and_read "$mnt2" -T "$E2E_WORK/fstab" "$mnt2"

# ---- the unit's ExecStart under a fake NOTIFY_SOCKET ----
# s3rver behind a proxy that holds every request while $E2E_WORK/stall exists: the mount cannot
# finish before the stall ends, so a READY=1 sent too early shows.
"$PY" "$E2E_DIR/stall_proxy.py" --upstream-port "$S3_PORT" --stall-file "$E2E_WORK/stall" \
  --port-file "$E2E_WORK/proxy.port" &
PROXY_PID=$!
for _ in $(seq 100); do [[ -s "$E2E_WORK/proxy.port" ]] && break; sleep 0.1; done
[[ -s "$E2E_WORK/proxy.port" ]] || fail "the stall proxy did not start"
mnt3="$E2E_WORK/mnt-unit"
hport="$(free_port)"  # /healthz, the Kubernetes probes' endpoint, through the start
cat >"/etc/tierfs/$INST.env" <<EOF
TIERFS_SOURCE=s3://$BUCKET
TIERFS_MOUNTPOINT=$mnt3
TIERFS_ARGS="--endpoint http://127.0.0.1:$(cat "$E2E_WORK/proxy.port") --cache-dir $E2E_WORK/cache-unit --metrics-address 127.0.0.1:$hport"
AWS_ACCESS_KEY_ID=S3RVER
AWS_SECRET_ACCESS_KEY=S3RVER
EOF
cat >"/etc/tierfs/$INST.toml" <<EOF
[cache]
l1_size = "64MiB"
l2_size = "256MiB"
EOF
exec_start="$(sed -n 's/^ExecStart=//p' "/lib/systemd/system/tierfs@.service")"
exec_start="${exec_start//%i/$INST}"
log "unit ExecStart: $exec_start"
sock="$E2E_WORK/notify.sock"
"$PY" "$E2E_DIR/notify_listener.py" --socket "$sock" --log "$E2E_WORK/notify.log" \
  --mountpoint "$mnt3" --file data/big.bin --sha256 "$big_sha" --timeout 90 &
LISTENER_PID=$!
for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.1; done
[[ -S "$sock" ]] || fail "the notify listener did not bind $sock"
touch "$E2E_WORK/stall"
E2E_MOUNTS+=("$mnt3")
# As systemd runs it: the EnvironmentFile's variables, NOTIFY_SOCKET, nothing else.
# shellcheck disable=SC2086
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin NOTIFY_SOCKET="$sock" \
  bash -c "set -a; . /etc/tierfs/$INST.env; set +a; exec $exec_start" >"$E2E_WORK/unit.log" 2>&1 &
unit_pid=$!
E2E_PIDS+=("$unit_pid")
DAEMON_PIDS+=("$unit_pid")
sleep 2
pid_alive "$unit_pid" || { cat "$E2E_WORK/unit.log"; fail "the unit's ExecStart exited during the stall"; }
tr '\0' ' ' <"/proc/$unit_pid/cmdline" | grep -q -- "--config /etc/tierfs/$INST.toml --foreground --supervise" ||
  fail "ExecStart did not exec tierfs with /etc/tierfs/$INST.toml: $(tr '\0' ' ' <"/proc/$unit_pid/cmdline")"
! is_mounted "$mnt3" || fail "$mnt3 mounted while the origin stalls"
grep -q '"READY"' "$E2E_WORK/notify.log" 2>/dev/null && fail "READY=1 sent before the mount was possible"
grep -q '"STATUS": "starting' "$E2E_WORK/notify.log" || fail "no STATUS=starting... while starting"
health="$(timeout -k 2 10 curl -s -w ' %{http_code}' "http://127.0.0.1:$hport/healthz" | tr -d '\n')"
[[ "$health" == "starting 503" ]] || fail "/healthz during the stall: '$health', expected 'starting' with 503"
log "ok no READY=1 during a 2 s origin stall; STATUS: $(tail -n 1 "$E2E_WORK/notify.log")"
t_unstall=$SECONDS
rm -f "$E2E_WORK/stall"
deadline=$((SECONDS + 30))
until grep -q '"READY"' "$E2E_WORK/notify.log"; do
  pid_alive "$unit_pid" || { cat "$E2E_WORK/unit.log"; fail "tierfs exited before READY=1"; }
  (( SECONDS < deadline )) || { cat "$E2E_WORK/unit.log"; fail "no READY=1 within 30 s after the stall ended"; }
  sleep 0.1
done
"$PY" - "$E2E_WORK/notify.log" "$big_sha" "$mnt3" "$unit_pid" <<'PYEOF' || fail "READY=1 came before the mount answered, or not from the supervised daemon"
import json, sys
entries = [json.loads(l) for l in open(sys.argv[1])]
ready = [e for e in entries if e["fields"].get("READY") == "1"]
assert len(ready) == 1, entries
r = ready[0]
assert r["ready_mounted"] is True, r
assert r["ready_sha256"] == sys.argv[2], r
assert r["fields"]["STATUS"] == f"serving s3://pkgtest at {sys.argv[3]}", r
assert int(r["fields"]["MAINPID"]) == int(sys.argv[4]), r  # the supervisor: the unit's main process
assert r["pid"] != int(sys.argv[4]), r  # sent by the serving daemon, its child
PYEOF
log "ok READY=1 $((SECONDS - t_unstall))s after the stall ended; at READY the mount answered byte-exact"
health="$(timeout -k 2 10 curl -s -w ' %{http_code}' "http://127.0.0.1:$hport/healthz" | tr -d '\n')"
[[ "$health" == "serving s3://$BUCKET at $mnt3 200" ]] || fail "/healthz once mounted: '$health'"
log "ok /healthz: 503 'starting' during the stall, 200 '${health% 200}' once mounted"
# The unit's main process is the supervisor: a kill -9 of the serving daemon is resumed under it.
served_by() { getfattr --only-values -n user.tierfs.daemon "$mnt3" 2>/dev/null | sed -n 's/^pid=\([0-9]*\).*/\1/p'; }
dpid="$(served_by)"
[[ -n "$dpid" && "$dpid" != "$unit_pid" ]] || fail "serving daemon pid '$dpid' (the unit's main process $unit_pid)"
kill -KILL "$dpid"
deadline=$((SECONDS + 30))
until npid="$(served_by)" && [[ -n "$npid" && "$npid" != "$dpid" ]]; do
  (( SECONDS < deadline )) || { cat "$E2E_WORK/unit.log"; fail "no daemon resumed the unit's mount within 30 s"; }
  sleep 0.1
done
pid_alive "$unit_pid" || fail "the unit's main process ended with its serving daemon"
got="$(timeout -k 2 30 sha256sum "$mnt3/data/big.bin" | cut -d' ' -f1)"
[[ "$got" == "$big_sha" ]] || fail "after the resume: sha256 $got, expected $big_sha"
log "ok kill -9 of the unit's serving daemon (pid $dpid): pid $npid serves on, the main process $unit_pid stays"
timeout -k 2 "$UMOUNT_TIMEOUT" fusermount3 -u "$mnt3" || fail "fusermount3 -u $mnt3"
wait_pid_exit "$unit_pid" "$UMOUNT_TIMEOUT" || fail "tierfs still running after unmount"
daemon_exit_code "$unit_pid"; rc=$DAEMON_RC
[[ "$rc" == 0 ]] || { cat "$E2E_WORK/unit.log"; fail "tierfs exited $rc after unmount"; }
wait_pid_exit "$LISTENER_PID" 10 || fail "the listener got no STOPPING=1"
grep '"STOPPING": "1"' "$E2E_WORK/notify.log" | grep -q "unmounted" || fail "no STOPPING=1 with a STATUS at unmount"
log "ok STOPPING=1 at unmount, exit 0"
stop_pid "$PROXY_PID"
PROXY_PID=""

# ---- systemd ----
if command -v systemd-analyze >/dev/null 2>&1; then
  cp "/lib/systemd/system/tierfs@.service" "$E2E_WORK/tierfs@$INST.service"
  if ! out="$(timeout 30 systemd-analyze verify "$E2E_WORK/tierfs@$INST.service" 2>&1)"; then
    printf '%s\n' "$out"
    fail "systemd-analyze verify tierfs@.service"
  fi
  [[ -z "$out" ]] || { printf '%s\n' "$out"; fail "systemd-analyze verify reports problems"; }
  log "ok systemd-analyze verify tierfs@.service (ExecStart and man:tierfs(1) found)"
else
  log "systemd-analyze verify: not run (systemd-analyze is not installed)"
fi
pid1="$(ps -p 1 -o comm= | tr -d ' ')"
if [[ "$pid1" == systemd ]]; then
  mnt4="$E2E_WORK/mnt-systemd"
  sed -i "s#^TIERFS_MOUNTPOINT=.*#TIERFS_MOUNTPOINT=$mnt4#; s#--endpoint [^ ]*#--endpoint $S3_ENDPOINT#" \
    "/etc/tierfs/$INST.env"
  E2E_MOUNTS+=("$mnt4")
  E2E_PIDS+=("")
  systemctl daemon-reload
  UNIT_STARTED=1
  timeout 120 systemctl start "tierfs@$INST" || { systemctl status "tierfs@$INST" --no-pager; fail "systemctl start tierfs@$INST"; }
  is_mounted "$mnt4" || fail "tierfs@$INST is active but $mnt4 is not mounted"
  got="$(timeout -k 2 30 sha256sum "$mnt4/data/big.bin" | cut -d' ' -f1)"
  [[ "$got" == "$big_sha" ]] || fail "through the unit: sha256 $got, expected $big_sha"
  systemctl show -p StatusText "tierfs@$INST" | grep -q "serving" || fail "the unit's status text is not 'serving ...'"
  timeout 90 systemctl stop "tierfs@$INST" || fail "systemctl stop tierfs@$INST"
  ! is_mounted "$mnt4" || fail "$mnt4 still mounted after systemctl stop"
  UNIT_STARTED=0
  log "ok systemctl start/stop tierfs@$INST"
else
  log "SKIP systemctl start tierfs@$INST: PID 1 is '$pid1', not a running systemd (the ExecStart and READY=1 were checked above under a fake NOTIFY_SOCKET)"
fi

# ---- remove, purge ----
rm -f "/etc/tierfs/$INST.env" "/etc/tierfs/$INST.toml"
dpkg_locked -r tierfs >"$E2E_WORK/dpkg-r.out" || { cat "$E2E_WORK/dpkg-r.out"; fail "dpkg -r tierfs failed"; }
for f in /usr/bin/tierfs /sbin/mount.tierfs "/lib/systemd/system/tierfs@.service" \
  /usr/libexec/tierfs /usr/share/man/man1/tierfs.1.gz /usr/share/doc/tierfs; do
  [[ ! -e "$f" ]] || fail "$f still there after dpkg -r"
done
[[ -f /etc/tierfs/tierfs.toml && -f /etc/logrotate.d/tierfs ]] || fail "dpkg -r removed a conffile"
[[ "$(dpkg-query -W -f='${Status}' tierfs)" == "deinstall ok config-files" ]] || fail "state after dpkg -r: $(dpkg-query -W -f='${Status}' tierfs)"
dpkg_locked -P tierfs >"$E2E_WORK/dpkg-p.out" || { cat "$E2E_WORK/dpkg-p.out"; fail "dpkg -P tierfs failed"; }
PKG_INSTALLED=0
[[ ! -e /etc/tierfs ]] || fail "/etc/tierfs still there after dpkg -P: $(ls -A /etc/tierfs)"
[[ ! -e /etc/logrotate.d/tierfs ]] || fail "/etc/logrotate.d/tierfs still there after dpkg -P"
if dpkg-query -W -f='${Status}' tierfs 2>/dev/null | grep -qv "not-installed"; then
  fail "dpkg still knows tierfs after dpkg -P: $(dpkg-query -W -f='${Status}' tierfs)"
fi
log "ok dpkg -r left only the conffile, dpkg -P removed everything"
log "times: package build ${build_secs}s, the rest $((SECONDS - t_rest))s"
