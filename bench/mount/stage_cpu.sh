#!/usr/bin/env bash
# What staging a whole file on its first open costs `larder mount`: a
# --files index of one large file mounted over slowfs with no delays
# (profile none: the emulator's own FUSE copies are all it adds), the file
# opened once and nothing read, until the mount's log says it is staged.
# Prints, per run, the seconds that took and the CPU seconds the mount
# process and slowfs used (/proc, 10 ms steps).  Binaries are alternated.
#
#   bench/mount/stage_cpu.sh WORK [RUNS] [LARDER...]
#
# WORK holds data/ (the file) and index/index.larder (its --files index) as
# bench/mount/run.py leaves them (bench/work/mount after bench/mount.sh).
# RUNS per binary (default 3); LARDER the binaries (default build/larder).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
[ $# -ge 1 ] || { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
work=$(cd "$1" && pwd)
runs=${2:-3}
shift $(($# >= 2 ? 2 : 1))
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$PWD/build/larder")
bench_need_fuse stage_cpu
bench_build build slowfs
[ -f "$work/index/index.larder" ] || { echo "no $work/index/index.larder" >&2; exit 2; }
slow=$work/slow mnt=$work/lm-stage cache=$work/cache-stage log=$work/stage.log
cleanup() { bench_unmount "$mnt"; bench_unmount "$slow"; }
trap cleanup EXIT

cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }

for ((run = 0; run < runs; run++)); do
  for bin in "${bins[@]}"; do
    rm -rf "$cache" "$log" && mkdir -p "$mnt" "$slow"
    build/slowfs "$work/data" "$slow" --profile none -f 2>/dev/null &
    slowfs=$!
    for _ in $(seq 100); do grep -qs " $slow fuse" /proc/self/mounts && break; sleep 0.05; done
    "$bin" mount "$work/index/index.larder" "$mnt" --cache "$cache" --log "$log"
    pid=$(awk -v m="$mnt" '$0 ~ "mounted at " m ":" { sub(/.*larder mount\[/, ""); sub(/\].*/, ""); print; exit }' "$log")
    head -c 1 "$mnt"/"$(ls "$mnt" | head -1)" >/dev/null
    for _ in $(seq 3000); do grep -q "staged sample" "$log" && break; sleep 0.1; done
    took=$(sed -n 's/.*staged sample [0-9]* ([0-9]* bytes) \([0-9.]*\) s after.*/\1/p' "$log" | head -1)
    echo "$(basename "$bin") run $run: staged in ${took:-?} s, mount CPU $(cpu_s "$pid") s," \
      "slowfs CPU $(cpu_s "$slowfs") s"
    bench_unmount "$mnt"
    bench_unmount "$slow"
    wait "$slowfs" 2>/dev/null || true
  done
done
