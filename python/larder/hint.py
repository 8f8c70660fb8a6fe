"""Hints to the node daemons: stage and pin samples ahead of a read.

    larder.hint(index, keys=None, ttl=600, replicas=None, all_nodes=False)
        the node daemon (socket=, else LARDER_SOCKET) stages the samples
        named by key (all without keys) in its node cache in the
        background and pins them for ttl seconds; with replicas=N, N nodes
        do (this one included), with all_nodes=True every member
    larder.replicate(index, to, ttl=600), larder.replicate(name=NAME, to=...)
        the members named in `to` ("host:port" strings, or one string
        with commas) stage and pin the whole dataset: an index, or a
        name published with larder.publish (each daemon resolves it to
        its own copy of the publication's index)
    larder.hints()
        what the node daemon has pinned, as a list of dicts

Each returns at once once the daemons took the hint, or with wait=True
when the staging is done; the result says how many nodes took it and
what they pinned and staged.  docs/python.md and docs/protocol.md
("Hints") have the details.
"""

import ctypes
import json
import os
from dataclasses import dataclass

from ._lib import as_bytes, check, lib

LARDER_HINT_OPTIONS_VERSION = 2
HOT, REPLICATE = 1, 2


class _HintOptions(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int),
        ("kind", ctypes.c_int),
        ("index", ctypes.c_char_p),
        ("keys", ctypes.POINTER(ctypes.c_char_p)),
        ("num_keys", ctypes.c_size_t),
        ("ttl_ms", ctypes.c_uint64),
        ("replicas", ctypes.c_uint32),
        ("all_nodes", ctypes.c_int),
        ("targets", ctypes.c_char_p),
        ("wait", ctypes.c_int),
        ("timeout_ms", ctypes.c_int),
        ("name", ctypes.c_char_p),
    ]


class _HintResult(ctypes.Structure):
    _fields_ = [
        ("nodes", ctypes.c_uint32),
        ("failed", ctypes.c_uint32),
        ("done", ctypes.c_int),
        ("partial", ctypes.c_int),
        ("samples", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("pinned_bytes", ctypes.c_uint64),
        ("staged_bytes", ctypes.c_uint64),
    ]


lib.larder_hint.restype = ctypes.c_int
lib.larder_hint.argtypes = [ctypes.c_char_p, ctypes.POINTER(_HintOptions),
                            ctypes.POINTER(_HintResult)]
lib.larder_hint_list.restype = ctypes.c_int64
lib.larder_hint_list.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]


@dataclass(frozen=True)
class HintResult:
    """What the daemons answered to a hint (summed over the nodes)."""

    nodes: int  # nodes that took the hint
    failed: int  # nodes that did not (down, refused)
    done: bool  # the staging finished on every node that took it
    partial: bool  # some node pinned less than asked (its cache's capacity)
    samples: int  # samples hinted
    bytes: int  # bytes of those samples, one copy
    pinned_bytes: int  # pinned, summed over the nodes
    staged_bytes: int  # staged so far, summed over the nodes


def _ttl_ms(ttl):
    ms = int(round(float(ttl) * 1000))
    if ms < 1 or ms > 30 * 86400 * 1000:
        raise ValueError(f"ttl {ttl!r}: between 1 ms and 30 days, in seconds")
    return ms


def _call(socket, options, what):
    result = _HintResult()
    check(lib.larder_hint(as_bytes(socket) if socket else None, ctypes.byref(options),
                          ctypes.byref(result)), what)
    return HintResult(result.nodes, result.failed, bool(result.done), bool(result.partial),
                      result.samples, result.bytes, result.pinned_bytes, result.staged_bytes)


def _index(index):
    path = os.fspath(index)
    if isinstance(path, bytes):
        path = path.decode()
    return path.encode()


def _target(index, name):
    """(index, name) as the C options take them: exactly one of the two."""
    if (index is None) == (name is None):
        raise ValueError("an index or a published name, one of the two")
    return (_index(index), None) if name is None else (None, name.encode())


def hint(index=None, keys=None, ttl=600, replicas=None, all_nodes=False, wait=False, socket=None,
         timeout=None, name=None):
    """Stage the samples of `index` (or of the publication `name`) named by
    `keys` (all when None) on the node daemon and pin them for `ttl`
    seconds; `replicas` nodes in all, or every member with all_nodes.  A
    HintResult; LarderError when the daemon refused (an unknown key or
    name: larder.ENOTFOUND)."""
    index, name = _target(index, name)
    if replicas is not None and all_nodes:
        raise ValueError("replicas or all_nodes, not both")
    if isinstance(keys, (str, bytes)):
        keys = [keys]
    encoded = [k.encode() if isinstance(k, str) else bytes(k) for k in (keys or [])]
    array = (ctypes.c_char_p * max(len(encoded), 1))(*encoded)
    options = _HintOptions(
        version=LARDER_HINT_OPTIONS_VERSION, kind=HOT, index=index, name=name,
        keys=ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p)), num_keys=len(encoded),
        ttl_ms=_ttl_ms(ttl), replicas=int(replicas or 0), all_nodes=int(bool(all_nodes)),
        wait=int(bool(wait)), timeout_ms=int((timeout or 0) * 1000))
    return _call(socket, options, f"hint {(index or name).decode()}")


def replicate(index=None, to=None, ttl=600, wait=False, socket=None, timeout=None, name=None):
    """Have the members in `to` stage and pin all of `index` (or of the
    publication `name`) for `ttl` seconds, so a reader there later finds
    it local.  A HintResult."""
    index, name = _target(index, name)
    if not to:
        raise ValueError("replicate needs the members to replicate to (to=)")
    targets = to if isinstance(to, str) else ",".join(to)
    options = _HintOptions(
        version=LARDER_HINT_OPTIONS_VERSION, kind=REPLICATE, index=index, name=name,
        targets=targets.encode(), ttl_ms=_ttl_ms(ttl), wait=int(bool(wait)),
        timeout_ms=int((timeout or 0) * 1000))
    return _call(socket, options, f"replicate {(index or name).decode()}")


def hints(socket=None):
    """What the node daemon has pinned: a list of dicts (url, dataset_id,
    ttl_left_ms, samples, bytes, pinned_bytes, staged_bytes, staging,
    partial, failed)."""
    capacity = 1 << 20
    buf = ctypes.create_string_buffer(capacity)
    n = check(lib.larder_hint_list(as_bytes(socket) if socket else None, buf, capacity),
              "hint list")
    return json.loads(buf.raw[:n].decode())["hints"]
