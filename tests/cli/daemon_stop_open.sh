# A daemon asked to stop while an OPEN waits for its index stops anyway.
# One larderd; dataset B on an HTTP origin that holds B's index
# (tests/tools/gated_origin.py: everything under held/) until the test
# lets it go, with an HTTP timeout of 120 s (LARDER_HTTP_TIMEOUT).  A
# client's OPEN of B waits at the origin; SIGTERM: the daemon ends within
# 20 s (it waits 3 s for indexes being opened, then says so and ends as
# after a crash; before, it waited for the OPEN: the origin's 120 s, then
# retries).  Then on the same cache, with the origin let go: a new daemon
# opens B and reads it byte-exact, and stops at once on SIGTERM with no
# OPEN under way (no such line in its log).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools
make_tree b 60
"$LARDER" pack b -o www/held/B --shard-size 100K >/dev/null
start_gated_origin www
pids=()
cleanup_hooks=("curl -s $gated_base/__release/all >/dev/null; for p in \${pids[@]}; do kill -9 \$p 2>/dev/null; done" "${cleanup_hooks[@]}")
start() { # log
  rm -f "$WORK/sock"
  LARDER_HTTP_TIMEOUT=120 "$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" 2>>"$WORK/$1" &
  pid=$!
  pids+=($pid)
  for _ in $(seq 100); do [ -S "$WORK/sock" ] && return; sleep 0.05; done
  fail "larderd did not start: $(cat "$WORK/$1")"
}
# stopped_within SECONDS: whether $pid has exited within SECONDS of now
stopped_within() {
  for _ in $(seq $(($1 * 10))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

start daemon1.log
/usr/bin/python3 - "$WORK/sock" "$gated_base/held/B/index.larder" "$gated_base" <<'PY' &
import json, sys, time, urllib.request
import larder_wire as w
sock, url, base = sys.argv[1:4]
c = w.Client(sock, 1, timeout=200)
c.greet()
c.sock.sendall(w.frame(w.OPEN, url.encode(), 5))
time.sleep(200)  # the connection stays open while the daemon stops
PY
client=$!
cleanup_hooks=("kill $client 2>/dev/null" "${cleanup_hooks[@]}")
for _ in $(seq 200); do
  curl -sf "$gated_base/__log" | grep -q "/held/B/index.larder" && break
  sleep 0.05
done
curl -sf "$gated_base/__log" | grep -q "/held/B/index.larder" || fail "the origin never saw B's index asked for"
kill -TERM "$pid"
stopped_within 20 || fail "larderd still runs 20 s after SIGTERM with an OPEN held at the origin: $(tail -3 daemon1.log)"
wait "$pid" || fail "larderd exited $? on SIGTERM"
grep -q "not waiting past 3000 ms" daemon1.log || fail "no word of the OPEN left behind: $(cat daemon1.log)"
echo "stopped with an OPEN held at the origin: $(tail -1 daemon1.log)"

curl -sf "$gated_base/__release/all" >/dev/null
start daemon2.log
/usr/bin/python3 - "$WORK/sock" "$gated_base/held/B/index.larder" "$WORK/www/held/B" <<'PY' ||
import glob, sys
import larder_wire as w
sock, url, packed = sys.argv[1:4]
c = w.Client(sock, 1, timeout=30)
c.greet()
low, high, shards = c.open(url)
shard = sorted(glob.glob(packed + "/shard-*"))[shards - 1]
assert c.read(low, high, shards - 1, 10, 3000) == open(shard, "rb").read()[10:3010]
print("B opened and read on the same cache after the stop")
PY
  fail "the cache after a stop with an OPEN under way: $(tail -3 daemon2.log)"
kill -TERM "$pid"
stopped_within 20 || fail "larderd still runs 20 s after SIGTERM: $(tail -3 daemon2.log)"
wait "$pid" || fail "larderd exited $? on SIGTERM"
! grep -q "not waiting" daemon2.log || fail "a stop with no OPEN under way said: $(cat daemon2.log)"
echo ok
