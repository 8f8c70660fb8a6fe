# Three larderd daemons on loopback, each with its own cache, over one
# origin: every shard's bytes come from the origin once for the whole
# cluster; a dead owner makes readers fall back to the origin with the
# right bytes; a restarted daemon rejoins with its cache; hostile input
# leaves the daemons up.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
make_tree a 90
make_tree b 30
"$LARDER" pack a -o origin/A --shard-size 150K >/dev/null
"$LARDER" pack b -o origin/B --shard-size 100K >/dev/null

cluster_init cluster-secret
# node 2 keeps at most 100 KB of what it borrows
start_daemon 0
start_daemon 1
start_daemon 2 --borrow-size 100K

stat_sum() { # dataset key: the key summed over the three caches
  for n in 0 1 2; do "$LARDER" stat --cache "$WORK/cache$n" --json; done | /usr/bin/python3 -c "
import json, sys
total = 0
for line in sys.stdin:
    for d in json.loads(line)['datasets']:
        if d['dataset_id'] == '$1': total += d['$2']
print(total)"
}
id_of() { "$LARDER" inspect "$1" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])'; }

# 1. all three nodes read all of A at once
for n in 0 1 2; do
  LARDER_SOCKET=$WORK/sock$n "$LARDER" warm origin/A/index.larder --cache "$WORK/cache$n" >warm$n.txt &
done
wait %4 %5 %6 2>/dev/null || true
for n in 0 1 2; do grep -q "warmed 90 samples" warm$n.txt || fail "node $n: $(cat warm$n.txt)"; done
A=$(id_of origin/A/index.larder)
total=$("$LARDER" inspect origin/A/index.larder --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes"])')
origin=$(stat_sum "$A" origin_bytes)
peer=$(stat_sum "$A" peer_bytes)
echo "dataset A: $total sample bytes; origin read $origin for the cluster; peers served $peer"
awk -v o="$origin" -v t="$total" 'BEGIN { exit !(o <= 1.15 * t) }' ||
  fail "the cluster read $origin bytes from the origin for $total of data"
[ "$peer" -gt 0 ] || fail "no node borrowed from an owner"
for n in 0 1 2; do
  LARDER_SOCKET=$WORK/sock$n same_bytes origin/A/index.larder sample00042 jpg a/sample00042.jpg
done
borrowed=$("$LARDER" stat --cache "$WORK/cache2" --json | /usr/bin/python3 -c '
import json, sys; d = json.load(sys.stdin)["datasets"][0]; print(d["borrowed_bytes"], d["evictions"], d["peer_bytes"])')
read -r kept evicted got <<<"$borrowed"
[ "$got" -gt 200000 ] && [ "$kept" -le $((100 * 1024 + 65536)) ] && [ "$evicted" -gt 0 ] ||
  fail "node 2 kept $kept of $got borrowed bytes ($evicted evictions)"

# 2. kill node 1 in the middle of an epoch of B: every reader carries on
# with the right bytes -- node 1's own reader without its daemon, the others
# reading node 1's shards from the origin
readers=()
for n in 0 1 2; do
  LARDER_SOCKET=$WORK/sock$n timeout 60 "$LARDER" warm origin/B/index.larder --cache "$WORK/cache$n" \
    --jobs 2 >warmB$n.txt 2>&1 &
  readers+=($!)
done
sleep 0.1
kill -9 "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
for n in 0 1 2; do
  wait "${readers[$n]}" || fail "node $n's reader with a dead daemon or owner: $(cat warmB$n.txt)"
  grep -q "warmed 30 samples" warmB$n.txt || fail "node $n: $(cat warmB$n.txt)"
done
for n in 0 2; do
  LARDER_SOCKET=$WORK/sock$n same_bytes origin/B/index.larder sample00007 jpg b/sample00007.jpg
done

# 3. restart node 1 on its cache: it rejoins warm (no new origin reads for A)
before=$(stat_sum "$A" origin_bytes)
start_daemon 1
LARDER_SOCKET=$WORK/sock1 "$LARDER" warm origin/A/index.larder --cache "$WORK/cache1" >/dev/null
[ "$(stat_sum "$A" origin_bytes)" = "$before" ] || fail "the restarted node read the origin again"

# 4. hostile input: garbage, a wrong secret, a read outside any shard
/usr/bin/python3 - "$WORK/sock0" "$base" <<'PY' || fail "hostile input test"
import os, socket, struct, sys
path, base = sys.argv[1], int(sys.argv[2])
def talk(sock, data):
    sock.sendall(data)
    sock.settimeout(2)
    try:
        return sock.recv(4096)
    except (socket.timeout, ConnectionResetError):
        return b""
for junk in (os.urandom(64), b"LRDR" + b"\xff" * 40, b"\x00" * 24):
    s = socket.socket(socket.AF_UNIX); s.connect(path); talk(s, junk); s.close()
    t = socket.create_connection(("127.0.0.1", base)); talk(t, junk); t.close()
def frame(kind, payload, request=1):
    return struct.pack("<IBBHIIQ", 0x5244524C, 2, kind, 0, len(payload), 0, request) + payload
def hello(role):  # a peer states the ownership chunk, 4 MiB (docs/protocol.md)
    return frame(1, struct.pack("<II", role, 4 << 20 if role == 2 else 0) + os.urandom(32))
# a peer with the wrong secret is refused
t = socket.create_connection(("127.0.0.1", base))
answer = talk(t, hello(2))
assert answer[5] == 2, answer  # WELCOME, with the daemon's proof
answer = talk(t, frame(10, os.urandom(32)))  # PROVE with a made-up proof
assert answer[5] == 5, answer  # ERROR
t.close()
# a reader asking for bytes past a shard's end, or of an unknown dataset
s = socket.socket(socket.AF_UNIX); s.connect(path)
assert talk(s, hello(1))[5] == 2  # WELCOME
read = struct.pack("<QQIB3xQQ", 1, 2, 0, 0, 0, 100)
assert talk(s, frame(3, read, 7))[5] == 5  # ERROR: not open here
PY
# a peer's READ may not carry STAGE (a local reader's flag: stage the bytes
# in this node's cache and send none), over the peers' transport (TCP here,
# UCX under ucx_daemon_*.sh): refused with an ERROR; the same READs
# without it are answered
BENCH=${LARDER%/larder}/larder_bench_peer
[ -x "$BENCH" ] || fail "larder_bench_peer not built at $BENCH"
transport=${LARDER_TEST_TRANSPORT:-tcp}
LARDER_BENCH_TRANSPORT=$transport LARDER_BENCH_READ_FLAGS=2 "$BENCH" "127.0.0.1:$base" \
  "$WORK/origin/A/index.larder" cluster-secret 1 64 >peer-stage.out 2>peer-stage.err &&
  fail "a peer's STAGE READ was answered: $(cat peer-stage.out)"
grep -q "STAGE is a flag of a local reader's READ" peer-stage.err ||
  fail "a peer's STAGE READ: $(cat peer-stage.err)"
grep -q "^transport: $transport" peer-stage.err || fail "STAGE not over $transport: $(cat peer-stage.err)"
LARDER_BENCH_TRANSPORT=$transport "$BENCH" "127.0.0.1:$base" "$WORK/origin/A/index.larder" \
  cluster-secret 1 64 >peer-read.out 2>peer-read.err || fail "a peer's READ: $(cat peer-read.err)"
read -r bytes _ <peer-read.out
[ "$bytes" -gt 0 ] || fail "a peer read $bytes bytes"
LARDER_SOCKET=$WORK/sock0 same_bytes origin/A/index.larder sample00011 cls a/sample00011.cls
for n in 0 1 2; do kill -0 "${pids[$n]}" || fail "daemon $n died"; done

# 5. what a daemon says about itself: larder stat --socket, Prometheus text
# A READ answered over UCX ends on the daemon once the borrower has pulled
# the bytes, which may be after the borrower's reader has them: the
# daemon's jobs are given up to 5 s to end before "0 running" is checked.
for _ in $(seq 50); do
  "$LARDER" stat --socket "$WORK/sock0" --json | /usr/bin/python3 -c '
import json, sys; sys.exit(any(c["running"] for c in json.load(sys.stdin)["classes"].values()))' && break
  sleep 0.1
done
LARDER_SOCKET=$WORK/sock0 "$LARDER" stat --socket "$WORK/sock0" >dstat.txt || fail "stat --socket"
grep -q "dataset $A" dstat.txt || fail "stat --socket: $(cat dstat.txt)"
"$LARDER" stat --socket "$WORK/sock0" --json | /usr/bin/python3 -c '
import json, sys; d = json.load(sys.stdin); assert d["members"] == 3 and d["datasets"], d' ||
  fail "stat --socket --json"
# the queues by class in the text, as the JSON counts them (nothing ran between)
demand=$("$LARDER" stat --socket "$WORK/sock0" --json | /usr/bin/python3 -c '
import json, sys; print(json.load(sys.stdin)["classes"]["demand"]["started"])')
grep -q "^queues (READs and staging, by class)$" dstat.txt || fail "no queues: $(cat dstat.txt)"
grep -q "^  demand  $demand started, 0 queued now, 0 running; queue wait mean [0-9.]* ms, max " \
  dstat.txt || fail "demand queue line (JSON: $demand started): $(cat dstat.txt)"
grep -q "^  warm    0 started" dstat.txt || fail "warm queue line: $(cat dstat.txt)"
# which transport reads each member: what --transport asked for (tests/cli/ucx_*.sh)
"$LARDER" stat --socket "$WORK/sock0" --json | /usr/bin/python3 -c '
import json, os, sys
d = json.load(sys.stdin)
want = os.environ.get("LARDER_TEST_TRANSPORT") or "tcp"
assert d["transport"].split(" ")[0] == want, d["transport"]
assert len(d["peers"]) == 2 and all(p["transport"] == want for p in d["peers"]), d["peers"]' ||
  fail "stat --socket --json: the transport: $("$LARDER" stat --socket "$WORK/sock0" --json)"
grep -q "peers over $(echo "${LARDER_TEST_TRANSPORT:-tcp}" | tr a-z A-Z)" "$WORK/daemon0.log" ||
  fail "no 'peers over ...' line at start: $(head -3 "$WORK/daemon0.log")"

# 6. warm mode: a fourth, standalone daemon stages a dataset it is asked
# for once, in the background, and serves metrics
mport=$((base + 3))
"$LARDERD" --cache "$WORK/cache3" --socket "$WORK/sock3" --warm --warm-rate 50 \
  --metrics "127.0.0.1:$mport" 2>>"$WORK/daemon3.log" &
pids[3]=$!
for _ in $(seq 100); do [ -S "$WORK/sock3" ] && break; sleep 0.05; done
LARDER_SOCKET=$WORK/sock3 same_bytes origin/B/index.larder sample00001 cls b/sample00001.cls
B=$(id_of origin/B/index.larder)
for _ in $(seq 100); do
  staged=$("$LARDER" stat --cache "$WORK/cache3" --json | /usr/bin/python3 -c '
import json, sys; d = json.load(sys.stdin)["datasets"][0]; print(int(d["resident_bytes"] >= d["total_bytes"]))')
  [ "$staged" = 1 ] && break
  sleep 0.1
done
[ "$staged" = 1 ] || fail "warm mode did not stage the dataset"
curl -sf "http://127.0.0.1:$mport/metrics" >metrics.txt || fail "no metrics endpoint"
grep -q "^larder_resident_bytes{dataset=\"$B\"} [1-9]" metrics.txt || fail "metrics: $(head metrics.txt)"
grep -q "^# TYPE larder_origin_bytes_total counter" metrics.txt || fail "metrics types"

# 7. the live view redraws until stopped
timeout 3 "$LARDER" stat --cache "$WORK/cache0" --watch=0.3 >watch.txt || [ $? -eq 124 ] ||
  fail "stat --watch"
[ "$(grep -c "^dataset $A" watch.txt)" -ge 2 ] || fail "stat --watch drew $(grep -c "^dataset" watch.txt) views"
