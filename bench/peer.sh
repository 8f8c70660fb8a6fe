#!/usr/bin/env bash
# larderd across nodes (issue 5), on loopback, in one run:
#   1. peer serving throughput: a node borrowing a dataset's blocks from
#      the owners against a plain TCP copy of the same bytes (target >= 0.8x);
#   2. origin bytes per epoch for 1, 2 and 4 nodes, each node reading the
#      whole dataset at once (every shard from the origin once per cluster).
#   3. (issue 16) the same serving and end-to-end figures over UCX's tcp and
#      shared-memory transports (larderd --transport ucx), against UCX's own
#      ceiling in the same run (ucx_perftest ucp_am_bw, 1 MiB messages).
#   4. (issue 16) the floor: the least work a borrowed byte needs on this
#      machine, nothing of larder in it (bench/borrow_floor.c), against the
#      copy in the same run: what borrowing could reach here.
# Writes bench/results/peer.md.  SAMPLES and SIZE (bytes) set the dataset;
# --quick: a smaller one (under 5 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
build=${BUILD_DIR:-build}
scripts/install-deps >/dev/null
cmake -S . -B "$build" -G Ninja >/dev/null && ninja -C "$build" larder_cli larderd larder_bench_peer larder_bench_borrow_floor larder_bench_borrow_read >/dev/null
ninja -C "$build" larder_bench_ucx_files >/dev/null 2>&1 || true # section 3's second ceiling (with UCX only)
larder=$PWD/$build/larder larderd=$PWD/$build/larderd
quick=0
[ "${1:-}" = --quick ] && quick=1
samples=${SAMPLES:-$([ $quick = 1 ] && echo 600 || echo 2000)} size=${SIZE:-262144}
work=$PWD/bench/work/peer
out=bench/results/peer.md
rm -rf "$work" && mkdir -p "$work/src"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
pids=()
trap 'for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
random_samples "$work/src" "$samples" "$size"
"$larder" pack "$work/src" -o "$work/origin" --shard-size 8M >/dev/null
index=$work/origin/index.larder
id=$("$larder" inspect "$index" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
shard_bytes=$(cat "$work"/origin/shard-*.tar | wc -c)
printf 'bench-secret\n' >"$work/secret"
base=$((30000 + RANDOM % 20000))

start_cluster() { # nodes: start that many daemons with fresh caches; a daemon that
  # did not start (its port taken by another program on a shared machine):
  # the cluster again at other ports, 3 times at most
  local n=$1 members i try alive p state
  for ((try = 0; try < 3; try++)); do
    members=""
    for ((i = 0; i < n; i++)); do members+="${members:+,}127.0.0.1:$((base + i))"; done
    for ((i = 0; i < n; i++)); do
      rm -rf "$work/cache$i" "$work/sock$i"
      "$larderd" --cache "$work/cache$i" --socket "$work/sock$i" --listen "127.0.0.1:$((base + i))" \
        --peers "$members" --secret-file "$work/secret" ${TRANSPORT:+--transport $TRANSPORT} \
        $([ "${WARM_NODE:-}" = "$i" ] && echo --warm) 2>>"$work/daemon.log" &
      pids+=($!)
    done
    for ((i = 0; i < n; i++)); do
      for _ in $(seq 100); do [ -S "$work/sock$i" ] && break; sleep 0.05; done
    done
    alive=1
    for p in "${pids[@]}"; do # no pipe: under pipefail, grep ending first could fail it
      state=$(ps -o stat= -p "$p" 2>/dev/null || true)
      case $state in '' | Z*) alive=0 ;; esac
    done
    [ $alive = 1 ] && return 0
    echo "bench/peer.sh: a daemon did not start (see $work/daemon.log); again at other ports" >&2
    stop_cluster
    base=$((base + 997))
  done
  return 1
}
stop_cluster() {
  for p in "${pids[@]}"; do kill $p 2>/dev/null; done
  wait 2>/dev/null || true
  pids=()
  base=$((base + 10))
}
stat_of() { # node key
  "$larder" stat --cache "$work/cache$1" --json |
    /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['datasets'][0]['$2'])"
}
seconds() { awk -v s="$1" -v e="$2" 'BEGIN { print e - s }'; }
cpu_ms() { # pid: the CPU time (user and system) it used so far, in ms
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.0f", ($14 + $15) * 1000 / hz }' "/proc/$1/stat"
}

# ---- 1. peer serving throughput -----------------------------------------------
# serving alone: one daemon holding the dataset, read by a peer client
# (larder_bench_peer: 8 requests of 1 MiB in flight), bytes discarded
start_cluster 1
LARDER_SOCKET=$work/sock0 "$larder" warm "$index" --cache "$work/cache0" >/dev/null
read -r served serve_rate < <("$build/larder_bench_peer" "127.0.0.1:$base" "$index" bench-secret 8 1024)
stop_cluster
# end to end: node 1 borrows from node 0 and stages what it borrows; the
# round of the median time of ROUNDS (a shared machine's noise)
rounds=""
for ((round = 0; round < ${ROUNDS:-3}; round++)); do
  start_cluster 2
  LARDER_SOCKET=$work/sock0 "$larder" warm "$index" --cache "$work/cache0" >/dev/null # node 0 holds it all
  t0=$(date +%s.%N)
  LARDER_SOCKET=$work/sock1 "$larder" warm "$index" --cache "$work/cache1" >/dev/null
  t1=$(date +%s.%N)
  rounds+="$(seconds "$t0" "$t1") $t0 $t1 $(stat_of 1 peer_bytes)"$'\n'
  stop_cluster
done
read -r _ t0 t1 peer_bytes < <(printf '%s' "$rounds" | sort -n | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }')
# end to end, borrowing only: node 1 (larderd --warm) stages the chunks it owns
# from the origin before the clock starts (one sample read opens the dataset
# there); then its reader reads everything: its own chunks are in the cache,
# and the time is node 0's chunks borrowed, checked, staged and read
borrowing_cluster() { # two daemons: node 0 holding it all, node 1 its own chunks
  # (larderd --warm, staged from the origin); sets `now` to node 1's origin bytes
  local last=-1
  WARM_NODE=1 start_cluster 2
  LARDER_SOCKET=$work/sock0 "$larder" warm "$index" --cache "$work/cache0" >/dev/null
  LARDER_SOCKET=$work/sock1 "$larder" cat "$index" 0 --cache "$work/cache1" >/dev/null
  now=0
  for _ in $(seq 200); do # until node 1's origin bytes stop growing
    now=$(stat_of 1 origin_bytes)
    [ "$now" = "$last" ] && break
    last=$now
    sleep 0.2
  done
}
borrow_rounds=""
for ((round = 0; round < ${ROUNDS:-3}; round++)); do
  borrowing_cluster
  before=$(stat_of 1 peer_bytes)
  cpu0=$(cpu_ms "${pids[0]}") cpu1=$(cpu_ms "${pids[1]}")
  t0=$(date +%s.%N)
  LARDER_SOCKET=$work/sock1 /usr/bin/time -f '%U %S' -o "$work/reader_time" \
    "$larder" warm "$index" --cache "$work/cache1" >/dev/null
  t1=$(date +%s.%N)
  cpu0=$(($(cpu_ms "${pids[0]}") - cpu0)) cpu1=$(($(cpu_ms "${pids[1]}") - cpu1))
  cpu_reader=$(awk '{ printf "%.0f", ($1 + $2) * 1000 }' "$work/reader_time")
  # what of that is not borrowing: the same reader again, everything resident
  # now (its start, the index, the OPEN, and reading and checking the whole
  # dataset, node 1's own chunks included, from the cache), and the start
  # alone (one resident sample)
  t2=$(date +%s.%N)
  LARDER_SOCKET=$work/sock1 /usr/bin/time -f '%U %S' -o "$work/reader_time" \
    "$larder" warm "$index" --cache "$work/cache1" >/dev/null
  t3=$(date +%s.%N)
  cpu_again=$(awk '{ printf "%.0f", ($1 + $2) * 1000 }' "$work/reader_time")
  LARDER_SOCKET=$work/sock1 "$larder" cat "$index" 1 --cache "$work/cache1" >/dev/null
  t4=$(date +%s.%N)
  borrow_rounds+="$(seconds "$t0" "$t1") $(($(stat_of 1 peer_bytes) - before)) $(($(stat_of 1 origin_bytes) - now)) $cpu0 $cpu1 $cpu_reader $(seconds "$t2" "$t3") $cpu_again $(seconds "$t3" "$t4")"$'\n'
  stop_cluster
done
read -r borrow_seconds borrow_bytes borrow_origin borrow_cpu0 borrow_cpu1 borrow_cpu_reader again_seconds again_cpu start_seconds < <(printf '%s' "$borrow_rounds" | sort -n |
  awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }')
# borrowing only, read only: the same, but the reader
# (larder_bench_borrow_read, bench/borrow_read.c) reads only the samples of
# node 0's chunks, so every byte it reads was borrowed (`larder warm` above
# also reads node 1's own chunks, resident, inside the same clock)
only_rounds=""
for ((round = 0; round < ${ROUNDS:-3}; round++)); do
  borrowing_cluster
  before=$(stat_of 1 peer_bytes)
  cpu0=$(cpu_ms "${pids[0]}") cpu1=$(cpu_ms "${pids[1]}")
  LARDER_SOCKET=$work/sock1 /usr/bin/time -f '%U %S' -o "$work/reader_time" \
    "$build/larder_bench_borrow_read" "$index" "$work/cache1" "127.0.0.1:$base,127.0.0.1:$((base + 1))" \
    "127.0.0.1:$((base + 1))" >"$work/only_out"
  cpu0=$(($(cpu_ms "${pids[0]}") - cpu0)) cpu1=$(($(cpu_ms "${pids[1]}") - cpu1))
  read -r _ only_read only_s <"$work/only_out"
  # seconds, bytes borrowed, bytes read, node 1's origin bytes meanwhile, CPU ms of node 0, node 1, the reader
  only_rounds+="$only_s $(($(stat_of 1 peer_bytes) - before)) $only_read $(($(stat_of 1 origin_bytes) - now)) $cpu0 $cpu1 $(awk '{ printf "%.0f", ($1 + $2) * 1000 }' "$work/reader_time")"$'\n'
  stop_cluster
done
only_rate_median=$(printf '%s' "$only_rounds" | awk '{ print $2 / $1 / 1e6 }' | sort -n |
  awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : 0 }')
# the plain copy: the same number of bytes, from the same files, over one TCP connection
copy=$(/usr/bin/python3 - "$work/origin" "$served" <<'PY'
import glob, os, socket, sys, threading, time
root, want = sys.argv[1], int(sys.argv[2])
files = sorted(glob.glob(os.path.join(root, "shard-*.tar")))
listener = socket.create_server(("127.0.0.1", 0))
port = listener.getsockname()[1]
def serve():
    conn, _ = listener.accept()
    left = want
    while left > 0:
        for path in files:
            with open(path, "rb") as f:
                n = min(left, os.fstat(f.fileno()).st_size)
                conn.sendfile(f, 0, n)
                left -= n
            if left <= 0:
                break
    conn.close()
threading.Thread(target=serve, daemon=True).start()
client = socket.create_connection(("127.0.0.1", port))
buf = bytearray(1 << 20)
view = memoryview(buf)
got, start = 0, time.perf_counter()
while got < want:
    n = client.recv_into(view)
    if not n:
        break
    got += n
print(got / (time.perf_counter() - start) / 1e6)
PY
)
# ---- 4. the floor: the copy and the leanest borrowing pipelines (sender, receiver
# staging into a file, reader reading and checking it), alternated, on the same shards
floor_out=$("$build/larder_bench_borrow_floor" --rounds "${FLOOR_ROUNDS:-7}" --dir "$work" "$work"/origin/shard-*.tar)
peer_rate=$(awk -v b="$peer_bytes" -v s="$(seconds "$t0" "$t1")" 'BEGIN { print b / s / 1e6 }')
all_rate=$(awk -v b="$shard_bytes" -v s="$(seconds "$t0" "$t1")" 'BEGIN { print b / s / 1e6 }')
borrow_rate=$(awk -v b="$borrow_bytes" -v s="$borrow_seconds" 'BEGIN { print b / s / 1e6 }')
# the median of the rounds' own rates: what a round borrows moves with the
# ports (the members' names decide the owners), and the round of the median
# time above tends to be one that borrowed less
borrow_rate_median=$(printf '%s' "$borrow_rounds" | awk '{ print $2 / $1 / 1e6 }' | sort -n |
  awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : 0 }')

# ---- 3. over UCX: serving, end to end, and UCX's own ceiling -------------------
# ucx_perftest's bandwidth is in MiB/s: converted to MB/s (1e6) like the rest
ucx_rows="" ucx_notes="" ufiles_rows="" ufiles_best_rows=""
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : 0 }'; }
ucx_ceiling() { # TLS: MB/s of ucp_am_bw, 1 MiB messages, one client
  local port=$((base + 7))
  UCX_TLS=$1 timeout 60 ucx_perftest -p "$port" >/dev/null 2>&1 &
  local server=$!
  sleep 1
  UCX_TLS=$1 timeout 60 ucx_perftest 127.0.0.1 -p "$port" -t ucp_am_bw -s 1048576 -n 1000 2>/dev/null |
    awk '/^Final:/ { printf "%.0f\n", $7 * 1.048576 }'
  wait $server 2>/dev/null || true
}
for tls in tcp shm; do
  if ! command -v ucx_perftest >/dev/null; then ucx_rows+="| UCX $tls | (ucx-utils missing) | | | | |"$'\n'; continue; fi
  export UCX_TLS=$tls LARDER_UCX_STATS=1 # the hubs' counters, in the logs at their stop
  TRANSPORT=ucx start_cluster 1
  LARDER_SOCKET=$work/sock0 "$larder" warm "$index" --cache "$work/cache0" >/dev/null
  # UCX_ROUNDS pairs (the ceiling, then the daemon serving), alternated so
  # that the machine's load changes both alike; each figure their median.
  # The figures are the one line of two numbers (at 565fe38 a UCX error
  # printed on stdout came first, and the row read 0 MB/s).
  # as many passes over the dataset as make the ceiling's 1000 MiB (setup amortized alike)
  upasses=$(awk -v s="$shard_bytes" 'BEGIN { p = int(1048576000 / s + 0.999); print (p > 1 ? p : 1) }')
  urc=0 userve_list="" ceiling_list="" uslow_list="" files_list="" upoll_list="" uone_list=""
  # other ways UCX offers to move the same bytes (bench/ucx_files.c), so that the files
  # ceiling is the strongest found, not one way of sending: name|flag|in flight|KiB|rendezvous scheme
  ufile_variants=("16 in flight||16|1024|" "4 MiB messages||8|4096|" "tagged, receives posted ahead|--tag|8|1024|"
    "rendezvous put_zcopy||8|1024|put_zcopy")
  declare -A uvariant_list=()
  for ((r = 0; r < ${UCX_ROUNDS:-3}; r++)); do
    ceiling_list+="$(ucx_ceiling $tls) "
    # the second ceiling: UCX alone sending the daemon's own cache files (ucx_files.c)
    [ -x "$build/larder_bench_ucx_files" ] && files_list+="$(UCX_TLS=$tls timeout 120 "$build/larder_bench_ucx_files" \
      "$upasses" 8 1024 "$work"/cache0/*/*.data 2>/dev/null | awk '{ printf "%.0f", $2 }' || true) "
    if [ -x "$build/larder_bench_ucx_files" ]; then
      for v in "${ufile_variants[@]}"; do
        IFS='|' read -r vname vflag vin vkib vscheme <<<"$v"
        uvariant_list[$vname]+="$(env UCX_TLS=$tls ${vscheme:+UCX_RNDV_SCHEME=$vscheme} timeout 120 \
          "$build/larder_bench_ucx_files" $vflag "$upasses" "$vin" "$vkib" "$work"/cache0/*/*.data 2>/dev/null |
          awk '{ printf "%.0f", $2 }' || true) "
      done
    fi
    LARDER_BENCH_TRANSPORT=ucx "$build/larder_bench_peer" "127.0.0.1:$base" "$index" bench-secret 8 1024 "$upasses" \
      >"$work/bench_ucx_$tls.out" 2>"$work/bench_ucx_$tls.err" || urc=$?
    read -r userved rate < <(grep -E '^[0-9]+ [0-9.]+$' "$work/bench_ucx_$tls.out" || echo 0 0)
    userve_list+="$rate "
    # the same, the client's progress thread polling 50 us after each event before it
    # sleeps (LARDER_UCX_POLL_US; docs/operations.md): for a quiet machine's figures
    upoll_list+="$(LARDER_UCX_POLL_US=50 LARDER_BENCH_TRANSPORT=ucx "$build/larder_bench_peer" "127.0.0.1:$base" "$index" \
      bench-secret 8 1024 "$upasses" 2>/dev/null | awk '/^[0-9]+ [0-9.]+$/ { printf "%.0f", $2 }' || true) "
    # the same with the client's one UCX worker (LARDER_UCX_LANES=1; the default is 2 lanes)
    uone_list+="$(LARDER_UCX_LANES=1 LARDER_BENCH_TRANSPORT=ucx "$build/larder_bench_peer" "127.0.0.1:$base" "$index" \
      bench-secret 8 1024 "$upasses" 2>/dev/null | awk '/^[0-9]+ [0-9.]+$/ { printf "%.0f", $2 }' || true) "
    uslow_list+="$(sed -n 's/^slowest READ: \([0-9.]*\) ms; READs over 50 ms: \([0-9]*\)/\1 ms (\2 over 50 ms)/p' "$work/bench_ucx_$tls.err" | tail -1); "
  done
  userve_rate=$(median $userve_list) ceiling=$(median $ceiling_list) files_ceiling=$(median $files_list)
  stop_cluster
  userve_stats=$(grep -h "UCX stats" "$work/daemon.log" | sed 's/^larderd: UCX stats: //' | tail -1)
  uclient_stats=$(grep -h "UCX stats" "$work/bench_ucx_$tls.err" | sed 's/.*answers received/received/' | tail -1)
  cp "$work/daemon.log" "$work/daemon_ucx_${tls}_serve.log"
  : >"$work/daemon.log"
  # serving with both progress threads polling 50 us after each event (the daemon's and
  # the client's; LARDER_UCX_POLL_US): the ceilings busy-poll both sides all along
  LARDER_UCX_POLL_US=50 TRANSPORT=ucx start_cluster 1
  LARDER_SOCKET=$work/sock0 "$larder" warm "$index" --cache "$work/cache0" >/dev/null
  upoll_both_list=""
  for ((r = 0; r < ${UCX_ROUNDS:-3}; r++)); do
    upoll_both_list+="$(LARDER_UCX_POLL_US=50 LARDER_BENCH_TRANSPORT=ucx "$build/larder_bench_peer" "127.0.0.1:$base" \
      "$index" bench-secret 8 1024 "$upasses" 2>/dev/null | awk '/^[0-9]+ [0-9.]+$/ { printf "%.0f", $2 }' || true) "
  done
  stop_cluster
  : >"$work/daemon.log"
  # over tcp: UCX_TCP_RX_SEG_SIZE=512K on both sides (a daemon of its own; larderd does not
  # set it: a receiver whose segment is smaller than the sender's aborts; docs/operations.md)
  urxseg_list=""
  if [ "$tls" = tcp ]; then
    UCX_TCP_RX_SEG_SIZE=512K TRANSPORT=ucx start_cluster 1
    LARDER_SOCKET=$work/sock0 "$larder" warm "$index" --cache "$work/cache0" >/dev/null
    for ((r = 0; r < ${UCX_ROUNDS:-3}; r++)); do
      urxseg_list+="$(UCX_TCP_RX_SEG_SIZE=512K LARDER_BENCH_TRANSPORT=ucx "$build/larder_bench_peer" "127.0.0.1:$base" \
        "$index" bench-secret 8 1024 "$upasses" 2>/dev/null | awk '/^[0-9]+ [0-9.]+$/ { printf "%.0f", $2 }' || true) "
    done
    stop_cluster
    : >"$work/daemon.log"
  fi
  # end to end: UCX_ROUNDS rounds with fresh daemons, the median rate
  ue2e_list=""
  for ((r = 0; r < ${UCX_ROUNDS:-3}; r++)); do
    TRANSPORT=ucx start_cluster 2
    LARDER_SOCKET=$work/sock0 "$larder" warm "$index" --cache "$work/cache0" >/dev/null
    t0=$(date +%s.%N)
    LARDER_SOCKET=$work/sock1 "$larder" warm "$index" --cache "$work/cache1" >/dev/null
    t1=$(date +%s.%N)
    ue2e_list+="$(awk -v b="$(stat_of 1 peer_bytes)" -v s="$(seconds "$t0" "$t1")" 'BEGIN { printf "%.0f", b / s / 1e6 }') "
    stop_cluster
  done
  ue2e_rate=$(median $ue2e_list)
  fallbacks=$(grep -c "the UCX path failed" "$work/daemon.log" || true)
  cp "$work/daemon.log" "$work/daemon_ucx_${tls}_e2e.log"
  unset UCX_TLS LARDER_UCX_STATS
  ucx_rows+=$(awk -v t=$tls -v r="$userve_rate" -v e="$ue2e_rate" -v c="${ceiling:-0}" \
    'BEGIN {
    printf "| UCX %s | %.0f | %.0f | %s | %.0f | %s |\n", t, c, r, c ? sprintf("%.2fx", r / c) : "?", e,
      c ? sprintf("%.2fx", e / c) : "?" }')$'\n'
  vbest=${files_ceiling:-0} vcells=""
  for v in "${ufile_variants[@]}"; do
    vname=${v%%|*}
    vm=$(median ${uvariant_list[$vname]:-})
    vcells+="$vm | "
    [ "${vm:-0}" -gt "$vbest" ] && vbest=$vm
  done
  ufiles_best_rows+="| UCX $tls | ${files_ceiling:-0} | $vcells$vbest | $(printf '%.0f' "$userve_rate") | $(awk -v r="$userve_rate" -v c="$vbest" 'BEGIN { print (c ? sprintf("%.2fx", r / c) : "?") }') |"$'\n'
  ucx_notes+="  - serving with the client polling 50 us after each event (LARDER_UCX_POLL_US=50), MB/s of each round: $upoll_list(median $(median $upoll_list))"$'\n'
  ucx_notes+="  - serving with the client on one UCX worker (LARDER_UCX_LANES=1; the rows above use 2 lanes), MB/s of each round: $uone_list(median $(median $uone_list))"$'\n'
  [ -n "$urxseg_list" ] && ucx_notes+="  - serving with UCX_TCP_RX_SEG_SIZE=512K on both sides (a daemon of its own), MB/s of each round: $urxseg_list(median $(median $urxseg_list))"$'\n'
  ucx_notes+="  - serving with both the daemon and the client polling 50 us (a daemon of its own), MB/s of each round: $upoll_both_list(median $(median $upoll_both_list))"$'\n'
  ucx_notes+="  - UCX sending the cache files other ways, MB/s of each round: $(for v in "${ufile_variants[@]}"; do printf '%s: %s; ' "${v%%|*}" "${uvariant_list[${v%%|*}]:-}"; done)"$'\n'
  unset uvariant_list
  ufiles_rows+=$(awk -v t=$tls -v r="$userve_rate" -v c="${files_ceiling:-0}" -v p="${ceiling:-0}" \
    'BEGIN { printf "| UCX %s | %.0f | %.0f | %s | %.0f |\n", t, c, r, c ? sprintf("%.2fx", r / c) : "?", p }')$'\n'
  ucx_notes+="- UCX $tls: the serving client's READs went over $(grep '^transport: ' "$work/bench_ucx_$tls.err" | tail -1 | sed 's/transport: //')"
  [ "$urc" = 0 ] || ucx_notes+=" (it failed, exit $urc: $(grep -v '^transport: ' "$work/bench_ucx_$tls.err" | head -1))"
  ucx_notes+="; end to end, UCX paths that failed and went over TCP for 10 s: $fallbacks"$'\n'
  ucx_notes+="  - end to end MB/s borrowed, each round: $ue2e_list"$'\n'
  ucx_notes+="  - serving MB/s of each round ($upasses passes over the dataset, $(awk -v b="$userved" 'BEGIN { printf "%.0f", b / 1e6 }') MB): $userve_list; ceiling: $ceiling_list; UCX sending the cache files: $files_list"$'\n'
  ucx_notes+="  - serving daemon: $userve_stats; client: $uclient_stats"$'\n'
  ucx_notes+="  - the slowest serving READ of each round: $uslow_list"$'\n'
  : >"$work/daemon.log"
done

# ---- 2. origin bytes per epoch for 1, 2 and 4 nodes ---------------------------------
rows=""
for n in 1 2 4; do
  start_cluster $n
  for ((i = 0; i < n; i++)); do
    LARDER_SOCKET=$work/sock$i "$larder" warm "$index" --cache "$work/cache$i" >/dev/null &
  done
  wait $(jobs -p | grep -v -F -x -f <(printf '%s\n' "${pids[@]}")) 2>/dev/null || true
  total=0 most=0 borrowed=0
  for ((i = 0; i < n; i++)); do
    o=$(stat_of $i origin_bytes) b=$(stat_of $i peer_bytes)
    total=$((total + o)) borrowed=$((borrowed + b))
    [ "$o" -gt "$most" ] && most=$o
  done
  rows+=$(awk -v n=$n -v t=$total -v m=$most -v b=$borrowed -v s="$shard_bytes" 'BEGIN {
    printf "| %d | %.1f | %.3f | %.3f | %.1f |\n", n, t / 1e6, t / s, m / s, b / 1e6 }')$'\n'
  stop_cluster
done

{
  echo "# larderd across nodes, on loopback"
  echo
  echo "Written by \`bench/peer.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores;"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); load average $load_start at the start,"
  echo "$(cut -d' ' -f1-3 /proc/loadavg) at the end; $(bench_page_reporting) (bench/README.md)."
  echo "Reproduce: \`SAMPLES=$samples SIZE=$size bench/peer.sh\`. Dataset: $samples samples of"
  echo "$size bytes, $(awk -v s="$shard_bytes" 'BEGIN { printf "%.1f", s / 1e6 }') MB in 8 MB tar shards on a local origin."
  echo
  echo "## 1. Peer serving against a plain TCP copy"
  echo
  echo "Serving: one daemon holding the dataset, read over TCP by a peer client"
  echo "(\`larder_bench_peer\`, the daemon protocol as a peer speaks it: 8 requests of 1 MiB in"
  echo "flight, bytes discarded). The copy sends the same number of bytes from the same files over"
  echo "one loopback TCP connection (Python: sendfile on one side, recv_into a 1 MiB buffer on the"
  echo "other). End to end: two daemons; node 0 reads the whole dataset, then node 1 reads it,"
  echo "borrowing node 0's chunks through its own daemon and staging them in its cache, the median"
  echo "of ${ROUNDS:-3} rounds, each with fresh daemons (its time"
  echo "includes its own chunks, read from the origin, and the writes into the cache); the last"
  echo "row is all the bytes node 1's reader got in that time, borrowed or not.  Borrowing"
  echo "only: the same, but node 1 (larderd --warm) staged the chunks it owns from the origin"
  echo "before the clock started, so the time is that of node 0's chunks alone (borrowed,"
  echo "checked, staged, read; its origin bytes during the read: ${borrow_origin:-?})."
  echo
  echo "| | MB | MB/s | vs copy |"
  echo "|---|---|---|---|"
  awk -v s="$served" -v r="$serve_rate" -v b="$peer_bytes" -v p="$peer_rate" -v c="$copy" \
    -v a="$all_rate" -v t="$shard_bytes" 'BEGIN {
    printf "| larderd serving a peer | %.1f | %.0f | %.2fx |\n", s / 1e6, r, r / c
    printf "| plain TCP copy | %.1f | %.0f | 1.00x |\n", s / 1e6, c
    printf "| end to end: borrowed and staged by node 1 | %.1f | %.0f | %.2fx |\n", b / 1e6, p, p / c
    printf "| end to end: all node 1 read (its own chunks too) | %.1f | %.0f | %.2fx |\n", t / 1e6, a, a / c }'
  awk -v b="$borrow_bytes" -v r="$borrow_rate" -v c="$copy" 'BEGIN {
    printf "| end to end, borrowing only (node 1 owned chunks staged first) | %.1f | %.0f | %.2fx |\n", b / 1e6, r, r / c }'
  awk -v r="$borrow_rate_median" -v c="$copy" 'BEGIN {
    printf "| (extra) borrowing only, the median of the rounds'"'"' own MB/s | | %.0f | %.2fx |\n", r, r / c }'
  awk -v r="$only_rate_median" -v c="$copy" 'BEGIN {
    printf "| borrowing only, reading only node 0'"'"'s chunks (the median of the rounds'"'"' MB/s) | | %.0f | %.2fx |\n", r, r / c }'
  echo
  echo "Borrowing only, the median round: the CPU time each process used during it (user and system,"
  echo "/proc and /usr/bin/time, 10 ms steps): node 0 (the owner) ${borrow_cpu0:-?} ms, node 1 (the"
  echo "borrowing daemon) ${borrow_cpu1:-?} ms, its reader ${borrow_cpu_reader:-?} ms, in $(awk -v s="$borrow_seconds" 'BEGIN { printf "%.0f", s * 1000 }') ms of wall time on"
  echo "$(nproc) cores.  Each round, wall seconds, MB borrowed, then those CPU figures:"
  printf '%s' "$borrow_rounds" | awk '{ printf "%.3f s, %.1f MB, %s/%s/%s ms; ", $1, $2 / 1e6, $4, $5, $6 } END { print "" }'
  echo
  echo "Borrowing only, reading only node 0's chunks: the same two daemons, but the reader"
  echo "(\`larder_bench_borrow_read\`, bench/borrow_read.c) reads, as \`larder warm\` does, only the"
  echo "samples lying wholly in chunks node 0 owns, so that every byte it reads is borrowed in its"
  echo "clock.  Each round: wall seconds, MB borrowed, MB read, node 1's origin MB meanwhile, then"
  echo "the CPU ms of node 0, node 1 and the reader:"
  printf '%s' "$only_rounds" | awk '{ printf "%.3f s, %.1f MB, %.1f MB, %.1f MB, %s/%s/%s ms; ", $1, $2 / 1e6, $3 / 1e6, $4 / 1e6, $5, $6, $7 } END { print "" }'
  echo
  echo "What of the borrowing-only time is not borrowing (the median round): the same reader run"
  echo "again right after, everything resident (its start, the index, the OPEN, and reading and"
  echo "checking all $(awk -v s="$shard_bytes" 'BEGIN { printf "%.0f", s / 1e6 }') MB from node 1's cache, its own chunks among them, as the"
  echo "timed run also does) took $(awk -v s="${again_seconds:-0}" 'BEGIN { printf "%.0f", s * 1000 }') ms and ${again_cpu:-?} ms of its CPU; its start alone (\`larder cat\` of one"
  echo "resident sample) $(awk -v s="${start_seconds:-0}" 'BEGIN { printf "%.0f", s * 1000 }') ms.  Each round, the again run's ms, its CPU ms, the start's ms:"
  printf '%s' "$borrow_rounds" | awk '{ printf "%.0f, %s, %.0f; ", $7 * 1000, $8, $9 * 1000 } END { print "" }'
  echo
  echo "## 4. The floor: what borrowing could reach on this machine"
  echo
  echo "\`larder_bench_borrow_floor\` (bench/borrow_floor.c) on the same shards, nothing of larder in"
  echo "it: a sender process sendfile()s them over one loopback TCP connection; a receiver stages"
  echo "them into a file (recv of 1 MiB pieces then pwrite; the same hashing each piece first, as"
  echo "larderd checks what it borrows; splice socket -> pipe -> file; recv into a shared mapping of"
  echo "the file); a reader process, told of each piece over a pipe, preads it as \`larder warm\`"
  echo "does (256 KiB reads into 64 buffers in turn) and hashes each read with XXH3.  The copies"
  echo "discard what they receive (plain recv of up to 1 MiB, as section 1's copy; recv of whole"
  echo "MiB).  ${FLOOR_ROUNDS:-7} rounds, each mode once a round, alternated; medians.  The ratio is"
  echo "against the faster copy of the same run.  CPU: each process's, from getrusage, ms per MB moved"
  echo "(the reader's once its buffers are in memory)."
  echo
  echo "| mode | MB/s | vs copy | sender ms/MB | receiver ms/MB | reader ms/MB |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "$floor_out" | awk -v mb="$(awk -v s="$shard_bytes" 'BEGIN { print s / 1e6 }')" '
    function med(list,   n, a, i, j, t) { n = split(list, a, " ")
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return a[int((n + 1) / 2)] }
    /^median / { rate[$2] = $3; ratio[$2] = $4; order[++n] = $2; next }
    /^(bytes|xxh3) / { next }
    { s[$1] = s[$1] " " $4; r[$1] = r[$1] " " $5; d[$1] = d[$1] " " $6 }
    END { for (i = 1; i <= n; i++) { m = order[i]
      printf "| %s | %.0f | %.2fx | %.2f | %.2f | %s |\n", m, rate[m], ratio[m], med(s[m]) / mb, med(r[m]) / mb,
        (m ~ /^copy/ ? "-" : sprintf("%.2f", med(d[m]) / mb)) } }'
  echo
  awk -v r="$borrow_rate_median" -v c="$copy" -v f="$(printf '%s\n' "$floor_out" | awk '/^median copy/ && $3 > m { m = $3 } END { print m + 0 }')" 'BEGIN {
    printf "Section 1'"'"'s borrowing only, the median of its rounds: %.0f MB/s, %.2fx of section 1'"'"'s copy (%.0f MB/s); the\n", r, r / c, c
    printf "faster copy here: %.0f MB/s.\n", f }'
  echo "Each round (mode, MB/s, then the sender's, the receiver's and the reader's CPU ms):"
  printf '%s\n' "$floor_out" | awk '!/^(median|bytes|xxh3) / { printf "%s %s %s/%s/%s; ", $1, $3, $4, $5, $6 } END { print "" }'
  echo
  echo "## 3. Over UCX (larderd --transport ucx)"
  echo
  echo "The same serving and end-to-end runs with every daemon on UCX (UCX_TLS=tcp, then shm),"
  echo "against UCX's own ceiling measured in the same run: \`ucx_perftest -t ucp_am_bw -s 1048576\`"
  echo "(active messages of 1 MiB, one client; its MiB/s converted to MB/s).  Serving and the"
  echo "ceiling: the medians of ${UCX_ROUNDS:-3} alternated rounds (ceiling, serving); end to end: the"
  echo "median of ${UCX_ROUNDS:-3} rounds (two fresh daemons each, node 1 borrowing node 0's chunks), against"
  echo "that median ceiling.  The counters are the UCX hubs' (LARDER_UCX_STATS): the progress thread's passes"
  echo "and its sleeps on the worker's event fd, answers and the mmaps they took, and how the"
  echo "client received them."
  echo
  echo "| transport | ceiling MB/s | serving MB/s | serving vs ceiling | end to end MB/s | end to end vs ceiling |"
  echo "|---|---|---|---|---|---|"
  printf '%s' "$ucx_rows"
  echo
  echo "A second ceiling, beside the issue's: \`ucx_perftest\` sends one 1 MiB buffer again and"
  echo "again, hot in the CPU's cache; a daemon serving a dataset sends each MiB of its cache files"
  echo "once per pass, out of the page cache.  \`larder_bench_ucx_files\` (bench/ucx_files.c) is UCX"
  echo "alone moving those same bytes: node 0's cache files mapped and registered once, sent as"
  echo "active messages of 1 MiB, 8 in flight (the serving client's READs), received into 8"
  echo "rotating buffers, both sides busy-polling one thread as ucx_perftest does; as many passes"
  echo "as the serving runs; the median of the same alternated rounds.  The row above stays the"
  echo "issue's measure."
  echo
  echo "| transport | UCX sending the cache files MB/s | serving MB/s | serving vs that | ucx_perftest MB/s |"
  echo "|---|---|---|---|---|"
  printf '%s' "$ufiles_rows"
  echo
  echo "The same bytes moved the other ways UCX offers (bench/ucx_files.c; same rounds, medians),"
  echo "so that the files ceiling is the strongest found rather than one way of sending: 16"
  echo "messages in flight, messages of 4 MiB, tagged messages with the receives posted ahead (UCX"
  echo "matches each to its buffer inside progress and pulls it at once), and"
  echo "UCX_RNDV_SCHEME=put_zcopy on both sides; \"best\" is the highest of these and the row above."
  echo
  echo "| transport | AM 8 x 1 MiB | 16 in flight | 4 MiB messages | tagged, posted ahead | rendezvous put_zcopy | best | serving MB/s | serving vs best |"
  echo "|---|---|---|---|---|---|---|---|---|"
  printf '%s' "$ufiles_best_rows"
  echo
  printf '%s' "$ucx_notes"
  echo
  echo "## 2. Origin bytes per epoch"
  echo
  echo "Every node reads the whole dataset at the same time, each through its own daemon and cache."
  echo
  echo "| nodes | origin MB, all nodes | origin bytes / dataset | most one node read / dataset | borrowed MB |"
  echo "|---|---|---|---|---|"
  printf '%s' "$rows"
} >"$out"
cat "$out"
