# Hints on three larderd daemons over loopback (issue 12, items 4 and 6):
# 1. `larder hint hot INDEX --all-nodes --wait`: every node's cache then
#    holds every byte (checked with the shards emptied at the origin),
#    and the origin served each byte about once for the whole cluster (the
#    nodes' origin_bytes summed, against the shard files' sizes on disk);
#    with --replicas 2, two nodes hold all of it, the one asked among them;
# 2. `larder hint replicate INDEX --to NODE`: that node holds the dataset,
#    the others no more than the shards they own (one copy between them),
#    and a reader there then makes no origin and no peer request (its
#    daemon's STATS before and after, with the shards gone);
# 3. on a node with a small --cache-size: a hint larger than the pins may
#    hold pins what fits and says so; after its TTL the pins are gone
#    (`hint list`) and the blocks are evicted like any others; with a long
#    TTL the pinned samples (worked out from the layout) survive reads of
#    six times the capacity.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
make_tree a 90
make_tree c 40
make_tree b 60
make_tree d 30
"$LARDER" pack a -o origin/A --shard-size 150K >/dev/null
"$LARDER" pack c -o origin/C --shard-size 60K >/dev/null
"$LARDER" pack b -o origin/B --shard-size 100K >/dev/null
"$LARDER" pack d -o origin/D --shard-size 40K >/dev/null

cluster_init cluster-secret
start_daemon 0
start_daemon 1
start_daemon 2

id_of() { "$LARDER" inspect "$1" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])'; }
field() { # cache-dir dataset-id key: that dataset's figure in the cache (0 when absent)
  "$LARDER" stat --cache "$1" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['$3'] for d in json.load(sys.stdin)['datasets'] if d['dataset_id'] == '$2'))"
}
shard_bytes() { cat "$1"/*.tar | wc -c; }
# The origin's shards emptied in place (the daemons hold them open: a
# rename would not stop them reading), and filled again.
hide() { mkdir -p "gone/$1" && for f in origin/$1/*.tar; do cp "$f" "gone/$1/" && : >"$f"; done; }
restore() { for f in gone/$1/*.tar; do cat "$f" >"origin/$1/${f##*/}"; done; }
json_get() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }

# 1. hot, every node
A=$(id_of origin/A/index.larder)
"$LARDER" hint hot origin/A/index.larder --all-nodes --ttl 10m --wait --socket "$WORK/sock0" --json >hintA.json ||
  fail "hint hot: $(cat hintA.json) $(tail -3 daemon0.log)"
cat hintA.json
[ "$(json_get nodes <hintA.json)" = 3 ] || fail "not every node took the hint"
[ "$(json_get done <hintA.json)" = True ] || fail "the hint did not wait for the staging"
[ "$(json_get samples <hintA.json)" = 90 ] || fail "not 90 samples"
size=$(shard_bytes origin/A)
origin=0
for n in 0 1 2; do
  resident=$(field cache$n "$A" resident_bytes)
  total=$(field cache$n "$A" total_bytes)
  [ "$resident" -gt 0 ] && [ "$resident" = "$total" ] || fail "node $n holds $resident of $total bytes of A"
  origin=$((origin + $(field cache$n "$A" origin_bytes)))
done
echo "A: $size bytes of shards; the cluster read $origin from the origin"
awk -v o="$origin" -v s="$size" 'BEGIN { exit !(o >= 0.9 * s && o <= 1.05 * s) }' ||
  fail "the cluster read $origin bytes from the origin for $size bytes of shards"
"$LARDER" hint list --socket "$WORK/sock1" --json | grep -q "\"url\": \"$WORK/origin/A/index.larder\"" ||
  fail "node 1 does not list the hint: $("$LARDER" hint list --socket "$WORK/sock1" --json)"
"$LARDER" hint list --socket "$WORK/sock1" | grep -q "index.larder .* pinned" || fail "hint list's text"
# each daemon's STAT counts A's pinned bytes (whole blocks: at least the shards), and says so
for n in 0 1 2; do
  pinned=$("$LARDER" stat --socket "$WORK/sock$n" --json | /usr/bin/python3 -c '
import json, sys
print([d for d in json.load(sys.stdin)["datasets"] if d["dataset_id"] == sys.argv[1]][0]["pinned_bytes"])' "$A")
  [ "$pinned" -ge "$size" ] || fail "node $n's STAT: $pinned bytes of A pinned, of $size"
  "$LARDER" stat --socket "$WORK/sock$n" | grep -q "^  pinned        " || fail "node $n's stat text: no pinned line"
done
# the origin's shards gone: every node still serves every sample
hide A
for n in 0 1 2; do
  LARDER_SOCKET=$WORK/sock$n "$LARDER" warm origin/A/index.larder --socket "$WORK/sock$n" >warm$n.txt 2>&1 ||
    fail "node $n without the origin: $(cat warm$n.txt)"
  LARDER_SOCKET=$WORK/sock$n same_bytes origin/A/index.larder sample00042 jpg a/sample00042.jpg
done
restore A

# 1b. --replicas 2, asked on node 1: two nodes hold all of D (node 1 and
# one other), and the origin still serves it once
D=$(id_of origin/D/index.larder)
"$LARDER" hint hot origin/D/index.larder --replicas 2 --wait --socket "$WORK/sock1" --json >hintD.json ||
  fail "hint --replicas: $(cat hintD.json)"
[ "$(json_get nodes <hintD.json)" = 2 ] || fail "not two nodes: $(cat hintD.json)"
whole=0
for n in 0 1 2; do
  [ "$(field cache$n "$D" resident_bytes)" = "$(field cache$n "$D" total_bytes)" ] && whole=$((whole + 1))
done
# (the third holds all of D too when it owns every chunk of it: it read
# them from the origin for the other two; D's shards are one chunk each)
[ "$whole" -ge 2 ] || fail "$whole nodes hold all of D, not 2"
[ "$(field cache1 "$D" resident_bytes)" = "$(field cache1 "$D" total_bytes)" ] || fail "node 1 does not hold D"
originD=$(($(field cache0 "$D" origin_bytes) + $(field cache1 "$D" origin_bytes) + $(field cache2 "$D" origin_bytes)))
[ "$originD" = "$(shard_bytes origin/D)" ] || fail "D: the origin served $originD bytes for $(shard_bytes origin/D)"

# 2. replicate to node 2 alone, asked on node 0
C=$(id_of origin/C/index.larder)
"$LARDER" hint replicate origin/C/index.larder --to "127.0.0.1:$((base + 2))" --wait --socket "$WORK/sock0" \
  --json >hintC.json || fail "hint replicate: $(cat hintC.json) $(tail -3 daemon0.log)"
cat hintC.json
[ "$(json_get nodes <hintC.json)" = 1 ] || fail "not one node"
sizeC=$(field cache2 "$C" total_bytes)
[ "$(field cache2 "$C" resident_bytes)" = "$sizeC" ] || fail "node 2 does not hold C"
# resident bytes count whole 64 KiB blocks (up to the dataset's size): one
# copy of C is the shards' blocks, each shard's rounded up
copy=$(for f in origin/C/*.tar; do stat -c %s "$f"; done | awk '{ b += int(($1 + 65535) / 65536) } END { print b * 65536 }')
others=$(($(field cache0 "$C" resident_bytes) + $(field cache1 "$C" resident_bytes)))
echo "C: node 2 holds $sizeC; nodes 0 and 1 hold $others between them (the shards they own; one copy is $copy in blocks)"
[ "$others" -le "$copy" ] || fail "nodes 0 and 1 hold $others bytes of C: more than their owned shards"
stats2() { "$LARDER" stat --socket "$WORK/sock2" --json | /usr/bin/python3 -c "
import json, sys
for d in json.load(sys.stdin)['datasets']:
    if d['dataset_id'] == '$C': print(d['origin_requests'], d['peer_requests'], d['hits'])"; }
read -r o1 p1 h1 <<<"$(stats2)"
hide C
for i in $(seq -f "%05g" 1 40); do # a reader of every sample, through node 2's daemon
  LARDER_SOCKET=$WORK/sock2 LARDER_DAEMON_TIMEOUT_MS=5000 same_bytes origin/C/index.larder \
    "sample$i" jpg "c/sample$i.jpg"
done
read -r o2 p2 h2 <<<"$(stats2)"
echo "node 2 before/after the reader: origin $o1/$o2, peer $p1/$p2, hits $h1/$h2"
[ "$o1" = "$o2" ] && [ "$p1" = "$p2" ] || fail "the reader on node 2 caused remote requests"
[ "$h2" -gt "$h1" ] || fail "the reader's reads were not the daemon's hits"
restore C

# a member that is none, and hostile arguments
expect_error 2 "not a member" "$LARDER" hint replicate origin/C/index.larder --to 127.0.0.1:1 --socket "$WORK/sock0"
expect_error 1 "no-such-key" "$LARDER" hint hot origin/A/index.larder no-such-key --socket "$WORK/sock0"
expect_error 2 "bad --ttl" "$LARDER" hint hot origin/A/index.larder --ttl 0 --socket "$WORK/sock0"
expect_error 2 "not both" "$LARDER" hint hot origin/A/index.larder --replicas 2 --all-nodes --socket "$WORK/sock0"

# 3. pins on a node with a small cache: 512 KiB, 8 blocks of 64 KiB, of which
# pins may hold 7.  A hint of all of B (about 1 MB) pins what fits and says
# so; first with a short TTL (after it, the blocks go like any others), then
# with a long one (the pinned samples survive sweeps of six times the cache).
"$LARDERD" --cache "$WORK/cache3" --socket "$WORK/sock3" --cache-size 512K 2>>"$WORK/daemon3.log" &
pids[3]=$!
for _ in $(seq 100); do [ -S "$WORK/sock3" ] && break; sleep 0.05; done
B=$(id_of origin/B/index.larder)
readable() { # the samples of B node 3 serves with the origin's shards gone
  hide B
  for i in $(seq -f "%05g" 1 60); do
    LARDER_SOCKET=$WORK/sock3 "$LARDER" cat origin/B/index.larder "sample$i" --field jpg 2>/dev/null |
      cmp -s - "b/sample$i.jpg" && echo "$i"
  done
  restore B
}
sweep() { # read all of B through node 3 three times: six times its capacity
  for round in 1 2 3; do
    LARDER_SOCKET=$WORK/sock3 "$LARDER" warm origin/B/index.larder --socket "$WORK/sock3" --jobs 1 >/dev/null
  done
}
# The samples the pins cover, worked out here from the layout (docs/cache.md,
# "Pins"): each shard's samples as one range, pinned block by block in
# shard order until 7 blocks are pinned; a sample is pinned when all its
# blocks are.
for i in $(seq -f "%05g" 1 60); do "$LARDER" inspect origin/B/index.larder --sample "sample$i" --json; echo; done |
  /usr/bin/python3 -c '
import json, sys
samples = [json.loads(line) for line in sys.stdin if line.strip()]
block, room, pinned = 65536, 7, set()
for shard in sorted({s["shard"] for s in samples}):
    mine = [s for s in samples if s["shard"] == shard]
    first = min(s["offset"] for s in mine) // block
    last = (max(s["offset"] + s["length"] for s in mine) - 1) // block
    for b in range(first, last + 1):
        if room == 0: break
        pinned.add((shard, b)); room -= 1
for s in samples:
    blocks = range(s["offset"] // block, (s["offset"] + s["length"] - 1) // block + 1)
    if all((s["shard"], b) in pinned for b in blocks): print(s["key"][len("sample"):])
' | sort >pinned.txt
[ -s pinned.txt ] || fail "no sample of B is pinned whole"

"$LARDER" hint hot origin/B/index.larder --ttl 2s --wait --socket "$WORK/sock3" --json >hintB.json ||
  fail "hint B: $(cat hintB.json)"
cat hintB.json
[ "$(json_get samples <hintB.json)" = 60 ] || fail "not 60 samples"
[ "$(json_get partial <hintB.json)" = True ] || fail "a hint past the capacity was not partial"
pinned=$(json_get pinned_bytes <hintB.json)
[ "$pinned" -le $((7 * 65536)) ] && [ "$pinned" -gt 0 ] || fail "pinned $pinned bytes"
for _ in $(seq 300); do # until the TTL is up
  "$LARDER" hint list --socket "$WORK/sock3" | grep -q "nothing pinned" && break
  sleep 0.1
done
"$LARDER" hint list --socket "$WORK/sock3" | grep -q "nothing pinned" ||
  fail "pins outlived their TTL: $("$LARDER" hint list --socket "$WORK/sock3" --json)"
sweep
[ "$(field cache3 "$B" evictions)" -gt 0 ] || fail "nothing was evicted"
readable >after.txt
released=$(comm -23 pinned.txt after.txt | wc -l)
echo "B: $(wc -l <pinned.txt) samples pinned whole by a hint of 2 s; after it, $released of them evicted"
[ "$released" -gt 0 ] || fail "the once-pinned samples were never evicted after their TTL"

"$LARDER" hint hot origin/B/index.larder --ttl 10m --wait --socket "$WORK/sock3" | grep -q "pinned less than asked" ||
  fail "the text does not say the hint was cut"
readable >staged.txt
[ -z "$(comm -23 pinned.txt staged.txt)" ] || fail "pinned samples not staged: $(comm -23 pinned.txt staged.txt | tr '\n' ' ')"
sweep
readable >kept.txt
missing=$(comm -23 pinned.txt kept.txt | wc -l)
echo "B: pinned for 10 minutes, $missing of them evicted by the sweeps"
[ "$missing" = 0 ] || fail "pinned samples were evicted: $(comm -23 pinned.txt kept.txt | tr '\n' ' ')"
for p in "${pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done
