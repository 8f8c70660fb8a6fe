#!/usr/bin/env bash
# The mount benchmark (issue 13): h5py reading the seed benchmark's HDF5
# file with bench/seed/train.py's harness (2 ranks over gloo, DataLoader
# workers, a compute sleep per step) three ways in one run -- straight
# from the slow-storage emulator (tools/slowfs), through `larder mount` of
# a --files index of the emulator's directory, by default (staging on
# open) and with --no-stage-on-open (epoch 1 cold, 2 and 3
# warm), and from local disk -- then cached throughput through the mount
# against the same reads of the cache's data file.  Writes
# bench/results/mount.md and mount.png.
#
#   bench/mount.sh            # the full benchmark (about 15 minutes on 2 cores; the
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

quick=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: bench/mount.sh [--quick]" >&2; exit 2 ;;
  esac
done

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

[ -e /dev/fuse ] || { echo "mount: /dev/fuse is missing" >&2; exit 77; }
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DLARDER_WERROR=ON >/dev/null
fi
ninja -C "$build" larder_cli slowfs >/dev/null

driver=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
    kill -TERM "$driver" 2>/dev/null || true
    wait "$driver" 2>/dev/null || true
  fi
  if [ -s "$work/pids" ]; then
    while read -r kind group; do
      if [ "$kind" = rank ]; then kill -KILL -- "-$group" 2>/dev/null || true; fi
    done <"$work/pids"
  fi
  for m in "$work/lmnt" "$work/tmnt" "$work/slow"; do
    if grep -qs " $m fuse" /proc/self/mounts; then
      fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" || true
    fi
  done
  if [ -s "$work/pids" ]; then
    while read -r kind group; do
      if [ "$kind" = slowfs ]; then kill -TERM -- "-$group" 2>/dev/null || true; fi
    done <"$work/pids"
    rm -f "$work/pids"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

/usr/bin/python3 bench/mount/run.py --work "$work" --results "$results" --samples "$samples" \
  --batch "${BATCH:-64}" --ranks "${RANKS:-2}" --workers "${WORKERS:-2}" \
  --compute-ms "${COMPUTE:-150}" --epochs "${EPOCHS:-3}" --profile "${PROFILE:-lustre-contended}" \
  --fs-seed "${FS_SEED:-7}" --seed "${SEED:-1}" --slowfs "$build/slowfs" --larder "$build/larder" \
  "${extra[@]}" &
driver=$!
wait "$driver"
driver=""
if [ "$quick" != 1 ]; then cat "$results/mount.md"; fi
