# Answers a client never took do not hold the daemon's node-wide budget
# (found by review).  With --cache-size the cache evicts, so an answer is
# held in memory until sent, charged to a budget all connections share
# (256 MiB), and a READ waits for room in it.  Five clients each send
# READs of 8 MiB in rounds, never read an answer, and close: before, a
# dropped connection's queued answers were freed only with its last
# reference, which its READs still waiting for room held, so the budget
# never came back and every later READ waited for good (and SIGTERM did
# not stop the daemon).  Now a fresh client's READ is answered, the
# daemon stops on SIGTERM, and (under ASan) nothing leaks.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools

mkdir src
for i in 0 1 2 3 4; do head -c 9000000 /dev/urandom >"src/part$i.bin"; done
"$LARDER" pack src -o origin --shard-size 64M >/dev/null
[ ! -e origin/shard-000001.tar ] || fail "want one shard"
"$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" --cache-size 1G 2>>daemon.log &
pid=$!
cleanup_hooks+=("kill -9 $pid 2>/dev/null")
for _ in $(seq 100); do [ -S "$WORK/sock" ] && break; sleep 0.05; done
[ -S "$WORK/sock" ] || fail "the daemon did not start: $(cat daemon.log)"

timeout 120 /usr/bin/python3 - "$WORK/sock" "$WORK/origin/index.larder" <<'PY' || fail "$(tail -5 daemon.log)"
import struct, sys, time
import larder_wire as w
sock, index = sys.argv[1], sys.argv[2]
CONNS, ROUNDS, LENGTH = 5, 8, 8 << 20  # 320 MiB asked for, over the 256 MiB budget
clients = []
for i in range(CONNS):
    c = w.Client(sock, 1)
    c.greet()
    low, high, _ = c.open(index)
    clients.append(c)
for r in range(ROUNDS):  # in rounds: each connection has answers queued and READs waiting
    for i, c in enumerate(clients):
        read = struct.pack("<QQIB3xQQ", low, high, 0, 0, (r * 1000 + i) * 4096, LENGTH)
        c.sock.sendall(w.frame(w.READ, read, 100 + r))
    time.sleep(0.3)
time.sleep(2)
for c in clients:
    c.sock.close()
time.sleep(1)
start = time.time()
c = w.Client(sock, 1, timeout=20)
c.greet()
low, high, _ = c.open(index)
with open(index.rsplit("/", 1)[0] + "/shard-000000.tar", "rb") as f:
    want = f.read(4096)
try:
    got = c.read(low, high, 0, 0, 4096)
except Exception as e:
    raise SystemExit("a fresh READ after the dropped clients: no answer in %.1f s (%r)" % (time.time() - start, e))
assert got == want, "the fresh READ's bytes differ from the shard's"
print("fresh READ answered in %.2f s" % (time.time() - start))
PY
kill -TERM $pid
for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && fail "the daemon did not stop on SIGTERM within 10 s"
wait $pid 2>/dev/null || true
! grep -q "Sanitizer" daemon.log || fail "a sanitizer report: $(grep -A20 Sanitizer daemon.log | head -40)"
echo "ok"
