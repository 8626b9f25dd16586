#!/usr/bin/env bash
# End-to-end policies and xattrs over s3rver with a small L2 (16 MiB, L1 off):
#   * a pinned file survives cache pressure that evicts unpinned ones; a pin beyond the pin quota
#     (half of L2) fails with ENOSPC; evict=1 drops a file now;
#   * a short user.tierfs.ttl forces a refetch from the origin;
#   * a changed object (new ETag) is served new after its metadata TTL;
#   * every settable xattr with bad values, on files and on directories: EINVAL; unknown names
#     ENODATA/ENOTSUP; `getfattr -d -m user.tierfs` prints every listed name;
#   * a [[policy]] quota in the config file keeps one prefix from pushing the others out of L2,
#     and a bad quota value is refused at mount time with the key named;
#   * L2 admission, with an 8 MiB L1 in front: [[policy]] admit = "never" serves without storing
#     in L2, user.tierfs.admit=always on a file beats it, reuse stores a file on its second read;
#   * projected reads (cache.sparse_read_max): column readers in scattered, unaligned 16-64 KiB
#     ranges get the right bytes; one of 25% of a 16 MiB file, and one of 25% of a 64 MiB file (over
#     256 reads), move at most 1.3 origin bytes per byte read (neither is hydrated); the 16 MiB
#     file's ranges are read again from L2 after a remount with no origin request; a reader of 90%
#     of the 64 MiB file has it hydrated, whole in L2, with at most 1.15 origin bytes per byte
#     read (the hydration fetches only what the reads did not), but not when the file is as large
#     as L2 (4 KiB and 16-64 KiB random readers of it move about what they read); with
#     sparse_read_max = 0 the 25% reads fetch whole blocks.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_pf.sh"
e2e_init
BUCKET=tierfs-pol
s3rver_start "$BUCKET"
MiB=$((1024 * 1024))
objs=("p/pinned.bin=$((4 * MiB)):1" "ttl/t.bin=$((2 * MiB)):2" "chg/c.bin=100000:3")
for i in 0 1 2 3 4 5; do objs+=("p/f$i.bin=$((4 * MiB)):$((10 + i))"); done
for i in 0 1 2 3; do objs+=("q/a$i.bin=$((4 * MiB)):$((20 + i))"); done
for i in 0 1; do objs+=("o/b$i.bin=$((4 * MiB)):$((30 + i))"); done
objs+=("adm/n/n.bin=$((2 * MiB)):40" "adm/n/a.bin=$((2 * MiB)):41" "adm/r/r.bin=$((2 * MiB)):42")
objs+=("proj/c.bin=$((16 * MiB)):50" "proj/big.bin=$((64 * MiB)):51")
# Files of 4 MiB (cache.whole_object_max): s1-s4 read in ranges, s5 from its start.
for i in 1 2 3 4 5; do objs+=("proj/small/s$i.bin=$((4 * MiB)):$((60 + i))"); done
step "upload test objects" 120 "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" "${objs[@]}"

mnt="$E2E_WORK/mnt" cache="$E2E_WORK/cache" logf="$E2E_WORK/daemon.log"
pf_mount "s3://$BUCKET" "$mnt" "$cache" "$logf" --endpoint "$S3_ENDPOINT" \
  --l1-size 0 --l2-size 16MiB --metadata-ttl 2s
# Reads files through the daemon: drops their kernel page cache first (dd iflag=nocache count=0
# advises POSIX_FADV_DONTNEED for the whole file), since the page cache is kept across opens.
cat_all() {
  for f in "$@"; do
    dd if="$f" iflag=nocache count=0 status=none 2>/dev/null || true
    cat "$f" >/dev/null || fail "cat $f"
  done
}

# ---- pin, pin quota, evict ----
step "pin p/pinned.bin" 20 setfattr -n user.tierfs.pin -v 1 "$mnt/p/pinned.bin"
[[ "$(xget "$mnt/p/pinned.bin" user.tierfs.pin)" == 1 ]] || fail "pin not reported"
[[ "$(xget "$mnt/p/f0.bin" user.tierfs.pin)" == 0 ]] || fail "f0 must not be pinned"
cat_all "$mnt/p/pinned.bin"
[[ "$(xget "$mnt/p/pinned.bin" user.tierfs.residency)" == "l2=4/4" ]] || fail "pinned.bin not cached"
# 24 MiB of unpinned reads through a 16 MiB L2.
cat_all "$mnt"/p/f{0,1,2,3,4,5}.bin
v="$(xget "$mnt/p/pinned.bin" user.tierfs.residency)"
[[ "$v" == "l2=4/4" ]] || fail "pinned file was evicted: $v"
v="$(xget "$mnt/p/f0.bin" user.tierfs.residency)"
[[ "$v" != "l2=4/4" ]] || fail "f0.bin should have been evicted by the pressure: $v"
log "ok pinned survives pressure (pinned.bin l2=4/4, f0.bin $v)"
# The directory holds 28 MiB: beyond the pin quota (8 MiB = half of L2).
xset_fails "$mnt/p" user.tierfs.pin 1 "No space left on device"
[[ "$(xget "$mnt/p/f1.bin" user.tierfs.pin)" == 0 ]] || fail "a refused pin changed something"
log "ok pin beyond the quota: ENOSPC"
cat_all "$mnt/p/f5.bin"
step "evict p/f5.bin" 20 setfattr -n user.tierfs.evict -v 1 "$mnt/p/f5.bin"
v="$(xget "$mnt/p/f5.bin" user.tierfs.residency)"
[[ "$v" == "l2=0/4" ]] || fail "evicted file still cached: $v"
step "evict the directory p (the pinned file too)" 20 setfattr -n user.tierfs.evict -v 1 "$mnt/p"
[[ "$(xget "$mnt/p/pinned.bin" user.tierfs.residency)" == "l2=0/4" ]] || fail "evict of p/ left pinned.bin"
step "unpin" 20 setfattr -n user.tierfs.pin -v 0 "$mnt/p/pinned.bin"

# ---- TTL ----
step "ttl=2s on ttl/" 20 setfattr -n user.tierfs.ttl -v 2s "$mnt/ttl"
[[ "$(xget "$mnt/ttl/t.bin" user.tierfs.ttl)" == 2s ]] || fail "ttl not inherited"
cat_all "$mnt/ttl/t.bin"
b1="$(stat_of "$mnt" origin.bytes)"
cat_all "$mnt/ttl/t.bin"
b2="$(stat_of "$mnt" origin.bytes)"
[[ "$b1" == "$b2" ]] || fail "read within the TTL went to the origin ($b1 → $b2)"
sleep 3
cat_all "$mnt/ttl/t.bin"
b3="$(stat_of "$mnt" origin.bytes)"
(( b3 - b2 == 2 * MiB )) || fail "read after the TTL did not refetch 2 MiB (origin.bytes $b2 → $b3)"
log "ok ttl: hit within 2s, refetched after ($(stat_of "$mnt" ttl.expired) blocks expired)"

# ---- a changed object is served new after the metadata TTL ----
want_old="$("$PY" "$E2E_DIR/s3put.py" --sha chg/c.bin=100000:3)"
want_new="$("$PY" "$E2E_DIR/s3put.py" --sha chg/c.bin=120000:4)"
got="$(sha256sum <"$mnt/chg/c.bin" | cut -d' ' -f1)"
[[ "$got" == "$want_old" ]] || fail "chg/c.bin: wrong bytes before the change"
etag1="$(xget "$mnt/chg/c.bin" user.tierfs.etag)"
step "overwrite chg/c.bin on the origin" 60 "$PY" "$E2E_DIR/s3put.py" --endpoint "$S3_ENDPOINT" --bucket "$BUCKET" chg/c.bin=120000:4
sleep 3
got="$(sha256sum <"$mnt/chg/c.bin" | cut -d' ' -f1)"
[[ "$got" == "$want_new" ]] || fail "chg/c.bin: old bytes after the metadata TTL"
etag2="$(xget "$mnt/chg/c.bin" user.tierfs.etag)"
[[ "$etag1" != "$etag2" ]] || fail "etag unchanged after the change ($etag1)"
log "ok changed object served new after the metadata TTL (etag $etag1 → $etag2)"

# ---- bad values, on a file and on a directory ----
for target in "$mnt/p/f1.bin" "$mnt/p" "$mnt"; do
  for v in "" l4 L2 "l2 x" 1; do xset_fails "$target" user.tierfs.prefetch "$v" "Invalid argument"; done
  xset_fails "$target" user.tierfs.prefetch l3 "Invalid argument"      # no L3 in this daemon
  xset_fails "$target" user.tierfs.prefetch cancel "Invalid argument"  # no job
  for v in "" 2 yes -1; do xset_fails "$target" user.tierfs.pin "$v" "Invalid argument"; done
  for v in "" abc -5s 0 "5 parsecs"; do xset_fails "$target" user.tierfs.ttl "$v" "Invalid argument"; done
  for v in "" LRU fifo; do xset_fails "$target" user.tierfs.policy "$v" "Invalid argument"; done
  for v in "" 0 2 yes; do xset_fails "$target" user.tierfs.evict "$v" "Invalid argument"; done
  for v in "" default Reuse lru; do xset_fails "$target" user.tierfs.admit "$v" "Invalid argument"; done
  for n in residency etag source stats; do xset_fails "$target" "user.tierfs.$n" 1 "Invalid argument"; done
  xset_fails "$target" user.tierfs.bogus 1 "Operation not supported"
  out="$(getfattr -n user.tierfs.bogus "$target" 2>&1)" && fail "getfattr of an unknown name succeeded"
  [[ "$out" == *"No such attribute"* ]] || fail "getfattr unknown name: $out"
  out="$(getfattr -n user.tierfs.evict "$target" 2>&1)" && fail "getfattr of evict succeeded"
  dump="$(timeout -k 2 20 getfattr -d -m user.tierfs --absolute-names "$target" 2>&1)" || fail "getfattr -d: $dump"
  for n in prefetch pin ttl policy admit; do
    [[ "$dump" == *"user.tierfs.$n="* ]] || fail "getfattr -d on $target lacks $n: $dump"
  done
done
[[ "$(xget "$mnt/p/f1.bin" user.tierfs.policy)" == lru ]] || fail "a refused policy changed something"
pid_alive "$TIERFS_PID" || fail "the daemon died"
grep -q "refused" "$logf" || fail "no log line for refused values"
log "ok every bad value refused (EINVAL/ENOTSUP/ENODATA), daemon alive, log lines written"
step "policy=ttl on p/" 20 setfattr -n user.tierfs.policy -v ttl "$mnt/p"
[[ "$(xget "$mnt/p/f1.bin" user.tierfs.policy)" == ttl ]] || fail "policy not inherited"
timeout -k 2 20 getfattr -d -m user.tierfs --absolute-names "$mnt/p/f1.bin"

tierfs_umount "$mnt" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }

# ---- per-prefix byte quota from the config file ----
cfg="$E2E_WORK/quota.toml"
printf '[[policy]]\nprefix = "q/"\nquota = "lots"\n' >"$cfg"
out="$(timeout -k 2 20 "$TIERFS" mount "s3://$BUCKET" "$E2E_WORK/mnt-bad" --cache-dir "$E2E_WORK/cache-bad" \
  --endpoint "$S3_ENDPOINT" --config "$cfg" -f 2>&1 </dev/null)" && fail "a bad quota was accepted"
[[ "$out" == *"policy.quota"* ]] || fail "the bad quota's key is not named: $out"
log "ok bad quota refused: $(head -n1 <<<"$out")"
printf '[[policy]]\nprefix = "q/"\nquota = "6MiB"\n' >"$cfg"
mnt2="$E2E_WORK/mnt2" cache2="$E2E_WORK/cache2"
pf_mount "s3://$BUCKET" "$mnt2" "$cache2" "$logf" --endpoint "$S3_ENDPOINT" \
  --l1-size 0 --l2-size 16MiB --config "$cfg"
cat_all "$mnt2"/o/b{0,1}.bin
# 16 MiB under q/ after 8 MiB elsewhere: without the quota the 16 MiB L2 would evict o/.
cat_all "$mnt2"/q/a{0,1,2,3}.bin
for f in o/b0.bin o/b1.bin; do
  v="$(xget "$mnt2/$f" user.tierfs.residency)"
  [[ "$v" == "l2=4/4" ]] || fail "$f was pushed out by the quota'd prefix: $v"
done
held=0
for i in 0 1 2 3; do
  v="$(xget "$mnt2/q/a$i.bin" user.tierfs.residency)"
  held=$((held + $(sed -E 's/^l2=([0-9]+)\/.*/\1/' <<<"$v")))
done
(( held >= 1 && held <= 6 )) || fail "q/ holds $held MiB in L2, quota 6 MiB"
# The newest file of q/ is the one that stays whole.
[[ "$(xget "$mnt2/q/a3.bin" user.tierfs.residency)" == "l2=4/4" ]] || fail "q/a3.bin not cached"
log "ok quota: q/ holds $held of its 16 MiB in L2 (quota 6 MiB), o/ untouched"
tierfs_umount "$mnt2" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }

# ---- L2 admission: never (config prefix), always (xattr beats it), reuse (second read) ----
printf '[[policy]]\nprefix = "adm/n/"\nadmit = "never"\n' >"$cfg"
mnt3="$E2E_WORK/mnt3" cache3="$E2E_WORK/cache3"
pf_mount "s3://$BUCKET" "$mnt3" "$cache3" "$logf" --endpoint "$S3_ENDPOINT" \
  --l1-size 8MiB --l2-size 16MiB --config "$cfg"
l2_of() { sed -E 's/.*l2=([0-9]+)\/.*/\1/' <<<"$(xget "$1" user.tierfs.residency)"; }
[[ "$(xget "$mnt3/adm/n/n.bin" user.tierfs.admit)" == never ]] || fail "[[policy]] admit not applied"
[[ "$(xget "$mnt3/adm/r/r.bin" user.tierfs.admit)" == default ]] || fail "admit set where none is"
rej0="$(stat_of "$mnt3" admit.rejected)"
cat_all "$mnt3/adm/n/n.bin"
[[ "$(l2_of "$mnt3/adm/n/n.bin")" == 0 ]] || fail "never: n.bin was stored in L2"
rej=$(( $(stat_of "$mnt3" admit.rejected) - rej0 ))
(( rej == 2 )) || fail "never: admit.rejected counted $rej blocks, not 2 ($(stats_xattr "$mnt3"))"
step "admit=always on adm/n/a.bin" 20 setfattr -n user.tierfs.admit -v always "$mnt3/adm/n/a.bin"
cat_all "$mnt3/adm/n/a.bin"
wait_residency "$mnt3/adm/n/a.bin" "l2=2/2"  # always: a.bin in L2
step "admit=reuse on adm/r" 20 setfattr -n user.tierfs.admit -v reuse "$mnt3/adm/r"
[[ "$(xget "$mnt3/adm/r/r.bin" user.tierfs.admit)" == reuse ]] || fail "admit not inherited"
pb0="$(stat_of "$mnt3" admit.probation)"
cat_all "$mnt3/adm/r/r.bin"
# L2 has room: the first read stores r.bin, as probationary (it could not evict a protected block).
wait_residency "$mnt3/adm/r/r.bin" "l2=2/2"
(( $(stat_of "$mnt3" admit.probation) - pb0 == 2 )) || fail "reuse: r.bin not stored as probationary"
step "evict adm/r/r.bin" 20 setfattr -n user.tierfs.evict -v 1 "$mnt3/adm/r/r.bin"
gh0="$(stat_of "$mnt3" admit.ghost_hits)"
cat_all "$mnt3/adm/r/r.bin"
wait_residency "$mnt3/adm/r/r.bin" "l2=2/2"  # reuse: r.bin stored protected on its second read
(( $(stat_of "$mnt3" admit.ghost_hits) - gh0 == 2 )) || fail "reuse: no ghost hits counted"
log "ok admission: never kept n.bin out of L2, always stored a.bin, reuse stored r.bin as probationary, then protected on its second read"
tierfs_umount "$mnt3" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }

# ---- projected reads: 25% and 90% of a file in scattered 16-64 KiB ranges ----
# proj_read FILE SEED FRACTION [LO HI]: cuts FILE (an s3put.py pattern of that seed) into
# consecutive pieces of LO-HI bytes (16-64 KiB, unaligned), reads FRACTION of it in a random share
# of them in random order (plain pread, as bench/policy.py's ranges), checks every byte, prints
# "BYTES READS".
proj_read() {
  "$PY" - "$1" "$2" "$3" "$E2E_DIR" "${4:-16384}" "${5:-65536}" <<'PYEOF'
import os, random, sys
sys.path.insert(0, sys.argv[4])
from s3put import pattern
path, seed, fraction = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lo, hi = int(sys.argv[5]), int(sys.argv[6])
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
want = pattern(size, seed)
rng = random.Random(7)
pieces, off = [], 0
while off < size:
    n = min(rng.randint(lo, hi), size - off)
    pieces.append((off, n))
    off += n
rng.shuffle(pieces)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
done = reads = 0
for off, n in pieces:
    if done + n > size * fraction:
        break
    got = os.pread(fd, n, off)
    if got != want[off:off + n]:
        sys.exit(f"wrong bytes at {off}+{n}")
    done += n
    reads += 1
os.close(fd)
print(done, reads)
PYEOF
}
# proj_check MNT FILE SEED FRACTION MAX_PERCENT [LO HI]: proj_read on a fresh mount's FILE; fails
# when the origin moved more than MAX_PERCENT of the bytes read. Sets read_b, reads, ob.
proj_check() {
  local o0 out
  o0="$(stat_of "$1" origin.bytes)"
  out="$(proj_read "$2" "$3" "$4" "${6:-16384}" "${7:-65536}")" || fail "projected reads of $2: $out"
  read -r read_b reads <<<"$out"
  ob=$(( $(stat_of "$1" origin.bytes) - o0 ))
  (( ob * 100 <= read_b * $5 )) || fail "projected reads of $4 of $2: $ob origin bytes for $read_b read in $reads reads (> $5%): $(stats_xattr "$1")"
}
mnt4="$E2E_WORK/mnt4" cache4="$E2E_WORK/cache4"
pf_mount "s3://$BUCKET" "$mnt4" "$cache4" "$logf" --endpoint "$S3_ENDPOINT" --l1-size 8MiB --l2-size 64MiB
proj_check "$mnt4" "$mnt4/proj/c.bin" 50 0.25 130
(( $(stat_of "$mnt4" sparse.fetches) > 0 )) || fail "projected reads: no sparse fetch"
# (Hydration is decided on the read that starts it: none was.)
(( $(stat_of "$mnt4" fuse.random_hydrations) == 0 )) || fail "25% of c.bin was hydrated"
log "ok projected reads: $read_b bytes read in $reads reads, $ob from the origin ($(( ob * 100 / read_b ))%), byte-exact"
tierfs_umount "$mnt4" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
pf_mount "s3://$BUCKET" "$mnt4" "$cache4" "$logf" --endpoint "$S3_ENDPOINT" --l1-size 8MiB --l2-size 64MiB
r0="$(stat_of "$mnt4" origin.requests)"
proj_read "$mnt4/proj/c.bin" 50 0.25 >/dev/null || fail "projected reads after a remount"
(( $(stat_of "$mnt4" origin.requests) == r0 )) || fail "projected reads after a remount went to the origin"
(( $(stat_of "$mnt4" sparse.hits) > 0 )) || fail "projected reads after a remount: no sparse hit"
log "ok projected reads after a remount: from L2, no origin request"
tierfs_umount "$mnt4" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
# 25% of a 64 MiB file: more reads than the 256 small misses that once hydrated a file.
pf_mount "s3://$BUCKET" "$mnt4" "$E2E_WORK/cache6" "$logf" --endpoint "$S3_ENDPOINT" --l1-size 8MiB \
  --l2-size 192MiB
proj_check "$mnt4" "$mnt4/proj/big.bin" 51 0.25 130
(( reads > 256 )) || fail "25% of big.bin took only $reads reads"
(( $(stat_of "$mnt4" fuse.random_hydrations) == 0 )) || fail "25% of big.bin was hydrated"
log "ok 25% of a 64 MiB file: $read_b bytes in $reads reads, $ob from the origin ($(( ob * 100 / read_b ))%)"
tierfs_umount "$mnt4" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
# 90% of it: hydrated, whole in L2; the hydration fetched only what the reads had not.
pf_mount "s3://$BUCKET" "$mnt4" "$E2E_WORK/cache7" "$logf" --endpoint "$S3_ENDPOINT" --l1-size 8MiB \
  --l2-size 192MiB
o0="$(stat_of "$mnt4" origin.bytes)"
proj_check "$mnt4" "$mnt4/proj/big.bin" 51 0.9 200
(( $(stat_of "$mnt4" fuse.random_hydrations) == 1 )) || fail "90% of big.bin was not hydrated"
wait_residency "$mnt4/proj/big.bin" "l2=64/64"
ob=$(( $(stat_of "$mnt4" origin.bytes) - o0 ))
(( ob * 100 <= read_b * 115 )) || fail "90% of big.bin: $ob origin bytes for $read_b read (> 115%): $(stats_xattr "$mnt4")"
(( $(stat_of "$mnt4" sparse.gap_fills) > 0 )) || fail "90% of big.bin: no block filled from its gaps"
log "ok 90% of a 64 MiB file: hydrated, l2=64/64, $ob origin bytes for $read_b read ($(( ob * 100 / read_b ))%)"
tierfs_umount "$mnt4" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
# A file the host tiers cannot keep while a random reader comes back to it (64 MiB, as large as
# L2) is not hydrated: 2% of it in 4 KiB reads (more than the 256 page misses that hydrate a
# file L2 can keep) and then 90% of it in ranges each move about what they read, where hydrating
# it had blocks fetched, evicted before they were read and fetched again.
pf_mount "s3://$BUCKET" "$mnt4" "$E2E_WORK/cache9" "$logf" --endpoint "$S3_ENDPOINT" --l1-size 8MiB \
  --l2-size 64MiB
proj_check "$mnt4" "$mnt4/proj/big.bin" 51 0.02 130 4096 4096
(( reads > 256 )) || fail "2% of big.bin in 4 KiB reads took only $reads reads"
page_log="$read_b bytes in $reads reads, $ob from the origin"
proj_check "$mnt4" "$mnt4/proj/big.bin" 51 0.9 130
(( $(stat_of "$mnt4" fuse.random_hydrations) == 0 )) || fail "big.bin, as large as L2, was hydrated"
log "ok a file as large as L2 is not hydrated: 4 KiB reads $page_log; 90% in ranges $read_b bytes, $ob from the origin ($(( ob * 100 / read_b ))%)"
tierfs_umount "$mnt4" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
# 25% of each of four 4 MiB files in ranges: projected too (the handle's first read is not at
# offset 0); a fifth file read from its start is fetched whole with one request.
pf_mount "s3://$BUCKET" "$mnt4" "$E2E_WORK/cache8" "$logf" --endpoint "$S3_ENDPOINT" --l1-size 8MiB \
  --l2-size 64MiB
small_read=0 small_ob=0
for i in 1 2 3 4; do
  proj_check "$mnt4" "$mnt4/proj/small/s$i.bin" $((60 + i)) 0.25 130
  small_read=$((small_read + read_b)) small_ob=$((small_ob + ob))
done
(( $(stat_of "$mnt4" fetch.whole_objects) == 0 )) || fail "a 4 MiB file read in ranges was fetched whole"
r0="$(stat_of "$mnt4" origin.requests)"
cmp <(cat "$mnt4/proj/small/s5.bin") <("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); from s3put import pattern; sys.stdout.buffer.write(pattern(4 << 20, 65))' "$E2E_DIR") ||
  fail "s5.bin: wrong bytes"
(( $(stat_of "$mnt4" origin.requests) - r0 == 1 )) ||
  fail "s5.bin read from its start: $(( $(stat_of "$mnt4" origin.requests) - r0 )) origin requests, want 1 (the whole file)"
log "ok 25% of four 4 MiB files: $small_ob origin bytes for $small_read read ($(( small_ob * 100 / small_read ))%); one read from its start: one request"
tierfs_umount "$mnt4" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
printf '[cache]\nsparse_read_max = 0\n' >"$cfg"
pf_mount "s3://$BUCKET" "$mnt4" "$E2E_WORK/cache5" "$logf" --endpoint "$S3_ENDPOINT" --l1-size 8MiB \
  --l2-size 64MiB --config "$cfg"
proj_check "$mnt4" "$mnt4/proj/c.bin" 50 0.25 100000
(( $(stat_of "$mnt4" sparse.fetches) == 0 )) || fail "sparse_read_max = 0 still fetched sparse"
(( ob > 2 * read_b )) || fail "sparse_read_max = 0: only $ob origin bytes for $read_b read"
log "ok sparse_read_max = 0: whole blocks, $ob origin bytes for $read_b read"
tierfs_umount "$mnt4" "$TIERFS_PID" || { print_log_tail "$logf"; fail "unclean unmount"; }
