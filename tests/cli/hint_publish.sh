# Hints by publication name (issue 12, item 6: `larder hint replicate NAME
# --to NODES`) on three larderd daemons over loopback with a secret:
# 1. node 0 publishes a checkpoint directory as eval/latest; at once (the
#    name may still be on its way to the others) `larder hint replicate
#    eval/latest --to NODE2 --wait`, asked on node 1 (neither producer
#    nor target): node 2 then holds every byte of it, and with the
#    producer killed (the only other copy: no --write-through) a consumer
#    on node 2 reads every file byte for byte with no origin and no peer
#    request of node 2's daemon (its STATS before and after);
# 2. `larder hint hot NAME --wait` on node 1: node 1 holds it all;
# 3. bad input: a name nobody published (a clear error, at once, not after
#    the daemon's wait), a name that is no name and no file (usage), and a
#    HINT frame flagged NAME whose name is malformed (refused; the daemon
#    stays up).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"

cluster_init hint-publish-secret
start_daemon 0
start_daemon 1
start_daemon 2

mkdir -p ckpt/model ckpt/optim
head -c 3145728 /dev/urandom >ckpt/model/weights.bin
head -c 1048577 /dev/urandom >ckpt/optim/state.bin
head -c 70001 /dev/urandom >ckpt/optim/small.bin
echo '{"step": 7}' >ckpt/config.json
total=$(find ckpt -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')

json_get() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }
dataset() { # node key: the node cache's figure for the publication's dataset
  "$LARDER" stat --socket "$WORK/sock$1" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['$2'] for d in json.load(sys.stdin)['datasets'] if d['dataset_id'] == '$ID'))"
}

# 1. replicate by name, asked on node 1, to node 2
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish ckpt eval/latest >publish.txt ||
  fail "publish: $(cat publish.txt) $(tail -3 daemon0.log)"
ID=$("$LARDER" inspect ckpt/index.larder --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
"$LARDER" hint replicate eval/latest --to "127.0.0.1:$((base + 2))" --wait --socket "$WORK/sock1" \
  --json >hint.json || fail "hint replicate by name: $(cat hint.json) $(tail -3 daemon1.log) $(tail -3 daemon2.log)"
cat hint.json
[ "$(json_get nodes <hint.json)" = 1 ] || fail "not one node took it"
[ "$(json_get done <hint.json)" = True ] || fail "the hint did not wait for the staging"
[ "$(json_get samples <hint.json)" = 4 ] || fail "not the 4 files of the publication (its index skips itself)"
resident=$(dataset 2 resident_bytes)
[ "$resident" -ge "$total" ] || fail "node 2 holds $resident bytes of the $total published"
read -r o1 p1 <<<"$(dataset 2 origin_requests) $(dataset 2 peer_requests)"
kill "${pids[0]}" && wait "${pids[0]}" 2>/dev/null
LARDER_SOCKET=$WORK/sock2 "$LARDER" consume eval/latest out2 --timeout 10 >consume2.txt 2>&1 ||
  fail "consume on node 2 with the producer gone: $(cat consume2.txt)"
for f in model/weights.bin optim/state.bin optim/small.bin config.json; do
  cmp ckpt/$f out2/$f || fail "node 2's copy of $f differs"
done
read -r o2 p2 <<<"$(dataset 2 origin_requests) $(dataset 2 peer_requests)"
echo "node 2 before/after the consumer: origin requests $o1/$o2, peer requests $p1/$p2"
[ "$o1" = "$o2" ] && [ "$p1" = "$p2" ] || fail "the consumer on node 2 caused remote requests"

# 2. hot by name on node 1, the producer back (it serves its own
# publications again after a restart)
start_daemon 0
"$LARDER" hint hot eval/latest --wait --socket "$WORK/sock1" --json >hot.json ||
  fail "hint hot by name: $(cat hot.json) $(tail -3 daemon1.log)"
[ "$(json_get nodes <hot.json)" = 1 ] && [ "$(json_get done <hot.json)" = True ] || fail "hot: $(cat hot.json)"
[ "$(dataset 1 resident_bytes)" -ge "$total" ] || fail "node 1 does not hold the publication"

# 3. bad input
start=$(date +%s)
expect_error 1 "no publication named never/published" \
  "$LARDER" hint replicate never/published --to "127.0.0.1:$((base + 2))" --socket "$WORK/sock1"
[ $(($(date +%s) - start)) -lt 20 ] || fail "an unknown name took the daemon's whole wait"
expect_error 2 "nor a publication name" "$LARDER" hint replicate no-dir/../x --to "127.0.0.1:$((base + 2))" --socket "$WORK/sock1"
PYTHONPATH=$TESTS/tools /usr/bin/python3 - "$WORK/sock1" <<'PY' || fail "a HINT with a malformed name was not refused: $(tail -3 daemon1.log)"
import struct, sys, larder_wire as w
HINT = 11
def hint(flags, name):  # docs/protocol.md, "HINT": hot, TTL 1 s, no members, no keys
    return struct.pack("<BBHIQIIII", 1, flags, 0, 0, 1000, len(name), 0, 0, 0) + name
for name in (b"a/../b", b"bad\x07name", b"x" * 129):
    c = w.Client(sys.argv[1], 1)
    c.greet()
    c.sock.sendall(w.frame(HINT, hint(0x08, name)))
    assert c.sock.recv(1) == b"", "a HINT of the name %r was answered" % name
# flag 0x10 is none of HINT's
c = w.Client(sys.argv[1], 1)
c.greet()
c.sock.sendall(w.frame(HINT, hint(0x10, b"eval/latest")))
assert c.sock.recv(1) == b"", "a HINT with an unknown flag was answered"
PY
for p in "${pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done
echo "hint by name: ok"
