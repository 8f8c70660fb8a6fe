# A PUBLISH whose index takes long to open does not hold up the daemon.
# One larderd; dataset A packed on local disk; dataset P packed on local
# disk and written through (copied) to an HTTP origin that holds P's index
# (tests/tools/gated_origin.py: everything under held/) until the test lets
# it go.  A client PUBLISHes P with that origin copy: the daemon opens both
# indexes and checks they are one dataset, so the PUBLISH waits at the
# origin.  Meanwhile another client reads A, asks for STAT and opens A on a
# new connection, and gets every answer (the PUBLISH runs on the open pool,
# not on the loop thread: before, each of these timed out); the publisher's
# connection is answered nothing, not even a RESOLVE it sent right behind
# its PUBLISH.  Then the index is let go: the PUBLISH is answered first
# (RESOLVED, P's id), then the RESOLVE behind it finds the name.  A second
# PUBLISH of the name is still refused (already published), and one of a
# written-through copy that is another dataset still fails, as before.
# Last, a --replace of the name with dataset R, its written-through copy
# held at the origin: a second --replace of the name meanwhile is refused
# at once ("being replaced here"; two at once left the loser's dataset
# open for good), and the first is answered with R's id once let go.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools
make_tree a 60
make_tree p 60
make_tree q 20
make_tree r 30
"$LARDER" pack a -o local/A --shard-size 100K >/dev/null
"$LARDER" pack p -o local/P --shard-size 100K >/dev/null
"$LARDER" pack q -o www/held/Q --shard-size 100K >/dev/null # another dataset
"$LARDER" pack r -o local/R --shard-size 100K >/dev/null
mkdir -p www/held
cp -r local/P www/held/P
cp -r local/R www/held/R
start_gated_origin www
"$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" --jobs 2 2>>"$WORK/daemon.log" &
pid=$!
cleanup_hooks=("curl -s $gated_base/__release/all >/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null" "${cleanup_hooks[@]}")
for _ in $(seq 100); do [ -S "$WORK/sock" ] && break; sleep 0.05; done
[ -S "$WORK/sock" ] || fail "larderd did not start: $(cat daemon.log)"

/usr/bin/python3 - "$WORK/sock" "$gated_base" "$WORK/local/A" "$WORK/local/P" "$WORK/local/R" <<'PY' ||
import glob, json, socket, struct, sys, time, urllib.request
import larder_wire as w
sock, base, a_dir, p_dir, r_dir = sys.argv[1:6]

def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read()

def wait_logged(path):
    for _ in range(400):
        if any(p == path for p, _ in json.loads(get("/__log"))):
            return
        time.sleep(0.05)
    raise SystemExit("the origin never saw %s asked for" % path)

def expect(path, offset, length):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)

def shard(d, i):
    return sorted(glob.glob(d + "/shard-*"))[i]

def claimed_id(index):  # bytes 16-31 of an index (docs/format.md): the dataset's id
    with open(index, "rb") as f:
        return struct.unpack("<QQ", f.read(32)[16:32])

def refused(payload, needle):
    c = w.Client(sock, 1, timeout=20)
    c.greet()
    w.expect_refused(c, w.PUBLISH, payload, needle, "PUBLISH accepted")

a = w.Client(sock, 1, timeout=10)
a.greet()
a_low, a_high, a_shards = a.open(a_dir + "/index.larder")
assert a.read(a_low, a_high, 0, 0, 100) == expect(shard(a_dir, 0), 0, 100)

pub = w.Client(sock, 1, timeout=10)
pub.greet()
p_index = (p_dir + "/index.larder").encode()
pub.sock.sendall(w.frame(w.PUBLISH, w.publish_payload(b"ckpt", p_index,
                                                      (base + "/held/P/index.larder").encode()), 70))
pub.sock.sendall(w.frame(w.RESOLVE, w.resolve_payload(b"ckpt"), 71))
wait_logged("/held/P/index.larder")

# the PUBLISH waits at the origin: everyone else is served meanwhile
t = time.monotonic()
assert a.read(a_low, a_high, 1, 0, 4096) == expect(shard(a_dir, 1), 0, 4096)
kind, payload = a.request(w.STAT)
assert kind == w.STATS, kind
a2 = w.Client(sock, 1, timeout=10)
a2.greet()
assert a2.open(a_dir + "/index.larder")[:2] == (a_low, a_high)
print("served A, STAT and an OPEN of A in %.3f s while the PUBLISH's index was held"
      % (time.monotonic() - t))
# the same name published meanwhile from another connection: refused at once
refused(w.publish_payload(b"ckpt", p_index), "being published here")
pub.sock.settimeout(0.5)
try:
    got = w.recv_frame(pub.sock)
    raise SystemExit("the publisher was answered before its index came: %r" % (got,))
except socket.timeout:
    pass

get("/__release/all")
pub.sock.settimeout(20)
kind, request, payload = w.recv_frame(pub.sock)
assert kind == w.RESOLVED and request == 70, (kind, request, payload)
p_low, p_high = struct.unpack("<QQ", payload[:16])
assert (p_low, p_high) == claimed_id(p_dir + "/index.larder"), (p_low, p_high)
kind, request, payload = w.recv_frame(pub.sock)
assert kind == w.RESOLVED and request == 71, (kind, request)
assert struct.unpack("<QQ", payload[:16]) == (p_low, p_high)
print("the PUBLISH answered once its index came, then the RESOLVE behind it")

# its refusals are as before: the name is taken; a written-through copy of another dataset
refused(w.publish_payload(b"ckpt", p_index), "already published")
refused(w.publish_payload(b"other", p_index, (base + "/held/Q/index.larder").encode()),
        "is not")

def replace_payload(name, index, origin):  # PUBLISH with flags 1: --replace
    return struct.pack("<IIII", len(name), len(index), len(origin), 1) + name + index + origin

get("/__hold")
r_index = (r_dir + "/index.larder").encode()
rep = w.Client(sock, 1, timeout=10)
rep.greet()
rep.sock.sendall(w.frame(w.PUBLISH, replace_payload(b"ckpt", r_index,
                                                    (base + "/held/R/index.larder").encode()), 80))
wait_logged("/held/R/index.larder")
refused(replace_payload(b"ckpt", p_index, b""), "being replaced here")
get("/__release/all")
rep.sock.settimeout(20)
kind, request, payload = w.recv_frame(rep.sock)
assert kind == w.RESOLVED and request == 80, (kind, request, payload)
assert struct.unpack("<QQ", payload[:16]) == claimed_id(r_dir + "/index.larder")
print("a second --replace refused while the first was opened; the first replaced the name")
PY
  fail "a slow PUBLISH held up the daemon: $(tail -n 5 daemon.log)"
grep -q "published ckpt: $WORK/local/P/index.larder" daemon.log || fail "the daemon's log: $(cat daemon.log)"
echo ok
