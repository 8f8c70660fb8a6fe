# The member's side of connect-ahead (docs/protocol.md, "Peer
# connections"): every other member's connect-ahead and first READs ask a
# member for the same index at once, and each such OPEN of an index still
# being fetched takes one of the member's 16 open workers while it waits.
# Peers' OPENs run at NEAR, which never takes the last quarter of them:
# with 20 peer OPENs of an index its origin holds (tests/tools/
# gated_origin.py) waiting on node 1, node 1's own reader still has an
# index opened, before the held one is let go (an order, not a time: the
# origin is asserted to still hold it).  Then it is let go and every peer
# gets its OPENED.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools

make_tree x 40
make_tree y 40
"$LARDER" pack x -o www/held/X --shard-size 100K >/dev/null
"$LARDER" pack y -o Y --shard-size 100K >/dev/null
start_gated_origin www
cluster_init connect-ahead-member-secret
start_daemon 1

/usr/bin/python3 - "$WORK" "$base" "$gated_base" <<'PY' || fail "$(tail -n 5 daemon1.log)"
import json, os, sys, threading, time, urllib.request
import larder_wire as w
work, base, origin = sys.argv[1], int(sys.argv[2]), sys.argv[3]
secret = open(os.path.join(work, "secret")).read().strip().encode()
x_url = origin + "/held/X/index.larder"

def get(path):
    with urllib.request.urlopen(origin + path, timeout=10) as r:
        return r.read()

opened = []
def peer():
    c = w.Client(("127.0.0.1", base + 1), 2, secret=secret, timeout=60)
    c.greet()
    c.open(x_url)
    opened.append(1)

peers = [threading.Thread(target=peer, daemon=True) for _ in range(20)]
for t in peers:
    t.start()
for _ in range(400):  # 20 s: a bound on a hang
    if any("/held/X/index.larder" in p for p, _ in json.loads(get("/__log"))):
        break
    time.sleep(0.05)
else:
    sys.exit("the origin never saw X's index asked for")
time.sleep(0.5)  # the other peers' OPENs reach their workers (not a timing assertion)

reader = w.Client(os.path.join(work, "sock1"), 1, timeout=15)
reader.greet()
reader.open(os.path.join(work, "Y/index.larder"))
assert not opened, "X was opened: the origin let it go"
print("node 1's reader opened Y while 20 peer OPENs of X waited")
get("/__release/all")
for t in peers:
    t.join(30)
assert len(opened) == 20, len(opened)
print("every peer got OPENED")
PY
echo "connect ahead, member side: ok"
