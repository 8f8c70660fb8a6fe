# Shared helpers for the command-line integration tests.  Each test is a
# bash script run by tests/run with $LARDER pointing at the built CLI; it
# exits 0 on success, 77 to skip, anything else on failure.
set -euo pipefail
: "${LARDER:?run through tests/run}"
TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) # tests/, for tools
WORK=$(mktemp -d /tmp/larder-cli-XXXXXX)
cleanup_hooks=()
cleanup() {
  for hook in "${cleanup_hooks[@]}"; do eval "$hook" || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"

# sanitizer_build: 1 when this build has ASan and UBSan (LARDER_SANITIZE).
sanitizer_build=0
grep -q '^LARDER_SANITIZE:BOOL=ON' "$(dirname "$LARDER")/CMakeCache.txt" 2>/dev/null &&
  sanitizer_build=1
# sanitized_python: env settings for /usr/bin/python3 loading this build's
# liblarder.  A sanitizer build's library loads only with the ASan runtime
# preloaded (and libstdc++, for torch's C++ exceptions); Python leaks by
# design, so leak checks are off there (the last ASAN_OPTIONS setting wins).
sanitized_python=()
if [ $sanitizer_build -eq 1 ]; then
  sanitized_python=(LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
fi

fail() { echo "FAIL: $*" >&2; exit 1; }

# reserve_ports N [BASE...]: sets port_base to the first of N consecutive
# TCP ports, free now and this test's until it ends.  Tests run at once
# (tests/run's, another checkout's, another user's) never get the same: each
# port is locked (flock) under $LARDER_TEST_PORTS (/tmp/larder-test-ports),
# the lock held by this shell and what it starts; and a port another program
# holds is passed over (each is bound for a moment, on 0.0.0.0, before it is
# taken).  Ports are drawn below Linux's ephemeral range (32768 and up),
# which the daemons' own outgoing connections take, so that a restarted
# daemon finds its port free again.  BASE...: the bases to try, in order
# (a test whose member names must hash a certain way); else random ones.
# Unreserved ports were picked at random and collided (cli_stripe_http,
# cli_daemon_trust: "address in use").
port_locks=${LARDER_TEST_PORTS:-/tmp/larder-test-ports}
reserve_ports() {
  local n=$1 base i fd ok fds candidates=("${@:2}") tries=0
  mkdir -p "$port_locks" 2>/dev/null && chmod 1777 "$port_locks" 2>/dev/null
  # a directory another user made (or a link) is not trusted with our files:
  # then a private one (coordinating with our own runs only)
  if [ -L "$port_locks" ] || ! [[ "$(stat -c %u "$port_locks" 2>/dev/null)" =~ ^(0|$(id -u))$ ]]; then
    port_locks=$port_locks-$(id -u)
    mkdir -p "$port_locks" 2>/dev/null
  fi
  [ -d "$port_locks" ] && [ -w "$port_locks" ] || fail "cannot lock ports under $port_locks"
  while :; do
    if [ ${#candidates[@]} -gt 0 ]; then
      [ $tries -lt ${#candidates[@]} ] || fail "none of the port bases given is free: ${candidates[*]}"
      base=${candidates[$tries]}
    else
      [ $tries -lt 200 ] || fail "no $n free ports found in 200 tries"
      base=$((20000 + RANDOM % (12000 - n)))
    fi
    tries=$((tries + 1))
    fds=() ok=1
    for ((i = 0; i < n; i++)); do
      # read-only: another user's lock file (mode 644) locks as well;
      # braces: exec's own 2>/dev/null would silence this shell for good
      # never through a link another user left; made readable by all (umask)
      [ -L "$port_locks/$((base + i))" ] && { ok=0; break; }
      [ -e "$port_locks/$((base + i))" ] || (umask 022 && : 2>/dev/null >>"$port_locks/$((base + i))") || true
      if { exec {fd}<"$port_locks/$((base + i))"; } 2>/dev/null; then
        fds+=("$fd")
        flock -n "$fd" || { ok=0; break; }
      else
        ok=0
        break
      fi
    done
    [ $ok = 1 ] && ports_bindable "$base" "$n" && break
    for fd in "${fds[@]}"; do exec {fd}>&-; done
  done
  port_base=$base
}
# ports_bindable BASE N: whether ports BASE..BASE+N-1 can be bound now
# (without SO_REUSEADDR: a port in TIME_WAIT is passed over too)
ports_bindable() {
  /usr/bin/python3 -c '
import socket, sys
base, n = int(sys.argv[1]), int(sys.argv[2])
for port in range(base, base + n):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", port))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
' "$1" "$2"
}

# start_nginx ROOT PROBE: serve $WORK/ROOT with nginx on a random loopback
# port until the test ends, waiting until PROBE (a path under ROOT) answers;
# sets port and nginx_pid.  Skips the test when nginx is not installed.
start_nginx() {
  local nginx
  nginx=$(command -v nginx || echo /usr/sbin/nginx)
  [ -x "$nginx" ] || skip "nginx is not installed (scripts/install-deps installs it)"
  reserve_ports 1
  port=$port_base
  mkdir -p "$WORK/nginx/logs"
  cat >"$WORK/nginx/nginx.conf" <<CONF
daemon off;
worker_processes 1;
user root;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log;
events { worker_connections 256; }
http {
  access_log off;
  server {
    listen 127.0.0.1:$port;
    root $WORK/$1;
  }
}
CONF
  "$nginx" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
  nginx_pid=$!
  cleanup_hooks+=("kill $nginx_pid; wait $nginx_pid 2>/dev/null")
  for _ in $(seq 50); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/$2" 2>/dev/null && return
    [ -e /proc/$nginx_pid ] || fail "nginx did not start: $(cat "$WORK/nginx/logs/error.log")"
    sleep 0.1
  done
  fail "nginx did not answer for $2"
}
skip() { echo "skipped: $*"; exit 77; }

# nobody_init: `nobody CMD...` then runs CMD as uid 65534 (another local
# user than the daemons'), with $nobody_larder the CLI and PYTHONPATH the
# test tools (larder_wire.py) that it can reach: copies in $WORK/nobody,
# world-readable, since the checkout may not be (one under a 0700
# directory, e.g. made by mktemp -d, gave "Permission denied" on
# build/larder and no module larder_wire).  $WORK itself is opened to
# others (the sockets and files the test hands that user lie there).
# Skips (77) where setpriv cannot switch to uid 65534.
nobody_init() {
  nobody_run true 2>/dev/null || skip "setpriv cannot switch to uid 65534 here"
  chmod 755 "$WORK"
  mkdir -p "$WORK/nobody"
  cp "$LARDER" "$WORK/nobody/larder"
  cp -r "$TESTS/tools" "$WORK/nobody/tools"
  chmod -R a+rX "$WORK/nobody"
  nobody_larder=$WORK/nobody/larder
  nobody_run test -x "$nobody_larder" || fail "uid 65534 cannot run $nobody_larder"
}
nobody_run() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
nobody() { nobody_run env PYTHONPATH="$WORK/nobody/tools" "$@"; }

# expect_error STATUS NEEDLE CMD...: the command exits STATUS and its
# stderr contains NEEDLE.
expect_error() {
  local want=$1 needle=$2
  shift 2
  local status=0
  "$@" >"$WORK/out.txt" 2>"$WORK/err.txt" || status=$?
  [ "$status" -eq "$want" ] || fail "'$*' exited $status, want $want; stderr: $(cat "$WORK/err.txt")"
  grep -qF -- "$needle" "$WORK/err.txt" || fail "'$*' stderr lacks '$needle': $(cat "$WORK/err.txt")"
}

# make_tree DIR N: N samples, each KEY.jpg (random, 1-30 KB) and KEY.cls
make_tree() {
  local dir=$1 n=$2
  mkdir -p "$dir"
  for i in $(seq -f "%05g" 1 "$n"); do
    head -c $(( (10#$i * 7919) % 30000 + 1 )) /dev/urandom >"$dir/sample$i.jpg"
    echo "$i" >"$dir/sample$i.cls"
  done
}

# same_bytes INDEX KEY FIELD FILE: larder cat of that field equals FILE
same_bytes() {
  "$LARDER" cat "$1" "$2" --field "$3" | cmp -s - "$4" || fail "$2.$3 differs from $4"
}

# cluster_init SECRET: three larderd members on loopback ports base..base+2
# ($members) sharing the cluster secret SECRET (in ./secret); pids are
# stopped when the test ends.  start_daemon NODE [options...] starts node
# NODE (cache $WORK/cacheNODE, socket $WORK/sockNODE, log
# $WORK/daemonNODE.log) and waits until it answers, not only until its
# socket file exists (that appears before listen()).
# transport_option: larderd's --transport for the cluster tests, from
# LARDER_TEST_TRANSPORT (tcp, ucx or auto; unset: the default, TCP), so that
# daemon.sh and stripe.sh run over UCX too (tests/cli/ucx_*.sh; UCX_TLS
# passes through to the daemons).
transport_option() {
  [ -n "${LARDER_TEST_TRANSPORT:-}" ] && echo "--transport $LARDER_TEST_TRANSPORT"
  return 0
}
# ucx_usable TLS: whether UCX has the transport TLS (tcp, shm) here; a UCX
# test skips (77) with the reason when it has not.
ucx_usable() {
  command -v ucx_info >/dev/null || { echo "skip: no ucx_info (ucx-utils)"; exit 77; }
  local want=$1 found
  case $want in
    tcp) found=$(ucx_info -d 2>/dev/null | grep -c "Transport: tcp") ;;
    shm) found=$(ucx_info -d 2>/dev/null | grep -cE "Transport: (posix|sysv)") ;;
    *) found=0 ;;
  esac
  [ "$found" -gt 0 ] || { echo "skip: UCX has no $want transport here"; exit 77; }
}
cluster_init() {
  # base+3 too, for a listener of the test's own (daemon.sh's metrics)
  reserve_ports 4
  base=$port_base
  members="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
  printf '%s\n' "$1" >secret
  pids=()
  cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait')
}
start_daemon() {
  local node=$1
  shift
  rm -f "$WORK/sock$node"
  "$LARDERD" --cache "$WORK/cache$node" --socket "$WORK/sock$node" \
    --listen "127.0.0.1:$((base + node))" --peers "$members" --secret-file secret \
    $(transport_option) "$@" 2>>"$WORK/daemon$node.log" &
  pids[$node]=$!
  for _ in $(seq 100); do
    [ -S "$WORK/sock$node" ] && "$LARDER" names --socket "$WORK/sock$node" >/dev/null 2>&1 && return
    sleep 0.05
  done
  fail "daemon $node did not start: $(cat "$WORK/daemon$node.log")"
}

# start_gated_origin ROOT [TAG]: tests/tools/gated_origin.py serving ROOT
# over HTTP, holding reads until they are let go; gated_base is its URL.
# At cleanup whatever it still holds is let go first (so that the readers
# waiting on it end), then it is stopped.  TAG names a second one's files.
start_gated_origin() {
  local root=$1 tag=${2:-} pid
  /usr/bin/python3 "$TESTS/tools/gated_origin.py" "$root" "port$tag.txt" 2>"origin$tag.log" &
  pid=$!
  cleanup_hooks+=("curl -s http://127.0.0.1:\$(cat port$tag.txt)/__release/all >/dev/null; kill $pid")
  for _ in $(seq 100); do [ -s "port$tag.txt" ] && break; sleep 0.05; done
  [ -s "port$tag.txt" ] || fail "the origin did not start: $(cat "origin$tag.log")"
  gated_base=http://127.0.0.1:$(cat "port$tag.txt")
}

# start_hostile_http ROOT: tests/tools/hostile_http.py serving $WORK/ROOT
# (a hostile origin: redirects off itself, endless bodies, S3 listings that
# never end) and a bystander that records in $WORK/bystander.log every
# request that reaches it; sets hostile_base (the origin's URL) and
# bystander_port.  Stopped when the test ends.
start_hostile_http() {
  local pid
  : >"$WORK/bystander.log"
  /usr/bin/python3 "$TESTS/tools/hostile_http.py" "$WORK/$1" "$WORK/hostile-ports.txt" \
    "$WORK/bystander.log" 2>"$WORK/hostile.log" &
  pid=$!
  cleanup_hooks+=("kill $pid; wait $pid 2>/dev/null")
  for _ in $(seq 100); do [ -s "$WORK/hostile-ports.txt" ] && break; sleep 0.05; done
  [ -s "$WORK/hostile-ports.txt" ] || fail "the hostile origin did not start: $(cat "$WORK/hostile.log")"
  read -r port bystander_port <"$WORK/hostile-ports.txt"
  hostile_base=http://127.0.0.1:$port
}
