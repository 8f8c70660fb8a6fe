# Trust between larderd and its clients (issue 9), with real daemons:
# 1. peers prove the cluster secret by HMAC-SHA256 over both sides'
#    nonces, checked here with Python's hmac (tests/tools/larder_wire.py,
#    written from docs/protocol.md): a right proof is served, a wrong
#    one or none is refused with an ERROR and the connection closed;
# 2. a fake owner node that a daemon borrows from records every byte it
#    receives: the secret is never among them, and the daemon's PROVE is
#    right; an impostor owner (wrong proof) receives nothing past HELLO,
#    and the reader still gets every sample, from the origin;
# 3. the Unix socket takes only allowed uids (SO_PEERCRED): uid 65534 is
#    refused with a clear message and the daemon serves the others; with
#    --allow-uid it may connect but not OPEN unless --allow names a prefix.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools
make_tree a 40
"$LARDER" pack a -o origin/A --shard-size 40K >/dev/null
INDEX=$WORK/origin/A/index.larder
head -c 18 /dev/urandom | base64 >secret # one line, no newline inside
SECRET=$(cat secret)

reserve_ports 4
base=$port_base
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')
wait_for() { # path-or-port log: wait until a socket file exists or a TCP port answers
  for _ in $(seq 100); do
    if [[ $1 == /* ]]; then [ -S "$1" ] && return; else
      /usr/bin/python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null && return
    fi
    sleep 0.05
  done
  fail "nothing at $1: $(cat "$2" 2>/dev/null)"
}

# the fake owners (section 2), up before any daemon borrows from them
/usr/bin/python3 "$TESTS/tools/larder_wire.py" owner $((base + 1)) secret "$WORK/owner.rec" &
pids+=($!)
/usr/bin/python3 "$TESTS/tools/larder_wire.py" owner $((base + 3)) secret "$WORK/impostor.rec" --impostor &
pids+=($!)
wait_for $((base + 1)) /dev/null
wait_for $((base + 3)) /dev/null

# ---- 1. the handshake, against an independent HMAC ------------------------
"$LARDERD" --cache "$WORK/cache1" --socket "$WORK/sock1" --listen "127.0.0.1:$base" \
  --peers "127.0.0.1:$base,127.0.0.1:$((base + 1))" --secret-file secret 2>>daemon1.log &
pids+=($!)
wait_for "$WORK/sock1" daemon1.log
/usr/bin/python3 - "$base" "$SECRET" "$INDEX" "$WORK/origin/A/shard-000000.tar" <<'PY' || fail "handshake: $(tail -5 daemon1.log)"
import sys, larder_wire as w
port, secret, index, shard = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3], sys.argv[4]
# the right secret: the daemon's proof checks out with Python's hmac, ours is taken
c = w.Client(("127.0.0.1", port), 2, secret)
auth, name = c.greet()
assert auth == 1 and c.daemon_proved, "the daemon's proof does not match HMAC-SHA256"
low, high, shards = c.open(index)
expected = open(shard, "rb").read()[:4096]
assert c.read(low, high, 0, 0, 4096) == expected, "wrong bytes through an authenticated peer"
print("a peer with the right secret: daemon proved it, read served")
# the wrong secret: our proof fails, an ERROR (EDENIED) and the connection closes
c = w.Client(("127.0.0.1", port), 2, secret + b"x")
c.greet()
assert not c.daemon_proved  # (the daemon's proof cannot match a wrong secret either)
try:
    c.open(index)
    raise SystemExit("a peer with the wrong secret was served")
except w.Refused as e:
    assert e.code == w.EDENIED, e
    print("a peer with the wrong secret: refused,", e.message)
assert c.sock.recv(1) == b"", "the connection stayed open after a wrong secret"
# no PROVE at all: nothing is served
c = w.Client(("127.0.0.1", port), 2, secret)
c.sock.sendall(w.hello(2, b"\0" * 32))
w.recv_frame(c.sock)  # WELCOME
try:
    c.request(w.OPEN, index.encode())
    raise SystemExit("a peer that did not prove the secret was served")
except w.Refused as e:
    assert e.code == w.EDENIED, e
# a version 1 HELLO that carries the secret in clear is not understood
c = w.Client(("127.0.0.1", port), 2)
c.sock.sendall(w.frame(w.HELLO, b"\2\0\0\0" + bytes([len(secret), 0, 0, 0]) + secret, version=1))
assert c.sock.recv(100) == b"", "a version 1 HELLO was answered"
PY
grep -q "failed to prove the cluster secret" daemon1.log || fail "no log line for the wrong secret"

# ---- 2. what an owner node receives ---------------------------------------
LARDER_SOCKET=$WORK/sock1 "$LARDER" warm "$INDEX" --cache "$WORK/cache1" >warm1.txt 2>&1 ||
  fail "warm through daemon 1: $(cat warm1.txt)"
grep -q "warmed 40 samples" warm1.txt || fail "$(cat warm1.txt)"
LARDER_SOCKET=$WORK/sock1 same_bytes "$INDEX" sample00013 jpg a/sample00013.jpg
[ -s owner.rec ] || fail "daemon 1 never asked the owner for anything: $(tail -5 daemon1.log)"
grep -q "prove ok" owner.rec.log || fail "the owner saw no valid PROVE: $(cat owner.rec.log)"
! grep -q "prove bad" owner.rec.log || fail "the daemon's PROVE was wrong: $(cat owner.rec.log)"
/usr/bin/python3 - "$SECRET" owner.rec <<'PY' || fail "the owner received the secret"
import sys
secret, data = sys.argv[1].encode(), open(sys.argv[2], "rb").read()
assert secret not in data, "the secret's bytes are in what the owner received"
assert secret[:8] not in data and secret[-8:] not in data, "part of the secret went over the wire"
print("the owner received %d bytes, none of them the secret" % len(data))
PY
# an impostor owner (it cannot prove the secret) gets nothing past HELLO
"$LARDERD" --cache "$WORK/cache2" --socket "$WORK/sock2" --listen "127.0.0.1:$((base + 2))" \
  --peers "127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))" --secret-file secret 2>>daemon2.log &
pids+=($!)
wait_for "$WORK/sock2" daemon2.log
LARDER_SOCKET=$WORK/sock2 "$LARDER" warm "$INDEX" --cache "$WORK/cache2" >warm2.txt 2>&1 ||
  fail "warm through daemon 2: $(cat warm2.txt)"
grep -q "warmed 40 samples" warm2.txt || fail "$(cat warm2.txt)"
LARDER_SOCKET=$WORK/sock2 same_bytes "$INDEX" sample00021 jpg a/sample00021.jpg
grep -q "did not prove the cluster secret" daemon2.log || fail "daemon 2 trusted an impostor: $(tail daemon2.log)"
/usr/bin/python3 - impostor.rec <<'PY' || fail "the impostor received more than HELLO"
import struct, sys
data, at, kinds = open(sys.argv[1], "rb").read(), 0, []
while at < len(data):
    kinds.append(data[at + 5])
    at += 24 + struct.unpack_from("<I", data, at + 8)[0]
assert kinds and set(kinds) == {1}, kinds
print("the impostor received %d HELLOs and nothing else" % len(kinds))
PY

# ---- 3. who may use the Unix socket ----------------------------------------
nobody_init
"$LARDERD" --cache "$WORK/cache3" --socket "$WORK/sock3" 2>>daemon3.log &
pids+=($!)
wait_for "$WORK/sock3" daemon3.log
chmod 666 "$WORK/sock3" # connectable by anyone: the credentials check must do the work
nobody /usr/bin/python3 - "$WORK/sock3" <<'PY' || fail "uid 65534 on the socket: $(tail -3 daemon3.log)"
import sys, larder_wire as w
c = w.Client(sys.argv[1], 1)
try:
    c.greet()
    raise SystemExit("uid 65534 was greeted")
except w.Refused as e:
    assert e.code == w.EDENIED and "not allowed" in e.message and "65534" in e.message, e
    print("uid 65534 refused:", e.message)
PY
grep -q "refused uid 65534" daemon3.log || fail "no log line for the refused uid"
LARDER_SOCKET=$WORK/sock3 same_bytes "$INDEX" sample00002 jpg a/sample00002.jpg
[ "$("$LARDER" stat --socket "$WORK/sock3" --json | /usr/bin/python3 -c '
import json, sys; print(len(json.load(sys.stdin)["datasets"]))')" = 1 ] ||
  fail "daemon 3 did not serve root after refusing uid 65534"
kill -0 "${pids[-1]}" || fail "daemon 3 died"

# --allow-uid lets it connect; without --allow it still may not OPEN
"$LARDERD" --cache "$WORK/cache4" --socket "$WORK/sock4" --allow-uid 65534 2>>daemon4.log &
pids+=($!)
"$LARDERD" --cache "$WORK/cache5" --socket "$WORK/sock5" --allow-uid 65534 \
  --allow "$WORK/origin" 2>>daemon5.log &
pids+=($!)
wait_for "$WORK/sock4" daemon4.log
wait_for "$WORK/sock5" daemon5.log
chmod 666 "$WORK/sock4" "$WORK/sock5"
nobody /usr/bin/python3 - "$WORK/sock4" "$WORK/sock5" "$INDEX" "$WORK/origin/A/shard-000001.tar" <<'PY' ||
import sys, larder_wire as w
sock4, sock5, index, shard = sys.argv[1:]
c = w.Client(sock4, 1)
c.greet()
try:
    c.open(index)
    raise SystemExit("uid 65534 opened an index without --allow")
except w.Refused as e:
    assert e.code == w.EDENIED and "--allow" in e.message, e
    print("OPEN by uid 65534 without --allow:", e.message)
c = w.Client(sock5, 1)
c.greet()
low, high, shards = c.open(index)
assert c.read(low, high, 1, 100, 1000) == open(shard, "rb").read()[100:1100]
print("OPEN by uid 65534 under --allow served")
PY
  fail "--allow-uid and --allow: $(tail -3 daemon4.log daemon5.log)"
echo "trust: all checks passed"
