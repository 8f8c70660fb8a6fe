# Staging on open (docs/mount.md, "Staging on open"), with a real mount
# over an HTTP origin that holds every shard read until the test lets it
# go (tests/tools/gated_origin.py): the first open of a file returns at
# once and stages the file in the background -- its first 4 MiB and last
# 1 MiB at once, the rest at most --stage-inflight reads at a time (2
# here, so 5 + 2 distinct reads reach the origin however long they are
# held, never more); a reader's miss elsewhere in the file reaches the
# origin past the held staging and is answered while staging still
# waits; once released, the whole file is staged without being read, and
# reading it all through the mount asks the origin for nothing more.
# With --no-stage-on-open an open stages nothing.  By default (a node
# cache that evicts nothing) it stages, and without --stage-inflight the
# limit is adaptive and starts at one read: 5 + 1
# held, never more; once let go, answered pieces with no reader missing
# double it, 1 -> 2 -> 4 -> 8 (the trace says so) and the file is staged whole.  The kernel's
# read-ahead for the mount stays at its 128 KiB while the file is being
# staged and is raised to 1 MiB once it is (as root; else the log says it
# stays).  Order and counts are checked, never time.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"
export PYTHONPATH=$TESTS/tools

# a --files index (block checksums: any range can be read and checked
# alone) of files the origin serves under a name it holds ("shard-")
mkdir -p src www
head -c $((24 << 20)) /dev/urandom >src/big.bin
head -c 5000 /dev/urandom >src/small.bin
cp -r src www/shard-files
"$LARDER" index --files www/shard-files -o www/files.larder >/dev/null

start_gated_origin www
base=$gated_base

# 1. with --no-stage-on-open: opening reads nothing
mount_larder off "$base/files.larder" --cache "$WORK/cache-off" --no-stage-on-open
/usr/bin/python3 - "$base" <<'PY' || fail "--no-stage-on-open: $(tail -3 mnt-off.log)"
import json, os, sys, time, urllib.request
fd = os.open("mnt-off/big.bin", os.O_RDONLY)
time.sleep(0.5)
log = json.load(urllib.request.urlopen(sys.argv[1] + "/__log", timeout=10))
assert log == [], "an open without staging read %s" % log
os.close(fd)
PY
umount_larder off
echo "--no-stage-on-open: an open reads nothing"

# 2. --stage-on-open: staged on open, bounded
mount_larder on "$base/files.larder" --cache "$WORK/cache-on" --stage-on-open --stage-inflight 2
/usr/bin/python3 - "$base" <<'PY' || fail "staging on open: $(tail -5 mnt-on.log)"
import json, os, sys, threading, time, urllib.request
base = sys.argv[1]
want = open("src/big.bin", "rb").read()
MiB = 1 << 20

def origin_log():
    seen = []
    for path, rng in json.load(urllib.request.urlopen(base + "/__log", timeout=10)):
        if [path, rng] not in seen:  # a hedge repeats its read's request
            seen.append([path, rng])
    return seen

def wait_log(n):
    for _ in range(400):
        log = origin_log()
        if len(log) >= n:
            return log
        time.sleep(0.05)
    raise SystemExit("the origin saw %d reads, want %d: %s" % (len(log), n, log))

fd = os.open("mnt-on/big.bin", os.O_RDONLY)  # returns with every origin read held
log = wait_log(7)  # head: 4 x 1 MiB, tail: 1 MiB, 2 staging reads
time.sleep(1.0)
log = origin_log()
assert len(log) == 7, "want 7 reads in flight (4 + 1 at NEAR, 2 at WARM), got %d: %s" % (len(log), log)
# a reader's miss in the middle: it reaches the origin past the held staging
got = {}
t = threading.Thread(target=lambda: got.setdefault("b", os.pread(fd, 4096, 15 * MiB + 123)),
                     daemon=True)
t.start()
def covering(at):  # the raw log's index of a read of big.bin covering `at`
    raw = json.load(urllib.request.urlopen(base + "/__log", timeout=10))
    for i, (path, rng) in enumerate(raw):
        first, last = map(int, rng.split("=")[1].split("-"))
        if path.endswith("/big.bin") and first <= at <= last:
            return i
    return None

at = 15 * MiB + 123
for _ in range(400):
    mine = covering(at)
    if mine is not None:
        break
    time.sleep(0.05)
else:
    raise SystemExit("the read's miss never reached the origin: %s" % origin_log())
time.sleep(0.3)
assert t.is_alive(), "the read returned with its origin read held"
urllib.request.urlopen(base + "/__release/%d" % mine, timeout=10).read()
t.join(30)
assert not t.is_alive(), "the read did not return once its origin read was let go"
assert got["b"] == want[15 * MiB + 123:15 * MiB + 123 + 4096], "wrong bytes"
assert len(origin_log()) <= 9, "staging went past its bound: %s" % origin_log()
print("held: %d origin reads, staging bounded; a miss answered past them" % len(origin_log()))
urllib.request.urlopen(base + "/__release/all", timeout=10).read()
for _ in range(600):
    if "staged sample" in open("mnt-on.log").read():
        break
    time.sleep(0.05)
else:
    raise SystemExit("staging never ended")
before = len(origin_log())
with open("mnt-on/big.bin", "rb") as f:
    assert f.read() == want, "the file read through the mount differs"
after = len(origin_log())
assert after == before, "reading the staged file asked the origin %d more times" % (after - before)
print("the whole file staged in the background (%d origin reads); reading it asked nothing" % before)
os.close(fd)
PY
cmp src/small.bin mnt-on/small.bin || fail "small.bin differs"
grep -q "staging sample .* on its first open" mnt-on.log ||
  fail "the log does not say what was staged: $(head -3 mnt-on.log)"
umount_larder on

# 3. the default, with a node cache that evicts nothing: staging on open
# with the adaptive limit (no --stage-inflight), one staging read held at
# first, then growing once pieces are answered
# (a second origin: the first answers everything at once since its release)
start_gated_origin www 2
base2=$gated_base
LARDER_MOUNT_TRACE=1 mount_larder adapt "$base2/files.larder" --cache "$WORK/cache-adapt"
/usr/bin/python3 - "$base2" <<'PY' || fail "adaptive staging: $(tail -5 mnt-adapt.log)"
import json, os, sys, time, urllib.request
base = sys.argv[1]

def origin_log():
    seen = []
    for path, rng in json.load(urllib.request.urlopen(base + "/__log", timeout=10)):
        if path.endswith("/big.bin") and [path, rng] not in seen:
            seen.append([path, rng])
    return seen

before = len(origin_log())  # what the earlier mounts asked
fd = os.open("mnt-adapt/big.bin", os.O_RDONLY)
for _ in range(400):
    if len(origin_log()) - before >= 6:
        break
    time.sleep(0.05)
time.sleep(1.0)
held = len(origin_log()) - before
assert held == 6, "want 6 reads held (4 + 1 at NEAR, 1 at WARM: the limit starts at one), got %d" % held
# while the file is being staged the kernel's read-ahead stays as it was (a
# cold miss brings 128 KiB, not 1 MiB past what is staged); raised after
st = os.stat("mnt-adapt")
bdi = "/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(st.st_dev), os.minor(st.st_dev))
if os.getuid() == 0:
    assert open(bdi).read().strip() != "1024", "read-ahead raised while the file is staged"
    assert "read-ahead for the mount raised" not in open("mnt-adapt.log").read()
urllib.request.urlopen(base + "/__release/all", timeout=10).read()
for _ in range(600):
    if "staged sample" in open("mnt-adapt.log").read():
        break
    time.sleep(0.05)
else:
    raise SystemExit("staging never ended")
log = open("mnt-adapt.log").read()
assert "staging limit 1 -> 2 (no reader missed)" in log, "the limit did not grow: %s" % log[-800:]
# slow start: a limit's worth of calm pieces doubles it (19 MiB of pieces: 1 + 2 + 4 answered)
assert "staging limit 2 -> 4 (no reader missed)" in log, "the limit did not double: %s" % log[-800:]
assert "staging limit 4 -> 8 (no reader missed)" in log, "the limit did not double: %s" % log[-800:]
with open("mnt-adapt/big.bin", "rb") as f:
    assert f.read() == open("src/big.bin", "rb").read(), "the file read through the mount differs"
os.close(fd)
print("adaptive: 1 staging read held at first, doubled once answered, the file staged whole")
PY
# the kernel's read-ahead for the mount: 1 MiB once staged (root), else said
dev=$(/usr/bin/python3 -c "import os,sys; d=os.stat(sys.argv[1]).st_dev; print('%d:%d' % (os.major(d), os.minor(d)))" "$WORK/mnt-adapt")
if [ "$(id -u)" = 0 ]; then
  [ "$(cat "/sys/class/bdi/$dev/read_ahead_kb")" = 1024 ] ||
    fail "read_ahead_kb of $dev is $(cat "/sys/class/bdi/$dev/read_ahead_kb"), want 1024"
  grep -q "read-ahead for the mount raised from .* to 1024 KiB" mnt-adapt.log ||
    fail "the log does not say the read-ahead was raised: $(head -5 mnt-adapt.log)"
else
  grep -q "read-ahead for the mount stays at" mnt-adapt.log ||
    fail "the log does not say the read-ahead stays: $(head -5 mnt-adapt.log)"
fi
umount_larder adapt
echo "mount_stage: all checks passed"
