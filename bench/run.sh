#!/usr/bin/env bash
# run.sh - build what the format benchmarks need and run them, writing
# bench/results/format.md: the machine, the date, the command, and the
# tables of bench/index_open.c and bench/pack_throughput.sh.
#
#   bench/run.sh                       # 5M-sample index, 2,000-sample pack tree
#   INDEX_SAMPLES=500000 PACK_SAMPLES=500 bench/run.sh   # a quick look
#
# Environment: BUILD_DIR (default build-bench: its own build tree, so a
# run never races a build in build/), INDEX_SAMPLES (default 5000000),
# INDEX_LOOKUPS (default 1000000), INDEX_RUNS (default 5), PACK_SAMPLES
# (default 2000), PACK_ROUNDS (default 3), RESULTS (default
# bench/results/format.md).  Scratch files go to bench/work/ (ignored by
# git) and are removed afterwards, except the generated pack input, which
# is reused by the next run.  Takes under a minute on an idle 2-core
# machine (a few more the first time, to generate the pack input).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench}
INDEX_SAMPLES=${INDEX_SAMPLES:-5000000}
INDEX_LOOKUPS=${INDEX_LOOKUPS:-1000000}
INDEX_RUNS=${INDEX_RUNS:-5}
RESULTS=${RESULTS:-bench/results/format.md}
export PACK_SAMPLES=${PACK_SAMPLES:-2000} PACK_ROUNDS=${PACK_ROUNDS:-3}

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DLARDER_WERROR=ON >&2
fi
ninja -C "$BUILD_DIR" larder_cli larder_bench_index >&2

mkdir -p bench/work "$(dirname "$RESULTS")"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$EPOCHREALTIME
echo "== index open and lookup ($INDEX_SAMPLES samples) ==" >&2
index_table=$("$BUILD_DIR/larder_bench_index" --samples "$INDEX_SAMPLES" \
    --lookups "$INDEX_LOOKUPS" --runs "$INDEX_RUNS" --index bench/work/index.larder)
echo "== pack throughput ($PACK_SAMPLES samples) ==" >&2
pack_table=$(LARDER="$BUILD_DIR/larder" bench/pack_throughput.sh)
elapsed=$(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.0f", b - a}')
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
build_type=${build_type:-RelWithDebInfo (the project default)}
compiler=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
revision=$(git rev-parse --short HEAD 2>/dev/null || echo "no commit yet")
dirty=$(git status --porcelain 2>/dev/null | wc -l)

tmp=$RESULTS.tmp
{
    echo "# Dataset format benchmarks"
    echo
    echo "Written by \`bench/run.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'); the run took ${elapsed} s."
    echo "Source: $revision ($dirty changed or untracked paths in the work tree)."
    echo
    echo "Reproduce: \`INDEX_SAMPLES=$INDEX_SAMPLES INDEX_LOOKUPS=$INDEX_LOOKUPS INDEX_RUNS=$INDEX_RUNS PACK_SAMPLES=$PACK_SAMPLES PACK_ROUNDS=$PACK_ROUNDS bench/run.sh\`"
    echo "(the defaults). Absolute times on a shared machine are noise: compare the"
    echo "ratios, which come from one run."
    echo
    echo "## Machine"
    echo
    echo '```'
    echo "nproc: $(nproc)"
    echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')"
    echo "uname: $(uname -srmo)"
    free -h | sed -n '1,2p'
    echo "scratch disk: $(df -hT bench/work | awk 'NR == 2 {print $2 ", " $3 " total, " $5 " free, on " $1}')"
    echo "load average (1, 5, 15 min): $load_before at the start, $load_after at the end"
    echo "compiler: $compiler ($("$compiler" --version | head -1)), build type $build_type"
    echo '```'
    echo
    echo "$index_table"
    echo
    echo "$pack_table"
} >"$tmp"
mv "$tmp" "$RESULTS"
echo "wrote $RESULTS" >&2
