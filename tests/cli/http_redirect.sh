# Redirects (found by review): an origin's answer must not send larder
# off the origin it was confined to.  A 302 to another host and port (an
# index, a shard's range read, an S3 object with its session token), to
# ftp://, or round a loop fails at once with a message naming where it
# led, and the bystander server it pointed at records no request; a
# redirect within the origin is still followed (index and shard reads).
# Before the fix, libcurl followed every redirect: the bystander got the
# requests (and x-amz-security-token), and a loop ran until the timeout.
source "$(dirname "$0")/lib.sh"
make_tree www/data 20
(cd www/data && tar --sort=name -cf ../a.tar ./*)
"$LARDER" index www/a.tar -o www/index.larder >/dev/null
start_hostile_http www
base=$hostile_base
export LARDER_HTTP_TIMEOUT=5 # the old code's loop stops here, not after 60 s x 4

# followed within the origin: the index, and the shards' range reads
"$LARDER" inspect $base/moved/index.larder --json | grep -q '"num_samples": 20' ||
  fail "a redirect within the origin was not followed"
same_bytes $base/moved/index.larder sample00007 jpg www/data/sample00007.jpg

# off the origin: refused before connecting, with the URL and why
expect_error 1 "$base/away/index.larder: redirected to http://localhost:$bystander_port/stolen/away/index.larder, off the origin http://127.0.0.1:$port: refused" \
  "$LARDER" inspect $base/away/index.larder
# a shard's range read: the index read before the origin turns hostile
"$LARDER" index $base/flip/a.tar -o flip.larder >/dev/null
touch www/flip
expect_error 1 "redirected to http://localhost:$bystander_port/stolen/flip/a.tar, off the origin" \
  "$LARDER" cat flip.larder sample00007
# another scheme
expect_error 1 "redirected to ftp://127.0.0.1:$bystander_port/ftp/index.larder: refused" \
  "$LARDER" inspect $base/ftp/index.larder
[ -s bystander.log ] && fail "the bystander was reached: $(cat bystander.log)"

# a loop fails after a few hops, at once, without retries
before=$(cat www/requests)
started=$(date +%s%N)
expect_error 1 "$base/loop/0: more than 5 redirects (a loop?), the last to /loop/6" \
  "$LARDER" inspect $base/loop/0
took=$((($(date +%s%N) - started) / 1000000))
[ $took -lt 3000 ] || fail "the loop took $took ms"
asked=$(($(cat www/requests) - before))
[ $asked -le 6 ] || fail "the loop made $asked requests"

# a confined daemon (--allow): a redirect within the origin is followed only
# under its prefixes, for an index and for a shard's range read (before,
# any path on an allowed origin was reachable so); a whole origin allowed
# still follows it
mkdir idx
"$LARDER" index $base/moved/a.tar -o idx/moved.larder >/dev/null
LARDERD=${LARDER%/larder}/larderd
pids=()
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null')
start_confined() { # NAME ALLOW...
  local name=$1 allow=() a
  shift
  for a in "$@"; do allow+=(--allow "$a"); done
  "$LARDERD" --cache "$WORK/cache-$name" --socket "$WORK/sock-$name" "${allow[@]}" \
    2>>"$WORK/daemon-$name.log" &
  pids+=($!)
  for _ in $(seq 100); do [ -S "$WORK/sock-$name" ] && break; sleep 0.05; done
  [ -S "$WORK/sock-$name" ] || fail "daemon $name did not start: $(cat "$WORK/daemon-$name.log")"
}
start_confined narrow "$WORK/idx" "$base/moved"
start_confined whole "$WORK/idx" "$base"
PYTHONPATH=$TESTS/tools /usr/bin/python3 - "$WORK" "$base" <<'PY' || fail "confined redirects: $(tail -n 3 daemon-*.log)"
import struct, sys, larder_wire as w
work, base = sys.argv[1], sys.argv[2]

def client(name):
    c = w.Client(f"{work}/sock-{name}", 1)
    c.greet()
    return c

def refused(c, kind, payload, needle):
    w.expect_refused(c, kind, payload, needle, "followed a redirect outside --allow")

# the index: /moved/index.larder is sent to /index.larder
refused(client("narrow"), w.OPEN, f"{base}/moved/index.larder".encode(),
        f"{base}/moved/index.larder: redirected to {base}/index.larder, outside the allowed prefixes (--allow): refused")
client("whole").open(f"{base}/moved/index.larder")
# a shard: /moved/a.tar is sent to /a.tar (the index itself is local and allowed)
c = client("narrow")
low, high, _ = c.open(f"{work}/idx/moved.larder")
read = struct.pack("<QQIB3xQQ", low, high, 0, 0, 0, 512)
refused(c, w.READ, read, f"redirected to {base}/a.tar, outside the allowed prefixes")
c = client("whole")
low, high, _ = c.open(f"{work}/idx/moved.larder")
header = c.read(low, high, 0, 0, 512)
with open(f"{work}/www/a.tar", "rb") as f:
    assert header == f.read(512), header[:100]
PY

# S3: a signed request is never redirected, not even to the same host
unset AWS_PROFILE AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 LARDER_S3_ADDRESSING
export AWS_ACCESS_KEY_ID=KEY AWS_SECRET_ACCESS_KEY=SECRET AWS_REGION=us-east-1
export AWS_SESSION_TOKEN=the-session-token AWS_SHARED_CREDENTIALS_FILE=$WORK/none
LARDER_S3_ENDPOINT=$base expect_error 1 \
  "s3://bucket/index.larder: HTTP status 302, redirected to http://localhost:$bystander_port/stolen/bucket/index.larder: not followed" \
  "$LARDER" inspect s3://bucket/index.larder
[ -s bystander.log ] && fail "the bystander was reached (S3): $(cat bystander.log)"
echo "ok"
