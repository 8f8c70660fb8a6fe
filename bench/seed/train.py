#!/usr/bin/python3
"""One rank of the seed benchmark's emulated data-parallel training run.

R copies of this script (ranks) form a torch.distributed group over gloo on
127.0.0.1.  Each rank reads its share of every global step with a DataLoader
of W workers, "computes" for a fixed time (a sleep: the GPU compute window),
then joins a one-number all_reduce (MAX of the ranks' data waits), which is
the step's barrier, as a synchronous data-parallel job's gradient all_reduce
is.  A step's wait is therefore what its slowest rank waited.  The compute
window starts when the batch is in hand; the host's own work on the batch
(checking it, letting it go) happens inside the window, as it would while
a GPU computes.

Readers (--config):
  memory  no storage: the same two arrays for every sample (the harness's
          own cost, a reference)
  h5      torch DataLoader + DistributedSampler over a map-style Dataset that
          opens DATA/samples.h5 with h5py in each worker and reads one group
          per __getitem__
  files   the same over DATA/files/sNNNNNN.bin, one file per sample
  larder  larder.torch.IterableDataset over --index (shards on the slow
          mount) with the node cache --cache, larder.torch.DataLoader

Rank 0 writes --out (JSON): per epoch the per-step waits (seconds), the
compute time, the wall time, and the slow mount's counters before and after.
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.utils.data

GRAPH_SHAPE = (9250, 2)
FEATURES_SHAPE = (1000, 53)


def machine_busy_s():
    """Seconds of CPU this machine's cores have spent busy (not idle or
    waiting on I/O) since boot, every process's together (/proc/stat): a
    difference over an epoch is the work it cost whatever ran it -- the
    ranks, the mount, the emulator, the kernel's writeback."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:8]]
    user, nice, system, idle, iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def key(i):
    return "s%06d" % i


class H5Samples(torch.utils.data.Dataset):
    """One HDF5 group per sample, the file opened lazily in each worker."""

    def __init__(self, path, samples):
        self.path, self.samples, self.h5 = path, samples, None

    def __len__(self):
        return self.samples

    def __getitem__(self, i):
        if self.h5 is None:
            import h5py

            self.h5 = h5py.File(self.path, "r")
        group = self.h5[key(i)]
        return {"graph": torch.from_numpy(group["graph"][()]),
                "features": torch.from_numpy(group["features"][()])}


class FileSamples(torch.utils.data.Dataset):
    """One file per sample: graph's float32 bytes, then features'."""

    def __init__(self, directory, samples):
        self.directory, self.samples = directory, samples
        self.split = 4 * GRAPH_SHAPE[0] * GRAPH_SHAPE[1]

    def __len__(self):
        return self.samples

    def __getitem__(self, i):
        with open(os.path.join(self.directory, key(i) + ".bin"), "rb") as f:
            raw = f.read()
        data = np.frombuffer(raw, dtype=np.float32)
        graph = data[: self.split // 4].reshape(GRAPH_SHAPE).copy()
        features = data[self.split // 4:].reshape(FEATURES_SHAPE).copy()
        return {"graph": torch.from_numpy(graph), "features": torch.from_numpy(features)}


class MemorySamples(torch.utils.data.Dataset):
    """No storage at all: every sample is the same two arrays, already in
    memory.  What the harness itself costs (collate, the DataLoader's
    hand-over, the barrier): the best AU any reader can reach here."""

    def __init__(self, samples):
        self.samples = samples
        self.graph = np.zeros(GRAPH_SHAPE, dtype=np.float32)
        self.features = np.zeros(FEATURES_SHAPE, dtype=np.float32)

    def __len__(self):
        return self.samples

    def __getitem__(self, i):
        return {"graph": torch.from_numpy(self.graph.copy()),
                "features": torch.from_numpy(self.features.copy())}


def fields(sample):
    """larder's sample dict, less its __key__ and __index__: the same two
    tensors per batch as the other readers hand over."""
    return {"graph": sample["graph"], "features": sample["features"]}


def slowfs_stats(mount):
    if not mount:
        return None
    with open(os.path.join(mount, ".slowfs-stats")) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", choices=("h5", "files", "larder", "memory"), required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--data", required=True, help="the dataset's directory on the slow mount")
    p.add_argument("--mount", help="the slow mount (for its counters)")
    p.add_argument("--index", help="larder: the index")
    p.add_argument("--cache", help="larder: the node cache directory")
    p.add_argument("--samples", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="global batch G")
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--compute-ms", type=float, required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--larder-options", default="{}",
                   help="larder: extra IterableDataset keyword arguments, as JSON")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop each epoch after this many steps (0: the whole epoch)")
    p.add_argument("--out")
    args = p.parse_args()

    torch.set_num_threads(1)
    # more workers than cores is fine here: they mostly wait on storage
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_batch = args.batch // world
    compute = args.compute_ms / 1000.0

    if args.config == "larder":
        import larder.torch

        dataset = larder.torch.IterableDataset(args.index, cache=args.cache, seed=args.seed,
                                               batch_size=args.batch, drop_last=True,
                                               decode=fields,
                                               **json.loads(args.larder_options))
        loader = larder.torch.DataLoader(dataset, num_workers=args.workers)
        steps = dataset.steps
        sampler = None
    else:
        if args.config == "memory":
            dataset = MemorySamples(args.samples)
        elif args.config == "h5":
            dataset = H5Samples(os.path.join(args.data, "samples.h5"), args.samples)
        else:
            dataset = FileSamples(os.path.join(args.data, "files"), args.samples)
        sampler = torch.utils.data.distributed.DistributedSampler(
            dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed,
            drop_last=True)
        loader = torch.utils.data.DataLoader(dataset, batch_size=local_batch, sampler=sampler,
                                             num_workers=args.workers, drop_last=True)
        steps = len(loader)
    epoch_steps = steps
    if args.max_steps:
        steps = min(steps, args.max_steps)

    flag = torch.zeros(1)
    epochs = []
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        else:
            dataset.set_epoch(epoch)
        dist.all_reduce(flag)  # every rank ready (its dataset open)
        before = slowfs_stats(args.mount) if rank == 0 else None
        dist.all_reduce(flag)  # start together
        cpu_before = machine_busy_s()
        waits, computed, released, barrier = [], 0.0, 0.0, 0.0
        started = time.perf_counter()
        asked = started
        batches = iter(loader)
        for step in range(steps):
            batch = next(batches)
            got = time.perf_counter()
            # the compute window starts when the batch is in hand; host work
            # on it (checking it, letting it go) overlaps the "GPU"'s compute
            if batch["features"].shape[0] != local_batch:
                raise RuntimeError(f"step {step}: batch of {batch['features'].shape[0]}")
            del batch
            released += time.perf_counter() - got
            time.sleep(max(0.0, got + compute - time.perf_counter()))
            done = time.perf_counter()
            slowest = torch.tensor([got - asked], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            waits.append(float(slowest[0]))
            asked = time.perf_counter()
            computed += done - got
            barrier += asked - done
        wall = asked - started
        cpu_busy = machine_busy_s() - cpu_before
        if steps == epoch_steps:
            rest = sum(1 for _ in batches)  # ends the workers (and finds no extra batch)
            if rest:
                raise RuntimeError(f"{rest} batches beyond the {steps} steps")
        del batches  # ends the workers
        dist.all_reduce(flag)
        after = slowfs_stats(args.mount) if rank == 0 else None
        reader = None
        if args.config == "larder":
            reader = dataset.wait_stats(threshold=compute)
            dataset.reset_wait_stats()
        epochs.append({"epoch": epoch + 1, "steps": steps, "epoch_steps": epoch_steps,
                       "waits": waits,
                       "compute_s": computed, "wall_s": wall, "release_s": released,
                       "barrier_s": barrier, "machine_busy_s": cpu_busy,
                       "slowfs_before": before, "slowfs_after": after,
                       "reader_waits": reader})
        if rank == 0:
            print(f"  {args.config} epoch {epoch + 1}: {steps} steps in {wall:.1f} s, "
                  f"AU {100 * computed / wall:.1f}%, wait mean "
                  f"{1000 * sum(waits) / steps:.1f} ms, max {1000 * max(waits):.0f} ms, "
                  f"{sum(1 for w in waits if w > compute)} over {args.compute_ms:g} ms",
                  file=sys.stderr, flush=True)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump({"config": args.config, "world": world, "workers": args.workers,
                       "batch": args.batch, "compute_ms": args.compute_ms,
                       "samples": args.samples, "epochs": epochs}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
