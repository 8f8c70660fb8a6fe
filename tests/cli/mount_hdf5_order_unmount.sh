# Unmounting while registered row orders still wait to list their file
# (docs/mount.md "A registered row order for an HDF5 file"): one listing
# runs at a time, so with the origin holding every read, rank 0's listing
# waits on it and ranks 1-7 wait for their turn.  The mount is unmounted,
# and only then is the origin let go.  Each waiting listing, when its turn
# came, looked among the other orders for one already listed -- orders
# that the unmount had freed one by one (found by review: ASan's
# heap-use-after-free in listed_before).  Now the mount process must end
# with status 0 and no sanitizer report, whichever build runs it.  The
# mount runs in the foreground here, so that its exit status and stderr
# (where ASan reports) are this test's to see.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"

mkdir -p www/shard-files
/usr/bin/python3 - <<'PY'
import h5py, numpy as np
with h5py.File("www/shard-files/samples.h5", "w") as f:
    for i in range(2000):
        f.create_group("s%06d" % i).create_dataset("x", data=np.full(16, i, dtype=np.float32))
PY
"$LARDER" index --files www/shard-files -o www/files.larder --checksum-block 64K >/dev/null

start_gated_origin www # every read of the file held from the start
mnt=$WORK/mnt-u
mkdir -p "$mnt"
cleanup_hooks+=("is_mounted $mnt && { fusermount3 -u $mnt 2>/dev/null || fusermount3 -u -z $mnt; }")
"$LARDER" mount "$gated_base/files.larder" "$mnt" --cache "$WORK/cache-u" --no-stage-on-open \
  -f >mnt-u.out 2>mnt-u.err &
pid=$!
cleanup_hooks+=("kill $pid 2>/dev/null")
for _ in $(seq 200); do is_mounted "$mnt" && break; sleep 0.05; done
is_mounted "$mnt" || fail "not mounted: $(cat mnt-u.err)"

/usr/bin/python3 - "$mnt" "$gated_base" <<'PY' || fail "registering: $(tail -5 mnt-u.err)"
import json, os, sys, time, urllib.request
mnt, base = sys.argv[1], sys.argv[2]
for rank in range(8):
    fd = os.open(mnt + "/.larder-order", os.O_WRONLY)
    os.write(fd, b"file=samples.h5 sampler=torch seed=1 epoch=0 rank=%d world=8 batch=8" % rank)
    os.close(fd)
# rank 0's listing has asked the origin, and waits on it
for _ in range(200):
    if json.loads(urllib.request.urlopen(base + "/__log", timeout=10).read()):
        break
    time.sleep(0.05)
else:
    sys.exit("the listing never asked the origin")
PY
fusermount3 -u "$mnt" || fail "fusermount3 -u $mnt"
for _ in $(seq 100); do grep -q "unmounted" mnt-u.err && break; sleep 0.05; done
grep -q "unmounted" mnt-u.err || fail "the mount did not log its unmount: $(tail -5 mnt-u.err)"
sleep 0.5 # the process goes on to free its orders; the listing still waits on the origin
curl -s "$gated_base/__release/all" >/dev/null || fail "releasing the origin"
status=0
wait $pid || status=$?
grep -q "Sanitizer" mnt-u.err && fail "the mount's end: $(grep -A6 Sanitizer mnt-u.err | head -20)"
[ $status -eq 0 ] || fail "the mount ended with status $status: $(tail -20 mnt-u.err)"
echo "unmounted with 8 listings waiting: the mount ended cleanly"
