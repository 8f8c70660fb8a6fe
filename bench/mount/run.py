#!/usr/bin/python3
"""Run the mount benchmark (issue 13): h5py reading the seed benchmark's
HDF5 file with the same harness (bench/seed/train.py: R ranks over gloo,
DataLoader workers, a compute sleep per step) three ways in one run:

  emulator  h5py straight from the slow-storage emulator (slowfs)
  mount     h5py through `larder mount` of a --files index of the emulator's
            directory (node cache on local disk, empty before epoch 1;
            epoch 1 cold, then warm)
  local     h5py from local disk (the data directory itself)

then cached throughput through the mount against the same reads of the
cache's data file (sequential 1 MiB, random 4 KiB, random 286 KiB; 1 and
8 threads; medians of --repeats runs), and writes a table and a plot.
Every mount is undone and every process ended on the way out.
"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEED = os.path.join(ROOT, "bench", "seed")
PYTHON = "/usr/bin/python3"
sys.path.insert(0, SEED)
import generate  # noqa: E402
import report  # noqa: E402
import run as seed_run  # noqa: E402


def log(message):
    print(message, file=sys.stderr, flush=True)


def is_mounted(path):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


class LarderMount:
    """`larder mount INDEX MNT --cache CACHE` in the background (ready when
    the command returns); unmounted by close()."""

    def __init__(self, args, index, mountpoint, cache, logfile, extra=()):
        self.mountpoint = mountpoint
        os.makedirs(mountpoint, exist_ok=True)
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False)
        # this run's log alone: the mount appends, and order_trace.py and
        # trace_series.py read a whole log as one run
        open(logfile, "w").close()
        subprocess.run([args.larder, "mount", index, mountpoint, "--cache", cache,
                        "--log", logfile, "--force-unmount-stale", *args.mount_option, *extra],
                       check=True)

    def close(self):
        if is_mounted(self.mountpoint):
            if subprocess.run(["fusermount3", "-u", self.mountpoint]).returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], check=False)
        for _ in range(100):  # the mount process ends after the unmount
            if not is_mounted(self.mountpoint):
                break
            time.sleep(0.05)


def run_ranks(args, config, data, mount, epochs, groups, out, max_steps=0):
    """The ranks' result; a start that fails within 20 s (another process
    took the rendezvous port between free_port() and the bind, on a machine
    shared with other runs) is tried again, twice at most."""
    for attempt in range(3):
        started = time.time()
        try:
            return run_ranks_once(args, config, data, mount, epochs, groups, out, max_steps)
        except RuntimeError:
            if attempt == 2 or time.time() - started > 20:
                raise
            log(f"mount bench: {config}: the ranks failed at start; again on another port")


def run_ranks_once(args, config, data, mount, epochs, groups, out, max_steps):
    port = seed_run.free_port()
    ranks = []
    try:
        for rank in range(args.ranks):
            cmd = [PYTHON, os.path.join(SEED, "train.py"), "--config", "h5", "--rank", str(rank),
                   "--world", str(args.ranks), "--port", str(port), "--data", data,
                   "--samples", str(args.samples), "--batch", str(args.batch),
                   "--workers", str(args.workers), "--compute-ms", str(args.compute_ms),
                   "--epochs", str(epochs), "--seed", str(args.seed)]
            if mount:
                cmd += ["--mount", mount]
            if max_steps:
                cmd += ["--max-steps", str(max_steps)]
            if rank == 0:
                cmd += ["--out", out]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            ranks.append(subprocess.Popen(cmd, env=env, start_new_session=True))
            groups.add(ranks[-1], "rank")
        deadline = time.time() + args.timeout
        while any(r.poll() is None for r in ranks):
            if any(r.poll() not in (None, 0) for r in ranks):
                break
            if time.time() > deadline:
                raise RuntimeError(f"{config}: ranks still running after {args.timeout:.0f} s")
            time.sleep(0.2)
        if any(r.returncode != 0 for r in ranks):
            raise RuntimeError(f"{config}: a rank failed ({[r.returncode for r in ranks]})")
        with open(out) as f:
            result = json.load(f)
        result["config"] = config
        return result
    finally:
        for r in ranks:
            seed_run.end_group(r, groups)


def warm_backing(path):
    """Read the emulator's backing file once, into this machine's page cache.
    slowfs serves its files through it, so a backing file that is not there
    adds this disk's reads to the emulated latency: the ordered cold epoch
    took 39.8 s right after `drop_caches`, 35.9 s in the next run (same code,
    same emulator phase; bench/results/mount.md, mount10).  Warmed, every
    configuration meets the same emulated origin."""
    buf = bytearray(16 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def register_order(args, mountpoint):
    """What a user of the mount does so that it stages the rows a rank reads
    next (docs/mount.md, "A registered row order for an HDF5 file"): one line
    per rank naming the file and its sampler -- here the harness's own
    DistributedSampler(shuffle=True, seed=SEED) over the file's groups,
    s000000... in name order, at epoch 0, the cold one.  (train.py is the
    seed benchmark's, unchanged: a script of one's own writes the line from
    each rank, with the epoch, at sampler.set_epoch.)"""
    control = os.path.join(mountpoint, ".larder-order")
    for rank in range(args.ranks):
        with open(control, "w") as f:
            f.write(f"file=samples.h5 sampler=torch seed={args.seed} epoch=0 rank={rank} "
                    f"world={args.ranks} batch={args.batch}"
                    + (f" window={args.order_window}" if args.order_window else "") + "\n")
    log(f"mount bench: registered: {open(control).read().strip()}")


def training(args, data_dir, groups):
    work = args.work
    slow = os.path.join(work, "slow")
    results, setup = [], {}
    h5_size = os.path.getsize(os.path.join(data_dir, "samples.h5"))
    for config in args.configs.split(","):
        log(f"mount bench: {config}")
        out = os.path.join(work, f"result-{config}.json")
        if config == "local":
            results.append(run_ranks(args, config, data_dir, None, args.local_epochs, groups,
                                     out))
            continue
        warm_backing(os.path.join(data_dir, "samples.h5"))
        emulator = seed_run.Mount(args, data_dir, slow, os.path.join(work, f"slowfs-{config}.log"),
                                  groups)
        try:
            if config == "emulator":
                results.append(run_ranks(args, config, slow, slow, args.direct_epochs, groups,
                                         out, args.direct_steps))
                continue
            # mount: the HDF5 file's --files index, made once from the emulator's
            # directory (the one read that checksums need), then the mount
            index_dir = os.path.join(work, "index")
            index = os.path.join(index_dir, "index.larder")
            if "index_s" not in setup and args.reuse_index and os.path.exists(index):
                setup["index_s"] = 0.0  # iterating: the index a run before made
            if "index_s" not in setup:
                shutil.rmtree(index_dir, ignore_errors=True)
                os.makedirs(index_dir)
                names = os.path.join(index_dir, "names")
                with open(names, "w") as f:
                    f.write("samples.h5\n")
                started = time.time()
                subprocess.run([args.larder, "index", "--files", slow, "--files-from", names,
                                "-o", index] + (["--checksum-block", args.checksum_block]
                                                if args.checksum_block else []),
                               check=True, stdout=subprocess.DEVNULL)
                setup["index_s"] = time.time() - started
            cache = os.path.join(work, "cache")
            shutil.rmtree(cache, ignore_errors=True)
            lmnt = os.path.join(work, "lmnt")
            extra = {"staged": ["--stage-on-open"], "nostage": ["--no-stage-on-open"]}.get(config, [])
            mount = LarderMount(args, index, lmnt, cache, os.path.join(work, f"{config}.log"),
                                extra)
            try:
                if config == "ordered":
                    with open(os.path.join(slow, ".slowfs-stats")) as f:
                        # staging starts at registration, before the epoch: counted from here
                        setup.setdefault("origin_from", {})[config] = json.load(f)["bytes"]
                    register_order(args, lmnt)
                result = run_ranks(args, config, lmnt, slow, args.epochs, groups, out)
            finally:
                mount.close()
            results.append(result)
            e1 = result["epochs"][0]
            setup["file_bytes"] = h5_size
            if e1.get("slowfs_before") and e1.get("slowfs_after"):
                origin = e1["slowfs_after"]["bytes"] - setup.get("origin_from", {}).get(
                    config, e1["slowfs_before"]["bytes"])
                if config in setup.get("origin_from", {}):
                    setup.setdefault("origin_early", {})[config] = (
                        e1["slowfs_before"]["bytes"] - setup["origin_from"][config])
                setup.setdefault("origin", {})[config] = origin
            setup["slowfs"] = {k: e1["slowfs_before"][k] for k in ("profile", "seed", "params")}
            if args.throughput and config == "mount":
                # the whole file resident for the throughput comparison
                subprocess.run([args.larder, "warm", index, "--cache", cache], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                setup["throughput"] = throughput(args, index, cache, h5_size)
        finally:
            emulator.close()
    return results, setup


# ---- cached throughput: the mount against the cache's data file -----------

PATTERNS = [("sequential 1 MiB", 1 << 20, False), ("random 4 KiB", 4096, True),
            ("random 286 KiB", 286 * 1024, True)]


def read_pattern(path, size, block, randomly, threads, seconds):
    """Bytes per second reading `path` with `threads` threads for `seconds`."""
    fd = os.open(path, os.O_RDONLY)
    done = [0] * threads
    stop = time.perf_counter() + seconds

    def worker(i):
        rng = random.Random(i)
        at = (size // threads) * i // block * block
        n = 0
        while time.perf_counter() < stop:
            for _ in range(16):
                if randomly:
                    at = rng.randrange(0, size - block) // 4096 * 4096
                elif at + block > size:
                    at = 0
                n += len(os.pread(fd, block, at))
                if not randomly:
                    at += block
        done[i] = n

    started = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.perf_counter() - started
    os.close(fd)
    return sum(done) / took


# MOUNT_THROUGHPUT_OPTIONS: more `larder mount` options for these mounts
# (--no-passthrough: the mount serves every read, as before passthrough)
THROUGHPUT_OPTIONS = os.environ.get("MOUNT_THROUGHPUT_OPTIONS", "").split()


def throughput(args, index, cache, size):
    datasets = [d for d in os.listdir(cache) if len(d) == 32]
    data_file = os.path.join(cache, datasets[0], "000000.data")
    with open(data_file, "rb") as f:  # the cache file in the page cache, as a hit finds it
        while f.read(1 << 24):
            pass
    lmnt = os.path.join(args.work, "tmnt")
    rows, first_reads = [], []
    for name, block, randomly in PATTERNS:
        for threads in (1, 8):
            mount_rates, kept_rates, file_rates = [], [], []
            for _ in range(args.repeats):
                # a fresh mount each time: the kernel's page cache of the mounted
                # file starts empty, so every read is a FUSE request; then the
                # same after one read of the whole file through the mount, whose
                # pages the kernel keeps (keep_cache)
                mount = LarderMount(args, index, lmnt, cache, os.path.join(args.work, "tmnt.log"),
                                    THROUGHPUT_OPTIONS)
                mounted = os.path.join(lmnt, "samples.h5")
                try:
                    # the first read of a cached sample through a fresh mount hashes
                    # all of it once (docs/mount.md, cache_check.c): timed apart, so
                    # that the figures are the reads' own
                    # (with passthrough, in the open: the reads never reach the mount)
                    started = time.perf_counter()
                    fd = os.open(mounted, os.O_RDONLY)
                    os.pread(fd, 1, 0)
                    first_reads.append(time.perf_counter() - started)
                    os.close(fd)
                    mount_rates.append(read_pattern(mounted, size, block, randomly, threads,
                                                    args.seconds))
                    with open(mounted, "rb") as f:
                        while f.read(1 << 24):
                            pass
                    kept_rates.append(read_pattern(mounted, size, block, randomly, threads,
                                                   args.seconds))
                finally:
                    mount.close()
                file_rates.append(read_pattern(data_file, size, block, randomly, threads,
                                               args.seconds))
            m, c = statistics.median(mount_rates), statistics.median(file_rates)
            k = statistics.median(kept_rates)
            rows.append({"pattern": name, "threads": threads, "mount": m, "file": c,
                         "kept": k, "ratio": m / c, "kept_ratio": k / c,
                         "first_read_s": statistics.median(first_reads)})
            log(f"  {name}, {threads} threads: mount {m / 1e6:.0f} MB/s ({m / c:.2f}x), kept "
                f"{k / 1e6:.0f} MB/s ({k / c:.2f}x), cache file {c / 1e6:.0f} MB/s")
    return rows


# ---- the report -------------------------------------------------------------

def congestion_windows(e):
    """The emulator's congestion episodes within epoch `e`, as (from, to) in
    seconds from the epoch's start (slowfs draws them from its seed at
    phase + k x every after its mount, docs: tools/slowfs/README.md), or
    None where the epoch did not read the emulator or it reported no phase.
    A cold epoch is not the same measurement with an episode over its first
    steps, when every read needs the origin, as with one over its last."""
    before = e.get("slowfs_before")
    if not before or "congestion_phase_s" not in before:
        return None
    every = before["params"]["congestion_every_s"]
    length = before["params"]["congestion_for_s"]
    start, end = before["uptime_s"], before["uptime_s"] + e["wall_s"]
    out, at = [], before["congestion_phase_s"]
    if at < start:
        at += (start - at) // every * every
    while at < end:
        if at + length > start:
            out.append((max(at, start) - start, min(at + length, end) - start))
        at += every
    return out


def au_rows(results):
    out = []
    for r in results:
        for e in r["epochs"]:
            waits = sorted(e["waits"])
            label = {"emulator": "h5py on the emulator", "local": "h5py on local disk",
                     "mount": "h5py through larder mount (default: staging on open, adaptive)",
                     "staged": "h5py through larder mount --stage-on-open",
                     "nostage": "h5py through larder mount --no-stage-on-open",
                     "ordered": "h5py through larder mount (default) + the sampler's order "
                                "registered"}[r["config"]]
            if r["config"] in ("mount", "staged", "nostage", "ordered"):
                label += f", epoch {e['epoch']}" + (" (cold)" if e["epoch"] == 1 else " (warm)")
            elif len(r["epochs"]) > 1:
                label += f", epoch {e['epoch']}"
            if len(waits) < e.get("epoch_steps", len(waits)):
                label += f" (first {len(waits)} of {e['epoch_steps']} steps)"
            out.append({"config": r["config"], "epoch": e["epoch"], "label": label,
                        "au": e["compute_s"] / e["wall_s"], "wall": e["wall_s"],
                        "congested": congestion_windows(e), "busy": e.get("machine_busy_s"),
                        "steps": len(waits), "mean": sum(waits) / len(waits),
                        "p99": report.percentile(waits, 0.99), "max": waits[-1]})
    return out


def write(meta, results, setup, results_dir, name, plots):
    rows = au_rows(results)
    local = [r["au"] for r in rows if r["config"] == "local"]
    local_au = statistics.median(local) if local else None
    lines = [f"# larder mount: h5py through the mount ({meta['date']})", "",
             f"`{meta['command']}` at {report.commit_text(meta)}; {report.machine_text(meta)}.",
             f"{meta['samples']} samples of {generate.SAMPLE_BYTES} bytes in one HDF5 file "
             f"({setup.get('file_bytes', 0) / 1e6:.0f} MB), {meta['ranks']} ranks x "
             f"{meta['workers']} DataLoader workers, global batch {meta['batch']}, compute "
             f"{meta['compute_ms']:g} ms per step (bench/seed/train.py's h5 reader, unchanged, "
             f"for all three).", ""]
    if setup.get("slowfs"):
        lines += [f"Emulator: slowfs profile {setup['slowfs']['profile']} (seed "
                  f"{setup['slowfs']['seed']}): "
                  f"{report.describe_profile(setup['slowfs']['params'])}.", ""]
    lines += ["| reader | steps | wait mean ms | p99 ms | max ms | epoch s | AU | AU / local | "
              "machine CPU busy (core-s) | emulator congested (epoch s) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rel = f"{r['au'] / local_au:.3f}x" if local_au else "-"
        windows = r.get("congested")
        congested = ("-" if windows is None else
                     ", ".join(f"{a:.1f}-{b:.1f}" for a, b in windows) or "none")
        busy = ("-" if r.get("busy") is None else
                f"{r['busy']:.1f} of {meta['cores'] * r['wall']:.0f}")
        lines.append(f"| {r['label']} | {r['steps']} | {1000 * r['mean']:.1f} | "
                     f"{1000 * r['p99']:.0f} | {1000 * r['max']:.0f} | {r['wall']:.1f} | "
                     f"{100 * r['au']:.1f}% | {rel} | {busy} | {congested} |")
    lines.append("")
    lines.append("Targets (AU against local disk's, the median of its epochs):")
    for config, what in (("mount", "larder mount (default)"),
                         ("staged", "larder mount --stage-on-open"),
                         ("nostage", "larder mount --no-stage-on-open"),
                         ("ordered", "larder mount (default) + order registered")):
        mount_rows = [r for r in rows if r["config"] == config]
        if not (local_au and mount_rows):
            continue
        e1 = mount_rows[0]["au"] / local_au
        warm = [r["au"] / local_au for r in mount_rows[1:]]
        lines.append(f"- {what}, epoch 1 (cold) >= 0.9x: {e1:.3f}x, "
                     f"{'met' if e1 >= 0.9 else 'MISSED'}")
        if warm:
            lines.append(f"- {what}, epochs 2+ (warm) >= 0.97x: lowest {min(warm):.3f}x, "
                         f"{'met' if min(warm) >= 0.97 else 'MISSED'}")
        origin = setup.get("origin", {}).get(config)
        if origin is not None:
            ratio = origin / setup["file_bytes"]
            lines.append(f"- {what}, origin bytes / file size in the cold epoch <= 1.1: "
                         f"{ratio:.3f} ({origin / 1e6:.0f} MB of "
                         f"{setup['file_bytes'] / 1e6:.0f} MB), "
                         f"{'met' if ratio <= 1.1 else 'MISSED'}")
            early = setup.get("origin_early", {}).get(config)
            if early is not None:
                lines.append(f"  (counted from the registration: {early / 1e6:.0f} MB of it was "
                             f"staged before the epoch began, while the ranks started)")
    if "index_s" in setup:
        lines.append(f"- setup, not in any epoch: `larder index --files` read the file through "
                     f"the emulator once for its checksums in {setup['index_s']:.1f} s")
    lines.append("")
    if setup.get("throughput"):
        lines += ["Cached throughput: a fresh mount of the fully staged file (every read a FUSE "
                  "request: the kernel's page cache of the mounted file starts empty) against "
                  "the same reads of the cache's data file (in the page cache), Python "
                  f"`os.pread` threads, {meta['seconds']:g} s each, median of {meta['repeats']}"
                  f"{'; mount options ' + ' '.join(THROUGHPUT_OPTIONS) if THROUGHPUT_OPTIONS else ''}"
                  ". Target >= 0.8x.", "",
                  "| reads | threads | cache file MB/s | mount MB/s (fresh mount) | "
                  "mount / file | mount MB/s (after one whole read) | kept / file |",
                  "|---|---|---|---|---|---|---|"]
        for t in setup["throughput"]:
            lines.append(f"| {t['pattern']} | {t['threads']} | {t['file'] / 1e6:.0f} | "
                         f"{t['mount'] / 1e6:.0f} | {t['ratio']:.3f}x"
                         f"{'' if t['ratio'] >= 0.8 else ' (below 0.8x)'} | "
                         f"{t['kept'] / 1e6:.0f} | {t['kept_ratio']:.3f}x"
                         f"{'' if t['kept_ratio'] >= 0.8 else ' (below 0.8x)'} |")
        lines.append("")
        first = setup["throughput"][-1].get("first_read_s")
        if first is not None:
            lines += [f"Not in the figures: the first read through each fresh mount checks the "
                      f"whole cached file against its checksum once (cache_check.c): "
                      f"{first:.2f} s at the median.", ""]
    lines.append("AU = compute time / epoch wall time. Machine CPU busy: the core-seconds every "
                 "process on the machine spent busy over the epoch (/proc/stat, rank 0), of the "
                 "cores x epoch seconds there were: the ranks', the mount's, the emulator's "
                 "(a FUSE file system in user space, on the same cores) and the kernel's "
                 "writeback; an epoch near all of them waits on CPU, not on the origin. "
                 "Emulator congested: the emulator's "
                 "congestion episodes (every read's latency x the profile's factor) that fell in "
                 "the epoch, in seconds from its start (its stats' congestion_phase_s); a cold "
                 "epoch with one over its first steps, while every read needs the origin, "
                 "waits seconds longer than with one later, so compare cold epochs with them "
                 "in view. Figures from one run on a shared machine; rerun for medians.")
    text = "\n".join(lines) + "\n"
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, name + ".md")
    with open(path, "w") as f:
        f.write(text)
    if plots:
        draw(rows, setup, os.path.join(results_dir, name + ".png"))
    return path, text


def draw(rows, setup, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = 2 if setup.get("throughput") else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels + 2, 4.5), squeeze=False)
    ax = axes[0][0]
    colors = {"emulator": "tab:red", "mount": "tab:blue", "staged": "tab:purple", "nostage": "tab:orange",
              "ordered": "tab:green",
              "local": "tab:green"}
    ax.barh([r["label"] for r in rows], [100 * r["au"] for r in rows],
            color=[colors[r["config"]] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("accelerator utilisation, %")
    ax.set_xlim(0, 100)
    ax.set_title("h5py: AU per epoch")
    if panels == 2:
        ax = axes[0][1]
        t = setup["throughput"]
        xs = range(len(t))
        ax.bar([x - 0.2 for x in xs], [x["ratio"] for x in t], width=0.4, color="tab:blue",
               label="FUSE requests")
        ax.bar([x + 0.2 for x in xs], [x["kept_ratio"] for x in t], width=0.4,
               color="tab:cyan", label="kernel cache kept")
        ax.axhline(0.8, color="grey", linestyle="--", label="target 0.8x")
        ax.set_xticks(range(len(t)))
        ax.set_xticklabels([f"{x['pattern']}, {x['threads']} thr" for x in t], fontsize=7,
                           rotation=30, ha="right")
        ax.set_ylabel("mount / cache file throughput")
        ax.set_title("cached reads through the mount")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class Abort(Exception):
    pass


def on_signal(signum, frame):
    raise Abort(f"signal {signum}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--name", default="mount")
    p.add_argument("--samples", type=int, default=12800)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--compute-ms", type=float, default=150)
    p.add_argument("--epochs", type=int, default=3, help="epochs through the mount")
    p.add_argument("--direct-epochs", type=int, default=1, help="epochs on the emulator")
    p.add_argument("--direct-steps", type=int, default=0,
                   help="stop the emulator's epoch after this many steps (0: whole)")
    p.add_argument("--local-epochs", type=int, default=2, help="epochs from local disk")
    # mount: the default (staging on open, adaptive, where the cache evicts
    # nothing, as here); nostage: --no-stage-on-open; staged: --stage-on-open;
    # ordered: the default with the harness's sampler order registered
    p.add_argument("--configs", default="emulator,mount,ordered,nostage,local")
    p.add_argument("--profile", default="lustre-contended")
    p.add_argument("--fs-seed", type=int, default=7)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slowfs", required=True)
    p.add_argument("--larder", required=True)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--throughput", type=int, default=1)
    p.add_argument("--reuse-index", action="store_true",
                   help="iterating: keep WORK/index/index.larder where a run before made it")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--command", default="bench/mount.sh")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--print", action="store_true")
    p.add_argument("--order-window", type=int, default=0,
                   help="steps the registered order stages ahead (0: the mount's default, 8)")
    p.add_argument("--checksum-block", default="",
                   help="the --files index's --checksum-block (default: larder index's)")
    p.add_argument("--mount-option", action="append", default=[],
                   help="an extra `larder mount` argument for every mount (repeat: "
                   "--mount-option=--threads --mount-option=32), for A/B runs")
    p.add_argument("--slowfs-option", action="append", default=[],
                   help="an extra slowfs argument (repeat: --slowfs-option=--bandwidth "
                   "--slowfs-option=300), for cuts that must stage as slowly as the full file")
    args = p.parse_args()
    for name in ("work", "results", "slowfs", "larder"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, on_signal)
    os.makedirs(args.work, exist_ok=True)
    groups = seed_run.Groups(os.path.join(args.work, "pids"))
    tree = report.tree_state()
    started = time.time()
    data_dir = os.path.join(args.work, "data")
    generate.generate(data_dir, args.samples, args.seed, args.larder, "256M")
    results, setup = training(args, data_dir, groups)
    after = report.tree_state()
    if after["commit"] != tree["commit"] or after["dirty"]:
        tree = {"commit": tree["commit"], "dirty": True, "changes": after["changes"]}
    meta = {k: v for k, v in vars(args).items() if k not in ("slowfs_option", "mount_option")}
    meta.update(mount_options=args.mount_option, cores=os.cpu_count(), tree=tree,
                page_reporting=report.page_reporting(),
                elapsed_s=time.time() - started,
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    with open(os.path.join(args.work, f"{args.name}.json"), "w") as f:
        json.dump({"meta": meta, "results": results, "setup": setup}, f)
    path, text = write(meta, results, setup, args.results, args.name, not args.no_plots)
    log(f"mount bench: wrote {path} ({time.time() - started:.0f} s)")
    if args.print:
        print(text)


if __name__ == "__main__":
    try:
        main()
    except Abort as e:
        sys.exit(f"mount bench: stopped ({e})")
