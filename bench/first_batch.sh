#!/usr/bin/env bash
# first_batch.sh - how long a PyTorch training loop waits for its first
# batch: larder.torch against a tar-streaming IterableDataset (Python
# tarfile, 1 MiB reads) over the same shards and a map-style DataLoader
# over the same samples in HDF5 (h5py), all on local disk with a warm page
# cache, and larder.torch from a cold HTTP origin 20 ms away (tools/
# httpdelay), each run in a fresh process (bench/first_batch.py), the runs
# of the readers interleaved.  Writes bench/results/first_batch.md with
# the median of RUNS runs of each.
#
#   bench/first_batch.sh
#   RUNS=9 WORKERS=2 bench/first_batch.sh
#
# Environment: BUILD_DIR (default build), SAMPLES (2000), SHARDS (8),
# WORKERS (4), BATCH (8), RUNS (5), RESULTS (bench/results/first_batch.md),
# PYTHON_DIR (default python: the larder package measured; another
# commit's python/ for a before-and-after, with this build's library).
# The data set is written once under bench/work/first_batch/ (ignored by
# git) and reused.
set -euo pipefail

cd "$(dirname "$0")/.."
source bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
SAMPLES=${SAMPLES:-2000} SHARDS=${SHARDS:-8} WORKERS=${WORKERS:-4} BATCH=${BATCH:-8}
RUNS=${RUNS:-5}
RESULTS=${RESULTS:-bench/results/first_batch.md}
PY=/usr/bin/python3
WORK=bench/work/first_batch

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DLARDER_WERROR=ON >&2
fi
ninja -C "$BUILD_DIR" >&2

if [ ! -f "$WORK/tar/index.larder" ] || [ ! -f "$WORK/data.h5" ]; then
    rm -rf "$WORK"
    mkdir -p "$WORK"
    echo "== writing $SAMPLES samples in $SHARDS shards ==" >&2
    $PY bench/first_batch.py make "$WORK" "$SAMPLES" "$SHARDS"
    LARDER_NO_PROGRESS=1 "$BUILD_DIR/larder" index "$WORK"/tar/*.tar -o "$WORK/tar/index.larder" >&2
fi
cat "$WORK"/tar/* "$WORK/data.h5" >/dev/null # warm the page cache: "local disk"

PYTHON_DIR=${PYTHON_DIR:-$PWD/python}
export PYTHONPATH=$PYTHON_DIR LARDER_LIBRARY=$PWD/$BUILD_DIR/liblarder.so PYTHONWARNINGS=ignore
unset LARDER_CACHE LARDER_SOCKET PYTHONDONTWRITEBYTECODE
# compiled as an installed package is (every other reader's modules are)
$PY -m compileall -q "$PYTHON_DIR/larder"
rm -rf "$WORK/cache-warm"
LARDER_NO_PROGRESS=1 "$BUILD_DIR/larder" warm "$WORK/tar/index.larder" --cache "$WORK/cache-warm" >/dev/null
runs=$(mktemp)
server=""
trap 'rm -f "$runs"; [ -z "$server" ] || kill "$server" 2>/dev/null' EXIT
start_httpdelay "$BUILD_DIR" "$WORK/tar" "$WORK" 20 # sets server and base_url
export FIRST_BATCH_URL=$base_url
for round in $(seq "$RUNS"); do
    for reader in larder tar h5py larder-warm larder-cold larder-http; do
        rm -rf "$WORK/cache-cold" "$WORK/cache-http"
        $PY bench/first_batch.py run $reader "$WORK" "$WORKERS" "$BATCH" >>"$runs"
    done
    echo "round $round of $RUNS done" >&2
done

commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo " (with uncommitted changes)" || true)
table=$($PY - "$runs" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
names = {"larder": "larder.torch, no cache",
         "tar": "tar streaming (tarfile, 1 MiB reads)",
         "h5py": "map-style over h5py (shuffled)",
         "larder-warm": "larder.torch, node cache holding every sample",
         "larder-cold": "larder.torch, empty node cache (created by the run)",
         "larder-http": "larder.torch, cold HTTP origin 20 ms away, empty node cache"}
print("| reader | first batch ms (median) | min | max | import | setup | iter() | first next() |")
print("|---|---|---|---|---|---|---|---|")
for reader in ("larder", "tar", "h5py", "larder-warm", "larder-cold", "larder-http"):
    mine = [r for r in rows if r["reader"] == reader]
    first = [r["first_ms"] for r in mine]
    part = lambda name: statistics.median(r[name] for r in mine)
    print(f"| {names[reader]} | {statistics.median(first):.1f} | {min(first):.1f} | "
          f"{max(first):.1f} | {part('import_ms'):.1f} | {part('setup_ms'):.1f} | "
          f"{part('iter_ms'):.1f} | {part('next_ms'):.1f} |")
PY
)
mkdir -p "$(dirname "$RESULTS")"
cat >"$RESULTS" <<EOF
# Time to the first batch

Written by \`bench/first_batch.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores;
commit $commit$dirty; larder package from $PYTHON_DIR; $($PY -c 'import torch; print("torch", torch.__version__)').
Reproduce: \`SAMPLES=$SAMPLES SHARDS=$SHARDS WORKERS=$WORKERS BATCH=$BATCH RUNS=$RUNS bench/first_batch.sh\`.

$SAMPLES samples (4 to 60 KiB of random bytes and a label each) in $SHARDS tar
shards on local disk, page cache warm, indexed in place by \`larder index\`;
the same samples in one HDF5 file. $WORKERS DataLoader workers, batch $BATCH;
every reader hands the loop \`{"bin": bytes, "cls": int}\` samples (larder
through \`decode=\`), so each batch is a list of bytes and a tensor of labels.
larder.torch is \`larder.torch.IterableDataset(..., batch_size=$BATCH)\` in a
\`larder.torch.DataLoader\` with the defaults (read_ahead=1, prefetch=8).
Each run is a fresh process that has imported torch; "first batch" is the
time from there to the first batch in the training loop: importing the
reader's module, building the dataset and loader, \`iter()\` (which starts
the workers) and the first \`next()\`. Median of $RUNS runs of each reader,
the runs interleaved; the last four columns are the medians of the parts
in ms. The HTTP origin is \`httpdelay\` (tools/httpdelay) serving the same
tar shards and index on loopback, answering every request 20 ms after it
arrives; that reader's node cache is removed before each of its runs.

$table
EOF
cat "$RESULTS"
