# Priorities end to end (docs/protocol.md, READ; docs/architecture.md): a
# larderd with 4 workers over an HTTP origin that holds every shard read
# until the test releases it, and logs the order the reads arrive in.
# One connection sends 8 HINTED READs, each of another shard: HINTED work
# may hold only half the workers, so 2 reach the origin and 6 wait.  Then
# a DEMAND READ on the same connection: it reaches the origin at once
# (the third read the origin sees, while both HINTED ones are still held),
# and once its read alone is released, its answer is the first on the
# connection, ahead of all 8 HINTED answers.  Then everything is
# released: every answer has the shard's bytes, and the daemon's STAT
# counts the READs by class.  Order is checked, never time.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools
make_tree a 60
"$LARDER" pack a -o www/A --shard-size 40K >/dev/null
shards=$(ls www/A/shard-* | wc -l)
[ "$shards" -ge 9 ] || fail "want 9 shards or more, packed $shards"

start_gated_origin www
base=$gated_base

"$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" --jobs 4 2>>daemon.log &
daemon=$!
cleanup_hooks=("kill $daemon; wait $daemon 2>/dev/null" "${cleanup_hooks[@]}")
for _ in $(seq 100); do [ -S "$WORK/sock" ] && break; sleep 0.05; done
[ -S "$WORK/sock" ] || fail "larderd did not start: $(cat daemon.log)"

/usr/bin/python3 - "$WORK/sock" "$base" www/A <<'PY' || fail "priorities: $(tail -5 daemon.log)"
import glob, json, os, struct, sys, time, urllib.request
import larder_wire as w
sock, base, packed = sys.argv[1], sys.argv[2], sys.argv[3]
shards = sorted(os.path.basename(p) for p in glob.glob(packed + "/shard-*"))
DEMAND, NEAR, HINTED, WARM = 0, 1, 2, 3  # docs/protocol.md

def origin_log():
    with urllib.request.urlopen(base + "/__log", timeout=10) as r:
        seen = []
        for path, rng in json.load(r):
            if [path, rng] not in seen:  # a hedge repeats its read's request
                seen.append([path, rng])
        return seen

def wait_log(n):
    for _ in range(400):
        log = origin_log()
        if len(log) >= n:
            return log
        time.sleep(0.05)
    raise SystemExit("the origin saw %d reads, want %d: %s" % (len(log), n, log))

def release(what):
    urllib.request.urlopen(base + "/__release/" + str(what), timeout=10).read()

c = w.Client(sock, 1, timeout=30)
c.greet()
id_low, id_high, num_shards = c.open(base + "/A/index.larder")
assert num_shards == len(shards), (num_shards, shards)

def read(request, shard, priority, length=1000):
    payload = struct.pack("<QQIB3xQQ", id_low, id_high, shard, priority, 0, length)
    c.sock.sendall(w.frame(w.READ, payload, request))

for i in range(8):
    read(10 + i, i, HINTED)
log = wait_log(2)
hinted_paths = ["/A/" + shards[i] for i in range(8)]
assert all(path in hinted_paths for path, _ in log), log
read(99, 8, DEMAND)
log = wait_log(3)
print("the origin's reads in order:", [p for p, _ in log])
assert len(log) == 3, "more than 2 HINTED reads reached the origin: %s" % log
assert log[2][0] == "/A/" + shards[8], "the DEMAND read was not the third: %s" % log

release(2)  # the DEMAND read only: both HINTED ones stay held
kind, request, payload = w.recv_frame(c.sock)
assert kind == w.DATA and request == 99, (kind, request)
with open(os.path.join(packed, shards[8]), "rb") as f:
    assert payload == f.read(1000)
print("DEMAND answered first, with the HINTED reads still held at the origin")

release("all")
answers = {}
for _ in range(8):
    kind, request, payload = w.recv_frame(c.sock)
    assert kind == w.DATA, kind
    answers[request] = payload
assert sorted(answers) == list(range(10, 18)), sorted(answers)
for i in range(8):
    with open(os.path.join(packed, shards[i]), "rb") as f:
        assert answers[10 + i] == f.read(1000), "shard %d's bytes differ" % i

kind, payload = c.request(w.STAT)
stats = json.loads(payload)
classes = stats["classes"]
print("classes:", classes)
assert classes["hinted"]["started"] == 8 and classes["hinted"]["queued"] == 8, classes
assert classes["demand"]["started"] == 1 and classes["demand"]["wait_max_us"] <= classes["hinted"]["wait_max_us"], classes
assert classes["near"]["queued"] == 0 and classes["warm"]["queued"] == 0, classes
PY
echo "ok"
