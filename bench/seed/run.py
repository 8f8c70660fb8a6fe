#!/usr/bin/python3
"""Run the seed benchmark: generate the dataset, then for each reader mount
slowfs over it (a fresh mount, the same profile and seed for every reader),
run R ranks of bench/seed/train.py against the mount, unmount, and write
the tables and plots (bench/seed/report.py).

Readers (--configs, in this order by default):
  memory  no storage at all: the harness's own cost, the best AU any reader
          can reach on this machine (a reference row)
  h5      PyTorch DataLoader + h5py over samples.h5 on the slow mount
  files   PyTorch DataLoader over one file per sample on the slow mount
  larder  larder.torch over the shards on the slow mount, node cache on
          local disk, empty before epoch 1

Every mount is undone and every process started here is ended on the way
out, whatever happens.  The process groups started (slowfs, each rank with
its DataLoader workers) are listed in WORK/pids while they run, so that
bench/seed.sh's trap can end them even if this driver is killed outright.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"

sys.path.insert(0, HERE)
import generate  # noqa: E402
import report  # noqa: E402


class Abort(Exception):
    pass


def on_signal(signum, frame):
    raise Abort(f"signal {signum}")


def log(message):
    print(message, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Groups:
    """The process groups started here, mirrored in a file for seed.sh."""

    def __init__(self, path):
        self.path, self.live = path, {}

    def _save(self):
        with open(self.path + ".tmp", "w") as f:
            for pid, kind in self.live.items():
                f.write(f"{kind} {pid}\n")
        os.replace(self.path + ".tmp", self.path)

    def add(self, process, kind):
        self.live[process.pid] = kind
        self._save()

    def remove(self, process):
        self.live.pop(process.pid, None)
        self._save()


class Mount:
    """slowfs over `source` at `mountpoint`, in the foreground, as a child."""

    def __init__(self, args, source, mountpoint, logfile, groups):
        self.mountpoint, self.groups, self.process = mountpoint, groups, None
        os.makedirs(mountpoint, exist_ok=True)
        if os.path.ismount(mountpoint):  # left by a run that was killed outright
            subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False)
        self.log = open(logfile, "w")
        self.process = subprocess.Popen(
            [args.slowfs, source, mountpoint, "--profile", args.profile,
             "--seed", str(args.fs_seed), "-f"] + args.slowfs_option,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        groups.add(self.process, "slowfs")
        for _ in range(200):
            if os.path.ismount(mountpoint):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.close()
        raise RuntimeError(f"slowfs did not mount {mountpoint}: see {logfile}")

    def close(self):
        if self.process is None:
            return
        if os.path.ismount(self.mountpoint):
            r = subprocess.run(["fusermount3", "-u", self.mountpoint], capture_output=True)
            if r.returncode != 0:  # busy: detach it; slowfs then exits
                subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], check=False)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.groups.remove(self.process)
        self.process = None
        self.log.close()


def end_group(process, groups):
    """End a rank and whatever it started (its DataLoader workers)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # workers left behind, if any
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    groups.remove(process)


def larder_index(mountpoint, work, env, data_dir):
    """The index to give larder: the one on the mount when larder can open
    it there; otherwise a local copy (of the same file, taken from the
    source directory) whose shard names are links to the shards on the
    mount, so that every shard read still goes through slowfs."""
    on_mount = os.path.join(mountpoint, "larder", "index.larder")
    probe = subprocess.run(
        [PYTHON, "-c", "import larder, sys; larder.Dataset(sys.argv[1], cache='').close()",
         on_mount], capture_output=True, text=True, env=env)
    if probe.returncode == 0:
        return on_mount, None
    error = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "?"
    local = os.path.join(work, "index")
    shutil.rmtree(local, ignore_errors=True)
    os.makedirs(local)
    shutil.copyfile(os.path.join(data_dir, "larder", "index.larder"),
                    os.path.join(local, "index.larder"))
    for name in sorted(os.listdir(os.path.join(mountpoint, "larder"))):
        if name != "index.larder":
            os.symlink(os.path.join(mountpoint, "larder", name), os.path.join(local, name))
    return os.path.join(local, "index.larder"), error


def run_config(args, config, data_dir, groups):
    work = args.work
    mountpoint = os.path.join(work, "mnt")
    cache = os.path.join(work, "cache")
    if config == "larder":
        shutil.rmtree(cache, ignore_errors=True)  # epoch 1 starts cold
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"),
               LARDER_LIBRARY=args.library, OMP_NUM_THREADS="1")
    out = os.path.join(work, f"result-{config}.json")
    if os.path.exists(out):
        os.unlink(out)
    mount = Mount(args, data_dir, mountpoint, os.path.join(work, f"slowfs-{config}.log"), groups)
    ranks = []
    try:
        extra = []
        # the emulator's parameters as it reports them (after any -o
        # overrides), so that the report describes what actually ran
        with open(os.path.join(mountpoint, ".slowfs-stats")) as f:
            reported = json.load(f)
        note = {"slowfs": {k: reported[k] for k in ("profile", "seed", "params")}}
        epochs = args.epochs if config == "larder" else args.direct_epochs
        if config == "larder":
            index, error = larder_index(mountpoint, work, env, data_dir)
            note |= {"index_error": error,
                    "index_bytes": os.path.getsize(os.path.join(data_dir, "larder",
                                                                "index.larder")),
                    "larder_options": json.loads(args.larder_options)}
            extra = ["--index", index, "--cache", cache, "--larder-options", args.larder_options]
        elif args.direct_steps:
            extra = ["--max-steps", str(args.direct_steps)]
        port = free_port()
        for rank in range(args.ranks):
            cmd = [PYTHON, os.path.join(HERE, "train.py"), "--config", config,
                   "--rank", str(rank), "--world", str(args.ranks), "--port", str(port),
                   "--data", mountpoint, "--mount", mountpoint, "--samples", str(args.samples),
                   "--batch", str(args.batch), "--workers", str(args.workers),
                   "--compute-ms", str(args.compute_ms), "--epochs", str(epochs),
                   "--seed", str(args.seed)] + extra
            if rank == 0:
                cmd += ["--out", out]
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
            raise RuntimeError(f"{config}: a rank failed (exit statuses "
                               f"{[r.returncode for r in ranks]})")
        with open(out) as f:
            result = json.load(f)
        result.update(note)
        return result
    finally:
        for r in ranks:
            end_group(r, groups)
        mount.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default=os.path.join(ROOT, "bench/work/seed"))
    p.add_argument("--samples", type=int, default=12800)
    p.add_argument("--batch", type=int, default=64, help="global batch G")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    p.add_argument("--compute-ms", type=float, default=150)
    p.add_argument("--epochs", type=int, default=3, help="larder's epochs")
    p.add_argument("--direct-epochs", type=int, default=1,
                   help="epochs of the other readers (no cache: every epoch alike)")
    p.add_argument("--direct-steps", type=int, default=0,
                   help="stop the other readers' epochs after this many steps (0: whole)")
    p.add_argument("--configs", default="memory,h5,files,larder")
    p.add_argument("--larder-options", default="{}",
                   help="extra larder.torch.IterableDataset arguments as JSON (default none)")
    p.add_argument("--profile", default="lustre-contended")
    p.add_argument("--fs-seed", type=int, default=7, help="slowfs's seed")
    p.add_argument("--seed", type=int, default=1, help="the data's and the order's seed")
    p.add_argument("--slowfs", default=os.path.join(ROOT, "build/slowfs"))
    p.add_argument("--larder", default=os.path.join(ROOT, "build/larder"))
    p.add_argument("--library", default=os.path.join(ROOT, "build/liblarder.so"))
    p.add_argument("--timeout", type=float, default=900, help="seconds per reader")
    p.add_argument("--results", default=os.path.join(ROOT, "bench/results"))
    p.add_argument("--name", default="seed", help="results: NAME.md, NAME-*.png")
    p.add_argument("--command", default="bench/seed.sh", help="shown in the results")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--print", action="store_true", help="print the summary to stdout")
    p.add_argument("--slowfs-option", action="append", default=[],
                   help="an extra slowfs argument (repeat), for every reader alike")
    args = p.parse_args()
    for name in ("work", "results", "slowfs", "larder", "library"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
    configs = args.configs.split(",")
    for config in configs:
        if config not in ("memory", "h5", "files", "larder"):
            p.error(f"unknown reader {config!r}")

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, on_signal)
    os.makedirs(args.work, exist_ok=True)
    groups = Groups(os.path.join(args.work, "pids"))
    started = time.time()
    tree = report.tree_state()
    if tree["dirty"]:
        log(f"seed: the tree at {tree['commit']} has uncommitted changes: the results will "
            f"claim no commit")
    data_dir = os.path.join(args.work, "data")
    generated = generate.generate(data_dir, args.samples, args.seed, args.larder, "256M")
    results = []
    for config in configs:
        log(f"seed: {config} on {args.profile} ({args.ranks} ranks x {args.workers} workers)")
        results.append(run_config(args, config, data_dir, groups))
    after = report.tree_state()
    if after["commit"] != tree["commit"] or after["dirty"]:  # changed while it ran
        tree = {"commit": tree["commit"], "dirty": True,
                "changes": after["changes"] or [f"HEAD moved to {after['commit']}"]}
    meta = {k: v for k, v in vars(args).items() if k != "slowfs_option"}
    meta.update(slowfs_options=args.slowfs_option, elapsed_s=time.time() - started,
                cores=os.cpu_count(), page_reporting=report.page_reporting(),
                sample_bytes=generate.SAMPLE_BYTES, generated_s=generated,
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), tree=tree)
    with open(os.path.join(args.work, f"{args.name}.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f)
    path, summary = report.write(meta, results, args.results, args.name,
                                 plots=not args.no_plots)
    log(f"seed: wrote {path} ({time.time() - started:.0f} s in all)")
    if args.print:
        print(summary)


if __name__ == "__main__":
    try:
        main()
    except Abort as e:
        sys.exit(f"seed: stopped ({e})")
