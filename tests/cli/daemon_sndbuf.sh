# larderd asks a send buffer of 1 MiB for each local client's connection
# (loop.c, UNIX_SNDBUF), so that an answer of a few hundred KiB goes into
# the socket in one sendfile rather than in pieces with a loop wake-up
# between them; LARDERD_UNIX_SNDBUF=0 leaves the system's default.  The
# expected sizes are the kernel's rule (socket(7): SO_SNDBUF is doubled
# and capped at net.core.wmem_max; the default is net.core.wmem_default),
# read back with ss(8) from the daemon's side of the connection.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
command -v ss >/dev/null || skip "no ss(8) to read a socket's send buffer"
wmem_max=$(cat /proc/sys/net/core/wmem_max) wmem_default=$(cat /proc/sys/net/core/wmem_default)
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')

# start NAME [ENV...]: a fresh daemon on socket NAME
start() {
  local name=$1
  shift
  env "$@" "$LARDERD" --cache "$WORK/cache$name" --socket "$WORK/sock$name" 2>>"$WORK/daemon$name.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$WORK/sock$name" ] && return; sleep 0.05; done
  fail "daemon $name did not start: $(cat "$WORK/daemon$name.log")"
}
# send_buffer NAME: the tb (send buffer) of the daemon's side of a
# connection a client holds open on its socket
send_buffer() {
  local name=$1
  /usr/bin/python3 - "$WORK/sock$name" <<'PY'
import socket, subprocess, sys, time
path = sys.argv[1]
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect(path)
for _ in range(100):  # until the daemon accepted it
    out = subprocess.run(["ss", "-xmH", "state", "established"], capture_output=True, text=True).stdout
    # the daemon's side: its local address is the socket's path (bound
    # under a temporary name first: PATH.PID, renamed)
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and (fields[3] == path or fields[3].startswith(path + ".")) and "tb" in line:
            print(line.split("tb")[1].split(",")[0])
            sys.exit(0)
    time.sleep(0.05)
sys.exit("no connection of the daemon's on " + path)
PY
}

start 1
got=$(send_buffer 1)
want=$((2 * (wmem_max < 1048576 ? wmem_max : 1048576)))
[ "$got" = "$want" ] || fail "send buffer $got, expected $want (1 MiB doubled, wmem_max $wmem_max)"
start 2 LARDERD_UNIX_SNDBUF=0
got=$(send_buffer 2)
[ "$got" = "$wmem_default" ] || fail "LARDERD_UNIX_SNDBUF=0: send buffer $got, expected the default $wmem_default"
echo "send buffers: $want by default, $wmem_default with LARDERD_UNIX_SNDBUF=0"
