# `larder index --files s3://bucket/prefix/`: the objects under a prefix
# listed with ListObjectsV2 (page by page: the server is asked for pages
# of 2 keys through LARDER_S3_LIST_PAGE), read once each, and read back
# through the index (cmp against the uploaded files); hostile keys
# skipped; a large object checked by block.  The S3 server and its setup
# are those of tests/cli/s3.sh (@20minutes/s3rver, which checks SigV4
# signatures, also of the listing's query).
source "$(dirname "$0")/lib.sh"

S3RVER_PACKAGE=@20minutes/s3rver
S3RVER_VERSION=4.0.4
npm_cache=${LARDER_TEST_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/larder-test-npm}
server_dir=$npm_cache/s3rver-$S3RVER_VERSION
server_cli=$server_dir/node_modules/$S3RVER_PACKAGE/lib/cli.js
command -v node >/dev/null || skip "node is not installed (scripts/install-deps installs nodejs)"
# installed by tests/cli/s3.sh (which runs first, in name order)
[ -f "$server_cli" ] || skip "$S3RVER_PACKAGE is not installed (tests/cli/s3.sh installs it)"
echo 'require(process.argv[2]).parseAsync([process.argv[0], "s3rver", ...process.argv.slice(3)]);' >start-s3rver.js
mkdir -p s3data
# --openssl-legacy-provider: s3rver makes continuation tokens with DES,
# which OpenSSL 3 leaves out by default (without it, a listing of more
# than one page answers 500)
node --openssl-legacy-provider start-s3rver.js "$server_cli" -d "$WORK/s3data" -a 127.0.0.1 -p 0 \
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
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 \
  LARDER_S3_ADDRESSING
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
export AWS_SHARED_CREDENTIALS_FILE=$WORK/no-such-credentials
export LARDER_S3_ENDPOINT=$endpoint
put() { # FILE KEY (KEY percent-encoded as it goes into the URL)
  curl -sS --fail-with-body --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$1" "$endpoint/bucket/$2" >/dev/null ||
    fail "could not upload $1 as $2"
}

mkdir -p files/sub
echo hello >files/top.txt
head -c 20000 /dev/urandom >files/sub/deep.bin
head -c 6000000 /dev/urandom >files/big.ckpt # above 4 MiB: checked by block
printf 'ü' >"files/sub/naïve name.txt"
: >files/empty
put files/top.txt ckpt/top.txt
put files/sub/deep.bin ckpt/sub/deep.bin
put files/big.ckpt ckpt/big.ckpt
put "files/sub/naïve name.txt" "ckpt/sub/na%C3%AFve%20name.txt"
put files/empty ckpt/empty
# (keys with '&' or '<' are left out: s3rver escapes them twice in its
# listings, where S3 escapes them once; tests/unit/test_s3_list.c checks
# the decoding on S3's own documented answers)
put files/top.txt "ckpt/back%5Cslash" # hostile: skipped
put files/top.txt other/elsewhere.txt  # outside the prefix: not listed
files=$(find files -type f | wc -l)

"$LARDER" index --files s3://bucket/ckpt/ -o s3.larder >out.txt 2>err.txt || fail "$(cat err.txt)"
grep -q "indexed $files files" out.txt || fail "$(cat out.txt) $(cat err.txt)"
grep -qF "1 for a backslash" err.txt || fail "no warning for the backslash: $(cat err.txt)"
n=0
while IFS= read -r -d '' f; do
  key=${f#files/}
  "$LARDER" cat s3.larder "$key" | cmp -s - "$f" || fail "$key read back through s3 differs"
  n=$((n + 1))
done < <(find files -type f -print0)
[ $n -eq "$files" ] || fail "compared $n"
"$LARDER" inspect s3.larder | grep -qE "^version +3" || fail "big.ckpt has no block checksums"
"$LARDER" verify s3.larder >/dev/null || fail "verify over s3"

# page by page: 2 keys a page
LARDER_S3_LIST_PAGE=2 "$LARDER" index --files s3://bucket/ckpt/ -o paged.larder >out.txt 2>err.txt ||
  fail "$(cat err.txt)"
grep -q "indexed $files files" out.txt || fail "paged: $(cat out.txt)"
[ "$(grep -c "continuation-token=" s3rver.log || true)" -ge 2 ] || fail "not asked page by page: $(cat s3rver.log)"
expect_error 1 "ends in '/'" "$LARDER" index --files s3://bucket/ckpt -o x.larder
expect_error 1 "no files to index" "$LARDER" index --files s3://bucket/nothing/ -o x.larder
