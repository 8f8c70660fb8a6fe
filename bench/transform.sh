#!/usr/bin/env bash
# transform.sh - transforms next to the data (docs/transforms.md): a
# PyTorch training loop (larder.torch, DataLoader workers) on CPU 0 and
# larderd on CPU 1 (taskset), a compute sleep per step, each step a batch
# of JPEGs (800 x 600, a few hundred KB, made with PIL) decoded and resized
# to 224 x 224 (jpeg_decode_resize:224):
#
#   client-only      the loader workers decode (no daemon socket)
#   offload          larderd decodes on its core (its result cache off:
#                    every sample is decoded, none served twice; CPU limit
#                    100: other work on the machine does not send the work
#                    back, only its queue against the readers' budget)
#   burner-client    a CPU burner on larderd's core; the workers decode
#   burner-fallback  the same burner; larderd with its placement on, which
#                    should leave the decoding to the readers
#
# then one longer run with the daemon: the burner starts a third of the way
# in and stops at two thirds; the daemon's placement is polled every
# 0.25 s: how long it takes to settle each way, and switches per minute.
# Writes bench/results/transform.md and transform.png; AU is the median of
# RUNS runs (interleaved), the ratios are within one invocation.
#
#   bench/transform.sh            ~15 min: 2400 images, 5 runs
#   bench/transform.sh --quick    ~4 min: 800 images, 3 runs
#
# The compute step is set from what a decode costs here, so that the
# client core is the bottleneck by the same factor on any machine and at
# any decode speed: the CPU of a step's decodes (BATCH x the measured CPU
# of one, in-process on CPU 0) is LOADER_X (1.75) times the compute step.
# (At b317b9a the fixed 40 ms step was 1.7x: 16 x 4.3 ms; a faster decode
# under a fixed step makes the loader less of a bottleneck and caps what
# offloading can give at 1 / client-only AU.)  SLEEP_MS=40 fixes it.
#
# Environment: BUILD_DIR (build), IMAGES, RUNS, BATCH (16), WORKERS (2),
# SLEEP_MS (the compute step; default from LOADER_X), LOADER_X (1.75),
# RESULTS (bench/results/transform.md).
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
[ "${1:-}" = --quick ] && QUICK=1
BUILD_DIR=${BUILD_DIR:-build}
if [ $QUICK = 1 ]; then IMAGES=${IMAGES:-800} RUNS=${RUNS:-3} TIMELINE_S=${TIMELINE_S:-30}
else IMAGES=${IMAGES:-2400} RUNS=${RUNS:-5} TIMELINE_S=${TIMELINE_S:-60}; fi
BATCH=${BATCH:-16} WORKERS=${WORKERS:-2} SLEEP_MS=${SLEEP_MS:-} LOADER_X=${LOADER_X:-1.75}
RESULTS=${RESULTS:-bench/results/transform.md}
PNG=${RESULTS%.md}.png
SPEC=jpeg_decode_resize:224
PY=/usr/bin/python3
WORK=$PWD/bench/work/transform
CPUS=$(nproc --all)
[ "$CPUS" -ge 2 ] || { echo "transform.sh: needs two CPUs (one each side)" >&2; exit 1; }

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DLARDER_WERROR=ON >&2
fi
ninja -C "$BUILD_DIR" -j2 >&2
LARDER=$PWD/$BUILD_DIR/larder LARDERD=$PWD/$BUILD_DIR/larderd
export PYTHONPATH=$PWD/python LARDER_LIBRARY=$PWD/$BUILD_DIR/liblarder.so PYTHONWARNINGS=ignore
export LARDER_NO_PROGRESS=1
unset LARDER_CACHE LARDER_SOCKET

if [ ! -f "$WORK/ds-$IMAGES/index.larder" ]; then
  rm -rf "$WORK"
  mkdir -p "$WORK"
  echo "== making $IMAGES JPEGs ==" >&2
  $PY bench/transform.py make "$WORK" "$IMAGES"
  "$LARDER" pack "$WORK/src" -o "$WORK/ds-$IMAGES" --shard-size 64M >&2
  rm -rf "$WORK/src"
fi
INDEX=$WORK/ds-$IMAGES/index.larder
CACHE=$WORK/cache
rm -rf "$CACHE" "$WORK/runs" && mkdir -p "$WORK/runs"
"$LARDER" warm "$INDEX" --cache "$CACHE" >&2 # every run reads a warm node cache

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
step_note="a compute sleep of $SLEEP_MS ms per step"
if [ -z "$SLEEP_MS" ]; then
  decode_ms=$(taskset -c 0 $PY bench/transform.py cost "$INDEX" "$CACHE" "$SPEC")
  SLEEP_MS=$($PY -c "print(round($BATCH * $decode_ms / $LOADER_X))")
  step_note="a compute sleep of $SLEEP_MS ms per step (a decode takes $decode_ms ms of CPU \
here: the step's $BATCH decodes are $LOADER_X times the compute step)"
  echo "== a decode: $decode_ms ms of CPU; compute step $SLEEP_MS ms ==" >&2
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

start_larderd() { # extra options...
  rm -f "$WORK/sock"
  taskset -c 1 "$LARDERD" --cache "$CACHE" --socket "$WORK/sock" --transform-jobs 1 \
    --transform-cache 0 "$@" 2>>"$WORK/larderd.log" &
  daemon=$!
  pids+=("$daemon")
  for _ in $(seq 200); do
    [ -S "$WORK/sock" ] && "$LARDER" stat --socket "$WORK/sock" >/dev/null 2>&1 && return
    sleep 0.05
  done
  echo "larderd did not start: $(cat "$WORK/larderd.log")" >&2
  exit 1
}
stop_larderd() { kill "$daemon"; wait "$daemon" 2>/dev/null || true; }
start_burner() { taskset -c 1 $PY -c 'while True: pass' & burner=$!; pids+=("$burner"); }
stop_burner() { kill "$burner"; wait "$burner" 2>/dev/null || true; }

train() { # name run socket-or-empty
  local sock=$3
  env ${sock:+LARDER_SOCKET=$sock} taskset -c 0 \
    $PY bench/transform.py train "$WORK/runs/$1-$2.json" "$INDEX" "$CACHE" "$SPEC" \
    "$BATCH" "$WORKERS" "$SLEEP_MS" 5 2>&1 | sed "s/^/  $1 $2: /" >&2
}

for run in $(seq "$RUNS"); do
  echo "== run $run of $RUNS ==" >&2
  # what offloading gives: CPU never counts (other work on this shared
  # machine would send the work back), only the queue against the budget
  start_larderd --transform-cpu-limit 100
  train client "$run" ""
  train offload "$run" "$WORK/sock"
  "$LARDER" stat --socket "$WORK/sock" --json >"$WORK/runs/offload-$run.stat" || true
  "$LARDER" stat --socket "$WORK/sock" | grep -A2 '^transforms' | sed 's/^/  offload: /' >&2
  stop_larderd
  # the placement as shipped (limit 80%) with a burner on larderd's core
  start_larderd
  start_burner
  sleep 1
  train burner-client "$run" ""
  train burner-fallback "$run" "$WORK/sock"
  "$LARDER" stat --socket "$WORK/sock" | grep -A2 '^transforms' | sed 's/^/  fallback: /' >&2
  stop_burner
  stop_larderd
done

echo "== placement over $TIMELINE_S s, the burner on from 1/3 to 2/3 ==" >&2
start_larderd
rm -f "$WORK/stop"
$PY bench/transform.py watch "$LARDER" "$WORK/sock" "$WORK/timeline.json" "$WORK/stop" &
watcher=$!
pids+=("$watcher")
(
  end=$(( $(date +%s) + TIMELINE_S ))
  while [ "$(date +%s)" -lt "$end" ]; do
    LARDER_SOCKET=$WORK/sock taskset -c 0 \
      $PY bench/transform.py train "$WORK/timeline-train.json" "$INDEX" "$CACHE" "$SPEC" \
      "$BATCH" "$WORKERS" "$SLEEP_MS" 0 2>/dev/null || true
  done
) &
trainer=$!
pids+=("$trainer")
sleep $((TIMELINE_S / 3))
on=$($PY -c 'import time; print(time.time())')
start_burner
sleep $((TIMELINE_S / 3))
off=$($PY -c 'import time; print(time.time())')
stop_burner
wait "$trainer" || true
touch "$WORK/stop"
wait "$watcher" || true
stop_larderd
echo "{\"burner_on\": $on, \"burner_off\": $off}" >"$WORK/events.json"

note="$(date -u +%Y-%m-%d) at $(git rev-parse --short HEAD), \`bench/transform.sh$([ $QUICK = 1 ] && echo ' --quick')\`: \
$IMAGES JPEGs of 800 x 600 ($(du -sh "$WORK/ds-$IMAGES" | cut -f1) packed), $SPEC, global batch $BATCH, \
$WORKERS DataLoader workers, $step_note; the training process and its \
workers on CPU 0, larderd (--transform-jobs 1, result cache off; --transform-cpu-limit 100 for the \
offloaded run, the default 80 for the others) on CPU 1; the readers' budget their default (their step \
budget: reads in flight x a decode's CPU); a warm node cache; \
$CPUS CPUs on the machine, shared with other work (absolute figures are noise, ratios are the result); \
load average (1, 5, 15 min) $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end."
$PY bench/transform.py report "$RESULTS" "$PNG" "$WORK"/runs/*.json -- \
  "$WORK/timeline.json" "$WORK/events.json" "$note"
