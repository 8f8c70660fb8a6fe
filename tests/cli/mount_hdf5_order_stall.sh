# A registered row order's prefetch goes on past a member whose bytes the
# origin is slow to give (docs/mount.md "A registered row order for an
# HDF5 file"): a real mount over an HTTP origin that holds every read
# (tests/tools/gated_origin.py); the test lets every read go except those
# of the first member's data, which stay held.  The order's resolvers take
# the list's members one at a time, nearest first: with the first one
# stalled, the members up to `window` steps ahead (48 here, more than the
# 32 the resolvers once took as one batch and waited for as a whole) are
# all staged meanwhile, and the held one is staged once it is let go.
# The order is torch's DistributedSampler's, computed here by torch; each
# member's data offset is h5py's (get_offset).  Counts, never time.
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
mount_larder s "$base/files.larder" --cache "$WORK/cache-s" --no-stage-on-open
/usr/bin/python3 - "$base" <<'PY' || fail "stalled member: $(tail -5 mnt-s.log)"
import json, sys, time, urllib.request
import h5py, torch.utils.data as tud
base = sys.argv[1]
N, SEED, EPOCH, WORLD, BATCH, WINDOW = 200, 5, 0, 2, 8, 12
local = BATCH // WORLD  # members per step of rank 0: the window is 48 members

class Items:
    def __len__(self):
        return N
sampler = tud.distributed.DistributedSampler(Items(), num_replicas=WORLD, rank=0, shuffle=True,
                                             seed=SEED)
sampler.set_epoch(EPOCH)
order = list(sampler)
with h5py.File("www/shard-files/samples.h5", "r") as f:
    data = {i: (f["s%06d" % i]["x"].id.get_offset(), 100000) for i in range(N)}
held_from, held_len = data[order[0]]
held_to = held_from + held_len

def get(path):
    return urllib.request.urlopen(base + path, timeout=10).read()

def requests():
    return [(path, tuple(map(int, rng.split("=")[1].split("-"))))
            for path, rng in json.loads(get("/__log"))]

def asked(i):  # whether the origin was asked to fill any block of member i's data
    a, n = data[i]
    return any(first < a + n and last >= a and last + 1 - first >= 65536
               for _, (first, last) in requests())

with open("mnt-s/.larder-order", "w") as f:
    f.write("file=samples.h5 sampler=torch seed=%d epoch=%d rank=0 world=%d batch=%d window=%d\n"
            % (SEED, EPOCH, WORLD, BATCH, WINDOW))
# let every read go but the fills of the first member's data (or a hedge
# repeating one), until every other member of the window was asked
window = order[:WINDOW * local]
let_go, held = set(), set()
for _ in range(600):
    for k, (path, (first, last)) in enumerate(requests()):
        if k in let_go or k in held:
            continue
        if first < held_to and last >= held_from and last + 1 - first >= 65536:
            held.add(k)  # a fill of it (whole 64 KiB blocks), not the listing's 16 KiB pages
        else:
            get("/__release/%d" % k)
            let_go.add(k)
    if held and all(asked(i) for i in window[1:]):
        break
    time.sleep(0.05)
missing = [p for p, i in enumerate(window) if p > 0 and not asked(i)]
assert held, "the first member's data was never asked for: %s" % requests()
assert not missing, ("with the first member held, places %s of the window were never staged "
                     "(%d of %d asked; %d requests, %d held: %s)"
                     % (missing, len(window) - 1 - len(missing), len(window) - 1,
                        len(requests()), len(held), [requests()[k] for k in sorted(held)]))
print("first member held: the other %d members of the %d-step window were staged meanwhile"
      % (len(window) - 1, WINDOW))
# (that nothing past the window is staged: mount_hdf5_order.sh, block by block)
get("/__release/all")
for _ in range(200):
    if "staged=%d" % (WINDOW * local) in open("mnt-s/.larder-order").read():
        break
    time.sleep(0.05)
PY
cmp www/shard-files/samples.h5 mnt-s/samples.h5 || fail "samples.h5 read through the mount differs"
umount_larder s
echo "a stalled member holds only its own resolver"
