# A reader's pooled connection that its daemon closes while the READ is on
# its way (EOF before any answer byte) is not the daemon failing: the
# reader sends the READ again, once, on a fresh connection, and keeps
# using the daemon.  The daemon here is a Python stand-in, written from
# docs/protocol.md, that answers the first READ of every connection from
# the shard files and closes the connection on the second one unanswered.
# A read counts as the daemon's when the reader's own origin_requests did
# not move.
source "$(dirname "$0")/lib.sh"
LIB=${LARDER%/larder}/liblarder.so
[ -e "$LIB" ] || skip "liblarder.so not built"
export PYTHONPATH=$TESTS/tools
make_tree a 12
"$LARDER" pack a -o origin/A --shard-size 40K >/dev/null
INDEX=$WORK/origin/A/index.larder
cat >stand_in.py <<'PY'
import os, socket, struct, sys, threading, larder_wire as w
path, shards, log = sys.argv[1:]
listener = socket.socket(socket.AF_UNIX)
listener.bind(path)
listener.listen(16)
def session(conn):
    reads = 0
    try:
        while True:
            kind, request, payload = w.recv_frame(conn)
            if kind == w.HELLO:
                conn.sendall(w.frame(w.WELCOME, bytes(16) + struct.pack("<I", 0) + bytes(64) +
                                     struct.pack("<I", 8) + b"stand-in", request))
            elif kind == w.OPEN:
                conn.sendall(w.frame(w.OPENED, struct.pack("<QQI", 1, 2, 3), request))
            elif kind == w.READ:
                reads += 1
                if reads == 2:
                    with open(log, "a") as f:
                        f.write("closed on a READ\n")
                    return  # closed with the READ unanswered
                _, _, shard, _, offset, length = struct.unpack("<QQIB3xQQ", payload)
                with open(os.path.join(shards, "shard-%06d.tar" % shard), "rb") as f:
                    f.seek(offset)
                    conn.sendall(w.frame(w.DATA, f.read(length), request))
                with open(log, "a") as f:
                    f.write("answered a READ\n")
    except EOFError:
        pass
    finally:
        conn.close()
while True:
    conn, _ = listener.accept()
    threading.Thread(target=session, args=(conn,), daemon=True).start()
PY
/usr/bin/python3 stand_in.py "$WORK/sock" "$WORK/origin/A" "$WORK/stand_in.log" &
stand_in=$!
cleanup_hooks+=("kill $stand_in 2>/dev/null")
for _ in $(seq 100); do [ -S sock ] && break; sleep 0.05; done
env "${sanitized_python[@]}" LARDER_SOCKET=$WORK/sock LARDER_LIBRARY=$LIB /usr/bin/python3 - "$INDEX" "$TESTS/../python" "$WORK/a" <<'PY' ||
import os, sys
sys.path.insert(0, sys.argv[2])
import larder
ds = larder.Dataset(sys.argv[1], cache="")
for i in range(6):
    before = ds.stats()["origin_requests"]
    data = ds.read(i)
    key = ds.key(i)
    assert open(os.path.join(sys.argv[3], key + ".jpg"), "rb").read() in data, key
    assert ds.stats()["origin_requests"] == before, "read %d went to the origin" % i
print("6 reads, each served by the daemon, every second one after a retry")
PY
  fail "reader: $(cat stand_in.log)"
closed=$(grep -c "closed on a READ" stand_in.log || true)
answered=$(grep -c "answered a READ" stand_in.log || true)
echo "stand-in: $answered READs answered, $closed connections closed on a READ"
[ "$closed" -ge 2 ] && [ "$answered" -eq 6 ] || fail "no retries happened: $(cat stand_in.log)"
