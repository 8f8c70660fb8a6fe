# Transforms through a real larderd (docs/transforms.md): its options
# checked at start (a bad limit, a transform directory with a file that is
# not a transform: the daemon names it and does not start), a transformed
# read counted in `larder stat` and the Prometheus metrics, and hostile
# TRANSFORM frames on the socket (a spec longer than the frame, a
# malformed spec, a spec of 255 bytes, a sample past the end, a dataset
# not opened): the connection is closed or answered with an error, and the
# daemon goes on serving.  A sample whose bytes fail the index's checksum
# answers an error that `larder stat` counts.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
/usr/bin/python3 -c "import numpy, PIL" 2>/dev/null || skip "numpy and PIL for /usr/bin/python3"
unset LARDER_CACHE LARDER_SOCKET
export PYTHONPATH=$TESTS/../python LARDER_LIBRARY=$(dirname "$LARDER")/liblarder.so

mkdir -p src
/usr/bin/python3 - <<'PY'
import numpy as np
from PIL import Image
for i in range(4):
    a = (np.arange(60 * 80 * 3) * (i + 3) % 256).astype(np.uint8).reshape(60, 80, 3)
    Image.fromarray(a).save(f"src/s{i}.jpg", quality=90)
PY
"$LARDER" pack src -o ds >/dev/null
# another dataset (not the same id: a daemon keeps one entry per id) with
# every JPEG's bytes changed in its shard after packing
mkdir -p src2 && cp src/*.jpg src2/ && echo other >src2/s9.txt
"$LARDER" pack src2 -o bad >/dev/null
/usr/bin/python3 - <<'PY'
import glob
shard = glob.glob("bad/*.tar")[0]
data = bytearray(open(shard, "rb").read())
for name in glob.glob("src/*.jpg"):
    jpeg = open(name, "rb").read()
    at = data.find(jpeg)
    assert at >= 0, name
    data[at + len(jpeg) // 2] ^= 0xFF
open(shard, "wb").write(data)
PY

# options: checked before anything starts
expect_error 2 "bad --transform-cpu-limit '101'" "$LARDERD" --cache c --socket s \
  --transform-cpu-limit 101
expect_error 2 "bad --transform-jobs '0'" "$LARDERD" --cache c --socket s --transform-jobs 0
mkdir -p plugins
echo "not a shared object" >plugins/junk.so
expect_error 2 "plugins/junk.so" "$LARDERD" --cache c --socket s --transform-dir plugins

reserve_ports 1
mport=$port_base
# --transform-cpu-limit 100: other load on this machine must not send the work back
"$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" --metrics "127.0.0.1:$mport" \
  --transform-cpu-limit 100 2>>"$WORK/daemon.log" &
daemon=$!
cleanup_hooks+=("kill $daemon 2>/dev/null; wait $daemon 2>/dev/null")
for _ in $(seq 100); do
  [ -S "$WORK/sock" ] && "$LARDER" stat --socket "$WORK/sock" >/dev/null 2>&1 && break
  sleep 0.05
done

LARDER_SOCKET=$WORK/sock LARDER_TRANSFORM_BUDGET_MS=1000 env "${sanitized_python[@]}" \
  /usr/bin/python3 - "$WORK/ds/index.larder" <<'PY'
import sys
import larder
ds = larder.Dataset(sys.argv[1], cache="")
s = ds.get(2, transform="jpeg_decode_resize:16")
assert s["__placement__"] == "daemon" and s["jpg"].shape == (16, 16, 3), s
assert ds.get(2, transform="jpeg_decode_resize:16")["__placement__"] == "cached"
PY

"$LARDER" stat --socket "$WORK/sock" >stat.txt
grep -q "transforms      run by the daemon" stat.txt || fail "stat: $(cat stat.txt)"
grep -q "1 transformed, 1 cached" stat.txt || fail "stat: $(cat stat.txt)"
curl -sf "http://127.0.0.1:$mport/metrics" >metrics.txt || fail "no metrics"
grep -q 'larder_transform_answers_total{how="transformed"} 1' metrics.txt ||
  fail "metrics: $(grep transform metrics.txt)"
grep -q 'larder_transform_at_reader 0' metrics.txt || fail "metrics: $(grep transform metrics.txt)"

# hostile frames, each on a connection of its own, as a local reader would send them
/usr/bin/python3 - "$WORK/sock" "$WORK/ds/index.larder" <<'PY'
import os, socket, struct, sys

def frame(kind, payload, request=1):
    return struct.pack("<IBBHIIQ", 0x5244524C, 2, kind, 0, len(payload), 0, request) + payload

def connect():
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.settimeout(5)
    s.sendall(frame(1, struct.pack("<II", 1, 0) + os.urandom(32)))  # HELLO as a reader
    head = s.recv(24, socket.MSG_WAITALL)
    s.recv(struct.unpack("<I", head[8:12])[0], socket.MSG_WAITALL)   # WELCOME
    return s

def answer(s):
    head = s.recv(24, socket.MSG_WAITALL)
    if len(head) < 24:
        return None, b""
    n = struct.unpack("<I", head[8:12])[0]
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        if not chunk:
            break
        body += chunk
    return head[5], body

def transform(ids, sample, spec, spec_length=None, flags=0):
    spec = spec.encode()
    n = len(spec) if spec_length is None else spec_length
    return frame(17, ids + struct.pack("<QBBHIII", sample, 0, flags, n, 1, 0, 0) + spec)

s = connect()
s.sendall(frame(8, sys.argv[2].encode()))  # OPEN
kind, body = answer(s)
assert kind == 9, (kind, body)  # OPENED
ids = body[:16]

# errors on a connection that stays: a sample past the end, a dataset not opened
s.sendall(transform(ids, 99, "jpeg_decode_resize:16"))
kind, body = answer(s)
assert kind == 5 and b"99" in body, (kind, body)
s.sendall(transform(b"\x01" * 16, 0, "jpeg_decode_resize:16", flags=0))
kind, body = answer(s)
assert kind == 5 and b"not opened" in body, (kind, body)
# a malformed spec, an unknown transform: raw bytes, for the reader to judge
for spec in ("Bad Spec!", "no_such_transform:1", "x" * 255):
    s.sendall(transform(ids, 0, spec))
    kind, body = answer(s)
    assert kind == 18 and struct.unpack("<I", body[:4])[0] & 1, (spec, kind, body[:8])
# a spec length past the frame, a reserved flag: the connection is closed
for bad in (transform(ids, 0, "zstd_decompress", spec_length=200),
            transform(ids, 0, "zstd_decompress", flags=0x80)):
    t = connect()
    t.sendall(frame(8, sys.argv[2].encode()))
    answer(t)
    t.sendall(bad)
    kind, _ = answer(t)
    assert kind is None, kind
PY

# a sample whose bytes fail their checksum: an ERROR naming it, counted
/usr/bin/python3 - "$WORK/sock" "$WORK/bad/index.larder" <<'PY'
import os, socket, struct, sys
def frame(kind, payload, request=1):
    return struct.pack("<IBBHIIQ", 0x5244524C, 2, kind, 0, len(payload), 0, request) + payload
def answer(s):
    head = s.recv(24, socket.MSG_WAITALL)
    body = s.recv(struct.unpack("<I", head[8:12])[0], socket.MSG_WAITALL)
    return head[5], body
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(5)
s.sendall(frame(1, struct.pack("<II", 1, 0) + os.urandom(32)))
answer(s)
s.sendall(frame(8, sys.argv[2].encode()))
kind, body = answer(s)
assert kind == 9, (kind, body)
spec = b"jpeg_decode_resize:16"
s.sendall(frame(17, body[:16] + struct.pack("<QBBHIII", 1, 0, 0, len(spec), 1, 0, 0) + spec))
kind, body = answer(s)
assert kind == 5 and b"checksum" in body, (kind, body)
PY
"$LARDER" stat --socket "$WORK/sock" --json >stat.json
grep -q '"errors": 1[,}]' stat.json || fail "the failed read is not counted: $(cat stat.json)"

"$LARDER" stat --socket "$WORK/sock" >/dev/null || fail "the daemon stopped answering"
kill -0 "$daemon" || fail "the daemon died: $(cat "$WORK/daemon.log")"
echo ok
