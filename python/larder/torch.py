"""larder.torch: the plan as a PyTorch IterableDataset, and a DataLoader
that tracks progress for exact resumption.

The order comes from larder.Plan (docs/plan.md): global step t owns
positions [t*G, (t+1)*G) of the epoch's order; rank r of W yields its G/W
slice of every step; a rank's K DataLoader workers take its steps
round-robin from the step the pass starts at.  A DataLoader with
batch_size=G/W asks worker i mod K for its i-th batch, so it hands the
training loop the rank's batches in step order, and the sequence over all
ranks never depends on W or K.

State and workers: DataLoader workers are separate processes holding
copies of the dataset, so only the main process can know how far training
got.  The dataset keeps (epoch, step, sample) -- where the next pass
starts -- in the main process, and two things advance it: iterating the
dataset in the main process (num_workers=0), sample by sample, and
larder.torch.DataLoader, which counts the batches it hands out (each one
is exactly one step).  state_dict() reads that; load_state_dict() and
set_epoch() set it.  The main process publishes it in memory shared with
its DataLoader workers, which read it at the start of every pass, so
persistent workers follow it too.  A plain torch DataLoader with workers
does not advance it (state_dict() then raises): call set_epoch() each
epoch and track steps yourself, or use larder.torch.DataLoader.

Importing this module imports torch; `import larder` does not.
"""

import os
import time
from collections import deque

import torch
import torch.utils.data

from .dataset import Dataset
from .plan import Plan, resolve_deny
from .stats import summarize
from ._torch_state import _Position, _Prefetcher, _WaitSlots

__all__ = ["IterableDataset", "DataLoader", "MountOrderSampler", "StatefulLoader",
           "distributed_topology",
           "torch_dtypes"]

STATE_VERSION = 2  # 2 added 'sample' and 'world'

def distributed_topology():
    """(rank, world) of this process: from torch.distributed when it is
    initialized, else the RANK and WORLD_SIZE environment variables
    (torchrun), else SLURM_PROCID and SLURM_NTASKS (srun), else (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except (ImportError, RuntimeError):
        pass
    for rank_var, world_var in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, world = os.environ.get(rank_var), os.environ.get(world_var)
        if rank and world:
            return int(rank), int(world)
    return 0, 1


# numpy dtypes torch (1.13) has no tensor type for, and the next wider one
_WIDER = {"uint16": "int32", "uint32": "int64", "uint64": "int64"}


def torch_dtypes(sample):
    """Widen a sample's unsigned arrays that torch cannot hold (uint16 ->
    int32, uint32 and uint64 -> int64) so that the default collate can
    turn them into tensors; pass it as decode=, or call it from your own
    decode.  uint64 values of 2^63 or more raise ValueError."""
    out = {}
    for name, value in sample.items():
        wider = _WIDER.get(getattr(getattr(value, "dtype", None), "name", None))
        if wider is not None:
            if value.dtype.name == "uint64" and value.size and int(value.max()) >= 1 << 63:
                raise ValueError(f"field {name}: uint64 values do not fit in int64")
            value = value.astype(wider)
        out[name] = value
    return out


_MID_STEP = ("larder.torch: the position is mid-step (sample {sample} of step {step}: "
             "iteration in the main process stopped there); DataLoader workers and "
             "larder.torch.DataLoader's batches are whole steps, so resume it by iterating "
             "the dataset in the main process (a torch DataLoader with num_workers=0), or "
             "resume from a step boundary")


def _raise(error):
    """A generator that raises `error` when first asked for an item."""
    raise error
    yield


def _in_worker():
    return torch.utils.data.get_worker_info() is not None


# True in a DataLoader worker started by larder.torch.DataLoader, which
# counts what the main process hands out (set by _LoaderWorkerInit)
_tracked_worker = False


class _LoaderWorkerInit:
    """The worker_init_fn of larder.torch.DataLoader's workers: marks the
    process as one whose passes the main process follows, then calls the
    user's worker_init_fn, if any."""

    def __init__(self, user_fn):
        self.user_fn = user_fn

    def __call__(self, worker_id):
        global _tracked_worker
        _tracked_worker = True
        if self.user_fn is not None:
            self.user_fn(worker_id)


class IterableDataset(torch.utils.data.IterableDataset):
    """A larder dataset read in plan order, split over ranks and workers.

    IterableDataset(url, cache=None, seed=0, shuffle=True, batch_size=1,
                    drop_last=True, decode=None, mode="global",
                    locality_window=8, deny=None, rank=None, world=None,
                    yield_batches=False, read_ahead=1, prefetch=8,
                    block_size=0, cache_size=0, max_inflight=0, verify=False,
                    transform=None)

    batch_size is the GLOBAL batch G (samples per step over all ranks); a
    rank yields G/world samples per step, so give its DataLoader
    batch_size=G/world (larder.torch.DataLoader does).  With
    yield_batches=True it yields each step's samples as one list instead:
    use batch_size=None then.

    url:        index path or URL, or an open larder.Dataset
    cache ...:  open options, as for larder.Dataset
    seed:       the order's key (the same on every rank)
    shuffle:    False reads in index order (mode "none")
    drop_last:  drop the last partial global batch (True), or complete it
                with the epoch's first samples (False)
    decode:     called on each sample dict in the worker; its result is
                yielded instead
    transform:  a transform spec ("jpeg_decode_resize:224", docs/transforms.md):
                samples come transformed, by the node daemon or in the
                worker (array fields as numpy arrays of its dtype and shape)
    mode:       "global" or "locality" (shuffle shards, then samples within
                windows of locality_window shards; for cold object stores)
    deny:       None: INDEX.deny beside the index when it exists; False:
                none; a path; or a list of sample ids and keys
    rank/world: override what torch.distributed or the environment says
                (for tests and custom launchers)
    read_ahead: steps each reader fetches ahead on a background thread
                while the current one is consumed (0: none)
    prefetch:   with a cache, the reader's next `prefetch` steps are staged
                ahead by larder's prefetcher (in C, below the reader's own
                reads in priority), driven by the plan it already knows;
                0 turns it off

    Each step's samples are read with one Dataset.get_many() call, so every
    cache miss of the step is in flight at once.  The time each step waited
    for its reads is recorded; wait_stats() summarizes it (in the main
    process, including the waits of DataLoader workers).
    """

    def __init__(self, url, cache=None, seed=0, shuffle=True, batch_size=1, drop_last=True,
                 decode=None, mode="global", locality_window=8, deny=None, rank=None,
                 world=None, yield_batches=False, read_ahead=1, prefetch=8, block_size=0,
                 cache_size=0, max_inflight=0, verify=False, transform=None):
        super().__init__()
        if isinstance(url, Dataset):
            self.dataset = url
        else:
            self.dataset = Dataset(url, cache=cache, block_size=block_size,
                                   cache_size=cache_size, max_inflight=max_inflight,
                                   verify=verify)
        if int(batch_size) < 1:
            raise ValueError(f"batch_size (the global batch) must be >= 1, not {batch_size}")
        self.seed = int(seed)
        self.global_batch = int(batch_size)
        self.mode = mode if shuffle else "none"
        self.pad = not drop_last
        self.locality_window = int(locality_window)
        self.decode = decode
        # a transform spec (docs/transforms.md), run by the node daemon or in the worker
        self.transform = transform
        if transform is not None:
            from .transform import check_spec

            check_spec(transform)
        self.yield_batches = bool(yield_batches)
        self.read_ahead = max(0, int(read_ahead))
        self.prefetch = max(0, int(prefetch))
        self._rank_override = None if rank is None else int(rank)
        self._world_override = None if world is None else int(world)
        self._stamped = None  # (rank, world) the main process saw when it started workers
        # keys resolve to ids once, here; workers get plain ids
        path, ids = resolve_deny(self.dataset, deny)
        self._deny = path if path is not None else (ids if ids else False)
        with self._plan(epoch=0, world=1, rank=0) as plan:
            self._steps = plan.steps
            self._num_samples = plan.num_samples
            self._num_denied = plan.info.num_denied
        # where the next pass starts, in the main process: epoch, global
        # steps of it done, and samples of this rank's share of the next
        # step already handed out (only iterating in the main process stops
        # mid-step); _position is what the workers see
        self._epoch, self._step, self._sample = 0, 0, 0
        self._position = _Position()
        self._waits = _WaitSlots(self._steps)

    def _plan(self, epoch, world, rank, workers=1, worker=0, start_step=0):
        return Plan(self.dataset, seed=self.seed, epoch=epoch, global_batch=self.global_batch,
                    world=world, rank=rank, workers=workers, worker=worker,
                    start_step=start_step, pad=self.pad, mode=self.mode,
                    locality_window=self.locality_window, deny=self._deny)

    # ---- topology ----------------------------------------------------------

    def topology(self):
        """(rank, world) this dataset reads for: the rank= and world=
        overrides, else what the main process saw when it started the
        workers, else distributed_topology()."""
        if _in_worker() and self._stamped is not None:
            rank, world = self._stamped
        else:
            rank, world = distributed_topology()
        if self._rank_override is not None:
            rank = self._rank_override
        if self._world_override is not None:
            world = self._world_override
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in a world of {world}")
        if self.global_batch % world:
            raise ValueError(f"the world size {world} does not divide the global batch "
                             f"{self.global_batch}")
        return rank, world

    def _stamp(self):
        if not _in_worker():
            self._stamped = distributed_topology()

    def __getstate__(self):
        self._stamp()  # pickled for a spawned worker: it may not see torch.distributed
        return self.__dict__.copy()

    # ---- sizes -------------------------------------------------------------

    @property
    def steps(self):
        """Global steps per epoch (the same on every rank)."""
        return self._steps

    @property
    def num_samples(self):
        """Samples in every epoch: the dataset's minus the denied ones."""
        return self._num_samples

    @property
    def local_batch(self):
        """Samples per step on this rank: G / world."""
        return self.global_batch // self.topology()[1]

    def __len__(self):
        """What this rank yields in a whole epoch: steps * G/world samples
        (steps batches with yield_batches)."""
        return self._steps if self.yield_batches else self._steps * self.local_batch

    # ---- state -------------------------------------------------------------

    @property
    def epoch(self):
        """The epoch the next pass reads."""
        return self._epoch

    @epoch.setter
    def epoch(self, epoch):
        self._epoch = int(epoch)
        self._publish()

    def _publish(self):
        """Make the main process's position the one DataLoader workers
        start their next pass at (persistent ones included)."""
        self._position.publish(self._epoch, self._step, self._sample)

    def set_epoch(self, epoch):
        """Read epoch `epoch` next, from its start -- unless it is already
        the current epoch, so that resuming with load_state_dict() and then
        calling set_epoch(state['epoch']) keeps the position.  Reaches
        persistent DataLoader workers too."""
        epoch = int(epoch)
        if epoch != self._epoch:
            self._epoch, self._step, self._sample = epoch, 0, 0
        self._position.untracked = False
        self._publish()

    def _mark(self, epoch, step, sample=0, publish=True):
        """The main process has handed out everything before sample
        `sample` of this rank's share of global step `step` of `epoch`.
        publish=False while a larder DataLoader's workers may still be
        starting their pass (the loader publishes when the pass ends)."""
        if step >= self._steps:
            epoch, step, sample = epoch + 1, 0, 0
        self._epoch, self._step, self._sample = epoch, step, sample
        if publish:
            self._publish()

    def state_dict(self):
        """Where the next pass starts: {'epoch', 'step' (global steps of
        that epoch done), 'sample' (samples of this rank's share of the
        next step done: 0 unless iteration in the main process stopped
        mid-step), 'world', ...}.  At a step boundary the state resumes on
        any world size that divides the global batch; mid-step, only on the
        same world size.

        RuntimeError when the workers of a plain torch DataLoader have read
        since the position was last set: the main process cannot know what
        they handed to training (use larder.torch.DataLoader, or count
        yourself and load_state_dict(strict=False))."""
        if self._position.untracked:
            raise RuntimeError(
                "larder.torch: the workers of a plain torch DataLoader read this dataset, and "
                "the main process cannot know how much of it training consumed; use "
                "larder.torch.DataLoader (it counts the steps it hands out), iterate with "
                "num_workers=0, or count yourself and call load_state_dict({'epoch': e, "
                "'step': t}, strict=False) on restart (set_epoch() clears this)")
        return {
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "step": self._step,
            "sample": self._sample,
            "world": self.topology()[1],
            "seed": self.seed,
            "global_batch": self.global_batch,
            "mode": self.mode,
            "pad": self.pad,
            "num_samples": self._num_samples,
            "steps": self._steps,
            "dataset_id": self.dataset.info.dataset_id,
        }

    def load_state_dict(self, state, strict=True):
        """Continue from a state_dict(): the next pass starts at its epoch,
        step and sample.  With strict (the default), a state from another
        seed, global batch, mode, deny-list or dataset raises ValueError,
        since it would not continue the same sequence.  A state taken
        mid-step ('sample' > 0) needs the world size it was taken on, and
        a pass that runs in the main process (num_workers=0)."""
        if strict:
            mine = self._identity()
            for name in ("seed", "global_batch", "mode", "pad", "num_samples", "dataset_id"):
                if name in state and state[name] != mine[name]:
                    raise ValueError(f"state_dict has {name} {state[name]!r}, this dataset "
                                     f"{mine[name]!r}: not the same sequence (strict=False "
                                     f"to load anyway)")
        epoch, step = int(state["epoch"]), int(state["step"])
        sample = int(state.get("sample", 0))
        if step < 0 or sample < 0:
            raise ValueError(f"state_dict step {step}, sample {sample}: negative")
        if sample:
            world = self.topology()[1]
            if state.get("world") != world:
                raise ValueError(f"state_dict was taken mid-step (sample {sample} of step "
                                 f"{step}) on world size {state.get('world')}: it resumes "
                                 f"exactly only on that world size, not on {world}")
            if sample >= self.local_batch:
                raise ValueError(f"state_dict sample {sample} is not within a step of "
                                 f"{self.local_batch} samples")
        if self._steps and step >= self._steps:
            epoch, step, sample = epoch + 1, 0, 0  # that epoch was done
        self._epoch, self._step, self._sample = epoch, step, sample
        self._position.untracked = False
        self._publish()

    def _identity(self):
        """What load_state_dict(strict=True) compares."""
        return {"seed": self.seed, "global_batch": self.global_batch, "mode": self.mode,
                "pad": self.pad, "num_samples": self._num_samples,
                "dataset_id": self.dataset.info.dataset_id}

    # ---- statistics --------------------------------------------------------

    def wait_stats(self, threshold=None):
        """Summary of the most recent data wait of each step: count, total,
        mean, p50, p95, p99, max in seconds (and with `threshold`, the share
        of steps waiting longer).  A wait is the time a reader (this process
        or a DataLoader worker started from it) blocked for a step's reads,
        decoding excluded."""
        return summarize(self._waits.values(), threshold)

    def step_waits(self):
        """The recorded waits themselves (seconds, in step order mod the
        ring size)."""
        return self._waits.values()

    def reset_wait_stats(self):
        self._waits.clear()

    # ---- iteration ---------------------------------------------------------

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        in_main = info is None
        workers, worker = (1, 0) if in_main else (info.num_workers, info.id)
        rank, world = self.topology()
        if in_main:
            epoch, start, skip = self._epoch, self._step, self._sample
        else:
            # what the main process published: a persistent worker's own
            # copy of the position is as old as the worker
            epoch, start, skip = self._position.get()
            if not _tracked_worker:
                self._position.untracked = True
            if skip:
                # raised from the first next(): torch's worker loop passes an
                # error from there to the main process, but not one from a
                # persistent worker's iter()
                return _raise(ValueError(_MID_STEP.format(sample=skip, step=start)))
        start = min(start, self._steps)
        plan = self._plan(epoch, world, rank, workers, worker, start)
        return self._generate(plan, epoch, in_main, skip)

    def _generate(self, plan, epoch, in_main, skip):
        """Read plan's steps for this worker, read_ahead steps ahead; the
        first `skip` samples of the first step were handed out by an earlier
        pass.  In the main process, the position moves with every sample
        handed out.

        The first step is read in this thread with nothing else of this
        reader running: the read-ahead thread starts, and the prefetcher
        begins staging, once its samples are handed out, so that neither
        delays the first batch.  The prefetcher itself (which registers the
        plan with the node cache, for eviction by next use) starts at once."""
        dataset, decode, waits = self.dataset, self.decode, self._waits
        steps = plan.worker_steps()
        prefetcher = None
        executor = None
        pending = deque()  # (step, future or None, ids, offset, step's length)
        consumed = 0  # this worker's steps handed out, for the prefetcher

        def queue(count, background):
            nonlocal executor, skip
            while len(pending) < count:
                step = next(steps, None)
                if step is None:
                    return
                ids = plan.batch(step)
                total, offset, skip = len(ids), skip, 0
                ids = ids[offset:]
                job = None
                if background:
                    if executor is None:
                        # imported here: only once the first step is handed out
                        from concurrent.futures import ThreadPoolExecutor

                        executor = ThreadPoolExecutor(1, thread_name_prefix="larder-read")
                    job = executor.submit(dataset.get_many, ids, self.transform)
                pending.append((step, job, ids, offset, total))

        try:
            prefetcher = _Prefetcher(dataset, plan, self.prefetch, start_after=1)
            while True:
                if consumed:
                    if self.read_ahead:
                        queue(self.read_ahead, background=True)
                if not pending:
                    queue(1, background=False)
                if not pending:
                    return
                step, job, ids, offset, total = pending.popleft()
                started = time.perf_counter()
                samples = (job.result() if job is not None
                           else dataset.get_many(ids, self.transform))
                waits.record(step, time.perf_counter() - started)
                consumed += 1
                prefetcher.advance(consumed)
                if consumed > 1 and self.read_ahead:  # the next reads run while this step is handed out
                    queue(self.read_ahead, background=True)
                if decode is not None:
                    samples = [decode(s) for s in samples]
                # in the main process steps run start, start+1, ...: having
                # handed out sample k of `step`, k + 1 of it are done
                if self.yield_batches:
                    if in_main:
                        self._mark(epoch, step + 1)
                    yield samples
                    continue
                for done, sample in enumerate(samples, offset + 1):
                    if in_main:
                        if done < total:
                            self._mark(epoch, step, done)
                        else:
                            self._mark(epoch, step + 1)
                    yield sample
        finally:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
            if prefetcher is not None:
                prefetcher.stop()
            plan.close()

    def __repr__(self):
        return (f"larder.torch.IterableDataset({self.dataset.url!r}, seed={self.seed}, "
                f"batch_size={self.global_batch}, mode={self.mode!r}, epoch={self._epoch}, "
                f"step={self._step}/{self._steps}, sample={self._sample})")


class DataLoader(torch.utils.data.DataLoader):
    """A torch DataLoader over a larder.torch.IterableDataset that counts the
    steps it hands out, so state_dict() is exact with any num_workers.

    DataLoader(dataset, batch_size=None, num_workers=0, **kwargs)

    batch_size defaults to the dataset's local batch G/world (None with
    yield_batches); any other value is an error, because every batch must
    be exactly one step.  Other keyword arguments go to
    torch.utils.data.DataLoader; with persistent_workers=True the workers
    start each pass where the main process's state says (they read it from
    memory shared with it) and keep their open dataset between passes.

    Iterating starts at the dataset's (epoch, step).  After each batch the
    dataset's state moves one global step on; after the epoch's last step it
    becomes (epoch + 1, 0).  wait_stats() summarizes how long the training
    loop waited for each batch (the stall it sees, after the workers'
    read-ahead); dataset.wait_stats() how long the readers waited on storage.
    """

    def __init__(self, dataset, batch_size=None, **kwargs):
        if not isinstance(dataset, IterableDataset):
            raise TypeError("larder.torch.DataLoader needs a larder.torch.IterableDataset")
        if kwargs.get("num_workers"):
            kwargs["worker_init_fn"] = _LoaderWorkerInit(kwargs.get("worker_init_fn"))
        if batch_size is None and not dataset.yield_batches:
            batch_size = dataset.local_batch
        super().__init__(dataset, batch_size=batch_size, **kwargs)
        self._loader_waits = _WaitSlots(dataset.steps, shared=False)

    def __iter__(self):
        dataset = self.dataset
        expected = None if dataset.yield_batches else dataset.local_batch
        if self.batch_size != expected:
            raise ValueError(f"batch_size is {self.batch_size}, but one step of this rank is "
                             f"{expected} samples" + (" (yield_batches: use None)"
                                                      if dataset.yield_batches else ""))
        if dataset._sample:  # its batches would straddle steps
            raise ValueError(_MID_STEP.format(sample=dataset._sample, step=dataset._step))
        dataset._stamp()  # before the workers start
        epoch, step = dataset.epoch, dataset._step
        # the workers (new, or persistent ones resuming) start where the
        # main process is; while they start, the position moves here only
        dataset._publish()
        batches = super().__iter__()
        waits = self._loader_waits
        try:
            asked = time.perf_counter()
            for batch in batches:
                waits.record(step, time.perf_counter() - asked)
                step += 1
                dataset._mark(epoch, step, publish=False)
                yield batch
                asked = time.perf_counter()
        finally:
            dataset._publish()

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state, strict=True):
        self.dataset.load_state_dict(state, strict=strict)

    def wait_stats(self, threshold=None):
        """How long the training loop waited for each batch (seconds; the
        most recent wait of each step)."""
        return summarize(self._loader_waits.values(), threshold)

    def reset_wait_stats(self):
        self._loader_waits.clear()


StatefulLoader = DataLoader


class MountOrderSampler(torch.utils.data.distributed.DistributedSampler):
    """torch's DistributedSampler(shuffle=True, drop_last=False) that tells
    the `larder mount` holding `path` (an HDF5 file read one member group,
    or with hdf5_dataset=, one row, per sample) the order it yields, at the start
    of every epoch, so that the mount stages this rank's next steps ahead of
    its reads (larder.mount.register_order; docs/mount.md).  It yields
    exactly what the DistributedSampler it is yields: the mount only learns
    the order.

    MountOrderSampler(dataset, path, batch_size, num_replicas=None, rank=None,
                      seed=0, group=None, hdf5_dataset=None, window=None)

    batch_size is the DataLoader's (this rank's) batch; call set_epoch()
    each epoch, as with any DistributedSampler.  A registration the mount
    refuses raises OSError from the epoch's first iteration; a path that is
    not on a larder mount raises ValueError here.
    """

    def __init__(self, dataset, path, batch_size, num_replicas=None, rank=None, seed=0,
                 group=None, hdf5_dataset=None, window=None):
        from . import mount

        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed,
                         drop_last=False)
        self.path, self.batch_size = path, batch_size
        self.group, self.hdf5_dataset, self.window = group, hdf5_dataset, window
        mount._mount_of(path)  # not on a mount: say so now, not at the first epoch
        mount.order_line(path, self, batch_size, group=group, dataset=hdf5_dataset, window=window)

    def __iter__(self):
        from . import mount

        mount.register_order(self.path, self, self.batch_size, group=self.group,
                             dataset=self.hdf5_dataset, window=self.window)
        return super().__iter__()
