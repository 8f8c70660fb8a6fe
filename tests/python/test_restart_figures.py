"""bench/restart_figures.py's pooled estimator and bench/restart_trace.py's
slow-step summary (the priorities part of bench/restart.sh), on step and
daemon traces written here, against figures worked out by hand."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURES = os.path.join(REPO, "bench", "restart_figures.py")
TRACE = os.path.join(REPO, "bench", "restart_trace.py")


def write_steps(work, label, rnd, waits, start=1000.0):
    # restart_read.c's RESTART_TRACE: wall-clock start (s), wait (ms), CPU pressure (ms)
    with open(os.path.join(work, f"train-{label}-{rnd}.trace"), "w") as f:
        for i, w in enumerate(waits):
            f.write("%.3f %.2f %.2f\n" % (start + i, w, w / 2))


def run(*args):
    return subprocess.run([sys.executable, *args], check=True, capture_output=True,
                          text=True).stdout.split()


def test_pooled_p99_is_taken_over_all_rounds_at_once(tmp_path):
    # idle: rounds of 1..100 and 101..200 ms; pooled, the 200 waits 1..200 and
    # the p99 is the sorted value at floor(199 * 0.99) = 197, i.e. 198 ms
    write_steps(tmp_path, "idle", 1, range(1, 101))
    write_steps(tmp_path, "idle", 2, range(101, 201))
    # hinted: the same waits doubled: p99 396 ms, ratio exactly 2
    write_steps(tmp_path, "hinted", 1, [2 * w for w in range(1, 101)])
    write_steps(tmp_path, "hinted", 2, [2 * w for w in range(101, 201)])
    # another kind whose label starts with "hinted-": not pooled into hinted
    write_steps(tmp_path, "hinted-idle", 1, [10000] * 100)
    p, base, ratio, low, high, steps, rounds = run(FIGURES, "pooled", str(tmp_path), "idle",
                                                   "hinted")
    assert (float(p), float(base), float(ratio)) == (396.0, 198.0, 2.0)
    assert (int(steps), int(rounds)) == (200, 2)
    assert float(low) <= 2.0 <= float(high)
    assert float(low) < float(high)  # rounds differ: the interval has a width


def test_pooled_control_of_the_same_steps_is_one(tmp_path):
    for label in ("idle", "control"):
        for rnd in (1, 2, 3):
            write_steps(tmp_path, label, rnd, [5.0] * 99 + [50.0])
    out = run(FIGURES, "pooled", str(tmp_path), "idle", "control")
    # 300 steps, 3 of 50 ms: the p99 (index 296) is 5 ms in both
    assert out[:3] == ["5.00", "5.00", "1.000"]
    assert out[5:] == ["300", "3"]


def test_pooled_without_steps_says_so(tmp_path):
    write_steps(tmp_path, "idle", 1, [1.0] * 10)
    assert run(FIGURES, "pooled", str(tmp_path), "idle", "hinted") == ["-"]


def test_summary_splits_a_slow_step(tmp_path):
    # 98 steps of 1 ms and two of 100 ms, at t = 2000 s and 3000 s: the pooled
    # p99 (index floor(99 * 0.99) = 98 of 100) is 100 ms, and only those two
    # steps are at or above it
    slow_at = (2000.0, 3000.0)
    with open(tmp_path / "train-idle-1.trace", "w") as f:
        for i in range(98):
            f.write("%.3f 1.00 0.00\n" % (1000.0 + i))
        for at in slow_at:
            f.write("%.3f 100.00 40.00\n" % at)
    line = ("%.3f %d read %s %s 7 0 131072 queue=%s borrow=%s total=%s gate=0 origin=%s "
            "origin_bytes=%d origin_reads=1 ahead=0 fg=0 bg=0 rc=0\n")
    with open(tmp_path / "daemons-idle-1.trace", "w") as f:
        for at in slow_at:
            ms = at * 1000
            # the reader's two READs on node 0: 60 ms (5 queued, 50 borrowing) and
            # 20 ms (all at node 0's origin); the owner's origin read for the
            # borrow, 45 ms; a HINTED read of 1 MiB from the origin on node 1
            f.write(line % (ms + 1, 0, "local", "demand", 5, 50, 60, 0, 0))
            f.write(line % (ms + 62, 0, "local", "demand", 0, 0, 20, 20, 131072))
            f.write(line % (ms + 6, 2, "peer", "demand", 0, 0, 48, 45, 4194304))
            f.write(line % (ms + 30, 1, "peer", "hinted", 0, 0, 10, 10, 1048576))
            f.write(line % (ms + 500, 0, "local", "demand", 0, 0, 1, 0, 0))  # after it
    text = " ".join(run(TRACE, "summary", str(tmp_path), "idle"))
    # kind, steps, p99, wait, READs, queue, borrow, node 0's origin, owners' origin,
    # outside READs (100 - 80), CPU pressure, background origin MiB
    assert "| idle | 2 | 100.0 | 100.0 | 80.0 | 5.0 | 50.0 | 20.0 | 45.0 | 20.0 | 40.0 | 1.0 |" \
        in text
