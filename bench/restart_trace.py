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
"""
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    steps = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
    spans = []
    for line in open(sys.argv[2]):
        f = line.split()
        if len(f) < 9:
            continue
        kv = dict(x.split("=", 1) for x in f[8:] if "=" in x)
        start = float(f[0])
        spans.append((start, start + float(kv.get("total", 0)), f, kv))
    spans.sort()
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
