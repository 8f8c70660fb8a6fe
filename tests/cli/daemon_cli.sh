# The node daemon as the command line's path: a larderd started from a
# configuration file, and a user with only LARDER_SOCKET set (the README's
# daemon setup).  larder cat reads through it, larder stat shows what it
# answered (exact hit and miss counts, bytes, the latency histogram in its
# Prometheus text), and larder warm stages a dataset in the daemon's own
# cache directory, which then holds it all.
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"
unset LARDER_CACHE LARDER_SOCKET
# samples of 150-170 KB: each has a 64 KiB block of its own, so each first
# read needs a fill (a miss), and a second read none (a hit)
mkdir -p d
for i in $(seq -f "%03g" 1 20); do
  head -c $((150000 + 10#$i * 1000)) /dev/urandom >"d/s$i.bin"
  echo "$i" >"d/s$i.cls"
done
make_tree e 40
"$LARDER" pack d -o origin/D --shard-size 1M >/dev/null
"$LARDER" pack e -o origin/E --shard-size 200K >/dev/null
json() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
D=$("$LARDER" inspect origin/D/index.larder --json | json 'd["dataset_id"]')
D_BYTES=$("$LARDER" inspect origin/D/index.larder --json | json 'd["total_bytes"]')
E=$("$LARDER" inspect origin/E/index.larder --json | json 'd["dataset_id"]')

reserve_ports 1
mport=$port_base
cat >larderd.conf <<CONF
# the node daemon, as an admin would write it
cache = $WORK/daemon-cache
socket = $WORK/larderd.sock
metrics = 127.0.0.1:$mport
jobs = 8
CONF
"$LARDERD" --config "$WORK/larderd.conf" --jobs 4 2>>"$WORK/daemon.log" &
daemon=$!
cleanup_hooks+=("kill $daemon 2>/dev/null; wait $daemon 2>/dev/null")
for _ in $(seq 100); do [ -S "$WORK/larderd.sock" ] && break; sleep 0.05; done
[ -S "$WORK/larderd.sock" ] || fail "larderd did not start from its file: $(cat daemon.log)"
grep -q "serving cache $WORK/daemon-cache on $WORK/larderd.sock" daemon.log ||
  fail "the daemon's options are not the file's: $(cat daemon.log)"

# without a cache or a daemon, the commands say what they need
expect_error 2 "LARDER_SOCKET" "$LARDER" warm origin/D/index.larder
expect_error 2 "LARDER_SOCKET" "$LARDER" stat
export LARDER_SOCKET=$WORK/larderd.sock

# 1. cat: every sample through the daemon, the right bytes; then again
for i in $(seq -f "%03g" 1 20); do
  "$LARDER" cat origin/D/index.larder "s$i" --field bin | cmp -s - "d/s$i.bin" || fail "s$i.bin"
done
"$LARDER" stat --json >stat1.json || fail "stat through the daemon"
read -r hits misses errors served <<<"$(json "' '.join(str(x[k]) for x in d['datasets'] if x['dataset_id'] == '$D' for k in ('hits', 'misses', 'read_errors', 'served_bytes'))" <stat1.json)"
[ "$hits $misses $errors" = "0 20 0" ] || fail "first reads: $hits hits, $misses misses, $errors errors"
[ "$served" = "$D_BYTES" ] || fail "served $served bytes for $D_BYTES"
for i in $(seq -f "%03g" 1 20); do
  "$LARDER" cat origin/D/index.larder "s$i" --field cls >/dev/null || fail "s$i.cls"
done
"$LARDER" stat >stat2.txt || fail "stat"
grep -q "^dataset $D" stat2.txt || fail "stat: $(cat stat2.txt)"
grep -q "reads         20 hits, 20 misses (hit ratio 50.0%)" stat2.txt || fail "stat: $(cat stat2.txt)"
"$LARDER" stat --socket "$WORK/larderd.sock" | grep -q "20 hits, 20 misses" || fail "stat --socket"

# the same in the Prometheus text, with the READ latency histogram
curl -sf "http://127.0.0.1:$mport/metrics" >metrics.txt || fail "no metrics endpoint"
for want in "larder_hits_total{dataset=\"$D\"} 20" "larder_misses_total{dataset=\"$D\"} 20" \
  "larder_read_errors_total{dataset=\"$D\"} 0" "larder_served_bytes_total{dataset=\"$D\"} $((2 * D_BYTES))" \
  "larder_borrowed_reads_total{dataset=\"$D\"} 0" "larder_peer_served_reads_total{dataset=\"$D\"} 0" \
  "larder_read_duration_seconds_bucket{dataset=\"$D\",le=\"+Inf\"} 40" \
  "larder_read_duration_seconds_count{dataset=\"$D\"} 40" \
  "# TYPE larder_read_duration_seconds histogram"; do
  grep -qxF "$want" metrics.txt || fail "metrics lack '$want': $(grep "$D" metrics.txt | head -20)"
done
grep -q "^larder_read_duration_seconds_sum{dataset=\"$D\"} [0-9.]*$" metrics.txt || fail "no latency sum"
grep -q "^larder_origin_requests_total{dataset=\"$D\"} [1-9]" metrics.txt || fail "no origin reads"

# 2. warm: the daemon stages all of E in its own cache
"$LARDER" warm origin/E/index.larder >warm.txt 2>warm.err || fail "warm: $(cat warm.txt warm.err)"
grep -q "warmed $E through the daemon at $WORK/larderd.sock" warm.txt || fail "warm: $(cat warm.txt)"
"$LARDER" stat --cache "$WORK/daemon-cache" --json >cache.json
json "[x for x in d['datasets'] if x['dataset_id'] == '$E'][0]['resident_bytes'] >= [x for x in d['datasets'] if x['dataset_id'] == '$E'][0]['total_bytes'] > 0" <cache.json |
  grep -q True || fail "the daemon's cache does not hold E: $(cat cache.json)"
[ -n "$(find "$WORK/daemon-cache" -type f -size +100k)" ] || fail "no data files in the daemon's cache"
# what the daemon staged is served from its cache: a hit, no new miss
before=$("$LARDER" stat --json | json "[(x['hits'], x['misses']) for x in d['datasets'] if x['dataset_id'] == '$E'][0]")
same_bytes origin/E/index.larder sample00017 jpg e/sample00017.jpg
after=$("$LARDER" stat --json | json "[(x['hits'], x['misses']) for x in d['datasets'] if x['dataset_id'] == '$E'][0]")
/usr/bin/python3 -c "b, a = $before, $after; assert a == (b[0] + 1, b[1]), (b, a)" ||
  fail "a read of warmed data: $before then $after"
# warming it again reads nothing from the origin
origin=$("$LARDER" stat --json | json "[x['origin_bytes'] for x in d['datasets'] if x['dataset_id'] == '$E'][0]")
"$LARDER" warm origin/E/index.larder >/dev/null || fail "warm again"
[ "$("$LARDER" stat --json | json "[x['origin_bytes'] for x in d['datasets'] if x['dataset_id'] == '$E'][0]")" = "$origin" ] ||
  fail "warming a staged dataset read the origin again"

# a cache of one's own still wins over the daemon's socket for warm
"$LARDER" warm origin/E/index.larder --cache "$WORK/own" | grep -q "warmed 40 samples" || fail "warm --cache"
# its two lanes of batches (half of --jobs each) read every sample once, however
# --jobs divides D's 20: one sample a batch, 1 (3 in flight), 32 (all of them
# in one); D's samples have blocks of their own, so a sample left out leaves
# bytes out of the cache; no daemon, so that every byte lands in that cache
for jobs in 1 3 64; do
  rm -rf "$WORK/own$jobs"
  LARDER_SOCKET= "$LARDER" warm origin/D/index.larder --cache "$WORK/own$jobs" --jobs $jobs >own$jobs.txt ||
    fail "warm --jobs $jobs: $(cat own$jobs.txt)"
  grep -q "warmed 20 samples" own$jobs.txt || fail "warm --jobs $jobs: $(cat own$jobs.txt)"
  grep -q "the cache holds \(.*\) of \1\$" own$jobs.txt || fail "warm --jobs $jobs left some out: $(cat own$jobs.txt)"
done

# 3. no daemon on the socket: warm and stat fail at once, saying so
LARDER_SOCKET=$WORK/none.sock expect_error 1 "none.sock" "$LARDER" warm origin/E/index.larder
LARDER_SOCKET=$WORK/none.sock expect_error 1 "none.sock" "$LARDER" stat
kill -0 $daemon || fail "the daemon died: $(cat daemon.log)"
