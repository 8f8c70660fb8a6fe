# Eviction by next use through a node daemon (issue 14): a larderd with a
# cache of half the dataset (--cache-size) serves a larder.torch reader
# (LARDER_SOCKET; the same cache directory and capacity) for 3 epochs.
# The reader's plan is registered in the cache directory, so the daemon's
# fills and the reader's own evict by it: epochs 2 and 3 fetch about the
# half that does not fit (the optimum is half, by arithmetic), where with
# LARDER_EVICT=clock (daemon and reader) about all of it comes again.
# Origin bytes are the node's counters, which every process of the node
# adds to.
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS/.." && pwd)
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)
LARDERD=$BUILD_ABS/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
pyenv=(PYTHONPATH="$ROOT/python" PYTHONDONTWRITEBYTECODE=1 LARDER_LIBRARY="$BUILD_ABS/liblarder.so"
  "${sanitized_python[@]}")

make_tree src 240
"$LARDER" pack src -o ds --shard-size 100K >/dev/null
idx=$WORK/ds/index.larder
shards=$(find ds -name '*.tar' -printf '%s\n' | awk '{ s += $1 } END { print s }')
[ "$shards" -gt 0 ] || fail "no shards packed"

daemons=()
cleanup_hooks+=('for p in "${daemons[@]}"; do kill $p 2>/dev/null; done; wait')
start() { # POLICY: a daemon over its own cache of half the dataset
  local policy=$1 sock=$WORK/sock-$1
  LARDER_EVICT=$policy "$LARDERD" --cache "$WORK/cache-$policy" --socket "$sock" \
    --cache-size $((shards / 2)) >>"$WORK/daemon-$policy.log" 2>&1 </dev/null &
  daemons+=($!)
  for _ in $(seq 100); do [ -S "$sock" ] && return; sleep 0.05; done
  fail "larderd ($policy) did not start: $(cat "$WORK/daemon-$policy.log")"
}
run() { # POLICY: per-epoch origin bytes over the shards' size, on one line
  local policy=$1
  env "${pyenv[@]}" LARDER_EVICT="$policy" LARDER_SOCKET="$WORK/sock-$policy" timeout 120 \
    /usr/bin/python3 - "$idx" "$WORK/cache-$policy" "$shards" <<'PY'
import sys
import larder.torch
index, cache, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
ds = larder.torch.IterableDataset(index, cache=cache, cache_size=shards // 2, block_size=4096,
                                  batch_size=8, seed=4,
                                  yield_batches=True, prefetch=2, deny=False)
fetched, before = [], ds.dataset.stats()["origin_bytes"]
for epoch in range(3):
    ds.set_epoch(epoch)
    assert sum(len(b) for b in ds) == len(ds.dataset) // 8 * 8
    now = ds.dataset.stats()["origin_bytes"]
    fetched.append((now - before) / shards)
    before = now
print(" ".join("%.3f" % f for f in fetched))
PY
}
start clock
start plan
clock=$(run clock) || fail "the clock's run failed"
plan=$(run plan) || fail "next use's run failed"
echo "origin bytes per epoch: clock $clock; next use $plan"
/usr/bin/python3 - "$clock" "$plan" <<'PY' || fail "next use did not fetch about half per later epoch (clock $clock, next use $plan)"
import sys
clock, plan = ([float(x) for x in a.split()] for a in sys.argv[1:])
assert 0.9 < plan[0] < 1.25, plan
for e in (1, 2):
    assert plan[e] <= 0.65, plan
    assert clock[e] >= 0.75, clock
    assert plan[e] < 0.75 * clock[e], (plan, clock)
PY
grep -i "error\|warn" "$WORK"/daemon-*.log && fail "the daemons complained"
exit 0
