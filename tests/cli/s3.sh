# Shards and index in a real S3-compatible server on loopback: index s3://
# shards, open an index by s3:// URL, read, verify, warm a cache; path-style
# and virtual-host addressing; credentials from the environment, from a
# credentials file, with a session token, and none (anonymous); and clear
# errors for wrong credentials (403, one request, no retry storm) and
# missing objects (404), naming the s3:// URL.
#
# The server is @20minutes/s3rver, a maintained fork of the npm package
# s3rver that, unlike s3rver 3.x, checks SigV4 signatures (s3rver 3.x
# accepts any signature from a known key id).  It is installed from npm
# once into a cache directory and reused; the test skips (77) only when
# node/npm are missing or the install fails.
source "$(dirname "$0")/lib.sh"

S3RVER_PACKAGE=@20minutes/s3rver
S3RVER_VERSION=4.0.4
npm_cache=${LARDER_TEST_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/larder-test-npm}
server_dir=$npm_cache/s3rver-$S3RVER_VERSION
server_cli=$server_dir/node_modules/$S3RVER_PACKAGE/lib/cli.js

command -v node >/dev/null || skip "node is not installed (scripts/install-deps installs nodejs)"
if [ ! -f "$server_cli" ]; then
  command -v npm >/dev/null || skip "npm is not installed, so $S3RVER_PACKAGE cannot be"
  mkdir -p "$npm_cache"
  ( # one install at a time, into a temporary directory moved into place when complete
    flock 9
    if [ ! -f "$server_cli" ]; then
      rm -rf "$server_dir.partial"
      mkdir -p "$server_dir.partial"
      timeout 240 npm install --prefix "$server_dir.partial" --no-audit --no-fund \
        --no-package-lock --loglevel=error "$S3RVER_PACKAGE@$S3RVER_VERSION" >"$WORK/npm.log" 2>&1 &&
        mv "$server_dir.partial" "$server_dir"
    fi
  ) 9>"$npm_cache/.lock" || true
  if [ ! -f "$server_cli" ]; then
    tail -5 "$WORK/npm.log" 2>/dev/null || true
    skip "could not install $S3RVER_PACKAGE@$S3RVER_VERSION from npm (its output is above)"
  fi
fi

# The package ships its command-line parser but no bin script.  Port 0:
# the server picks a free port and prints it.  Its request log (one line
# per request, with the status) lets the test count requests.
echo 'require(process.argv[2]).parseAsync([process.argv[0], "s3rver", ...process.argv.slice(3)]);' >start-s3rver.js
mkdir -p s3data
node start-s3rver.js "$server_cli" -d "$WORK/s3data" -a 127.0.0.1 -p 0 \
  --service-endpoint localhost --configure-bucket bucket >s3rver.log 2>&1 &
server=$!
cleanup_hooks+=("kill $server; wait $server 2>/dev/null")
port=
for _ in $(seq 200); do
  port=$(sed -n 's/.*S3rver listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' s3rver.log)
  [ -n "$port" ] && break
  [ -e /proc/$server ] || fail "s3rver did not start: $(cat s3rver.log)"
  sleep 0.05
done
[ -n "$port" ] || fail "s3rver did not say its port: $(cat s3rver.log)"
endpoint=http://127.0.0.1:$port

# a known environment: the server's default account, nothing of the developer's
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 \
  LARDER_S3_ADDRESSING
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
export AWS_SHARED_CREDENTIALS_FILE=$WORK/no-such-credentials
export LARDER_S3_ENDPOINT=$endpoint

# put FILE KEY: upload with curl, signed the same way (SigV4, unsigned payload)
put() {
  curl -sS --fail-with-body --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$1" "$endpoint/bucket/$2" >/dev/null ||
    fail "could not upload $1 as $2"
}
# requests STATUS: how many requests the server has answered with STATUS
requests() { grep -c " $1 [0-9]*ms" s3rver.log || true; }

make_tree www/data 40
(cd www/data && tar --sort=name -cf ../a.tar sample0000[1-9].* sample0001*.* &&
  tar --sort=name -cf "../part b.tar" sample0002*.* sample0003*.* sample00040.*)
put www/a.tar prefix/a.tar
put "www/part b.tar" "prefix/part%20b.tar" # a key that must be percent-encoded, and signed so

# index s3:// shards into a local index: the names stay s3:// URLs
"$LARDER" index s3://bucket/prefix/a.tar "s3://bucket/prefix/part b.tar" -o local.larder >out.txt ||
  fail "index over s3: $(cat out.txt)"
grep -q "indexed 40 samples in 2 shards" out.txt || fail "$(cat out.txt)"
"$LARDER" verify local.larder >/dev/null || fail "verify over s3"
same_bytes local.larder sample00007 jpg www/data/sample00007.jpg
same_bytes local.larder sample00033 cls www/data/sample00033.cls

# the index published next to the shards, opened by s3:// URL: shards
# resolve relative to it
"$LARDER" index www/a.tar "www/part b.tar" -o www/index.larder >/dev/null
put www/index.larder prefix/index.larder
index=s3://bucket/prefix/index.larder
"$LARDER" inspect $index --json | grep '"num_samples": 40' >/dev/null || fail "inspect by s3:// URL"
"$LARDER" verify $index >/dev/null || fail "verify by s3:// URL"
for key in sample00001 sample00019 sample00020 sample00040; do
  same_bytes $index $key jpg www/data/$key.jpg
  same_bytes $index $key cls www/data/$key.cls
done

# warm a cache from s3, then it serves without asking again
"$LARDER" warm $index --cache cache >warm.txt 2>&1 || fail "warm over s3: $(cat warm.txt)"
"$LARDER" stat --cache cache >stat.txt || fail "stat: $(cat stat.txt)"
"$LARDER" stat --cache cache --json >stat1.json
"$LARDER" warm $index --cache cache >/dev/null 2>&1 || fail "second warm"
"$LARDER" stat --cache cache --json >stat2.json
/usr/bin/python3 - <<'PY' || fail "cache counters: $(cat stat.txt stat1.json stat2.json)"
import json
a = json.load(open("stat1.json"))["datasets"][0]
b = json.load(open("stat2.json"))["datasets"][0]
assert a["resident_bytes"] == a["total_bytes"] > 0, a
assert 0 < a["origin_requests"] <= 40, a
assert b["origin_requests"] == a["origin_requests"], (a, b)
PY
"$LARDER" cat $index sample00012 --field jpg --cache cache | cmp -s - www/data/sample00012.jpg ||
  fail "cached read differs"

# virtual-host addressing: bucket.s3.localhost (curl resolves *.localhost to
# loopback).  Unsigned: this server checks a virtual-host request's
# signature against a path with the bucket in it, which is not what S3
# signs (tests/unit/test_s3.c checks virtual-host signatures against AWS's
# published example instead).
AWS_ACCESS_KEY_ID='' AWS_SECRET_ACCESS_KEY='' LARDER_S3_ENDPOINT=http://s3.localhost:$port \
  LARDER_S3_ADDRESSING=virtual same_bytes $index sample00025 jpg www/data/sample00025.jpg

# credentials from a shared credentials file, by profile; with a session token
cat >credentials <<'INI'
[default]
aws_access_key_id = NOBODY
aws_secret_access_key = nothing
[s3rver]
aws_access_key_id = S3RVER
aws_secret_access_key = S3RVER
INI
AWS_ACCESS_KEY_ID='' AWS_SECRET_ACCESS_KEY='' AWS_SHARED_CREDENTIALS_FILE=$WORK/credentials \
  AWS_PROFILE=s3rver same_bytes $index sample00002 jpg www/data/sample00002.jpg
AWS_SESSION_TOKEN=FwoGZXIvYXdzEXAMPLEtoken== same_bytes $index sample00003 jpg www/data/sample00003.jpg
# no credentials at all: unsigned requests (this server lets anyone read)
AWS_ACCESS_KEY_ID='' AWS_SECRET_ACCESS_KEY='' same_bytes $index sample00004 jpg www/data/sample00004.jpg

# wrong credentials: 403 naming the URL, after one request, at once
before=$(requests 403)
start=$(date +%s)
AWS_SECRET_ACCESS_KEY=wrong expect_error 1 "$index: HTTP status 403" \
  "$LARDER" cat $index sample00007
AWS_ACCESS_KEY_ID=NOBODY expect_error 1 "$index: HTTP status 403" "$LARDER" inspect $index
AWS_SHARED_CREDENTIALS_FILE=$WORK/credentials AWS_ACCESS_KEY_ID='' AWS_SECRET_ACCESS_KEY='' \
  expect_error 1 "s3://bucket/prefix/a.tar: HTTP status 403" "$LARDER" cat local.larder sample00005
[ $(($(date +%s) - start)) -le 10 ] || fail "403s took $(($(date +%s) - start)) s"
sleep 0.2 # the server logs after it answers
[ "$(requests 403)" -eq $((before + 3)) ] ||
  fail "three refused commands made $(($(requests 403) - before)) requests, want 3 (no retries)"

# missing objects and buckets: 404 naming the URL
expect_error 1 "s3://bucket/prefix/nothing.larder: HTTP status 404" \
  "$LARDER" inspect s3://bucket/prefix/nothing.larder
expect_error 1 "s3://bucket/prefix/missing.tar" "$LARDER" index s3://bucket/prefix/missing.tar -o m.larder
expect_error 1 "s3://nobucket/index.larder: HTTP status 404" "$LARDER" inspect s3://nobucket/index.larder
# a shard deleted under a published index
curl -sS --fail --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X DELETE "$endpoint/bucket/prefix/part%20b.tar" ||
  fail "could not delete"
expect_error 1 "s3://bucket/prefix/part b.tar" "$LARDER" cat $index sample00040
# bad settings say what is wrong
expect_error 1 "names a bucket, not an object" "$LARDER" inspect s3://bucket/
AWS_SECRET_ACCESS_KEY='' expect_error 1 "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not" \
  "$LARDER" inspect $index
# the server is gone: the error names the URL
kill $server
wait $server 2>/dev/null || true
cleanup_hooks=()
expect_error 1 "s3://bucket/prefix/a.tar" "$LARDER" cat local.larder sample00007
