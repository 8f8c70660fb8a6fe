# HDF5 metadata first (docs/mount.md "HDF5 files: metadata first"), with a
# real mount over an HTTP origin that holds every read until the test lets
# it go (tests/tools/gated_origin.py).  A file made with h5py (contiguous
# and chunked datasets, one gzip-compressed, a group with an attribute)
# is mounted from a --files index with one staging read at a time: the
# metadata extents the mount logs equal the complement of the raw-data
# extents h5py reports (dset.id.get_offset / get_chunk_info, computed
# here), and every block holding them reaches the origin while the whole
# file's first staging read is still held.  Then files that lie: a
# dataset whose address points past the end of the file (the extent is
# clipped away, nothing outside the file is logged or read), a file cut
# short and one with only the signature (their scans fail with a
# warning), and one within the 5 MiB staged at once (not scanned); all
# read back byte-exact and the mount stays up.  Order and counts are checked, never time.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"
export PYTHONPATH=$TESTS/tools

# expected_metadata.py FILE [SIZE]: the complement in the file (of SIZE
# bytes, default its own) of its datasets' raw-data extents as h5py
# reports them, clipped to the file, one "OFFSET LENGTH" a line
cat >expected_metadata.py <<'PY'
import os, sys, h5py
path = sys.argv[1]
size = int(sys.argv[2]) if len(sys.argv) > 2 else os.path.getsize(path)
raw = []
def visit(name, obj):
    if not isinstance(obj, h5py.Dataset):
        return
    if obj.chunks is None:
        offset = obj.id.get_offset()
        if offset is not None:
            raw.append((offset, obj.id.get_storage_size()))
    else:
        for i in range(obj.id.get_num_chunks()):
            info = obj.id.get_chunk_info(i)
            raw.append((info.byte_offset, info.size))
with h5py.File(path, "r") as f:
    f.visititems(visit)
clipped = sorted((o, min(n, size - o)) for o, n in raw if o < size and n > 0)
at = 0
for o, n in clipped:
    if o > at:
        print(at, o - at)
    at = max(at, o + n)
if at < size:
    print(at, size - at)
PY

mkdir -p src www
/usr/bin/python3 - <<'PY'
import h5py, numpy as np
rng = np.random.default_rng(5)
with h5py.File("src/rows.h5", "w") as f:
    f.create_dataset("a_images", data=rng.random((3072, 1024), dtype=np.float32))  # 12 MiB
    f.create_dataset("b_chunked", data=rng.random((4000, 256), dtype=np.float32), chunks=(100, 256))
    f.create_dataset("c_zipped", data=np.tile(np.arange(256, dtype=np.float32), (2000, 1)),
                     chunks=(100, 256), compression="gzip")
    g = f.create_group("g")
    g.attrs["note"] = "a group with an attribute"
    g.create_dataset("small", data=np.arange(100))
    f.create_dataset("d_labels", data=np.arange(3072, dtype=np.int64))
PY
/usr/bin/python3 expected_metadata.py src/rows.h5 >expected.txt
[ "$(wc -l <expected.txt)" -ge 3 ] || fail "the generated file has too few metadata extents: $(cat expected.txt)"
# the whole file's first staging read ([4 MiB, 5 MiB)) holds no metadata, so the
# scan never waits on it
awk '{ if ($1 < 5242880 && $1 + $2 > 4194304) exit 1 }' expected.txt ||
  fail "metadata in [4 MiB, 5 MiB): the test's file needs another layout"
cp -r src www/shard-files
"$LARDER" index --files www/shard-files -o www/files.larder >/dev/null

start_gated_origin www
base=$gated_base

LARDER_MOUNT_TRACE=1 mount_larder h5 "$base/files.larder" --cache "$WORK/cache-h5" \
  --stage-on-open --stage-inflight 1
/usr/bin/python3 - "$base" <<'PY' || fail "metadata first: $(grep -v 'trace: miss' mnt-h5.log | tail -5)"
import json, os, sys, time, urllib.request
base = sys.argv[1]
MiB = 1 << 20
size = os.path.getsize("src/rows.h5")
expected = [tuple(map(int, line.split())) for line in open("expected.txt")]
blocks = sorted({b for o, n in expected for b in range(o // MiB, (o + n - 1) // MiB + 1)})

def raw_log():
    return json.load(urllib.request.urlopen(base + "/__log", timeout=10))

def span(rng):
    first, last = map(int, rng.split("=")[1].split("-"))
    return first, last + 1

warm = 4 * MiB  # the whole file's first staging read, at WARM after the head
released = set()
fd = os.open("mnt-h5/rows.h5", os.O_RDONLY)
deadline = time.time() + 60
while time.time() < deadline:  # let go of every read but the whole file's staging
    for i, (path, rng) in enumerate(raw_log()):
        if i not in released and span(rng)[0] != warm:
            urllib.request.urlopen(base + "/__release/%d" % i, timeout=10).read()
            released.add(i)
    log = open("mnt-h5.log").read()
    asked = [span(rng) for path, rng in raw_log()]
    covered = all(any(a <= b * MiB and min((b + 1) * MiB, size) <= e for a, e in asked)
                  for b in blocks)
    if "hdf5: sample" in log and covered:
        break
    time.sleep(0.05)
else:
    raise SystemExit("the metadata's blocks %s were not all asked of the origin: %s\n%s"
                     % (blocks, raw_log(), open("mnt-h5.log").read()[-2000:]))
log = open("mnt-h5.log").read()
assert "staged first" in log, "the metadata was not staged first: %s" % log[-1000:]
assert any(span(rng)[0] == warm for path, rng in raw_log()), "no staging read was held"
assert not any(span(rng)[0] == warm and i in released for i, (path, rng) in enumerate(raw_log()))
# every read asked for a metadata block, the head (first 4 MiB) or the tail (last MiB), but the one held
for path, rng in raw_log():
    a, e = span(rng)
    if a == warm or a < 4 * MiB or e > size - MiB:
        continue
    assert any(a < (b + 1) * MiB and b * MiB < e for b in blocks), \
        "a read of [%d, %d) holds no metadata, with the whole file's staging held" % (a, e)
logged = [tuple(map(int, line.split("trace: hdf5 metadata ")[1].split()))
          for line in log.splitlines() if "trace: hdf5 metadata " in line]
assert logged == expected, "metadata logged %s, h5py's complement %s" % (logged, expected)
print("metadata first: %d extents in %d blocks staged with the whole file's staging held; "
      "they equal the complement of h5py's raw extents" % (len(expected), len(blocks)))
urllib.request.urlopen(base + "/__release/all", timeout=10).read()
os.close(fd)
PY
cmp src/rows.h5 mnt-h5/rows.h5 || fail "rows.h5 read through the mount differs"
/usr/bin/python3 - <<'PY' || fail "h5py through the mount"
import h5py, numpy as np
with h5py.File("src/rows.h5", "r") as a, h5py.File("mnt-h5/rows.h5", "r") as b:
    for name in ("a_images", "b_chunked", "c_zipped", "g/small", "d_labels"):
        assert np.array_equal(a[name][()], b[name][()]), name
    assert b["g"].attrs["note"] == "a group with an attribute"
PY
grep -q "hdf5: sample 0: 5 datasets (1 compressed)" mnt-h5.log ||
  fail "the log does not count the datasets: $(grep 'hdf5:' mnt-h5.log)"
umount_larder h5
echo "byte-exact through the mount; h5py reads the same arrays"

# files that lie, from a local --files index
mkdir -p bad
/usr/bin/python3 - <<'PY'
import h5py, numpy as np, struct
with h5py.File("bad/far.h5", "w") as f:
    f.create_dataset("before", data=np.zeros(600000, dtype=np.int64))  # over 5 MiB in all
    f.create_dataset("labels", data=np.full(200000, 7, dtype=np.int64))
    offset = f["labels"].id.get_offset()
data = bytearray(open("bad/far.h5", "rb").read())
needle = struct.pack("<Q", offset)
at = data.find(needle)
assert at >= 0 and data.find(needle, at + 1) < 0, "the address is not there once"
data[at:at + 8] = struct.pack("<Q", len(data) + (1 << 40))  # past the end of the file
open("bad/far.h5", "wb").write(bytes(data))
with h5py.File("bad/far.h5", "r") as f:
    assert f["labels"].id.get_offset() == len(data) + (1 << 40)
whole = open("src/rows.h5", "rb").read()
open("bad/short.h5", "wb").write(whole[: len(whole) // 2])
open("bad/notes.bin", "wb").write(b"\x89HDF\r\n\x1a\n" + bytes(6 << 20))  # a signature, no file
open("bad/tiny.h5", "wb").write(whole[:4096])  # within the head: not scanned
PY
/usr/bin/python3 expected_metadata.py bad/far.h5 >expected-far.txt
"$LARDER" index --files bad -o bad.larder >/dev/null
LARDER_MOUNT_TRACE=1 mount_larder bad bad.larder --cache "$WORK/cache-bad" --stage-on-open
for f in far.h5 short.h5 notes.bin tiny.h5; do
  cmp "bad/$f" "mnt-bad/$f" || fail "$f read through the mount differs"
done
for _ in $(seq 200); do
  [ "$(grep -c 'hdf5: sample' mnt-bad.log)" -ge 3 ] && break
  sleep 0.05
done
grep 'hdf5: sample' mnt-bad.log | grep -q "staged first" ||
  fail "far.h5 was not scanned: $(grep hdf5 mnt-bad.log)"
sleep 0.5
[ "$(grep -c 'hdf5: sample' mnt-bad.log)" -eq 3 ] ||
  fail "want far.h5, short.h5 and notes.bin scanned, not tiny.h5: $(grep hdf5 mnt-bad.log)"
[ "$(grep -c 'warning: hdf5: sample' mnt-bad.log)" -eq 2 ] ||
  fail "want warnings for short.h5 and notes.bin: $(grep hdf5 mnt-bad.log)"
size=$(stat -c %s bad/far.h5)
grep -o 'trace: hdf5 metadata [0-9]* [0-9]*' mnt-bad.log | awk -v size="$size" \
  '{ if ($4 + $5 > size) { print "outside the file: " $0; exit 1 } }' || fail "an extent outside far.h5"
grep -o 'trace: hdf5 metadata [0-9]* [0-9]*' mnt-bad.log | sed 's/trace: hdf5 metadata //' >logged-far.txt
diff expected-far.txt logged-far.txt || fail "far.h5's metadata is not h5py's complement, clipped"
cmp bad/far.h5 mnt-bad/far.h5 || fail "far.h5 differs after its scan"
umount_larder bad
echo "a dataset past the end is clipped away, a file cut short fails its scan; the mount stays up"
