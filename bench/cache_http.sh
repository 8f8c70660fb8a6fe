#!/usr/bin/env bash
# The node cache against an HTTP origin 20 ms away (issue 3, measures 2
# and 3), in one run:
#   - cold reads with 1, 4, 16 and 64 origin requests in flight: samples/s
#     and the speed-up over one at a time (Little's law: target >= 20x at 64);
#   - per cold epoch: origin requests per sample and origin bytes over the
#     bytes needed (targets <= 1 and <= 1.1); the warm epoch after it must
#     ask the origin nothing.
# The origin is tools/httpdelay (build/httpdelay): a static file server on
# loopback that answers every request DELAY ms after it arrives.
# Writes bench/results/cache_http.md.  SAMPLES, SIZE (bytes), DELAY (ms).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
build=${BUILD_DIR:-build}
larder=$PWD/$build/larder
samples=${SAMPLES:-2000}
size=${SIZE:-16384}
delay=${DELAY:-20}
work=$PWD/bench/work/cache_http
out=${OUT:-bench/results/cache_http.md}
rm -rf "$work" && mkdir -p "$work/src"

random_samples "$work/src" "$samples" "$size"
"$larder" pack "$work/src" -o "$work/www" --shard-size 8M >/dev/null

start_httpdelay "$build" "$work/www" "$work" "$delay"
trap 'kill $server 2>/dev/null' EXIT
url=$base_url/index.larder

stat_field() { # json key
  "$larder" stat --cache "$work/cache" --json |
    /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['datasets'][0]['$1'])"
}

{
  echo "# Node cache over an HTTP origin with ${delay} ms latency"
  echo
  echo "Written by \`bench/cache_http.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores,"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
  echo "Reproduce: \`SAMPLES=$samples SIZE=$size DELAY=$delay bench/cache_http.sh\`."
  echo
  echo "$samples samples of $size bytes in $(ls "$work/www" | grep -c shard) tar shards,"
  echo "served by \`httpdelay\` (tools/httpdelay) on loopback, which answers each request"
  echo "${delay} ms after it arrives. Each row is a cold epoch into an empty cache (\`larder warm --jobs N\`),"
  echo "then a warm epoch over the same cache."
  echo
  echo "| requests in flight | cold s | samples/s | speed-up | origin requests / sample | origin bytes / bytes needed | warm-epoch origin requests |"
  echo "|---|---|---|---|---|---|---|"
} >"$out"

base=""
for jobs in 1 4 16 64; do
  rm -rf "$work/cache"
  start=$(date +%s.%N)
  "$larder" warm "$url" --cache "$work/cache" --jobs $jobs >/dev/null
  end=$(date +%s.%N)
  requests=$(stat_field origin_requests)
  bytes=$(stat_field origin_bytes)
  total=$(stat_field total_bytes)
  "$larder" warm "$url" --cache "$work/cache" --jobs $jobs >/dev/null
  warm_requests=$(( $(stat_field origin_requests) - requests ))
  row=$(awk -v s="$start" -v e="$end" -v n="$samples" -v b="$base" -v j=$jobs \
    -v r="$requests" -v ob="$bytes" -v t="$total" 'BEGIN {
      secs = e - s; rate = n / secs; if (b == "") b = rate;
      printf "| %d | %.2f | %.0f | %.1fx | %.3f | %.3f |", j, secs, rate, rate / b, r / n, ob / t }')
  [ -n "$base" ] || base=$(awk -v s="$start" -v e="$end" -v n="$samples" 'BEGIN { print n / (e - s) }')
  echo "$row $warm_requests |" >>"$out"
done
{
  echo
  echo "Bytes needed = the shards' bytes (every sample is read once). Origin bytes can exceed"
  echo "them only by whole blocks fetched twice; requests per sample stay below 1 because one"
  echo "read covers a run of missing blocks that can hold several small samples."
} >>"$out"
cat "$out"
