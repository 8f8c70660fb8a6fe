# A node daemon that is busy is waited for, not left for the origin.  One
# larderd, a dataset on an HTTP origin that holds every shard read until
# the test lets it go (tests/tools/gated_origin.py): the daemon's fill of a
# reader's READ waits there far past the reader's timeout
# (LARDER_DAEMON_TIMEOUT_MS=300).  The reader (the Python package over
# liblarder, no cache of its own, so it reads only through the daemon or
# the origin) must wait on while the daemon still greets a connection, and
# get its bytes from the daemon once the origin answers, having read
# nothing from the origin itself: in a restart storm, every rank that gave
# up on its busy daemon read the whole checkpoint from the origin once
# more.  Then the daemon is stopped (SIGSTOP) with a READ queued: the
# reader leaves it within about three timeouts (its READ's, and a greeting
# not answered within twice that) and reads the origin.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
LIB=${LARDER%/larder}/liblarder.so
[ -e "$LIB" ] || skip "liblarder.so not built"
make_tree a 40
"$LARDER" pack a -o www/A --shard-size 100K >/dev/null
start_gated_origin www
"$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" 2>>"$WORK/daemon.log" &
daemon=$!
cleanup_hooks=("curl -s $gated_base/__release/all >/dev/null; kill -CONT $daemon 2>/dev/null; kill $daemon 2>/dev/null; wait $daemon 2>/dev/null" "${cleanup_hooks[@]}")
for _ in $(seq 100); do [ -S "$WORK/sock" ] && break; sleep 0.05; done
[ -S "$WORK/sock" ] || fail "larderd did not start: $(cat daemon.log)"

cat >reader.py <<'PY'
import json, os, signal, sys, threading, time, urllib.request
sys.path.insert(0, os.environ["PYTHON_PACKAGE"])
import larder
base, tree, daemon = sys.argv[1], sys.argv[2], int(sys.argv[3])
ds = larder.Dataset(base + "/A/index.larder", cache="")

def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as answer:
        return answer.read()

def timed_read(i, hold_s):
    """Read sample i while the origin holds every shard read for hold_s
    seconds, then lets them all go: (seconds, reader's own origin requests)."""
    before = ds.stats()["origin_requests"]
    out = {}
    def read():
        out["data"] = ds.read(i)
    reader = threading.Thread(target=read)
    start = time.monotonic()
    reader.start()
    time.sleep(hold_s)
    get("/__release/all")
    reader.join(30)
    assert not reader.is_alive(), "the read did not end after the origin let go"
    took = time.monotonic() - start
    for field in ds.fields(i):
        with open(os.path.join(tree, "%s.%s" % (ds.key(i), field.name)), "rb") as f:
            want = f.read()
        got = out["data"][field.offset:field.offset + field.length]
        assert got == want, "sample %d, %s: wrong bytes" % (i, field.name)
    return took, ds.stats()["origin_requests"] - before

# busy: the daemon's fill waits 2 s at the origin, over six reader timeouts
took, own = timed_read(0, 2.0)
print("busy daemon: %.2f s, the reader's own origin requests %d" % (took, own))
assert took >= 2.0, "the read ended before the origin let go (%.2f s)" % took
assert own == 0, "the reader left a busy daemon for the origin (%d requests)" % own
log = json.loads(get("/__log"))
assert len(log) >= 1, log

# hung: the daemon stopped while a READ of the reader's waits in it
get("/__hold")
os.kill(daemon, signal.SIGSTOP)
took, own = timed_read(1, 0.0)
print("hung daemon: %.2f s, the reader's own origin requests %d" % (took, own))
os.kill(daemon, signal.SIGCONT)
assert own >= 1, "the read did not go to the origin"
assert took < 2.5, "a hung daemon held the reader %.2f s" % took
PY
PYTHON_PACKAGE=${LARDER%/*/larder}/python
[ -d "$PYTHON_PACKAGE/larder" ] || PYTHON_PACKAGE=$TESTS/../python
env "${sanitized_python[@]}" LARDER_SOCKET=$WORK/sock LARDER_LIBRARY=$LIB PYTHON_PACKAGE=$PYTHON_PACKAGE \
  LARDER_DAEMON_TIMEOUT_MS=300 /usr/bin/python3 reader.py "$gated_base" "$WORK/a" "$daemon" >reader.txt 2>reader.err ||
  fail "reader: $(cat reader.txt) $(tail -5 reader.err) $(tail -5 daemon.log)"
cat reader.txt
