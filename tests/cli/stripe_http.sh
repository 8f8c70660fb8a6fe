# Striped ownership, seen from the origin: four larderd daemons on loopback
# over an HTTP origin that answers each range of the shard after 1.5 s and
# records when every request came and went (tests/tools/range_origin.py).
# One READ of a whole 24 MiB shard through node 0 (a reader's staging
# range over six 4 MiB chunks) is borrowed from every other owner at the
# same time: the origin sees the requests of all three owners in flight at
# once (one after another, each would have ended before the next began),
# and the bytes are the shard's.  Which chunks a request is for tells whose
# it is (who owns which: tests/unit/owner_chunk_reference.py).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools:$TESTS/unit

/usr/bin/python3 - <<'PY'
import os, random
r = random.Random(8)
os.makedirs("s")
total = i = 0
while total < 24 << 20:
    n = r.randint(16 << 10, 112 << 10)
    with open("s/sample%05d.bin" % i, "wb") as f:
        f.write(r.randbytes(n))
    total, i = total + n, i + 1
PY
"$LARDER" pack s -o origin/S --shard-size 1G >/dev/null
SHARD=$WORK/origin/S/shard-000000.tar
[ ! -e "$WORK/origin/S/shard-000001.tar" ] || fail "not one shard: $(ls origin/S)"
SIZE=$(stat -c %s "$SHARD")
S_ID=$("$LARDER" inspect origin/S/index.larder --json |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')

/usr/bin/python3 "$TESTS/tools/range_origin.py" "$WORK/origin" "$WORK/origin.port" "$WORK/origin.log" \
  1.5 .tar 2>"$WORK/origin.err" &
origin_pid=$!
cleanup_hooks+=("kill $origin_pid 2>/dev/null")
for _ in $(seq 100); do [ -s "$WORK/origin.port" ] && break; sleep 0.05; done
[ -s "$WORK/origin.port" ] || fail "the origin did not start: $(cat "$WORK/origin.err")"
URL=http://127.0.0.1:$(cat "$WORK/origin.port")/S/index.larder

# a port base at which each of nodes 1-3 owns some of the six chunks
candidates=$(/usr/bin/python3 - "$S_ID" "$SIZE" <<'PY'
import random, sys
from owner_chunk_reference import owner
dataset, size = sys.argv[1], int(sys.argv[2])
high, low = int(dataset[:16], 16), int(dataset[16:], 16)
chunks = (size + (4 << 20) - 1) // (4 << 20)
found = 0  # up to 20 usable bases: reserve_ports (lib.sh) takes the first one free
for _ in range(1000):
    base = random.randint(20000, 32000)
    names = ["127.0.0.1:%d" % (base + n) for n in range(4)]
    owners = {owner(names, low, high, 0, c) for c in range(chunks)}
    if {1, 2, 3} <= owners:
        print(base)
        found += 1
        if found == 20:
            break
PY
)
[ -n "$candidates" ] || fail "no port base spreads the chunks"
reserve_ports 4 $candidates
base=$port_base
members="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))"
printf 'stripe-secret\n' >secret
pids=()
for n in 0 1 2 3; do
  "$LARDERD" --cache "$WORK/cache$n" --socket "$WORK/sock$n" --listen "127.0.0.1:$((base + n))" \
    --peers "$members" --secret-file secret 2>>"$WORK/daemon$n.log" &
  pids[$n]=$!
done
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait')
for n in 0 1 2 3; do
  for _ in $(seq 100); do [ -S "$WORK/sock$n" ] && break; sleep 0.05; done
  [ -S "$WORK/sock$n" ] || fail "daemon $n did not start: $(cat "$WORK/daemon$n.log")"
done

# every daemon opens the dataset first (its index read and checked), so
# that what is timed below is the borrowing alone
for n in 0 1 2 3; do
  /usr/bin/python3 -c 'import sys, larder_wire as w
c = w.Client(sys.argv[1], 1, timeout=60); c.greet(); c.open(sys.argv[2])' "$WORK/sock$n" "$URL" ||
    fail "node $n could not open $URL"
done

/usr/bin/python3 - "$WORK/sock0" "$URL" "$SHARD" <<'PY' || fail "node 0's read: $(cat "$WORK"/daemon*.log)"
import sys, larder_wire as w
sock, index, shard = sys.argv[1:]
c = w.Client(sock, 1, timeout=120)
c.greet()
low, high, shards = c.open(index)
want = open(shard, "rb").read()
assert c.read(low, high, 0, 0, len(want)) == want, "the shard's bytes differ"
PY

/usr/bin/python3 - "$WORK/origin.log" "$S_ID" "$base" <<'PY' || fail "the owners did not read at once"
import json, sys
from owner_chunk_reference import owner
log, dataset, base = sys.argv[1], sys.argv[2], int(sys.argv[3])
high, low = int(dataset[:16], 16), int(dataset[16:], 16)
names = ["127.0.0.1:%d" % (base + n) for n in range(4)]
CHUNK = 4 << 20
first = {}  # owner -> the interval of its first range request of the shard
# a request is its chunk's owner's: the chunk of its middle byte (an owner's
# fill reaches a little past its chunk, to whole samples)
for line in open(log):
    r = json.loads(line)
    if not r["path"].endswith(".tar") or not r["body"]:
        continue
    o = owner(names, low, high, 0, (r["lo"] + r["hi"]) // 2 // CHUNK)
    if o not in first or r["arrived"] < first[o][0]:
        first[o] = (r["arrived"], r["sent"])
for o in sorted(first):
    print("owner %d: first origin request %.3f to %.3f" % (o, first[o][0], first[o][1]))
assert {1, 2, 3} <= set(first), first
latest_start = max(first[o][0] for o in (1, 2, 3))
earliest_end = min(first[o][1] for o in (1, 2, 3))
assert latest_start < earliest_end, "owners 1-3 read the origin one after another"
print("owners 1-3 all in flight for %.3f s" % (earliest_end - latest_start))
PY
