# Publish and consume (issue 12, item 5) on three larderd daemons over
# loopback, each with its own cache, in a cluster with a secret:
#  1. a consumer on node 1 started before the publication waits for it;
#     node 0 publishes a directory of files of mixed sizes (several MiB);
#     nodes 1 and 2 consume it byte for byte (cmp with the originals), the
#     producer's directory read once (node 0's origin bytes: one copy), no
#     origin read on nodes 1 and 2, their bytes from node 0 (peer bytes);
#  2. a name never published, with a short timeout: a clear error;
#  3. a daemon restarted after the publication still finds it (asks peers),
#     under --allow too;
#     a producer restarted after a crash still serves what it published;
#  4. --write-through: read from the producer while it lives (no origin
#     read), then node 0 killed: node 2 reads every file byte-exact from
#     the origin copy; a publication without it: an error naming the
#     producer;
#  5. hostile frames: PUBLISH and ANNOUNCE with an overlong name, a control
#     character, an unknown producer are refused with an ERROR; a peer that
#     has not proven the secret cannot ANNOUNCE; the daemons stay up.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools

cluster_init publish-secret
start_daemon 0
start_daemon 1
start_daemon 2

# a checkpoint: small files, a 3 MiB and a 5 MiB one, in subdirectories
make_checkpoint() { # dir
  mkdir -p "$1/model" "$1/optim/shards"
  head -c 5242880 /dev/urandom >"$1/model/weights.bin"
  head -c 3145728 /dev/urandom >"$1/optim/shards/state-0.bin"
  head -c 70001 /dev/urandom >"$1/optim/shards/state-1.bin"
  echo '{"step": 1000}' >"$1/config.json"
  head -c 1 /dev/urandom >"$1/tiny"
  head -c 200000 /dev/urandom >"$1/tokenizer.model"
}
make_checkpoint ckpt
total=$(find ckpt -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')

same_tree() { # original copy: every file of original, byte for byte, and nothing else
  (cd "$1" && find . -type f ! -name index.larder | sort) >"$WORK/want.txt"
  (cd "$2" && find . -type f | sort) >"$WORK/got.txt"
  cmp -s "$WORK/want.txt" "$WORK/got.txt" || fail "$2 holds other files: $(diff "$WORK/want.txt" "$WORK/got.txt")"
  while read -r f; do cmp "$1/$f" "$2/$f" || fail "$2/$f differs from $1/$f"; done <"$WORK/want.txt"
}
stat_of() { # node id key: the node cache's counter for that dataset
  "$LARDER" stat --cache "$WORK/cache$1" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['$3'] for d in json.load(sys.stdin)['datasets'] if d['dataset_id'] == '$2'))"
}

# 1. a consumer that starts before the publication waits, then reads it all
LARDER_SOCKET=$WORK/sock1 "$LARDER" consume ckpt/step-1000 out1 --timeout 30 >consume1.txt 2>&1 &
early=$!
sleep 0.5
kill -0 $early 2>/dev/null || fail "the early consumer did not wait: $(cat consume1.txt)"
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish ckpt ckpt/step-1000 >publish.txt ||
  fail "publish: $(cat publish.txt) $(tail -3 daemon0.log)"
grep -q "published ckpt/step-1000: dataset" publish.txt || fail "publish said: $(cat publish.txt)"
wait $early || fail "the early consumer failed: $(cat consume1.txt); $(tail -3 daemon1.log)"
same_tree ckpt out1
LARDER_SOCKET=$WORK/sock2 "$LARDER" consume ckpt/step-1000 out2 >consume2.txt 2>&1 ||
  fail "consume on node 2: $(cat consume2.txt)"
same_tree ckpt out2
ID=$("$LARDER" inspect ckpt/index.larder --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
o0=$(stat_of 0 "$ID" origin_bytes) o1=$(stat_of 1 "$ID" origin_bytes) o2=$(stat_of 2 "$ID" origin_bytes)
p1=$(stat_of 1 "$ID" peer_bytes) p2=$(stat_of 2 "$ID" peer_bytes)
echo "checkpoint of $total bytes: origin bytes $o0 / $o1 / $o2, peer bytes on nodes 1 and 2: $p1 / $p2"
# the producer's files read once: at most a block's rounding per file beyond one copy
[ "$o0" -ge "$total" ] && [ "$o0" -le $((total + 6 * 65536)) ] ||
  fail "node 0 read $o0 bytes of its own directory for $total"
[ "$o1" -eq 0 ] && [ "$o2" -eq 0 ] || fail "consumers read the origin: $o1 and $o2 bytes"
[ "$p1" -ge "$total" ] && [ "$p2" -ge "$total" ] || fail "consumers borrowed only $p1 and $p2 bytes"
# and from the daemons' own STATS: node 0 served both consumers' copies to peers
served=$("$LARDER" stat --socket "$WORK/sock0" --json | /usr/bin/python3 -c "
import json, sys
print(sum(d['peer_served_bytes'] for d in json.load(sys.stdin)['datasets'] if d['dataset_id'] == '$ID'))")
[ "$served" -ge $((2 * total)) ] || fail "node 0 served $served bytes to peers for 2 x $total"
LARDER_SOCKET=$WORK/sock2 "$LARDER" names | grep -q '"name": "ckpt/step-1000"' ||
  fail "names on node 2: $(LARDER_SOCKET=$WORK/sock2 "$LARDER" names)"

# 2. a name never published: a clear error after the timeout
start=$(date +%s%N)
expect_error 1 "no publication named ckpt/never" \
  env LARDER_SOCKET="$WORK/sock1" "$LARDER" consume ckpt/never out-never --timeout 0.5
elapsed=$((($(date +%s%N) - start) / 1000000))
[ "$elapsed" -ge 450 ] && [ "$elapsed" -lt 10000 ] || fail "a 0.5 s wait took $elapsed ms"
expect_error 2 "publication name" env LARDER_SOCKET="$WORK/sock1" "$LARDER" consume '../etc' x
expect_error 2 "publication name" env LARDER_SOCKET="$WORK/sock0" "$LARDER" publish ckpt 'a b'

# 3. node 2 restarted after the publication: it asks its peers for the name;
# now with --allow (the origin only): the index it keeps in its cache is
# allowed with it
kill "${pids[2]}"
wait "${pids[2]}" 2>/dev/null || true
start_daemon 2 --allow "$WORK/origin"
LARDER_SOCKET=$WORK/sock2 "$LARDER" consume ckpt/step-1000 out2b --timeout 10 >consume2b.txt 2>&1 ||
  fail "consume after a restart: $(cat consume2b.txt); $(tail -3 daemon2.log)"
same_tree ckpt out2b

# 4. --write-through: the files outlive node 0; without it, a clear error
make_checkpoint ckpt2
make_checkpoint ckpt3
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish ckpt2 ckpt/step-2000 --write-through "file://$WORK/origin/step-2000" >publish2.txt ||
  fail "publish --write-through: $(cat publish2.txt)"
grep -q "written through to $WORK/origin/step-2000/index.larder" publish2.txt || fail "$(cat publish2.txt)"
diff -r ckpt2 origin/step-2000 || fail "the origin's copy (index included) differs"
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish ckpt3 ckpt/step-3000 >publish3.txt || fail "$(cat publish3.txt)"
make_checkpoint ckpt4
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish ckpt4 ckpt/step-1500 >publish4.txt || fail "$(cat publish4.txt)"
# every member has heard of both before the producer goes
for n in 1 2; do
  for _ in $(seq 100); do
    LARDER_SOCKET=$WORK/sock$n "$LARDER" names | grep -q 'step-1500' && break
    sleep 0.1
  done
done
# while the producer lives, a written-through publication is still read from it
ID2=$("$LARDER" inspect ckpt2/index.larder --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
LARDER_SOCKET=$WORK/sock1 "$LARDER" consume ckpt/step-2000 out2000 >consume2000.txt 2>&1 ||
  fail "consume of the written-through publication: $(cat consume2000.txt)"
same_tree ckpt2 out2000
o1=$(stat_of 1 "$ID2" origin_bytes) p1=$(stat_of 1 "$ID2" peer_bytes)
[ "$o1" -eq 0 ] && [ "$p1" -ge "$total" ] || fail "node 1 read $o1 origin and $p1 peer bytes of step-2000"
kill -9 "${pids[0]}"
wait "${pids[0]}" 2>/dev/null || true
LARDER_SOCKET=$WORK/sock2 "$LARDER" consume ckpt/step-2000 out3 --timeout 10 >consume3.txt 2>&1 ||
  fail "consume from the origin: $(cat consume3.txt); $(tail -3 daemon2.log)"
same_tree ckpt2 out3
o2=$(stat_of 2 "$ID2" origin_bytes)
[ "$o2" -ge "$total" ] || fail "node 2 read $o2 bytes of the origin copy for $total"
expect_error 1 "its producer 127.0.0.1:$base holds the only copy" \
  env LARDER_SOCKET="$WORK/sock1" "$LARDER" consume ckpt/step-3000 out4 --timeout 5
echo "producer gone, no origin: $(cat "$WORK/err.txt")"
grep -q "step-3000 was published without --write-through: its producer 127.0.0.1:$base, which holds the only copy, did not serve it" "$WORK/err.txt" ||
  fail "node 1's daemon did not name the producer"
# the failed copy left nothing behind: no file half written, no temporary
left=$(find out4 -type f 2>/dev/null | head -3)
[ -z "$left" ] || fail "a failed consume left files behind: $left"
# the producer restarted (after a crash) still owns and serves what it
# published, without asking anyone: nobody has read step-1500 yet
start_daemon 0
LARDER_SOCKET=$WORK/sock0 "$LARDER" names | grep -q '"name": "ckpt/step-1500"' ||
  fail "the restarted producer forgot its names: $(LARDER_SOCKET=$WORK/sock0 "$LARDER" names)"
LARDER_SOCKET=$WORK/sock1 "$LARDER" consume ckpt/step-1500 out5 --timeout 10 >consume5.txt 2>&1 ||
  fail "consume from the restarted producer: $(cat consume5.txt); $(tail -3 daemon0.log)"
same_tree ckpt4 out5
ID4=$("$LARDER" inspect ckpt4/index.larder --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
o1=$(stat_of 1 "$ID4" origin_bytes) p1=$(stat_of 1 "$ID4" peer_bytes)
[ "$o1" -eq 0 ] && [ "$p1" -ge "$total" ] || fail "after the restart node 1 read $o1 origin and $p1 peer bytes"

# 5. hostile frames, from a local client and from peers
/usr/bin/python3 - "$WORK/sock1" "$base" "$WORK/ckpt/index.larder" <<'PY' || fail "hostile frames: $(tail -3 daemon1.log)"
import sys, larder_wire as w
sock, port, index = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
secret = b"publish-secret"
producer = b"127.0.0.1:%d" % port

def refused(client, kind, payload, needle):
    w.expect_refused(client, kind, payload, needle, "accepted a hostile frame")

def local():
    c = w.Client(sock, 1)
    c.greet()
    return c

def peer():
    c = w.Client(("127.0.0.1", port + 1), 2, secret=secret)
    c.greet()
    return c

refused(local(), w.PUBLISH, w.publish_payload(b"x" * 129, index), "publication name of 129 bytes")
refused(local(), w.PUBLISH, w.publish_payload(b"bad\x07name", index), "byte 0x07")
refused(local(), w.PUBLISH, w.publish_payload(b"a/../b", index), "'..' component")
refused(local(), w.PUBLISH, w.publish_payload(b"ok", b"relative/index"), "not absolute")
refused(local(), w.ANNOUNCE, w.publication_payload(b"ok", producer, index), "peer daemons only")
# a RESOLVE over its frame limit (8 + 128) is cut off at the header: closed, unanswered
c = local()
c.sock.sendall(w.frame(w.RESOLVE, w.resolve_payload(b"x" * 129)))
assert c.sock.recv(1) == b"", "an overlong RESOLVE was answered"
refused(local(), w.RESOLVE, w.resolve_payload(b"bad\x7fname", 10), "byte 0x7f")
refused(peer(), w.ANNOUNCE, w.publication_payload(b"x" * 129, producer, index), "publication name of 129")
refused(peer(), w.ANNOUNCE, w.publication_payload(b"bad\nname", producer, index), "byte 0x0a")
refused(peer(), w.ANNOUNCE, w.publication_payload(b"ok", b"10.9.9.9:1", index), "not a member")
refused(peer(), w.ANNOUNCE, w.publication_payload(b"ok", producer, b"/x\x01y"), "control character")
refused(peer(), w.ANNOUNCE, w.publication_payload(b"ok", producer, index, index=b"xx"), "lengths")
refused(peer(), w.PUBLISH, w.publish_payload(b"ok", index), "client of this node only")
# a peer that has not proven the secret is refused before anything is read
c = w.Client(("127.0.0.1", port + 1), 2, secret=None)
c.sock.sendall(w.hello(2, b"\0" * 32))
kind, _, _ = w.recv_frame(c.sock)
assert kind == w.WELCOME, kind
refused(c, w.ANNOUNCE, w.publication_payload(b"stolen", producer, index), "prove the cluster secret")
# a peer with the wrong secret does not get that far
c = w.Client(("127.0.0.1", port + 1), 2, secret=b"wrong")
c.greet()
refused(c, w.ANNOUNCE, w.publication_payload(b"stolen", producer, index), "wrong cluster secret")
PY
LARDER_SOCKET=$WORK/sock1 "$LARDER" names | grep -q 'stolen' && fail "an unproven ANNOUNCE was registered"
for n in 1 2; do kill -0 "${pids[$n]}" || fail "daemon $n died"; done
# stopped cleanly: under ASan, a leak or a bad access shows in their logs
for n in 0 1 2; do kill "${pids[$n]}" 2>/dev/null || true; done
for n in 0 1 2; do wait "${pids[$n]}" 2>/dev/null || true; done
! grep -l "Sanitizer" daemon*.log || fail "a sanitizer report: $(grep -h -A20 Sanitizer daemon*.log | head -60)"
echo "publish and consume: ok"
