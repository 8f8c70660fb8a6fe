# larder mount's FUSE passthrough (docs/mount.md "FUSE passthrough",
# src/mount/passthrough.c): a --files file the node cache holds whole is
# read by the kernel from the cache's data file, with no FUSE READ reaching
# the mount (its read counter stays 0 through cmp of every file, also cold
# from the page cache after drop_caches, and through mmap), byte-exact; a
# partly resident file, and every open of a file that an open served by
# the mount still holds, are served by the mount, byte-exact, and a later
# open of the file, whole by then, goes through passthrough (but not one the
# mount answered 64 MiB of reads of: the kernel keeps its pages); eviction set
# off by another process (a capacity set under an open passthrough file)
# does not touch that file's blocks, and does once it is closed (the
# control); a node-wide capacity (LARDER_NODE_CACHE_SIZE) means no
# passthrough; --no-passthrough and an unprivileged mount (a user namespace:
# the kernel refuses the backing ioctl) fall back and read right; a clean
# unmount and a kill -9 leave no FUSE connection (and with it no backing
# id) behind.  Needs root and a kernel with CONFIG_FUSE_PASSTHROUGH;
# skipped, with the reason, otherwise.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"
[ "$(id -u)" = 0 ] || skip "passthrough needs root (CAP_SYS_ADMIN for the backing ioctl)"

mkdir -p src/sub
head -c 20000000 /dev/urandom >src/big.bin # 20 MB: several checksum blocks
head -c 5242881 /dev/urandom >src/sub/mid.bin
head -c 100001 /dev/urandom >src/small.bin
head -c 1 /dev/urandom >src/one.bin
"$LARDER" index --files src -o files.larder >/dev/null

# stat_of NAME KEY: a counter (or the state) from the mount's stats file
stat_of() { sed -n "s/^$2 //p" "$WORK/mnt-$1/.larder-stats"; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# cmp_all NAME: every file of src/ equal through mnt-NAME
cmp_all() {
  for f in big.bin sub/mid.bin small.bin one.bin; do
    cmp "src/$f" "mnt-$1/$f" || fail "mnt-$1/$f differs from src/$f"
  done
}
# the FUSE connection (/sys/fs/fuse/connections/MINOR) of mnt-NAME: its device's minor
connection_of() { awk -v m="$WORK/mnt-$1" '$5 == m { split($3, d, ":"); print d[2] }' /proc/self/mountinfo; }
mountpoint -q /sys/fs/fuse/connections || mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null || true

# 1. whole in the cache: passthrough, no FUSE READ, byte-exact, also cold and mmapped
"$LARDER" warm files.larder --cache "$WORK/cache" >/dev/null
mount_larder whole files.larder --cache "$WORK/cache"
state=$(stat_of whole passthrough)
case $state in
  "off: the kernel does not offer"*) skip "this kernel has no FUSE passthrough: $state" ;;
  off:*) fail "passthrough off as root: $state" ;;
esac
cmp_all whole
[ "$(stat_of whole passthrough)" = active ] || fail "passthrough $(stat_of whole passthrough)"
[ "$(stat_of whole passthrough_opens)" -ge 4 ] || fail "$(stat_of whole passthrough_opens) passthrough opens, want 4"
[ "$(stat_of whole reads)" = 0 ] || fail "$(stat_of whole reads) FUSE reads reached the mount"
drop_caches
cmp_all whole
/usr/bin/python3 - "$WORK/mnt-whole/big.bin" <<'PY' || fail "mmap of a passthrough file"
import mmap, sys
with open(sys.argv[1], "rb") as f, open("src/big.bin", "rb") as g:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    assert m[:] == g.read()
PY
[ "$(stat_of whole reads)" = 0 ] || fail "cold from the page cache: $(stat_of whole reads) FUSE reads"
[ "$(stat_of whole passthrough_backing_ids)" = 0 ] || fail "backing ids left after every close"
[ "$(stat_of whole passthrough_pinned_files)" = 0 ] || fail "pins left after every close"
grep -q "FUSE passthrough in use" mnt-whole.log || fail "the log does not say passthrough is used"
umount_larder whole
echo "whole files: passthrough, 0 FUSE reads, byte-exact (cold and mmapped too)"

# 2. eviction under an open passthrough file: its blocks stay; the control:
# once it is closed, the same eviction takes them.  big.bin made whole by a
# read through the mount, the others not in the cache, so that warming them
# under a small capacity stores blocks and evicts
mount_larder evict files.larder --cache "$WORK/cache-evict"
cat mnt-evict/big.bin >/dev/null
data=$(ls "$WORK"/cache-evict/*/000000.data)
cmp src/big.bin "$data" || fail "shard 0's data file is not big.bin, whole"
/usr/bin/python3 - "$LARDER" "$WORK" <<'PY' || fail "eviction under an open passthrough file"
import os, subprocess, sys
larder, work = sys.argv[1], sys.argv[2]
want = open("src/big.bin", "rb").read()
fd = os.open(work + "/mnt-evict/big.bin", os.O_RDONLY)
stats = dict(l.split(" ", 1) for l in open(work + "/mnt-evict/.larder-stats").read().splitlines())
assert stats["passthrough_pinned_files"] == "1" and stats["passthrough_backing_ids"] == "1", stats
# another process sets a capacity far below the files and stores blocks: eviction runs
subprocess.run([larder, "warm", "files.larder", "--cache", work + "/cache-evict", "--cache-size",
                "4M"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
assert os.pread(fd, len(want) + 1, 0) == want, "read through the open file after eviction"
os.close(fd)
PY
cmp src/big.bin "$data" || fail "the held file's data file lost bytes to eviction"
# the cache evicts now: a new open is served by the mount, and reads right
fallbacks=$(stat_of evict passthrough_fallbacks)
cmp src/big.bin mnt-evict/big.bin || fail "big.bin after the capacity was set"
[ "$(stat_of evict passthrough_fallbacks)" -gt "$fallbacks" ] ||
  fail "an open in a cache that evicts went through passthrough"
"$LARDER" warm files.larder --cache "$WORK/cache-evict" --cache-size 4M >/dev/null 2>&1
cmp -s src/big.bin "$data" && fail "control: with no open file, eviction left big.bin's blocks"
cmp src/big.bin mnt-evict/big.bin || fail "big.bin after its blocks were evicted"
umount_larder evict
echo "eviction: blocks kept under an open passthrough file, evicted once it closed"

# a node-wide capacity over the cache directory (LARDER_NODE_CACHE_SIZE, which
# leaves DIR/node-share) may evict from any dataset there: no passthrough
LARDER_NODE_CACHE_SIZE=1G "$LARDER" warm files.larder --cache "$WORK/cache-share" >/dev/null
[ -e "$WORK/cache-share/node-share" ] || fail "LARDER_NODE_CACHE_SIZE left no node-share file"
mount_larder share files.larder --cache "$WORK/cache-share"
cmp_all share
[ "$(stat_of share passthrough_opens)" = 0 ] || fail "passthrough beside a node-wide capacity"
[ "$(stat_of share passthrough_fallbacks)" -ge 4 ] || fail "node-wide capacity: fallbacks"
umount_larder share
echo "a node-wide capacity: served by the mount, byte-exact"

# 3. partly resident: served by the mount, byte-exact; an open held through
# the mount keeps later opens there too; then passthrough once all are closed
mount_larder part files.larder --cache "$WORK/cache-part" --no-stage-on-open --readahead 1M
head -c 3000000 mnt-part/big.bin | cmp - <(head -c 3000000 src/big.bin) || fail "head of big.bin"
[ "$(stat_of part passthrough_opens)" = 0 ] || fail "a file not in the cache went through passthrough"
exec 3<"$WORK/mnt-part/big.bin" # partly resident at its open: served by the mount
cmp src/big.bin mnt-part/big.bin || fail "partly resident big.bin"
cmp src/big.bin mnt-part/big.bin || fail "big.bin while an open of the mount holds it"
[ "$(stat_of part passthrough_opens)" = 0 ] || fail "passthrough beside an open served by the mount"
[ "$(stat_of part passthrough_fallbacks)" -ge 3 ] || fail "fallbacks: $(stat_of part passthrough_fallbacks)"
reads=$(stat_of part reads)
[ "$reads" -gt 0 ] || fail "no FUSE reads for a file served by the mount"
exec 3<&-
sleep 0.2 # RELEASE is sent after close returns
drop_caches
cmp src/big.bin mnt-part/big.bin || fail "big.bin, whole by now"
[ "$(stat_of part passthrough_opens)" = 1 ] || fail "whole by now, yet $(stat_of part passthrough_opens) passthrough opens"
[ "$(stat_of part reads)" = "$reads" ] || fail "FUSE reads went on through passthrough"
umount_larder part
echo "partly resident: served by the mount, byte-exact; passthrough once whole"

# 3b. a file the mount has answered 64 MiB or more of reads of (whose pages
# the kernel keeps) stays served by the mount once whole: a passthrough open
# would have the kernel drop them all first; its pages serve the next read
mkdir -p src-paged
head -c 75000000 /dev/urandom >src-paged/huge.bin
"$LARDER" index --files src-paged -o paged.larder >/dev/null
mount_larder paged paged.larder --cache "$WORK/cache-paged" --no-stage-on-open
cmp src-paged/huge.bin mnt-paged/huge.bin || fail "huge.bin, read through the mount"
sleep 0.2 # RELEASE is sent after close returns
reads=$(stat_of paged reads)
cmp src-paged/huge.bin mnt-paged/huge.bin || fail "huge.bin, whole by now"
[ "$(stat_of paged passthrough_opens)" = 0 ] || fail "passthrough for a file whose pages the kernel keeps"
[ "$(stat_of paged passthrough_kept_paged)" -ge 1 ] ||
  fail "kept_paged $(stat_of paged passthrough_kept_paged)"
[ "$(stat_of paged reads)" = "$reads" ] || fail "the kept pages did not serve the second read"
umount_larder paged
# the control: the same whole file, read first through a fresh mount, goes through passthrough
mount_larder paged2 paged.larder --cache "$WORK/cache-paged" --no-stage-on-open
cmp src-paged/huge.bin mnt-paged2/huge.bin || fail "huge.bin through a fresh mount"
[ "$(stat_of paged2 passthrough_opens)" = 1 ] || fail "a fresh mount: $(stat_of paged2 passthrough_opens) passthrough opens"
umount_larder paged2
echo "read through the mount: kept there, its pages serving the next read; passthrough in a fresh mount"

# 4. --no-passthrough, and an unprivileged mount (a user namespace): the mount serves every read
mount_larder off files.larder --cache "$WORK/cache-off" --no-passthrough
cmp_all off
[ "$(stat_of off passthrough)" = "off: --no-passthrough" ] || fail "state $(stat_of off passthrough)"
[ "$(stat_of off reads)" -gt 0 ] || fail "--no-passthrough: no FUSE reads"
umount_larder off
mkdir -p mnt-userns
if unshare -U -r -m true 2>/dev/null; then
  unshare -U -r -m bash -c "
    '$LARDER' mount files.larder mnt-userns --cache '$WORK/cache-off' --log mnt-userns.log || exit 3
    for f in big.bin sub/mid.bin small.bin one.bin; do cmp src/\$f mnt-userns/\$f || exit 1; done
    cat mnt-userns/.larder-stats >userns-stats.txt
    fusermount3 -u mnt-userns" || fail "an unprivileged mount (user namespace): status $?"
  grep -q "^passthrough off: the kernel refused a backing file" userns-stats.txt ||
    fail "user namespace: $(cat userns-stats.txt)"
  grep -q "^passthrough_opens 0" userns-stats.txt || fail "user namespace: passthrough opens"
  echo "unprivileged (user namespace): the backing ioctl refused, the mount serves, byte-exact"
else
  echo "no user namespaces here: the unprivileged case not run"
fi

# 5. no FUSE connection (and so no backing id) left by an unmount or a kill -9
mount_larder gone files.larder --cache "$WORK/cache"
conn=$(connection_of gone)
[ -n "$conn" ] || fail "mnt-gone not in mountinfo"
pid=$(pgrep -n -f "mount files.larder $WORK/mnt-gone") || fail "the mount's process"
/usr/bin/python3 - "$WORK/mnt-gone/small.bin" "$pid" <<'PY' || fail "kill -9 under an open passthrough file"
import os, signal, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
want = open("src/small.bin", "rb").read()
os.kill(int(sys.argv[2]), signal.SIGKILL)
time.sleep(0.3)
# the kernel keeps reading the backing file it holds for an open file
assert os.pread(fd, len(want) + 1, 0) == want
os.close(fd)
PY
for _ in $(seq 50); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
expect_error 1 "fusermount3 -u" "$LARDER" mount files.larder mnt-gone --cache "$WORK/cache"
"$LARDER" mount files.larder mnt-gone --cache "$WORK/cache" --log mnt-gone.log --force-unmount-stale 2>/dev/null ||
  fail "remount after kill -9"
[ -d "/sys/fs/fuse/connections/$conn" ] && [ "$(connection_of gone)" != "$conn" ] &&
  fail "the killed mount's FUSE connection $conn is still there"
cmp src/small.bin mnt-gone/small.bin || fail "small.bin after the remount"
conn=$(connection_of gone)
umount_larder gone
if mountpoint -q /sys/fs/fuse/connections; then
  [ -d "/sys/fs/fuse/connections/$conn" ] && fail "FUSE connection $conn left after the unmount"
fi
echo "unmount and kill -9: no FUSE connection left"
