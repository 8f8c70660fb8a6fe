# Connect-ahead (docs/protocol.md, "Peer connections"): a reader's OPEN of
# a new index on node 0 makes node 0 connect to every other member (greet,
# proofs, OPEN there) before any READ asks it to, off the loop thread, so
# that its first borrows find the connections up.  Counts, never times:
#  1. After one OPEN on node 0 and no READ, STAT shows node 0 made
#     2 connections ahead to each of the 2 other members (connected_ahead 4),
#     and each member answered OPENs from a peer (peer_opens).
#  2. Reads through node 0 of a few bytes of every shard, one at a time:
#     some are borrowed from each member, and no member answers a further
#     peer OPEN (the borrows took the connections made ahead).
#  3. The control: node 0 restarted with LARDERD_CONNECT_AHEAD=0 makes no
#     connection ahead, and the same reads do open new peer connections
#     (so step 2's count can fail).
#  4. A member that accepts and never answers (a silent listener in node
#     2's place) does not delay OPENED: node 0 answers the OPEN of another
#     index while its connection to that member is still open, unanswered
#     (node 0 gives up on it only after its 5 s connect timeout).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools

make_tree a 200
"$LARDER" pack a -o A --shard-size 100K --block-size 4K >/dev/null
make_tree b 200
"$LARDER" pack b -o B --shard-size 100K --block-size 4K >/dev/null
make_tree c 50
"$LARDER" pack c -o C --shard-size 100K --block-size 4K >/dev/null

cluster_init connect-ahead-secret
start_daemon 0
start_daemon 1
start_daemon 2

reads() { # SOCK INDEX CHECK: open INDEX on SOCK, then CHECK (ahead|plain|silent)
  /usr/bin/python3 - "$@" <<'PY'
import glob, json, os, sys, time
import larder_wire as w
sock, index, check = sys.argv[1:4]
work = os.path.dirname(sock)

def stat(path):
    c = w.Client(path, 1)
    c.greet()
    return json.loads(c.request(w.STAT)[1])

def wait_for(what, predicate):
    for _ in range(200):  # 10 s: a bound on a hang, not a timing
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    sys.exit("never: " + what)

members = [os.path.join(work, "sock%d" % m) for m in (1, 2)]
if check == "silent":
    # the silent member accepted nothing yet; OPENED must come back while
    # node 0's connection to it is open and unanswered
    c = w.Client(sock, 1, timeout=30)
    c.greet()
    c.open(os.path.abspath(index))
    events = open(os.path.join(work, "silent.log")).read().split()
    assert "closed" not in events, ("OPENED came after node 0 gave up on the silent member", events)
    wait_for("a connection ahead to the silent member",
             lambda: "accepted" in open(os.path.join(work, "silent.log")).read().split())
    assert "closed" not in open(os.path.join(work, "silent.log")).read().split()
    print("OPENED before the silent member's connection ended")
    sys.exit(0)

before = [stat(m).get("peer_opens", 0) for m in members]
c = w.Client(sock, 1, timeout=30)
c.greet()
low, high, shards = c.open(os.path.abspath(index))
if check == "ahead":
    wait_for("4 connections ahead", lambda: stat(sock)["connected_ahead"] >= 4)
    assert stat(sock)["connected_ahead"] == 4, stat(sock)["connected_ahead"]
    wait_for("peer OPENs on both members",
             lambda: all(stat(m)["peer_opens"] > b for m, b in zip(members, before)))
    assert sum(d["borrowed_reads"] for d in stat(sock)["datasets"]) == 0, "a READ before any"
else:
    time.sleep(1)  # the control: connections ahead would have been made by now
    assert stat(sock)["connected_ahead"] == 0, stat(sock)["connected_ahead"]
opened = [stat(m)["peer_opens"] for m in members]
served = [sum(d["peer_served_reads"] for d in stat(m)["datasets"]) for m in members]
for shard in range(shards):
    c.read(low, high, shard, 0, 100)
served = [sum(d["peer_served_reads"] for d in stat(m)["datasets"]) - s
          for m, s in zip(members, served)]
assert all(s > 0 for s in served), ("each member serves some of the reads", served)
new = [stat(m)["peer_opens"] - o for m, o in zip(members, opened)]
print(check, "reads borrowed from each member:", served, "new peer connections:", new)
if check == "ahead":
    assert new == [0, 0], ("the borrows made new connections", new)
else:
    assert all(n > 0 for n in new), ("without connect-ahead, borrows connect", new)
PY
}

# 1 and 2
reads "$WORK/sock0" A/index.larder ahead || fail "connect ahead: $(tail -n 5 daemon0.log)"

# 3: the control
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null
LARDERD_CONNECT_AHEAD=0 start_daemon 0
reads "$WORK/sock0" B/index.larder plain || fail "the control: $(tail -n 5 daemon0.log)"

# 4: node 2 replaced by a listener that accepts and never answers
kill "${pids[2]}"
wait "${pids[2]}" 2>/dev/null
: >"$WORK/silent.log"
/usr/bin/python3 - "$((base + 2))" "$WORK/silent.log" <<'PY' &
import socket, sys, threading
port, log = int(sys.argv[1]), sys.argv[2]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(16)
def note(word):
    with open(log, "a") as f:
        f.write(word + "\n")
def hold(conn):
    while conn.recv(4096):  # never answers; ends when node 0 closes
        pass
    note("closed")
note("listening")
while True:
    conn, _ = s.accept()
    note("accepted")
    threading.Thread(target=hold, args=(conn,), daemon=True).start()
PY
silent=$!
cleanup_hooks=("kill $silent 2>/dev/null" "${cleanup_hooks[@]}") # before the daemons' wait
for _ in $(seq 100); do grep -q listening "$WORK/silent.log" && break; sleep 0.05; done
grep -q listening "$WORK/silent.log" || fail "the silent listener did not start"
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null
start_daemon 0
reads "$WORK/sock0" C/index.larder silent || fail "a silent member: $(tail -n 5 daemon0.log)"
echo "connect ahead: ok"
