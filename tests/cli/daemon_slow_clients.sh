# Clients that send READs and never read the answers hold up their own
# user's READs, not everyone's (found by review).  With --cache-size the
# cache evicts, so every answer is copied into memory until sent, charged
# to a node-wide budget (256 MiB).  Before, a READ that found no room
# waited for it on a worker: 16 connections of one user with 8 READs of
# 8 MiB each filled the budget and then held all 64 workers, so another
# user's READ was not answered until the loop's sweep dropped them a
# minute later.  Now a READ without room parks (no worker held), and one
# user holds at most half the budget:
#  1. while root's clients sit on their answers, uid 65534's READ is
#     answered at once, byte for byte;
#  2. once they are gone, root's parked READs end and a new root READ is
#     answered;
#  3. two users' slow clients fill the budget together (half each):
#     uid 65534's READ waits for room until they are dropped, 5 s after
#     their last whole answer, not the sweep's minute;
#  4. SIGTERM with READs parked stops the daemon, and (under ASan)
#     nothing leaks.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
[ "$(id -u)" = 0 ] || skip "needs root (a second user's client)"
export PYTHONPATH=$TESTS/tools
nobody_init

mkdir src
for i in 0 1 2 3 4; do head -c 9000000 /dev/urandom >"src/part$i.bin"; done
"$LARDER" pack src -o origin --shard-size 64M >/dev/null
[ ! -e origin/shard-000001.tar ] || fail "want one shard"
# the other user checks what it reads against the shard
chmod 755 "$WORK/origin"
chmod 644 "$WORK"/origin/*
"$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" --cache-size 1G --allow-uid 65534 \
  --allow-uid 65533 \
  --allow "$WORK/origin" \
  2>>daemon.log &
pid=$!
cleanup_hooks+=("kill -9 $pid 2>/dev/null")
for _ in $(seq 100); do [ -S "$WORK/sock" ] && break; sleep 0.05; done
[ -S "$WORK/sock" ] || fail "the daemon did not start: $(cat daemon.log)"
chmod 666 "$WORK/sock"

# a client that reads one MiB at offset 1 MiB and checks it against the shard
cat >probe.py <<'PY'
import signal, struct, sys
import larder_wire as w
sock, index, shard = sys.argv[1], sys.argv[2], sys.argv[3]
signal.alarm(int(sys.argv[4]))  # not answered by then: killed, and the test fails
c = w.Client(sock, 1, timeout=None)
c.greet()
low, high, _ = c.open(index)
got = c.read(low, high, 0, 1 << 20, 1 << 20)
with open(shard, "rb") as f:
    f.seek(1 << 20)
    assert got == f.read(1 << 20), "wrong bytes"
print("answered")
PY

# clients of root that send READs of 8 MiB and never read an answer
cat >hogs.py <<'PY'
import struct, sys, time
import larder_wire as w
sock, index, conns, reads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
clients = []
for i in range(conns):
    c = w.Client(sock, 1)
    c.greet()
    low, high, _ = c.open(index)
    clients.append(c)
for r in range(reads):
    for i, c in enumerate(clients):
        read = struct.pack("<QQIB3xQQ", low, high, 0, 0, (r * 100 + i) * 4096, 8 << 20)
        c.sock.sendall(w.frame(w.READ, read, 100 + r))
print("sent", flush=True)
time.sleep(3600)  # never reads an answer; killed by the test
PY
# 16 x 8 READs: 1 GiB asked for, 4x the budget
/usr/bin/python3 hogs.py "$WORK/sock" "$WORK/origin/index.larder" 16 8 >hogs.log 2>&1 &
hogs=$!
cleanup_hooks+=("kill $hogs 2>/dev/null")
for _ in $(seq 200); do grep -q sent hogs.log && break; sleep 0.05; done
grep -q sent hogs.log || fail "the slow clients did not start: $(cat hogs.log)"
sleep 2 # their READs fill root's share and park (before: every worker waited)

# 1. another user is answered while they sit on theirs
nobody /usr/bin/python3 "$WORK/probe.py" "$WORK/sock" \
  "$WORK/origin/index.larder" "$WORK/origin/shard-000000.tar" 20 >probe1.log 2>&1 ||
  fail "uid 65534's READ beside root's slow clients: $(cat probe1.log) $(tail -5 daemon.log)"
grep -q answered probe1.log || fail "probe 1: $(cat probe1.log)"

# 2. the slow clients gone: their room comes back, root's READs are answered again
kill $hogs
wait $hogs 2>/dev/null || true
/usr/bin/python3 probe.py "$WORK/sock" "$WORK/origin/index.larder" \
  "$WORK/origin/shard-000000.tar" 60 >probe2.log 2>&1 ||
  fail "root's READ after the slow clients left: $(cat probe2.log) $(tail -5 daemon.log)"

# 3. root's and uid 65533's slow clients: 128 MiB each, the whole budget
/usr/bin/python3 hogs.py "$WORK/sock" "$WORK/origin/index.larder" 16 8 >hogs3.log 2>&1 &
hogs=$!
cleanup_hooks+=("kill $hogs 2>/dev/null")
setpriv --reuid=65533 --regid=65533 --clear-groups env PYTHONPATH="$WORK/nobody/tools" \
  /usr/bin/python3 "$WORK/hogs.py" "$WORK/sock" "$WORK/origin/index.larder" 16 8 >hogs4.log 2>&1 &
hogs4=$!
cleanup_hooks+=("kill $hogs4 2>/dev/null")
for _ in $(seq 200); do grep -q sent hogs3.log && grep -q sent hogs4.log && break; sleep 0.05; done
grep -q sent hogs3.log && grep -q sent hogs4.log ||
  fail "the two users' slow clients did not start: $(cat hogs3.log hogs4.log)"
# the budget full (256 MiB) and READs parked beyond both shares
cat >room.py <<'PY'
import json, sys, time
import larder_wire as w
c = w.Client(sys.argv[1], 1)
c.greet()
for _ in range(400):  # 20 s: a bound on a hang, not a timing
    s = json.loads(c.request(w.STAT)[1])
    if sys.argv[2] == "full" and s["uncached_bytes"] >= 256 << 20 and s["parked_reads"] > 0:
        sys.exit(0)
    if sys.argv[2] == "dropped" and s["stalled_drops"] > 0:
        sys.exit(0)
    time.sleep(0.05)
sys.exit("not %s: %s" % (sys.argv[2], s))
PY
/usr/bin/python3 room.py "$WORK/sock" full || fail "the slow clients did not fill the budget"
# answered once they are dropped (5 s); before, they held the budget until
# the sweep's minute and the probe's alarm (30 s) ended it
began=$(date +%s)
nobody /usr/bin/python3 "$WORK/probe.py" "$WORK/sock" \
  "$WORK/origin/index.larder" "$WORK/origin/shard-000000.tar" 30 >probe3.log 2>&1 ||
  fail "uid 65534's READ beside two users' slow clients: $(cat probe3.log) $(tail -5 daemon.log)"
grep -q answered probe3.log || fail "probe 3: $(cat probe3.log)"
grep -q "took no answer in 5 s holds room" daemon.log ||
  fail "no slow client was dropped: $(tail -5 daemon.log)"
/usr/bin/python3 room.py "$WORK/sock" dropped || fail "STAT's stalled_drops"
echo "uid 65534 answered after $(($(date +%s) - began)) s beside two users' slow clients"
kill $hogs $hogs4 2>/dev/null
wait $hogs $hogs4 2>/dev/null || true

# 4. SIGTERM with READs parked: slow clients again, then stop
/usr/bin/python3 hogs.py "$WORK/sock" "$WORK/origin/index.larder" 8 8 >hogs2.log 2>&1 &
hogs=$!
cleanup_hooks+=("kill $hogs 2>/dev/null")
for _ in $(seq 200); do grep -q sent hogs2.log && break; sleep 0.05; done
sleep 1
kill -TERM $pid
for _ in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && fail "the daemon did not stop on SIGTERM with READs parked"
wait $pid 2>/dev/null || true
kill $hogs 2>/dev/null || true
! grep -q "Sanitizer" daemon.log || fail "a sanitizer report: $(grep -A20 Sanitizer daemon.log | head -60)"
echo "ok"
