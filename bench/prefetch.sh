#!/usr/bin/env bash
# Per-step data wait with and without prefetch (issue 4), same plan, same
# run, each from an empty cache, against an HTTP origin DELAY ms away
# (tools/httpdelay).  Writes bench/results/prefetch.md.
# SAMPLES, SIZE (bytes), DELAY (ms), STEPS, BATCH, COMPUTE (ms).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
build=${BUILD_DIR:-build}
scripts/install-deps >/dev/null
cmake -S . -B "$build" -G Ninja >/dev/null && ninja -C "$build" larder_cli larder_bench_prefetch httpdelay >/dev/null
samples=${SAMPLES:-4000} size=${SIZE:-65536} delay=${DELAY:-30}
steps=${STEPS:-100} batch=${BATCH:-32} compute=${COMPUTE:-100}
work=$PWD/bench/work/prefetch
out=bench/results/prefetch.md
rm -rf "$work" && mkdir -p "$work/src"
random_samples "$work/src" "$samples" "$size"
"$build/larder" pack "$work/src" -o "$work/www" --shard-size 64M >/dev/null
start_httpdelay "$build" "$work/www" "$work" "$delay"
trap 'kill $server 2>/dev/null' EXIT
url=$base_url/index.larder
{
  echo "# Prefetch from the known order"
  echo
  echo "Written by \`bench/prefetch.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores;"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
  echo "Reproduce: \`SAMPLES=$samples SIZE=$size DELAY=$delay STEPS=$steps BATCH=$batch COMPUTE=$compute bench/prefetch.sh\`."
  echo
  echo "One reader, global batch $batch, $steps steps of a seeded plan, ${compute} ms of emulated"
  echo "compute per step, samples of $size bytes from an HTTP origin that answers each request"
  echo "${delay} ms after it arrives. Each row starts from an empty cache. Wait = time to read"
  echo "the step's batch (one larder_read_samples call, up to 64 requests in flight)."
  echo
  echo "| configuration | steps | wait mean ms | p50 | p95 | p99 | max | steps waiting > ${compute} ms | AU |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for p in 0 1; do
    rm -rf "$work/cache"
    "$build/larder_bench_prefetch" "$url" "$work/cache" --prefetch $p --steps "$steps" \
      --batch "$batch" --compute-ms "$compute"
  done
} >"$out"
cat "$out"
