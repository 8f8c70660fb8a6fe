"""Publish and consume: files published under a name by the node that wrote
them, found by that name on any node (docs/python.md, "Names").

    larder.publish(dir, name, write_through=None)  -> Publication
    larder.resolve(name, timeout=0)                -> the index to open here
    larder.names()                                 -> what the node daemon knows

All three talk to the node daemon at `socket` (default: LARDER_SOCKET).
``larder.Dataset("larder:NAME")`` opens a publication by name, and
``larder.open(NAME, key)`` will too: a first argument that is not an
existing path or a URL goes through resolve().
"""

import ctypes
import json
import os
from collections import namedtuple

from . import _lib
from ._lib import check, lib

Publication = namedtuple("Publication", "name dataset_id producer index origin")
Publication.__doc__ = """A publication: its name, dataset id (32 hex digits), the producer
daemon's member name, the index to open on this node, and the
written-through index ('' when none)."""

PREFIX = "larder:"  # larder.Dataset("larder:NAME")


class _Publication(ctypes.Structure):  # larder_publication
    _fields_ = [
        ("name", ctypes.c_char * 129),
        ("dataset_id", ctypes.c_char * 33),
        ("producer", ctypes.c_char * 257),
        ("index", ctypes.c_char * 4097),
        ("origin", ctypes.c_char * 4097),
    ]

    def value(self):
        return Publication(*(getattr(self, f).decode("utf-8", "replace")
                             for f, _ in self._fields_))


class _PublishOptions(ctypes.Structure):  # larder_publish_options
    _fields_ = [("version", ctypes.c_int), ("index", ctypes.c_char_p),
                ("write_through", ctypes.c_char_p), ("replace", ctypes.c_int)]


LARDER_PUBLISH_OPTIONS_VERSION = 2  # checked against the header by tests/python/test_layout.py
_declare = _lib._declare
_declare("larder_publish", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
         ctypes.POINTER(_PublishOptions), ctypes.POINTER(_Publication))
_declare("larder_resolve", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
         ctypes.POINTER(_Publication))
_declare("larder_names_list", ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t)


def _socket(socket):
    return None if socket is None else _lib.as_bytes(socket)


def publish(dir, name, write_through=None, index=None, socket=None, replace=False):
    """Publish the files under `dir` as `name` through this node's daemon.

    `dir` is indexed in place (dir/index.larder) unless `index` names an
    index of it already made; with `write_through` (a directory on a shared
    file system), the files and the index are copied there first, so
    readers fall back to that copy when this node is gone.  Returns a
    Publication; raises LarderError (for example -EEXIST for a name already
    published).  With replace=True a name published already names these
    files from now on (readers of the one before keep its bytes; publish
    each version from a directory of its own).
    """
    options = _PublishOptions(LARDER_PUBLISH_OPTIONS_VERSION,
                              None if index is None else _lib.as_bytes(index),
                              None if write_through is None else _lib.as_bytes(write_through),
                              int(bool(replace)))
    out = _Publication()
    check(lib.larder_publish(_socket(socket), _lib.as_bytes(dir), _lib.as_bytes(name),
                             ctypes.byref(options), ctypes.byref(out)), f"publish {name}")
    return out.value()


def lookup(name, timeout=0, socket=None):
    """The Publication `name`, waiting up to `timeout` seconds (at most 3600)
    for a name not yet published; LarderError(ENOTFOUND) when none came."""
    timeout_ms = int(round(float(timeout) * 1000))
    if not 0 <= timeout_ms <= 3600 * 1000:
        raise ValueError(f"timeout {timeout}: seconds from 0 to 3600")
    if name.startswith(PREFIX):
        name = name[len(PREFIX):]
    out = _Publication()
    check(lib.larder_resolve(_socket(socket), _lib.as_bytes(name), timeout_ms,
                             ctypes.byref(out)), f"resolve {name}")
    return out.value()


def resolve(name, timeout=0, socket=None):
    """The index (a path or URL) to open on this node for the publication
    `name` ("NAME" or "larder:NAME"), waiting up to `timeout` seconds for it."""
    return lookup(name, timeout, socket).index


def names(socket=None):
    """The publications this node's daemon knows: a list of dicts with
    name, dataset_id, producer, index and origin."""
    capacity = 1 << 20
    buf = ctypes.create_string_buffer(capacity + 1)
    n = check(lib.larder_names_list(_socket(socket), buf, capacity + 1), "names")
    return json.loads(buf.raw[:n].decode("utf-8"))["names"]
