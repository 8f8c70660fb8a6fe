# `larder publish DIR NAME --replace` (a checkpoint's "latest" published
# again and again) on three larderd daemons over loopback with a secret:
# 1. v1 published as latest on node 0; a reader on node 1 opens
#    latest/weights.bin and reads its first half; v2 (another directory,
#    the same file names, other bytes) published as latest without
#    --replace is refused (EEXIST), with --replace accepted; the reader then
#    reads the rest: every byte is v1's (the file it opened, never a mix);
# 2. new opens get v2: consumers on nodes 1 and 2 (once the announcement
#    reached them: `larder names` shows v2's dataset) read v2 byte for byte;
# 3. a third version (generation 2) replaces v2 everywhere too; the
#    producer restarted still names the last one (published/mine: the
#    later line stands);
# 4. refused: republishing a published directory rewritten in place (its
#    readers would read a mix), --replace on consume, a PUBLISH frame with an
#    unknown flag; ANNOUNCE frames of a stale generation change nothing;
# 5. another local user may not replace a name published here, its
#    publisher may;
# 6. the same after a daemon restart (published/mine keeps the publisher's
#    uid); a line without one (written before it was kept) has no known
#    publisher: only the daemon's user or root may replace that name.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools:$TESTS/../python LARDER_LIBRARY=${LARDER%/larder}/liblarder.so
cluster_init replace-secret
start_daemon 0
start_daemon 1
start_daemon 2

version() { # dir: a checkpoint of its own bytes under the same names
  mkdir -p "$1/sub"
  head -c 3000001 /dev/urandom >"$1/weights.bin"
  head -c 70000 /dev/urandom >"$1/sub/optim.bin"
  echo "{\"dir\": \"$1\"}" >"$1/config.json"
}
version v1
version v2
version v3
id_of() { "$LARDER" inspect "$1/index.larder" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])'; }
named_id() { # node: the dataset id node's daemon has for latest
  "$LARDER" names --socket "$WORK/sock$1" | /usr/bin/python3 -c '
import json, sys
print([n["dataset_id"] for n in json.load(sys.stdin)["names"] if n["name"] == "latest"][0])' 2>/dev/null
}
until_named() { # node id: wait (10 s at most) until node names latest as that dataset
  for _ in $(seq 200); do [ "$(named_id "$1")" = "$2" ] && return 0; sleep 0.05; done
  fail "node $1 names latest as $(named_id "$1"), not $2"
}
same_tree() { # dir dest
  for f in weights.bin sub/optim.bin config.json; do cmp "$1/$f" "$2/$f" || fail "$2/$f is not $1's"; done
}

# 1. a reader of v1 across the replacement
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish v1 latest >pub1.txt || fail "publish v1: $(cat pub1.txt)"
ID1=$(id_of v1)
until_named 1 "$ID1"
env "${sanitized_python[@]}" LARDER_SOCKET="$WORK/sock1" /usr/bin/python3 - "$WORK" <<'PY' >reader.txt 2>&1 &
import os, sys, time
import larder
work = sys.argv[1]
with larder.open("latest", "weights.bin") as f:
    first = f.read(1500000)
    open(os.path.join(work, "half-read"), "w").close()
    for _ in range(600):  # until v2 replaced it
        if os.path.exists(os.path.join(work, "replaced")):
            break
        time.sleep(0.05)
    else:
        sys.exit("never told of the replacement")
    rest = f.read()
want = open(os.path.join(work, "v1", "weights.bin"), "rb").read()
got = first + rest
assert len(got) == len(want), (len(got), len(want))
assert got == want, "the reader of v1 read other bytes after the replacement"
print("v1 reader: all %d bytes v1's" % len(got))
PY
reader=$!
for _ in $(seq 300); do [ -e half-read ] && break; sleep 0.05; done
[ -e half-read ] || fail "the reader did not start: $(cat reader.txt)"
expect_error 1 "already published" env LARDER_SOCKET="$WORK/sock0" "$LARDER" publish v2 latest
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish v2 latest --replace >pub2.txt ||
  fail "publish v2 --replace: $(cat pub2.txt) $(tail -3 daemon0.log)"
ID2=$(id_of v2)
grep -q "dataset $ID2" pub2.txt || fail "publish --replace said: $(cat pub2.txt)"
touch replaced
wait $reader || fail "the reader of v1: $(cat reader.txt)"
cat reader.txt

# 2. new opens get v2, on every node
for n in 1 2; do
  until_named $n "$ID2"
  LARDER_SOCKET=$WORK/sock$n "$LARDER" consume latest out2-$n >consume2-$n.txt 2>&1 ||
    fail "consume on node $n: $(cat consume2-$n.txt)"
  same_tree v2 out2-$n
done

# 3. a third version, then the producer restarted
LARDER_SOCKET=$WORK/sock0 "$LARDER" publish v3 latest --replace >pub3.txt || fail "publish v3: $(cat pub3.txt)"
ID3=$(id_of v3)
until_named 2 "$ID3"
LARDER_SOCKET=$WORK/sock2 "$LARDER" consume latest out3 >consume3.txt 2>&1 || fail "consume v3: $(cat consume3.txt)"
same_tree v3 out3
grep -c "^latest	" cache0/published/mine | grep -qx 3 || fail "published/mine: $(cat cache0/published/mine)"
kill "${pids[0]}" && wait "${pids[0]}" 2>/dev/null
start_daemon 0
[ "$(named_id 0)" = "$ID3" ] || fail "the restarted producer names latest as $(named_id 0), not v3's $ID3"
LARDER_SOCKET=$WORK/sock1 "$LARDER" consume latest out3b >consume3b.txt 2>&1 || fail "consume v3 on node 1: $(cat consume3b.txt)"
same_tree v3 out3b

# 4. refused
head -c 3000001 /dev/urandom >v3/weights.bin # v3 rewritten in place and indexed again
expect_error 1 "rewritten" env LARDER_SOCKET="$WORK/sock0" "$LARDER" publish v3 latest --replace
expect_error 2 "publish's" "$LARDER" consume latest --replace --socket "$WORK/sock1"
/usr/bin/python3 - "$WORK/sock0" "$base" "$ID2" <<'PY' || fail "hostile frames: $(tail -3 daemon0.log)"
import struct, sys, larder_wire as w
sock, port, id2 = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = w.Client(sock, 1)
c.greet()
# PUBLISH with flag 2 (none): refused and closed
name, index = b"latest", b"/nonexistent/index.larder"
payload = struct.pack("<IIII", len(name), len(index), 0, 2) + name + index
c.sock.sendall(w.frame(w.PUBLISH, payload))
kind, _, _ = w.recv_frame(c.sock)
assert kind == w.ERROR, kind
# an ANNOUNCE of latest at generation 1 (stale: the name is at 2), from a
# member that proved the secret: acknowledged, and nothing changes
peer = w.Client(("127.0.0.1", port + 1), 2, secret=b"replace-secret")
peer.greet()
producer = b"127.0.0.1:%d" % port
p = w.publication_payload(b"latest", producer, b"/elsewhere/index.larder", id_low=7, id_high=8)
p = p[:16] + struct.pack("<I", 2) + p[20:] + struct.pack("<Q", 1)  # flag GENERATION, generation 1
kind, _ = peer.request(w.ANNOUNCE, p, 5)
assert kind == w.RESOLVED, kind
# generation 0 with the flag is no generation: refused
q = p[:-8] + struct.pack("<Q", 0)
try:
    peer2 = w.Client(("127.0.0.1", port + 1), 2, secret=b"replace-secret")
    peer2.greet()
    peer2.request(w.ANNOUNCE, q, 6)
    raise SystemExit("an ANNOUNCE of generation 0 with the flag was taken")
except w.Refused as e:
    print("refused:", e.message)
PY
[ "$(named_id 1)" = "$ID3" ] || fail "a stale ANNOUNCE changed node 1's latest to $(named_id 1)"
for p in "${pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done

# 5. another local user may not replace a name published here: a daemon
# that lets uid 65534 in (--allow-uid, --allow for its files); root
# publishes "shared", uid 65534 publishes its own directory as "shared"
# with --replace: refused, the name still root's; its own name it may
# replace (the same user)
if nobody_run true 2>/dev/null; then
  nobody_init
  start9() {
    rm -f "$WORK/sock9"
    "$LARDERD" --cache "$WORK/cache9" --socket "$WORK/sock9" --allow-uid 65534 --allow "$WORK" \
      2>>"$WORK/daemon9.log" &
    pid9=$!
    pids+=($pid9)
    for _ in $(seq 100); do [ -S "$WORK/sock9" ] && break; sleep 0.05; done
    chmod 666 "$WORK/sock9"
  }
  start9
  LARDER_SOCKET=$WORK/sock9 "$LARDER" publish v1 shared >pub9.txt || fail "root's publish: $(cat pub9.txt)"
  version v4
  version v5
  chown -R 65534:65534 v4 v5
  nobody env LARDER_SOCKET="$WORK/sock9" "$nobody_larder" publish v4 shared --replace >pub10.txt 2>&1 &&
    fail "uid 65534 replaced root's name: $(cat pub10.txt)"
  grep -q "published here by another user" pub10.txt || fail "no clear refusal: $(cat pub10.txt)"
  shared=$("$LARDER" names --socket "$WORK/sock9" | /usr/bin/python3 -c '
import json, sys
print([n["dataset_id"] for n in json.load(sys.stdin)["names"] if n["name"] == "shared"][0])')
  [ "$shared" = "$(id_of v1)" ] || fail "root's shared is now $shared"
  nobody env LARDER_SOCKET="$WORK/sock9" "$nobody_larder" publish v4 theirs >pub11.txt 2>&1 ||
    fail "uid 65534's own publish: $(cat pub11.txt)"
  nobody env LARDER_SOCKET="$WORK/sock9" "$nobody_larder" publish v5 theirs --replace >pub12.txt 2>&1 ||
    fail "uid 65534 replacing its own name: $(cat pub12.txt)"
  echo "another user's --replace refused: $(cat pub10.txt)"
  # 6. after a restart the publisher is still known (published/mine keeps
  # its uid): uid 65534 replaces its own "theirs" again, not root's
  # "shared"; a line of before the uid was kept ("legacy", no uid field)
  # has no known publisher: refused to uid 65534, root may
  grep -q "^theirs	.*	1	65534\$" cache9/published/mine || fail "no uid kept: $(cat cache9/published/mine)"
  printf 'legacy\t%s\t%s\t-\n' "$(id_of v4)" "$WORK/v4/index.larder" >>cache9/published/mine
  kill "$pid9" && wait "$pid9" 2>/dev/null || true
  start9
  version v6
  chown -R 65534:65534 v6
  nobody env LARDER_SOCKET="$WORK/sock9" "$nobody_larder" publish v6 theirs --replace >pub13.txt 2>&1 ||
    fail "uid 65534 replacing its own name after a restart: $(cat pub13.txt) $(tail -3 daemon9.log)"
  grep -q "dataset $(id_of v6)" pub13.txt || fail "the replacement after a restart said: $(cat pub13.txt)"
  nobody env LARDER_SOCKET="$WORK/sock9" "$nobody_larder" publish v6 shared --replace >pub14.txt 2>&1 &&
    fail "uid 65534 replaced root's name after a restart: $(cat pub14.txt)"
  grep -q "published here by another user" pub14.txt || fail "no clear refusal: $(cat pub14.txt)"
  nobody env LARDER_SOCKET="$WORK/sock9" "$nobody_larder" publish v5 legacy --replace >pub15.txt 2>&1 &&
    fail "uid 65534 replaced a name of unknown publisher: $(cat pub15.txt)"
  grep -q "published here by another user" pub15.txt || fail "no clear refusal: $(cat pub15.txt)"
  LARDER_SOCKET=$WORK/sock9 "$LARDER" publish v1 legacy --replace >pub16.txt 2>&1 ||
    fail "root replacing a name of unknown publisher: $(cat pub16.txt)"
  echo "after a restart: the publisher's own --replace taken, another's refused"
else
  echo "setpriv cannot switch to uid 65534 here: the other-user step skipped"
fi
echo "publish --replace: ok"
