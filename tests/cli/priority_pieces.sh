# A reader blocked on another owner's chunk waits for its own piece of it,
# not for the whole chunk (issue 12, priorities; src/larderd/borrow.c,
# "Pieces"), on three larderd members over an HTTP origin that holds every
# shard read until the test lets it go (tests/tools/gated_origin.py) and
# logs what was asked of it, in order.  One shard of 160 samples of
# 128 KiB; which member owns which 4 MiB chunk comes from
# tests/unit/owner_chunk_reference.py (docs/protocol.md's formula, written
# apart from the C), where each sample lies from the tar file (tarfile).
# Node 1's reader reads, one DEMAND READ each:
#  1. a sample A at the start of a chunk C that node 0 owns: a lone READ,
#     node 0 asks the origin for about A's bytes;
#  2. the last sample B wholly in C (in C's last MiB): what node 0 asks
#     the origin for lies in that last MiB (and the samples straddling
#     its edges) only, and B is answered once that is let go, while the
#     origin was never asked for C's middle 2 MiB (before: the whole chunk,
#     and B waited for all of it);
#  3. after B's answer, the next piece, the first MiB of the chunk after C
#     (owned by node 0 or 2), is asked of the origin, and only once that
#     is let go the MiB after it: read ahead, in order, one at a time;
#  4. nodes 1 and 2 both read a sample in the middle of another chunk D of
#     node 0's at once (each after a lone one of D first): node 0 asks the
#     origin for that piece once (no two requests overlap; one exact repeat
#     at most, a hedge), and both are answered right once it is let go.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools:$TESTS/unit

/usr/bin/python3 - <<'PY'
import os, random
r = random.Random(12)
os.makedirs("s")
for i in range(160):
    with open("s/sample%05d.bin" % i, "wb") as f:
        f.write(r.randbytes(128 << 10))
PY
"$LARDER" pack s -o www/S --shard-size 1G >/dev/null
[ -f www/S/shard-000000.tar ] && [ ! -e www/S/shard-000001.tar ] || fail "not one shard: $(ls www/S)"
start_gated_origin www
cluster_init pieces-secret
S_ID=$("$LARDER" inspect www/S/index.larder --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
# a base port at which node 0 owns a chunk C followed by a whole chunk
# node 1 does not own, and another chunk D of 8 samples or more
candidates=$(/usr/bin/python3 - "$S_ID" www/S/shard-000000.tar <<'PY'
import os, random, sys, tarfile
from owner_chunk_reference import owner
CHUNK = 4 << 20
high, low = int(sys.argv[1][:16], 16), int(sys.argv[1][16:], 16)
starts = [m.offset_data for m in tarfile.open(sys.argv[2]) if m.isfile()]
chunks = (os.path.getsize(sys.argv[2]) + CHUNK - 1) // CHUNK
found = 0  # up to 20 usable bases: reserve_ports (lib.sh) takes the first one free
for _ in range(1000):
    base = random.randint(20000, 32000)
    names = ["127.0.0.1:%d" % (base + n) for n in range(3)]
    owners = [owner(names, low, high, 0, c) for c in range(chunks)]
    # C + 1 a whole chunk: the read ahead's two pieces must be there to ask
    # for (the shard's last chunk is a sliver a fill of C's last sample covers)
    cs = [c for c in range(chunks - 1)
          if owners[c] == 0 and owners[c + 1] != 1 and (c + 2) * CHUNK <= os.path.getsize(sys.argv[2])]
    if cs and any(owners[d] == 0 and d not in (cs[0], cs[0] + 1) and
                  sum(1 for s in starts if d * CHUNK <= s < (d + 1) * CHUNK - (128 << 10) - 512) >= 8
                  for d in range(chunks)):
        print(base)
        found += 1
        if found == 20:
            break
PY
)
[ -n "$candidates" ] || fail "no port base gives node 0 the chunks the test needs"
reserve_ports 3 $candidates
base=$port_base
members="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
start_daemon 0
start_daemon 1
start_daemon 2

env "${sanitized_python[@]}" /usr/bin/python3 - "$WORK" "$gated_base" "$members" <<'PY' || fail "see above"
import json, os, re, sys, tarfile, threading, time, urllib.request
import larder_wire as w
from owner_chunk_reference import owner

work, base, members = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
CHUNK, PIECE = 4 << 20, 1 << 20
shard = os.path.join(work, "www/S/shard-000000.tar")
data = open(shard, "rb").read()
samples = [(m.offset_data, m.size) for m in tarfile.open(shard) if m.isfile()]


def origin(path):
    return urllib.request.urlopen(base + path, timeout=10).read()


def asked():  # the origin's log: (first, last + 1) of each shard range, in order of arrival
    out = []
    for path, wanted in json.loads(origin("/__log")):
        m = re.match(r"bytes=(\d+)-(\d+)$", wanted)
        out.append((int(m.group(1)), int(m.group(2)) + 1))
    return out


def release_new(seen):  # let go every request logged after the first `seen`; how many now
    log = asked()
    for i in range(seen, len(log)):
        origin("/__release/%d" % i)
    return len(log)


class Read(threading.Thread):  # one DEMAND READ on a node's daemon, checked against the shard
    def __init__(self, node, offset, length):
        super().__init__(daemon=True)
        self.node, self.offset, self.length, self.error, self.done = node, offset, length, None, False
        self.start()

    def run(self):
        try:
            c = w.Client(os.path.join(work, "sock%d" % self.node), 1, timeout=60)
            c.greet()
            low, high, _ = c.open(base + "/S/index.larder")
            got = c.read(low, high, 0, self.offset, self.length)
            assert got == data[self.offset:self.offset + self.length], "bytes differ"
        except Exception as e:  # reported by the main thread
            self.error = repr(e)
        self.done = True


def wait_for(what, test, seconds=20):
    end = time.time() + seconds
    while not test():
        if time.time() > end:
            sys.exit("FAIL: timed out waiting for " + what)
        time.sleep(0.02)


def settle(seen):  # the log's length once nothing more arrived for 0.5 s
    n, quiet = len(asked()), time.time()
    while time.time() - quiet < 0.5:
        time.sleep(0.05)
        m = len(asked())
        if m != n:
            n, quiet = m, time.time()
    return n


hello = w.Client(os.path.join(work, "sock0"), 1, timeout=30)
hello.greet()
id_low, id_high, _ = hello.open(base + "/S/index.larder")
chunks = (len(data) + CHUNK - 1) // CHUNK
owners = [owner(members, id_low, id_high, 0, c) for c in range(chunks)]
print("chunk owners:", owners)
inside = lambda c: [s for s in samples if s[0] >= c * CHUNK and s[0] + s[1] <= (c + 1) * CHUNK]
# C: node 0's, followed by a whole chunk node 1 does not own (the read
# ahead's two pieces are asked of the origin there); D: another of node 0's
cs = [c for c in range(chunks - 1)
      if owners[c] == 0 and owners[c + 1] != 1 and (c + 2) * CHUNK <= len(data)]
ds = [c for c in range(chunks) if owners[c] == 0 and cs and c not in (cs[0], cs[0] + 1) and len(inside(c)) >= 8]
assert cs and ds, "the port base does not give node 0 the chunks (owners %s)" % owners
C, D = cs[0], ds[0]
A, B = inside(C)[0], inside(C)[-1]
print("chunk C=%d: A at %d+%d, B at %d+%d; D=%d" % (C, A[0], A[1], B[0], B[1], D))
assert B[0] >= C * CHUNK + 3 * PIECE, "B is not in C's last MiB"

# 1. A, a lone READ
seen = 0
r = Read(1, *A)
while not r.done:
    seen = release_new(seen)
    time.sleep(0.02)
assert r.error is None, "A: " + r.error
print("1. A answered; the origin was asked for", asked())

# 2. B: node 0 asks the origin for B's piece only, and B is answered once that is let go
r = Read(1, *B)
wait_for("node 0's origin read for B", lambda: len(asked()) > seen)
n = settle(seen)
ranges = asked()[seen:n]
print("2. for B the origin was asked for", ranges)
# a piece's fill reads whole samples and whole blocks: the samples straddling its edges, and theirs
SLACK = 3 * (A[1] + 1024)
lo, hi = C * CHUNK + 3 * PIECE - SLACK, (C + 1) * CHUNK + SLACK
for first, end in ranges:
    assert lo <= first and end <= hi, "B's borrow asked the origin for %d-%d, outside C's last MiB" % (first, end)
assert not r.done, "B answered before its origin read was let go"
for i in range(seen, n):
    origin("/__release/%d" % i)
seen = n
wait_for("B's answer", lambda: r.done)
assert r.error is None, "B: " + r.error
middle = (C * CHUNK + PIECE + SLACK, C * CHUNK + 3 * PIECE - SLACK)
for first, end in asked():
    assert end <= middle[0] or first >= middle[1], "C's middle was asked of the origin (%d-%d)" % (first, end)
print("2. B answered; C's middle never asked of the origin")

# 3. read ahead: the next chunk's first MiB is asked for after B's answer
nxt = (C + 1) * CHUNK
wait_for("the read ahead of the next piece",
         lambda: any(first < nxt + PIECE and end > nxt for first, end in asked()[seen:]))
print("3. after B's answer the origin was asked for", asked()[seen:])
for first, end in asked()[seen:]:
    assert nxt - SLACK <= first and end <= nxt + PIECE + SLACK, \
        "the read ahead asked for %d-%d, not the next piece" % (first, end)
seen = release_new(seen)
# ... and, that one let go, the piece after it (one at a time, in order)
wait_for("the read ahead of the piece after it",
         lambda: any(first < nxt + 2 * PIECE and end > nxt + PIECE for first, end in asked()[seen:]))
print("3. then", asked()[seen:])
for first, end in asked()[seen:]:
    assert nxt + PIECE - SLACK <= first and end <= nxt + 2 * PIECE + SLACK, \
        "the read ahead asked for %d-%d, not the piece after" % (first, end)
origin("/__release/all")

# 4. two borrowers of one piece at once: the origin is asked for it once
a = inside(D)[0]
b = [s for s in inside(D) if s[0] >= D * CHUNK + PIECE + SLACK][0]  # a piece away from D's edges
for node in (2, 1):
    r = Read(node, *a)
    wait_for("a lone READ of D on node %d" % node, lambda: r.done)
    assert r.error is None, "D's first sample on node %d: %s" % (node, r.error)
origin("/__hold")
before = len(asked())
both = [Read(1, *b), Read(2, *b)]
wait_for("node 0's origin read for D's piece", lambda: len(asked()) > before)
n = settle(before)
held = asked()[before:n]
print("4. for the two borrowers of D's sample at %d the origin was asked for %s" % (b[0], held))
assert not any(r.done for r in both), "a borrower was answered before the origin was let go"
unique = sorted(set(held))
for (f1, e1), (f2, e2) in zip(unique, unique[1:]):
    assert e1 <= f2, "the origin was asked for bytes twice: %d-%d and %d-%d" % (f1, e1, f2, e2)
assert any(f <= b[0] and b[0] + b[1] <= e for f, e in held), "no origin read holds the sample"
assert len(held) - len(unique) <= 1, "the same read was asked %d times" % (len(held) - len(unique) + 1)
origin("/__release/all")
for r in both:
    wait_for("the two borrowers' answers", lambda: r.done)
    assert r.error is None, "D's sample on node %d: %s" % (r.node, r.error)
print("4. both borrowers answered, the piece asked of the origin once")
PY
for n in 0 1 2; do kill -0 "${pids[$n]}" || fail "daemon $n died"; done
