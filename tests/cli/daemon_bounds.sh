# What one client can take of larderd: 1,000 idle connections, oversized
# and truncated frames and a flood of READs whose answers are never read
# leave the daemon serving a real reader, with its RSS bounded; idle
# connections are dropped after --idle-timeout, a frame begun and not
# finished after 10 s, and connections past --max-connections are closed
# at once without touching the others.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools
ulimit -n 4096 2>/dev/null || skip "cannot raise the descriptor limit to 4096"
make_tree a 40
"$LARDER" pack a -o origin/A --shard-size 200K >/dev/null
INDEX=$WORK/origin/A/index.larder
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')
start() { # name [options]
  local name=$1
  shift
  "$LARDERD" --cache "$WORK/cache$name" --socket "$WORK/sock$name" "$@" 2>>"$WORK/daemon$name.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$WORK/sock$name" ] && return; sleep 0.05; done
  fail "daemon $name did not start: $(cat "$WORK/daemon$name.log")"
}

# ---- 1. a crowd of hostile connections, then a real read -------------------
start 1 --max-connections 1100
daemon=${pids[-1]}
rss() { awk '/^VmRSS/ { print int($2 / 1024) }' "/proc/$daemon/status"; }
echo "daemon RSS at start: $(rss) MB"
/usr/bin/python3 - "$WORK/sock1" "$INDEX" "$WORK/origin/A/shard-000002.tar" "$WORK/ready" "$WORK/done" <<'PY' &
import os, socket, struct, sys, time, larder_wire as w
path, index, shard, ready, done = sys.argv[1:]
def unix():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s
idle = [unix() for _ in range(1000)]
hostile = []
for kind, length in ((w.READ, 1 << 26), (w.DATA, 1 << 26), (w.HELLO, 4096), (w.OPEN, 1 << 20)):
    s = unix()  # a header promising more than the type may carry, or than any client sends
    s.sendall(w.frame(kind)[:8] + struct.pack("<I", length) + bytes(12))
    hostile.append(s)
truncated = []
for cut in (3, 12, 23, 24 + 10):
    s = unix()  # a HELLO cut short, left hanging
    s.sendall(w.hello(1, os.urandom(32))[:cut])
    truncated.append(s)
# a flood of READs of a whole shard whose answers are never read
flood = w.Client(path, 1)
flood.greet()
low, high, shards = flood.open(index)
size = os.path.getsize(shard)
read = w.frame(w.READ, struct.pack("<QQIB3xQQ", low, high, 2, 0, 0, size), 9)
flood.sock.setblocking(False)
sent = 0
try:
    for _ in range(20000):
        flood.sock.send(read)
        sent += 1
except BlockingIOError:
    pass
print("flood: %d READs of %d bytes sent before the daemon stopped reading" % (sent, size))
for s in hostile:
    s.settimeout(5)
    assert s.recv(100) == b"", "an oversized frame was answered"
print("1000 idle connections, 4 oversized frames closed, 4 truncated, a flood of READs")
open(ready, "w").close()
while not os.path.exists(done):
    time.sleep(0.1)
PY
crowd=$!
for _ in $(seq 300); do [ -e ready ] && break; kill -0 $crowd 2>/dev/null || break; sleep 0.1; done
[ -e ready ] || fail "the crowd did not connect: $(tail -5 daemon1.log)"
# a real reader's read through the daemon, and a read answered by the daemon itself
LARDER_SOCKET=$WORK/sock1 timeout 20 "$LARDER" cat "$INDEX" sample00017 --field jpg >got.jpg ||
  fail "the reader's read did not complete"
cmp -s got.jpg a/sample00017.jpg || fail "the reader got wrong bytes"
timeout 20 /usr/bin/python3 - "$WORK/sock1" "$INDEX" "$WORK/origin/A/shard-000001.tar" <<'PY' ||
import sys, larder_wire as w
c = w.Client(sys.argv[1], 1, timeout=15)
c.greet()
low, high, _ = c.open(sys.argv[2])
assert c.read(low, high, 1, 0, 65536) == open(sys.argv[3], "rb").read()[:65536]
print("a read through the crowded daemon: served")
PY
  fail "a read through the crowded daemon: $(tail -5 daemon1.log)"
high=$(rss)
echo "daemon RSS with 1,000 idle connections, hostile frames and a READ flood: $high MB"
[ "$high" -le 200 ] || fail "the daemon's RSS grew to $high MB"
touch done
wait $crowd || fail "the crowd's script failed"
kill -0 "$daemon" || fail "the daemon died"
sleep 1
echo "daemon RSS after they all closed: $(rss) MB"

# ---- 2. idle, stalled and surplus connections --------------------------------
start 2 --idle-timeout 2 --max-connections 5
timeout 60 /usr/bin/python3 - "$WORK/sock2" <<'PY' || fail "idle timeout: $(tail -5 daemon2.log)"
import os, socket, time, larder_wire as w
path = __import__("sys").argv[1]
def unix():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s
def closed(s, wait):
    s.settimeout(wait)
    try:
        return s.recv(4096) == b""
    except socket.timeout:
        return False
start = time.time()
greeted = w.Client(path, 1)
greeted.greet()
silent = [unix(), unix()]
stalled = unix()
stalled.sendall(w.hello(1, os.urandom(32))[:20])
active = w.Client(path, 1)
active.greet()
surplus = unix()  # the sixth: closed at once, the five others untouched
assert closed(surplus, 2), "a connection past --max-connections was kept"
print("sixth connection closed at once")
# an active client outlives the idle timeout; idle ones do not
while time.time() - start < 3.5:
    kind, _ = active.request(w.STAT)
    assert kind == w.STATS
    time.sleep(0.4)
for s in [greeted.sock] + silent:
    assert closed(s, 0.5), "an idle connection outlived --idle-timeout 2"
print("idle connections dropped after %.1f s; an active one kept" % (time.time() - start))
assert not closed(stalled, 0.1), "a frame begun was dropped before 10 s"
assert closed(stalled, 10), "a frame begun and never finished was kept"
print("a stalled frame dropped after %.1f s" % (time.time() - start))
fresh = w.Client(path, 1)  # slots are free again
fresh.greet()
PY
kill -0 "${pids[-1]}" || fail "daemon 2 died"
