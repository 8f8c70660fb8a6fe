#!/usr/bin/env bash
# The restart storm (issue 12, "Measured"), on loopback, in one run:
#   1. N = 1, 4, 16, 64 readers spread over 4 daemons, each reading a whole
#      generated checkpoint through its node's daemon, unhinted and hinted,
#      against N readers straight from the origin: origin bytes / checkpoint,
#      time until all N hold it against one reader alone, the busiest
#      daemon's share of the bytes daemons served each other;
#   2. priorities: a training reader's per-step data wait with and without
#      background staging of the checkpoint on the same daemons;
#   3. predictive replication: an evaluation reader after
#      `larder hint replicate` makes no origin and no peer request;
#   4. the simulation (bench/sim/) at this scale, fed with the per-node
#      figures measured here, beside the measured figures.
# Writes bench/results/restart.md, restart.png (with matplotlib) and
# restart-measured.json (the figures the simulation reads).
#
#   bench/restart.sh            # the 2 GiB checkpoint of the issue
#   bench/restart.sh --quick    # 256 MiB (QUICK=1 too)
#
# Environment: SIZE (checkpoint bytes; 2 GiB, quick 256 MiB), READERS
# ("1 4 16 64"), ORIGIN_MBPS (slowfs's link, 10^6 bytes/s; 100), THREADS
# (READs in flight per reader; 16), CHUNK_KB (bytes per READ; 4096), VIA
# (socket: each reader sends raw READs over its daemon's socket, every byte
# sent by the daemon; files: each reads through the public file API with the
# node's cache, as `larder.open` does, resident ranges from the cache file),
# BASELINE_MAX_S (a direct-read run of N > 1 readers is stopped after
# this; 300: one reader alone, the yardstick, always runs to the end), STEPS,
# BATCH, COMPUTE_MS (the training reader: 300, 8, 20), ROUNDS (its runs
# beside each kind of background work, interleaved: 5), TRAIN_SAMPLES (its
# dataset: STEPS x BATCH, at least 2000, of 128 KiB), BUILD_DIR (build), RESULTS
# (bench/results/restart.md; restart-measured.json and restart.png go
# beside it), RESTART_WORK (scratch: bench/work/restart), HOW (which
# storms of part 1: "direct unhinted hinted"), PARTS (what else runs:
# "priorities replicate"; empty: part 1 and the simulation only), SCHED_IDLE (1: a
# hinted run with the daemons' background at SCHED_IDLE too, in each round), AB_ENV
# ("NAME=VALUE ...": a hinted run whose daemons have that environment too, in each
# round, for an A/B of a mechanism in one run), TRACE (1:
# each priorities run writes the daemons' request trace, LARDERD_TRACE, to
# RESTART_WORK/daemons-LABEL-ROUND.trace beside the reader's step trace
# train-LABEL-ROUND.trace, on one wall clock; bench/restart_trace.py lines
# them up), PIN (1: node 0 -- its daemon, the training reader, its clients -- on
# CPU 0, and the other three daemons and the origin on CPU 1, with taskset: on a
# real cluster the other nodes' replication work runs on their own cores, which
# unpinned on this machine it takes from node 0's reader; 0, the default: all
# share both cores).  Any
# READERS list works: the per-node figures come from the first storm.  Needs root (or fusermount3 rights)
# and /dev/fuse: the origin is tools/slowfs with a bandwidth cap.
#
# A part whose command is not on this branch yet (`larder index --files`,
# `larder hint hot`, `larder hint replicate`) is reported as "needs ...",
# never measured with a stand-in; without `index --files` the checkpoint's
# files are packed (each file one sample) and read as shards.
set -euo pipefail
# the whole script is one group, read before it runs: editing the file
# during a run does not change the run
{
cd "$(dirname "$0")/.."
load_start=$(cut -d' ' -f1-3 /proc/loadavg) # the machine's load (1, 5, 15 min) when the run began
[ "${1:-}" = --quick ] && QUICK=1
quick=${QUICK:-0}
build=${BUILD_DIR:-build}
if [ "$quick" = 1 ]; then size=${SIZE:-268435456}; else size=${SIZE:-2147483648}; fi
readers=${READERS:-"1 4 16 64"}
hows=${HOW:-"direct unhinted hinted"}
parts=${PARTS-"priorities replicate"}
wants() { [[ " $1 " == *" $2 "* ]]; }
origin_mbps=${ORIGIN_MBPS:-100}
threads=${THREADS:-16} chunk_kb=${CHUNK_KB:-4096}
via=${VIA:-socket}
baseline_max=${BASELINE_MAX_S:-300}
steps=${STEPS:-300} batch=${BATCH:-8} compute_ms=${COMPUTE_MS:-20}
train_rounds=${ROUNDS:-5}
# every step reads samples not read before (a cold dataset all the way)
train_samples=${TRAIN_SAMPLES:-$((steps * batch > 2000 ? steps * batch : 2000))}
out=${RESULTS:-bench/results/restart.md}
results=$(dirname "$out")
mkdir -p "$results"
daemons=4
py=/usr/bin/python3

[ -e /dev/fuse ] || { echo "restart: needs /dev/fuse: the origin is slowfs" >&2; exit 77; }
command -v fusermount3 >/dev/null || { echo "restart: needs fusermount3 (scripts/install-deps)" >&2; exit 77; }
scripts/install-deps >/dev/null
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" larder_cli larderd slowfs larder_bench_restart larder_bench_peer >/dev/null
case $build in /*) ;; *) build=$PWD/$build ;; esac
larder=$build/larder larderd=$build/larderd reader=$build/larder_bench_restart
work=${RESTART_WORK:-$PWD/bench/work/restart}
mnt=$work/mnt
pids=() jobs_=()

cleanup() {
  trap - EXIT INT TERM HUP
  for p in "${jobs_[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${jobs_[@]}" "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # slowfs ends once unmounted: not waited for before that
  if grep -qs " $mnt fuse" /proc/self/mounts; then
    fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" || true
  fi
  if [ -n "${slowfs_pid:-}" ]; then
    kill "$slowfs_pid" 2>/dev/null || true
    wait "$slowfs_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# has COMMAND...: whether this branch's CLI knows the (sub)command
has() { "$larder" "$@" --help >/dev/null 2>&1; }
needs_files="needs \`larder index --files\` (branch files)"
needs_hint="needs \`larder hint hot\` (branch hints)"
needs_replicate="needs \`larder hint replicate\` (branch hints)"

# ---- the checkpoint and the origin -------------------------------------------------
if grep -qs " $mnt fuse" /proc/self/mounts; then fusermount3 -u "$mnt" || umount -l "$mnt"; fi
rm -rf "$work" && mkdir -p "$work/src" "$work/origin/train" "$mnt"
# the files of bench/sim/params/checkpoint.json, sized as the simulation sizes them
$py - "$work/src" "$size" <<'PY'
import json, os, sys
sys.path.insert(0, "bench/sim")
from storm import split_sizes
spec = json.load(open("bench/sim/params/checkpoint.json"))
root, total = sys.argv[1], int(sys.argv[2])
for name, size in zip(spec["file_names"], split_sizes(total, spec["files"])):
    with open(os.path.join(root, name), "wb") as f:
        left = size
        while left:
            n = min(left, 16 << 20)
            f.write(os.urandom(n))
            left -= n
PY
if "$larder" index --help 2>&1 | grep -q -- '--files DIR'; then
  cp -r "$work/src" "$work/origin/ckpt"
  "$larder" index --files "$work/origin/ckpt" -o "$work/origin/ckpt/index.larder" >/dev/null
  layout="indexed in place with \`larder index --files\`"
else
  # small shards: every file above 1 MiB is a shard of its own, as it would
  # be a file of its own with \`index --files\`
  "$larder" pack "$work/src" -o "$work/origin/ckpt" --shard-size 1M >/dev/null
  layout="packed into $(find "$work/origin/ckpt" -name 'shard-*' | wc -l) shards, each file one sample and each large file a shard of its own ($needs_files to index them in place)"
fi
rm -rf "$work/src"
# the training reader's dataset: samples of 128 KiB
source bench/lib.sh
random_samples "$work/train-src" "$train_samples" 131072
"$larder" pack "$work/train-src" -o "$work/origin/train" --shard-size 8M >/dev/null
rm -rf "$work/train-src"
ckpt_files=$(find "$work/origin/ckpt" -type f ! -name index.larder | sort)
ckpt_bytes=$(cat $ckpt_files | wc -c)

# pin N: the command prefix that puts node N's processes on its CPU (PIN=1;
# N: a daemon's number, "origin" for slowfs), nothing otherwise
pin() {
  [ "${PIN:-0}" = 1 ] || return 0
  if [ "$1" = 0 ]; then echo "taskset -c 0"; else echo "taskset -c 1"; fi
}
$(pin origin) "$build/slowfs" "$work/origin" "$mnt" --profile none --bandwidth "$origin_mbps" -f 2>"$work/slowfs.log" &
slowfs_pid=$!
for _ in $(seq 100); do grep -qs " $mnt fuse" /proc/self/mounts && break; sleep 0.05; done
grep -qs " $mnt fuse" /proc/self/mounts || { echo "restart: slowfs did not mount" >&2; exit 1; }
index=$mnt/ckpt/index.larder train=$mnt/train/index.larder
origin_now() { $py -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes"])' "$mnt/.slowfs-stats"; }
seconds() { awk -v s="$1" -v e="$2" 'BEGIN { printf "%.3f", e - s }'; }

# ---- the cluster ---------------------------------------------------------------------
printf 'bench-secret\n' >"$work/secret"
start_cluster() { # four daemons with fresh caches, on fresh ports (sets base)
  local members="" i try
  for try in 1 2 3 4 5; do
    # a random block of ports; another program may hold one (this machine
    # is shared): then every daemon is stopped and another block is tried
    base=$((30000 + RANDOM % 20000)) members=""
    for ((i = 0; i < daemons; i++)); do members+="${members:+,}127.0.0.1:$((base + i))"; done
    for ((i = 0; i < daemons; i++)); do
      rm -rf "$work/cache$i" "$work/sock$i"
      $(pin $i) env ${daemon_env:-} LARDERD_TRACE=${daemon_trace:-} LARDER_BACKGROUND_SCHED=${daemon_sched:-} "$larderd" --cache "$work/cache$i" --socket "$work/sock$i" --listen "127.0.0.1:$((base + i))" \
        --peers "$members" --secret-file "$work/secret" 2>>"$work/daemon.log" &
      pids+=($!)
    done
    for ((i = 0; i < daemons; i++)); do
      for _ in $(seq 100); do [ -S "$work/sock$i" ] && break; sleep 0.05; done
    done
    sleep 0.2
    local alive=1
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || alive=0; done
    [ $alive = 1 ] && return 0
    echo "restart: a daemon did not start (port taken?), trying other ports" >&2
    stop_cluster
  done
  echo "restart: could not start $daemons daemons" >&2
  return 1
}
stop_cluster() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
# skipped: how many times a daemon has passed over an owner that did not
# answer in time and read the origin instead (daemon.log, all runs so far)
skipped() { grep -c 'skipped for' "$work/daemon.log" || true; }
# hedges: origin reads the daemons doubled because the first was slow
# (docs/cache.md, "Hedges"), from each cache's hedge-budget totals
hedges() {
  $py - "$work" "$daemons" <<'PY'
import os, struct, sys
total = 0
for i in range(int(sys.argv[2])):
    path = os.path.join(sys.argv[1], f"cache{i}", "hedge-budget")
    if os.path.exists(path):
        with open(path, "rb") as f:
            total += struct.unpack_from("=8sIIIIQQQ", f.read(48))[-1]
print(total)
PY
}
# stat NODE: the daemon's counters for the checkpoint, "key=value" lines
stat_node() {
  "$larder" stat --socket "$work/sock$1" --json | $py -c '
import json, sys
want = sys.argv[1]
for d in json.load(sys.stdin)["datasets"]:
    if d["dataset_id"] == want:
        for k, v in d.items():
            print(f"{k}={v}")' "$2"
}
ckpt_id=$("$larder" inspect "$index" --json | $py -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
stat_value() { stat_node "$1" "$ckpt_id" | sed -n "s/^$2=//p" | head -1; }

# wait_staged NODE...: until each daemon holds the whole checkpoint (600 s at most)
wait_staged() {
  local node r t
  for node in "$@"; do
    for _ in $(seq 1200); do
      r=$(stat_value "$node" resident_bytes) t=$(stat_value "$node" total_bytes)
      [ -n "$r" ] && [ "$r" = "$t" ] && continue 2
      sleep 0.5
    done
    echo "restart: daemon $node did not stage the checkpoint within 600 s" >&2
    return 1
  done
}

# storm N: N readers over the daemons, each reading the whole checkpoint;
# prints "seconds origin_bytes busiest_peer_share busiest_served_share skipped hedges"
storm() {
  local n=$1 r o0 o1 t0 t1 i s0
  s0=$(skipped)
  o0=$(origin_now)
  t0=$EPOCHREALTIME
  jobs_=()
  for ((r = 0; r < n; r++)); do
    # files: the node's cache too, which the file API reads resident ranges from
    local how=(read "$work/sock$((r % daemons))")
    [ "$via" = files ] && how=(files "$work/sock$((r % daemons))" "$work/cache$((r % daemons))")
    $(pin $((r % daemons))) "$reader" "${how[@]}" "$index" "$threads" "$chunk_kb" >"$work/reader$r.out" &
    jobs_+=($!)
  done
  local failed=0
  for p in "${jobs_[@]}"; do wait "$p" || failed=1; done
  jobs_=()
  t1=$EPOCHREALTIME
  [ $failed = 0 ] || { echo "restart: a reader failed (see $work/reader*.out, daemon.log)" >&2; return 1; }
  o1=$(origin_now)
  local peer=() served=()
  for ((i = 0; i < daemons; i++)); do
    peer+=("$(stat_value $i peer_served_bytes)") served+=("$(stat_value $i served_bytes)")
    # kept for a look afterwards: queue waits by class, what each served
    "$larder" stat --socket "$work/sock$i" --json >"$work/stat-$n-$i.json" 2>/dev/null || true
  done
  $py - "$(seconds "$t0" "$t1")" "$((o1 - o0))" "${peer[*]}" "${served[*]}" "$(($(skipped) - s0)) $(hedges)" <<'PY'
import sys
t, o, peer, served = sys.argv[1], sys.argv[2], [int(x or 0) for x in sys.argv[3].split()], [int(x or 0) for x in sys.argv[4].split()]
share = lambda v: max(v) / sum(v) if sum(v) else float("nan")
print(t, o, f"{share(peer):.3f}", f"{share(served):.3f}", sys.argv[5])
PY
}

# direct N: N readers reading every file of the checkpoint from the origin
direct() {
  local n=$1 r o0 o1 t0 t1 stopped=""
  o0=$(origin_now)
  t0=$EPOCHREALTIME
  jobs_=()
  for ((r = 0; r < n; r++)); do
    (cd "$mnt/ckpt" && exec cat $(find . -type f ! -name index.larder | sort)) >/dev/null &
    jobs_+=($!)
  done
  local deadline=$((SECONDS + baseline_max))
  while :; do
    local alive=0
    for p in "${jobs_[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    if [ $SECONDS -ge $deadline ]; then
      for p in "${jobs_[@]}"; do kill "$p" 2>/dev/null || true; done
      stopped=">"
      break
    fi
    sleep 0.2
  done
  for p in "${jobs_[@]}"; do wait "$p" 2>/dev/null || true; done
  jobs_=()
  t1=$EPOCHREALTIME
  o1=$(origin_now)
  echo "$stopped$(seconds "$t0" "$t1") $((o1 - o0))"
}

echo "restart: checkpoint $((ckpt_bytes / 1048576)) MiB, $layout; origin slowfs at $origin_mbps MB/s" >&2
# ---- 1. the storm ---------------------------------------------------------------------
declare -A row
# one reader alone, the yardstick: never stopped
baseline_keep=$baseline_max baseline_max=1000000000
read -r alone_s alone_bytes < <(direct 1)
baseline_max=$baseline_keep
# node_figures: per-node figures for the simulation, while node 0 holds the
# whole checkpoint (after a storm: reader 0 reads through daemon 0): what a
# daemon serves a peer, and what 16 local readers of a warm node read
node_figures() {
  [ -z "${serve_mbs:-}" ] || return 0
  read -r _ serve_mbs < <("$build/larder_bench_peer" "127.0.0.1:$base" "$index" bench-secret 16 4096)
  local t0=$EPOCHREALTIME r
  for r in $(seq 16); do "$reader" read "$work/sock0" "$index" "$threads" "$chunk_kb" >/dev/null & jobs_+=($!); done
  for p in "${jobs_[@]}"; do wait "$p"; done
  jobs_=()
  local_s=$(seconds "$t0" "$EPOCHREALTIME")
}
for n in $readers; do
  if wants "$hows" direct; then
    echo "restart: $n readers from the origin" >&2
    if [ "$n" = 1 ]; then row[direct,$n]="$alone_s $alone_bytes"; else row[direct,$n]=$(direct "$n"); fi
  fi
  if wants "$hows" unhinted; then
    echo "restart: $n readers through the daemons, unhinted" >&2
    start_cluster
    row[unhinted,$n]=$(storm "$n")
    node_figures
    stop_cluster
  fi
  if ! wants "$hows" hinted; then
    :
  elif has hint hot; then
    echo "restart: $n readers through the daemons, hinted" >&2
    start_cluster
    o0=$(origin_now) t0=$EPOCHREALTIME
    LARDER_SOCKET=$work/sock0 "$larder" hint hot "$index" --all-nodes --ttl 10m --wait >/dev/null
    wait_staged $(seq 0 $((daemons - 1)))
    replication_s=$(seconds "$t0" "$EPOCHREALTIME") o_hint=$(($(origin_now) - o0))
    read -r t o ps ss sk hg < <(storm "$n")
    row[hinted,$n]="$t $((o + o_hint)) $ps $ss $sk $hg $replication_s"
    node_figures
    stop_cluster
  else
    row[hinted,$n]="$needs_hint"
  fi
done
if [ -z "${serve_mbs:-}" ]; then # no storm through the daemons ran: one reader for the figures
  start_cluster
  storm 1 >/dev/null
  node_figures
  stop_cluster
fi

# ---- 2. priorities: a training reader beside background staging ---------------------
train_run() { # label, then the background command (or nothing)
  # TRACE=1: the daemons' request traces (src/larderd/trace.h) beside the reader's
  if [ "${TRACE:-0}" = 1 ]; then daemon_trace=$work/daemons-$1-$round.trace; rm -f "$daemon_trace"; fi
  [ "$1" = hinted-idle ] && daemon_sched=idle # background tasks at SCHED_IDLE (src/lib/pool.c)
  [ "$1" = hinted-ab ] && daemon_env=$AB_ENV # the A/B run's daemons' environment
  start_cluster
  daemon_trace= daemon_sched= daemon_env=
  local bg=()
  if [ "$1" = warm ]; then
    for ((i = 0; i < daemons; i++)); do
      $(pin $i) "$larder" warm "$index" --socket "$work/sock$i" >/dev/null 2>&1 &
      bg+=($!) jobs_+=($!)
    done
  elif [ "$1" = hinted ] || [ "$1" = hinted-idle ] || [ "$1" = hinted-ab ]; then
    LARDER_SOCKET=$work/sock0 $(pin 0) "$larder" hint hot "$index" --all-nodes --ttl 10m >/dev/null
  fi
  sleep 0.5
  local waits
  waits=$(RESTART_TRACE=$work/train-$1-$round.trace $(pin 0) "$reader" train "$work/sock0" "$train" "$steps" "$batch" "$compute_ms")
  for ((i = 0; i < daemons; i++)); do # kept for a look afterwards
    "$larder" stat --socket "$work/sock$i" --json >"$work/stat-train-$1-$i.json" 2>/dev/null || true
  done
  # where the daemons' CPU went in this run (all four, from their start): their
  # loop threads (the main thread: sockets, sendfile of every answer, peers'
  # too), their pool's foreground (DEMAND, NEAR) and background (HINTED, WARM)
  # tasks (STAT's classes cpu_us), and the processes in all; seconds
  echo "$waits $($py bench/restart_figures.py cpu "$work" "$1" "${pids[@]}")"
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  jobs_=()
  stop_cluster
}
declare -A pooled_row # the pooled estimator's figures by run kind (empty: part 2 not run)
skipped_part="not run (PARTS)"
train_idle=$skipped_part train_warm=$skipped_part train_hinted=$skipped_part train_control=$skipped_part
if wants "$parts" priorities; then
  echo "restart: priorities" >&2
  # ROUNDS rounds, the three runs interleaved in each, so that the load of a
  # shared machine falls on all three alike; each figure is the median of
  # its rounds, and the p99 ratio to idle is taken within each round
  # Each round ends with a second idle run, the control: its p99 over the
  # round's first idle p99 is what this machine's noise alone does to the
  # ratio, against which hinted's and warm's ratios are to be judged.
  # SCHED_IDLE=1 adds a hinted run whose daemons run background tasks at SCHED_IDLE.
  idle_runs=() warm_runs=() hinted_runs=() control_runs=() sched_runs=() ab_runs=()
  for ((round = 1; round <= train_rounds; round++)); do
    idle_runs+=("$(train_run idle)")
    warm_runs+=("$(train_run warm)")
    if has hint hot; then hinted_runs+=("$(train_run hinted)"); fi
    if has hint hot && [ "${SCHED_IDLE:-0}" = 1 ]; then sched_runs+=("$(train_run hinted-idle)"); fi
    if has hint hot && [ -n "${AB_ENV:-}" ]; then ab_runs+=("$(train_run hinted-ab)"); fi
    control_runs+=("$(train_run control)")
  done
  medians() { printf '%s\n' "$@" | $py bench/restart_figures.py medians; } # of each column
  ratios() { $py bench/restart_figures.py ratios "$1" "$2"; } # p99 over its round's idle p99
  train_idle=$(medians "${idle_runs[@]}")
  train_control=$(medians "${control_runs[@]}")
  control_ratio=$(ratios "$(printf '%s\n' "${idle_runs[@]}")" "$(printf '%s\n' "${control_runs[@]}")")
  train_warm=$(medians "${warm_runs[@]}")
  warm_ratio=$(ratios "$(printf '%s\n' "${idle_runs[@]}")" "$(printf '%s\n' "${warm_runs[@]}")")
  if has hint hot; then
    train_hinted=$(medians "${hinted_runs[@]}")
    hinted_ratio=$(ratios "$(printf '%s\n' "${idle_runs[@]}")" "$(printf '%s\n' "${hinted_runs[@]}")")
    [ ${#sched_runs[@]} = 0 ] || train_sched=$(medians "${sched_runs[@]}") \
      sched_ratio=$(ratios "$(printf '%s\n' "${idle_runs[@]}")" "$(printf '%s\n' "${sched_runs[@]}")")
  else
    train_hinted="$needs_hint"
  fi
  # the estimator that judges the target: all rounds' steps pooled per kind
  # (the reader's step traces), the ratio of pooled p99s, a bootstrap interval
  [ ${#ab_runs[@]} = 0 ] || ab_label=hinted-ab
  for label in control warm hinted ${train_sched:+hinted-idle} ${ab_label:-}; do
    pooled_row[$label]=$($py bench/restart_figures.py pooled "$work" idle "$label")
  done
  # an extra measure beside the target's (the lead decides): each round's
  # first step left out (the daemon's OPEN of the reader's index and its
  # cold first borrows: once per dataset opened, not per step)
  for label in control hinted; do
    pooled_row[$label-after1]=$($py bench/restart_figures.py pooled "$work" idle "$label" 1)
  done
  # TRACE=1: where the slow steps' wait went, all rounds of each kind at once
  if [ "${TRACE:-0}" = 1 ]; then
    slow_steps=$($py bench/restart_trace.py summary "$work" idle control hinted warm ${train_sched:+hinted-idle} ${ab_label:-})
  fi
fi

# ---- 3. predictive replication ------------------------------------------------------------
if ! wants "$parts" replicate; then
  replicate=$skipped_part
elif has hint replicate; then
  echo "restart: predictive replication" >&2
  start_cluster
  target=$((daemons - 1))
  if LARDER_SOCKET=$work/sock0 "$larder" hint replicate "$index" --to "127.0.0.1:$((base + target))" \
    --ttl 10m --wait >"$work/replicate.out" 2>&1 && wait_staged $target; then
    before_o=$(stat_value $target origin_requests) before_p=$(stat_value $target peer_requests)
    "$reader" read "$work/sock$target" "$index" "$threads" "$chunk_kb" >/dev/null
    after_o=$(stat_value $target origin_requests) after_p=$(stat_value $target peer_requests)
    replicate="origin requests $((after_o - before_o)), peer requests $((after_p - before_p)) during the evaluation read (want 0 and 0)"
  else
    replicate="\`larder hint replicate\` failed: $(tail -1 "$work/replicate.out")"
  fi
  stop_cluster
else
  replicate="$needs_replicate"
fi

# ---- 4. the figures the simulation needs, and the simulation ---------------------------
# the origin's link: the most bytes/s the direct readers drew from it together
# (one reader alone draws less: slowfs's per-read overhead, about 1 ms);
# with no direct run of several readers, what one reader alone drew
origin_bw=$({ echo "1 $alone_s"; for k in "${!row[@]}"; do if [[ $k == direct,* ]]; then echo "${k#direct,} ${row[$k]}"; fi; done; } |
  awk -v b="$ckpt_bytes" '$2 !~ /^>/ && $2 > 0 { r = $1 * b / $2; if (r > m) m = r } END { printf "%.0f", m }')
local_bw=$(awk -v b="$ckpt_bytes" -v s="$local_s" 'BEGIN { printf "%.0f", 16 * b / s }')
cat >"$results/restart-measured.json" <<JSON
{
  "_": "Measured by bench/restart.sh on $(date -u '+%Y-%m-%d %H:%M UTC'): origin_bw is the most the direct readers drew from slowfs together (capped at $origin_mbps MB/s), origin_latency slowfs's overhead per read, about 1 ms; serve_bw what one daemon served a peer (larder_bench_peer, 16 x 4 MiB in flight); local_bw what 16 readers of one warm daemon read together. nic_bw: loopback has no NIC, so the serve rate bounds a node's traffic. peer_latency is assumed.",
  "nodes": $daemons,
  "checkpoint_bytes": $ckpt_bytes,
  "chunk_bytes": $((chunk_kb * 1024)),
  "window": $threads,
  "hint_window": $threads,
  "origin_bw": $origin_bw,
  "origin_latency": 0.001,
  "serve_bw": $(awk -v m="$serve_mbs" 'BEGIN { printf "%.0f", m * 1e6 }'),
  "nic_bw": 1e12,
  "peer_latency": 0.0002,
  "local_bw": $local_bw
}
JSON
sim_table=$($py bench/sim/run.py --params bench/sim/params/checkpoint.json \
  --params bench/sim/params/loopback.json --params "$results/restart-measured.json" \
  --loopback-sweep "$(echo $readers | tr ' ' ,)" | tail -n +2)
sim_json=$($py bench/sim/run.py --params bench/sim/params/checkpoint.json \
  --params bench/sim/params/loopback.json --params "$results/restart-measured.json" \
  --loopback-sweep "$(echo $readers | tr ' ' ,)" --json)

# ---- the report ------------------------------------------------------------------------------
table=$($py - "$ckpt_bytes" "$alone_s" "$readers" "$(for k in "${!row[@]}"; do printf '%s=%s\n' "$k" "${row[$k]}"; done)" <<'PY'
import sys
size, alone = int(sys.argv[1]), float(sys.argv[2])
rows = dict(line.split("=", 1) for line in sys.argv[4].splitlines() if line)
for n in sys.argv[3].split():
    for kind in ("direct", "unhinted", "hinted"):
        if f"{kind},{n}" not in rows:
            continue  # not run (HOW)
        v = rows[f"{kind},{n}"].split()
        if not v or not v[0].lstrip(">").replace(".", "").isdigit():
            print(f"| {n} | {kind} | {' '.join(v)} | | | | | | |")
            continue
        stopped = v[0].startswith(">")
        t = float(v[0].lstrip(">"))
        mark = ">" if stopped else ""
        share = lambda x: "-" if kind == "direct" or x == "nan" else x
        print(f"| {n} | {kind} | {mark}{t:.2f} | {mark}{t / alone:.2f}x | {int(v[1]) / size:.3f} "
              f"| {share(v[2] if len(v) > 2 else 'nan')} | {share(v[3] if len(v) > 3 else 'nan')} "
              f"| {v[4] if len(v) > 4 else '-'} | {v[5] if len(v) > 5 else '-'} "
              f"| {v[6] if len(v) > 6 else '-'} |")
PY
)
{
  echo "# The restart storm, on loopback"
  echo
  echo "Written by \`bench/restart.sh$([ "$quick" = 1 ] && echo " --quick")\` on $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores, shared;"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet -- . ':!bench/results' 2>/dev/null || echo ' with uncommitted changes');"
  echo "load average (1, 5, 15 min) $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end."
  echo "Checkpoint: $(awk -v b="$ckpt_bytes" 'BEGIN { printf "%.1f", b / 1048576 }') MiB, $($py -c 'import json; print(len(json.load(open("bench/sim/params/checkpoint.json"))["files"]))') files"
  echo "(bench/sim/params/checkpoint.json's mix), $layout. Origin: tools/slowfs, profile"
  echo "none, a shared link capped at $origin_mbps MB/s. $daemons larderd on loopback, each with its own cache."
  if [ "$via" = files ]; then
    echo "Each reader (\`larder_bench_restart files\`, VIA=files) reads every byte of the checkpoint as a"
    echo "program does through \`larder.open\`: the public file API with its node's cache and daemon (a"
    echo "resident range one pread of the cache file, a miss asked of the daemon); $chunk_kb KiB reads, $threads in"
    echo "flight, in file order, reader r on daemon r mod $daemons."
  else
    echo "Each reader (\`larder_bench_restart read\`) reads every byte of the checkpoint through its"
    echo "node's daemon: READs of $chunk_kb KiB, $threads in flight, in file order, reader r on daemon r mod $daemons."
  fi
  [ "${PIN:-0}" = 1 ] && echo "PIN=1: node 0 (its daemon, the training reader, its clients) on CPU 0; the other daemons and slowfs on CPU 1 (taskset)."
  echo "Direct: N \`cat\`s of every file straight from the mount (stopped after $baseline_max s: then \">\")."
  echo
  echo "## 1. N readers at once"
  echo
  echo "Time: until the last reader holds everything, against one reader alone straight from the"
  echo "origin ($alone_s s). Shares: the busiest daemon's part of the bytes daemons sent each other"
  echo "(peer) and of all bytes they sent (to readers too); 1/$daemons is perfect balance, the issue's target"
  echo "is at most $(awk -v d=$daemons 'BEGIN { printf "%.3f", 1.5 / d }') (1.5 / daemons). Hinted: the origin bytes include the replication."
  echo "Owners passed over: the times a daemon gave up waiting for a chunk's owner (its READ timed"
  echo "out, \"skipped for 10000 ms\" in the log) and read the origin itself: each costs origin bytes."
  echo "Hedged origin reads: reads of the origin a daemon sent twice because the first was slower than"
  echo "its recent p95 (docs/cache.md, \"Hedges\"; the caches' hedge-budget totals): on an origin whose"
  echo "link is the bottleneck, every hedge of a large read doubles its bytes."
  echo
  echo "| readers | how | seconds | vs one reader | origin bytes / checkpoint | busiest peer share | busiest served share | owners passed over | hedged origin reads | replication s |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "$table"
  echo
  echo "## 2. Priorities: a training reader beside background staging"
  echo
  echo "One reader on daemon 0 (\`larder_bench_restart train\`): $steps steps of $batch samples of 128 KiB"
  echo "from a cold dataset on the same origin, $compute_ms ms of compute a step; per-step data wait in ms."
  echo "$train_rounds rounds, idle, warm, hinted and idle again (the control) in each; each figure the"
  echo "median over the rounds, and p99 / idle the median of each round's p99 over that round's first"
  echo "idle p99 (the old per-round figure; the pooled table below judges the target). The control is nothing but the machine's noise: with"
  echo "$steps steps the p99 is step $(awk -v s=$steps 'BEGIN { printf "%d", s - int((s - 1) * 0.99) }') counted from the slowest, and its ratio between two idle runs says how far"
  echo "a ratio moves with no background at all. CPU pressure: the time in which some runnable task on"
  echo "the machine waited for a core (Linux PSI \"some\", whoever's task) during the reader's waits, ms"
  echo "per step, over all steps and over the steps at or above the p99 wait (-1: no PSI). Daemons' CPU:"
  echo "seconds of CPU the four daemons used from their start to the reader's end, on their loop threads"
  echo "(sockets and the sendfile of every answer, peers' included, at nice 0), in their pools' DEMAND"
  echo "and NEAR tasks, in their HINTED and WARM tasks (at nice 10), and in all."
  echo
  echo "| beside it | mean | p50 | p99 | max | CPU pressure, all steps | CPU pressure, p99 steps | daemons' CPU s: loops | DEMAND+NEAR | HINTED+WARM | all | p99 / idle |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for label in idle control warm hinted ${train_sched:+sched}; do
    case $label in
      idle) v=$train_idle what="nothing (idle)" ratio=1 ;;
      control) v=$train_control what="nothing again (control: idle vs idle)" ratio=${control_ratio:--} ;;
      warm) v=$train_warm what="\`larder warm\` of the checkpoint on every daemon (WARM class)" ratio=${warm_ratio:--} ;;
      hinted) v=$train_hinted what="\`larder hint hot\` of the checkpoint, all nodes (HINTED)" ratio=${hinted_ratio:--} ;;
      sched) v=$train_sched what="the same, background tasks at SCHED_IDLE (SCHED_IDLE=1)" ratio=${sched_ratio:--} ;;
    esac
    if [[ $v == needs* || $v == not\ run* ]]; then echo "| $what | $v | | | | | | | | | | |"; else echo "| $what | ${v// / | } | $ratio |"; fi
  done
  if [ -n "${pooled_row[hinted]:-}" ]; then
    echo
    echo "**The figure that judges the target** is the pooled ratio below, not the per-round median"
    echo "above (kept to compare with earlier runs). One run's p99 is one of its few slowest steps, and"
    echo "which steps are slowest moves from run to run with the machine (the control's rounds above);"
    echo "pooling every round's steps of a kind makes the p99 the $(awk -v s=$steps -v r=$train_rounds 'BEGIN { n = s * r; printf "%d", n - int((n - 1) * 0.99) }')th slowest of $((steps * train_rounds)) steps, and the"
    echo "interval says how far the ratio could move by chance: a two-level bootstrap (rounds drawn with"
    echo "replacement, then steps within each drawn round; 2000 draws, both kinds alike, since steps of"
    echo "one round share that round's load). The target (hinted at most 1.10x idle) is met when the"
    echo "pooled ratio is at most 1.10; the control row is the same estimator with no background at all,"
    echo "so its ratio and interval are this run's own noise floor. The rows marked extra do not judge"
    echo "the target: they leave each round's first step out of both kinds, the step that carries the"
    echo "daemon's OPEN of the reader's index (its connection to the daemon is made by its first READ)"
    echo "and the cold first borrows: one per dataset opened, 8 of the 25 steps at the p99's rank or"
    echo "above with 8 rounds of 300 steps, where a real epoch has thousands of steps."
    echo
    echo "| beside it | steps (rounds) | pooled p99 ms | idle's pooled p99 ms | pooled p99 / idle | 95% interval |"
    echo "|---|---|---|---|---|---|"
    for label in control warm hinted ${train_sched:+hinted-idle} ${ab_label:-} control-after1 hinted-after1; do
      case $label in
        control) what="nothing again (control: idle vs idle)" ;;
        warm) what="\`larder warm\` (WARM)" ;;
        hinted) what="\`larder hint hot\` (HINTED): **the target's row**" ;;
        hinted-idle) what="HINTED, background tasks at SCHED_IDLE" ;;
        hinted-ab) what="HINTED, the daemons with \`${AB_ENV:-}\` (AB_ENV)" ;;
        control-after1) what="extra: the control, each round's first step left out (both kinds)" ;;
        hinted-after1) what="extra: HINTED, each round's first step left out (both kinds)" ;;
      esac
      read -r p b r lo hi n k <<<"${pooled_row[$label]}"
      [ -n "${k:-}" ] && echo "| $what | $n ($k) | $p | $b | $r | $lo-$hi |"
    done
  fi
  if [ -n "${slow_steps:-}" ]; then
    echo
    echo "Where the slow steps' wait went (TRACE=1: the daemons' request traces, \`bench/restart_trace.py"
    echo "summary\`): the steps at or above each kind's pooled p99, ms per step on average. The reader's"
    echo "READs of daemon 0, and of their time: the pool queue, the wait for chunks of other owners"
    echo "(borrow), daemon 0's own origin reads; the owners' origin time for those chunks; the wait"
    echo "outside any READ (client, socket, scheduling); the CPU pressure (PSI \"some\"); the origin"
    echo "bytes of the background jobs (HINTED, WARM) that overlapped those steps, each job counted whole"
    echo "(a staging job's span covers its waits at the gate too: a sign of background about, not a rate)."
    echo
    printf '%s\n' "$slow_steps"
  fi
  echo
  echo "## 3. Predictive replication"
  echo
  echo "$replicate"
  echo
  echo "## 4. The simulation at this scale"
  echo
  echo "\`bench/sim/run.py\` with bench/sim/params/loopback.json and the figures measured above"
  echo "(bench/results/restart-measured.json: origin $(awk -v b=$origin_bw 'BEGIN { printf "%.0f", b / 1e6 }') MB/s, a daemon serving a peer $serve_mbs MB/s,"
  echo "16 local readers $(awk -v b=$local_bw 'BEGIN { printf "%.0f", b / 1e6 }') MB/s together). \"file\" is what this branch does (one owner per shard,"
  echo "a packed file being its own shard), \"striped\" and \"hinted\" what issue 12 builds. Compare"
  echo "seconds: the simulated reader alone draws the origin's whole link, while \`cat\` alone (one read"
  echo "at a time, each paying slowfs's overhead) drew $(awk -v b="$ckpt_bytes" -v s="$alone_s" 'BEGIN { printf "%.0f", b / s / 1e6 }') MB/s. The model has no timeouts: a daemon"
  echo "that passes over a slow owner and reads the origin (section 1) is outside it."
  echo
  printf '%s\n' "$sim_table"
} >"$out"

# the plot: time against one reader alone, measured and simulated
$py - "$out" "$results/restart.png" "$alone_s" "$readers" "$sim_json" \
  "$(for k in "${!row[@]}"; do printf '%s=%s\n' "$k" "${row[$k]}"; done)" <<'PY' || echo "restart: no plot (matplotlib?)" >&2
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
_, png, alone, readers, sim, rows = sys.argv[1:]
alone = float(alone)
rows = dict(line.split("=", 1) for line in rows.splitlines() if line)
ns = [int(n) for n in readers.split()]
fig, ax = plt.subplots(figsize=(7, 4.5))
for kind, style in (("direct", "o-"), ("unhinted", "s-"), ("hinted", "^-")):
    pts = []
    for n in ns:
        v = rows.get(f"{kind},{n}", "").split()
        if v and v[0].lstrip(">").replace(".", "").isdigit():
            pts.append((n, float(v[0].lstrip(">")) / alone))
    if pts:
        ax.plot(*zip(*pts), style, label=f"measured: {kind}")
for policy, style in (("direct", "o:"), ("file", "s:"), ("striped", "d:"), ("hinted", "^:")):
    pts = [(r["readers"], r["time_ratio"]) for r in json.loads(sim) if r["policy"] == policy]
    if pts:
        ax.plot(*zip(*pts), style, alpha=0.6, label=f"simulated: {policy}")
ax.axhline(1.5, color="grey", lw=0.8, ls="--", label="target at N = 64: 1.5x")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("readers (over 4 daemons)")
ax.set_ylabel("time until all hold the checkpoint / one reader alone")
ax.legend(fontsize=7)
ax.set_title("restart storm on loopback")
fig.tight_layout()
fig.savefig(png, dpi=110)
PY
cat "$out"
exit
}
