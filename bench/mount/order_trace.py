#!/usr/bin/python3
"""A registered row order's progress in a traced `larder mount` log
(LARDER_MOUNT_TRACE=1, one mount's lines: from its last 'mounted at'): when
each rank's listing ended, and per 32 places of each rank's list (a
step of the benchmark's rank) when the order had staged them, how long a
member took to stage (median, max), and when the reader's position passed
them; then the readers' misses per second.  Times in s from the first
registration's listing start.

    bench/mount/order_trace.py MOUNT.LOG [PLACES=512]
"""
import collections, re, sys

lines = open(sys.argv[1]).read().splitlines()
PLACES = int(sys.argv[2]) if len(sys.argv) > 2 else 512
starts = [i for i, l in enumerate(lines) if "mounted at" in l]
lines = lines[starts[-1]:] if starts else lines
listed, staged, read_to, misses = {}, [], [], []
for l in lines:
    m = re.search(r"trace: order rank (\d+) listed at ([\d.]+) s \(began ([\d.]+)", l)
    if m:
        listed[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    m = re.search(r"trace: order rank (\d+) place (\d+) member \d+ staged \d+ bytes in ([\d.]+) ms "
                  r"at ([\d.]+) s", l)
    if m:
        staged.append((int(m.group(1)), int(m.group(2)), float(m.group(3)), float(m.group(4))))
    m = re.search(r"trace: order rank (\d+) read to place (\d+) at ([\d.]+) s", l)
    if m:
        read_to.append((int(m.group(1)), int(m.group(2)), float(m.group(3))))
    m = re.search(r"trace: miss .*?bytes: ([\d.]+) ms .* at ([\d.]+) s", l)
    if m:
        misses.append((float(m.group(2)) - float(m.group(1)) / 1e3, float(m.group(1))))
if not listed:
    sys.exit("no 'order rank R listed' line: not a traced mount with an order")
t0 = min(began for _, began in listed.values())
print("listing ended (s):", {r: round(end - t0, 2) for r, (end, _) in sorted(listed.items())})
if misses:
    print("first miss began at %.2f s" % (min(t for t, _ in misses) - t0))
for rank in sorted(listed):
    done = {p: (t - t0, ms) for r, p, ms, t in staged if r == rank}
    passed = [(p, t - t0) for r, p, t in read_to if r == rank]
    print("rank %d (the reader's position moved %d times by 32 places)" % (rank, len(passed)))
    for k in range(0, PLACES, 32):
        block = [done[p] for p in range(k, k + 32) if p in done]
        if not block:
            continue
        ms = sorted(x[1] for x in block)
        past = [t for p, t in passed if p >= k + 32]
        print("  places %4d-%4d: staged by %6.2f s, a member %4.0f ms median, %4.0f max; "
              "the reader past them at %s" % (k, k + 31, max(x[0] for x in block),
                                              ms[len(ms) // 2], ms[-1],
                                              "%.2f s" % min(past) if past else "never"))
per_second = collections.defaultdict(list)
for t, ms in misses:
    per_second[int(t - t0)].append(ms)
print("misses by second: " + ", ".join("%d s: %d (%.0f ms)" % (s, len(v), sum(v) / len(v))
                                       for s, v in sorted(per_second.items())[:20]))
