# larder mount (issue 13, docs/mount.md) with real FUSE mounts: every file
# read through the mount is cmp-equal to its source, for a packed tree, a
# --files index and a plain directory (indexed from a listing at mount
# time); h5py, numpy.load and torch.load open mounted files; packed HDF5's
# array fields are .npy files equal to what h5py reads; 8 concurrent
# readers read right; writes give EROFS.  Failure and lifetime are in
# mount_fail.sh.  Skipped only where FUSE is not usable.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"

# a tree: odd sizes, nested directories, an empty file, a checkpoint, an
# .npy array, an HDF5 file, and a file over 4 MiB (block checksums)
mkdir -p src/deep/er src/top
for i in 1 2 3 4 5 6; do head -c $((i * 37001)) /dev/urandom >"src/deep/s$i.jpg"; echo "$i" >"src/deep/s$i.cls"; done
head -c 4097 /dev/urandom >src/top/odd.bin
head -c 9000000 /dev/urandom >src/big.bin
echo nested >src/deep/er/leaf.txt
: >src/top/empty.dat
/usr/bin/python3 - <<'PY'
import h5py, numpy as np, torch
rng = np.random.default_rng(3)
torch.save({"w": torch.from_numpy(rng.random((300, 200)).astype(np.float32)), "step": 9}, "src/top/ckpt.pt")
np.save("src/top/array.npy", rng.integers(0, 1000, size=(50, 40), dtype=np.int64))
with h5py.File("src/data.h5", "w") as f:
    f.create_dataset("x", data=rng.random((2000, 64)), chunks=(100, 64))
    f.create_dataset("y", data=np.arange(2000, dtype=np.int32))
PY

# every file of SRC equal through MNT, and the same names listed
same_tree() {
  local src=$1 mnt=$2
  (cd "$src" && find . -type f | sort) >want.txt
  (cd "$mnt" && find . -type f | sort) >got.txt
  diff want.txt got.txt >/dev/null || fail "$mnt lists other files: $(diff want.txt got.txt | head)"
  while read -r f; do
    cmp "$src/$f" "$mnt/$f" || fail "$mnt/$f differs from $src/$f"
    [ "$(stat -c %s "$src/$f")" = "$(stat -c %s "$mnt/$f")" ] || fail "$f: size"
  done <want.txt
  echo "$mnt: $(wc -l <want.txt) files equal to $src"
}

# python checks of the files a mount shows from src/
py_checks() {
  /usr/bin/python3 - "$1" <<'PY' || fail "python readers on $1"
import sys, h5py, numpy as np, torch
m = sys.argv[1]
a, b = torch.load(m + "/top/ckpt.pt"), torch.load("src/top/ckpt.pt")
assert torch.equal(a["w"], b["w"]) and a["step"] == 9
assert (np.load(m + "/top/array.npy") == np.load("src/top/array.npy")).all()
with h5py.File(m + "/data.h5", "r") as f, h5py.File("src/data.h5", "r") as g:
    assert (f["x"][()] == g["x"][()]).all() and (f["y"][()] == g["y"][()]).all()
    assert (f["x"][1234:1300] == g["x"][1234:1300]).all()
print("torch.load, numpy.load, h5py read right through", m)
PY
}

# 1. a packed tree: KEY.FIELD files
"$LARDER" pack src/deep -o packed >/dev/null
mount_larder tree packed/index.larder --cache "$WORK/cache-tree"
same_tree src/deep mnt-tree

# 2. a --files index: the files themselves, one over 4 MiB with block checksums
"$LARDER" index --files src -o files.larder >/dev/null
mount_larder files files.larder --cache "$WORK/cache-files"
same_tree src mnt-files
py_checks mnt-files

# 8 concurrent readers, random ranges of every file, against the source
cat >readers.py <<'PY'
import os, random, sys
mnt, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
names = [os.path.relpath(os.path.join(d, f), "src") for d, _, fs in os.walk("src") for f in fs]
for _ in range(300):
    name = rng.choice(names)
    want = open("src/" + name, "rb").read()
    with open(os.path.join(mnt, name), "rb") as f:
        at, n = rng.randrange(len(want) + 1), rng.choice([1, 4096, 131072, 1 << 20, 3 << 20])
        f.seek(at)
        assert f.read(n) == want[at:at + n], (name, at, n)
PY
rm -rf "$WORK/cache-files"
umount_larder files
mount_larder files files.larder --cache "$WORK/cache-files"
pids=()
for i in 1 2 3 4 5 6 7 8; do /usr/bin/python3 readers.py mnt-files "$i" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent reader read wrong bytes"; done
echo "8 concurrent readers: 2400 random reads right"

# 3. a plain directory: indexed from a listing at mount time, no index written by hand
mount_larder plain src --cache "$WORK/cache-plain"
same_tree src mnt-plain
py_checks mnt-plain
grep -q "mounted at" mnt-plain.log || fail "no mount line in the log"
# the listing read no file: the origin is only read by reads
origin_bytes=$("$LARDER" stat --cache "$WORK/cache-plain" --json | /usr/bin/python3 -c '
import json, sys; print(sum(d["origin_bytes"] for d in json.load(sys.stdin)["datasets"]))')
total=$(du -sb --apparent-size src | cut -f1)
[ "$origin_bytes" -le $((total + total / 10)) ] || fail "origin read $origin_bytes of $total bytes"

# 4. packed HDF5: array fields as .npy files, as h5py reads them
/usr/bin/python3 - <<'PY'
import h5py, numpy as np
rng = np.random.default_rng(5)
with h5py.File("groups.h5", "w") as f:
    for i in range(12):
        g = f.create_group(f"s{i:03d}")
        g.create_dataset("graph", data=rng.random((20, 30), dtype=np.float32), chunks=(5, 30),
                         compression="gzip")
        g.create_dataset("label", data=np.int64(i))
        g.create_dataset("meta/ids", data=np.arange(i + 1, dtype=np.uint16))
PY
"$LARDER" pack groups.h5 -o h5packed >/dev/null
mount_larder h5 h5packed/index.larder --cache "$WORK/cache-h5"
/usr/bin/python3 - <<'PY' || fail "packed HDF5 through the mount"
import h5py, numpy as np, os
f = h5py.File("groups.h5", "r")
names = sorted(os.listdir("mnt-h5"))
assert len(names) == 36, names
for i in range(12):
    k = f"s{i:03d}"
    for field, path in (("graph", "graph"), ("label", "label"), ("meta.ids", "meta/ids")):
        a, b = np.load(f"mnt-h5/{k}.{field}.npy"), f[f"{k}/{path}"][()]
        assert a.dtype == b.dtype and a.shape == b.shape and (a == b).all(), (k, field)
print("packed HDF5: 36 .npy files equal to h5py's arrays")
PY

# 5. read-only: writes, creates, removals, renames give EROFS
for cmd in "touch mnt-files/new" "cp src/top/odd.bin mnt-files/top/odd.bin" "mkdir mnt-files/d" \
  "rm mnt-files/top/odd.bin" "mv mnt-files/big.bin mnt-files/big2.bin" "truncate -s 0 mnt-files/big.bin"; do
  $cmd 2>err.txt && fail "'$cmd' succeeded on the mount"
  grep -q "Read-only file system" err.txt || fail "'$cmd': $(cat err.txt), want EROFS"
done
/usr/bin/python3 -c "
import errno, os
try:
    os.open('mnt-files/top/odd.bin', os.O_WRONLY)
except OSError as e:
    assert e.errno == errno.EROFS, e
else:
    raise SystemExit('opened for writing')"
cmp src/top/odd.bin mnt-files/top/odd.bin || fail "a refused write changed the file"
echo "writes refused with EROFS"

for name in tree files plain h5; do umount_larder "$name"; done
echo "mount: all checks passed"
