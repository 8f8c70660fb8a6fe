# bench/borrow_read.c (bench/peer.sh's reader of borrowed chunks only) on
# two daemons over one dataset of several shards: it reads exactly the
# samples lying wholly in chunks node 0 owns (which ones, and their bytes,
# from tests/unit/owner_chunk_reference.py, docs/protocol.md's formula
# written apart from the C, and from the index's own listing), each byte
# of them borrowed by node 1 from node 0; bad arguments are refused with a
# message and exit 2.
source "$(dirname "$0")/lib.sh"
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)
reader=$BUILD_ABS/larder_bench_borrow_read
LARDERD=$BUILD_ABS/larderd
[ -x "$reader" ] || fail "larder_bench_borrow_read was not built"
export PYTHONPATH=$TESTS/unit

/usr/bin/python3 - <<'PY'
import os, random
r = random.Random(7)
os.makedirs("s")
for i in range(120):
    with open("s/sample%04d.bin" % i, "wb") as f:
        f.write(r.randbytes(r.randint(60 << 10, 200 << 10)))
PY
"$LARDER" pack s -o origin --shard-size 6M >/dev/null
INDEX=$WORK/origin/index.larder
reserve_ports 2
base=$port_base
members="127.0.0.1:$base,127.0.0.1:$((base + 1))"
id=$("$LARDER" inspect "$INDEX" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
# each sample's range in its shard, from the tar files (Python's tarfile):
# its header to the end of its padded data
read -r want_n want_bytes edges < <(/usr/bin/python3 - "$members" "$id" origin/shard-*.tar <<'PY'
import os, sys, tarfile
from owner_chunk_reference import owner
CHUNK = 4 << 20
names, dataset, shards = sys.argv[1].split(","), sys.argv[2], sorted(sys.argv[3:])
high, low = int(dataset[:16], 16), int(dataset[16:], 16)
n = total = edges = 0
for shard, path in enumerate(shards):
    chunks = (os.path.getsize(path) + CHUNK - 1) // CHUNK
    owners = [owner(names, low, high, shard, c) for c in range(chunks)]
    edges += sum(1 for c in range(1, chunks) if owners[c] != owners[c - 1])
    for m in tarfile.open(path):
        if not m.isfile():
            continue
        offset, length = m.offset, m.offset_data - m.offset + (m.size + 511) // 512 * 512
        first, last = offset // CHUNK, (offset + length - 1) // CHUNK
        if all(owners[c] == 0 for c in range(first, last + 1)):
            n, total = n + 1, total + length
print(n, total, edges)
PY
)
[ "$(ls origin/shard-*.tar | wc -l)" -ge 3 ] || fail "want several shards: $(ls origin)"
echo "node 0's chunks hold $want_n samples, $want_bytes bytes"
[ "$want_n" -gt 0 ] || skip "node 0 owns no whole sample at these ports"

printf 'borrow-read-secret\n' >secret
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')
for node in 0 1; do
  "$LARDERD" --cache "$WORK/cache$node" --socket "$WORK/sock$node" --listen "127.0.0.1:$((base + node))" \
    --peers "$members" --secret-file secret 2>>"$WORK/daemon$node.log" &
  pids[$node]=$!
  for _ in $(seq 100); do [ -S "$WORK/sock$node" ] && break; sleep 0.05; done
  [ -S "$WORK/sock$node" ] || fail "daemon $node did not start: $(cat "$WORK/daemon$node.log")"
done
"$LARDER" warm "$INDEX" --socket "$WORK/sock0" >warm0.txt || fail "warm node 0: $(cat warm0.txt)"
peer_bytes() {
  "$LARDER" stat --socket "$WORK/sock1" --json |
    /usr/bin/python3 -c 'import json,sys; print(sum(d["peer_bytes"] for d in json.load(sys.stdin)["datasets"]))'
}
before=$(peer_bytes)
LARDER_SOCKET=$WORK/sock1 "$reader" "$INDEX" "$WORK/cache1" "$members" "127.0.0.1:$((base + 1))" 8 >out.txt 2>err.txt ||
  fail "exit $?: $(cat err.txt)"
read -r n bytes seconds <out.txt
[ "$n" = "$want_n" ] && [ "$bytes" = "$want_bytes" ] ||
  fail "read $n samples, $bytes bytes; node 0's chunks hold $want_n, $want_bytes"
borrowed=$(($(peer_bytes) - before))
echo "read $bytes bytes in $seconds s; node 1 borrowed $borrowed"
# every byte read borrowed, but for the cache block a fill of node 1's own
# sample crossing into node 0's chunk takes from the origin with it (one
# at most per edge where the owner changes)
[ "$borrowed" -ge $((bytes - edges * 65536)) ] ||
  fail "node 1 borrowed $borrowed bytes of the $bytes read ($edges edges between owners)"
# read again: all resident now, the same samples, nothing more borrowed
before=$(peer_bytes)
LARDER_SOCKET=$WORK/sock1 "$reader" "$INDEX" "$WORK/cache1" "$members" "127.0.0.1:$((base + 1))" >out.txt 2>err.txt ||
  fail "again: exit $?: $(cat err.txt)"
read -r n bytes _ <out.txt
[ "$n $bytes" = "$want_n $want_bytes" ] || fail "again: $n samples, $bytes bytes"
[ "$(peer_bytes)" = "$before" ] || fail "resident samples borrowed again"

# refused: too few arguments, SELF not a member, IN_FLIGHT out of range, bad members
for args in "$INDEX" "$INDEX $WORK/cache1 $members 127.0.0.1:1" "$INDEX $WORK/cache1 $members 127.0.0.1:$base 1" \
  "$INDEX $WORK/cache1 $members 127.0.0.1:$base 2000" "$INDEX $WORK/cache1 , 127.0.0.1:$base"; do
  set +e
  # shellcheck disable=SC2086
  LARDER_SOCKET=$WORK/sock1 "$reader" $args >out.txt 2>err.txt
  rc=$?
  set -e
  [ "$rc" = 2 ] || fail "'$args': exit $rc, want 2"
  [ -s err.txt ] || fail "'$args': no message"
done
echo "ok"
