#!/usr/bin/env python3
"""The priorities part's figures for bench/restart.sh (kept apart so the
script stays one readable page).

    restart_figures.py cpu WORK LABEL PID...
        where the daemons' CPU went in the training run LABEL: their loop
        threads (the main thread of each PID), their pools' DEMAND+NEAR and
        HINTED+WARM tasks (STAT's classes cpu_us, from the files
        WORK/stat-train-LABEL-N.json the script saved), and the processes in
        all; seconds, "loops fg bg all"
    restart_figures.py medians < LINES
        the median of each column of whitespace-separated number lines
    restart_figures.py ratios IDLE OTHER
        the p99 (third column) of each OTHER line over the IDLE line of its
        round, and their median: "MEDIAN (rounds: R1, R2, ...)"
    restart_figures.py pooled WORK BASE LABEL
        the estimator that judges the target: every step of every round of a
        run kind pooled (WORK/train-LABEL-ROUND.trace, restart_read.c's
        RESTART_TRACE: a step's start, wait and CPU pressure a line), the p99
        of LABEL's pooled steps over the p99 of BASE's, and a 95% interval
        for that ratio by a two-level bootstrap (rounds drawn with
        replacement, then steps within each drawn round, for both kinds
        alike: steps of one round share its machine's load, so rounds are
        the unit that varies); "p99 base_p99 ratio low high steps rounds"
    restart_figures.py pooled WORK BASE LABEL SKIP
        the same with each round's first SKIP steps left out of both kinds
        (an extra row, beside the target's: a round's first step carries the
        daemon's OPEN of the reader's index and the cold first borrows, once
        per dataset opened, not once per step)
"""
import json
import os
import statistics
import sys


def cpu(work, label, pids):
    tick = os.sysconf("SC_CLK_TCK")

    def seconds(path):  # utime + stime of a /proc stat file
        try:
            fields = open(path).read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            return 0.0

    loops = sum(seconds(f"/proc/{p}/task/{p}/stat") for p in pids)
    total = sum(seconds(f"/proc/{p}/stat") for p in pids)
    fg = bg = 0.0
    for i in range(len(pids)):
        try:
            with open(os.path.join(work, f"stat-train-{label}-{i}.json")) as f:
                classes = json.load(f)["classes"]
        except (OSError, ValueError, KeyError):
            continue
        fg += sum(classes[c].get("cpu_us", 0) for c in ("demand", "near")) / 1e6
        bg += sum(classes[c].get("cpu_us", 0) for c in ("hinted", "warm")) / 1e6
    print("%.2f %.2f %.2f %.2f" % (loops, fg, bg, total))


def medians(lines):
    rows = [list(map(float, l.split())) for l in lines if l.strip()]
    print(" ".join("%.2f" % statistics.median(c) for c in zip(*rows)))


def ratios(idle_text, other_text):
    idle = [float(l.split()[2]) for l in idle_text.splitlines() if l.strip()]
    other = [float(l.split()[2]) for l in other_text.splitlines() if l.strip()]
    r = [o / i for o, i in zip(other, idle)]
    print("%.3f (rounds: %s)" % (statistics.median(r), ", ".join("%.3f" % x for x in r))
          if r else "-")


def step_waits(work, label, skip=0):
    """{round: [wait ms, ...]} of the run kind's traces in WORK, each
    round's first `skip` steps left out."""
    rounds = {}
    prefix = f"train-{label}-"
    for name in sorted(os.listdir(work)):
        if not (name.startswith(prefix) and name.endswith(".trace")):
            continue
        tag = name[len(prefix):-len(".trace")]
        if not tag.isdigit():
            continue  # another kind whose label starts with this one
        with open(os.path.join(work, name)) as f:
            waits = [float(l.split()[1]) for l in f if len(l.split()) >= 2][skip:]
        if waits:
            rounds[int(tag)] = waits
    return rounds


def p99(values):
    """The 99th percentile as restart_read.c takes it: the sorted value at
    floor((n - 1) * 0.99)."""
    v = sorted(values)
    return v[int((len(v) - 1) * 0.99)]


def pooled(work, base_label, label, draws=2000, seed=12, skip=0):
    import random

    base, other = step_waits(work, base_label, skip), step_waits(work, label, skip)
    if not base or not other:
        print("-")
        return
    everything = lambda rounds: [w for r in rounds.values() for w in r]
    point_base, point = p99(everything(base)), p99(everything(other))
    rng = random.Random(seed)

    def resample(rounds):
        keys = list(rounds)
        steps = []
        for _ in keys:
            r = rounds[rng.choice(keys)]
            steps.extend(rng.choice(r) for _ in r)
        return steps

    ratios = sorted(p99(resample(other)) / p99(resample(base)) for _ in range(draws))
    low, high = ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]
    print("%.2f %.2f %.3f %.3f %.3f %d %d" % (point, point_base, point / point_base, low, high,
                                             len(everything(other)), len(other)))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "cpu":
        cpu(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 2 and sys.argv[1] == "medians":
        medians(sys.stdin)
    elif len(sys.argv) == 4 and sys.argv[1] == "ratios":
        ratios(sys.argv[2], sys.argv[3])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "pooled":
        pooled(sys.argv[2], sys.argv[3], sys.argv[4],
               skip=int(sys.argv[5]) if len(sys.argv) == 6 else 0)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
