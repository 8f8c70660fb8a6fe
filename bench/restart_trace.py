#!/usr/bin/env python3
"""Line up a training reader's slowest steps with the daemons' request trace.

    bench/restart_trace.py STEPS_TRACE DAEMONS_TRACE [N]

STEPS_TRACE: the reader's RESTART_TRACE (bench/restart_read.c `train`: a
step's wall-clock start in s, its data wait in ms and the machine's CPU
pressure during that wait in ms, a line each).
DAEMONS_TRACE: the daemons' LARDERD_TRACE (src/larderd/trace.c: one line
per READ and hint staging job).  For each of the N slowest steps (5):
what background work overlapped it (and how much of it read the origin),
and every DEMAND/NEAR READ in it with its breakdown: pool queue, borrow,
total, time at the origin, bytes, background reads ahead of it at the
origin.  bench/restart.sh TRACE=1 writes both files.

    bench/restart_trace.py summary WORK LABEL...

Where the slow steps' wait went, per run kind, over every round at once:
the steps at or above the p99 of all of that kind's steps pooled
(WORK/train-LABEL-ROUND.trace beside WORK/daemons-LABEL-ROUND.trace), and
per step on average: the wait; the reader's own READs on its daemon (node
0) in all, and of that their pool queue, the time spent waiting for other
owners' chunks (borrow) and node 0's own origin time; the owners' origin
time for those borrowed chunks (peer DEMAND/NEAR READs); the rest (the
wait outside any READ: the client, its socket, scheduling); the CPU
pressure (PSI "some"); and the origin bytes of the background jobs
(HINTED, WARM) that overlapped those steps, each job counted whole.  A markdown table, a row per
kind, ms.
"""
import glob
import os
import sys


def spans_of(path):
    spans = []
    for line in open(path):
        f = line.split()
        if len(f) < 9:
            continue
        kv = dict(x.split("=", 1) for x in f[8:] if "=" in x)
        start = float(f[0])
        spans.append((start, start + float(kv.get("total", 0)), f, kv))
    spans.sort()
    return spans


def summary(work, labels):
    print("| kind | steps at or above p99 | p99 | wait | reader's READs | of which pool queue"
          " | borrow (other owners' chunks) | node 0's origin | owners' origin for them"
          " | outside READs | CPU pressure | background origin MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label in labels:
        rounds = []
        prefix = os.path.join(work, f"train-{label}-")
        for path in sorted(glob.glob(prefix + "*.trace")):
            tag = path[len(prefix):-len(".trace")]  # a round; not hinted-idle's "idle-1"
            daemons = os.path.join(work, f"daemons-{label}-{tag}.trace")
            if not tag.isdigit() or not os.path.exists(daemons):
                continue
            steps = [tuple(map(float, l.split())) for l in open(path) if l.strip()]
            rounds.append((steps, spans_of(daemons)))
        waits = sorted(s[1] for steps, _ in rounds for s in steps)
        if not waits:
            continue
        p99 = waits[int((len(waits) - 1) * 0.99)]
        sums = [0.0] * 9
        n = 0
        for steps, spans in rounds:
            for s in steps:
                if s[1] < p99:
                    continue
                a, b = s[0] * 1000, s[0] * 1000 + s[1]
                inside = [x for x in spans if x[1] > a and x[0] < b]
                mine = [x for x in inside if x[2][1] == "0" and x[2][2] == "read"
                        and x[2][3] == "local" and x[2][4] in ("demand", "near")]
                owners = [x for x in inside if x[2][3] == "peer" and x[2][4] in ("demand", "near")]
                bg = [x for x in inside if x[2][4] in ("hinted", "warm")]
                reads = sum(float(x[3]["total"]) for x in mine)
                sums[0] += s[1]
                sums[1] += reads
                sums[2] += sum(float(x[3]["queue"]) for x in mine)
                sums[3] += sum(float(x[3]["borrow"]) for x in mine)
                sums[4] += sum(float(x[3]["origin"]) for x in mine)
                sums[5] += sum(float(x[3]["origin"]) for x in owners)
                sums[6] += max(0.0, s[1] - reads)
                sums[7] += s[2] if len(s) > 2 and s[2] >= 0 else 0
                sums[8] += sum(int(x[3].get("origin_bytes", 0)) for x in bg) / 2**20
                n += 1
        m = [v / n for v in sums]
        print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |"
              % (label, n, p99, *m))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "summary":
        return summary(sys.argv[2], sys.argv[3:])
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    steps = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
    spans = spans_of(sys.argv[2])
    if not steps:
        sys.exit("no steps in " + sys.argv[1])
    t0 = steps[0][0] * 1000
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    for step in sorted(steps, key=lambda s: -s[1])[:count]:
        at, wait = step[0], step[1]
        a, b = at * 1000, at * 1000 + wait
        # a third column (restart_read.c since the PSI figures): the machine's CPU
        # pressure during the wait, ms in which some runnable task waited for a core
        psi = " (CPU pressure %.1f ms of it)" % step[2] if len(step) > 2 and step[2] >= 0 else ""
        print("step at %.0f ms: waited %.1f ms%s" % (a - t0, wait, psi))
        inside = [s for s in spans if s[1] > a and s[0] < b]
        background = [s for s in inside if s[2][4] in ("hinted", "warm")]
        origin = [s for s in background if int(s[3].get("origin_bytes", 0)) > 0]
        print("  background overlapping: %d jobs, %d reading the origin (%.1f MiB)"
              % (len(background), len(origin),
                 sum(int(s[3]["origin_bytes"]) for s in origin) / 2**20))
        for x, y, f, kv in inside:
            if f[4] not in ("demand", "near"):
                continue
            print("  %7.0f..%7.0f node %s %s %s %s shard %s @%s +%s queue %s borrow %s total %s"
                  " origin %s ms %s B ahead %s"
                  % (x - t0, y - t0, f[1], f[2], f[3], f[4], f[5], f[6], f[7], kv["queue"],
                     kv["borrow"], kv["total"], kv["origin"], kv["origin_bytes"], kv["ahead"]))


if __name__ == "__main__":
    main()
