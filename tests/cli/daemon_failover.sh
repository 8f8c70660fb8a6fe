# How fast a reader leaves a node daemon that stops serving, and comes
# back: one long-lived reader (the Python package over liblarder, no cache
# of its own, so every read asks the daemon) times single reads while its
# daemon is healthy, after the daemon dropped its pooled connection (idle
# timeout: the read is sent again on a fresh connection, the daemon is not
# given up on), hung (SIGSTOP: LARDER_DAEMON_TIMEOUT_MS, 1000 ms by
# default, for the READ, then twice that for a greeting that does not come
# (a busy daemon greets: tests/cli/daemon_busy.sh), then the origin), dead
# (kill -9: at once) and restarted (used
# again within a few seconds).  A read counts as the daemon's when the
# reader's own origin_requests did not move.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
/usr/bin/python3 -c "import ctypes" || skip "no python3"
LIB=${LARDER%/larder}/liblarder.so
[ -e "$LIB" ] || skip "liblarder.so not built"
make_tree a 60
"$LARDER" pack a -o origin/A --shard-size 100K >/dev/null
INDEX=$WORK/origin/A/index.larder
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill -CONT $p 2>/dev/null; kill $p 2>/dev/null; done; wait 2>/dev/null')
start() {
  "$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" --idle-timeout 1 2>>"$WORK/daemon.log" &
  pids+=($!)
  daemon=$!
  for _ in $(seq 100); do [ -S "$WORK/sock" ] && return; sleep 0.05; done
  fail "the daemon did not start: $(cat "$WORK/daemon.log")"
}
start
echo "$daemon" >daemon.pid
cat >reader.py <<'PY'
import os, signal, subprocess, sys, time
sys.path.insert(0, os.environ["PYTHON_PACKAGE"])
import larder
index, work, larderd = sys.argv[1], sys.argv[2], sys.argv[3:]
ds = larder.Dataset(index, cache="")
expected = {}
next_sample = [0]
def timed_read(what):
    """Read a sample not read before: (seconds, whether the daemon served it)."""
    i = next_sample[0]
    next_sample[0] += 1
    before = ds.stats()["origin_requests"]
    start = time.monotonic()
    data = ds.read(i)
    took = time.monotonic() - start
    through_daemon = ds.stats()["origin_requests"] == before
    print("%-48s %6.3f s  %s" % (what, took, "daemon" if through_daemon else "origin"))
    return took, through_daemon, data
def daemon_pid():
    return int(open(os.path.join(work, "daemon.pid")).read())

took, by_daemon, _ = timed_read("healthy daemon")
assert by_daemon, "a healthy daemon did not serve the read"
time.sleep(2.5)  # the daemon drops the pooled connection (--idle-timeout 1)
took, by_daemon, _ = timed_read("pooled connection closed by the daemon")
assert by_daemon, "the read after an idle drop did not go to the daemon again"
took, by_daemon, _ = timed_read("next read")
assert by_daemon

os.kill(daemon_pid(), signal.SIGSTOP)  # hung: accepts nothing, answers nothing
took, by_daemon, data = timed_read("hung daemon (SIGSTOP)")
assert not by_daemon and took < 3.5, "a hung daemon held the reader %.2f s" % took
took, by_daemon, _ = timed_read("next read, daemon marked down")
assert not by_daemon and took < 0.5, took
os.kill(daemon_pid(), signal.SIGCONT)
time.sleep(2.5)  # past the 2 s the daemon is left alone
took, by_daemon, _ = timed_read("daemon resumed")
assert by_daemon, "a resumed daemon was not used again"

os.kill(daemon_pid(), signal.SIGKILL)
time.sleep(0.2)
took, by_daemon, _ = timed_read("dead daemon (kill -9)")
assert not by_daemon and took < 1.0, "a dead daemon held the reader %.2f s" % took

open(os.path.join(work, "restart"), "w").close()
deadline = time.monotonic() + 10
while not os.path.exists(os.path.join(work, "restarted")):
    assert time.monotonic() < deadline, "no restart"
    time.sleep(0.05)
restarted = time.monotonic()
while True:
    took, by_daemon, _ = timed_read("restarted daemon")
    if by_daemon:
        break
    assert time.monotonic() - restarted < 5, "the restarted daemon was not used within 5 s"
    time.sleep(0.2)
print("the restarted daemon served again %.1f s after it was up" % (time.monotonic() - restarted))
PY
PYTHON_PACKAGE=${LARDER%/*/larder}/python
[ -d "$PYTHON_PACKAGE/larder" ] || PYTHON_PACKAGE=$TESTS/../python
env "${sanitized_python[@]}" LARDER_SOCKET=$WORK/sock LARDER_LIBRARY=$LIB PYTHON_PACKAGE=$PYTHON_PACKAGE \
  /usr/bin/python3 reader.py "$INDEX" "$WORK" >reader.txt 2>reader.err &
reader=$!
for _ in $(seq 400); do [ -e restart ] && break; kill -0 $reader 2>/dev/null || break; sleep 0.05; done
if [ -e restart ]; then
  wait "$daemon" 2>/dev/null || true
  start
  echo "$daemon" >daemon.pid
  touch restarted
fi
status=0
wait $reader || status=$?
cat reader.txt
[ $status -eq 0 ] || fail "reader: $(tail -5 reader.err) $(tail -5 daemon.log)"
