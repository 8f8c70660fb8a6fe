# Daemons dying under load: three larderd over one HTTP origin (nginx on
# loopback), six readers reading random samples through them, one daemon
# killed with -9 and restarted every KILL_EVERY seconds.  Every byte read
# is compared with the origin's file: no wrong bytes, no errors, no read
# waiting more than a second, daemons' memory bounded.  The readers keep no
# cache of their own, so every read is a request to their node's daemon.
# bench/soak.sh runs it longer (SOAK_SECONDS, KILL_EVERY) and records the
# figures.
source "$(dirname "$0")/lib.sh"
SECONDS_TOTAL=${SOAK_SECONDS:-20}
KILL_EVERY=${KILL_EVERY:-4}
READERS=${SOAK_READERS:-6}
LARDERD=${LARDER%/larder}/larderd
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)
grep -q "^LARDER_SANITIZE:BOOL=ON" "$BUILD_ABS/CMakeCache.txt" 2>/dev/null &&
  skip "a sanitizer build: the soak runs on the normal build"
/usr/bin/python3 -c "import numpy" 2>/dev/null || skip "numpy missing for /usr/bin/python3"

make_tree src 300
"$LARDER" pack src -o www/packed --shard-size 600K >/dev/null

start_nginx www packed/index.larder
url=http://127.0.0.1:$port/packed/index.larder

reserve_ports 3
base=$port_base
members="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
printf 'soak-secret\n' >secret
pids=()
start_daemon() { # node
  local node=$1
  rm -f "$WORK/sock$node"
  "$LARDERD" --cache "$WORK/cache$node" --socket "$WORK/sock$node" \
    --listen "127.0.0.1:$((base + node))" --peers "$members" --secret-file secret \
    2>>"$WORK/daemon$node.log" &
  pids[$node]=$!
  for _ in $(seq 100); do [ -S "$WORK/sock$node" ] && return; sleep 0.05; done
  fail "daemon $node did not start: $(tail -5 "$WORK/daemon$node.log")"
}
cleanup_hooks+=('for p in "${pids[@]}"; do kill $p 2>/dev/null; done; wait')
for n in 0 1 2; do start_daemon $n; done

rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

readers=()
for r in $(seq 0 $((READERS - 1))); do
  n=$((r % 3))
  LARDER_SOCKET=$WORK/sock$n LARDER_CACHE= PYTHONPATH="$TESTS/../python" \
    LARDER_LIBRARY="$BUILD_ABS/liblarder.so" PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 "$TESTS/tools/soak_reader.py" "$url" www/packed "$SECONDS_TOTAL" "$r" \
    reader$r.json 2>reader$r.log &
  readers+=($!)
done

# kill one daemon at a time, in turn, and bring it back
started=$(date +%s)
kills=0 max_rss=0
while [ $(($(date +%s) - started)) -lt $((SECONDS_TOTAL - 2)) ]; do
  sleep "$KILL_EVERY"
  for n in 0 1 2; do
    kb=$(rss_kb "${pids[$n]}")
    [ "$kb" -gt "$max_rss" ] && max_rss=$kb
  done
  victim=$((kills % 3))
  kill -9 "${pids[$victim]}" 2>/dev/null || true
  wait "${pids[$victim]}" 2>/dev/null || true
  sleep 0.2
  start_daemon $victim
  kills=$((kills + 1))
done
for p in "${readers[@]}"; do wait "$p" || true; done
final_rss=0
for n in 0 1 2; do
  kb=$(rss_kb "${pids[$n]}")
  [ "$kb" -gt "$final_rss" ] && final_rss=$kb
done

/usr/bin/python3 - "$READERS" "$kills" "$max_rss" "$final_rss" <<'PY' || fail "soak failed"
import json, sys
readers, kills, max_rss, final_rss = (int(x) for x in sys.argv[1:5])
total = {"reads": 0, "wrong": 0, "errors": 0, "slow": 0}
worst = 0.0
problems = []
for r in range(readers):
    try:
        d = json.load(open(f"reader{r}.json"))
    except OSError:
        print(f"reader {r} wrote no results:", open(f"reader{r}.log").read()[-2000:])
        sys.exit(1)
    for k in total:
        total[k] += d[k]
    worst = max(worst, d["max_s"])
    problems += d["problems"]
print(f"{kills} kills, {total['reads']} reads, {total['wrong']} wrong, {total['errors']} errors, "
      f"{total['slow']} over 1 s, slowest {worst * 1000:.0f} ms; "
      f"daemon RSS at most {max_rss // 1024} MB, {final_rss // 1024} MB at the end")
for p in problems[:10]:
    print("  ", p)
ok = (total["reads"] > 100 * readers and total["wrong"] == 0 and total["errors"] == 0
      and total["slow"] == 0 and max(max_rss, final_rss) < 300 * 1024 and kills >= 2)
sys.exit(0 if ok else 1)
PY
