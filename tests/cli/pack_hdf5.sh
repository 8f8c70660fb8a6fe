# Pack HDF5 the way the seed paper flattens it: one sample per group, or
# one sample per row of named datasets.  Arrays keep dtype and shape, tar
# shards hold them as .npy members (so WebDataset and numpy read them),
# and every byte matches what h5py reads.
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c "import h5py, numpy" 2>/dev/null || skip "h5py/numpy for /usr/bin/python3 missing"

/usr/bin/python3 - <<'PY'
import h5py, numpy as np
rng = np.random.default_rng(5)
with h5py.File("groups.h5", "w") as f:
    for i in range(30):
        g = f.create_group(f"s{i:03d}")
        g.create_dataset("graph", data=rng.random((20, 30), dtype=np.float32),
                         chunks=(5, 30), compression="gzip", shuffle=True)
        g.create_dataset("label", data=np.int64(i))
        g.create_dataset("meta/ids", data=np.arange(i + 1, dtype=np.uint16))
with h5py.File("rows.h5", "w") as f:
    f.create_dataset("x", data=rng.random((100, 8)), chunks=(16, 8), compression="gzip")
    f.create_dataset("y", data=np.arange(100, dtype=np.int32))
    f.create_dataset("z", data=np.arange(99, dtype=np.int32))
PY

"$LARDER" pack groups.h5 -o g --shard-size 50K >/dev/null
"$LARDER" verify g/index.larder >/dev/null || fail "verify groups"
"$LARDER" inspect g/index.larder --sample s007 --json >s007.json
for s in g/shard-*.tar; do tar tf "$s"; done | sort >members.txt
grep -qx "s007.graph.npy" members.txt || fail "tar members: $(head members.txt)"
grep -qx "s007.meta.ids.npy" members.txt || fail "nested dataset member"
"$LARDER" cat g/index.larder s007 --field graph >graph.bin
"$LARDER" cat g/index.larder s007 --field meta.ids >ids.bin
/usr/bin/python3 - <<'PY' || fail "group-mode bytes, dtype or shape"
import h5py, json, numpy as np, tarfile, glob, io
f = h5py.File("groups.h5", "r")
s = json.load(open("s007.json"))
fields = {x["name"]: x for x in s["fields"]}
assert fields["graph"]["dtype"] == "float32" and fields["graph"]["shape"] == [20, 30], fields
assert fields["label"]["dtype"] == "int64" and fields["label"].get("shape", []) == [], fields
assert fields["meta.ids"]["dtype"] == "uint16" and fields["meta.ids"]["shape"] == [8], fields
assert open("graph.bin", "rb").read() == f["s007/graph"][()].astype("<f4").tobytes()
assert open("ids.bin", "rb").read() == f["s007/meta/ids"][()].astype("<u2").tobytes()
# the tar shards are WebDataset-readable: numpy loads the .npy members
seen = 0
for path in glob.glob("g/shard-*.tar"):
    with tarfile.open(path) as t:
        for m in t.getmembers():
            key, ext = m.name.split(".", 1)
            if ext == "graph.npy":
                a = np.load(io.BytesIO(t.extractfile(m).read()))
                assert (a == f[key + "/graph"][()]).all()
                seen += 1
assert seen == 30, seen
PY

"$LARDER" pack rows.h5 -o r --hdf5-rows x,y --format flat --no-shuffle >/dev/null
"$LARDER" verify r/index.larder >/dev/null || fail "verify rows"
"$LARDER" inspect r/index.larder --json | grep '"num_samples": 100' >/dev/null || fail "row count"
"$LARDER" cat r/index.larder 00000042 --field x >x42.bin
/usr/bin/python3 -c '
import h5py; f = h5py.File("rows.h5", "r")
assert open("x42.bin", "rb").read() == f["x"][42].astype("<f8").tobytes()' || fail "row bytes"

# bad HDF5 input: clear errors, nothing written
expect_error 1 "rows.h5" "$LARDER" pack rows.h5 -o bad1 --hdf5-rows x,z
expect_error 1 "nothere" "$LARDER" pack rows.h5 -o bad2 --hdf5-rows nothere
head -c 4000 groups.h5 >cut.h5
expect_error 1 "cut.h5" "$LARDER" pack cut.h5 -o bad3
for o in bad1 bad2 bad3; do [ ! -e $o/index.larder ] || fail "$o has an index"; done
