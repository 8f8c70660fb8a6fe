# Publications in a cluster without a secret (two larderd on loopback,
# --peers only): there anyone who reaches a daemon's TCP port is taken for
# a peer, every local user on loopback, and such peers may read only
# datasets already open (docs/security.md).
#  1. ANNOUNCE from such a peer is refused (it had the daemon open the
#     index it named, as the daemon's user: found by review), nothing is
#     opened, and the peer's OPEN of that index is refused after as before;
#  2. publish and consume still work: node 1 learns the name from node 0
#     when its reader resolves it, and reads every file byte for byte.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools

reserve_ports 2
base=$port_base
members="127.0.0.1:$base,127.0.0.1:$((base + 1))"
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')
for node in 0 1; do
  "$LARDERD" --cache "$WORK/cache$node" --socket "$WORK/sock$node" --listen "127.0.0.1:$((base + node))" \
    --peers "$members" 2>>"$WORK/daemon$node.log" &
  pids[$node]=$!
  for _ in $(seq 100); do [ -S "$WORK/sock$node" ] && break; sleep 0.05; done
  [ -S "$WORK/sock$node" ] || fail "daemon $node did not start: $(cat "$WORK/daemon$node.log")"
done

# a private index: in a directory only the daemons' user may enter
mkdir -m 0700 private private/src
head -c 300000 /dev/urandom >private/src/secret.bin
"$LARDER" index --files private/src -o private/src/index.larder >/dev/null || fail "index"
PRIVATE=$WORK/private/src/index.larder

# 1. a peer without a secret: ANNOUNCE refused, nothing opened
/usr/bin/python3 - "$base" "$PRIVATE" <<'PY' || fail "hostile peer: $(tail -3 daemon1.log)"
import sys, larder_wire as w
port, index = int(sys.argv[1]), sys.argv[2].encode()
producer = b"127.0.0.1:%d" % port  # node 0: a member other than node 1

def peer():
    c = w.Client(("127.0.0.1", port + 1), 2, secret=None)
    c.greet()
    return c

def refused(kind, payload, needle):
    w.expect_refused(peer(), kind, payload, needle)

refused(w.OPEN, index, "")
refused(w.ANNOUNCE, w.publication_payload(b"stolen", producer, index), "proved the cluster secret")
refused(w.OPEN, index, "")
PY
sleep 0.5 # an ANNOUNCE's open is off the loop: time for one to show
grep -q "opened $PRIVATE" daemon1.log && fail "node 1 opened the index a peer announced: $(cat daemon1.log)"
LARDER_SOCKET=$WORK/sock1 "$LARDER" names | grep -q stolen && fail "the announced name was registered"

# 2. publish on node 0, consume on node 1: learnt by asking node 0
mkdir -p ckpt/sub
head -c 2000000 /dev/urandom >ckpt/sub/weights.bin
echo '{"step": 7}' >ckpt/config.json
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish ckpt run/step7 >publish.txt 2>&1 || fail "publish: $(cat publish.txt)"
LARDER_SOCKET=$WORK/sock1 "$LARDER" consume run/step7 out --timeout 30 >consume.txt 2>&1 ||
  fail "consume: $(cat consume.txt) $(tail -5 daemon1.log)"
cmp ckpt/sub/weights.bin out/sub/weights.bin || fail "weights.bin differs"
cmp ckpt/config.json out/config.json || fail "config.json differs"
for n in 0 1; do kill -0 "${pids[$n]}" || fail "daemon $n died"; done
for n in 0 1; do kill "${pids[$n]}" 2>/dev/null || true; done
for n in 0 1; do wait "${pids[$n]}" 2>/dev/null || true; done
! grep -l "Sanitizer" daemon*.log || fail "a sanitizer report: $(grep -h -A20 Sanitizer daemon*.log | head -60)"
echo "ok"
