# The hedging budget is the node's, not each process's: 8 reader processes
# sharing one cache directory read a dataset at once from an HTTP origin
# where every 4th request stalls, so about a quarter of their reads would
# like a hedge.  Counted on the server (a hedge repeats its read's exact
# range request): hedges <= 5% of reads + 16, the start-up allowance
# (docs/cache.md).  Eight budgets of their own would allow 8 x 16 more.
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS/.." && pwd)
LIB=$ROOT/${BUILD:-build}/liblarder.so
[ -f "$LIB" ] || skip "no $LIB"
/usr/bin/python3 -c 'import ctypes' 2>/dev/null || skip "no /usr/bin/python3"

# 40 shards of 10 samples (1-30 KB): with 4 KiB blocks, about one origin
# read per sample, and each reader's origin of each shard sees only a few
# reads, so it hedges after the cold 500 ms that its stalls exceed
make_tree www/data 400
for s in $(seq 0 39); do
  members=$(for i in $(seq $((s * 10 + 1)) $((s * 10 + 10))); do
    printf "sample%05d.jpg sample%05d.cls " "$i" "$i"
  done)
  (cd www/data && tar --sort=name -cf "../shard$(printf %02d "$s").tar" $members)
done
"$LARDER" index www/shard*.tar -o www/index.larder >/dev/null

/usr/bin/python3 "$TESTS/tools/hedge_origin.py" www port.txt 4 1200 2>server.log &
server=$!
cleanup_hooks+=("kill $server")
for _ in $(seq 100); do [ -s port.txt ] && break; sleep 0.05; done
base=http://127.0.0.1:$(cat port.txt)

# 8 readers, like DataLoader workers: worker w reads samples w, w+8, ...
# in batches of 10, all starting together
readers=()
for w in $(seq 0 7); do
  env "${sanitized_python[@]}" PYTHONPATH="$ROOT/python" LARDER_LIBRARY="$LIB" /usr/bin/python3 - "$base/index.larder" cache "$w" \
    >reader$w.log 2>&1 <<'PY' &
import os, sys, time
import larder
url, cache, w = sys.argv[1], sys.argv[2], int(sys.argv[3])
ds = larder.Dataset(url, cache=cache, block_size=4096)
mine = list(range(w, len(ds), 8))
while not os.path.exists("go"):
    time.sleep(0.01)
for i in range(0, len(mine), 10):
    for data in ds.read_many(mine[i:i + 10]):
        assert data
print("read", len(mine))
PY
  readers+=($!)
done
touch go
for pid in "${readers[@]}"; do
  wait "$pid" || fail "a reader failed: $(cat reader*.log)"
done
total=$(cat reader*.log | awk '$1 == "read" { n += $2 } END { print n + 0 }')
[ "$total" -eq 400 ] || fail "the readers read $total samples, want 400: $(cat reader*.log)"

curl -s "$base/__counts" >counts.json
/usr/bin/python3 - cache/hedge-budget <<'PY' || fail "hedge budget: $(head -c 600 counts.json)"
import json, struct, sys
c = json.load(open("counts.json"))
reads, received = c["distinct"], c["range_requests"]
hedged = received - reads
bound = reads // 20 + 16  # 5% of reads, plus the start-up allowance
print("%d range reads, %d hedged (%.1f%%), bound %d; %d requests stalled"
      % (reads, hedged, 100.0 * hedged / reads, bound, c["stalled"]))
# the budget file, as docs/cache.md lays it out: the node's own count
with open(sys.argv[1], "rb") as f:
    page = f.read()
magic, version, size, per_hedge, spare, credit, b_reads, b_hedges = struct.unpack_from(
    "=8sIIIIQQQ", page)
assert len(page) == 4096 and magic == b"LARDERHB" and version == 1, (magic, version)
assert (per_hedge, spare) == (20, 16), (per_hedge, spare)
print("budget file: %d reads, %d hedges, credit %d" % (b_reads, b_hedges, credit))
assert reads >= 200, c                 # one reader's fills did not stand in for the rest
assert c["stalled"] > 2 * bound, c     # far more stalls than hedges to cut them
assert hedged <= bound, "over the budget: %d > %d" % (hedged, bound)
assert hedged >= 16, "hedging never happened: %d" % hedged
# every read asked for was counted in the one budget (none in a budget
# of its own), and no hedge reached the server that it did not grant
assert b_reads >= reads, (b_reads, reads)
assert hedged <= b_hedges <= b_reads // 20 + 16, (hedged, b_hedges, b_reads)
PY
