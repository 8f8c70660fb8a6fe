#!/usr/bin/env bash
# Per-step data wait with and without prefetch (issue 4), same plan, same
# run, each from an empty cache, against an HTTP origin DELAY ms away
# (tools/httpdelay).  Writes bench/results/prefetch.md.
# SAMPLES, SIZE (bytes), DELAY (ms), STEPS, BATCH, COMPUTE (ms).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
scripts/install-deps >/dev/null
cmake -S . -B "$build" -G Ninja >/dev/null && ninja -C "$build" larder_cli larder_bench_prefetch httpdelay >/dev/null
samples=${SAMPLES:-4000} size=${SIZE:-65536} delay=${DELAY:-30}
steps=${STEPS:-100} batch=${BATCH:-32} compute=${COMPUTE:-100}
work=$PWD/bench/work/prefetch
out=bench/results/prefetch.md
rm -rf "$work" && mkdir -p "$work/src"
/usr/bin/python3 - "$work/src" "$samples" "$size" <<'PY'
import os, sys
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    with open(os.path.join(root, "s%06d.bin" % i), "wb") as f:
        f.write(os.urandom(size))
PY
"$build/larder" pack "$work/src" -o "$work/www" --shard-size 64M >/dev/null
"$build/httpdelay" "$work/www" "$work/port" "$delay" 2>/dev/null &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
url=http://127.0.0.1:$(cat "$work/port")/index.larder
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
