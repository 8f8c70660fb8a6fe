# A registered row order for one HDF5 file (docs/mount.md "A registered
# row order for an HDF5 file"), with a real mount over an HTTP origin that
# logs every read (tests/tools/gated_origin.py, all let go).  An h5py file
# of one group per sample is mounted without staging on open; a rank
# registers torch's DistributedSampler order for it; before anything is
# read, the blocks the origin is asked for are exactly those holding the
# first `window` steps of that rank's members -- the order computed here
# by torch itself, each member's bytes from its object header (h5py's
# where h5py's own reads of it go: its object header and its datasets'
# headers (h5o.get_info) and data (get_offset), its group's B-tree, node and
# heap, and the root group's nodes a lookup of it reads (the last two parsed
# here from the format's spec) -- in the index's 64 KiB checksum blocks,
# besides the listing's own 16 KiB reads, and no member's header is read
# from the origin but in those fills.  Reading the first step through h5py moves the registration on
# and stages the next; the file reads back byte-exact; registrations that
# name no file, an unknown sampler or a file that is not HDF5 are refused
# or reported.  The same for the rows of a contiguous and of a chunked
# 2-D dataset (dataset=PATH; offsets from h5py's get_offset and
# get_chunk_info); a compressed dataset's rows are refused.  Order and
# counts are checked, never time.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"
export PYTHONPATH=$TESTS/tools

mkdir -p src www
/usr/bin/python3 - <<'PY'
import h5py, numpy as np
with h5py.File("src/samples.h5", "w") as f:
    for i in range(200):
        g = f.create_group("s%06d" % i)
        g.create_dataset("x", data=np.full(25000, i, dtype=np.float32))  # 100 KB
        g.create_dataset("y", data=np.arange(i, i + 10))
open("src/notes.bin", "wb").write(bytes(300000))
with h5py.File("src/rows.h5", "w") as f:  # rows of 2-D datasets as samples
    f.create_dataset("images", data=np.arange(400 * 16384, dtype=np.float32).reshape(400, 16384))
    f.create_dataset("chunked", data=np.ones((400, 4096), dtype=np.float32), chunks=(10, 4096))
    f.create_dataset("zipped", data=np.zeros((400, 256), dtype=np.float32), chunks=(10, 256),
                     compression="gzip")
PY
cp -r src www/shard-files
# 64 KiB checksum blocks: what is staged is each extent's own 64 KiB blocks
# (with the default's 1 MiB, the MiBs holding them)
"$LARDER" index --files www/shard-files -o www/files.larder --checksum-block 64K >/dev/null

start_gated_origin www
base=$gated_base
curl -s "$base/__release/all" >/dev/null

mount_larder o "$base/files.larder" --cache "$WORK/cache-o" --no-stage-on-open
/usr/bin/python3 - "$base" <<'PY' || fail "registered order: $(tail -5 mnt-o.log)"
import json, os, sys, time, urllib.request
import h5py, torch.utils.data as tud
base = sys.argv[1]
BLOCK = 64 << 10  # the index's checksum block (--checksum-block 64K)
N, SEED, EPOCH, WORLD, BATCH, WINDOW = 200, 3, 1, 2, 8, 2
local = BATCH // WORLD

class Items:
    def __len__(self):
        return N
sampler = tud.distributed.DistributedSampler(Items(), num_replicas=WORLD, rank=0, shuffle=True,
                                             seed=SEED)
sampler.set_epoch(EPOCH)
order = list(sampler)
size = os.path.getsize("src/samples.h5")
with h5py.File("src/samples.h5", "r") as f:
    address = [h5py.h5o.get_info(f["s%06d" % i].id).addr for i in range(N)]
raw = open("src/samples.h5", "rb").read()
def le(at, n):
    return int.from_bytes(raw[at:at + n], "little")
# The HDF5 format (version-1 object headers, v1 B-trees, symbol-table nodes),
# read here from the spec: where a reader's lookup of member i reads (the
# root group's symbol-table node holding its entry and the B-tree node above
# it) and the member group's own metadata (its B-tree, symbol-table node and
# local heap), besides what h5py reports: the headers and the data.
snod_of, parent_of = {}, {}
at = raw.find(b"SNOD")
while at >= 0:
    for k in range(le(at + 6, 2)):
        snod_of.setdefault(le(at + 8 + 40 * k + 8, 8), at)
    at = raw.find(b"SNOD", at + 1)
at = raw.find(b"TREE")
while at >= 0:
    if raw[at + 4] == 0 and raw[at + 5] == 0:
        for k in range(le(at + 6, 2)):
            parent_of.setdefault(le(at + 32 + 16 * k, 8), at)
    at = raw.find(b"TREE", at + 1)
def own_metadata(header):  # (offset, length) of a group's B-tree, symbol-table node, heap
    out, at, end = [], header + 16, header + 16 + le(header + 8, 4)
    for _ in range(le(header + 2, 2)):
        kind, n = le(at, 2), le(at + 2, 2)
        if kind == 0x11:
            tree, heap = le(at + 8, 8), le(at + 16, 8)
            out += [(tree, 24 + 16 * le(tree + 6, 2) + 8), (heap, 32),
                    (le(heap + 24, 8), le(heap + 8, 8))]
            snod = le(tree + 32, 8)
            out.append((snod, 8 + 40 * le(snod + 6, 2)))
        at += 8 + n
        if at >= end:
            break
    return out
with h5py.File("src/samples.h5", "r") as f:
    extents = {}
    for i in range(N):
        g = f["s%06d" % i]
        e = [(address[i], 1)] + own_metadata(address[i])
        # what libhdf5 reads of them (the format's sizes with h5py's K of 4 and 16)
        e += [(snod_of[address[i]], 8 + 2 * 4 * 40),
              (parent_of[snod_of[address[i]]], 24 + 2 * 16 * 8 + (2 * 16 + 1) * 8)]
        for name in ("x", "y"):
            e += [(h5py.h5o.get_info(g[name].id).addr, 1),
                  (g[name].id.get_offset(), g[name].id.get_storage_size())]
        extents[i] = e
def blocks_of(members):
    out = set()
    for i in members:
        for a, n in extents[i]:
            out.update(range(a // BLOCK, (a + max(n, 1) - 1) // BLOCK + 1))
    return out

def fills():  # the blocks the origin was asked to fill: reads other than the listing's
    out = set()  # 16 KiB pages and a member's 4 KiB reads (fills are whole 64 KiB blocks)
    for path, rng in json.load(urllib.request.urlopen(base + "/__log", timeout=10)):
        first, last = map(int, rng.split("=")[1].split("-"))
        if path.endswith("/samples.h5") and last + 1 - first >= 64 * 1024:
            out.update(range(first // BLOCK, last // BLOCK + 1))
    return out

def control():
    return open("mnt-o/.larder-order").read()

def field(text, name):
    return int(text.split(name + "=")[1].split()[0])

with open("mnt-o/.larder-order", "w") as f:
    f.write("file=samples.h5 sampler=torch seed=%d epoch=%d rank=0 world=%d batch=%d window=%d\n"
            % (SEED, EPOCH, WORLD, BATCH, WINDOW))
want = blocks_of(order[:WINDOW * local])
for _ in range(400):
    text = control()
    if "listing" not in text and field(text, "staged") == WINDOW * local and fills() >= want:
        break
    time.sleep(0.05)
else:
    raise SystemExit("the first window was not staged: %s, fills %s, want %s"
                     % (control(), sorted(fills()), sorted(want)))
time.sleep(0.5)
text = control()
assert "members=%d" % N in text and field(text, "read") == 0, text
assert fills() == want, "fills %s, want the first window's blocks %s" % (sorted(fills()), sorted(want))
print("registered: the origin filled exactly the blocks of the first %d members (%s)"
      % (WINDOW * local, sorted(want)))
# a member's own metadata (its header first) is read through the cache, in
# the fills above: no read of less than a block starts at a window member's
# object header (unchecked reads of 4 KiB from the origin did, one a node)
small = [(first, last) for path, rng in json.load(urllib.request.urlopen(base + "/__log", timeout=10))
         if path.endswith("/samples.h5")
         for first, last in [tuple(map(int, rng.split("=")[1].split("-")))]
         if last + 1 - first < BLOCK]
headers = {address[i] for i in order[:WINDOW * local]}
unchecked = [r for r in small if r[0] in headers]
assert not unchecked, "members' headers read outside the cache's fills: %s" % unchecked
# each member's 100 KB of data (two or three 64 KiB blocks) came in one origin
# read, not one per block (a fill reads its run of missing blocks at once)
reads = [tuple(map(int, rng.split("=")[1].split("-")))
         for path, rng in json.load(urllib.request.urlopen(base + "/__log", timeout=10))
         if path.endswith("/samples.h5")]
window = order[:WINDOW * local]
alone = 0  # members whose data shares no block with any other extent staged
with h5py.File("src/samples.h5", "r") as f:
    for i in window:
        a = f["s%06d" % i]["x"].id.get_offset()
        e = a + f["s%06d" % i]["x"].id.get_storage_size()
        mine = set(range(a // BLOCK, (e - 1) // BLOCK + 1))
        others = set()
        for j in window:
            for b, n in extents[j]:
                if (b, n) != (a, e - a):
                    others.update(range(b // BLOCK, (b + max(n, 1) - 1) // BLOCK + 1))
        if mine & others:
            continue
        alone += 1
        assert any(first <= a // BLOCK * BLOCK and e - 1 <= last for first, last in reads), \
            "member %d's data [%d, %d) was not read in one piece: %s" % (i, a, e, sorted(reads))
assert alone > 0, "no member's data stands alone: the test's file needs another layout"
print("the data of %d members, each in one origin read" % alone)

# the first step, read as the DataLoader would
with h5py.File("mnt-o/samples.h5", "r") as f:
    for i in order[:local]:
        assert f["s%06d" % i]["x"][0] == i and list(f["s%06d" % i]["y"][()]) == list(range(i, i + 10))
for _ in range(400):  # staging is queued first, then reaches the origin
    text = control()
    read = field(text, "read")
    if (read >= local and field(text, "staged") == min(len(order), read + WINDOW * local)
            and fills() >= blocks_of(order[:read + WINDOW * local])):
        break
    time.sleep(0.05)
else:
    raise SystemExit("the order did not move on, or its next window was not staged: %s; "
                     "fills %s" % (control(), sorted(fills())))
print("after a step: read=%d, staged=%d" % (read, field(text, "staged")))
PY
cmp src/samples.h5 mnt-o/samples.h5 || fail "samples.h5 read through the mount differs"

# rows of a contiguous and of a chunked dataset (uncompressed), as h5py places them
/usr/bin/python3 - "$base" <<'PY' || fail "row orders: $(tail -5 mnt-o.log)"
import json, os, sys, time, urllib.request
import h5py, torch.utils.data as tud
base = sys.argv[1]
BLOCK = 64 << 10  # the index's checksum block
with h5py.File("src/rows.h5", "r") as f:
    images = f["images"].id.get_offset()
    image_row = 16384 * 4
    chunk_of = {}
    for k in range(f["chunked"].id.get_num_chunks()):
        info = f["chunked"].id.get_chunk_info(k)
        chunk_of[info.chunk_offset[0]] = info.byte_offset

def rows(dataset):
    if dataset == "/images":
        return lambda r: (images + r * image_row, images + (r + 1) * image_row)
    return lambda r: (chunk_of[r - r % 10] + (r % 10) * 16384,
                      chunk_of[r - r % 10] + (r % 10 + 1) * 16384)

def fills():
    out = set()
    for path, rng in json.load(urllib.request.urlopen(base + "/__log", timeout=10)):
        first, last = map(int, rng.split("=")[1].split("-"))
        if path.endswith("/rows.h5") and last + 1 - first >= 64 * 1024:
            out.update(range(first // BLOCK, last // BLOCK + 1))
    return out

class Items:
    def __len__(self):
        return 400
seen = set()
for dataset, seed in (("/images", 11), ("/chunked", 12)):
    sampler = tud.distributed.DistributedSampler(Items(), num_replicas=2, rank=1, shuffle=True,
                                                 seed=seed)
    order = list(sampler)  # epoch 0
    with open("mnt-o/.larder-order", "w") as f:
        f.write("file=rows.h5 dataset=%s sampler=torch seed=%d epoch=0 rank=1 world=2 batch=8 "
                "window=2\n" % (dataset, seed))
    want = set()
    for r in order[:8]:
        a, e = rows(dataset)(r)
        want.update(range(a // BLOCK, (e - 1) // BLOCK + 1))
    want -= seen  # blocks staged for the dataset before are resident: not asked again
    for _ in range(400):
        text = open("mnt-o/.larder-order").read()
        if "dataset=%s " % dataset in text and "staged=8 " in text and fills() - seen >= want:
            break
        time.sleep(0.05)
    else:
        raise SystemExit("%s: the first window was not staged: %s; fills %s, want %s"
                         % (dataset, text, sorted(fills() - seen), sorted(want)))
    time.sleep(0.5)
    assert fills() - seen == want, "%s: fills %s, want %s" % (dataset, sorted(fills() - seen),
                                                              sorted(want))
    assert "members=400 " in open("mnt-o/.larder-order").read()
    seen = fills()
    print("%s: the origin filled exactly the blocks of the rank's first 8 rows" % dataset)
with open("mnt-o/.larder-order", "w") as f:
    f.write("file=rows.h5 dataset=/zipped sampler=torch seed=1 epoch=0 rank=1 world=2 batch=8\n")
for _ in range(200):
    if "dataset=/zipped" in open("mnt-o/.larder-order").read() and \
            "compressed" in open("mnt-o.log").read():
        break
    time.sleep(0.05)
assert "failed" in [l for l in open("mnt-o/.larder-order").read().splitlines()
                    if "rows.h5" in l][0], "a compressed dataset's rows were ordered"
print("a compressed dataset's rows are refused")
PY
cmp src/rows.h5 mnt-o/rows.h5 || fail "rows.h5 read through the mount differs"

# registrations refused or reported
for line in "file=missing.h5 sampler=torch seed=1 epoch=0 rank=0 world=1 batch=4" \
  "file=samples.h5 sampler=plan seed=1 epoch=0 rank=0 world=1 batch=4" \
  "file=samples.h5 seed=1 epoch=0 rank=0 world=1 batch=4"; do
  if echo "$line" >mnt-o/.larder-order 2>/dev/null; then fail "accepted: $line"; fi
done
echo "file=notes.bin sampler=torch seed=1 epoch=0 rank=0 world=1 batch=4" >mnt-o/.larder-order
for _ in $(seq 200); do grep -q "file=notes.bin.* failed" mnt-o/.larder-order && break; sleep 0.05; done
grep -q "file=notes.bin.* failed" mnt-o/.larder-order || fail "notes.bin's order: $(cat mnt-o/.larder-order)"
grep -q "warning: order for notes.bin" mnt-o.log || fail "no warning for notes.bin: $(tail -3 mnt-o.log)"
cmp src/notes.bin mnt-o/notes.bin || fail "notes.bin differs"
umount_larder o
echo "bad registrations refused; a file that is not HDF5 reported; the mount stays up"
