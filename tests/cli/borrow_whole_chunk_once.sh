# READs of a whole chunk of another member's, many at once, borrow it once
# (src/larderd/borrow.c, borrow_whole_chunks): two larderd members on
# loopback over one origin, one shard of about 24 MiB; owners from
# tests/unit/owner_chunk_reference.py (docs/protocol.md's formula, apart
# from the C), sample places from the tar file.  Node 0 holds the dataset;
# 12 clients of node 1 each send, at the same moment, a READ of exactly
# chunk c (node 0's): every one gets the shard's bytes, and node 0 serves
# that chunk about once (at most the chunk and the samples crossing its
# edges, twice over), where before each READ borrowed it for itself (the
# restart storm's readers, 4 MiB reads in file order, had owners send each
# chunk 11-16 times).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools:$TESTS/unit

/usr/bin/python3 - <<'PY'
import os, random
r = random.Random(2016)
os.makedirs("s")
for i in range(190):
    with open("s/sample%04d.bin" % i, "wb") as f:
        f.write(r.randbytes(128 << 10))
PY
"$LARDER" pack s -o origin --shard-size 1G >/dev/null
INDEX=$WORK/origin/index.larder
SHARD=$WORK/origin/shard-000000.tar
[ ! -e origin/shard-000001.tar ] || fail "not one shard"
ID=$("$LARDER" inspect "$INDEX" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
# port bases at which node 0 owns a chunk c that is not the shard's last
candidates="$(/usr/bin/python3 - "$ID" "$SHARD" <<'PY'
import os, random, sys
from owner_chunk_reference import owner
CHUNK = 4 << 20
dataset, shard = sys.argv[1], sys.argv[2]
high, low = int(dataset[:16], 16), int(dataset[16:], 16)
chunks = (os.path.getsize(shard) + CHUNK - 1) // CHUNK
found = 0
for _ in range(1000):
    base = random.randint(20000, 32000)
    names = ["127.0.0.1:%d" % (base + n) for n in range(2)]
    mine = [c for c in range(1, chunks - 1) if owner(names, low, high, 0, c) == 0]
    if mine:
        print(base, mine[0])
        found += 1
        if found == 20:
            break
PY
)"
[ -n "$candidates" ] || fail "no port base gives node 0 a chunk"
reserve_ports 2 $(cut -d' ' -f1 <<<"$candidates")
read -r base chunk <<<"$(grep -m1 "^$port_base " <<<"$candidates")"
members="127.0.0.1:$base,127.0.0.1:$((base + 1))"
printf 'whole-chunk-secret\n' >secret
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')
for node in 0 1; do
  "$LARDERD" --cache "$WORK/cache$node" --socket "$WORK/sock$node" --listen "127.0.0.1:$((base + node))" \
    --peers "$members" --secret-file secret $(transport_option) 2>>"$WORK/daemon$node.log" &
  pids[$node]=$!
  for _ in $(seq 100); do [ -S "$WORK/sock$node" ] && break; sleep 0.05; done
  [ -S "$WORK/sock$node" ] || fail "daemon $node did not start: $(cat "$WORK/daemon$node.log")"
done
"$LARDER" warm "$INDEX" --socket "$WORK/sock0" >warm0.txt || fail "warm node 0: $(cat warm0.txt)"
served() {
  "$LARDER" stat --socket "$WORK/sock0" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['peer_served_bytes'] for d in json.load(sys.stdin)['datasets'] if d['dataset_id'] == '$ID'))"
}
before=$(served)
/usr/bin/python3 - "$WORK/sock1" "$INDEX" "$SHARD" "$chunk" <<'PY' || fail "readers: $(tail -5 daemon1.log)"
import sys, threading
import larder_wire as w
sock, index, shard, chunk = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
CHUNK, READERS = 4 << 20, 12
with open(shard, "rb") as f:
    f.seek(chunk * CHUNK)
    want = f.read(CHUNK)
clients = []
for _ in range(READERS):
    c = w.Client(sock, 1, timeout=60)
    c.greet()
    clients.append((c, c.open(index)))
start, errors = threading.Barrier(READERS), []
def read(c, ids):
    start.wait()
    try:
        got = c.read(ids[0], ids[1], 0, chunk * CHUNK, CHUNK)
        if got != want:
            errors.append("bytes differ from the shard's")
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=read, args=x) for x in clients]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
PY
sent=$(($(served) - before))
echo "node 0 served $sent bytes for $((12)) READs of chunk $chunk"
limit=$(((4 << 20) * 2 + 4 * (129 << 10)))
[ "$sent" -le "$limit" ] || fail "node 0 served $sent bytes for one chunk of 4 MiB read 12 times at once (at most $limit)"
[ "$sent" -ge $((4 << 20)) ] || fail "node 0 served $sent bytes, less than the chunk"
echo "ok"
