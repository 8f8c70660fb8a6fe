# tests/cli/lib.sh's reserve_ports, which every test that listens on TCP
# uses (tests that picked random ports collided with each other and with
# other programs: cli_stripe_http and cli_daemon_trust failed with "address
# in use").  With its own lock directory: (1) a base whose port another
# program listens on is passed over for the next one given; (2) a base
# another test holds (its locks) is passed over, and taken once that test
# has ended; (3) two tests reserving at once from the same bases get
# ports that do not overlap; (4) a larderd started on a reserved port
# listens there; (5) with every base given taken, a clear failure.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
export LARDER_TEST_PORTS=$WORK/locks
port_locks=$LARDER_TEST_PORTS

# three bases, 10 ports apart, bound-free right now
reserve_ports 1
a=$port_base
b=$((a + 10)) c=$((a + 20))
ports_bindable "$b" 2 && ports_bindable "$c" 2 || skip "ports $b and $c are in use here"

# 1. another program listens on b: passed over for c
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
open(sys.argv[2], "w").close(); time.sleep(60)' "$b" "$WORK/listening" &
listener=$!
cleanup_hooks+=("kill $listener 2>/dev/null")
for _ in $(seq 100); do [ -e "$WORK/listening" ] && break; sleep 0.05; done
( reserve_ports 2 "$b" "$c"; echo "$port_base" >got1 )
[ "$(cat got1)" = "$c" ] || fail "port $b is in use, yet reserved: got $(cat got1)"
kill $listener
wait $listener 2>/dev/null || true
echo "1. a base in use by another program passed over"

# 2. another test holds b (a shell that reserved it and lives on): passed
# over while it lives, taken once it has ended
( reserve_ports 2 "$b"; echo "$port_base" >got2a; exec sleep 3 ) &
holder=$!
for _ in $(seq 100); do [ -s got2a ] && break; sleep 0.05; done
[ "$(cat got2a)" = "$b" ] || fail "the holder did not get $b: $(cat got2a)"
( reserve_ports 2 "$b" "$c"; echo "$port_base" >got2b )
[ "$(cat got2b)" = "$c" ] || fail "port $b is another test's, yet reserved again: $(cat got2b)"
wait $holder
( reserve_ports 2 "$b"; echo "$port_base" >got2c )
[ "$(cat got2c)" = "$b" ] || fail "port $b not reserved once its holder ended: $(cat got2c)"
echo "2. a base another test holds passed over, free again once it ended"

# 3. eight tests at once from the same bases: all different
for i in $(seq 8); do
  ( reserve_ports 2 $(seq "$b" 2 $((b + 40))); echo "$port_base" >"got3.$i"; sleep 2 ) &
done
wait
sort -u got3.* | wc -l | grep -qx 8 || fail "tests reserving at once shared ports: $(cat got3.*)"
echo "3. eight reservations at once, eight different ports"

# 4. a daemon on the reserved port listens there
reserve_ports 2
"$LARDERD" --cache "$WORK/cache" --socket "$WORK/sock" --listen "127.0.0.1:$port_base" \
  --peers "127.0.0.1:$port_base,127.0.0.1:$((port_base + 1))" --secret-file <(echo s) \
  2>"$WORK/daemon.log" &
pid=$!
cleanup_hooks+=("kill $pid 2>/dev/null; wait $pid 2>/dev/null")
for _ in $(seq 100); do
  /usr/bin/python3 -c "import socket; socket.create_connection(('127.0.0.1', $port_base), 1)" 2>/dev/null && break
  sleep 0.05
done
/usr/bin/python3 -c "import socket; socket.create_connection(('127.0.0.1', $port_base), 1)" ||
  fail "larderd does not listen on its reserved port: $(cat daemon.log)"
echo "4. larderd listens on its reserved port $port_base"

# 5. every base given taken: a failure that says so
if (reserve_ports 2 "$port_base") 2>err5.txt; then fail "a taken base was reserved again"; fi
grep -q "none of the port bases given is free" err5.txt || fail "$(cat err5.txt)"
echo "5. $(cat err5.txt)"
echo ok
