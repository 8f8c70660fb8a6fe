"""larder.Plan: the deterministic sample order of docs/plan.md.

A thin handle on larder_plan: the order of one epoch is a pure function of
(seed, epoch, position), cut into global steps of G samples; a rank takes
its slice of every step and a loader worker takes every K-th step of the
rank.  Nothing here computes the order itself: the C library does, so
Python, the CLI and the prefetcher agree bit for bit.
"""

import ctypes
import os
from collections import namedtuple

from . import _lib
from ._lib import check, lib
from .dataset import Dataset

__all__ = ["Plan", "PlanInfo", "resolve_deny"]

PlanInfo = namedtuple(
    "PlanInfo", "num_samples num_denied steps global_batch local_batch padded dropped epoch"
)
PlanInfo.__doc__ = """What larder_plan_info_get() reports.

num_samples: samples in every epoch (the dataset's minus denied ones);
steps: global steps per epoch; local_batch: ids per batch() (G / world);
padded / dropped: positions of the last step filled by padding, samples
left out by dropping the last partial global batch.
"""


def resolve_deny(dataset, deny):
    """Turn the `deny` argument of Plan into (deny_path or None, [ids]).

    None:  the customary deny-list beside the index (INDEX.deny) when it
           exists, as `larder plan` does; nothing otherwise
    False: no deny-list
    str or os.PathLike: a deny-list file (docs/plan.md has the format)
    an iterable of ints (sample ids) and strs (sample keys, or decimal ids
    when no sample has that key): those samples
    """
    if deny is None:
        path = ctypes.create_string_buffer(4096)
        found = check(lib.larder_plan_default_deny(_lib.as_bytes(dataset.url), path,
                                                   len(path)), dataset.url)
        return (path.value.decode("utf-8", "surrogateescape") if found else None), []
    if deny is False:
        return None, []
    if isinstance(deny, (str, bytes, os.PathLike)):
        return os.fsdecode(deny), []
    ids = []
    for entry in deny:
        if isinstance(entry, str):
            try:
                ids.append(dataset.index_of(entry))
            except KeyError:
                if not entry.strip().isdigit():
                    raise KeyError(f"deny: no sample with key {entry!r}") from None
                ids.append(int(entry))
        else:
            ids.append(int(entry))
    n = len(dataset)
    for i in ids:
        if not 0 <= i < n:
            raise IndexError(f"deny: sample {i} out of range ({n} samples)")
    return None, ids


class Plan:
    """The sample order of one epoch, for one rank and loader worker.

    Plan(dataset, seed=0, epoch=0, global_batch=1, world=1, rank=0,
         workers=1, worker=0, start_step=0, pad=False, mode="global",
         locality_window=0, deny=None)

    dataset: a larder.Dataset or the URL of an index (opened only while
    the plan is built).  mode: "global" (one keyed permutation), "locality"
    (shuffle shards, then samples within windows of `locality_window`
    shards; 0 means 8) or "none" (index order).  pad: complete the last
    partial global batch with the epoch's first samples instead of
    dropping it.  deny: see resolve_deny(); None uses INDEX.deny when it
    exists, like the command line.

    plan.steps is the number of global steps per epoch; plan.batch(step)
    this rank's G/world ids of that step; iterating the plan yields this
    worker's (step, ids) pairs: start_step + worker, + workers, ...
    """

    def __init__(self, dataset, seed=0, epoch=0, global_batch=1, world=1, rank=0, workers=1,
                 worker=0, start_step=0, pad=False, mode="global", locality_window=0,
                 deny=None):
        self._plan = None
        if mode not in _lib.PLAN_MODES:
            raise ValueError(f"mode must be one of {sorted(_lib.PLAN_MODES)}, not {mode!r}")
        owned = not isinstance(dataset, Dataset)
        ds = Dataset(dataset, cache="") if owned else dataset
        try:
            deny_path, deny_ids = resolve_deny(ds, deny)
            options = _lib.PlanOptions()
            options.version = _lib.LARDER_PLAN_OPTIONS_VERSION
            options.mode = _lib.PLAN_MODES[mode]
            options.seed = int(seed) & ((1 << 64) - 1)
            options.epoch = int(epoch)
            options.global_batch = int(global_batch)
            options.world = int(world)
            options.rank = int(rank)
            options.workers = int(workers)
            options.worker = int(worker)
            options.start_step = int(start_step)
            options.pad = 1 if pad else 0
            options.locality_window = int(locality_window)
            options.deny_path = None if deny_path is None else _lib.as_bytes(deny_path)
            c_ids = (ctypes.c_uint64 * max(len(deny_ids), 1))(*deny_ids)
            options.deny_ids = ctypes.cast(c_ids, _lib.c_u64p) if deny_ids else None
            options.num_deny_ids = len(deny_ids)
            out = ctypes.c_void_p()
            check(lib.larder_plan_create(ctypes.byref(out), ds._ensure_open(),
                                         ctypes.byref(options)), f"{ds.url}: plan")
        finally:
            if owned:
                ds.close()
        self._plan = out
        self.url = ds.url
        self.seed, self.world, self.rank = int(seed), options.world or 1, int(rank)
        self.workers, self.worker = options.workers or 1, int(worker)
        self.start_step, self.pad, self.mode = int(start_step), bool(pad), mode
        self.deny_path = deny_path
        self._refresh()

    def _refresh(self):
        info = _lib.PlanInfo()
        check(lib.larder_plan_info_get(self._handle(), ctypes.byref(info)), "plan")
        self._info = PlanInfo(*(getattr(info, name) for name, _ in _lib.PlanInfo._fields_))

    def _handle(self):
        if self._plan is None:
            raise ValueError("larder plan is closed")
        return self._plan

    def close(self):
        plan, self._plan = self._plan, None
        if plan is not None:
            lib.larder_plan_destroy(plan)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __reduce__(self):
        raise TypeError("a larder.Plan cannot be pickled: build one in each process")

    @property
    def info(self):
        return self._info

    @property
    def steps(self):
        """Global steps per epoch (the same on every rank and worker)."""
        return self._info.steps

    @property
    def epoch(self):
        return self._info.epoch

    @property
    def global_batch(self):
        return self._info.global_batch

    @property
    def local_batch(self):
        return self._info.local_batch

    @property
    def num_samples(self):
        return self._info.num_samples

    def set_epoch(self, epoch):
        """Switch to another epoch, keeping every other option."""
        check(lib.larder_plan_set_epoch(self._handle(), int(epoch)), "plan: set_epoch")
        self._refresh()

    def batch(self, step):
        """This rank's slice of global step `step`: a list of G/world ids,
        [] at or past the end of the epoch."""
        size = self._info.local_batch
        ids = (ctypes.c_uint64 * size)()
        n = check(lib.larder_plan_batch(self._handle(), int(step), ids, size), "plan: batch")
        return ids[:n]

    def worker_step(self, i):
        """The i-th step this worker handles, or None past the epoch's end."""
        rc = lib.larder_plan_worker_step(self._handle(), int(i))
        return None if rc == _lib.ENOTFOUND else check(rc, "plan: worker_step")

    def worker_steps(self):
        """This worker's steps, in order."""
        i = 0
        while True:
            step = self.worker_step(i)
            if step is None:
                return
            yield step
            i += 1

    def __iter__(self):
        """(step, ids) for each of this worker's steps."""
        for step in self.worker_steps():
            yield step, self.batch(step)

    def sample_at(self, position):
        """The sample id at `position` of the epoch's order; IndexError past
        the end (with pad, positions of the last step wrap)."""
        rc = lib.larder_plan_sample_at(self._handle(), int(position))
        if rc == _lib.ENOTFOUND:
            raise IndexError(f"position {position} is past the end of the epoch")
        return check(rc, "plan: sample_at")

    def position_of(self, sample_id):
        """The position of sample `sample_id` in the epoch's order; KeyError
        when it is denied or past the end of the dataset."""
        rc = lib.larder_plan_position_of(self._handle(), int(sample_id))
        if rc == _lib.ENOTFOUND:
            raise KeyError(sample_id)
        return check(rc, "plan: position_of")

    def __repr__(self):
        i = self._info
        return (f"larder.Plan({self.url!r}, seed={self.seed}, epoch={i.epoch}, "
                f"global_batch={i.global_batch}, world={self.world}, rank={self.rank}, "
                f"steps={i.steps})")
