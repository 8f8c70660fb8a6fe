# A daemon stopped (SIGTERM) while a peer has many READs in flight over
# UCX, over UCX's tcp and shared-memory transports (each skipped when UCX
# lacks it here; the test skips, 77, when it lacks both).  The READs of
# cached bytes are answered on UCX's progress thread, and their
# completions end READ jobs that count into the datasets: the daemon must
# stop taking READs and let those answers finish before its datasets
# close (larder__ucx_quiesce; main.c).  Passes when the daemon exits 0
# within 20 s with no sanitizer report in its log (under the ASan build a
# use after free or a leak fails it), and the peer ends too (its READs
# refused or failed, not hung).
source "$(dirname "$0")/lib.sh"
LARDERD=${LARDER%/larder}/larderd
BENCH=${LARDER%/larder}/larder_bench_peer
[ -x "$BENCH" ] || skip "no larder_bench_peer in this build"
command -v ucx_info >/dev/null || skip "no ucx_info (ucx-utils)"

# 48 samples of 256 KiB: 12 MiB in 8 shards, read over and over
mkdir -p src
for i in $(seq -f "%03g" 1 48); do head -c 262144 /dev/urandom >"src/s$i.bin"; done
"$LARDER" pack src -o origin --shard-size 2M >/dev/null
index=$WORK/origin/index.larder

ran=0
for tls in tcp shm; do
  case $tls in
    tcp) found=$(ucx_info -d 2>/dev/null | grep -c "Transport: tcp" || true) ;;
    shm) found=$(ucx_info -d 2>/dev/null | grep -cE "Transport: (posix|sysv)" || true) ;;
  esac
  if [ "$found" = 0 ]; then
    echo "UCX has no $tls transport here: skipped"
    continue
  fi
  ran=$((ran + 1))
  export UCX_TLS=$tls LARDER_UCX_STATS=1
  cluster_init "shutdown-$tls"
  members="127.0.0.1:$base" # one daemon: it owns everything
  : >"$WORK/daemon0.log"
  start_daemon 0 --transport ucx
  grep -q "peers over UCX ($tls)" "$WORK/daemon0.log" || fail "$tls: $(cat "$WORK/daemon0.log")"
  LARDER_SOCKET=$WORK/sock0 "$LARDER" warm "$index" --cache "$WORK/cache0" >/dev/null
  # 32 READs of 256 KiB in flight, passes enough to outlast the test
  LARDER_BENCH_TRANSPORT=ucx "$BENCH" "127.0.0.1:$base" "$index" "shutdown-$tls" 32 256 100000 \
    >"bench_$tls.out" 2>"bench_$tls.err" &
  bench=$!
  # stopped once the peer's READs stream: 300 answered over UCX
  served=0
  for _ in $(seq 400); do
    served=$("$LARDER" stat --socket "$WORK/sock0" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)["datasets"]
print(d[0]["peer_served_reads"] if d else 0)' 2>/dev/null || echo 0)
    [ "$served" -ge 300 ] && break
    sleep 0.05
  done
  [ "$served" -ge 300 ] || fail "$tls: the peer's READs did not stream ($served answered): $(cat "bench_$tls.err")"
  grep -q "^transport: " "bench_$tls.err" && fail "$tls: the peer ended early: $(cat "bench_$tls.err")"
  daemon=${pids[0]}
  kill -TERM "$daemon"
  for _ in $(seq 200); do
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$daemon" 2>/dev/null && fail "$tls: the daemon did not stop within 20 s: $(tail -5 "$WORK/daemon0.log")"
  status=0
  wait "$daemon" || status=$?
  pids=()
  [ "$status" = 0 ] || fail "$tls: the daemon exited $status: $(tail -40 "$WORK/daemon0.log")"
  grep -q "stopping" "$WORK/daemon0.log" || fail "$tls: no stop in the log"
  if grep -qE "AddressSanitizer|LeakSanitizer|runtime error" "$WORK/daemon0.log"; then
    fail "$tls: $(grep -A30 -E "AddressSanitizer|LeakSanitizer|runtime error" "$WORK/daemon0.log" | head -60)"
  fi
  # the answers went from the progress thread (none waited on)
  stats=$(grep "UCX stats" "$WORK/daemon0.log" | tail -1)
  unwaited=$(echo "$stats" | sed -n 's/.*, \([0-9]*\) with no thread waiting.*/\1/p')
  [ "${unwaited:-0}" -gt 0 ] || fail "$tls: no answer sent from the progress thread: $stats"
  # the peer ends soon: each READ it had in flight answered, or refused
  # (the daemon is stopping), none left to its 30 s wait (shared memory
  # cannot tell that the daemon went)
  for _ in $(seq 100); do
    kill -0 "$bench" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$bench" 2>/dev/null; then
    kill "$bench"
    fail "$tls: the peer still waits 10 s after the daemon stopped: $(tail -5 "bench_$tls.err")"
  fi
  wait "$bench" 2>/dev/null || true
  echo "$tls: stopped with $served+ READs answered and more in flight ($stats)"
done
[ "$ran" -gt 0 ] || skip "UCX has neither a tcp nor a shm transport here"
echo "ucx_shutdown: ok"
