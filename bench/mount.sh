#!/usr/bin/env bash
# The mount benchmark (issue 13): h5py reading the seed benchmark's HDF5
# file with bench/seed/train.py's harness (2 ranks over gloo, DataLoader
# workers, a compute sleep per step) three ways in one run -- straight
# from the slow-storage emulator (tools/slowfs), through `larder mount` of
# a --files index of the emulator's directory, by default (staging on
# open), by default with the harness's sampler order registered for the
# file (docs/mount.md, "A registered row order for an HDF5 file") and with
# --no-stage-on-open (epoch 1 cold, 2 and 3
# warm), and from local disk -- then cached throughput through the mount
# against the same reads of the cache's data file.  Writes
# bench/results/mount.md and mount.png.
#
#   bench/mount.sh            # the full benchmark (about 17 minutes on 2 cores; the
#                             # first run also generates the seed benchmark's dataset,
#                             # 3 x 3.7 GB under bench/work/mount, reused afterwards)
#   bench/mount.sh --quick    # a cut of 2-4 minutes: prints the table, writes only
#                             # under bench/work/mount-quick
#
# Environment (defaults; the quick cut in brackets): SAMPLES (12800, the
# seed benchmark's file [960]), DIRECT_STEPS (50 [all]: the emulator's
# epoch is cut there), BATCH (64), RANKS (2), WORKERS (2), COMPUTE (150 ms), EPOCHS (3),
# PROFILE (lustre-contended), FS_SEED (7), SEED (1), REPEATS (3 [1]),
# SECONDS (2 [1]), BUILD_DIR (build), MOUNT_WORK (bench/work/mount
# [bench/work/mount-quick]).  Needs root (or fusermount3 rights) and
# /dev/fuse.  Every mount is undone and every process ended on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

quick=0
bench_options "bench/mount.sh [--quick]" "$@"

build=${BUILD_DIR:-build}
if [ "$quick" = 1 ]; then
  work=${MOUNT_WORK:-$PWD/bench/work/mount-quick}
  results=$work
  samples=${SAMPLES:-960}
  extra=(--no-plots --print --timeout 300 --command "bench/mount.sh --quick"
    --repeats "${REPEATS:-1}" --seconds "${SECONDS_EACH:-1}")
else
  work=${MOUNT_WORK:-$PWD/bench/work/mount}
  results=$PWD/bench/results
  samples=${SAMPLES:-12800}
  extra=(--command "bench/mount.sh" --repeats "${REPEATS:-3}" --seconds "${SECONDS_EACH:-2}"
    --direct-steps "${DIRECT_STEPS:-50}")
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)

bench_need_fuse mount
bench_build "$build" larder_cli slowfs

bench_guard "$work" "$work/lmnt" "$work/tmnt" "$work/slow"

/usr/bin/python3 bench/mount/run.py --work "$work" --results "$results" --samples "$samples" \
  --batch "${BATCH:-64}" --ranks "${RANKS:-2}" --workers "${WORKERS:-2}" \
  --compute-ms "${COMPUTE:-150}" --epochs "${EPOCHS:-3}" --profile "${PROFILE:-lustre-contended}" \
  --fs-seed "${FS_SEED:-7}" --seed "${SEED:-1}" --slowfs "$build/slowfs" --larder "$build/larder" \
  "${extra[@]}" &
driver=$!
wait "$driver"
driver=""
if [ "$quick" != 1 ]; then cat "$results/mount.md"; fi
