# bench/restart.sh cut to a few MiB and N = 1, 2: every part runs against
# real daemons and a slowfs origin and the report comes out, with figures
# that follow from the setup alone: N direct readers draw exactly N
# checkpoints from the origin, one unhinted reader at least one; the
# simulation's table is there; a part whose command this branch lacks says
# what it needs; nothing is left mounted or running.  Then 8 readers through
# the public file API (VIA=files) draw the checkpoint from the origin about
# once.  Skipped where FUSE is not usable, and on a sanitizer build (many
# processes; the normal build runs it).
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS/.." && pwd)
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)
[ -e /dev/fuse ] || skip "no /dev/fuse"
command -v fusermount3 >/dev/null || skip "fusermount3 missing (scripts/install-deps installs fuse3)"
[ -x "$BUILD_ABS/slowfs" ] || skip "slowfs not built"
[ -x "$BUILD_ABS/larder_bench_restart" ] || fail "larder_bench_restart was not built"
/usr/bin/python3 -c "import numpy" 2>/dev/null || skip "numpy missing"
[ $sanitizer_build -eq 1 ] &&
  skip "a sanitizer build: the restart benchmark's smoke test runs on the normal build"
mounted() { grep -qs " $1 fuse" /proc/self/mounts; }
cleanup_hooks+=("mounted $WORK/run/mnt && fusermount3 -u -z $WORK/run/mnt")

mkdir -p "$WORK/results"
RESTART_WORK=$WORK/run BUILD_DIR=$BUILD_ABS RESULTS=$WORK/results/restart.md SIZE=8388608 \
  READERS="1 2" ORIGIN_MBPS=200 BASELINE_MAX_S=60 STEPS=5 BATCH=2 COMPUTE_MS=1 TRAIN_SAMPLES=40 ROUNDS=2 SCHED_IDLE=1 \
  "$ROOT/bench/restart.sh" >"$WORK/out.txt" 2>"$WORK/err.txt" ||
  fail "bench/restart.sh failed: $(tail -20 "$WORK/err.txt")"
report=$WORK/results/restart.md
[ -s "$report" ] || fail "no report"

# row FIELD N HOW: the table's FIELD-th column (1-based, after the leading |)
row() { awk -F'|' -v n="$2" -v how="$3" -v f="$1" \
  '$2 ~ "^ *" n " *$" && $3 ~ "^ *" how " *$" { gsub(/ /, "", $(f + 1)); print $(f + 1) }' "$report"; }
[ "$(row 5 1 direct)" = 1.000 ] || fail "one direct reader: origin/checkpoint $(row 5 1 direct), want 1.000"
[ "$(row 5 2 direct)" = 2.000 ] || fail "two direct readers: origin/checkpoint $(row 5 2 direct), want 2.000"
for n in 1 2; do
  ratio=$(row 5 $n unhinted)
  awk -v r="$ratio" 'BEGIN { exit !(r >= 1.0 && r < 10) }' ||
    fail "$n unhinted readers: origin/checkpoint '$ratio', want a number from 1"
done
grep -q '^| nothing (idle) | [0-9.]* | ' "$report" || fail "no idle training wait"
# the control (a second idle run in each round) and its ratio to the first, and the CPU
# pressure columns (-1 where there is no PSI)
grep -q '^| nothing again (control: idle vs idle) | [0-9.]* | .* | [0-9.]* (rounds: [0-9.]*, [0-9.]*) |$' "$report" ||
  fail "no idle-vs-idle control: $(grep 'control' "$report")"
grep -q '^| nothing (idle) |\( -\?[0-9.]* |\)\{10\} 1 |$' "$report" || fail "idle row without 10 figures: $(grep 'nothing (idle)' "$report")"
# beside hinted replication: the median of two rounds' p99 over idle, a number;
# and (SCHED_IDLE=1) the same with the daemons' background at SCHED_IDLE
if "$LARDER" hint --help >/dev/null 2>&1; then
  grep -q '^| `larder hint hot`.* | [0-9.]* (rounds: [0-9.]*, [0-9.]*) |$' "$report" ||
    fail "no hinted p99 / idle: $(grep 'hint hot' "$report")"
  grep -q '^| the same, background tasks at SCHED_IDLE .* | [0-9.]* (rounds: [0-9.]*, [0-9.]*) |$' "$report" ||
    fail "no SCHED_IDLE row: $(grep -A6 'beside it' "$report")"
fi
if "$LARDER" hint --help >/dev/null 2>&1; then
  grep -q 'origin requests 0, peer requests 0' "$report" || fail "evaluation reader: $(grep -A2 'Predictive' "$report")"
else
  grep -q 'needs `larder hint hot` (branch hints)' "$report" || fail "no 'needs larder hint hot'"
  grep -q 'needs `larder hint replicate`' "$report" || fail "no 'needs larder hint replicate'"
fi
grep -q '^| striped | 2/4 x 1 |' "$report" || fail "no simulated rows"
/usr/bin/python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert p["origin_bw"] > 0 and p["serve_bw"] > 0' \
  "$WORK/results/restart-measured.json" || fail "restart-measured.json"
# VIA=files: readers through the public file API with their node's cache
# (what `larder.open` does), two on each daemon, on an origin slow enough
# that their READs wait in the daemons past the readers' timeout: the
# origin still serves the checkpoint about once.  A reader that gave up on
# its busy daemon read it all once more (4.45 checkpoints before readers
# waited on a daemon that greets); the daemons' hedged reads of the slow
# origin (bounded by their budget, docs/cache.md) may add some.
RESTART_WORK=$WORK/run BUILD_DIR=$BUILD_ABS RESULTS=$WORK/results/files/restart.md SIZE=8388608 \
  READERS="8" HOW=unhinted PARTS="" VIA=files ORIGIN_MBPS=4 BASELINE_MAX_S=60 \
  "$ROOT/bench/restart.sh" >"$WORK/out-files.txt" 2>"$WORK/err-files.txt" ||
  fail "bench/restart.sh VIA=files failed: $(tail -20 "$WORK/err-files.txt")"
report=$WORK/results/files/restart.md
grep -q 'larder_bench_restart files' "$report" || fail "VIA=files: the report does not say how readers read"
ratio=$(row 5 8 unhinted)
awk -v r="$ratio" 'BEGIN { exit !(r >= 1.0 && r < 1.5) }' ||
  fail "8 unhinted readers through larder.open's path: origin/checkpoint '$ratio', want 1.0-1.5"
! mounted "$WORK/run/mnt" || fail "slowfs left mounted"
left=$(pgrep -f -- "$WORK/run" || true)
[ -z "$left" ] || fail "left running: $left"
echo "ok"
