# Origin bytes that went bad after indexing (issue 9, "Trust"): one byte
# flipped in the middle of one sample of a shard.  Every path that reads
# the sample -- larder cat with a cache, a read through larderd, larder
# warm, a borrow from the shard's owner in a cluster of two daemons --
# fails with a checksum error naming it, the other samples read right,
# and no cache holds the bad sample's blocks (resident bytes stay within
# the blocks a cache may keep: every block but those holding the bad
# sample's bytes alone; after the byte is put back the sample reads right).
#
# Then a power loss: a staged block's data zeroed or punched out while its
# bit stays set.  larder cat --cache, Python's Dataset with the cache and a
# read through larderd each get the right bytes (fetched again) or a clean
# error, never the zeros.
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS/.." && pwd)
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)
LARDERD=$BUILD_ABS/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
pyenv=(PYTHONPATH="$ROOT/python" PYTHONDONTWRITEBYTECODE=1 LARDER_LIBRARY="$BUILD_ABS/liblarder.so"
  "${sanitized_python[@]}")

failures=()
problem() { failures+=("$*"); echo "PROBLEM: $*" >&2; }
# try DESC WANT CMD...: CMD exits WANT (never a signal); stdout in out.bin,
# stderr in err.txt; returns 0 when it did
try() {
  local desc=$1 want=$2 status=0
  shift 2
  timeout 60 "$@" >out.bin 2>err.txt || status=$?
  if grep -qE "Sanitizer|runtime error:" err.txt; then # ASan exits 1, like a clean error
    problem "$desc: a sanitizer report: $(head -c 400 err.txt | tr '\n' ' ')"
    return 1
  fi
  [ "$status" -eq "$want" ] && return 0
  problem "$desc: exit $status, want $want: $(head -c 400 err.txt | tr '\n' ' ')"
  return 1
}
# names_bad DESC: err.txt reports the checksum of the bad sample
names_bad() {
  grep -qi "checksum" err.txt && grep -qE "sample $bad_id\b|'?$bad_key'?" err.txt ||
    problem "$1: no checksum error naming sample $bad_id ('$bad_key'): $(head -c 400 err.txt | tr '\n' ' ')"
}

# 4 KiB blocks, so that the bad sample has blocks of its own
/usr/bin/python3 "$TESTS/tools/craft_index.py" make ds --seed 3 --samples 8 --sample-size 24000 \
  --block-size 4096 >/dev/null
idx=ds/index.larder
"$LARDER" verify $idx >/dev/null || fail "the dataset does not verify before it is damaged"
ID=$("$LARDER" inspect $idx --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')

# the victim: the longest sample of the flat shard; the bytes of the blocks
# a cache may keep (whole blocks), and what the bad one has alone.  Those
# are the good samples' blocks and the blocks holding bytes of no sample:
# the tar shard's end blocks have no checksum and are kept by a fill that
# reaches them (docs/security.md), as the owner's fill of a whole chunk
# borrowed from it does (borrow.c), while a sample's fill never does.
read -r bad_id bad_key shard_name flip keep_bound own_bytes own_blocks <<<"$(/usr/bin/python3 - <<'PY'
import json
layout = json.load(open("ds/layout.json"))
bs = layout["block_size"]
samples = layout["samples"]
flat = len(layout["shards"]) - 1
bad = max((i for i, s in enumerate(samples) if s["shard"] == flat), key=lambda i: samples[i]["length"])
def blocks(s):
    return {(s["shard"], b) for b in range(s["offset"] // bs, (s["offset"] + s["length"] - 1) // bs + 1)}
good = set().union(*(blocks(s) for i, s in enumerate(samples) if i != bad))
own = blocks(samples[bad]) - good
every = {(i, b) for i, shard in enumerate(layout["shards"]) for b in range((shard["size"] + bs - 1) // bs)}
# the cache's block numbers of its own blocks: its shards' blocks end to end
base = [0]
for shard in layout["shards"]:
    base.append(base[-1] + (shard["size"] + bs - 1) // bs)
s = samples[bad]
print(bad, s["key"], layout["shards"][flat]["name"], s["offset"] + s["length"] // 2,
      len(every - own) * bs, len(own) * bs, ",".join(str(base[i] + b) for i, b in sorted(own)))
PY
)"
[ "$own_bytes" -ge $((3 * 4096)) ] || fail "test setup: the bad sample has only $own_bytes bytes of blocks of its own"
good_keys=$(/usr/bin/python3 -c 'import json; print(" ".join(s["key"] for s in json.load(open("ds/layout.json"))["samples"]))')
good_keys=$(echo $good_keys | tr ' ' '\n' | grep -vx "$bad_key" | tr '\n' ' ')

# resident DIR: the dataset's resident bytes in the cache at DIR (0 if none)
resident() {
  "$LARDER" stat --cache "$1" --json | /usr/bin/python3 -c '
import json, sys
print(sum(d["resident_bytes"] for d in json.load(sys.stdin)["datasets"] if d["dataset_id"] == sys.argv[1]))' "$ID"
}
# own_resident DIR: how many of the bad sample's own blocks the cache at DIR
# holds, from its resident bitmap (docs/cache.md: the first of the bitmaps
# after the 4096-byte header of DIR/ID/blocks, bit b of 64-bit word b/64)
own_resident() {
  /usr/bin/python3 - "$1/$ID/blocks" "$own_blocks" <<'PY'
import os, struct, sys
path, blocks = sys.argv[1], [int(b) for b in sys.argv[2].split(",")]
if not os.path.exists(path):
    print(0)
    sys.exit()
with open(path, "rb") as f:
    data = f.read()
magic, version = struct.unpack_from("<8sI", data)
if magic != b"LARDERCB" or version != 4:
    sys.exit(f"{path}: cache format {magic!r} version {version}, this test reads version 4")
print(sum(data[4096 + b // 8] >> (b % 8) & 1 for b in blocks))
PY
}
# staged_within DESC DIR: the cache holds none of the bad sample's own
# blocks, and no more than the blocks it may keep
staged_within() {
  local r n
  n=$(own_resident "$2") || fail "cannot read the resident bitmap of $2"
  [ "$n" -eq 0 ] || problem "$1: $n of the bad sample's own blocks ($own_blocks) are resident"
  r=$(resident "$2")
  [ "$r" -le "$keep_bound" ] ||
    problem "$1: $r bytes resident, more than the blocks without the bad sample's bytes alone ($keep_bound): the bad sample's blocks were staged"
}

original=$(od -An -tx1 -j "$flip" -N1 "ds/$shard_name" | tr -d ' ')
flipped=$(printf '%02x' $((0x$original ^ 0xff)))
poke() { printf "\\x$1" | dd of="ds/$shard_name" bs=1 seek="$flip" conv=notrunc 2>/dev/null; }
poke "$flipped"

# ---- larder cat --cache -----------------------------------------------------

try "cat --cache of the bad sample" 1 "$LARDER" cat $idx "$bad_key" --cache c1 && names_bad "cat --cache"
[ "$(resident c1)" -eq 0 ] || problem "cat --cache: a failed read left $(resident c1) bytes staged"
for k in $good_keys; do
  try "cat --cache of $k" 0 "$LARDER" cat $idx "$k" --cache c1 && { cmp -s out.bin "ds/expect/$k" || problem "cat --cache of $k: wrong bytes"; }
done
staged_within "cat --cache" c1

# ---- larder warm ------------------------------------------------------------

try "warm" 1 "$LARDER" warm $idx --cache c2 --jobs 4 && names_bad "warm"
grep -q "1 samples failed" out.bin || problem "warm: $(cat out.bin)"
staged_within "warm" c2

# ---- one larderd, the cache its own -------------------------------------------

reserve_ports 2
base=$port_base
pids=()
start_daemon() { # N [options]: daemon N on sockN with cacheN
  local n=$1
  shift
  "$LARDERD" --cache "$WORK/cache$n" --socket "$WORK/sock$n" "$@" 2>>"$WORK/daemon$n.log" &
  pids[$n]=$!
  for _ in $(seq 100); do [ -S "$WORK/sock$n" ] && return; sleep 0.05; done
  fail "daemon $n did not start: $(cat "$WORK/daemon$n.log")"
}
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait')
start_daemon 0
try "through larderd, reader without a cache" 1 env LARDER_SOCKET="$WORK/sock0" \
  "$LARDER" cat $idx "$bad_key" && names_bad "through larderd, reader without a cache"
try "through larderd, reader on the daemon's cache" 1 env LARDER_SOCKET="$WORK/sock0" \
  "$LARDER" cat $idx "$bad_key" --cache "$WORK/cache0" && names_bad "through larderd, reader on the daemon's cache"
try "warm through larderd" 1 env LARDER_SOCKET="$WORK/sock0" \
  "$LARDER" warm $idx --cache "$WORK/cache0" && names_bad "warm through larderd"
staged_within "larderd" "$WORK/cache0"
"$LARDER" stat --socket "$WORK/sock0" --json | grep -q "$ID" || problem "larderd never opened the dataset"

# ---- two daemons: a borrow of the bad shard from its owner ----------------------

members="127.0.0.1:$base,127.0.0.1:$((base + 1))"
printf 'corrupt-origin-secret\n' >secret
for n in 1 2; do
  start_daemon $n --listen "127.0.0.1:$((base + n - 1))" --peers "$members" --secret-file secret
done
for n in 1 2; do
  for k in $good_keys; do
    try "node $n: $k" 0 env LARDER_SOCKET="$WORK/sock$n" "$LARDER" cat $idx "$k" --cache "$WORK/cache$n" &&
      { cmp -s out.bin "ds/expect/$k" || problem "node $n: $k: wrong bytes"; }
  done
done
# the bad sample through each node in turn; one of the two borrows it from
# the other, the owner, which must not stage what it read for the borrower
# (looked at right away: the owner's own next read would repair it)
for n in 1 2; do
  try "node $n: the bad sample" 1 env LARDER_SOCKET="$WORK/sock$n" \
    "$LARDER" cat $idx "$bad_key" --cache "$WORK/cache$n" && names_bad "node $n"
  for m in 1 2; do staged_within "node $m, after node $n read the bad sample" "$WORK/cache$m"; done
done
peer=0
for n in 1 2; do
  p=$("$LARDER" stat --cache "$WORK/cache$n" --json | /usr/bin/python3 -c '
import json, sys
print(sum(d["peer_requests"] for d in json.load(sys.stdin)["datasets"] if d["dataset_id"] == sys.argv[1]))' "$ID")
  peer=$((peer + p))
done
echo "the bad sample: $bad_key (sample $bad_id), $own_bytes bytes of blocks of its own; blocks a cache may keep: $keep_bound bytes"
echo "resident: c1 $(resident c1), c2 $(resident c2), daemons $(resident "$WORK/cache0") $(resident "$WORK/cache1") $(resident "$WORK/cache2"); peer requests $peer"
[ "$peer" -gt 0 ] || problem "neither daemon borrowed from the other: the borrow path went untested"
for n in 0 1 2; do kill -0 "${pids[$n]}" 2>/dev/null || problem "daemon $n died: $(tail -3 "$WORK/daemon$n.log")"; done

# ---- the byte put back: the sample reads right from every cache --------------

poke "$original"
"$LARDER" verify $idx >/dev/null || problem "the shard did not come back"
for c in c1 c2; do
  try "$c after repair" 0 "$LARDER" cat $idx "$bad_key" --cache $c && { cmp -s out.bin "ds/expect/$bad_key" || problem "$c: wrong bytes after repair"; }
done
for n in 0 1 2; do
  try "node $n after repair" 0 env LARDER_SOCKET="$WORK/sock$n" "$LARDER" cat $idx "$bad_key" --cache "$WORK/cache$n" &&
    { cmp -s out.bin "ds/expect/$bad_key" || problem "node $n: wrong bytes after repair"; }
done

# ---- power loss: staged blocks zeroed under a set bit ---------------------------

try "warm for the power loss" 0 "$LARDER" warm $idx --cache pl
[ "$(resident pl)" -gt 0 ] || fail "nothing staged for the power loss test"
# the blocks in the middle of three samples of the flat shard, one per path
read -r data k1 o1 k2 o2 k3 o3 <<<"$(/usr/bin/python3 - "$ID" <<'PY'
import json, sys
layout = json.load(open("ds/layout.json"))
bs, flat = layout["block_size"], len(layout["shards"]) - 1
picks = [s for s in layout["samples"] if s["shard"] == flat and s["length"] > 3 * bs][:3]
out = [f"pl/{sys.argv[1]}/{flat:06d}.data"]
for s in picks:
    out += [s["key"], (s["offset"] + s["length"] // 2) // bs * bs]
print(*out)
PY
)"
[ -n "$o3" ] && [ -f "$data" ] || fail "test setup: no data file $data or too few long samples"
lose() { # lose OFFSET: the block there is gone (a hole) and the next one zeros
  fallocate --punch-hole --offset "$1" --length 4096 "$data"
  /usr/bin/python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY); os.pwrite(fd, bytes(4096), int(sys.argv[2]) + 4096); os.close(fd)' "$data" "$1"
}
zeros() { # zeros KEY: the sample's expected bytes hold no 8 KiB run of zeros (else the test proves nothing)
  /usr/bin/python3 -c 'import sys; sys.exit(bytes(8192) in open(sys.argv[1], "rb").read())' "ds/expect/$1"
}
for k in $k1 $k2 $k3; do zeros "$k" || fail "test setup: $k holds zeros of its own"; done

# 1. larder cat --cache
lose "$o1"
status=0
timeout 60 "$LARDER" cat $idx "$k1" --cache pl >out.bin 2>err.txt || status=$?
if [ $status -eq 0 ]; then
  cmp -s out.bin "ds/expect/$k1" || problem "power loss: cat --cache served wrong bytes for $k1"
elif [ $status -ne 1 ]; then
  problem "power loss: cat --cache ended with status $status"
fi
# 2. Python's Dataset over the cache
lose "$o2"
env "${pyenv[@]}" timeout 60 /usr/bin/python3 - "$idx" "$k2" "ds/expect/$k2" >py.txt 2>&1 <<'PY' ||
import sys
import larder
index, key, expect = sys.argv[1:]
ds = larder.Dataset(index, cache="pl")
try:
    data = ds.read(ds.index_of(key))
except larder.LarderError as e:
    print(f"clean error: {e}")
    sys.exit(0)
sys.exit(0 if data == open(expect, "rb").read() else "wrong bytes")
PY
  problem "power loss: Python read $k2 wrong or died: $(tail -3 py.txt)"
# 3. through larderd, which owns the cache; the reader asks it for everything
kill "${pids[0]}" 2>/dev/null
wait "${pids[0]}" 2>/dev/null || true
rm -f "$WORK/sock0"
"$LARDERD" --cache "$WORK/pl" --socket "$WORK/sockpl" 2>>"$WORK/daemonpl.log" &
pids[3]=$!
for _ in $(seq 100); do [ -S "$WORK/sockpl" ] && break; sleep 0.05; done
lose "$o3"
for round in 1 2; do # the second after it has served the sample once
  status=0
  LARDER_SOCKET=$WORK/sockpl timeout 60 "$LARDER" cat $idx "$k3" >out.bin 2>err.txt || status=$?
  if [ $status -eq 0 ]; then
    cmp -s out.bin "ds/expect/$k3" || problem "power loss: larderd (round $round) served wrong bytes for $k3"
  elif [ $status -ne 1 ]; then
    problem "power loss: a read through larderd ended with status $status"
  fi
  lose "$o3"
done
# and a reader sharing the damaged cache with the daemon
status=0
LARDER_SOCKET=$WORK/sockpl timeout 60 "$LARDER" cat $idx "$k3" --cache "$WORK/pl" >out.bin 2>err.txt || status=$?
if [ $status -eq 0 ]; then
  cmp -s out.bin "ds/expect/$k3" || problem "power loss: a reader on larderd's cache got wrong bytes for $k3"
elif [ $status -ne 1 ]; then
  problem "power loss: a reader on larderd's cache ended with status $status"
fi

"$LARDER" stat --cache pl --json | /usr/bin/python3 -c '
import json, sys
d = [d for d in json.load(sys.stdin)["datasets"] if d["dataset_id"] == sys.argv[1]][0]
print("power loss: %d refetches, %d origin requests on the cache" % (d["refetches"], d["origin_requests"]))' "$ID"

! grep -qE "Sanitizer|runtime error:" "$WORK"/daemon*.log ||
  problem "a sanitizer report from a daemon: $(grep -h -m3 -E "Sanitizer|runtime error:" "$WORK"/daemon*.log)"

if [ ${#failures[@]} -gt 0 ]; then
  echo "${#failures[@]} problems:"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "corrupt origin bytes and lost cache blocks were never served"
