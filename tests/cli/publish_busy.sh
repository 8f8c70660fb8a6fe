# Names travel while the daemons are busy (issue 12: a member had not
# learned a replaced name within 5 s under load), on three larderd daemons
# over loopback with a secret:
# 1. node 1 runs 2 workers (--jobs 2), and its reader's DEMAND READs of a
#    dataset on an HTTP origin that holds every shard read (the test's
#    gated origin) take both of them, held there (STAT: 2 DEMAND running);
#    a checkpoint published on node 0 is then known on node 1 (`larder
#    names`) within 5 s while those READs are still held: announcing and
#    learning a name do not queue behind READs.  Then the origin lets go:
#    every held READ answers the shard's bytes, and node 1 consumes the
#    checkpoint byte for byte.
# 2. an announcement that fails is tried again: node 2 is stopped
#    (SIGSTOP: its port takes the connection, nothing answers) while
#    "latest" is replaced on node 0, past the announcement's 5 s timeout,
#    then let go on; node 2 then names the new generation (before, a lost
#    ANNOUNCE left it naming the old one for good).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools:$TESTS/../python LARDER_LIBRARY=${LARDER%/larder}/liblarder.so
make_tree a 60
"$LARDER" pack a -o www/A --shard-size 40K >/dev/null
start_gated_origin www
cluster_init busy-secret
start_daemon 0
start_daemon 1 --jobs 2
start_daemon 2

checkpoint() { # dir: files of its own bytes
  mkdir -p "$1/sub"
  head -c 1500001 /dev/urandom >"$1/weights.bin"
  head -c 7000 /dev/urandom >"$1/sub/optim.bin"
}
id_of() { "$LARDER" inspect "$1/index.larder" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])'; }
named_id() { # node name: the dataset id node's daemon has for name (empty: none)
  "$LARDER" names --socket "$WORK/sock$1" | /usr/bin/python3 -c '
import json, sys
print(([n["dataset_id"] for n in json.load(sys.stdin)["names"] if n["name"] == sys.argv[1]] + [""])[0])' "$2" 2>/dev/null
}

# 1. node 1's workers held at the origin by DEMAND READs
env "${sanitized_python[@]}" /usr/bin/python3 - "$WORK/sock1" "$gated_base" www/A "$WORK" <<'PY' >held.txt 2>&1 &
import glob, json, os, struct, subprocess, sys, time
import larder_wire as w
sock, base, packed, work = sys.argv[1:5]
shards = sorted(os.path.basename(p) for p in glob.glob(packed + "/shard-*"))
c = w.Client(sock, 1, timeout=120)
c.greet()
id_low, id_high, _ = c.open(base + "/A/index.larder")
for i in range(4):  # DEMAND (0), each of another shard: more than the 2 workers
    c.sock.sendall(w.frame(w.READ, struct.pack("<QQIB3xQQ", id_low, id_high, i, 0, 0, 1000), 10 + i))
open(os.path.join(work, "reads-sent"), "w").close()
got = {}
while len(got) < 4:
    kind, request, payload = w.recv_frame(c.sock)
    assert kind == w.DATA, (kind, request, payload[:200])
    got[request] = payload
for i in range(4):
    with open(os.path.join(packed, shards[i]), "rb") as f:
        assert got[10 + i] == f.read(1000), "READ %d: not the shard's bytes" % i
print("held READs: all 4 answered with their shard's bytes")
PY
reader=$!
for _ in $(seq 200); do [ -e reads-sent ] && break; sleep 0.05; done
running() {
  "$LARDER" stat --socket "$WORK/sock1" --json | /usr/bin/python3 -c '
import json, sys
print(json.load(sys.stdin)["classes"]["demand"]["running"])'
}
for _ in $(seq 200); do [ "$(running)" = 2 ] && break; sleep 0.05; done
[ "$(running)" = 2 ] || fail "node 1 runs $(running) DEMAND READs, want both workers: $(cat held.txt)"
checkpoint v1
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish v1 busy/latest >pub1.txt || fail "publish v1: $(cat pub1.txt)"
ID1=$(id_of v1)
start=$(date +%s%N)
for _ in $(seq 100); do [ "$(named_id 1 busy/latest)" = "$ID1" ] && break; sleep 0.05; done
took=$((($(date +%s%N) - start) / 1000000))
[ "$(named_id 1 busy/latest)" = "$ID1" ] ||
  fail "node 1 did not learn busy/latest within 5 s while its workers were busy: $(tail -5 daemon1.log)"
[ "$(running)" = 2 ] || fail "the READs were not held all along (running $(running))"
echo "node 1 learned busy/latest in $took ms with both workers held at the origin"
curl -s "$gated_base/__release/all" >/dev/null
wait $reader || fail "the held READs: $(cat held.txt)"
cat held.txt
LARDER_SOCKET=$WORK/sock1 "$LARDER" consume busy/latest out1 >consume1.txt 2>&1 ||
  fail "consume on node 1: $(cat consume1.txt)"
for f in weights.bin sub/optim.bin; do cmp v1/$f out1/$f || fail "out1/$f is not v1's"; done

# 2. a lost announcement tried again
until [ "$(named_id 2 busy/latest)" = "$ID1" ]; do sleep 0.05; done
checkpoint v2
kill -STOP "${pids[2]}"
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish v2 busy/latest --replace >pub2.txt ||
  { kill -CONT "${pids[2]}"; fail "publish v2: $(cat pub2.txt)"; }
ID2=$(id_of v2)
for _ in $(seq 400); do grep -q "announcing to .*:$((base + 2)) failed" daemon0.log && break; sleep 0.05; done
kill -CONT "${pids[2]}"
grep "announcing to" daemon0.log || fail "the announcement to the stopped node 2 did not fail: $(tail -5 daemon0.log)"
for _ in $(seq 600); do [ "$(named_id 2 busy/latest)" = "$ID2" ] && break; sleep 0.05; done
[ "$(named_id 2 busy/latest)" = "$ID2" ] ||
  fail "node 2 names busy/latest as $(named_id 2 busy/latest), not v2's $ID2: $(tail -5 daemon0.log)"
LARDER_SOCKET=$WORK/sock2 "$LARDER" consume busy/latest out2 >consume2.txt 2>&1 ||
  fail "consume on node 2: $(cat consume2.txt)"
for f in weights.bin sub/optim.bin; do cmp v2/$f out2/$f || fail "out2/$f is not v2's"; done
echo "node 2, stopped through the announcement, names v2 once tried again"
for p in "${pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done
echo "publish under load: ok"
