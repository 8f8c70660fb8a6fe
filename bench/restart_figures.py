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


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "cpu":
        cpu(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 2 and sys.argv[1] == "medians":
        medians(sys.stdin)
    elif len(sys.argv) == 4 and sys.argv[1] == "ratios":
        ratios(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
