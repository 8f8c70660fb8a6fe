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

quick=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: bench/eviction.sh [--quick]" >&2; exit 2 ;;
  esac
done

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

[ -e /dev/fuse ] || { echo "eviction: /dev/fuse is missing: slowfs cannot mount" >&2; exit 77; }
scripts/install-deps >/dev/null
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DLARDER_WERROR=ON >/dev/null
fi
ninja -C "$build" larder larder_cli liblarder.so slowfs larder_bench_nextuse >/dev/null

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
  if grep -qs " $mnt fuse" /proc/self/mounts; then
    fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" || true
  fi
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

/usr/bin/python3 bench/eviction.py --work "$work" --results "$results" --name "$name" \
  --samples "$samples" --batch "${BATCH:-64}" --ranks "${RANKS:-2}" --workers "${WORKERS:-2}" \
  --compute-ms "${COMPUTE:-150}" --epochs "${EPOCHS:-3}" --fractions "${FRACTIONS:-0.25,0.5,0.75}" \
  --profile "${PROFILE:-lustre-contended}" --fs-seed "${FS_SEED:-7}" --seed "${SEED:-1}" \
  --slowfs "$build/slowfs" --larder "$build/larder" --library "$build/liblarder.so" \
  --repeat "${REPEAT:-1}" --policies "${POLICIES:-clock,plan}" --command "$command" &
driver=$!
wait "$driver"
driver=""
