#!/usr/bin/env bash
# The seed experiment (issue 6), reproduced as one command: direct reads
# (PyTorch + h5py, PyTorch over one file per sample) against larder's
# epochs 1 (cold) to 3, on an emulated slow shared file system (slowfs),
# in an emulated data-parallel training run (2 ranks, gloo, a fixed
# compute sleep per step).  Writes bench/results/seed.md and the plots
# bench/results/seed-waits.png and seed-ccdf.png; about 11 minutes on 2
# cores (the first run also generates the dataset: 3 x 3.7 GB under
# bench/work/seed, reused afterwards).
#
#   bench/seed.sh            # the full benchmark
#   bench/seed.sh --quick    # a ~1 minute cut: prints the table, writes only
#                            # under bench/work/seed-quick (SEED_QUICK=1 too)
#
# Environment (defaults for the full run; the quick cut in brackets):
#   SAMPLES (12800 [960]), BATCH (64), RANKS (2), WORKERS (2, per rank),
#   COMPUTE (150, ms per step), EPOCHS (3, larder's), PROFILE
#   (lustre-contended; nfs-flash also exists), FS_SEED (7), SEED (1),
#   CONFIGS (memory,h5,files,larder [h5,files,larder]), BUILD_DIR (build),
#   SEED_WORK (bench/work/seed [bench/work/seed-quick]: data, mount, cache).
# A PROFILE other than lustre-contended writes seed-PROFILE.md instead.
# Run it from a clean checkout: the results name the commit measured, and
# claim none when the tree had uncommitted changes.  They describe slowfs's
# profile from the parameters slowfs itself reported during the run.
# Needs root (or fusermount3 rights) and /dev/fuse.  Every mount is undone
# and every process it started is ended on exit, on failure and on signals.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

quick=${SEED_QUICK:-0}
bench_options "bench/seed.sh [--quick]" "$@"

build=${BUILD_DIR:-build}
profile=${PROFILE:-lustre-contended}
if [ "$quick" = 1 ]; then
  work=${SEED_WORK:-$PWD/bench/work/seed-quick}
  results=$work
  name=seed-quick
  samples=${SAMPLES:-960}
  configs=${CONFIGS:-h5,files,larder}
  extra=(--no-plots --print --timeout 300 --command "bench/seed.sh --quick")
else
  work=${SEED_WORK:-$PWD/bench/work/seed}
  results=$PWD/bench/results
  name=seed
  [ "$profile" = lustre-contended ] || name=seed-$profile
  samples=${SAMPLES:-12800}
  configs=${CONFIGS:-memory,h5,files,larder}
  extra=(--command "bench/seed.sh")
  [ "$profile" = lustre-contended ] || extra=(--command "PROFILE=$profile bench/seed.sh")
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
mnt=$work/mnt

bench_need_fuse seed
scripts/install-deps >/dev/null
bench_build "$build" liblarder.so larder_cli slowfs # "larder" alone names the CLI's file, not the library

bench_guard "$work" "$mnt"

# a mount left by a run that was killed outright
bench_unmount "$mnt"
rm -f "$work/pids"

/usr/bin/python3 bench/seed/run.py --work "$work" --results "$results" --name "$name" \
  --samples "$samples" --batch "${BATCH:-64}" --ranks "${RANKS:-2}" --workers "${WORKERS:-2}" \
  --compute-ms "${COMPUTE:-150}" --epochs "${EPOCHS:-3}" --configs "$configs" \
  --profile "$profile" --fs-seed "${FS_SEED:-7}" --seed "${SEED:-1}" \
  --slowfs "$build/slowfs" --larder "$build/larder" --library "$build/liblarder.so" \
  "${extra[@]}" &
driver=$!
wait "$driver"
driver=""
if [ "$quick" != 1 ]; then
  cat "$results/$name.md"
fi
