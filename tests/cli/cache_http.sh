# The node cache over HTTP origins, good and bad: a good server fills the
# cache once and is not asked again; a server that ignores ranges, names
# the wrong range, cuts bodies short, fails for a while, or refuses, gives
# a clear error or a retried success -- never wrong bytes, never a retry
# storm on a 4xx.
source "$(dirname "$0")/lib.sh"
make_tree www/data 30
(cd www/data && tar --sort=name -cf ../a.tar sample0000*.* sample0001*.* &&
  tar --sort=name -cf ../b.tar sample0002*.* sample00030.*)
"$LARDER" index www/a.tar www/b.tar -o www/index.larder >/dev/null

/usr/bin/python3 "$TESTS/tools/faulty_http.py" www port.txt 2>server.log &
server=$!
cleanup_hooks+=("kill $server")
for _ in $(seq 100); do [ -s port.txt ] && break; sleep 0.05; done
base=http://127.0.0.1:$(cat port.txt)

# good: cold then warm; the second pass asks the origin nothing
"$LARDER" warm $base/ok/index.larder --cache cache >warm.txt || fail "warm: $(cat warm.txt)"
"$LARDER" stat --cache cache --json >stat1.json
"$LARDER" warm $base/ok/index.larder --cache cache >/dev/null
"$LARDER" stat --cache cache --json >stat2.json
/usr/bin/python3 - <<'PY' || fail "cache counters: $(cat stat1.json stat2.json)"
import json
a = json.load(open("stat1.json"))["datasets"][0]
b = json.load(open("stat2.json"))["datasets"][0]
assert a["resident_bytes"] == a["total_bytes"], a
assert a["origin_bytes"] <= 1.1 * a["total_bytes"], a
assert a["origin_requests"] <= 30, a            # at most one per sample
assert b["origin_requests"] == a["origin_requests"], (a, b)
assert b["hits"] == a["hits"] + 30, (a, b)
PY
same_bytes $base/ok/index.larder sample00017 jpg www/data/sample00017.jpg

# a fresh cache per failure mode
expect_error 1 "does not serve byte ranges" "$LARDER" cat $base/no-range/index.larder sample00003 --cache c1
expect_error 1 "Content-Range" "$LARDER" cat $base/wrong-range/index.larder sample00003 --cache c2
status=0
"$LARDER" cat $base/short/index.larder sample00003 --cache c3 >/dev/null 2>err.txt || status=$?
[ $status -eq 1 ] || fail "short body: exit $status"
"$LARDER" stat --cache c3 --json | /usr/bin/python3 -c '
import json, sys; d = json.load(sys.stdin)["datasets"][0]; assert d["resident_bytes"] == 0, d' ||
  fail "a short body was cached"
# flaky: retried to success
same_bytes $base/flaky/index.larder sample00021 jpg www/data/sample00021.jpg
# down: retried a few times, then a clear error
expect_error 1 "503" "$LARDER" cat $base/down/index.larder sample00003 --cache c4
# forbidden: one request, no retries
expect_error 1 "403" "$LARDER" cat $base/forbidden/index.larder sample00003 --cache c5
curl -s $base/__counts >counts.json
/usr/bin/python3 - <<'PY' || fail "request counts: $(cat counts.json)"
import json
c = json.load(open("counts.json"))
assert c["/forbidden/index.larder"] == 1, c
assert 2 <= c["/down/index.larder"] <= 6, c
PY

# a slow tail: every 5th range read stalls for 3 s; hedged second requests
# get the bytes from the server's other threads long before that
start=$(date +%s.%N)
"$LARDER" warm $base/stall-5/index.larder --cache c6 --jobs 4 >/dev/null || fail "warm with stalls"
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { exit !(e - s < 2.8) }' ||
  fail "a stalled read was not hedged: $(awk -v s="$start" -v e="$end" 'BEGIN { print e - s }') s"
same_bytes $base/stall-5/index.larder sample00013 jpg www/data/sample00013.jpg

# a server that never answers: each attempt times out (LARDER_HTTP_TIMEOUT),
# is retried a few times, then the read fails naming the URL -- no hang
start=$(date +%s.%N)
LARDER_HTTP_TIMEOUT=0.5 expect_error 1 "$base/hang/a.tar" "$LARDER" cat $base/hang/index.larder sample00004 --cache c7
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { exit !(e - s < 15) }' || fail "the timeout did not bound the read"
grep -qi "timeout\|timed out" "$WORK/err.txt" || fail "no timeout in: $(cat "$WORK/err.txt")"
