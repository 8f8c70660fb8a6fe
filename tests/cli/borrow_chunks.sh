# Borrowing whole owner chunks (issue 16, src/larderd/borrow.c): two
# larderd members on loopback over one origin, and one shard of about
# 20 MiB (samples of 64-192 KiB).  Which member owns which 4 MiB chunk
# comes from tests/unit/owner_chunk_reference.py (docs/protocol.md's
# formula, written apart from the C); where each sample lies, from the
# tar file itself (Python's tarfile).
#  1. A reader on node 1 reads one sample from the middle of a chunk that
#     node 0 owns: node 0 serves just that sample's bytes (a lone READ
#     borrows what it needs).  Then another sample of that chunk: node 0
#     serves the whole chunk (at least its 4 MiB, at most the chunk and a
#     sample on either side), in one transfer.
#  2. A reader on node 1 reads every sample, one READ each: all right,
#     node 0 serves each of its chunks about once (no more than its
#     chunks' bytes and three samples for each), and node 1 counts only
#     a few of its READs as borrowed (a first lone one and the one that
#     stages it per chunk, plus one at a chunk edge), far fewer than the
#     samples in node 0's chunks.
#  3. With a cache capacity (--cache-size) node 1 borrows only what a
#     READ needs: the two samples' READs have node 0 serve no more than
#     two samples' worth.
#  4. A lying owner (it proves the secret, then answers every READ with
#     0x5A bytes): for the two samples, node 1 asks it for the whole chunk, finds the bytes
#     wrong, reads them from the origin, and its readers get the right
#     bytes, then and from its cache after.
# The daemons borrow whole chunks here (LARDERD_BORROW_PIECE=0): a DEMAND
# READ's borrow in pieces of 1 MiB, the default, is tests/cli/priority_pieces.sh's.
source "$(dirname "$0")/lib.sh"
export LARDERD_BORROW_PIECE=0
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools:$TESTS/unit

/usr/bin/python3 - <<'PY'
import os, random
r = random.Random(16)
os.makedirs("s")
total = i = 0
while total < 20 << 20:
    n = r.randint(64 << 10, 192 << 10)
    with open("s/sample%05d.bin" % i, "wb") as f:
        f.write(r.randbytes(n))
    total, i = total + n, i + 1
PY
"$LARDER" pack s -o origin/S --shard-size 1G >/dev/null
INDEX=$WORK/origin/S/index.larder
SHARD=$WORK/origin/S/shard-000000.tar
[ -f "$SHARD" ] && [ ! -e "$WORK/origin/S/shard-000001.tar" ] || fail "not one shard: $(ls origin/S)"
S_ID=$("$LARDER" inspect "$INDEX" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')

# A base port at which node 0 owns a whole chunk (not the last) and node 1
# owns some; printed: base, that chunk, two samples inside it (key,
# offset, length of each), the bytes node 0 owns, its chunk count, and the
# samples lying in its chunks.
candidates="$(/usr/bin/python3 - "$S_ID" "$SHARD" <<'PY'
import os, random, sys, tarfile
from owner_chunk_reference import owner
CHUNK = 4 << 20
dataset, shard = sys.argv[1], sys.argv[2]
high, low = int(dataset[:16], 16), int(dataset[16:], 16)
members = [(m.name, m.offset_data, m.size) for m in tarfile.open(shard) if m.isfile()]
size = os.path.getsize(shard)
chunks = (size + CHUNK - 1) // CHUNK
found = 0  # up to 20 usable bases: reserve_ports (lib.sh) takes the first one free
for _ in range(1000):
    base = random.randint(20000, 32000)
    names = ["127.0.0.1:%d" % (base + n) for n in range(2)]
    owners = [owner(names, low, high, 0, c) for c in range(chunks)]
    mine = [c for c in range(chunks - 1) if owners[c] == 0]
    if not mine or 1 not in owners:
        continue
    c = mine[len(mine) // 2]
    middle = [m for m in members if m[1] >= c * CHUNK + (1 << 20) and m[1] + m[2] <= (c + 1) * CHUNK - (1 << 20)]
    if len(middle) < 2:
        continue
    name, at, n = middle[0]
    name2, at2, n2 = middle[-1]
    owned = sum(min(CHUNK, size - k * CHUNK) for k in range(chunks) if owners[k] == 0)
    inside = sum(1 for m in members if owners[m[1] // CHUNK] == 0 and owners[(m[1] + m[2] - 1) // CHUNK] == 0)
    key = lambda name: name.split("/")[-1].split(".")[0]
    print(base, c, key(name), at, n, key(name2), at2, n2, owned, owners.count(0), inside)
    found += 1
    if found == 20:
        break
PY
)"
[ -n "$candidates" ] || fail "no port base gives node 0 a chunk with a sample in its middle"
reserve_ports 2 $(cut -d' ' -f1 <<<"$candidates")
read -r base chunk key offset length key2 offset2 length2 owned0 chunks0 inside0 <<<"$(grep -m1 "^$port_base " <<<"$candidates")"
echo "node 0 owns $chunks0 chunks ($owned0 bytes, $inside0 samples wholly inside); sample $key at $offset+$length in its chunk $chunk"
members="127.0.0.1:$base,127.0.0.1:$((base + 1))"
printf 'borrow-secret\n' >secret
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')
start_node() { # node cache [options...]
  local node=$1 cache=$2
  shift 2
  rm -f "$WORK/sock$node"
  "$LARDERD" --cache "$cache" --socket "$WORK/sock$node" --listen "127.0.0.1:$((base + node))" \
    --peers "$members" --secret-file secret $(transport_option) "$@" 2>>"$WORK/daemon$node.log" &
  pids[$node]=$!
  for _ in $(seq 100); do [ -S "$WORK/sock$node" ] && return; sleep 0.05; done
  fail "daemon $node did not start: $(cat "$WORK/daemon$node.log")"
}
# served NODE KEY: a figure of the daemon's own for S (larder stat --socket)
served() {
  "$LARDER" stat --socket "$WORK/sock$1" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['$2'] for d in json.load(sys.stdin)['datasets'] if d['dataset_id'] == '$S_ID'))"
}
# read_one NODE OFFSET LENGTH: one READ through the node's daemon, compared with the shard file
read_one() {
  /usr/bin/python3 - "$WORK/sock$1" "$INDEX" "$SHARD" "$2" "$3" <<'PY'
import sys, larder_wire as w
sock, index, shard, offset, length = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
c = w.Client(sock, 1, timeout=60)
c.greet()
low, high, shards = c.open(index)
with open(shard, "rb") as f:
    f.seek(offset)
    want = f.read(length)
got = c.read(low, high, 0, offset, length)
assert got == want, "%s: bytes %d+%d differ from the shard's" % (sock, offset, length)
PY
}
MAX_SAMPLE=$(((192 << 10) + 1024 + (64 << 10))) # a sample, its tar header, a cache block

start_node 0 "$WORK/cache0"
start_node 1 "$WORK/cache1"
# node 0 holds the dataset (node 1's chunks borrowed from node 1)
"$LARDER" warm "$INDEX" --socket "$WORK/sock0" >warm0.txt || fail "warm node 0: $(cat warm0.txt)"
before=$(served 0 peer_served_bytes)

# 1. one sample from the middle of node 0's chunk: its bytes; then another: the whole chunk
read_one 1 "$offset" "$length" || fail "node 1's read of $key"
first=$(($(served 0 peer_served_bytes) - before))
echo "step 1: node 0 served $first bytes for one sample of $length"
[ "$first" -ge "$length" ] || fail "node 0 served $first bytes for a sample of $length"
[ "$first" -le "$MAX_SAMPLE" ] || fail "node 0 served $first bytes for a lone sample of $length"
reads=$(served 0 peer_served_reads)
read_one 1 "$offset2" "$length2" || fail "node 1's read of $key2"
got=$(($(served 0 peer_served_bytes) - before - first))
echo "step 1: then $got bytes for another sample of the chunk, $key2 of $length2"
[ "$got" -ge $((4 << 20)) ] || fail "node 0 served $got bytes, not its whole chunk"
[ "$got" -le $(((4 << 20) + 2 * MAX_SAMPLE)) ] || fail "node 0 served $got bytes for one chunk"
[ "$(($(served 0 peer_served_reads) - reads))" -le 3 ] || fail "the chunk came in more than 3 READs"
# in place (fill_inplace.c) over TCP: the chunk's inner blocks (4 MiB of
# 64 KiB blocks: 64, less up to 4 on each edge for samples crossing it and
# up to 5 for the sample kept before; 40 leaves room) spliced into the file
inplace=$(served 1 inplace_blocks)
echo "step 1: $inplace blocks received in place"
if [ "${LARDER_TEST_TRANSPORT:-tcp}" = tcp ]; then
  [ "$inplace" -ge 40 ] && [ "$inplace" -le 64 ] || fail "node 1 received $inplace blocks in place, not the chunk's inner ones"
fi

# 2. every sample, a READ each: right, each chunk about once, few READs borrowed
LARDER_SOCKET=$WORK/sock1 "$LARDER" warm "$INDEX" --cache "$WORK/cache1" --jobs 16 >warm1.txt ||
  fail "node 1: $(cat warm1.txt)"
grep -q "warmed $(ls s | wc -l) samples" warm1.txt || fail "node 1: $(cat warm1.txt)"
LARDER_SOCKET=$WORK/sock1 same_bytes "$INDEX" "$key" bin "s/$key.bin"
LARDER_SOCKET=$WORK/sock1 same_bytes "$INDEX" sample00003 bin s/sample00003.bin
total=$(($(served 0 peer_served_bytes) - before))
borrowed=$(served 1 borrowed_reads)
echo "step 2: node 0 served $total bytes (owns $owned0 in $chunks0 chunks); node 1 borrowed in $borrowed READs ($inside0 samples inside node 0's chunks)"
[ "$total" -ge "$owned0" ] || fail "node 0 served $total bytes of its $owned0"
[ "$total" -le $((owned0 + chunks0 * 3 * MAX_SAMPLE)) ] || fail "node 0 served $total bytes for its $owned0"
[ "$borrowed" -le $((3 * chunks0 + 2)) ] || fail "node 1 borrowed in $borrowed READs for $chunks0 chunks"
[ "$inside0" -gt $((3 * borrowed)) ] || fail "too few samples ($inside0) for the check of $borrowed READs"

# 3. with a capacity: a READ borrows its own bytes only
kill "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
start_node 1 "$WORK/cache1b" --cache-size 1G
before=$(served 0 peer_served_bytes)
read_one 1 "$offset" "$length" || fail "node 1's read of $key with a capacity"
read_one 1 "$offset2" "$length2" || fail "node 1's read of $key2 with a capacity"
got=$(($(served 0 peer_served_bytes) - before))
echo "step 3: with --cache-size, node 0 served $got bytes for two samples of the chunk"
[ "$got" -gt 0 ] || fail "node 1 did not borrow with a capacity"
[ "$got" -le $((2 * MAX_SAMPLE)) ] || fail "node 1 borrowed $got bytes with a capacity"

# fake_owner MODE: node 0 and node 1 stopped, tests/tools/larder_wire.py's
# owner in node 0's place (--MODE: liar, stall, trickle, busy), its log
# liar.rec.log started afresh, waited for until it listens
fake_owner() {
  kill "${pids[0]}" "${pids[1]}"
  wait "${pids[0]}" "${pids[1]}" 2>/dev/null || true
  : >liar.rec.log
  /usr/bin/python3 "$TESTS/tools/larder_wire.py" owner "$base" secret liar.rec "--$1" &
  pids[0]=$!
  for _ in $(seq 100); do
    /usr/bin/python3 -c "import socket; socket.create_connection(('127.0.0.1', $base), 1)" 2>/dev/null && break
    sleep 0.05
  done
}

# 4. a lying owner in node 0's place
fake_owner liar
start_node 1 "$WORK/cache1c"
read_one 1 "$offset" "$length" || fail "node 1's read of $key from a lying owner"
read_one 1 "$offset2" "$length2" || fail "node 1's read of $key2 from a lying owner"
grep -q "prove ok" liar.rec.log || fail "node 1 never proved itself to the liar: $(cat liar.rec.log)"
asked=$(awk '$1 == "read" && $3 > n { n = $3 } END { print n + 0 }' liar.rec.log)
echo "step 4: node 1 asked the liar for up to $asked bytes at once, and read the right bytes"
[ "$asked" -ge $((4 << 20)) ] || fail "node 1 did not ask the liar for the whole chunk: $(cat liar.rec.log)"
read_one 1 "$offset" "$length" || fail "node 1's cache kept the liar's bytes"
LARDER_SOCKET=$WORK/sock1 same_bytes "$INDEX" "$key" bin "s/$key.bin"
kill -0 "${pids[1]}" || fail "daemon 1 died"

# 5. in pieces (LARDER_PEER_STREAMS=4, source_peer.c): the liar still asked
# for the whole chunk, now in pieces of 1-2 MiB on several connections at
# once, and its bytes are still found wrong and never kept
kill "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
: >liar.rec.log
LARDER_PEER_STREAMS=4 start_node 1 "$WORK/cache1d"
read_one 1 "$offset" "$length" || fail "node 1's read of $key from a lying owner, in pieces"
read_one 1 "$offset2" "$length2" || fail "node 1's read of $key2 from a lying owner, in pieces"
largest=$(awk '$1 == "read" && $3 > n { n = $3 } END { print n + 0 }' liar.rec.log)
pieces=$(awk '$1 == "read" && $3 >= 1048576 { n++ } END { print n + 0 }' liar.rec.log)
echo "step 5: in pieces, node 1 asked the liar for at most $largest bytes at once, $pieces READs of 1 MiB or more"
[ "$largest" -lt $((4 << 20)) ] || fail "node 1 asked the liar for $largest bytes in one READ"
[ "$pieces" -ge 4 ] || fail "the chunk went in $pieces READs of 1 MiB or more: $(cat liar.rec.log)"
read_one 1 "$offset" "$length" || fail "node 1's cache kept the liar's bytes (in pieces)"
LARDER_SOCKET=$WORK/sock1 same_bytes "$INDEX" "$key2" bin "s/$key2.bin"

# 6. in pieces from a real owner: the whole chunk in 4 READs, every sample right
kill "${pids[0]}" "${pids[1]}"
wait "${pids[0]}" "${pids[1]}" 2>/dev/null || true
start_node 0 "$WORK/cache0e"
LARDER_PEER_STREAMS=4 start_node 1 "$WORK/cache1e"
"$LARDER" warm "$INDEX" --socket "$WORK/sock0" >warm0e.txt || fail "warm node 0: $(cat warm0e.txt)"
read_one 1 "$offset" "$length" || fail "node 1's read of $key (in pieces)"
before=$(served 0 peer_served_bytes) reads=$(served 0 peer_served_reads)
read_one 1 "$offset2" "$length2" || fail "node 1's read of $key2 (in pieces)"
got=$(($(served 0 peer_served_bytes) - before)) in=$(($(served 0 peer_served_reads) - reads))
echo "step 6: in pieces, node 0 served $got bytes in $in READs for the chunk"
[ "$got" -ge $((4 << 20)) ] || fail "node 0 served $got bytes, not its whole chunk (in pieces)"
[ "$got" -le $(((4 << 20) + 2 * MAX_SAMPLE)) ] || fail "node 0 served $got bytes for one chunk (in pieces)"
[ "$in" -ge 4 ] && [ "$in" -le 6 ] || fail "the chunk came in $in READs, not 4 pieces"
LARDER_SOCKET=$WORK/sock1 "$LARDER" warm "$INDEX" --cache "$WORK/cache1e" --jobs 16 >warm1e.txt ||
  fail "node 1 in pieces: $(cat warm1e.txt)"
grep -q "warmed $(ls s | wc -l) samples" warm1e.txt || fail "node 1 in pieces: $(cat warm1e.txt)"
for k in "$key" "$key2" sample00003 sample00042; do
  LARDER_SOCKET=$WORK/sock1 same_bytes "$INDEX" "$k" bin "s/$k.bin"
done
kill -0 "${pids[1]}" || fail "daemon 1 died"

# 7. received straight into the cache file (fill_inplace.c), and wrong: a
# lying owner, and an origin whose copy of key2 is damaged (4 KiB of 0xA5
# in its middle) while node 1 stages the chunk.  The READ of key2 fails;
# nothing more is resident than key's blocks were, and neither the liar's
# bytes (0x5A) nor the damaged origin's, both of which sat in the data
# file's pages during the fill, are left there.  With the origin mended,
# the same READ is right, and the data file holds the right bytes.
fake_owner liar
start_node 1 "$WORK/cache1f"
resident() { "$LARDER" stat --cache "$1" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['resident_bytes'] for d in json.load(sys.stdin)['datasets']))"; }
# data_has CACHE BYTE: whether the shard's data file holds 4 KiB of BYTE in a row
data_has() {
  /usr/bin/python3 - "$1/$S_ID/000000.data" "$2" <<'PY'
import sys
with open(sys.argv[1], "rb") as f:
    data = f.read()
sys.exit(0 if bytes([int(sys.argv[2], 16)]) * 4096 in data else 1)
PY
}
cp "$SHARD" shard.good
/usr/bin/python3 - "$SHARD" "$((offset2 + length2 / 2 - 2048))" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]))
    f.write(b"\xa5" * 4096)
PY
read_one 1 "$offset" "$length" || fail "node 1's read of $key (liar, origin damaged elsewhere)"
kept=$(resident "$WORK/cache1f")
inplace=$(served 1 inplace_blocks)
if read_one 1 "$offset2" "$length2" 2>read7.err; then fail "node 1 read $key2 though the origin's is damaged"; fi
grep -q "checksum" read7.err || fail "the failed READ of $key2 says: $(cat read7.err)"
asked=$(awk '$1 == "read" && $3 > n { n = $3 } END { print n + 0 }' liar.rec.log)
now=$(resident "$WORK/cache1f")
echo "step 7: asked the liar for up to $asked bytes; resident $kept bytes before the failed READ, $now after"
[ "$asked" -ge $((4 << 20)) ] || fail "node 1 did not stage the chunk from the liar: $(cat liar.rec.log)"
# (the fill's refetch forgets the blocks it read from the cache: fewer is right)
[ "$now" -le "$kept" ] || fail "a failed borrow left $((now - kept)) bytes more resident"
data_has "$WORK/cache1f" 5a && fail "the liar's bytes were left in node 1's data file"
# and they were there: the chunk was received in place
[ "$(served 1 inplace_blocks)" -gt "$inplace" ] || [ "${LARDER_TEST_TRANSPORT:-tcp}" != tcp ] ||
  fail "the liar's chunk was not received in place ($inplace blocks before, $(served 1 inplace_blocks) after)"
data_has "$WORK/cache1f" a5 && fail "the damaged origin's bytes were left in node 1's data file"
cp shard.good "$SHARD"
read_one 1 "$offset2" "$length2" || fail "node 1's read of $key2 once the origin is mended"
/usr/bin/python3 - "$WORK/cache1f/$S_ID/000000.data" "$SHARD" "$offset2" "$length2" <<'PY' ||
import sys
offset, length = int(sys.argv[3]), int(sys.argv[4])
with open(sys.argv[1], "rb") as a, open(sys.argv[2], "rb") as b:
    a.seek(offset), b.seek(offset)
    assert a.read(length) == b.read(length)
PY
  fail "node 1's data file does not hold $key2's bytes after the mended READ"
kill -0 "${pids[1]}" || fail "daemon 1 died"

# 8. killed mid-transfer: an owner that sends half of the chunk and stalls;
# node 1 is killed (SIGKILL) while its fill lock is held and half of the
# liar's bytes sit unchecked in its data file's pages.  Nothing of the
# chunk is resident; a restarted node 1 on the same cache, with a real
# owner, reads key2 right, and `larder warm` through it reads every sample.
fake_owner stall
start_node 1 "$WORK/cache1g"
read_one 1 "$offset" "$length" || fail "node 1's read of $key (stalling owner)"
kept=$(resident "$WORK/cache1g")
read_one 1 "$offset2" "$length2" 2>/dev/null &
reader=$!
for _ in $(seq 200); do grep -q stalled liar.rec.log && break; sleep 0.05; done
grep -q stalled liar.rec.log || fail "the owner never stalled: $(cat liar.rec.log)"
sleep 0.2
# the stalled owner's bytes sit in node 1's data file (spliced in place), unchecked
if [ "${LARDER_TEST_TRANSPORT:-tcp}" = tcp ]; then
  data_has "$WORK/cache1g" 5a || fail "the stalled owner's bytes are not in node 1's data file: not in place"
fi
kill -9 "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
wait "$reader" 2>/dev/null || true
now=$(resident "$WORK/cache1g")
echo "step 8: killed mid-transfer; resident $kept bytes before, $now after"
[ "$now" = "$kept" ] || fail "a killed borrow left $((now - kept)) bytes resident"
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null || true
start_node 0 "$WORK/cache0g"
start_node 1 "$WORK/cache1g"
restarted=$(resident "$WORK/cache1g")
[ "$restarted" = "$kept" ] || fail "restarted on the killed borrow's cache: $restarted bytes resident, $kept before"
read_one 1 "$offset2" "$length2" || fail "the restarted node 1's read of $key2"
LARDER_SOCKET=$WORK/sock1 "$LARDER" warm "$INDEX" --cache "$WORK/cache1g" --jobs 16 >warm1g.txt ||
  fail "the restarted node 1: $(cat warm1g.txt)"
grep -q "warmed $(ls s | wc -l) samples" warm1g.txt || fail "the restarted node 1: $(cat warm1g.txt)"
data_has "$WORK/cache1g" 5a && fail "the stalled owner's bytes were left in node 1's data file"
for k in "$key" "$key2" sample00003; do
  LARDER_SOCKET=$WORK/sock1 same_bytes "$INDEX" "$k" bin "s/$k.bin"
done

# 9 and 10: a fake owner (larder_wire.py owner MODE) that holds node 1's
# READ of key2's chunk, which node 1 stages in place (the fill lock of the
# chunk's inner blocks held meanwhile).  Node 1 restarts on a fresh cache
# beside it, reads key, then key2 and, while the owner holds that, other
# bytes in the middle of the same chunk (its inner blocks): both READs must
# be answered within 20 s (the in-place deadline and the wait for a busy
# owner are 2 s each, with room for a loaded machine).  Sets middle.
owner_holds() { # MODE CACHE STEP WORD
  fake_owner "$1"
  : >"$WORK/daemon1.log"
  start_node 1 "$WORK/$2"
  read_one 1 "$offset" "$length" || fail "node 1's read of $key ($1 owner)"
  local started reader other took
  started=$(date +%s.%N)
  read_one 1 "$offset2" "$length2" 2>"read$3.err" &
  reader=$!
  for _ in $(seq 200); do grep -q "$4" liar.rec.log && break; sleep 0.05; done
  grep -q "$4" liar.rec.log || fail "the $1 owner never held the READ: $(cat liar.rec.log)"
  middle=$((chunk * (4 << 20) + (2 << 20)))
  read_one 1 "$middle" 65536 2>"read$3b.err" &
  other=$!
  wait "$reader" || fail "node 1's read of $key2 with a $1 owner: $(cat "read$3.err")"
  wait "$other" || fail "a read of the chunk's middle with a $1 owner: $(cat "read$3b.err")"
  took=$(/usr/bin/python3 -c "import time; print('%.1f' % (time.time() - $started))")
  echo "step $3: a $1 owner; both READs answered after $took s"
  /usr/bin/python3 -c "import sys; sys.exit(0 if $took < 20 else 1)" ||
    fail "the READs waited $took s on a $1 owner"
  kill -0 "${pids[1]}" || fail "daemon 1 died"
}

# 9. a trickling owner (review finding 1): it answers the chunk's READ with
# a DATA header, then one byte every 0.4 s, within every receive timeout.
# The staging gives up within its deadline (LARDER__RECV_WINDOW_MIN_MS,
# 2 s, for 4 MiB) and node 1 reads key2 from the origin instead.  Before,
# both READs waited for as long as the owner trickled (4 MiB at 2.5 bytes
# a second).
owner_holds trickle cache1h 9 trickling

# 10. a busy owner (review finding 1): it answers the chunk's READ with a
# PROGRESS frame every 0.4 s for up to 60 s.  A READ staged in place
# waits for a busy member 2 s at most, then gives up in place and borrows
# the ordinary way (here: the liar's bytes, found wrong, then the
# origin's); the member is not marked down for it.  Before, 60 s.
owner_holds busy cache1i 10 busy
grep -q "skipped for" "$WORK/daemon1.log" &&
  fail "giving up in place marked the member down: $(cat "$WORK/daemon1.log")"
kill -0 "${pids[1]}" || fail "daemon 1 died"
