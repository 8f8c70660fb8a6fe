# Without a cluster secret, larderd takes peer connections only from
# loopback addresses: a peer connecting from another address (a network
# namespace joined by a veth pair, or else this machine's own non-loopback
# address) gets an ERROR (LARDER_EDENIED) and is closed, while a loopback
# peer is greeted and may read only datasets already open; with
# --insecure-peers the daemon warns at start and takes the outside peer.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools
make_tree a 10
"$LARDER" pack a -o origin/A --shard-size 40K >/dev/null
INDEX=$WORK/origin/A/index.larder
reserve_ports 2
base=$port_base
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')

# Where an outside peer comes from: a namespace when `ip netns` works,
# else this machine's first non-loopback IPv4 address.
ns=larder$$ veth=lv$$
subnet=10.$((200 + RANDOM % 50)).$((RANDOM % 250))
outside=() # the command prefix that runs a client outside
if ip netns add "$ns" 2>/dev/null; then
  cleanup_hooks+=("ip netns del $ns 2>/dev/null; ip link del ${veth}h 2>/dev/null")
  if ip link add "${veth}h" type veth peer name "${veth}n" &&
    ip link set "${veth}n" netns "$ns" &&
    ip addr add "$subnet.1/30" dev "${veth}h" && ip link set "${veth}h" up &&
    ip netns exec "$ns" ip addr add "$subnet.2/30" dev "${veth}n" &&
    ip netns exec "$ns" ip link set "${veth}n" up && ip netns exec "$ns" ip link set lo up; then
    outside=(ip netns exec "$ns")
    target=$subnet.1 source=$subnet.2
  fi
fi
if [ ${#outside[@]} -eq 0 ]; then
  address=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+\.' | grep -v '^127\.' | head -1 || true)
  [ -n "$address" ] || skip "no network namespace and no non-loopback address to connect from"
  outside=(env)
  target=$address source=$address
fi
echo "outside peer: from $source to $target (${outside[*]})"

start() { # name port [options]
  local name=$1 port=$2
  shift 2
  "$LARDERD" --cache "$WORK/cache$name" --socket "$WORK/sock$name" --listen "0.0.0.0:$port" \
    "$@" 2>>"$WORK/daemon$name.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$WORK/sock$name" ] && return; sleep 0.05; done
  fail "daemon $name did not start: $(cat "$WORK/daemon$name.log")"
}
start 1 "$base"
start 2 $((base + 1)) --insecure-peers
grep -q "warning: --insecure-peers" daemon2.log || fail "no warning for --insecure-peers: $(cat daemon2.log)"
! grep -q "insecure" daemon1.log || fail "daemon 1 warned without --insecure-peers"

# open the dataset on daemon 1 through a local reader
LARDER_SOCKET=$WORK/sock1 same_bytes "$INDEX" sample00003 jpg a/sample00003.jpg

"${outside[@]}" /usr/bin/python3 - "$target" "$base" "$source" <<'PY' || fail "outside peer: $(tail -3 daemon1.log)"
import sys, larder_wire as w
target, port, source = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = w.Client((target, port), 2, source=source)
try:
    c.greet()
    raise SystemExit("a peer from %s was greeted without a secret" % source)
except w.Refused as e:
    assert e.code == w.EDENIED and "loopback" in e.message, e
    print("peer from %s refused: %s" % (source, e.message))
assert c.sock.recv(1) == b"", "the refused connection stayed open"
# --insecure-peers takes it
c = w.Client((target, port + 1), 2, source=source)
auth, name = c.greet()
assert auth == 0, auth
print("with --insecure-peers: greeted")
PY
grep -q "refused a peer from $source" daemon1.log || fail "no log line: $(cat daemon1.log)"

/usr/bin/python3 - "$base" "$INDEX" "$WORK/origin/A/shard-000000.tar" <<'PY' || fail "loopback peer: $(tail -3 daemon1.log)"
import sys, larder_wire as w
port, index, shard = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = w.Client(("127.0.0.1", port), 2)
auth, name = c.greet()
assert auth == 0
# a dataset already open here is served; a peer without a secret opens nothing new
low, high, _ = c.open(index)
assert c.read(low, high, 0, 0, 1000) == open(shard, "rb").read()[:1000]
try:
    c.open("/etc/passwd")
    raise SystemExit("an unauthenticated peer opened a new index")
except w.Refused as e:
    assert e.code == -1004, e  # LARDER_ENOTFOUND: not open on this node
print("loopback peer without a secret: served what is open, nothing new")
PY
for p in "${pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done
