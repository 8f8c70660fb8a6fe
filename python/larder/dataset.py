"""larder.Dataset: map-style access to a packed dataset through liblarder.

A Dataset is a handle on one index (a path or http(s) URL) plus the open
options.  Samples come back as dicts of fields; reads go through the node
cache when one is configured.  Pickling keeps only the URL and options, and
the copy reopens the index on first use, so a Dataset can be handed to
DataLoader workers (forked or spawned) and to other processes.
"""

import ctypes
import operator
import os
import threading
import weakref
from collections import namedtuple

from . import _lib
from ._lib import LarderError, check, lib

__all__ = ["Dataset", "DatasetInfo", "SampleInfo", "Field"]

DatasetInfo = namedtuple(
    "DatasetInfo", "num_samples num_shards total_bytes dataset_id block_size version"
)
DatasetInfo.__doc__ = "What larder_dataset_info_get() reports about an open dataset."

SampleInfo = namedtuple("SampleInfo", "id key offset length checksum shard shard_name num_fields")
SampleInfo.__doc__ = "Where sample `id` lives: one byte range of one shard."

Field = namedtuple("Field", "name offset length dtype shape")
Field.__doc__ = """One field of a sample.

offset and length are relative to the sample's first byte.  dtype is a
little-endian numpy.dtype and shape a tuple for array fields (shape () for
a scalar), both None for plain bytes.
"""

_dtype_cache = {}


def _numpy_dtype(code):
    """numpy dtype of larder dtype `code`, little-endian (None for bytes)."""
    if code == 0:
        return None
    dtype = _dtype_cache.get(code)
    if dtype is None:
        import numpy

        name = lib.larder_dtype_name(code).decode()
        dtype = numpy.dtype(name).newbyteorder("<")
        if dtype.itemsize != lib.larder_dtype_size(code):
            raise LarderError(_lib.EUNSUPPORTED, f"dtype {name}: sizes disagree")
        _dtype_cache[code] = dtype
    return dtype


def _decode_key(raw):
    return raw.decode("utf-8", "surrogateescape") if raw is not None else ""


def _encode_key(key):
    return key.encode("utf-8", "surrogateescape") if isinstance(key, str) else bytes(key)


def _buffer_address(buf):
    """Address of a bytearray's storage (kept valid by the caller holding buf)."""
    if len(buf) == 0:
        return None
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


class Dataset:
    """A packed dataset, opened by the URL or path of its index.

    Dataset(url, cache=None, block_size=0, cache_size=0, max_inflight=0,
            verify=False, trust_index=False)

    url:          index path, file://, http:// or https:// URL, or
                  "larder:NAME", a publication resolved through the node
                  daemon (larder.resolve)
    cache:        node cache directory; None: the LARDER_CACHE environment
                  variable (no cache when unset); "": no cache
    block_size:   cache block size in bytes; 0: the index's hint
    cache_size:   bytes of cache this dataset may use; 0: no limit
    max_inflight: origin requests in flight in read_many(); 0: 64
    verify:       check checksums on uncached reads too
    trust_index:  take shard names that leave the index's base (absolute
                  paths, '..', file:// or other hosts) as they are; only for
                  an index you trust as much as your own files

    ds[i] (negative i counts from the end) returns a dict: field name ->
    bytes for plain fields, or numpy.ndarray for array fields (.npy members,
    HDF5 datasets) with the recorded dtype (little-endian) and shape; plus
    '__key__' (the sample's key, str) and '__index__' (i).  Arrays are
    fresh, writable, aligned copies that own their memory, so they outlive
    the read and can go straight to torch.from_numpy().

    Thread-safe: reads from several threads run concurrently (the GIL is
    released while liblarder waits on storage).
    """

    def __init__(self, url, cache=None, block_size=0, cache_size=0, max_inflight=0,
                 verify=False, trust_index=False):
        self.url = os.fspath(url)
        if isinstance(self.url, str) and self.url.startswith("larder:"):  # a publication's name
            from .names import resolve
            self.url = resolve(self.url)
        self._options = dict(cache=None if cache is None else os.fspath(cache),
                             block_size=int(block_size), cache_size=int(cache_size),
                             max_inflight=int(max_inflight), verify=bool(verify),
                             trust_index=bool(trust_index))
        self._setup()
        self._ensure_open()  # fail here, not at the first read

    def _setup(self):
        self._handle = None
        self._pid = None
        self._closed = False
        self._lock = threading.Lock()
        self._info = None
        self._field_room = 8  # FieldInfo slots a layout call starts with
        self._files = weakref.WeakSet()  # larder.open's files on this dataset

    # ---- opening, closing, pickling ----------------------------------------

    @property
    def options(self):
        """The open options, as keyword arguments of the constructor."""
        return dict(self._options)

    def _ensure_open(self):
        """The C handle, opened on first use in this process."""
        handle, pid = self._handle, self._pid
        if handle is not None and pid == os.getpid():
            return handle
        with self._lock:
            if self._closed:
                raise ValueError(f"larder dataset {self.url} is closed")
            if self._handle is not None and self._pid == os.getpid():
                return self._handle
            # A handle inherited through fork() belongs to the parent: its
            # reader threads do not exist here, so it is neither used nor
            # closed; this process opens its own.
            o = self._options
            options = _lib.OpenOptions()
            options.version = _lib.LARDER_OPEN_OPTIONS_VERSION
            options.verify_checksums = 1 if o["verify"] else 0
            options.cache_dir = None if o["cache"] is None else _lib.as_bytes(o["cache"])
            options.block_size = o["block_size"]
            options.cache_capacity = o["cache_size"]
            options.max_inflight = o["max_inflight"]
            options.trust_index = 1 if o.get("trust_index") else 0
            out = ctypes.c_void_p()
            rc = lib.larder_open(ctypes.byref(out), _lib.as_bytes(self.url),
                                 ctypes.byref(options))
            check(rc, self.url)
            info = _lib.DatasetInfo()
            rc = lib.larder_dataset_info_get(out, ctypes.byref(info))
            if rc < 0:
                lib.larder_close(out)
                check(rc, self.url)
            self._info = DatasetInfo(info.num_samples, info.num_shards, info.total_bytes,
                                     info.dataset_id.decode(), info.block_size, info.version)
            self._handle, self._pid = out, os.getpid()
            return out

    def close(self):
        """Close the dataset (idempotent), and the files opened on it.
        Later reads raise ValueError."""
        for f in list(self._files):
            f.close()  # before the handle they borrow
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None and self._pid == os.getpid():
                lib.larder_close(handle)
            self._closed = True

    @property
    def closed(self):
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._handle is not None and self._pid == os.getpid():
                lib.larder_close(self._handle)
                self._handle = None
        except Exception:  # interpreter shutdown
            pass

    def __getstate__(self):
        return {"url": self.url, "options": self._options, "closed": self._closed}

    def __setstate__(self, state):
        self.url = state["url"]
        self._options = dict(state["options"])
        self._setup()
        self._closed = state.get("closed", False)

    def __repr__(self):
        state = "closed" if self._closed else f"{len(self)} samples"
        return f"larder.Dataset({self.url!r}, {state})"

    # ---- layout ------------------------------------------------------------

    @property
    def info(self):
        """DatasetInfo(num_samples, num_shards, total_bytes, dataset_id,
        block_size, version)."""
        if self._info is None:
            self._ensure_open()
        return self._info

    def __len__(self):
        return self.info.num_samples

    def _index(self, i):
        i = operator.index(i)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample {i} out of range: {self.url} has {n} samples")
        return i

    def _sample_info(self, handle, i):
        info = _lib.SampleInfo()
        check(lib.larder_sample_info_get(handle, i, ctypes.byref(info)),
              f"{self.url}: sample {i}")
        return info

    def _layout(self, handle, i, info, fields):
        """Sample i's layout with one larder_sample_layout_get call into
        `info` and the FieldInfo array `fields` (a bigger one when the
        sample has more fields): returns (fields, count)."""
        rc = lib.larder_sample_layout_get(handle, i, info, fields, len(fields))
        if rc == _lib.ETOOSMALL and info.num_fields > len(fields):
            self._field_room = max(self._field_room, info.num_fields)
            fields = (_lib.FieldInfo * info.num_fields)()
            rc = lib.larder_sample_layout_get(handle, i, info, fields, len(fields))
        if rc < 0:
            raise _lib.error(rc, f"{self.url}: sample {i}")
        return fields, rc

    @staticmethod
    def _field(f):
        dtype = _numpy_dtype(f.dtype)
        shape = tuple(f.shape[:f.ndim]) if dtype is not None else None
        return Field(f.name.decode("utf-8", "surrogateescape"), f.offset, f.length, dtype, shape)

    def sample_info(self, i):
        """SampleInfo(id, key, offset, length, checksum, shard, shard_name,
        num_fields) of sample i."""
        i = self._index(i)
        s = self._sample_info(self._ensure_open(), i)
        return SampleInfo(s.id, _decode_key(s.key), s.offset, s.length, s.checksum, s.shard,
                          _decode_key(s.shard_name), s.num_fields)

    def fields(self, i):
        """The fields of sample i, as a list of Field(name, offset, length,
        dtype, shape)."""
        i = self._index(i)
        return self._layouts(self._ensure_open(), [i], with_fields=True)[0][3]

    def key(self, i):
        """The key of sample i (str)."""
        i = self._index(i)
        return _decode_key(self._sample_info(self._ensure_open(), i).key)

    def index_of(self, key):
        """The id of the sample named `key`; KeyError when there is none."""
        encoded = _encode_key(key)
        if b"\0" in encoded:  # C would see only the part before it: another key
            raise KeyError(key)
        rc = lib.larder_find_key(self._ensure_open(), encoded)
        if rc == _lib.ENOTFOUND:
            raise KeyError(key)
        return check(rc, f"{self.url}: key {key!r}")

    def open(self, key, field=None, buffer_size=1 << 20):
        """A seekable binary file object over sample `key` (str, or an int
        id), or over one field of it: see larder.open."""
        from .file import open as open_file

        return open_file(self, key, field, buffer_size)

    def _track_file(self, raw):
        self._files.add(raw)

    def __contains__(self, key):
        try:
            self.index_of(key)
            return True
        except KeyError:
            return False

    # ---- reading -----------------------------------------------------------

    def read(self, i):
        """All bytes of sample i (its fields back to back, or its tar
        members with their headers), as bytes."""
        i = self._index(i)
        handle = self._ensure_open()
        buf = bytearray(self._sample_info(handle, i).length)
        self._read_one(handle, i, buf)
        return bytes(buf)

    def _read_one(self, handle, i, buf):
        rc = lib.larder_read_sample(handle, i, _buffer_address(buf), len(buf))
        check(rc, f"{self.url}: sample {i}")
        if rc != len(buf):
            raise LarderError(_lib.ETRUNCATED, f"{self.url}: sample {i}: read {rc} of "
                              f"{len(buf)} bytes")

    def _layouts(self, handle, ids, with_fields):
        """(id, key, length, fields or None) of each sample: one call into
        the library per sample."""
        layouts = []
        info = _lib.SampleInfo()
        if not with_fields:
            for i in ids:
                rc = lib.larder_sample_info_get(handle, i, info)
                if rc < 0:
                    raise _lib.error(rc, f"{self.url}: sample {i}")
                layouts.append((i, _decode_key(info.key), info.length, None))
            return layouts
        fields = (_lib.FieldInfo * self._field_room)()
        field = self._field
        for i in ids:
            fields, count = self._layout(handle, i, info, fields)
            layouts.append((i, _decode_key(info.key), info.length,
                            [field(fields[k]) for k in range(count)]))
        return layouts

    def _read_batch(self, ids, with_fields):
        """Read samples `ids` with one larder_read_samples call: returns
        their layouts, one buffer holding them all and each one's start."""
        handle = self._ensure_open()
        ids = [self._index(i) for i in ids]
        layouts = self._layouts(handle, ids, with_fields)
        count = len(ids)
        starts, total = [], 0
        for _, _, length, _ in layouts:
            starts.append(total)
            total += length
        buf = bytearray(total)
        if count:
            base = _buffer_address(buf) or 0
            c_ids = (ctypes.c_uint64 * count)(*ids)
            bufs = (ctypes.c_void_p * count)(*[base + s for s in starts])
            caps = (ctypes.c_size_t * count)(*[layout[2] for layout in layouts])
            results = (ctypes.c_int64 * count)()
            rc = lib.larder_read_samples(handle, c_ids, count, bufs, caps, results)
            if rc < 0:
                bad = next((k for k in range(count) if results[k] < 0), 0)
                raise _lib.error(rc, f"{self.url}: sample {ids[bad]}")
            for k in range(count):
                if results[k] != caps[k]:
                    raise LarderError(_lib.ETRUNCATED, f"{self.url}: sample {ids[k]}: read "
                                      f"{results[k]} of {caps[k]} bytes")
        return layouts, buf, starts

    def read_many(self, ids):
        """The bytes of every sample in `ids`, as a list, read with one
        larder_read_samples call: every cache miss is fetched concurrently,
        so the origin's latency is paid about once, not once per sample."""
        layouts, buf, starts = self._read_batch(ids, with_fields=False)
        view = memoryview(buf)
        return [bytes(view[s:s + layout[2]]) for s, layout in zip(starts, layouts)]

    def get_many(self, ids, transform=None):
        """[self[i] for i in ids], read like read_many(): one batched read;
        with a transform, [self.get(i, transform) for i in ids], read on
        up to 8 threads at once (the daemon's queue stays fed)."""
        if transform is not None:
            from .transform import map_threads

            return map_threads(lambda i: self.get(i, transform=transform), ids)
        layouts, buf, starts = self._read_batch(ids, with_fields=True)
        view = memoryview(buf)
        return [self._sample_dict(layout, view[s:s + layout[2]])
                for s, layout in zip(starts, layouts)]

    # PyTorch >= 2.0 DataLoaders call this for a whole batch of a map-style dataset
    __getitems__ = get_many

    def __getitem__(self, i):
        i = self._index(i)
        handle = self._ensure_open()
        layout = self._layouts(handle, [i], with_fields=True)[0]
        buf = bytearray(layout[2])
        self._read_one(handle, i, buf)
        return self._sample_dict(layout, memoryview(buf))

    def get(self, i, transform=None):
        """self[i]; with a transform spec ("jpeg_decode_resize:224",
        "npy_cast:float16", "zstd_decompress", or a loaded one), sample i
        with it applied, by the node daemon or here (larder.transform):
        array fields as numpy arrays of the transform's dtype and shape,
        plain ones as bytes, and '__placement__' saying where it ran."""
        if transform is None:
            return self[i]
        from .transform import read_transformed

        i = self._index(i)
        handle = self._ensure_open()
        key = _decode_key(self._sample_info(handle, i).key)
        return read_transformed(self, handle, i, transform, key)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    @staticmethod
    def _sample_dict(layout, view):
        i, key, _, fields = layout
        sample = {"__key__": key, "__index__": i}
        for f in fields:
            data = view[f.offset:f.offset + f.length]
            if f.dtype is None:
                sample[f.name] = bytes(data)
            else:
                import numpy

                count = f.length // f.dtype.itemsize
                array = numpy.frombuffer(data, dtype=f.dtype, count=count)
                sample[f.name] = array.reshape(f.shape).copy()
        return sample

    # ---- statistics --------------------------------------------------------

    def stats(self):
        """Cache and origin counters (the node's, when a cache is in use) as
        a dict; fill_latency_us is the histogram of fill latencies (bucket i
        counts fills of [2^i, 2^(i+1)) microseconds), fill_p50_us and
        fill_p99_us upper bounds read from it."""
        s = _lib.Stats()
        check(lib.larder_stats_get(self._ensure_open(), ctypes.byref(s)), self.url)
        out = {name: getattr(s, name) for name, _ in _lib.Stats._fields_
               if name != "fill_latency"}
        out["cached"] = bool(s.cached)
        out["fill_latency_us"] = list(s.fill_latency)
        out["fill_p50_us"] = lib.larder_stats_fill_percentile(ctypes.byref(s), 0.5)
        out["fill_p99_us"] = lib.larder_stats_fill_percentile(ctypes.byref(s), 0.99)
        return out
