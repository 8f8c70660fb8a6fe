# Replaced publications are closed once no one reads them (issue 12: every
# `larder publish --replace` left the old generation open in every daemon
# that had opened it, and a job republishing "latest" reached the
# daemon's limit of open datasets, MAX_DATASETS = 64), on three larderd
# daemons over loopback with a secret:
# 1. "retire/latest" is published 70 times (v0, then 69 --replace), each
#    generation learned by nodes 1 and 2 before the next (so each daemon
#    opened all 70: more than 64); readers hold v3 and v40 open on node 1
#    (half of weights.bin read) and v20 on node 0;
# 2. node 2, with no reader, has closed all 69 replaced generations and
#    keeps v69 alone open (STAT: open_datasets 1, closed_datasets 69);
#    node 1 keeps its two held ones besides v69 (3 open, 67 closed); node
#    0 (the producer) closed all but v69, v20 and what node 1's held
#    readers borrow from it;
# 3. the held readers read the rest: every byte is their generation's
#    (read across 60-odd replacements and closings: never a mix); once
#    they close, nodes 1 and 0 close those too (1 open, 69 closed), and
#    what node 1 had cached of them is evicted;
# 4. v69 consumed on node 2 byte for byte;
# 5. 10 more generations published with no wait between them: every node
#    ends with one dataset open (those a member was still fetching when
#    the next came are closed too); no daemon died.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export PYTHONPATH=$TESTS/tools:$TESTS/../python LARDER_LIBRARY=${LARDER%/larder}/liblarder.so
cluster_init retire-secret
start_daemon 0
start_daemon 1
start_daemon 2
GENERATIONS=70 # above MAX_DATASETS (src/larderd/larderd.h)

id_of() { "$LARDER" inspect "$1/index.larder" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])'; }
named_id() { # node: the dataset id node's daemon has for retire/latest
  "$LARDER" names --socket "$WORK/sock$1" | /usr/bin/python3 -c '
import json, sys
print(([n["dataset_id"] for n in json.load(sys.stdin)["names"] if n["name"] == "retire/latest"] + [""])[0])' 2>/dev/null
}
until_named() { # node id
  for _ in $(seq 200); do [ "$(named_id "$1")" = "$2" ] && return 0; sleep 0.05; done
  fail "node $1 names retire/latest as $(named_id "$1"), not $2: $(tail -3 "daemon$1.log")"
}
stat_of() { # node key: a number from the node daemon's STAT
  "$LARDER" stat --socket "$WORK/sock$1" --json | /usr/bin/python3 -c '
import json, sys
print(json.load(sys.stdin)[sys.argv[1]])' "$2"
}
until_counts() { # node open closed: wait (10 s at most) for the daemon's counts
  for _ in $(seq 200); do
    [ "$(stat_of "$1" open_datasets) $(stat_of "$1" closed_datasets)" = "$2 $3" ] && return 0
    sleep 0.05
  done
  fail "node $1: $(stat_of "$1" open_datasets) open, $(stat_of "$1" closed_datasets) closed; want $2 and $3"
}

# A reader on a node (its socket): holds generation K open when hold-NODE-K
# appears (reads half of weights.bin, then says held-NODE-K), reads the rest
# of each once `finish` appears, compares with vK's file, and closes them.
reader() { # node generations...
  local node=$1
  shift
  env "${sanitized_python[@]}" LARDER_SOCKET="$WORK/sock$node" /usr/bin/python3 - "$WORK" "$node" "$@" <<'PY'
import os, sys, time
import larder
work, node, wanted = sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3:]]
held = {}
def wait_for(path):
    for _ in range(1200):
        if os.path.exists(path):
            return
        time.sleep(0.05)
    sys.exit("never told: %s" % path)
for k in wanted:
    wait_for(os.path.join(work, "hold-%s-%d" % (node, k)))
    f = larder.open("retire/latest", "weights.bin")
    held[k] = (f, f.read(100000))
    open(os.path.join(work, "held-%s-%d" % (node, k)), "w").close()
wait_for(os.path.join(work, "finish"))
for k, (f, first) in held.items():
    got = first + f.read()
    f.close()
    want = open(os.path.join(work, "v%d" % k, "weights.bin"), "rb").read()
    assert len(got) == len(want), (k, len(got), len(want))
    assert got == want, "node %s: the reader of v%d read other bytes" % (node, k)
    print("node %s: v%d read whole, all %d bytes its own" % (node, k, len(got)))
PY
}
reader 1 3 40 >reader1.txt 2>&1 &
reader1=$!
reader 0 20 >reader0.txt 2>&1 &
reader0=$!

# 1. 70 generations, each learned everywhere before the next
for k in $(seq 0 $((GENERATIONS - 1))); do
  mkdir -p v$k
  head -c 200001 /dev/urandom >v$k/weights.bin
  echo "generation $k" >v$k/note.txt
  replace=$([ "$k" -gt 0 ] && echo --replace || true)
  LARDER_SOCKET=$WORK/sock0 "$LARDER" publish v$k retire/latest $replace >pub.txt 2>&1 ||
    fail "publish v$k: $(cat pub.txt) $(tail -3 daemon0.log)"
  id=$(id_of v$k)
  until_named 1 "$id"
  until_named 2 "$id"
  for node in 0 1; do
    if grep -qx "$node $k" <<<$'1 3\n1 40\n0 20'; then
      touch hold-$node-$k
      for _ in $(seq 200); do [ -e held-$node-$k ] && break; sleep 0.05; done
      [ -e held-$node-$k ] || fail "node $node's reader did not open v$k: $(cat reader$node.txt)"
    fi
  done
done
echo "published $GENERATIONS generations of retire/latest"

# 2. what each daemon keeps open
until_counts 2 1 $((GENERATIONS - 1))
until_counts 1 3 $((GENERATIONS - 3))
# node 0 closes on its own sweep too: waited for as the others are (10 s at most)
for _ in $(seq 200); do
  open0=$(stat_of 0 open_datasets) closed0=$(stat_of 0 closed_datasets)
  [ $((open0 + closed0)) -eq $GENERATIONS ] && [ "$open0" -ge 2 ] && [ "$open0" -le 4 ] && break
  sleep 0.05
done
[ $((open0 + closed0)) -eq $GENERATIONS ] && [ "$open0" -ge 2 ] && [ "$open0" -le 4 ] ||
  fail "node 0: $open0 open, $closed0 closed (want v69, v20 and at most node 1's two held open)"
echo "open/closed: node 2 1/$((GENERATIONS - 1)), node 1 3/$((GENERATIONS - 3)), node 0 $open0/$closed0"

# 3. the held readers read on, then close
touch finish
wait $reader1 || fail "node 1's reader: $(cat reader1.txt)"
wait $reader0 || fail "node 0's reader: $(cat reader0.txt)"
cat reader1.txt reader0.txt
until_counts 1 1 $((GENERATIONS - 1))
until_counts 0 1 $((GENERATIONS - 1))
# what node 1's readers staged of v3 and v40 in its cache was evicted as
# they were closed (nothing else of the node cache is resident but v69's)
resident_of() { # node dataset-id: bytes of it resident in the node's cache (0: none, or no entry)
  "$LARDER" stat --cache "$WORK/cache$1" --json | /usr/bin/python3 -c '
import json, sys
print(sum(d["resident_bytes"] for d in json.load(sys.stdin)["datasets"] if d["dataset_id"] == sys.argv[1]))' "$2"
}
for k in 3 40; do
  [ "$(resident_of 1 "$(id_of v$k)")" = 0 ] ||
    fail "node 1 still holds $(resident_of 1 "$(id_of v$k)") bytes of closed v$k in its cache"
done
grep -Eq "closing .*: [1-9][0-9]* cached blocks evicted" daemon1.log || fail "node 1 evicted nothing as it closed: $(grep closing daemon1.log | tail -3)"

# 4. the last one, everywhere
last=$((GENERATIONS - 1))
LARDER_SOCKET=$WORK/sock2 "$LARDER" consume retire/latest out >consume.txt 2>&1 ||
  fail "consume on node 2: $(cat consume.txt)"
cmp v$last/weights.bin out/weights.bin || fail "node 2 consumed other bytes than v$last's"

# 5. replaced faster than members learn (no wait between): a generation a
# member was still fetching when the next came is closed too; each node
# ends with the last one alone open
for k in $(seq $GENERATIONS $((GENERATIONS + 9))); do
  mkdir -p v$k
  head -c 200001 /dev/urandom >v$k/weights.bin
  LARDER_SOCKET=$WORK/sock0 "$LARDER" publish v$k retire/latest --replace >pub.txt 2>&1 ||
    fail "publish v$k: $(cat pub.txt)"
done
last=$((GENERATIONS + 9))
for node in 0 1 2; do
  until_named $node "$(id_of v$last)"
  for _ in $(seq 200); do [ "$(stat_of $node open_datasets)" = 1 ] && break; sleep 0.05; done
  [ "$(stat_of $node open_datasets)" = 1 ] ||
    fail "node $node keeps $(stat_of $node open_datasets) datasets open after the quick replacements"
done
echo "after 10 quick replacements: closed $(stat_of 0 closed_datasets), $(stat_of 1 closed_datasets), $(stat_of 2 closed_datasets); 1 open on each node"
for p in "${pids[@]}"; do kill -0 "$p" || fail "a daemon died"; done
echo "replaced publications closed: ok"
