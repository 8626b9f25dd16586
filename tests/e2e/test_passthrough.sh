#!/usr/bin/env bash
# End-to-end FUSE passthrough (fuse.passthrough, docs/semantics.md): files L2 holds whole are
# opened with their L2 file as the backing file, and the kernel reads them without the daemon.
#   * prefetch a directory of small files into L2, drop the page cache: every file reads
#     byte-exact (whole, past EOF, pread, mmap, two opens at once), as root and as nobody
#     (allow_other), with passthrough opens counted and no read request for them;
#   * a file read lately is opened cached and stored with its open instead; after a restart
#     (blocks verified again at their first use) files are handed to the kernel again;
#   * an object that changes at the origin while an open of it reads the old version: a new open
#     reads the new version on a new inode, the old open the old version;
#   * fuse.passthrough = false (the default): the same bytes, no passthrough open.
# Where the kernel lacks passthrough (before Linux 6.9) the bytes are checked, the counts are not.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
e2e_init
chmod 755 "$E2E_WORK"

src="$E2E_WORK/src"
mkdir -p "$src/d"
"$PY" - "$src/d" <<'PY'
import os, random, sys
r = random.Random(9)
for i in range(120):  # 1 B .. 1 MiB: every size passthrough takes, and the one-block edge
    n = [1, 4096, 1 << 20][i] if i < 3 else r.randrange(1, 300_000)
    open(os.path.join(sys.argv[1], f"f{i:03d}.bin"), "wb").write(r.randbytes(n))
open(os.path.join(sys.argv[1], "big.bin"), "wb").write(r.randbytes(3_000_000))  # two blocks+
PY
chmod -R a+rX "$src"

mnt="$E2E_WORK/mnt" cache="$E2E_WORK/cache" logf="$E2E_WORK/daemon.log"
printf '[fuse]\npassthrough = true\n' >"$E2E_WORK/on.toml"
tierfs_mount "file://$src" "$mnt" "$cache" "$logf" --metadata-ttl 1s --allow-other \
  --config "$E2E_WORK/on.toml"
on=0
grep -q "passthrough on" "$logf" && on=1
kernel=0  # the kernel has FUSE passthrough (Linux 6.9+, CONFIG_FUSE_PASSTHROUGH)
grep -qw fuse_passthrough_read_iter /proc/kallsyms && kernel=1
log "passthrough: in the kernel $kernel, on this mount $on"
(( on == kernel )) || { print_log_tail "$logf"; fail "passthrough on this mount: $on, in the kernel: $kernel"; }
timeout -k 2 20 setfattr -n user.tierfs.prefetch -v l2 "$mnt/d"
wait_prefetch "$mnt/d" done 60
fetched="$(stat_of "$mnt" origin.bytes)"  # the prefetch's; the reads below fetch nothing
sync
echo 3 >/proc/sys/vm/drop_caches
step "every file byte-exact from L2" 120 "$PY" "$E2E_DIR/passthrough_check.py" files "$mnt/d" "$src/d"
if (( on )); then
  # 120 small files passthrough (each opened twice by the check: the second open finds the
  # inode in passthrough mode), big.bin is read through the daemon.
  check_stats "$mnt" --gt fuse.passthrough_opens=239 --eq "origin.bytes=$fetched" --lt fuse.reads=40
fi
echo 3 >/proc/sys/vm/drop_caches
step "every file byte-exact as nobody" 120 runuser -u nobody -- \
  "$PY" "$E2E_DIR/passthrough_check.py" files "$mnt/d" "$src/d"
(( on )) && check_stats "$mnt" --gt fuse.passthrough_opens=479 --eq "origin.bytes=$fetched"
if (( on )); then
  # A file read lately (its L2 file's pages cached) is opened cached and handed over whole with
  # its open, so that reading it again costs no request. Its next open may still go passthrough
  # once and hand it over at the one after (seen once in CI: an open the daemon counts as the
  # first since a lookup, or one after the kernel dropped some of the L2 file's pages, is not
  # taken for "read lately").
  stores="$(stat_of "$mnt" fuse.open_stores)" pts="$(stat_of "$mnt" fuse.passthrough_opens)"
  for n in 2 3 4; do
    cmp "$mnt/d/f005.bin" "$src/d/f005.bin" || fail "f005.bin differs when read again ($n)"
  done
  check_stats "$mnt" --eq "fuse.open_stores=$((stores + 1))" \
    --lt "fuse.passthrough_opens=$((pts + 2))"
  stores="$(stat_of "$mnt" fuse.open_stores)" pts="$(stat_of "$mnt" fuse.passthrough_opens)"
  cmp "$mnt/d/f005.bin" "$src/d/f005.bin" || fail "f005.bin differs when read a fifth time"
  check_stats "$mnt" --eq "fuse.open_stores=$stores" --eq "fuse.passthrough_opens=$pts"
  # Its pages out of the page cache, so that its next open is passthrough (a file read lately
  # is opened cached: docs/semantics.md).
  echo 3 >/proc/sys/vm/drop_caches
  before="$(stat_of "$mnt" fuse.passthrough_opens)"
  step "a changed object beside an open of the old version" 60 \
    "$PY" "$E2E_DIR/passthrough_check.py" change "$mnt/d/f010.bin" "$src/d/f010.bin" 1
  (( $(stat_of "$mnt" fuse.passthrough_opens) > before )) || fail "the old version's open was not passthrough"
fi
tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
daemon_exit_code "$TIERFS_PID"; [[ "$DAEMON_RC" == 0 ]] || { print_log_tail "$logf"; fail "daemon exit"; }

# A restart: every block is verified again at its first use (which reads its file), and is still
# handed to the kernel.
if (( on )); then
  tierfs_mount "file://$src" "$mnt" "$cache" "$logf.2" --config "$E2E_WORK/on.toml"
  echo 3 >/proc/sys/vm/drop_caches
  step "every file byte-exact after a restart" 120 "$PY" "$E2E_DIR/passthrough_check.py" files "$mnt/d" "$src/d"
  check_stats "$mnt" --gt fuse.passthrough_opens=237 --eq origin.bytes=0 --eq fuse.open_stores=0
  tierfs_umount "$mnt" "$TIERFS_PID" || fail "unclean unmount"
fi

# Off (the default): the same cache (verified once more on first use), every byte through the
# daemon.
rm -f "$src/d/f010.bin"  # changed above (when passthrough ran); the listing drops it
mnt2="$E2E_WORK/mnt2" logf2="$E2E_WORK/daemon2.log"
tierfs_mount "file://$src" "$mnt2" "$cache" "$logf2"
grep -q "passthrough on" "$logf2" && fail "passthrough on with fuse.passthrough = false"
echo 3 >/proc/sys/vm/drop_caches
step "every file byte-exact, passthrough off" 120 "$PY" "$E2E_DIR/passthrough_check.py" files "$mnt2/d" "$src/d"
check_stats "$mnt2" --eq fuse.passthrough_opens=0 --eq origin.bytes=0
tierfs_umount "$mnt2" "$TIERFS_PID" || fail "unclean unmount"
log "ok"
