#!/usr/bin/env bash
# The borrowing-only part of bench/peer.sh, builds against each other: for
# each round, for each BUILD directory given (in turn, so that the load
# changes them alike), two fresh daemons of that build on loopback (node
# 1 --warm: its own chunks staged before the clock), then node 1's reader
# (`larder warm` through node 1's socket) reads everything: node 0's
# chunks borrowed, checked, staged and read.  Per round and build: the
# seconds, the bytes borrowed, MB/s, the CPU each process used (node 0,
# node 1, the reader: perf stat's task-clock, else /proc and time) and
# that per borrowed MB,
# and a plain TCP copy of the same files (bench/peer.sh's) for a ratio in
# the same minute.  Prints one line per run and the medians per build.
# A BUILD may carry environment for its daemons after a colon, for an A/B of
# one build's settings: `build:LARDERD_BORROW_PIECE=0` (several: comma-separated).
# READER=borrowed: the reader is larder_bench_borrow_read (bench/borrow_read.c),
# which reads only the samples of node 0's chunks (every byte it reads
# borrowed), not `larder warm` (which reads node 1's own chunks too).
# Beside each run's CPU: the peer READs node 0 answered and node 1's blocks
# received in place (the daemons' STATS), and node 1's minor page faults
# during the read (/proc).
#   bench/peer_borrow_ab.sh [--rounds N] BUILD[:VAR=VALUE,...]...   (SAMPLES, SIZE as peer.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
rounds=5
[ "${1:-}" = --rounds ] && rounds=$2 && shift 2
[ $# -ge 1 ] || { echo "usage: $0 [--rounds N] BUILD..." >&2; exit 2; }
samples=${SAMPLES:-600} size=${SIZE:-262144}
# every build has what a run uses (a missing reader left perf stat waiting
# on the daemons for good)
for spec in "$@"; do
  for tool in larder larderd $([ "${READER:-warm}" = borrowed ] && echo larder_bench_borrow_read); do
    [ -x "${spec%%:*}/$tool" ] || { echo "$0: no ${spec%%:*}/$tool (build it there)" >&2; exit 2; }
  done
done
work=$PWD/bench/work/peer_ab
rm -rf "$work" && mkdir -p "$work/src"
pids=()
trap 'for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
larder=$(cd "${1%%:*}" && pwd)/larder
random_samples "$work/src" "$samples" "$size"
"$larder" pack "$work/src" -o "$work/origin" --shard-size 8M >/dev/null
index=$work/origin/index.larder
printf 'bench-secret\n' >"$work/secret"
base=$((30000 + RANDOM % 20000))
use_perf=0
perf stat -e task-clock -x, -o /dev/null true 2>/dev/null && use_perf=1
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.0f", ($14 + $15) * 1000 / hz }' "/proc/$1/stat"; }
stat_of() { # build node key
  "$1/larder" stat --cache "$work/cache$2" --json |
    /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['datasets'][0]['$3'])"
}
copy_rate() { # MB/s of a plain TCP copy of the shards (sendfile to recv_into), as peer.sh
  /usr/bin/python3 - "$work/origin" <<'PY'
import glob, os, resource, socket, sys, threading, time
files = sorted(glob.glob(os.path.join(sys.argv[1], "shard-*.tar")))
want = sum(os.path.getsize(p) for p in files)
listener = socket.create_server(("127.0.0.1", 0))
def serve():
    conn, _ = listener.accept()
    for path in files:
        with open(path, "rb") as f:
            conn.sendfile(f)
    conn.close()
threading.Thread(target=serve, daemon=True).start()
client = socket.create_connection(listener.getsockname())
view = memoryview(bytearray(1 << 20))
cpu = lambda: (lambda r: r.ru_utime + r.ru_stime)(resource.getrusage(resource.RUSAGE_SELF))
got, start, cpu0 = 0, time.perf_counter(), cpu()
while got < want:
    n = client.recv_into(view)
    if not n:
        break
    got += n
# MB/s, and the CPU both ends used (one process: sendfile's thread and recv's) per MB
print("%.0f %.2f" % (got / (time.perf_counter() - start) / 1e6, (cpu() - cpu0) * 1e3 / (got / 1e6)))
PY
}
daemon_stat() { # build node key: the daemon's STATS figure for the dataset
  "$1/larder" stat --socket "$work/sock$2" --json |
    /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['datasets'][0].get('$3', 0))"
}
run_one() { # build[:env]: one borrowing-only run; prints its line
  local spec=$1 b=${1%%:*} i try members alive envs=()
  [ "$spec" != "$b" ] && IFS=, read -r -a envs <<<"${spec#*:}"
  for ((try = 0; try < 3; try++)); do
    members="127.0.0.1:$base,127.0.0.1:$((base + 1))"
    for i in 0 1; do
      rm -rf "$work/cache$i" "$work/sock$i"
      env "${envs[@]}" "$b/larderd" --cache "$work/cache$i" --socket "$work/sock$i" --listen "127.0.0.1:$((base + i))" \
        --peers "$members" --secret-file "$work/secret" $([ $i = 1 ] && echo --warm) 2>>"$work/daemon.log" &
      pids+=($!)
    done
    for i in 0 1; do for _ in $(seq 100); do [ -S "$work/sock$i" ] && break; sleep 0.05; done; done
    alive=1
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || alive=0; done
    [ $alive = 1 ] && break
    for p in "${pids[@]}"; do kill $p 2>/dev/null; done
    wait 2>/dev/null || true
    pids=() base=$((base + 997))
  done
  LARDER_SOCKET=$work/sock0 "$b/larder" warm "$index" --cache "$work/cache0" >/dev/null
  LARDER_SOCKET=$work/sock1 "$b/larder" cat "$index" 0 --cache "$work/cache1" >/dev/null
  local last=-1 now=0
  for _ in $(seq 200); do
    now=$(stat_of "$b" 1 origin_bytes)
    [ "$now" = "$last" ] && break
    last=$now
    sleep 0.2
  done
  local before cpu0 cpu1 t0 t1 reader bytes copy copy_cpu
  before=$(stat_of "$b" 1 peer_bytes)
  # each process's CPU during the read: perf stat's task-clock (ns, all
  # threads) where perf runs, else /proc's and time's 10 ms ticks
  local stats=()
  if [ "$use_perf" = 1 ]; then
    for i in 0 1; do
      perf stat -e task-clock -x, -o "$work/perf$i" -p "${pids[$i]}" 2>/dev/null &
      stats+=($!)
    done
    sleep 0.2
  fi
  cpu0=$(cpu_ms "${pids[0]}") cpu1=$(cpu_ms "${pids[1]}")
  local faults1
  faults1=$(awk '{ print $10 }' "/proc/${pids[1]}/stat")
  t0=$(date +%s.%N)
  local reader_cmd=("$b/larder" warm "$index" --cache "$work/cache1")
  [ "${READER:-warm}" = borrowed ] &&
    reader_cmd=("$b/larder_bench_borrow_read" "$index" "$work/cache1" "$members" "127.0.0.1:$((base + 1))")
  if [ "$use_perf" = 1 ]; then
    LARDER_SOCKET=$work/sock1 perf stat -e task-clock -x, -o "$work/perf_reader" "${reader_cmd[@]}" >/dev/null
  else
    LARDER_SOCKET=$work/sock1 /usr/bin/time -f '%U %S' -o "$work/reader_time" "${reader_cmd[@]}" >/dev/null
  fi
  t1=$(date +%s.%N)
  cpu0=$(($(cpu_ms "${pids[0]}") - cpu0)) cpu1=$(($(cpu_ms "${pids[1]}") - cpu1))
  faults1=$(($(awk '{ print $10 }' "/proc/${pids[1]}/stat") - faults1))
  if [ "$use_perf" = 1 ]; then
    kill -INT "${stats[@]}" 2>/dev/null
    wait "${stats[@]}" 2>/dev/null || true
    task_ms() { awk -F, '$3 == "task-clock" || $3 ~ /^task-clock/ { printf "%.0f", $1 }' "$1"; }
    cpu0=$(task_ms "$work/perf0") cpu1=$(task_ms "$work/perf1") reader=$(task_ms "$work/perf_reader")
  else
    reader=$(awk '{ printf "%.0f", ($1 + $2) * 1000 }' "$work/reader_time")
  fi
  bytes=$(($(stat_of "$b" 1 peer_bytes) - before))
  local peer_reads inplace
  peer_reads=$(daemon_stat "$b" 0 peer_served_reads) inplace=$(daemon_stat "$b" 1 inplace_blocks)
  for p in "${pids[@]}"; do kill $p 2>/dev/null; done
  wait 2>/dev/null || true
  pids=() base=$((base + 10))
  read -r copy copy_cpu < <(copy_rate)
  awk -v b="$spec" -v pr="$peer_reads" -v ip="$inplace" -v mf="$faults1" -v t0="$t0" -v t1="$t1" -v n="$bytes" -v c0="$cpu0" -v c1="$cpu1" -v r="$reader" \
    -v copy="$copy" -v copy_cpu="$copy_cpu" -v load="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
      s = t1 - t0; mb = n / 1e6; rate = mb / s
      printf "%s %.3f %.1f %.0f %d %d %d %.2f %.2f %.2f %d %.3f %s %.2f %d %d %d\n", b, s, mb, rate, c0, c1, r,
        c0 / mb, c1 / mb, r / mb, copy, rate / copy, load, copy_cpu, pr, ip, mf }'
}
echo "# build seconds MB MB/s cpu0_ms cpu1_ms reader_ms node0_ms/MB node1_ms/MB reader_ms/MB copy_MB/s ratio load1 copy_ms/MB node0_peer_reads node1_inplace_blocks node1_minor_faults"
for ((round = 0; round < rounds; round++)); do
  for b in "$@"; do run_one "$b"; done
done | tee "$work/runs"
echo "# medians per build: MB/s node0_ms/MB node1_ms/MB reader_ms/MB ratio copy_ms/MB"
for b in "$@"; do
  awk -v b="$b" '$1 == b' "$work/runs" | /usr/bin/python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
col = lambda i: statistics.median(float(r[i]) for r in rows)
print(sys.argv[1], "%.0f %.2f %.2f %.2f %.3f %.2f" % (col(3), col(7), col(8), col(9), col(11), col(13)))' "$b"
done
