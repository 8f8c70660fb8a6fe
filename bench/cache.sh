#!/usr/bin/env bash
# The node cache's benchmarks (issue 3), in one run, into bench/results/cache.md:
#   1. warm-cache reads against raw pread of the same ranges (bench/cache_read.c)
#   2. and 3. cold and warm epochs against an HTTP origin 20 ms away,
#      one to 64 requests in flight (bench/cache_http.sh)
# Builds what it needs into ${BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
scripts/install-deps >/dev/null
cmake -S . -B "$build" -G Ninja >/dev/null && ninja -C "$build" larder_cli larder_bench_cache httpdelay >/dev/null
out=bench/results/cache.md
{
  echo "# Node cache benchmarks"
  echo
  echo "Written by \`bench/cache.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores;"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'). Timings on a shared 2-core"
  echo "machine are noisy: read the ratios, which come from one run."
  echo
  echo "## 1. Warm-cache reads against raw pread"
  echo
  echo "Each sample size: a flat dataset of about ${CACHE_MB:-256} MB staged in the cache, then"
  echo "rounds (median of ${ROUNDS:-5}) of larder_read_sample over every sample in a shuffled"
  echo "order, pread(2) of the same ranges from the same cache files (precomputed in reading"
  echo "order), and pread(2) with the range looked up by sample id in a table of the reader's"
  echo "own (24 bytes a sample, as any reader of raw files needs), the three in a rotating order;"
  echo "same order, same buffer. All read the page cache. larder checks each sample's checksum"
  echo "on its first read in a process (here, the warming pass) and after anything changed under it."
  echo
  "$build/larder_bench_cache" --total-mb "${CACHE_MB:-256}" --rounds "${ROUNDS:-5}" --dir bench/work/cache
  echo
  echo "## 2 and 3. An HTTP origin 20 ms away"
  echo
  BUILD_DIR=$build bench/cache_http.sh >/dev/null
  tail -n +7 bench/results/cache_http.md
} >"$out.tmp"
mv "$out.tmp" "$out"
rm -f bench/results/cache_http.md
cat "$out"
