# larder mount of plain files and of a node cache others can write
# (docs/mount.md, docs/security.md): a file rewritten in place at the
# same size between two mounts is read as it is now, not as the cache
# kept it (also with its old modification time put back); a byte flipped
# in the cache's data file after staging is never served by a fresh
# mount; a live mount is not mounted over through another spelling of
# its path; the listing's private directory is 0700 (with a node daemon
# too) and one a kill -9 left is cleared by the next mount.  Expected
# bytes are the source files themselves.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)

# 1. a file changed between mounts: the new bytes, not the cached ones
mkdir run
head -c 300000 /dev/urandom >run/ckpt.bin
head -c 5000 /dev/urandom >run/other.bin
mount_larder p run --cache "$WORK/cache-p"
cmp run/ckpt.bin mnt-p/ckpt.bin || fail "first mount: ckpt.bin differs"
umount_larder p
cp run/ckpt.bin old.bin
head -c 300000 /dev/urandom | dd of=run/ckpt.bin conv=notrunc status=none
cmp -s run/ckpt.bin old.bin && fail "the test did not change ckpt.bin"
mount_larder p run --cache "$WORK/cache-p"
cmp run/ckpt.bin mnt-p/ckpt.bin || fail "ckpt.bin rewritten at the same size: stale bytes served"
umount_larder p
# again, with the old modification time put back after the rewrite
cp run/ckpt.bin old.bin
touch -r run/ckpt.bin stamp
head -c 300000 /dev/urandom | dd of=run/ckpt.bin conv=notrunc status=none
touch -r stamp run/ckpt.bin
mount_larder p run --cache "$WORK/cache-p"
cmp run/ckpt.bin mnt-p/ckpt.bin || fail "rewritten with its old mtime: stale bytes served"
cmp run/other.bin mnt-p/other.bin || fail "the unchanged file"
umount_larder p
echo "plain files changed between mounts: read as they are now"

# 2. a byte flipped in the cache's data file after staging (by a user who
# can write the cache): a fresh mount serves the right bytes, fetched
# again from the origin, or fails; never the flipped byte
make_tree small 12
"$LARDER" pack small -o packed --shard-size 10M >/dev/null
mount_larder c packed/index.larder --cache "$WORK/cache-c"
for f in small/*; do cmp "$f" "mnt-c/${f#small/}" || fail "staging read of $f"; done
umount_larder c
data=$(find "$WORK/cache-c" -name '*.data' | head -1)
[ -n "$data" ] || fail "no data file in the cache: $(find "$WORK/cache-c")"
at=$("$LARDER" inspect packed/index.larder --sample sample00005 --json | /usr/bin/python3 -c '
import json, sys
i = json.load(sys.stdin)
f = [f for f in i["fields"] if f["name"] == "jpg"][0]
print(i["offset"] + f["offset"] + f["length"] // 2)')
/usr/bin/python3 - "$data" "$at" <<'PY'
import sys
path, at = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0xFF]))
PY
mount_larder c packed/index.larder --cache "$WORK/cache-c"
if cat mnt-c/sample00005.jpg >got.jpg 2>err.txt; then
  cmp small/sample00005.jpg got.jpg || fail "the flipped byte in the cache was served"
else
  grep -q "Input/output error" err.txt || fail "damaged cache: $(cat err.txt), want EIO"
fi
cmp small/sample00005.jpg mnt-c/sample00005.jpg || fail "not put right from the origin"
cmp small/sample00006.jpg mnt-c/sample00006.jpg || fail "a sample beside the damaged one"
umount_larder c
grep -q "do not match its checksum" mnt-c.log || fail "the log does not say why: $(cat mnt-c.log)"
echo "a byte flipped in the cache: not served"

# 3. a live mount is not mounted over, however its path is spelled
mount_larder live run --cache "$WORK/cache-live"
ln -s mnt-live link-live
mkdir -p sub
for spelled in "mnt-live/" "$WORK/mnt-live/" "link-live" "sub/../mnt-live"; do
  expect_error 1 "mounted there already" "$LARDER" mount run "$spelled" --cache "$WORK/cache-live"
done
[ "$(grep -c " $WORK/mnt-live fuse" /proc/self/mounts)" -eq 1 ] || fail "mounted twice at mnt-live"
cmp run/ckpt.bin mnt-live/ckpt.bin || fail "the live mount after the refusals"
umount_larder live
echo "a live mount: refused under other spellings of its path"

# 4. the listing's private directory: 0700 without a daemon and with a
# daemon of this user; one left by a kill -9 is cleared by the next mount
mkdir tmp
TMPDIR=$WORK/tmp mount_larder t run --cache "$WORK/cache-t"
dir=$(ls -d tmp/larder-mount-* | head -1)
[ -n "$dir" ] || fail "no listing directory under \$TMPDIR"
[ "$(stat -c %a "$dir")" = 700 ] || fail "$dir is $(stat -c %a "$dir"), want 700"
# removed as the mount process ends, just after its last log line
tmp_cleared() {
  for _ in $(seq 100); do [ -z "$(ls tmp)" ] && return; sleep 0.05; done
  fail "left behind at unmount: $(ls tmp)"
}
umount_larder t
tmp_cleared
sock=$WORK/sock
"$BUILD_ABS/larderd" --cache "$WORK/dcache" --socket "$sock" 2>>daemon.log &
dpid=$!
cleanup_hooks+=("kill $dpid 2>/dev/null; wait $dpid 2>/dev/null")
for _ in $(seq 100); do "$LARDER" names --socket "$sock" >/dev/null 2>&1 && break; sleep 0.05; done
TMPDIR=$WORK/tmp mount_larder t run --socket "$sock" --cache "$WORK/dcache"
dir=$(ls -d tmp/larder-mount-* | head -1)
[ "$(stat -c %a "$dir")" = 700 ] || fail "with a daemon of this user: $(stat -c %a "$dir"), want 700"
cmp run/ckpt.bin mnt-t/ckpt.bin || fail "through the daemon"
umount_larder t
tmp_cleared
mkdir -p mnt-k
TMPDIR=$WORK/tmp "$LARDER" mount run mnt-k --foreground 2>mnt-k.log &
kpid=$!
cleanup_hooks+=("is_mounted $WORK/mnt-k && fusermount3 -u -z $WORK/mnt-k")
for _ in $(seq 100); do is_mounted "$WORK/mnt-k" && break; sleep 0.05; done
is_mounted "$WORK/mnt-k" || fail "foreground mount did not come up: $(cat mnt-k.log)"
kill -9 "$kpid"
wait "$kpid" 2>/dev/null || true
fusermount3 -u -z mnt-k
stale=$(ls -d tmp/larder-mount-*)
[ -n "$stale" ] || fail "kill -9 left nothing to clear (test broken)"
TMPDIR=$WORK/tmp mount_larder t run
[ ! -e "$stale" ] || fail "$stale not cleared by the next mount"
umount_larder t
echo "listing directories: 0700, cleared after a kill -9"
