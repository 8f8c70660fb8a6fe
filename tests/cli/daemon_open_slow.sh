# An OPEN of an index on a slow origin does not hold up the daemon.  One
# larderd; dataset A packed on local disk, dataset B on an HTTP origin that
# holds B's index (tests/tools/gated_origin.py: everything under held/)
# until the test lets it go.  While a client's OPEN of B waits for its
# index, another client reads A (a READ staged by a worker), opens A again
# on a new connection, asks for STAT, and gets every answer: the OPEN runs
# on a worker of its own, not on the loop thread, and holds no lock the
# others need.  Then B's index is let go: the OPEN is answered, B reads
# byte-exact, and a READ the B client sent right behind its OPEN (before
# OPENED came) was answered after it, on the dataset opened.  Two OPENs
# of one url fetch its index once, a bad one's failure going to both; a
# client hanging up during its OPEN is dropped (the daemon stays idle).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools
make_tree a 60
make_tree b 60
"$LARDER" pack a -o local/A --shard-size 100K >/dev/null
"$LARDER" pack b -o www/held/B --shard-size 100K >/dev/null
mkdir -p www/held/C
head -c 3000 /dev/urandom >www/held/C/index.larder # not an index
start_gated_origin www
"$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" --jobs 2 2>>"$WORK/daemon.log" &
pid=$!
cleanup_hooks=("curl -s $gated_base/__release/all >/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null" "${cleanup_hooks[@]}")
for _ in $(seq 100); do [ -S "$WORK/sock" ] && break; sleep 0.05; done
[ -S "$WORK/sock" ] || fail "larderd did not start: $(cat daemon.log)"

/usr/bin/python3 - "$WORK/sock" "$gated_base" "$WORK/local/A" "$WORK/www/held/B" "$pid" <<'PY' ||
import glob, json, os, socket, struct, sys, time, urllib.request
import larder_wire as w
sock, base, a_dir, b_dir, pid = sys.argv[1:6]

def cpu_ticks():
    with open("/proc/%s/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime

def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read()

def shard(d, i):
    return sorted(glob.glob(d + "/shard-*"))[i]

def expect(path, offset, length):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)

a = w.Client(sock, 1, timeout=10)
a.greet()
a_low, a_high, a_shards = a.open(a_dir + "/index.larder")
assert a_shards >= 3, a_shards
assert a.read(a_low, a_high, 0, 0, 100) == expect(shard(a_dir, 0), 0, 100)

# B's OPEN, and a READ right behind it (B's id is not known yet: the READ
# names A's, which B's connection has not opened: it must be refused, and
# only after the OPEN was answered, never before)
b = w.Client(sock, 1, timeout=10)
b.greet()
b_url = base + "/held/B/index.larder"
b.sock.sendall(w.frame(w.OPEN, b_url.encode(), 40))
b.sock.sendall(w.frame(w.READ, struct.pack("<QQIB3xQQ", a_low, a_high, 0, 0, 0, 100), 41))
for _ in range(400):
    if any("/held/B/index.larder" in p for p, _ in json.loads(get("/__log"))):
        break
    time.sleep(0.05)
else:
    raise SystemExit("the origin never saw B's index asked for")

# B's OPEN waits at the origin: everyone else is served meanwhile
t = time.monotonic()
assert a.read(a_low, a_high, 1, 0, 4096) == expect(shard(a_dir, 1), 0, 4096)
assert a.read(a_low, a_high, 2, 100, 5000) == expect(shard(a_dir, 2), 100, 5000)
kind, payload = a.request(w.STAT)
assert kind == w.STATS, kind
a2 = w.Client(sock, 1, timeout=10)
a2.greet()
assert a2.open(a_dir + "/index.larder")[:2] == (a_low, a_high)
waited = time.monotonic() - t
print("served A, STAT and an OPEN of A in %.3f s while B's index was held" % waited)
b.sock.settimeout(0.3)
try:
    got = w.recv_frame(b.sock)
    raise SystemExit("B's connection answered before its index came: %r" % (got,))
except socket.timeout:
    pass
assert len(json.loads(get("/__log"))) == 1, get("/__log")

def opener(url, request):
    c = w.Client(sock, 1, timeout=20)
    c.greet()
    c.sock.sendall(w.frame(w.OPEN, url.encode(), request))
    return c

def index_gets(name):
    return sum(1 for p, _ in json.loads(get("/__log")) if p == "/held/%s/index.larder" % name)

# a second OPEN of B waits for the first (one fetch); one of a client that
# hangs up at once is dropped, the loop not spinning on its hangup; a bad
# index (C) asked for twice is fetched once, both told why it failed
b2 = opener(b_url, 50)
gone = opener(b_url, 51)
gone.sock.close()
c_url = base + "/held/C/index.larder"
c1 = opener(c_url, 60)
for _ in range(400):
    if index_gets("C"):
        break
    time.sleep(0.05)
c2 = opener(c_url, 61)
time.sleep(1.0)  # c2's OPEN reaches the pool and waits for c1's
t0 = cpu_ticks()
time.sleep(1.0)
spent = cpu_ticks() - t0
tick = os.sysconf("SC_CLK_TCK")
print("the daemon's CPU over 1 s with three OPENs held and a client gone: %.2f s" % (spent / tick))
assert spent < 0.3 * tick, "the daemon spun while its OPENs were held: %d ticks in 1 s" % spent

get("/__release/all")
b.sock.settimeout(20)
kind, request, payload = w.recv_frame(b.sock)
assert kind == w.OPENED and request == 40, (kind, request)
b_low, b_high, b_shards = struct.unpack("<QQI", payload)
kind, request, payload = w.recv_frame(b2.sock)
assert kind == w.OPENED and request == 50 and struct.unpack("<QQI", payload)[:2] == (b_low, b_high)
for c, request in ((c1, 60), (c2, 61)):
    kind, got, payload = w.recv_frame(c.sock)
    assert kind == w.ERROR and got == request, (kind, got)
    print("OPEN of a bad index:", w.parse_error(payload))
assert index_gets("B") == 1 and index_gets("C") == 1, get("/__log")
kind, request, payload = w.recv_frame(b.sock)
assert kind == w.ERROR and request == 41, (kind, request)  # A is not opened on b
assert b.read(b_low, b_high, 0, 0, 3000) == expect(shard(b_dir, 0), 0, 3000)
assert b.read(b_low, b_high, b_shards - 1, 10, 500) == expect(shard(b_dir, b_shards - 1), 10, 500)
print("B opened once its index came, and reads byte-exact")
PY
  fail "a slow OPEN held up the daemon: $(tail -n 5 daemon.log)"
echo ok
