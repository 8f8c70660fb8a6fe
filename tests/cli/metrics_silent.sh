# Clients of the metrics port that connect and send nothing (anyone on the
# network reaches that port: docs/security.md) hold up no one: with a dozen
# of them open, the daemon still answers `larder stat --socket`, a reader's
# READ and a scrape; each is closed by its deadline; past the cap of
# clients at once (16) one is closed at once; and SIGTERM still stops the
# daemon.  Served on the loop thread, each silent client stalled the whole
# daemon for its 1 s receive timeout in turn (found by review: a READ took
# 20 s with 20 of them open).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
command -v curl >/dev/null || skip "no curl"
make_tree a 20
"$LARDER" pack a -o origin/A --shard-size 100K >/dev/null
D=$("$LARDER" inspect origin/A/index.larder --json |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')

reserve_ports 1
mport=$port_base
"$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" --metrics "127.0.0.1:$mport" \
  2>>"$WORK/daemon.log" &
daemon=$!
cleanup_hooks+=("kill $daemon 2>/dev/null; wait $daemon 2>/dev/null")
for _ in $(seq 100); do
  [ -S "$WORK/sock" ] && "$LARDER" stat --socket "$WORK/sock" >/dev/null 2>&1 && break
  sleep 0.05
done
"$LARDER" stat --socket "$WORK/sock" >/dev/null || fail "daemon did not start: $(cat daemon.log)"

# silent.py N READY OUT: N connections to the metrics port that send
# nothing; READY is made once all are connected; then OUT gets, for each in
# the order connected, the seconds from READY until the daemon closed it
# (-1: not within 15 s).
cat >silent.py <<'PY'
import select, socket, sys, time
port, n, ready, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
start = time.monotonic()
open(ready, "w").close()
closed = {}
while len(closed) < n and time.monotonic() - start < 15:
    readable, _, _ = select.select([s for s in socks if s not in closed], [], [], 0.05)
    for s in readable:
        try:
            data = s.recv(1)
        except ConnectionResetError:
            data = b""
        if not data:
            closed[s] = time.monotonic() - start
with open(out, "w") as f:
    f.write("".join("%.3f\n" % closed.get(s, -1) for s in socks))
PY
silent() { # N TAG: silent.py in the background ($silent), once its clients are connected
  rm -f "ready$2"
  /usr/bin/python3 silent.py "$mport" "$1" "ready$2" "closed$2.txt" &
  silent=$!
  for _ in $(seq 100); do [ -e "ready$2" ] && return; sleep 0.05; done
  fail "silent.py did not connect"
}

# 1. a dozen silent clients: the daemon answers meanwhile, within a few
# seconds (it took 12 s or more before), and so does the metrics port
silent 12 1
timeout 5 "$LARDER" stat --socket "$WORK/sock" >stat.txt ||
  fail "larder stat --socket took over 5 s with 12 silent metrics clients open"
LARDER_SOCKET=$WORK/sock timeout 5 "$LARDER" cat origin/A/index.larder sample00003 --field jpg \
  >got.jpg || fail "a READ took over 5 s with 12 silent metrics clients open"
cmp -s got.jpg a/sample00003.jpg || fail "sample00003.jpg differs"
curl -sf -m 5 "http://127.0.0.1:$mport/metrics" >metrics.txt ||
  fail "no scrape with 12 silent metrics clients open"
grep -q "^larder_served_bytes_total{dataset=\"$D\"} [1-9]" metrics.txt ||
  fail "the READ was not the daemon's: $(grep "$D" metrics.txt | head)"
grep -q "^# TYPE larder_origin_bytes_total counter" metrics.txt || fail "metrics types"
# each is closed by its deadline (1 s for a request), not held open
wait $silent
grep -qx -- "-1.000" closed1.txt && fail "silent clients left open: $(tr '\n' ' ' <closed1.txt)"

# 2. 40 at once: the 24 past the cap are closed at once, before any of the
# 16 served reaches its deadline (in connection order: the listener's queue
# is first come, first accepted)
silent 40 2
wait $silent
/usr/bin/python3 - closed2.txt <<'PY' || fail "over the cap: $(tr '\n' ' ' <closed2.txt)"
import sys
times = [float(line) for line in open(sys.argv[1])]
served, over = times[:16], times[16:]
assert min(times) >= 0, "a client left open"
assert max(over) < min(served), "a client over the cap waited for a served one's deadline"
PY

# 3. SIGTERM with silent clients open: the daemon stops promptly
silent 12 3
kill -TERM $daemon
for _ in $(seq 50); do kill -0 $daemon 2>/dev/null || break; sleep 0.1; done
kill -0 $daemon 2>/dev/null && fail "the daemon did not stop within 5 s of SIGTERM"
wait $daemon || fail "the daemon exited $?: $(tail -5 daemon.log)"
grep -q "stopping" daemon.log || fail "no 'stopping': $(tail -5 daemon.log)"
wait $silent
echo "ok: silent metrics clients held up no one"
