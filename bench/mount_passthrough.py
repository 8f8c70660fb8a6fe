#!/usr/bin/python3
"""Cached reads through `larder mount` against the same reads of the cache's
data file, the two alternated round by round (so that a loaded machine
weighs on both alike), for FUSE passthrough (docs/mount.md) and, with
--no-passthrough, the mount serving every read.  Uses bench/mount.sh's
patterns and reader (bench/mount/run.py's read_pattern); prints a markdown
table of medians and of the median paired ratio, and the mount's FUSE read
count (0 when every read went through passthrough).  Besides throughput, the
bytes read per CPU second of the reading process (user and system time, all
its threads): on a loaded machine that says more than the wall clock, and
with passthrough it holds all the work (the kernel's, in the reader's
threads); without, the mount process's own work is not in it.

  bench/mount.sh --quick                       # leaves a --files index and its
                                               # cache under bench/work/mount-quick
  bench/mount_passthrough.py --work bench/work/mount-quick [--no-passthrough]
"""
import argparse
import os
import resource
import runpy
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def measure(run, path, size, block, randomly, threads, seconds):
    """Bytes per second and bytes per CPU second of this process."""
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    rate = run["read_pattern"](path, size, block, randomly, threads, seconds)
    after, took = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - started
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rate, rate * took / cpu if cpu > 0 else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True, help="bench/mount.sh's work directory")
    p.add_argument("--larder", default=os.path.join(HERE, "..", "build", "larder"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=0.5)
    p.add_argument("--no-passthrough", action="store_true")
    args = p.parse_args()
    run = runpy.run_path(os.path.join(HERE, "mount", "run.py"), run_name="imported")
    work = os.path.abspath(args.work)
    index, cache = os.path.join(work, "index", "index.larder"), os.path.join(work, "cache")
    dataset = [d for d in os.listdir(cache) if len(d) == 32][0]
    data = os.path.join(cache, dataset, "000000.data")
    size = os.path.getsize(data)
    mnt = os.path.join(work, "pmnt")
    os.makedirs(mnt, exist_ok=True)
    options = ["--no-passthrough"] if args.no_passthrough else []
    subprocess.run([args.larder, "mount", index, mnt, "--cache", cache, "--log",
                    os.path.join(work, "pmnt.log"), "--force-unmount-stale", *options], check=True)
    mounted = os.path.join(mnt, "samples.h5")
    try:
        for path in (mounted, data):  # both in the page cache, as a hit finds them
            with open(path, "rb") as f:
                while f.read(1 << 24):
                    pass
        load = os.getloadavg()[0]
        print(f"{'--no-passthrough' if options else 'passthrough'}, {args.rounds} rounds of "
              f"{args.seconds:g} s each way, load {load:.1f} at the start, "
              f"{time.strftime('%H:%M UTC', time.gmtime())}\n")
        print("| reads | threads | mount MB/s | cache file MB/s | median paired ratio | "
              "mount MB per CPU s | file MB per CPU s | median paired ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for name, block, randomly in run["PATTERNS"]:
            for threads in (1, 8):
                m, c = [], []
                for _ in range(args.rounds):
                    m.append(measure(run, mounted, size, block, randomly, threads, args.seconds))
                    c.append(measure(run, data, size, block, randomly, threads, args.seconds))
                ratio = statistics.median(a[0] / b[0] for a, b in zip(m, c))
                cpu_ratio = statistics.median(a[1] / b[1] for a, b in zip(m, c) if b[1])
                print(f"| {name} | {threads} | {statistics.median(x[0] for x in m) / 1e6:.0f} | "
                      f"{statistics.median(x[0] for x in c) / 1e6:.0f} | {ratio:.2f}x | "
                      f"{statistics.median(x[1] for x in m) / 1e6:.0f} | "
                      f"{statistics.median(x[1] for x in c) / 1e6:.0f} | {cpu_ratio:.2f}x |",
                      flush=True)
        stats = dict(line.split(" ", 1) for line in open(os.path.join(mnt, ".larder-stats"))
                     .read().splitlines())
        print(f"\nFUSE reads the mount answered: {stats['reads']}; passthrough "
              f"{stats['passthrough']}, {stats['passthrough_opens']} opens through it; load "
              f"{os.getloadavg()[0]:.1f} at the end")
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False)


if __name__ == "__main__":
    sys.exit(main())
