"""larder.torch's shared state and prefetch handle: the per-step wait
slots and the pass position that a DataLoader's main process shares with
its workers, and the C prefetcher over one reader's plan.  Internal to
larder.torch (kept apart so that torch.py stays readable); importing it
does not import torch."""

import ctypes
import math
import multiprocessing
import multiprocessing.context

from . import _lib
from ._lib import check, lib

# Per-step wait slots kept per dataset: a ring of at most this many steps
# (2 MiB), so the summary covers the most recent 262144 steps of an epoch.
_WAIT_SLOTS_MAX = 1 << 18


class _WaitSlots:
    """The most recent data wait of each step (seconds; NaN: none yet), in
    memory shared with the DataLoader workers the owner starts: each step is
    read by exactly one worker of a rank, so workers write disjoint slots
    and need no lock.  Forked workers inherit the mapping; spawned ones get
    it through pickling while the process is being started."""

    def __init__(self, steps, shared=True):
        self.size = max(1, min(int(steps), _WAIT_SLOTS_MAX))
        self.shared = shared
        if shared:
            self._slots = multiprocessing.RawArray(ctypes.c_double, self.size)
        else:
            self._slots = (ctypes.c_double * self.size)()
        self.clear()

    def clear(self):
        # all ones is a NaN: a memset, not a list of 262144 floats
        ctypes.memset(self._slots, 0xFF, ctypes.sizeof(self._slots))

    def record(self, step, seconds):
        self._slots[step % self.size] = seconds

    def values(self):
        return [x for x in self._slots[:] if not math.isnan(x)]

    def __getstate__(self):
        # shared memory travels only to a process being started; any other
        # copy (pickle, deepcopy) gets slots of its own
        spawning = multiprocessing.context.get_spawning_popen() is not None
        slots = self._slots if self.shared and spawning else None
        return {"size": self.size, "shared": self.shared, "slots": slots}

    def __setstate__(self, state):
        if state["slots"] is not None:
            self.size, self.shared, self._slots = state["size"], True, state["slots"]
        else:
            self.__init__(state["size"], shared=state["shared"])


class _Position:
    """Where the next pass of the dataset's DataLoader workers starts,
    (epoch, step, sample), as the main process last published it, in memory
    shared with the workers started from it: persistent workers read it at
    the start of every pass, so set_epoch() and load_state_dict() between
    passes reach them.  Plus a flag that the workers of a plain torch
    DataLoader raise: the main process cannot know what such a pass handed
    to training.  Forked workers inherit the mapping, spawned ones get it
    while they are being started; any other copy gets memory of its own."""

    def __init__(self, epoch=0, step=0, sample=0, untracked=False):
        self._cells = multiprocessing.RawArray(ctypes.c_int64, 4)
        self.publish(epoch, step, sample)
        self.untracked = untracked

    def publish(self, epoch, step, sample):
        self._cells[0:3] = [epoch, step, sample]

    def get(self):
        """(epoch, step, sample)"""
        return tuple(self._cells[0:3])

    @property
    def untracked(self):
        return bool(self._cells[3])

    @untracked.setter
    def untracked(self, value):
        self._cells[3] = 1 if value else 0

    def __getstate__(self):
        spawning = multiprocessing.context.get_spawning_popen() is not None
        return {"cells": self._cells if spawning else None, "values": self._cells[:]}

    def __setstate__(self, state):
        if state["cells"] is not None:
            self._cells = state["cells"]
        else:
            epoch, step, sample, untracked = state["values"]
            self.__init__(epoch, step, sample, untracked)


class _Prefetcher:
    """larder's C prefetcher over one reader's plan, when the dataset has a
    cache to stage into (a no-op otherwise, or with window 0)."""

    def __init__(self, dataset, plan, window, start_after=0):
        self._handle = None
        if not window or not dataset.stats()["cached"]:
            return
        # start_after: the plan counts for the cache's eviction at once,
        # the staging begins once the reader has taken that many steps
        options = _lib.PrefetchOptions(version=_lib.LARDER_PREFETCH_OPTIONS_VERSION,
                                       window_steps=int(window), start_after=int(start_after))
        out = ctypes.c_void_p()
        check(lib.larder_prefetch_start(ctypes.byref(out), dataset._ensure_open(),
                                        plan._handle(), ctypes.byref(options)),
              "prefetch " + dataset.url)
        self._handle = out

    def advance(self, consumed):
        if self._handle is not None:
            lib.larder_prefetch_advance(self._handle, consumed)

    def stop(self):
        handle, self._handle = self._handle, None
        if handle is not None:
            lib.larder_prefetch_stop(handle)
