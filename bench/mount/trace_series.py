#!/usr/bin/python3
"""Time series of a traced `larder mount` log (LARDER_MOUNT_TRACE=1): per
BIN seconds from the first traced miss or staged piece, the whole-file
staging's MB/s, its pieces in flight (mean), the readers' misses and their
mean wait.  Reads the 'at T s' stamps of the trace's miss and staged lines.

    bench/mount/trace_series.py MOUNT.LOG [BIN_S=0.5] [UNTIL_S=20]
"""
import re, sys, collections
log = open(sys.argv[1]).read().splitlines()
BIN = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
UNTIL = float(sys.argv[3]) if len(sys.argv) > 3 else 20
ev = []
for l in log:
    m = re.search(r'trace: staged (\d+) bytes at \d+ \((\d+) in flight\) at ([\d.]+) s', l)
    if m: ev.append((float(m.group(3)), 's', int(m.group(1)), int(m.group(2))))
    m = re.search(r'trace: miss .*?bytes: ([\d.]+) ms \((\d+) misses waiting, (\d+) staging.*\) at ([\d.]+) s', l)
    if m: ev.append((float(m.group(4)), 'm', float(m.group(1)), int(m.group(3))))
ev.sort(); t0 = ev[0][0]
b = collections.defaultdict(lambda: [0, 0, 0, 0.0, 0])
for t, k, x, y in ev:
    i = int((t - t0) / BIN)
    if k == 's': b[i][0] += x; b[i][1] += y; b[i][2] += 1
    else: b[i][3] += x; b[i][4] += 1
print("t_s staged_MB/s inflight misses miss_mean_ms")
tot = 0
for i in range(int(UNTIL / BIN)):
    s = b[i]; tot += s[0]
    print(f"{i*BIN:5.1f} {s[0]/BIN/1e6:7.0f} {s[1]/max(s[2],1):5.1f} {s[4]:4d} {s[3]/max(s[4],1):7.1f}  cum {tot/1e9:.2f} GB")
