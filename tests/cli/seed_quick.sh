# bench/seed.sh --quick, cut smaller still (6 steps an epoch): every reader
# runs through slowfs and the table comes out; then a run stopped half way
# by SIGTERM leaves no mount and no process behind.  Skipped where FUSE is
# not usable.
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS/.." && pwd)
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)
[ -e /dev/fuse ] || skip "no /dev/fuse"
command -v fusermount3 >/dev/null || skip "fusermount3 missing (scripts/install-deps installs fuse3)"
[ -x "$BUILD_ABS/slowfs" ] || skip "slowfs not built"
/usr/bin/python3 -c "import torch, h5py, numpy" 2>/dev/null || skip "torch, h5py or numpy missing"
# A sanitizer build's library loads into Python only with the ASan runtime
# preloaded (tests/run does that for tests/python); this end-to-end run of
# many processes is left to the normal build.
[ $sanitizer_build -eq 1 ] &&
  skip "a sanitizer build: the seed smoke test runs on the normal build"

seed() { # seed WORKDIR: the quick benchmark at 6 steps an epoch
  SEED_WORK=$1 BUILD_DIR=$BUILD_ABS SAMPLES=384 "$ROOT/bench/seed.sh" --quick
}
mounted() { grep -qs " $1 fuse" /proc/self/mounts; }
leftovers() { # processes whose command line names DIR (ours: nothing else does)
  local pid
  for pid in $(pgrep -f -- "$1" || true); do
    [ "$pid" = "$$" ] || echo "$pid: $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)"
  done
}
cleanup_hooks+=("mounted $WORK/run/mnt && fusermount3 -u -z $WORK/run/mnt"
  "mounted $WORK/stop/mnt && fusermount3 -u -z $WORK/stop/mnt")

# 1. a whole quick run
seed "$WORK/run" >"$WORK/out.txt" 2>"$WORK/err.txt" || fail "seed.sh --quick failed: $(tail -20 "$WORK/err.txt")"
for row in "PyTorch + h5py, direct" "PyTorch, file per sample, direct" \
  "larder epoch 1 (cold)" "larder epoch 2 (warm)" "larder epoch 3 (warm)"; do
  grep -qF "| $row | 6 |" "$WORK/out.txt" || fail "no row '$row' of 6 steps: $(cat "$WORK/out.txt")"
done
grep -q "larder from epoch 2: AU" "$WORK/out.txt" || fail "no targets: $(cat "$WORK/out.txt")"
# larder's warm epochs read nothing from the origin but its index (one read per process)
warm=$(grep -F "| larder epoch 2 (warm) |" "$WORK/out.txt" | awk -F'|' '{print $(NF-3)}' | tr -d ' ,')
[ "$warm" -le 8 ] || fail "larder's warm epoch made $warm origin reads"
mounted "$WORK/run/mnt" && fail "the mount is still there"
[ -z "$(leftovers "$WORK/run")" ] || fail "left behind: $(leftovers "$WORK/run")"
[ ! -s "$WORK/run/pids" ] || fail "pids not cleared: $(cat "$WORK/run/pids")"

# 2. stopped half way: SIGTERM while the ranks read through the mount
SEED_WORK=$WORK/stop BUILD_DIR=$BUILD_ABS SAMPLES=384 "$ROOT/bench/seed.sh" --quick \
  >"$WORK/stop.out" 2>"$WORK/stop.err" &
run=$!
for _ in $(seq 600); do
  grep -q "^rank " "$WORK/stop/pids" 2>/dev/null && mounted "$WORK/stop/mnt" && break
  kill -0 "$run" 2>/dev/null || fail "seed.sh ended before it started a reader: $(tail "$WORK/stop.err")"
  sleep 0.1
done
grep -q "^rank " "$WORK/stop/pids" || fail "no rank started in 60 s"
sleep 1
kill -TERM "$run"
status=0
wait "$run" || status=$?
[ "$status" -ne 0 ] || fail "seed.sh exited 0 after SIGTERM"
mounted "$WORK/stop/mnt" && fail "SIGTERM left the mount"
sleep 0.5 # processes ending on their own signal
[ -z "$(leftovers "$WORK/stop")" ] || fail "SIGTERM left behind: $(leftovers "$WORK/stop")"
echo "ok"
