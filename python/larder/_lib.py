"""Loading liblarder and declaring its C API for ctypes.

This module is the only place that knows the C header: it finds the shared
library, mirrors the public structs of include/larder.h field for field,
declares the argument and result types of every function the package
calls, and turns negative return codes into LarderError.

ctypes releases the GIL for the duration of every foreign call, so reads
block only the calling thread: a reader thread, a DataLoader worker or the
training loop can run Python while another thread waits on storage.
"""

import ctypes
import ctypes.util
import os

__all__ = ["LarderError", "lib", "library_path", "check", "errmsg", "strerror"]

# ---- finding the library ----------------------------------------------------

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    """Where to look, in order, as (description, path-or-name) pairs."""
    env = os.environ.get("LARDER_LIBRARY")
    if env:
        yield "LARDER_LIBRARY", env
    yield "package directory", os.path.join(_PACKAGE_DIR, "liblarder.so")
    # python/larder/ in a source tree: the library is in build/ at the top
    yield "build tree", os.path.normpath(
        os.path.join(_PACKAGE_DIR, "..", "..", "build", "liblarder.so")
    )
    # the loader's own search first: find_library runs ldconfig and the
    # compiler in subprocesses (tens of milliseconds), so only as a fallback
    yield "system loader", "liblarder.so.0"
    found = ctypes.util.find_library("larder")
    if found and found != "liblarder.so.0":
        yield "system loader (find_library)", found


def _load():
    tried = []
    for where, path in _candidates():
        is_path = os.sep in path
        if is_path and not os.path.exists(path):
            tried.append(f"{where}: {path} (no such file)")
            if where == "LARDER_LIBRARY":
                break  # an explicit choice that is wrong should not be papered over
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{where}: {path} ({e})")
            if where == "LARDER_LIBRARY":
                break
    raise ImportError(
        "larder: cannot load liblarder.so; tried\n  "
        + "\n  ".join(tried)
        + "\nBuild it (cmake -S . -B build -G Ninja && ninja -C build), install the "
        "package with scripts/install-python, or set LARDER_LIBRARY to its path."
    )


lib, _library_path = _load()


def library_path():
    """The path (or loader name) of the liblarder that was loaded."""
    return _library_path


# ---- structs (mirrors of include/larder.h) ----------------------------------

c_u8p = ctypes.POINTER(ctypes.c_uint8)
c_u64p = ctypes.POINTER(ctypes.c_uint64)
c_i64p = ctypes.POINTER(ctypes.c_int64)
c_sizep = ctypes.POINTER(ctypes.c_size_t)

LARDER_MAX_DIMS = 32
LARDER_FILL_BUCKETS = 24
LARDER_OPEN_OPTIONS_VERSION = 3
LARDER_PLAN_OPTIONS_VERSION = 1
LARDER_NO_SAMPLE = (1 << 64) - 1

# larder's own error codes (LARDER_ERRNO_MAP)
EBADINDEX = -1000
EVERSION = -1001
EBADTAR = -1002
ECHECKSUM = -1003
ENOTFOUND = -1004
EDUPKEY = -1005
EUNSAFE = -1006
ETRUNCATED = -1007
EHDF5 = -1008
EHTTP = -1009
EEMPTY = -1010
ETOOSMALL = -1011
EUSAGE = -1012
EUNSUPPORTED = -1013
ECACHE = -1014
EPROTOCOL = -1015
EDENIED = -1016
ELOCAL = -1017

PLAN_MODES = {"global": 0, "locality": 1, "none": 2}


class OpenOptions(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int),
        ("verify_checksums", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
        ("block_size", ctypes.c_uint32),
        ("cache_capacity", ctypes.c_uint64),
        ("max_inflight", ctypes.c_int),
        ("daemon_socket", ctypes.c_char_p),
        ("borrow_capacity", ctypes.c_uint64),
        ("trust_index", ctypes.c_int),
        ("allow_prefixes", ctypes.POINTER(ctypes.c_char_p)),
        ("allow_unchecked", ctypes.c_int),  # left 0: only `larder mount` sets it
    ]


class DatasetInfo(ctypes.Structure):
    _fields_ = [
        ("num_samples", ctypes.c_uint64),
        ("num_shards", ctypes.c_uint64),
        ("total_bytes", ctypes.c_uint64),
        ("block_size", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("dataset_id", ctypes.c_char * 33),
    ]


class SampleInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
        ("checksum", ctypes.c_uint64),
        ("shard", ctypes.c_uint32),
        ("num_fields", ctypes.c_uint32),
        ("key", ctypes.c_char_p),
        ("shard_name", ctypes.c_char_p),
    ]


class FieldInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("offset", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_uint64 * LARDER_MAX_DIMS),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("cached", ctypes.c_int),
        ("hits", ctypes.c_uint64),
        ("misses", ctypes.c_uint64),
        ("origin_requests", ctypes.c_uint64),
        ("origin_bytes", ctypes.c_uint64),
        ("bytes_served", ctypes.c_uint64),
        ("refetches", ctypes.c_uint64),
        ("evictions", ctypes.c_uint64),
        ("uncached_fills", ctypes.c_uint64),
        ("fill_latency", ctypes.c_uint64 * LARDER_FILL_BUCKETS),
        ("resident_bytes", ctypes.c_uint64),
        ("total_bytes", ctypes.c_uint64),
        ("block_size", ctypes.c_uint32),
        ("peer_requests", ctypes.c_uint64),
        ("peer_bytes", ctypes.c_uint64),
        ("borrowed_bytes", ctypes.c_uint64),
    ]


class PlanOptions(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int),
        ("mode", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("epoch", ctypes.c_uint64),
        ("global_batch", ctypes.c_uint64),
        ("world", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("workers", ctypes.c_uint32),
        ("worker", ctypes.c_uint32),
        ("start_step", ctypes.c_uint64),
        ("pad", ctypes.c_int),
        ("locality_window", ctypes.c_uint32),
        ("deny_path", ctypes.c_char_p),
        ("deny_ids", c_u64p),
        ("num_deny_ids", ctypes.c_size_t),
    ]


class PlanInfo(ctypes.Structure):
    _fields_ = [
        ("num_samples", ctypes.c_uint64),
        ("num_denied", ctypes.c_uint64),
        ("steps", ctypes.c_uint64),
        ("global_batch", ctypes.c_uint64),
        ("local_batch", ctypes.c_uint64),
        ("padded", ctypes.c_uint64),
        ("dropped", ctypes.c_uint64),
        ("epoch", ctypes.c_uint64),
    ]


# ---- prototypes -------------------------------------------------------------

_vp = ctypes.c_void_p  # every opaque handle


class PrefetchOptions(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int),
        ("window_steps", ctypes.c_uint64),
        ("max_inflight", ctypes.c_int),
        ("start_after", ctypes.c_uint64),
    ]


LARDER_PREFETCH_OPTIONS_VERSION = 2


def _declare(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_declare("larder_version", ctypes.c_char_p)
_declare("larder_strerror", ctypes.c_char_p, ctypes.c_int)
_declare("larder_errmsg", ctypes.c_char_p)
_declare("larder_dtype_name", ctypes.c_char_p, ctypes.c_int)
_declare("larder_dtype_size", ctypes.c_size_t, ctypes.c_int)
_declare("larder_open", ctypes.c_int, ctypes.POINTER(_vp), ctypes.c_char_p,
         ctypes.POINTER(OpenOptions))
_declare("larder_close", None, _vp)
_declare("larder_dataset_info_get", ctypes.c_int, _vp, ctypes.POINTER(DatasetInfo))
_declare("larder_num_samples", ctypes.c_uint64, _vp)
_declare("larder_sample_info_get", ctypes.c_int, _vp, ctypes.c_uint64,
         ctypes.POINTER(SampleInfo))
_declare("larder_field_info_get", ctypes.c_int, _vp, ctypes.c_uint64, ctypes.c_uint32,
         ctypes.POINTER(FieldInfo))
_declare("larder_sample_layout_get", ctypes.c_int, _vp, ctypes.c_uint64,
         ctypes.POINTER(SampleInfo), ctypes.POINTER(FieldInfo), ctypes.c_uint32)
_declare("larder_find_key", ctypes.c_int64, _vp, ctypes.c_char_p)
_declare("larder_find_field", ctypes.c_int, _vp, ctypes.c_uint64, ctypes.c_char_p)
_declare("larder_read_sample", ctypes.c_int64, _vp, ctypes.c_uint64, _vp, ctypes.c_size_t)
_declare("larder_read_field", ctypes.c_int64, _vp, ctypes.c_uint64, ctypes.c_uint32, _vp,
         ctypes.c_size_t)
_declare("larder_read_samples", ctypes.c_int64, _vp, c_u64p, ctypes.c_size_t,
         ctypes.POINTER(_vp), c_sizep, c_i64p)
_declare("larder_stats_get", ctypes.c_int, _vp, ctypes.POINTER(Stats))
_declare("larder_stats_fill_percentile", ctypes.c_uint64, ctypes.POINTER(Stats), ctypes.c_double)
_declare("larder_plan_create", ctypes.c_int, ctypes.POINTER(_vp), _vp,
         ctypes.POINTER(PlanOptions))
_declare("larder_plan_destroy", None, _vp)
_declare("larder_plan_set_epoch", ctypes.c_int, _vp, ctypes.c_uint64)
_declare("larder_plan_info_get", ctypes.c_int, _vp, ctypes.POINTER(PlanInfo))
_declare("larder_plan_steps", ctypes.c_uint64, _vp)
_declare("larder_plan_batch", ctypes.c_int64, _vp, ctypes.c_uint64, c_u64p, ctypes.c_size_t)
_declare("larder_plan_worker_step", ctypes.c_int64, _vp, ctypes.c_uint64)
_declare("larder_plan_sample_at", ctypes.c_int64, _vp, ctypes.c_uint64)
_declare("larder_plan_position_of", ctypes.c_int64, _vp, ctypes.c_uint64)
_declare("larder_plan_default_deny", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
         ctypes.c_size_t)
_declare("larder_prefetch_start", ctypes.c_int, ctypes.POINTER(_vp), _vp, _vp,
         ctypes.POINTER(PrefetchOptions))
_declare("larder_prefetch_advance", None, _vp, ctypes.c_uint64)
_declare("larder_prefetch_stats_get", ctypes.c_int, _vp, c_u64p, c_u64p)
_declare("larder_prefetch_stop", None, _vp)
# ---- files (larder.open)
_declare("larder_file_open", ctypes.c_int, ctypes.POINTER(_vp), _vp, ctypes.c_uint64, ctypes.c_int)
_declare("larder_file_open_key", ctypes.c_int, ctypes.POINTER(_vp), _vp, ctypes.c_char_p,
         ctypes.c_char_p)
_declare("larder_file_pread", ctypes.c_int64, _vp, _vp, ctypes.c_size_t, ctypes.c_uint64)
_declare("larder_file_read", ctypes.c_int64, _vp, _vp, ctypes.c_size_t)
_declare("larder_file_seek", ctypes.c_int64, _vp, ctypes.c_int64, ctypes.c_int)
_declare("larder_file_size", ctypes.c_uint64, _vp)
_declare("larder_file_close", None, _vp)


# ---- errors -----------------------------------------------------------------


def strerror(code):
    """larder's name for a return code (its own or -errno)."""
    text = lib.larder_strerror(int(code))
    return text.decode("utf-8", "replace") if text else f"error {code}"


def errmsg():
    """Detail of this thread's most recent failed larder call ('' if none)."""
    text = lib.larder_errmsg()
    return text.decode("utf-8", "replace") if text else ""


class LarderError(OSError):
    """A liblarder call failed.

    .code is the negative return code (one of larder's own, e.g.
    larder.EBADINDEX, or -errno); .errno is the positive errno for system
    errors and None for larder's own; str() gives larder_strerror() and
    the detail from larder_errmsg().
    """

    def __init__(self, code, message):
        code = int(code)
        super().__init__(-code if -1000 < code < 0 else None, message)
        self.code = code
        self.message = message

    def __str__(self):
        return self.message

    def __reduce__(self):  # survives DataLoader workers' pickling
        return (LarderError, (self.code, self.message))


def error(code, context=None):
    """A LarderError for `code`, with this thread's detail and `context`
    (what was being done) in the message."""
    detail, name = errmsg(), strerror(code)
    if not detail:
        message = name
    elif name in detail:
        message = detail
    else:
        message = f"{detail}: {name}"
    if context and context not in message:
        message = f"{context}: {message}"
    return LarderError(code, message)


def check(rc, context=None):
    """Return rc when it is >= 0, else raise the matching LarderError."""
    if rc < 0:
        raise error(rc, context)
    return rc


def as_bytes(text):
    """A str or os.PathLike as the bytes a char * argument wants."""
    if isinstance(text, bytes):
        return text
    return os.fsencode(text) if isinstance(text, os.PathLike) else text.encode("utf-8")
