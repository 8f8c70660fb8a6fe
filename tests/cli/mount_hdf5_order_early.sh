# A reader that starts before a registered row order's listing has ended
# still moves the order on (docs/mount.md "A registered row order for an
# HDF5 file"): a real mount over an HTTP origin that holds every read
# (tests/tools/gated_origin.py); the test holds the listing's first read
# (a 16 KiB page) and lets everything else go, reads the first steps' members
# of rank 0 with h5py through the mount while the listing waits, then lets
# the listing go.  The order's position ("read=" in .larder-order) must then
# count those places as read: they were read before the listing knew its
# members, and nothing reads them again (the kernel keeps their pages).
# Before the fix it stayed at 0 for good, and the order staged nothing past
# its first window.  The order is torch's DistributedSampler's, computed
# here by torch.  Counts, never time.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"

mkdir -p www/shard-files
/usr/bin/python3 - <<'PY'
import h5py, numpy as np
with h5py.File("www/shard-files/samples.h5", "w") as f:
    for i in range(200):
        g = f.create_group("s%06d" % i)
        g.create_dataset("x", data=np.full(25000, i, dtype=np.float32))  # 100 KB
PY
"$LARDER" index --files www/shard-files -o www/files.larder --checksum-block 64K >/dev/null

start_gated_origin www # everything held from the start
base=$gated_base
mount_larder e "$base/files.larder" --cache "$WORK/cache-e" --no-stage-on-open
/usr/bin/python3 - "$base" <<'PY' || fail "early reader: $(tail -5 mnt-e.log)"
import json, subprocess, sys, threading, time, urllib.request
import torch.utils.data as tud
base = sys.argv[1]
N, SEED, EPOCH, WORLD, BATCH, WINDOW, READ = 200, 3, 0, 2, 8, 2, 12
PAGE = 16384  # the listing's reads of the origin (hdf5_listing.c)
READER = '''
import sys, h5py
with h5py.File("mnt-e/samples.h5", "r") as f:
    for i in map(int, sys.argv[1:]):
        x = f["s%06d" % i]["x"][:]
        assert x.shape == (25000,) and (x == i).all(), "member %d read wrong" % i
'''

class Items:
    def __len__(self):
        return N
sampler = tud.distributed.DistributedSampler(Items(), num_replicas=WORLD, rank=0, shuffle=True,
                                             seed=SEED)
sampler.set_epoch(EPOCH)
order = list(sampler)

def get(path):
    return urllib.request.urlopen(base + path, timeout=10).read()

def requests():
    return [(path, tuple(map(int, rng.split("=")[1].split("-"))))
            for path, rng in json.loads(get("/__log"))]

def describe():
    return open("mnt-e/.larder-order").read()

stop, held = threading.Event(), set()
def let_go():  # every read but the listing's first page (and hedges repeating it)
    done, page = set(), None
    while not stop.is_set():
        for k, (path, (first, last)) in enumerate(requests()):
            if k in done or k in held:
                continue
            if page is None and last + 1 - first == PAGE:
                page = (first, last)  # held alone: the origin's connections stay free
            if (first, last) == page:
                held.add(k)
            else:
                get("/__release/%d" % k)
                done.add(k)
        time.sleep(0.02)
gate = threading.Thread(target=let_go)
gate.start()
try:
    with open("mnt-e/.larder-order", "w") as f:
        f.write("file=samples.h5 sampler=torch seed=%d epoch=%d rank=0 world=%d batch=%d "
                "window=%d\n" % (SEED, EPOCH, WORLD, BATCH, WINDOW))
    # h5py holds the GIL while libhdf5 reads: the reads in a process of their own
    subprocess.run([sys.executable, "-c", READER, *map(str, order[:READ])], check=True,
                   timeout=120)
    assert held, "the listing read nothing of the origin: %s" % requests()
    assert " listing" in describe(), "the listing ended before the reads: %s" % describe()
finally:
    stop.set()
    gate.join()
get("/__release/all")
for _ in range(400):
    text = describe()
    if " listing" not in text:
        break
    time.sleep(0.05)
position = int(text.split(" read=")[1].split()[0])
assert position >= READ, ("the %d places read before the listing ended were not counted: "
                          "%s" % (READ, text))
# nor more than were read: the rank's 100 places, or most of them, would
# be a replay that marks what nobody read
assert position < len(order) // 2, "the order counted places nobody read: %s" % text
# and the order stages on past its first window (it stopped there before)
want = min(position + WINDOW * (BATCH // WORLD), len(order))
for _ in range(400):
    text = describe()
    staged = int(text.split(" staged=")[1].split()[0])
    if staged >= want:
        break
    time.sleep(0.05)
assert staged >= want, (
    "the order did not stage a window past the places read: %s" % text)
print("read before the listing ended: the order's position is %d (>= %d), staged to %d"
      % (position, READ, staged))
PY
cmp www/shard-files/samples.h5 mnt-e/samples.h5 || fail "samples.h5 read through the mount differs"
umount_larder e
echo "reads made before the listing was ready move the order on"
