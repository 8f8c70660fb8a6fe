# Shards and index served by a real HTTP server (nginx on loopback):
# index shards by URL, open the index by URL, read and verify over HTTP,
# and get clear errors for missing objects and dead servers.
source "$(dirname "$0")/lib.sh"
make_tree www/data 40
(cd www/data && tar --sort=name -cf ../a.tar sample0000[1-9].* sample0001*.* &&
  tar --sort=name -cf ../b.tar sample0002*.* sample0003*.* sample00040.*)

start_nginx www a.tar
base=http://127.0.0.1:$port

# index remote shards into a local index: it records their URL directory
# as its base (format version 2) and names them under it
"$LARDER" index $base/a.tar $base/b.tar -o local.larder >out.txt
grep -q "indexed 40 samples in 2 shards" out.txt || fail "$(cat out.txt)"
"$LARDER" inspect local.larder --sample 0 | grep -E "shard +0 \(a.tar\)" >/dev/null ||
  fail "remote shards not named under the index's base"
"$LARDER" verify local.larder >/dev/null || fail "verify over http"
same_bytes local.larder sample00007 jpg www/data/sample00007.jpg
same_bytes local.larder sample00033 cls www/data/sample00033.cls

# the same index published next to the shards, opened by URL, resolves
# the shards relative to it
"$LARDER" index www/a.tar www/b.tar -o www/index.larder >/dev/null
"$LARDER" inspect $base/index.larder --json | grep '"num_samples": 40' >/dev/null || fail "inspect by URL"
same_bytes $base/index.larder sample00040 jpg www/data/sample00040.jpg
"$LARDER" verify $base/index.larder >/dev/null || fail "verify by URL"

# errors name the URL
expect_error 1 "$base/missing.tar" "$LARDER" index $base/missing.tar -o m.larder
expect_error 1 "404" "$LARDER" inspect $base/nothing.larder
rm www/b.tar
expect_error 1 "b.tar" "$LARDER" cat $base/index.larder sample00040
kill $nginx_pid
wait $nginx_pid 2>/dev/null || true
cleanup_hooks=()
expect_error 1 "127.0.0.1" "$LARDER" cat local.larder sample00007
