#!/usr/bin/env bash
# Eviction by next use (issue 14): a cache at 25%, 50% and 75% of the
# dataset, 3 epochs of a random plan (2 ranks x 2 DataLoader workers of
# larder.torch, a fixed compute sleep per step) over shards on the
# slow-storage emulator (slowfs), for the clock (LARDER_EVICT=clock, the
# policy before) and for next use (the default), against the offline
# optimum (bench/belady.py over the recorded block sequence).  Writes
# bench/results/eviction.md and eviction.png (bench/eviction.py does the
# work; it reuses bench/seed/'s data generator, mount and training ranks).
#
#   bench/eviction.sh            # the full benchmark (about 10 minutes on 2 cores)
#   bench/eviction.sh --quick    # about 3 minutes: 640 samples; writes
#                                # bench/work/eviction-quick/eviction-quick.md only
#
# Environment: SAMPLES (2560 [640]), BATCH (64), RANKS (2), WORKERS (2),
#   COMPUTE (150 ms), EPOCHS (3), FRACTIONS (0.25,0.5,0.75), PROFILE
#   (lustre-contended), FS_SEED (7), SEED (1), BUILD_DIR (build), REPEAT (1:
#   rounds of every run, medians reported), POLICIES (clock,plan; "plan"
#   skips the clock's runs).
# Needs /dev/fuse (slowfs); every mount is undone and every process it
# started ended on exit, failure or signal.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

quick=0
bench_options "bench/eviction.sh [--quick]" "$@"

build=${BUILD_DIR:-build}
if [ "$quick" = 1 ]; then
  work=$PWD/bench/work/eviction-quick results=$work name=eviction-quick samples=${SAMPLES:-640}
  command="bench/eviction.sh --quick"
else
  work=$PWD/bench/work/eviction results=$PWD/bench/results name=eviction samples=${SAMPLES:-2560}
  command="bench/eviction.sh"
fi
for var in SAMPLES BATCH RANKS WORKERS COMPUTE EPOCHS FRACTIONS PROFILE FS_SEED SEED REPEAT POLICIES; do
  if [ -n "${!var:-}" ]; then command="$var=${!var} $command"; fi  # as the report names it
done
mkdir -p "$work"
mnt=$work/mnt

bench_need_fuse eviction
scripts/install-deps >/dev/null
bench_build "$build" larder larder_cli liblarder.so slowfs larder_bench_nextuse

bench_guard "$work" "$mnt"

/usr/bin/python3 bench/eviction.py --work "$work" --results "$results" --name "$name" \
  --samples "$samples" --batch "${BATCH:-64}" --ranks "${RANKS:-2}" --workers "${WORKERS:-2}" \
  --compute-ms "${COMPUTE:-150}" --epochs "${EPOCHS:-3}" --fractions "${FRACTIONS:-0.25,0.5,0.75}" \
  --profile "${PROFILE:-lustre-contended}" --fs-seed "${FS_SEED:-7}" --seed "${SEED:-1}" \
  --slowfs "$build/slowfs" --larder "$build/larder" --library "$build/liblarder.so" \
  --repeat "${REPEAT:-1}" --policies "${POLICIES:-clock,plan}" --command "$command" &
driver=$!
wait "$driver"
driver=""
