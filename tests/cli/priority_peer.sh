# Priorities across a peer link: two larderd on loopback in one cluster,
# over an HTTP origin that holds every shard read until the test releases
# it.  Node B (8 workers) is asked, on one connection, for 5 HINTED READs
# of shards node A (4 workers) owns: B borrows them from A at HINTED, so A
# lets at most 2 of them reach the origin (HINTED may hold half its
# workers; 1 while B's readers read the origin: B tells A so with READERS,
# source_gate.c) although B sends it 4.  Then a DEMAND READ of another of
# A's shards on the same connection to B: B borrows it at DEMAND, A sends
# it to the origin at once (the next read the origin sees), and once it alone is
# released its answer is the first on B's connection.  Were the class
# lost on the way (B asking A at DEMAND), A would send all 4 borrowed
# reads to the origin first.  Which shards A owns is found by asking B
# for one sample of each and watching B's borrowed-read count.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools
make_tree a 200
"$LARDER" pack a -o www/A --shard-size 100K --block-size 4K >/dev/null

start_gated_origin www
base=$gated_base
curl -sf "$base/__release/all" >/dev/null # answered at once while ownership is found

reserve_ports 2
port=$port_base
members="127.0.0.1:$port,127.0.0.1:$((port + 1))"
printf 'cluster-secret\n' >secret
pids=()
start_daemon() { # node jobs
  "$LARDERD" --cache "$WORK/cache$1" --socket "$WORK/sock$1" --listen "127.0.0.1:$((port + $1))" \
    --peers "$members" --secret-file secret --jobs "$2" 2>>"$WORK/daemon$1.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$WORK/sock$1" ] && return; sleep 0.05; done
  fail "daemon $1 did not start: $(cat "$WORK/daemon$1.log")"
}
start_daemon 0 4 # A
start_daemon 1 8 # B
cleanup_hooks=('curl -s '"$base"'/__release/all >/dev/null; for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait ${pids[*]} 2>/dev/null' "${cleanup_hooks[@]}")

/usr/bin/python3 - "$WORK/sock0" "$WORK/sock1" "$base" www/A <<'PY' || fail "peer priorities: $(tail -n 3 daemon0.log daemon1.log)"
import glob, json, os, struct, sys, time, urllib.request
import larder_wire as w
sock_a, sock_b, base, packed = sys.argv[1:5]
shards = sorted(os.path.basename(p) for p in glob.glob(packed + "/shard-*"))
sizes = [os.path.getsize(os.path.join(packed, s)) for s in shards]
DEMAND, HINTED = 0, 2  # docs/protocol.md

def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read()

def origin_log():
    seen = []
    for path, rng in json.loads(get("/__log")):
        if [path, rng] not in seen:  # a hedge repeats its read's request
            seen.append([path, rng])
    return seen

b = w.Client(sock_b, 1, timeout=30)
b.greet()
id_low, id_high, num_shards = b.open(base + "/A/index.larder")
assert num_shards == len(shards)

def stat(client):
    return json.loads(client.request(w.STAT)[1])

def counted():
    """B's READs counted so far, and how many of them it borrowed."""
    datasets = stat(b)["datasets"]
    return (sum(d["hits"] + d["misses"] + d["read_errors"] for d in datasets),
            sum(d["borrowed_reads"] for d in datasets))

def borrowed_after(reads):
    # a READ is counted once its answer is sent (read_job_end), so the
    # answer can come before its count: a STAT right after it may not show
    # it yet, and the next probe's difference took it for its own (shard
    # s-1 owned by A was then missed and B's shard s taken for A's: the
    # fifth HINTED read never went to A).  Wait until all `reads` are in.
    for _ in range(400):
        n, borrowed = counted()
        if n >= reads:
            assert n == reads, (n, reads)
            return borrowed
        time.sleep(0.01)
    raise SystemExit("B counted %d READs, want %d" % (counted()[0], reads))

# which shards A owns: B borrows a read of their first bytes from it
owned_by_a = []
for s in range(len(shards)):
    before = borrowed_after(s)
    b.read(id_low, id_high, s, 0, 100)
    if borrowed_after(s + 1) > before:
        owned_by_a.append(s)
print("A owns shards", owned_by_a, "of", len(shards))
if len(owned_by_a) < 6:
    print("skipped: A owns fewer than 6 shards")
    sys.exit(77)

get("/__hold")
start = len(origin_log())
def wait_log(n):
    for _ in range(400):
        log = origin_log()[start:]
        if len(log) >= n:
            return log
        time.sleep(0.05)
    b.sock.settimeout(1)
    try:
        extra = w.recv_frame(b.sock)
    except Exception as e:
        extra = e
    raise SystemExit("the origin saw %d reads, want %d: %s (B answered: %r; whole log %s)"
                     % (len(log), n, log, extra, origin_log()))

def read(request, shard, priority):
    # the last 1000 bytes: blocks (4 KiB) the probe above did not stage
    payload = struct.pack("<QQIB3xQQ", id_low, id_high, shard, priority, sizes[shard] - 1000, 1000)
    b.sock.sendall(w.frame(w.READ, payload, request))

for i in range(5):
    read(10 + i, owned_by_a[i], HINTED)
log = wait_log(1)
read(99, owned_by_a[5], DEMAND)
demand_path = "/A/" + shards[owned_by_a[5]]
for _ in range(400):  # until the DEMAND read reaches the origin
    log = origin_log()[start:]
    if any(p == demand_path for p, _ in log):
        break
    time.sleep(0.05)
print("the origin's reads in order:", [p for p, _ in log])
paths = [p for p, _ in log]
assert demand_path in paths, "the DEMAND read did not reach the origin: %s" % log
hinted = paths.index(demand_path)
assert hinted <= 2, "more than 2 HINTED reads reached the origin before the DEMAND one: %s" % log
assert len(log) == hinted + 1, "HINTED reads reached the origin after the DEMAND one: %s" % log

get("/__release/%d" % (start + hinted))  # the DEMAND read only: the HINTED ones stay held
kind, request, payload = w.recv_frame(b.sock)
assert kind == w.DATA and request == 99, (kind, request, origin_log()[start:])
with open(os.path.join(packed, shards[owned_by_a[5]]), "rb") as f:
    f.seek(sizes[owned_by_a[5]] - 1000)
    assert payload == f.read(1000)
print("DEMAND answered first through the owner, with the HINTED reads still held")

get("/__release/all")
answers = {}
for _ in range(5):
    kind, request, payload = w.recv_frame(b.sock)
    assert kind == w.DATA, kind
    answers[request] = payload
assert sorted(answers) == list(range(10, 15)), sorted(answers)
for i in range(5):
    with open(os.path.join(packed, shards[owned_by_a[i]]), "rb") as f:
        f.seek(sizes[owned_by_a[i]] - 1000)
        assert answers[10 + i] == f.read(1000), "shard %d's bytes differ" % owned_by_a[i]

# A counted what B asked of it by class: the 5 borrowed HINTED reads
a = w.Client(sock_a, 1, timeout=30)
a.greet()
classes = stat(a)["classes"]
print("A's classes:", classes)
assert classes["hinted"]["started"] == 5, classes
assert classes["near"]["started"] == 0 and classes["warm"]["started"] == 0, classes
PY
echo ok
