# A streaming reader's read ahead grows, a jumping reader's does not
# (issue 16, src/larderd/borrow.c, "Pieces"): two larderd members on
# loopback over one origin, one shard of about 32 MiB (samples of
# 128 KiB), the daemons' default 1 MiB pieces.  Which member owns which
# 4 MiB chunk comes from tests/unit/owner_chunk_reference.py
# (docs/protocol.md's formula, written apart from the C); where each
# sample lies, from the tar file (Python's tarfile); what node 0 was asked
# for, from its request trace (LARDERD_TRACE: one line per peer READ, with
# its offset and length).
#  1. A reader on node 1 reads every sample in order, one READ at a time:
#     all right; node 0 serves each of its chunks about once (its chunks'
#     bytes and four samples each at most), in at most 2 peer READs per
#     chunk and 3 more (1 MiB pieces alone would take 4 or more per chunk),
#     some of them 2 MiB or more (the rest of a chunk in one transfer).
#  2. Node 1 afresh (an empty cache); for each of node 0's whole chunks, a
#     reader jumping about: a sample at the chunk's start, then the last
#     sample wholly in the chunk, then one in its second MiB: all right,
#     and no peer READ asked of node 0 is longer than a piece and the
#     samples and blocks straddling its edges.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools:$TESTS/unit
unset LARDERD_BORROW_PIECE # the default pieces

/usr/bin/python3 - <<'PY'
import os, random
r = random.Random(1616)
os.makedirs("s")
for i in range(256):
    with open("s/sample%05d.bin" % i, "wb") as f:
        f.write(r.randbytes(128 << 10))
PY
"$LARDER" pack s -o origin/S --shard-size 1G >/dev/null
INDEX=$WORK/origin/S/index.larder
SHARD=$WORK/origin/S/shard-000000.tar
[ -f "$SHARD" ] && [ ! -e "$WORK/origin/S/shard-000001.tar" ] || fail "not one shard: $(ls origin/S)"
S_ID=$("$LARDER" inspect "$INDEX" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')

# Port bases at which node 0 owns 3 whole chunks or more and node 1 some;
# printed: base, node 0's chunk count, its bytes (up to 20 usable bases:
# reserve_ports, lib.sh, takes the first one free)
candidates="$(/usr/bin/python3 - "$S_ID" "$SHARD" <<'PY'
import os, random, sys
from owner_chunk_reference import owner
CHUNK = 4 << 20
dataset, shard = sys.argv[1], sys.argv[2]
high, low = int(dataset[:16], 16), int(dataset[16:], 16)
size = os.path.getsize(shard)
chunks = (size + CHUNK - 1) // CHUNK
found = 0
for _ in range(1000):
    base = random.randint(20000, 32000)
    names = ["127.0.0.1:%d" % (base + n) for n in range(2)]
    owners = [owner(names, low, high, 0, c) for c in range(chunks)]
    whole = [c for c in range(chunks - 1) if owners[c] == 0]
    if len(whole) < 3 or owners.count(1) < 2:
        continue
    owned = sum(min(CHUNK, size - k * CHUNK) for k in range(chunks) if owners[k] == 0)
    print(base, owners.count(0), owned)
    found += 1
    if found == 20:
        break
PY
)"
[ -n "$candidates" ] || fail "no port base gives node 0 three whole chunks"
reserve_ports 2 $(cut -d' ' -f1 <<<"$candidates")
read -r base chunks0 owned0 <<<"$(grep -m1 "^$port_base " <<<"$candidates")"
echo "node 0 owns $chunks0 chunks ($owned0 bytes)"
members="127.0.0.1:$base,127.0.0.1:$((base + 1))"
printf 'streaming-secret\n' >secret
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')
start_node() { # node cache [environment...]
  local node=$1 cache=$2
  shift 2
  rm -f "$WORK/sock$node"
  env "$@" "$LARDERD" --cache "$cache" --socket "$WORK/sock$node" --listen "127.0.0.1:$((base + node))" \
    --peers "$members" --secret-file secret $(transport_option) 2>>"$WORK/daemon$node.log" &
  pids[$node]=$!
  for _ in $(seq 100); do [ -S "$WORK/sock$node" ] && return; sleep 0.05; done
  fail "daemon $node did not start: $(cat "$WORK/daemon$node.log")"
}
served() { # NODE KEY: a figure of the daemon's own for S (larder stat --socket)
  "$LARDER" stat --socket "$WORK/sock$1" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['$2'] for d in json.load(sys.stdin)['datasets'] if d['dataset_id'] == '$S_ID'))"
}
# peer_reads FROM: the offset and length of each peer READ node 0 answered,
# from line FROM of its trace on
peer_reads() { awk -v from="$1" 'NR >= from && $3 == "read" && $4 == "peer" { print $7, $8 }' trace0; }

start_node 0 "$WORK/cache0" LARDERD_TRACE="$WORK/trace0"
start_node 1 "$WORK/cache1"
# node 0 holds the dataset (node 1's chunks borrowed from node 1)
"$LARDER" warm "$INDEX" --socket "$WORK/sock0" >warm0.txt || fail "warm node 0: $(cat warm0.txt)"
sleep 0.3 # node 1's stagings for node 0 answered and traced
from=$(($(wc -l <trace0) + 1))
before=$(served 0 peer_served_bytes)

# 1. every sample in order, one READ at a time
/usr/bin/python3 - "$WORK/sock1" "$INDEX" "$SHARD" <<'PY' || fail "the streaming reader on node 1"
import sys, tarfile, larder_wire as w
sock, index, shard = sys.argv[1:4]
data = open(shard, "rb").read()
c = w.Client(sock, 1, timeout=60)
c.greet()
low, high, _ = c.open(index)
for m in tarfile.open(shard):
    if m.isfile():
        got = c.read(low, high, 0, m.offset_data, m.size)
        assert got == data[m.offset_data:m.offset_data + m.size], "%s: bytes differ" % m.name
PY
sleep 0.5 # the last read ahead answered
reads=$(peer_reads "$from" | wc -l)
big=$(peer_reads "$from" | awk '$2 >= 2 * 1048576' | wc -l)
bytes=$(($(served 0 peer_served_bytes) - before))
echo "step 1: a streaming reader: node 0 answered $reads peer READs ($big of 2 MiB or more), $bytes bytes, for its $chunks0 chunks"
peer_reads "$from" | head -40
[ "$bytes" -ge "$owned0" ] || fail "node 0 served $bytes bytes, less than its chunks' $owned0"
# each transfer takes the samples straddling its edges: a chunk's two
# 2 MiB read ahead steps (borrow.c, step_bytes) share one more edge than a
# whole chunk did; a chunk served twice would be 4 MiB more
[ "$bytes" -le $((owned0 + chunks0 * 4 * (129 << 10))) ] || fail "node 0 served $bytes bytes: some twice"
[ "$reads" -le $((2 * chunks0 + 5)) ] || fail "$reads peer READs for $chunks0 chunks: the read ahead did not grow"
[ "$big" -ge 1 ] || fail "no peer READ of 2 MiB or more: the rest of a chunk never came in one"

# 2. node 1 afresh; a reader jumping about in each of node 0's whole chunks
kill "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
start_node 1 "$WORK/cache1b"
from=$(($(wc -l <trace0) + 1))
/usr/bin/python3 - "$WORK/sock1" "$INDEX" "$SHARD" "$S_ID" "$members" <<'PY' || fail "the jumping reader on node 1"
import os, sys, tarfile, larder_wire as w
from owner_chunk_reference import owner
CHUNK, PIECE = 4 << 20, 1 << 20
sock, index, shard, dataset, members = sys.argv[1:6]
high, low = int(dataset[:16], 16), int(dataset[16:], 16)
data = open(shard, "rb").read()
samples = [(m.offset_data, m.size) for m in tarfile.open(shard) if m.isfile()]
c = w.Client(sock, 1, timeout=60)
c.greet()
low_, high_, _ = c.open(index)
def read(s):
    got = c.read(low_, high_, 0, s[0], s[1])
    assert got == data[s[0]:s[0] + s[1]], "bytes %d+%d differ" % s
chunks = (len(data) + CHUNK - 1) // CHUNK
for k in range(chunks - 1):
    if owner(members.split(","), low, high, 0, k) != 0:
        continue
    inside = [s for s in samples if s[0] >= k * CHUNK and s[0] + s[1] <= (k + 1) * CHUNK]
    second = [s for s in inside if PIECE <= s[0] and s[0] + s[1] <= 2 * PIECE]
    for s in [inside[0], inside[-1]] + second[:1]:
        read(s)
PY
sleep 0.5
reads=$(peer_reads "$from" | wc -l)
longest=$(peer_reads "$from" | awk '$2 > n { n = $2 } END { print n + 0 }')
echo "step 2: a jumping reader: node 0 answered $reads peer READs, the longest $longest bytes"
# a piece's fill takes whole samples and whole blocks: the samples and
# blocks straddling its two edges
limit=$(((1 << 20) + 2 * (129 << 10) + 2 * (64 << 10)))
[ "$reads" -ge 1 ] || fail "the jumping reader borrowed nothing"
[ "$longest" -le "$limit" ] || fail "a peer READ of $longest bytes for a jumping reader (pieces: $limit at most)"
for n in 0 1; do kill -0 "${pids[$n]}" || fail "daemon $n died"; done
