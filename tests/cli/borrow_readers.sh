# A streaming reader's read ahead is its own, and reaches one chunk past
# its reader's (issue 16 and 12, src/larderd/borrow.c, "Pieces"): two
# larderd members on loopback over one origin, one shard of about 32 MiB
# (samples of 128 KiB), the default 1 MiB pieces.  Owners come from
# tests/unit/owner_chunk_reference.py (docs/protocol.md's formula, apart
# from the C), sample places from the tar file, what node 0 was asked for
# from its request trace (LARDERD_TRACE: one line per peer READ).  Chunks
# c, c+1 and c+2 are node 0's.
#  1. A reader on node 1 reads chunk c's samples in order up to 3.5 MiB
#     into it, alone: it streams, and its read ahead takes the rest of c
#     and chunk c+1, never c+2 (no peer READ of node 0's starting within
#     c+2's last 3 MiB, nor later); some of it in 2 MiB steps.  Then no
#     cache data file is mapped in node 1's larderd (in-place rooms given
#     back to anonymous memory).
#  2. Node 1 afresh; the same streaming reader and, once it is done, in
#     another process, a reader jumping about in each of node 0's whole chunks
#     from c+2 on: every peer READ of node 0's there is a piece and its
#     edges at most (a reader's streaming makes no other reader's READ
#     stream, and its read ahead stops at c+1).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools:$TESTS/unit
unset LARDERD_BORROW_PIECE # the default pieces

/usr/bin/python3 - <<'PY'
import os, random
r = random.Random(1617)
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

# Port bases at which node 0 owns three whole chunks in a row (c, c+1,
# c+2) and node 1 some chunk; printed: base, c (up to 20 usable bases:
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
for _ in range(2000):
    base = random.randint(20000, 32000)
    names = ["127.0.0.1:%d" % (base + n) for n in range(2)]
    owners = [owner(names, low, high, 0, c) for c in range(chunks)]
    runs = [c for c in range(chunks - 3) if owners[c:c + 3] == [0, 0, 0]]
    if not runs or 1 not in owners:
        continue
    print(base, runs[0])
    found += 1
    if found == 20:
        break
PY
)"
[ -n "$candidates" ] || fail "no port base gives node 0 three whole chunks in a row"
reserve_ports 2 $(cut -d' ' -f1 <<<"$candidates")
read -r base c <<<"$(grep -m1 "^$port_base " <<<"$candidates")"
echo "node 0 owns chunks $c to $((c + 2))"
members="127.0.0.1:$base,127.0.0.1:$((base + 1))"
printf 'readers-secret\n' >secret
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
# peer_reads FROM: the offset and length of each peer READ node 0 answered,
# from line FROM of its trace on
peer_reads() { awk -v from="$1" 'NR >= from && $3 == "read" && $4 == "peer" { print $7, $8 }' trace0; }
CHUNK=$((4 << 20))
# no staging of c+2 by the streaming reader: nothing of node 0's asked for
# from c+2's second MiB on (a 2 MiB step of c+1 starts before that)
beyond=$(((c + 2) * CHUNK - (1 << 20)))
# a piece's fill takes whole samples and whole blocks: the samples and
# blocks straddling its two edges
limit=$(((1 << 20) + 2 * (129 << 10) + 2 * (64 << 10)))

start_node 0 "$WORK/cache0" LARDERD_TRACE="$WORK/trace0"
start_node 1 "$WORK/cache1"
"$LARDER" warm "$INDEX" --socket "$WORK/sock0" >warm0.txt || fail "warm node 0: $(cat warm0.txt)"
sleep 0.3 # node 1's stagings for node 0 answered and traced

# readers.py SOCK MODE: "stream" (chunk c's samples in order, up to 3.5
# MiB into it) or "jump" (a jumping reader in node 0's whole chunks from
# c+2 on); a reader is a process to larderd (SO_PEERCRED), as a data
# loader's worker is
cat >readers.py <<'PY'
import sys, tarfile, larder_wire as w
from owner_chunk_reference import owner
CHUNK, PIECE = 4 << 20, 1 << 20
sock, mode, index, shard, dataset, members, c = sys.argv[1:8]
c = int(c)
high, low = int(dataset[:16], 16), int(dataset[16:], 16)
data = open(shard, "rb").read()
samples = [(m.offset_data, m.size) for m in tarfile.open(shard) if m.isfile()]
errors = []
def reader(picks):
    try:
        cl = w.Client(sock, 1, timeout=60)
        cl.greet()
        lo, hi, _ = cl.open(index)
        for s in picks:
            got = cl.read(lo, hi, 0, s[0], s[1])
            assert got == data[s[0]:s[0] + s[1]], "bytes %d+%d differ" % s
    except Exception as e:
        errors.append(e)
streaming = [s for s in samples if s[0] >= c * CHUNK and s[0] + s[1] <= c * CHUNK + 7 * PIECE // 2]
jumping = []
for k in range(c + 2, (len(data) + CHUNK - 1) // CHUNK - 1):
    if owner(members.split(","), low, high, 0, k) != 0:
        continue
    inside = [s for s in samples if s[0] >= k * CHUNK and s[0] + s[1] <= (k + 1) * CHUNK]
    second = [s for s in inside if PIECE <= s[0] and s[0] + s[1] <= 2 * PIECE]
    jumping += [inside[0], inside[-1]] + second[:1]
reader(streaming if mode == "stream" else jumping)
if errors:
    raise errors[0]
print("%s: %d samples" % (mode, len(streaming if mode == "stream" else jumping)))
PY

# 1. the streaming reader alone
from=$(($(wc -l <trace0) + 1))
/usr/bin/python3 readers.py "$WORK/sock1" stream "$INDEX" "$SHARD" "$S_ID" "$members" "$c" ||
  fail "the streaming reader on node 1"
sleep 0.5 # its read ahead answered
peer_reads "$from" | head -40
past=$(peer_reads "$from" | awk -v b="$beyond" '$1 >= b' | wc -l)
ahead=$(peer_reads "$from" | awk -v a="$(((c + 1) * CHUNK - (1 << 20)))" -v b="$beyond" '$1 >= a && $1 < b' | wc -l)
big=$(peer_reads "$from" | awk '$2 >= 2 * 1048576' | wc -l)
echo "step 1: a streaming reader: $ahead peer READs in chunk $((c + 1)), $past past it, $big of 2 MiB or more"
[ "$past" -eq 0 ] || fail "the read ahead went $past READs into chunk $((c + 2)) or further: more than one chunk ahead"
[ "$ahead" -ge 1 ] || fail "the read ahead never reached chunk $((c + 1))"
[ "$big" -ge 1 ] || fail "no peer READ of 2 MiB or more: the streaming reader's read ahead did not grow"
# a shard's data file is DIR/<dataset id>/NNNNNN.data (src/lib/cache.h)
maps=$(grep -c "$WORK/cache1/.*\.data" "/proc/${pids[1]}/maps" || true)
[ "$maps" -eq 0 ] || fail "node 1's larderd still maps a cache data file: $(grep "\.data" "/proc/${pids[1]}/maps")"

# 2. node 1 afresh; the streaming reader, then (its marks on chunk c+1
# made: a node-wide mark would make the jumper's READs in the chunks
# after it stream) a jumping reader, another process
kill "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
start_node 1 "$WORK/cache1b"
from=$(($(wc -l <trace0) + 1))
/usr/bin/python3 readers.py "$WORK/sock1" stream "$INDEX" "$SHARD" "$S_ID" "$members" "$c" ||
  fail "the streaming reader on node 1"
sleep 0.5 # its read ahead answered
/usr/bin/python3 readers.py "$WORK/sock1" jump "$INDEX" "$SHARD" "$S_ID" "$members" "$c" ||
  fail "the jumping reader on node 1"
sleep 0.5
there=$(peer_reads "$from" | awk -v b="$beyond" '$1 >= b' | wc -l)
longest=$(peer_reads "$from" | awk -v b="$beyond" '$1 >= b && $2 > n { n = $2 } END { print n + 0 }')
echo "step 2: after a streaming reader, the jumping reader's chunks: $there peer READs, the longest $longest bytes"
[ "$there" -ge 1 ] || fail "the jumping reader borrowed nothing"
[ "$longest" -le "$limit" ] || fail "a peer READ of $longest bytes in the jumping reader's chunks (pieces: $limit at most)"
for n in 0 1; do kill -0 "${pids[$n]}" || fail "daemon $n died"; done
