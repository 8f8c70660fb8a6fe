# larder.open through a real node daemon (LARDER_SOCKET): a reader sharing
# the daemon's cache has the daemon stage what it misses, then reads it
# from the cache; a reader with no cache of its own, or with a cache other
# than the daemon's, has the daemon serve the file (its own origin
# counters do not move); when the daemon is
# killed, readers carry on from the origin.  Every read is compared with
# what torch.load or Python's open() reads from the original file.
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS/.." && pwd)
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)
LARDERD=$BUILD_ABS/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
/usr/bin/python3 -c "import torch" 2>/dev/null || skip "torch for /usr/bin/python3 missing"
pyenv=(PYTHONPATH="$ROOT/python" PYTHONDONTWRITEBYTECODE=1 LARDER_LIBRARY="$BUILD_ABS/liblarder.so"
  "${sanitized_python[@]}")

mkdir src
/usr/bin/python3 - <<'PY'
import random, torch
g = torch.Generator().manual_seed(1)
torch.save({"w": torch.randn(800, 700, generator=g), "step": 7}, "src/ckpt.pt")
open("src/blob.bin", "wb").write(random.Random(2).randbytes(1500000))
PY
"$LARDER" pack src -o origin >/dev/null
INDEX=$WORK/origin/index.larder

sock=$WORK/sock
"$LARDERD" --cache "$WORK/cache" --socket "$sock" 2>>"$WORK/daemon.log" &
daemon=$!
cleanup_hooks+=('kill $daemon 2>/dev/null; wait $daemon 2>/dev/null')
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || fail "the daemon did not start: $(cat daemon.log)"

daemon_stat() { # field: the daemon's figure for the one dataset
  "$LARDER" stat --socket "$sock" --json | /usr/bin/python3 -c "
import json, sys
print(json.load(sys.stdin)['datasets'][0]['$1'])"
}

# reader.py CACHE EXPECT: torch.load and random reads through larder.open;
# EXPECT 'daemon' also asserts that this reader read nothing from the origin
cat >reader.py <<'PY'
import os, random, sys, torch, larder
cache, expect = sys.argv[1:]
ckpt, blob = os.environ.get("KEYS", "ckpt blob").split()
ds = larder.Dataset(os.environ["INDEX"], cache=cache)
with ds.open(ckpt) as f:
    got = torch.load(f)
want = torch.load("src/ckpt.pt")
assert torch.equal(got["w"], want["w"]) and got["step"] == 7
original = open("src/blob.bin", "rb").read()
rng = random.Random(3)
with ds.open(blob) as f:
    for _ in range(300):
        offset, n = rng.randrange(len(original) + 10), rng.choice([1, 4096, 70000, 600000])
        f.seek(offset)
        assert f.read(n) == original[offset:offset + n], (offset, n)
stats = ds.stats()
if expect == "daemon":
    assert stats["origin_requests"] == 0, stats
print("reader (cache %r): torch.load and 300 reads right; origin requests %d"
      % (cache, stats["origin_requests"]))
PY
export INDEX

# 1. a reader on the daemon's cache
env "${pyenv[@]}" LARDER_SOCKET="$sock" /usr/bin/python3 reader.py "$WORK/cache" any ||
  fail "reader on the shared cache"
served=$(daemon_stat served_bytes)
misses=$(daemon_stat misses)
echo "daemon: $misses misses, $served bytes served"
[ "$misses" -ge 2 ] && [ "$served" -gt 0 ] || fail "the daemon was not asked (misses $misses)"

# 1b. the same files indexed in place (`index --files`: each file a shard
# of its own, so every block a reader misses can be kept whole): sharing
# the daemon's cache, the reader has the daemon stage what it misses and
# sends no bytes back (STAGE READs, docs/protocol.md)
"$LARDER" index --files src -o src/index.larder >/dev/null
INDEX=$WORK/src/index.larder KEYS="ckpt.pt blob.bin" env "${pyenv[@]}" LARDER_SOCKET="$sock" \
  /usr/bin/python3 reader.py "$WORK/cache" any || fail "reader of the in-place index"
staged=$("$LARDER" stat --socket "$sock" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['staged_reads'] for d in json.load(sys.stdin)['datasets']))")
echo "daemon: $staged reads staged for the reader of the in-place index"
[ "$staged" -ge 2 ] || fail "the reader on the daemon's cache had bytes sent ($staged staged reads)"

# 2. a reader with no cache of its own: the daemon serves every byte
env "${pyenv[@]}" LARDER_SOCKET="$sock" /usr/bin/python3 reader.py "" daemon ||
  fail "reader through the daemon"
more=$(daemon_stat served_bytes)
[ "$more" -gt "$served" ] || fail "the daemon served nothing to the cacheless reader"

# 3. a reader with a cache of its own, not the daemon's: what it asks the
# daemon to stage lands in the daemon's cache, not in its own, so the
# daemon sends it the bytes; nothing comes from the origin (its own cache's
# counters are its alone)
env "${pyenv[@]}" LARDER_SOCKET="$sock" /usr/bin/python3 reader.py "$WORK/cache-own" daemon ||
  fail "reader with a cache other than the daemon's"

# 4. whole samples (larder_read_sample: Dataset.read, what a DataLoader
# reads) of the in-place index, by a reader on the daemon's cache after the
# daemon has staged nothing yet (a second daemon on a fresh cache)
# and by one with a cache of its own: right bytes; the first has them
# staged (STAGE), the second is sent them and reads nothing from the origin
cat >samples.py <<'PY'
import os, sys, larder
cache, expect = sys.argv[1:]
ds = larder.Dataset(os.environ["INDEX"], cache=cache)
for key, path in (("ckpt.pt", "src/ckpt.pt"), ("blob.bin", "src/blob.bin")):
    assert ds.read(ds.index_of(key)) == open(path, "rb").read(), key
if expect == "daemon":
    assert ds.stats()["origin_requests"] == 0, ds.stats()
PY
sock2=$WORK/sock2
"$LARDERD" --cache "$WORK/cache-b" --socket "$sock2" 2>>"$WORK/daemon.log" &
daemon2=$!
cleanup_hooks+=('kill $daemon2 2>/dev/null; wait $daemon2 2>/dev/null')
for _ in $(seq 100); do [ -S "$sock2" ] && break; sleep 0.05; done
INDEX=$WORK/src/index.larder env "${pyenv[@]}" LARDER_SOCKET="$sock2" \
  /usr/bin/python3 samples.py "$WORK/cache-b" any || fail "samples on the daemon's cache"
staged=$("$LARDER" stat --socket "$sock2" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['staged_reads'] for d in json.load(sys.stdin)['datasets']))")
[ "$staged" -ge 2 ] || fail "samples on the daemon's cache were sent, not staged ($staged)"
INDEX=$WORK/src/index.larder env "${pyenv[@]}" LARDER_SOCKET="$sock2" \
  /usr/bin/python3 samples.py "$WORK/cache-b-own" daemon || fail "samples with a cache of its own"
kill "$daemon2"; wait "$daemon2" 2>/dev/null || true

# 5. the daemon gone: readers read from the origin, right
kill -9 "$daemon"
wait "$daemon" 2>/dev/null || true
env "${pyenv[@]}" LARDER_SOCKET="$sock" /usr/bin/python3 reader.py "$WORK/cache2" any ||
  fail "reader after the daemon died (cache)"
env "${pyenv[@]}" LARDER_SOCKET="$sock" /usr/bin/python3 reader.py "" any ||
  fail "reader after the daemon died (no cache)"
echo "ok"
