#!/usr/bin/python3
"""Calibrate slowfs profiles: mount a profile over a generated directory of
sample files, read them the way a PyTorch DataLoader does, and print the
per-step data wait the training loop would see.

The reading mimics the benchmark's direct baseline: W loader workers, each
building whole batches of B samples (open, read the file, close, one sample
after another), batch k going to worker k mod W, each worker at most
--prefetch batches ahead of the training loop.  The loop takes batches in
order and then "computes" for --compute-ms; the time it spends waiting for
its next batch is the step's data wait.  Files are sparse (zeros): their
contents do not matter, their sizes and the delays do.

Usage: tools/slowfs/calibrate.py [--profile NAME ...] [--steps N] [--readers W]
                                 [-- extra slowfs options]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def percentile(values, q):
    """The q-quantile (0..1) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


def make_samples(directory, count, size):
    """count sparse files of about `size` bytes (the sizes vary by +-5%, as
    real samples do, so reads are not all the same length)."""
    rng = random.Random(7)
    for i in range(count):
        path = os.path.join(directory, "sample%06d.bin" % i)
        with open(path, "wb") as f:
            f.truncate(int(size * rng.uniform(0.95, 1.05)))


def mount(slowfs, source, mountpoint, profile, seed, extra):
    """Start slowfs in the foreground and wait until the mount is up."""
    log = open(os.path.join(os.path.dirname(mountpoint), "slowfs-%s.log" % profile), "w+")
    process = subprocess.Popen(
        [slowfs, source, mountpoint, "-f", "--profile", profile, "--seed", str(seed)] + extra,
        stderr=log)
    for _ in range(100):
        if os.path.ismount(mountpoint):
            return process, log
        if process.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    sys.exit("slowfs did not mount: " + log.read())


def unmount(process, mountpoint):
    subprocess.run(["fusermount3", "-u", mountpoint], check=False)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_loader(mountpoint, names, args):
    """Emulate the DataLoader loop; returns (waits, fetch times, wall time)."""
    order = list(range(len(names)))
    random.Random(args.seed).shuffle(order)
    batches = [[names[order[(k * args.batch + j) % len(order)]] for j in range(args.batch)]
               for k in range(args.steps)]
    ready = [threading.Event() for _ in batches]
    fetch = [0.0] * len(batches)
    consumed = [0]  # steps the loop has taken, shared with the workers
    cond = threading.Condition()

    def worker(w):
        for k in range(w, len(batches), args.readers):
            with cond:  # no further ahead than the prefetch allows
                cond.wait_for(lambda: k < consumed[0] + args.readers * args.prefetch)
            start = time.monotonic()
            for name in batches[k]:
                fd = os.open(os.path.join(mountpoint, name), os.O_RDONLY)
                try:
                    while os.read(fd, 1 << 20):
                        pass
                finally:
                    os.close(fd)
            fetch[k] = time.monotonic() - start
            ready[k].set()

    threads = [threading.Thread(target=worker, args=(w,), daemon=True)
               for w in range(args.readers)]
    start = time.monotonic()
    for t in threads:
        t.start()
    waits = []
    for k in range(len(batches)):
        t0 = time.monotonic()
        ready[k].wait()
        waits.append(time.monotonic() - t0)
        with cond:
            consumed[0] = k + 1
            cond.notify_all()
        time.sleep(args.compute_ms / 1e3)
    wall = time.monotonic() - start
    for t in threads:
        t.join()
    return waits, fetch, wall


def report(profile, waits, fetch, wall, stats, args):
    window = args.compute_ms / 1e3
    ms = [w * 1e3 for w in waits]
    over = sum(1 for w in waits if w > window) / len(waits)
    over_1s = sum(1 for w in waits if w > 1.0) / len(waits)
    au = len(waits) * window / wall
    print("profile %s: %d steps, batch %d, %d readers, prefetch %d, compute %g ms"
          % (profile, len(waits), args.batch, args.readers, args.prefetch, args.compute_ms))
    print("  step wait ms: mean %.1f  p50 %.1f  p90 %.1f  p95 %.1f  p99 %.1f  max %.1f"
          % (statistics.mean(ms), percentile(ms, 0.5), percentile(ms, 0.9),
             percentile(ms, 0.95), percentile(ms, 0.99), max(ms)))
    print("  steps waiting > %g ms: %.1f%%   > 1 s: %.1f%%   wall %.1f s   AU %.1f%%"
          % (args.compute_ms, 100 * over, 100 * over_1s, wall, 100 * au))
    f = [x * 1e3 for x in fetch]
    print("  batch read ms (one worker, 64 files): p50 %.0f  p90 %.0f  p99 %.0f  max %.0f"
          % (percentile(f, 0.5), percentile(f, 0.9), percentile(f, 0.99), max(f)))
    if stats:
        r = stats["read_wait_ms"]
        print("  slowfs: %d reads, read ms p50 %.2f p90 %.2f p99 %.1f max %.0f, %d stalls, "
              "%d congested, max in flight %d, max queue %d"
              % (stats["reads"], r["p50"], r["p90"], r["p99"], r["max"], stats["tail_stalls"],
                 stats["congested_reads"], stats["max_in_flight"], stats["max_queue_depth"]))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slowfs", default=os.path.join(here, "..", "..", "build", "slowfs"))
    parser.add_argument("--profile", action="append",
                        help="profile to run (repeatable; default nfs-flash, lustre-contended)")
    parser.add_argument("--files", type=int, default=2048)
    parser.add_argument("--size", type=int, default=286 * 1000, help="bytes per sample")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--readers", type=int, default=4, help="loader workers")
    parser.add_argument("--prefetch", type=int, default=2, help="batches ahead per worker")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--compute-ms", type=float, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("extra", nargs="*", help="more slowfs options, after --")
    args = parser.parse_args()
    profiles = args.profile or ["nfs-flash", "lustre-contended"]

    with tempfile.TemporaryDirectory(prefix="slowfs-calibrate-") as work:
        source = os.path.join(work, "source")
        mountpoint = os.path.join(work, "mnt")
        os.mkdir(source)
        os.mkdir(mountpoint)
        make_samples(source, args.files, args.size)
        names = sorted(os.listdir(source))
        for profile in profiles:
            process, log = mount(args.slowfs, source, mountpoint, profile, args.seed, args.extra)
            try:
                waits, fetch, wall = run_loader(mountpoint, names, args)
                with open(os.path.join(mountpoint, ".slowfs-stats")) as f:
                    stats = json.load(f)
            finally:
                unmount(process, mountpoint)
                log.close()
            report(profile, waits, fetch, wall, stats, args)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
