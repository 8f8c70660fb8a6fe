#!/usr/bin/env bash
# pack_throughput.sh - how fast `larder pack` turns a directory tree into
# shards, next to `tar cf` of the same tree on the same disk, in one run.
#
# Generates (once, reused while its parameters match) a tree of
# PACK_SAMPLES samples of two files each, "jpg" ~74 KiB and "cls" ~212 KiB
# of random bytes, under bench/work/pack/input.  Then, alternating the
# methods round by round (PACK_ROUNDS rounds, median reported):
#
#   tar        tar cf OUT.tar -C input .  then  sync OUT.tar (fsync of the
#              file), timed together: larder pack fsyncs every shard and
#              the index, so tar pays for durability too
#   pack-seq   larder pack --no-shuffle --jobs 1
#   pack       larder pack (default: shuffled, --jobs = CPUs)
#   pack-flat  larder pack --format flat (shuffled, default jobs)
#   pack-128M  larder pack --shard-size 128M (extra row: with the default
#              1 GiB shards a small tree is one shard, so --jobs cannot
#              help; this shows what several writer threads do)
#
# Caches cannot be dropped reliably here (no root on shared machines), so
# the input is read once before measuring and every run reads it from a
# warm page cache; each run starts after a `sync` (untimed) so no run
# pays for the previous one's dirty pages.  MB/s is input payload bytes
# (the sum of the file sizes) over wall time, including process start.
#
# Environment: LARDER (the CLI, default build/larder), PACK_SAMPLES
# (default 2000), PACK_ROUNDS (default 3), PACK_WORK (default
# bench/work/pack).  Prints a markdown table on stdout, progress on stderr.
set -euo pipefail

cd "$(dirname "$0")/.."
LARDER=${LARDER:-build/larder}
SAMPLES=${PACK_SAMPLES:-2000}
ROUNDS=${PACK_ROUNDS:-3}
WORK=${PACK_WORK:-bench/work/pack}
PYTHON=/usr/bin/python3

[ -x "$LARDER" ] || { echo "pack_throughput.sh: no CLI at $LARDER (build it first)" >&2; exit 1; }
mkdir -p "$WORK"
INPUT=$WORK/input
STAMP="samples=$SAMPLES jpg=74KiB cls=212KiB spread=8KiB seed=1"

if [ "$(cat "$WORK/input.stamp" 2>/dev/null)" != "$STAMP" ]; then
    echo "generating $SAMPLES samples in $INPUT ..." >&2
    rm -rf "$INPUT" "$WORK/input.stamp"
    mkdir -p "$INPUT/train"
    "$PYTHON" - "$INPUT/train" "$SAMPLES" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
for i in range(n):
    for ext, mean in (("jpg", 74 * 1024), ("cls", 212 * 1024)):
        size = mean + rng.randint(-8192, 8192)
        with open(os.path.join(root, "%09d.%s" % (i, ext)), "wb") as f:
            f.write(os.urandom(size))
EOF
    echo "$STAMP" >"$WORK/input.stamp"
fi

INPUT_BYTES=$(find "$INPUT" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
INPUT_FILES=$(find "$INPUT" -type f | wc -l)
# larder pack keeps every input file open until it finishes, so a tree of
# more files than the descriptor limit fails with EMFILE: say so up front.
if [ "$(ulimit -n)" != unlimited ] && [ "$INPUT_FILES" -ge "$(($(ulimit -n) - 16))" ]; then
    echo "pack_throughput.sh: $INPUT_FILES input files but 'ulimit -n' is $(ulimit -n);" \
        "larder pack holds every input file open and would fail (raise the limit)" >&2
    exit 1
fi
echo "warming the page cache with the input ($INPUT_FILES files) ..." >&2
find "$INPUT" -type f -exec cat {} + >/dev/null

OUT=$WORK/out
METHODS=(tar pack-seq pack pack-flat pack-128M)

command_of() { # method -> the command line it runs, writing into $OUT
    case $1 in
    tar) echo "tar cf '$OUT.tar' -C '$INPUT' . && sync '$OUT.tar'" ;;
    pack-seq) echo "'$LARDER' pack '$INPUT' -o '$OUT' --no-shuffle --jobs 1" ;;
    pack) echo "'$LARDER' pack '$INPUT' -o '$OUT'" ;;
    pack-flat) echo "'$LARDER' pack '$INPUT' -o '$OUT' --format flat" ;;
    pack-128M) echo "'$LARDER' pack '$INPUT' -o '$OUT' --shard-size 128M" ;;
    esac
}

# Every method runs under the same `/usr/bin/time bash -c`, which also
# gives its CPU time (user + system, children included).
run_method() {
    /usr/bin/time -f '%U %S' -o "$WORK/cpu" bash -c "$(command_of "$1")" >/dev/null
}

output_bytes() {
    if [ -e "$OUT.tar" ]; then stat -c %s "$OUT.tar"; else du -sb "$OUT" | cut -f1; fi
}

declare -A SECONDS_OF CPU_OF OUT_BYTES SHARDS_OF
for round in $(seq 1 "$ROUNDS"); do
    for m in "${METHODS[@]}"; do
        rm -rf "$OUT" "$OUT.tar"
        sync
        start=$EPOCHREALTIME
        run_method "$m"
        end=$EPOCHREALTIME
        seconds=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}')
        SECONDS_OF[$m]+="$seconds "
        CPU_OF[$m]+="$(awk '{printf "%.2f", $1 + $2}' "$WORK/cpu") "
        OUT_BYTES[$m]=$(output_bytes)
        if [ "$m" != tar ]; then
            SHARDS_OF[$m]=$(find "$OUT" -name 'shard-*' | wc -l)
            # untimed check, once per method: every sample reads back intact
            if [ "$round" = 1 ] && ! "$LARDER" verify "$OUT/index.larder" >/dev/null; then
                echo "pack_throughput.sh: larder verify failed for $m" >&2
                exit 1
            fi
        else
            SHARDS_OF[$m]=1
        fi
        echo "round $round $m: ${seconds} s" >&2
    done
done
rm -rf "$OUT" "$OUT.tar" "$WORK/cpu"

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

minimum() { tr ' ' '\n' | grep -v '^$' | sort -g | head -1; }

TAR_MEDIAN=$(echo "${SECONDS_OF[tar]}" | median)
TAR_BEST=$(echo "${SECONDS_OF[tar]}" | minimum)
echo "### Pack throughput ($SAMPLES samples, $INPUT_FILES files, $(awk -v b="$INPUT_BYTES" 'BEGIN {printf "%.1f", b / 1e6}') MB)"
echo
echo "Input: random bytes, \"jpg\" ~74 KiB and \"cls\" ~212 KiB per sample, read once before"
echo "measuring (caches are not dropped: every run reads a warm page cache). Rounds: $ROUNDS,"
echo "methods alternating within each round, \`sync\` (untimed) before each run; median wall"
echo "time. tar's time includes \`sync OUT.tar\` (fsync), since larder pack fsyncs each shard"
echo "and the index. MB/s = input payload bytes / median wall time; \"best\" uses the fastest"
echo "round. CPU = user + system seconds (median). Target: pack >= 0.8x tar's rate."
echo
echo "| method | command | shards | output MB | wall s, median [all rounds] | MB/s | vs tar | best MB/s | best vs tar | CPU s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for m in "${METHODS[@]}"; do
    case $m in
    tar) cmd='tar cf OUT.tar -C input . && sync OUT.tar' ;;
    pack-seq) cmd='larder pack input -o OUT --no-shuffle --jobs 1' ;;
    pack) cmd='larder pack input -o OUT' ;;
    pack-flat) cmd='larder pack input -o OUT --format flat' ;;
    pack-128M) cmd='larder pack input -o OUT --shard-size 128M' ;;
    esac
    med=$(echo "${SECONDS_OF[$m]}" | median)
    best=$(echo "${SECONDS_OF[$m]}" | minimum)
    cpu=$(echo "${CPU_OF[$m]}" | median)
    awk -v m="$m" -v cmd="$cmd" -v s="$med" -v all="${SECONDS_OF[$m]% }" -v tar="$TAR_MEDIAN" \
        -v best="$best" -v tar_best="$TAR_BEST" -v cpu="$cpu" \
        -v b="$INPUT_BYTES" -v o="${OUT_BYTES[$m]}" -v n="${SHARDS_OF[$m]}" 'BEGIN {
        gsub(/ /, ", ", all)
        printf "| %s | `%s` | %d | %.1f | %.2f [%s] | %.0f | %.2fx | %.0f | %.2fx | %.2f |\n",
            m, cmd, n, o / 1e6, s, all, b / 1e6 / s, tar / s, b / 1e6 / best, tar_best / best, cpu
    }'
done
