"""larder.open: a seekable binary file object over one sample or field.

    with larder.open("ckpt/index.larder", "step1000/model.pt") as f:
        state = torch.load(f)

The object reads through an io.BufferedReader (1 MiB buffer by default)
over a raw file whose readinto() has liblarder read straight into the
caller's buffer (larder_file_pread: through the node cache, the node daemon,
peers and the origin, every byte checked), so torch.load, numpy.load,
h5py.File and PIL.Image.open read through the cache unchanged.
"""

import ctypes
import errno
import io
import os

from . import _lib
from ._lib import check, lib

__all__ = ["open", "LarderFile"]

DEFAULT_BUFFER_SIZE = 1 << 20


class _RawFile(io.RawIOBase):
    """The unbuffered file: a position over one larder_file handle.

    The position lives here, and reads are preads at it, so that a forked
    child (a DataLoader worker) can reopen the C handle on its own dataset
    handle and go on where its parent was.
    """

    def __init__(self, dataset, sample_id, field_index, name, owns_dataset):
        super().__init__()
        self._dataset = dataset
        self._owns_dataset = owns_dataset
        self._id = sample_id
        self._field = field_index
        self._name = name
        self._handle = None
        self._pid = None
        self._position = 0
        self._size = lib.larder_file_size(self._c_handle())

    # ---- the C handle --------------------------------------------------------

    def _c_handle(self):
        """The larder_file of this process, opened on first use in it."""
        if self._handle is not None and self._pid == os.getpid():
            return self._handle
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        # a handle inherited through fork() belongs to the parent's dataset
        # handle, which this process does not use: open one of its own
        out = ctypes.c_void_p()
        check(lib.larder_file_open(ctypes.byref(out), self._dataset._ensure_open(), self._id,
                                   self._field), f"{self._dataset.url}: {self._name}")
        self._handle, self._pid = out, os.getpid()
        return out

    def _release(self):
        handle, self._handle = self._handle, None
        if handle is not None and self._pid == os.getpid():
            lib.larder_file_close(handle)

    # ---- io.RawIOBase ----------------------------------------------------------

    @property
    def name(self):
        return self._name

    @property
    def mode(self):
        return "rb"

    @property
    def size(self):
        return self._size

    def readable(self):
        self._check_open()
        return True

    def seekable(self):
        self._check_open()
        return True

    def writable(self):
        self._check_open()
        return False

    def _check_open(self):
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    def readinto(self, buffer):
        self._check_open()
        with memoryview(buffer) as view, view.cast("B") as bytes_view:
            length = len(bytes_view)
            if length == 0 or self._position >= self._size:
                return 0  # past the end: C's offset is 64 bits, Python's position is not
            if bytes_view.readonly:
                raise TypeError("readinto() needs a writable buffer")
            target = (ctypes.c_char * length).from_buffer(bytes_view)
            try:
                rc = lib.larder_file_pread(self._c_handle(), target, length, self._position)
            finally:
                del target  # before the views are released
        check(rc, f"{self._dataset.url}: {self._name}")
        self._position += rc
        return rc

    def readall(self):
        """The rest of the file in one read."""
        self._check_open()
        buffer = bytearray(max(0, self._size - self._position))
        n = self.readinto(buffer) if buffer else 0
        del buffer[n:]
        return bytes(buffer)

    def seek(self, offset, whence=io.SEEK_SET):
        self._check_open()
        offset = int(offset)
        if whence == io.SEEK_SET:
            position = offset
        elif whence == io.SEEK_CUR:
            position = self._position + offset
        elif whence == io.SEEK_END:
            position = self._size + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if position < 0:
            raise OSError(errno.EINVAL, f"{self._name}: seek to {position}, before the start")
        self._position = position
        return position

    def tell(self):
        self._check_open()
        return self._position

    def close(self):
        if self.closed:
            return
        try:
            self._dataset._files.discard(self)
            self._release()
            if self._owns_dataset:
                self._dataset.close()
        finally:
            super().close()


class LarderFile(io.BufferedIOBase):
    """What larder.open returns: a buffered binary file for reading.

    name (the key, with ".field" when a field was asked for), mode ("rb"),
    size and len(f) (bytes in the file), and what a binary file opened for
    reading has: read, read1, readinto, readline, peek, seek, tell,
    iteration by lines, a context manager.  The reading is an
    io.BufferedReader's over the raw file (f.raw), which has liblarder read
    into the caller's buffer for reads of at least the buffer's size.

    Not itself an io.BufferedReader: numpy.load takes any BufferedReader for
    an operating-system file and asks for its fileno().
    """

    def __init__(self, raw, buffer_size=DEFAULT_BUFFER_SIZE):
        super().__init__()
        self._raw = raw
        self._buffered = io.BufferedReader(raw, buffer_size)

    @property
    def raw(self):
        return self._raw

    @property
    def name(self):
        return self._raw.name

    @property
    def mode(self):
        return "rb"

    @property
    def size(self):
        return self._raw.size

    def __len__(self):
        return self._raw.size

    @property
    def closed(self):
        return self._buffered.closed

    def close(self):
        if not self._buffered.closed:
            self._buffered.close()
        super().close()

    def readable(self):
        return self._buffered.readable()

    def seekable(self):
        return self._buffered.seekable()

    def writable(self):
        return self._buffered.writable()

    def read(self, size=-1):
        return self._buffered.read(size)

    def read1(self, size=-1):
        return self._buffered.read1(size)

    def readinto(self, buffer):
        return self._buffered.readinto(buffer)

    def readinto1(self, buffer):
        return self._buffered.readinto1(buffer)

    def readline(self, size=-1):
        return self._buffered.readline(size)

    def peek(self, size=0):
        return self._buffered.peek(size)

    def seek(self, offset, whence=io.SEEK_SET):
        return self._buffered.seek(offset, whence)

    def tell(self):
        return self._buffered.tell()

    def __repr__(self):
        state = "closed " if self.closed else ""
        return (f"<{state}larder file {self.name!r} of {self._raw._dataset.url!r}, "
                f"{self.size} bytes>")


def _resolve(dataset, key, field):
    """(sample id, field index or -1, name) of key/field in dataset."""
    from .dataset import _decode_key, _encode_key

    handle = dataset._ensure_open()
    if isinstance(key, (str, bytes)):
        sample_id = dataset.index_of(key)  # KeyError naming the key
        key_text = key if isinstance(key, str) else _decode_key(key)
    else:
        sample_id = dataset._index(key)  # IndexError past the end
        key_text = dataset.key(sample_id)
    if field is None:
        num_fields = dataset._sample_info(handle, sample_id).num_fields
        # the only field (a file of a file set, a packed file), else the whole sample
        return sample_id, 0 if num_fields == 1 else -1, key_text
    if isinstance(field, int):
        num_fields = dataset._sample_info(handle, sample_id).num_fields
        if not 0 <= field < num_fields:
            raise KeyError(f"sample {key_text!r} has no field {field} (it has {num_fields})")
        return sample_id, field, key_text
    field_text = field if isinstance(field, str) else _decode_key(field)
    encoded = _encode_key(field)
    rc = _lib.ENOTFOUND if b"\0" in encoded else lib.larder_find_field(handle, sample_id, encoded)
    if rc == _lib.ENOTFOUND:
        raise KeyError(f"sample {key_text!r} has no field {field_text!r}")
    check(rc, f"{dataset.url}: {key_text!r}")
    return sample_id, rc, f"{key_text}.{field_text}"


def open(index_or_dataset, key, field=None, buffer_size=DEFAULT_BUFFER_SIZE, **options):
    """A seekable binary file object over sample `key`, or one field of it.

    index_or_dataset: a larder.Dataset, or the path or URL of an index, or
        "larder:NAME" for a publication (resolved through the node daemon,
        larder.resolve; with LARDER_SOCKET set, a bare NAME that is neither
        an existing path nor a URL too), opened as larder.Dataset(index, **options) opens
        it (the node cache from LARDER_CACHE, the node daemon from
        LARDER_SOCKET) and closed with the file.
    key: the sample's key (str), or its id (int).
    field: a field's name (or index); None: the sample's only field when
        it has exactly one (every file of a `larder index --files` index,
        a file packed from a directory), else all the sample's bytes.
    buffer_size: the BufferedReader's buffer (reads of at least this many
        bytes go straight into the caller's buffer).

    Raises KeyError for a key or field the dataset does not have.
    """
    from .dataset import Dataset

    if (isinstance(index_or_dataset, str) and "://" not in index_or_dataset
            and not index_or_dataset.startswith("larder:")
            and not os.path.exists(index_or_dataset) and os.environ.get("LARDER_SOCKET")):
        # neither a path here nor a URL: a publication's name, with a node daemon to ask
        index_or_dataset = "larder:" + index_or_dataset
    owns = not isinstance(index_or_dataset, Dataset)
    dataset = Dataset(index_or_dataset, **options) if owns else index_or_dataset
    try:
        sample_id, field_index, name = _resolve(dataset, key, field)
        raw = _RawFile(dataset, sample_id, field_index, name, owns)
    except BaseException:
        if owns:
            dataset.close()
        raise
    dataset._track_file(raw)
    return LarderFile(raw, buffer_size)
