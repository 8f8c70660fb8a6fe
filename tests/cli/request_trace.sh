# The daemons' request trace (LARDERD_TRACE, src/larderd/trace.h): two
# larderd in one cluster (with a secret) over a plain-directory origin,
# both appending to one trace file.  A reader on node B reads every shard
# once (DEMAND): B's trace has a "read local demand" line for each READ
# (and a "chunk local demand" line for each whole chunk of A's it staged
# for them: a READ of one whole chunk is staged under its slot, f1c389f),
# A's a "read peer demand" line for each chunk it served B with the bytes
# it read from the origin, every line is whole (one write each, two
# daemons at once) with every field, and times on the wall clock of the
# test.  With LARDERD_TRACE_MS past any read, nothing is written.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools
make_tree a 200
"$LARDER" pack a -o origin/A --shard-size 100K --block-size 4K >/dev/null

reserve_ports 2
port=$port_base
members="127.0.0.1:$port,127.0.0.1:$((port + 1))"
printf 'cluster-secret\n' >secret
pids=()
start_daemon() { # node trace_ms
  LARDERD_TRACE=$WORK/trace$2 LARDERD_TRACE_MS=$2 "$LARDERD" --cache "$WORK/cache$1-$2" \
    --socket "$WORK/sock$1" --listen "127.0.0.1:$((port + $1))" --peers "$members" \
    --secret-file secret 2>>"$WORK/daemon$1.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$WORK/sock$1" ] && return; sleep 0.05; done
  fail "daemon $1 did not start: $(cat "$WORK/daemon$1.log")"
}
stop_daemons() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait "${pids[@]}" 2>/dev/null
  pids=()
  rm -f "$WORK/sock0" "$WORK/sock1"
}
cleanup_hooks=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done' "${cleanup_hooks[@]}")

read_all() { # every shard whole through node B; prints the wall-clock span read
  /usr/bin/python3 - "$WORK/sock1" "$WORK/origin/A" <<'PY'
import glob, os, sys, time
import larder_wire as w
sock, packed = sys.argv[1:3]
shards = sorted(glob.glob(packed + "/shard-*"))
b = w.Client(sock, 1, timeout=30)
b.greet()
id_low, id_high, num_shards = b.open(packed + "/index.larder")
assert num_shards == len(shards)
began = time.time()
for s, path in enumerate(shards):
    data = b.read(id_low, id_high, s, 0, os.path.getsize(path))
    assert data == open(path, "rb").read(), "shard %d's bytes differ" % s
print("%.3f %.3f %d" % (began * 1000, time.time() * 1000, len(shards)))
PY
}

start_daemon 0 0
start_daemon 1 0
read -r began ended shards <<<"$(read_all)" || fail "reading through node B failed"
stop_daemons
/usr/bin/python3 - "$WORK/trace0" "$began" "$ended" "$shards" <<'PY' || fail "the trace: $(head -5 "$WORK/trace0")"
import sys
path, began, ended, shards = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
FIELDS = ["queue", "borrow", "total", "gate", "origin", "origin_bytes", "origin_reads", "ahead",
          "fg", "bg", "rc"]
local, peer, chunks = [], [], []
for line in open(path):
    f = line.split()
    assert len(f) == 8 + len(FIELDS), "a torn or short line: %r" % line
    kv = dict(x.split("=", 1) for x in f[8:])
    assert list(kv) == FIELDS, line
    at, node, kind, who, cls = float(f[0]), int(f[1]), f[2], f[3], f[4]
    assert kind in ("read", "chunk") and cls == "demand", line
    assert began - 1000 <= at <= ended + 1000, "not on the test's clock: %r" % line
    assert float(kv["total"]) >= float(kv["queue"]) and float(kv["total"]) >= float(kv["origin"])
    assert kv["rc"] == "1", line
    if kind == "chunk":  # B staging a chunk of A's for its READs
        assert node == 1 and who == "local", line
        chunks.append((node, f, kv))
        continue
    (local if who == "local" else peer).append((node, f, kv))
assert len(local) == shards, "%d local READ lines for %d READs" % (len(local), shards)
assert all(node == 1 for node, _, _ in local), "local READs are node B's (1)"
assert peer, "node A served node B none of its chunks"
assert all(node == 0 for node, _, _ in peer), "peer READs are node A's (0)"
assert sum(int(kv["origin_bytes"]) for _, _, kv in peer) > 0, "A read nothing from the origin"
print("trace: %d local READs on B (%d whole chunks staged), %d peer READs on A"
      % (len(local), len(chunks), len(peer)))
PY

# a threshold no read reaches: the file stays empty
start_daemon 0 60000
start_daemon 1 60000
read_all >/dev/null || fail "reading through node B failed (threshold run)"
stop_daemons
[ ! -s "$WORK/trace60000" ] || fail "LARDERD_TRACE_MS=60000 wrote: $(head -3 "$WORK/trace60000")"
