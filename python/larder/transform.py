"""Transforms next to the data (docs/transforms.md).

read_transformed(dataset, i, spec) returns sample i with the transform
`spec` applied ("jpeg_decode_resize:224", "npy_cast:float16",
"zstd_decompress"), as larder.Dataset.get(i, transform=spec) and
larder.torch.IterableDataset(..., transform=spec) do: the node daemon runs
it next to the cached bytes when one is configured and not busy, else this
process does, with the same code (byte-identical results).
"""

import ctypes
import os
import threading

from . import _lib
from ._lib import check, lib

__all__ = ["read_transformed", "check_spec", "load_dir", "set_budget", "PLACEMENTS"]


class _Transformed(ctypes.Structure):
    _fields_ = [
        ("num_fields", ctypes.c_uint32),
        ("fields", ctypes.POINTER(_lib.FieldInfo)),
        ("data", ctypes.POINTER(ctypes.c_uint8)),
        ("length", ctypes.c_uint64),
        ("placement", ctypes.c_int),
    ]


# where a result was made (enum larder_placement)
PLACEMENTS = {1: "local", 2: "daemon", 3: "cached", 4: "fallback"}

_vp = ctypes.c_void_p
lib.larder_read_transformed.restype = ctypes.c_int
lib.larder_read_transformed.argtypes = [_vp, ctypes.c_uint64, ctypes.c_char_p,
                                        ctypes.POINTER(ctypes.POINTER(_Transformed))]
lib.larder_transformed_free.restype = None
lib.larder_transformed_free.argtypes = [ctypes.POINTER(_Transformed)]
lib.larder_transform_check.restype = ctypes.c_int
lib.larder_transform_check.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32)]
lib.larder_transform_load_dir.restype = ctypes.c_int
lib.larder_transform_load_dir.argtypes = [ctypes.c_char_p]
lib.larder_transform_set_budget.restype = None
lib.larder_transform_set_budget.argtypes = [ctypes.c_uint64]


def check_spec(spec):
    """The version of the transform `spec` names; LarderError when it is
    unknown or its parameters are bad."""
    version = ctypes.c_uint32()
    check(lib.larder_transform_check(_lib.as_bytes(spec), ctypes.byref(version)),
          f"transform {spec!r}")
    return version.value


def load_dir(path):
    """Load the loadable transforms (*.so) of a directory into this process;
    the number loaded.  The LARDER_TRANSFORM_DIR environment variable does
    this on the first transformed read."""
    return check(lib.larder_transform_load_dir(_lib.as_bytes(path)), f"load {path}")


def set_budget(seconds):
    """How long this process's readers can wait for one transformed sample
    (the daemon leaves work to the reader beyond it); None or 0: the
    default, the process's step budget (what its transformed reads in
    flight would take it here, docs/transforms.md)."""
    lib.larder_transform_set_budget(int((seconds or 0) * 1e6))


_pool = None  # (pid, ThreadPoolExecutor): a DataLoader worker makes its own
_pool_lock = threading.Lock()


def map_threads(fn, items, threads=8):
    """[fn(x) for x in items], on up to `threads` threads of a pool kept per
    process (liblarder releases the GIL while it waits or transforms)."""
    items = list(items)
    if len(items) < 2:
        return [fn(x) for x in items]
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            from concurrent.futures import ThreadPoolExecutor

            _pool = (os.getpid(), ThreadPoolExecutor(threads, thread_name_prefix="larder-transform"))
        pool = _pool[1]
    return list(pool.map(fn, items))


def read_transformed(dataset, handle, i, spec, key=""):
    """Sample i of an open handle with `spec` applied: a dict of field name
    -> numpy.ndarray for array fields (the transform's dtype and shape) or
    bytes for plain ones, plus '__key__', '__index__' and '__placement__'
    (where it ran: "local", "daemon", "cached" or "fallback")."""
    from .dataset import _numpy_dtype
    import numpy

    out = ctypes.POINTER(_Transformed)()
    check(lib.larder_read_transformed(handle, i, _lib.as_bytes(spec), ctypes.byref(out)),
          f"{dataset.url}: sample {i} with {spec}")
    try:
        t = out.contents
        sample = {"__key__": key, "__index__": i,
                  "__placement__": PLACEMENTS.get(t.placement, "unknown")}
        # each field copied once, from the result's memory into its own
        # object (a 224 x 224 x 3 image is 147 KiB: copying the whole result
        # first, then each field's slice, cost two more copies a sample on
        # the reader's CPU); fields lie inside the result (checked when it
        # was decoded, transform.c)
        base = ctypes.cast(t.data, ctypes.c_void_p).value or 0
        for k in range(t.num_fields):
            f = t.fields[k]
            name = f.name.decode("utf-8", "surrogateescape")
            if f.offset + f.length > t.length:
                raise _lib.LarderError(_lib.EPROTOCOL, f"{dataset.url}: sample {i}: field "
                                       f"{name!r} outside the transform's result")
            dtype = _numpy_dtype(f.dtype)
            if dtype is None:
                sample[name] = ctypes.string_at(base + f.offset, f.length) if f.length else b""
            else:
                shape = tuple(f.shape[d] for d in range(f.ndim))
                array = numpy.empty(shape, dtype=dtype)
                if f.length != array.nbytes:
                    raise _lib.LarderError(_lib.EPROTOCOL, f"{dataset.url}: sample {i}: field "
                                           f"{name!r} of {f.length} bytes, not {array.nbytes}")
                if f.length:
                    ctypes.memmove(array.ctypes.data, base + f.offset, f.length)
                sample[name] = array
        return sample
    finally:
        lib.larder_transformed_free(out)
