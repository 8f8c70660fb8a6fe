# One cluster, three transports (docs/protocol.md, "Transports"): node 0
# runs --transport tcp, node 1 --transport ucx, node 2 --transport auto.
# Every node reads every sample byte-exact (compared with the files it was
# packed from), the origin serves the dataset once for the cluster, node 1
# reads node 0 over TCP (its offer refused) and node 2 over UCX, and each
# says so in STAT and its metrics.  A peer that has not proved the secret
# gets no UCX path.  Skipped (77) when UCX has no shm transport here.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
ucx_usable shm
export UCX_TLS=shm
make_tree a 60
# small shards: ownership is by (shard, chunk) over members named by their
# (random) ports, and with 7 shards node 0 owned none of them 1 run in 17:
# node 1 then never asked it, and its transport stayed "ucx?" (not asked)
"$LARDER" pack a -o origin/A --shard-size 40K >/dev/null
cluster_init mixed-secret
start_daemon 0 --transport tcp
start_daemon 1 --transport ucx --metrics "127.0.0.1:$((base + 3))"
start_daemon 2 --transport auto
grep -q "peers over TCP" "$WORK/daemon0.log" || fail "node 0: $(cat "$WORK/daemon0.log")"
grep -q "peers over UCX (shm)" "$WORK/daemon1.log" || fail "node 1: $(cat "$WORK/daemon1.log")"
grep -q "peers over UCX (shm)" "$WORK/daemon2.log" || fail "node 2: $(cat "$WORK/daemon2.log")"

readers=()
for n in 0 1 2; do
  LARDER_SOCKET=$WORK/sock$n "$LARDER" warm origin/A/index.larder --cache "$WORK/cache$n" >warm$n.txt 2>&1 &
  readers+=($!)
done
wait "${readers[@]}" 2>/dev/null || true
for n in 0 1 2; do grep -q "warmed 60 samples" warm$n.txt || fail "node $n: $(cat warm$n.txt)"; done
# byte-exact on every node: each sample's fields against the packed files
for n in 0 1 2; do
  for s in 00003 00017 00031 00059; do
    LARDER_SOCKET=$WORK/sock$n same_bytes origin/A/index.larder sample$s jpg a/sample$s.jpg
    LARDER_SOCKET=$WORK/sock$n same_bytes origin/A/index.larder sample$s cls a/sample$s.cls
  done
done
sums=$(for n in 0 1 2; do "$LARDER" stat --cache "$WORK/cache$n" --json; done | /usr/bin/python3 -c '
import json, sys
o = p = 0
for line in sys.stdin:
    for d in json.loads(line)["datasets"]:
        o += d["origin_bytes"]; p += d["peer_bytes"]
print(o, p)')
read -r origin peer <<<"$sums"
total=$("$LARDER" inspect origin/A/index.larder --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes"])')
echo "origin $origin bytes for $total of data; peers served $peer"
awk -v o="$origin" -v t="$total" 'BEGIN { exit !(o <= 1.15 * t) }' || fail "origin read $origin for $total"
[ "$peer" -gt 0 ] || fail "no node borrowed"

# how node 1 reads each member: node 0 over TCP (no UCX there), node 2 over UCX
"$LARDER" stat --socket "$WORK/sock1" --json | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["transport"] == "ucx (shm)", d["transport"]
peers = {p["member"].rsplit(":", 1)[1]: p["transport"] for p in d["peers"]}
base = int(sys.argv[1])
assert peers == {str(base): "tcp", str(base + 2): "ucx"}, peers' "$base" ||
  fail "node 1's peers: $("$LARDER" stat --socket "$WORK/sock1" --json)"
curl -sf "http://127.0.0.1:$((base + 3))/metrics" >metrics.txt || fail "no metrics"
grep -q "^larder_peer_transport{member=\"127.0.0.1:$base\",transport=\"tcp\"} 1" metrics.txt &&
  grep -q "^larder_peer_transport{member=\"127.0.0.1:$((base + 2))\",transport=\"ucx\"} 1" metrics.txt ||
  fail "metrics: $(grep peer_transport metrics.txt)"

# a peer that has not proved the secret asks for a UCX path: refused, closed
/usr/bin/python3 - "$base" <<'PY' || fail "an unproven peer's UCX_OFFER"
import os, socket, struct, sys
base = int(sys.argv[1])
def frame(kind, payload, request=1):
    return struct.pack("<IBBHIIQ", 0x5244524C, 2, kind, 0, len(payload), 0, request) + payload
def answers(sock):
    sock.settimeout(3)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    kinds, at = [], 0
    while at + 24 <= len(data):
        length = struct.unpack_from("<I", data, at + 8)[0]
        kinds.append(data[at + 5]); at += 24 + length
    return kinds
t = socket.create_connection(("127.0.0.1", base + 1))
t.sendall(frame(1, struct.pack("<II", 2, 4 << 20) + os.urandom(32)))  # HELLO as a peer
t.sendall(frame(24, os.urandom(200), 2))  # UCX_OFFER without PROVE
kinds = answers(t)
assert kinds[0] == 2 and 25 not in kinds and kinds[-1] == 5, kinds  # WELCOME, then ERROR only
PY
for n in 0 1 2; do kill -0 "${pids[$n]}" || fail "daemon $n died"; done
echo "ok"
