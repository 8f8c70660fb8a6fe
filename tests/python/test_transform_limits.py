"""Transforms' limits (docs/transforms.md, docs/security.md "Bounds"):
readers that pipeline transforms and never read keep the daemon within
its documented memory bounds, field names longer than an op's 63 bytes
come back whole, and two output fields of one name are an error, never
one hiding the other."""

import os
import time

import numpy as np
import pytest

import larder
from conftest import larder_cli
from test_transform import (budget, daemons, fields, open_with, same,  # noqa: F401 (fixtures)
                            start_daemon, zstd_tool)

# ---- memory bounds (docs/security.md "Bounds") ----------------------------------


def rss_mib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for {pid}")


def test_readers_that_never_read_stay_within_the_memory_bounds(tmp_path, monkeypatch, larder_bin):
    """Small zstd fields of 16 MiB of zeros, asked for on connections that
    never read their answers: unbounded, 8 x 16 such answers would hold
    2 GiB.  The documented bounds: answers held in memory share 256 MiB
    node-wide (and each connection stops being read at 64 MiB charged);
    besides those, each of the 2 transform workers holds a result of at
    most 48 MiB + 1 MiB while it runs (the result cache is off here, and
    the samples are a few KiB)."""
    import socket
    import struct
    src = tmp_path / "src"
    src.mkdir()
    zeros = zstd_tool(bytes(16 << 20), "-19")
    assert len(zeros) < 4096
    for i in range(16):
        (src / f"s{i:02d}.bin.zst").write_bytes(zeros)
        (src / f"s{i:02d}.txt").write_bytes(b"%d" % i)  # distinct samples
    larder_cli("pack", src, "-o", tmp_path / "ds", "--no-shuffle")
    index = str(tmp_path / "ds" / "index.larder")
    # under ASan, freed memory waits in its quarantine (256 MiB): not held
    monkeypatch.setenv("ASAN_OPTIONS", os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0")
    proc, sock = start_daemon(tmp_path, "bounded", "--transform-jobs", "2",
                              "--transform-cache", "0")
    try:
        ds = open_with(index, monkeypatch, sock, cache="")
        assert ds.get(0, transform="zstd_decompress")["__placement__"] == "daemon"
        baseline = rss_mib(proc.pid, "VmRSS")

        def frame(kind, payload, request):
            return struct.pack("<IBBHIIQ", 0x5244524C, 2, kind, 0, len(payload), 0,
                               request) + payload

        def answer(s):
            head = s.recv(24, socket.MSG_WAITALL)
            return head[5], s.recv(struct.unpack("<I", head[8:12])[0], socket.MSG_WAITALL)

        floods = []
        spec = b"zstd_decompress"
        for _ in range(8):
            s = socket.socket(socket.AF_UNIX)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(sock)
            s.settimeout(10)
            s.sendall(frame(1, struct.pack("<II", 1, 0) + os.urandom(32), 1))
            answer(s)
            s.sendall(frame(8, index.encode(), 2))
            kind, body = answer(s)
            assert kind == 9, (kind, body)
            s.setblocking(False)
            pending = b"".join(
                frame(17, body[:16] + struct.pack("<QBBHIII", i, 0, 0, len(spec), 1, 0, 0)
                      + spec, 100 + i) for i in range(16))
            floods.append((s, pending))
        for s, pending in floods:  # the requests all sent (they are small), never a read
            while pending:
                try:
                    pending = pending[s.send(pending):]
                except BlockingIOError:
                    time.sleep(0.01)
        deadline = time.time() + 20
        while time.time() < deadline:  # until the daemon settles: nothing queued or running
            stat = larder_cli("stat", "--socket", sock, "--json")
            if '"queued": 0,' in stat.split('"transforms"')[1]:
                break
            time.sleep(0.2)
        time.sleep(1)
        # another reader is still served (by the daemon, or here when its
        # answers in memory are at their limit)
        again = ds.get(1, transform="zstd_decompress")
        assert again["bin"] == bytes(16 << 20)
        limit = 256 + 2 * 49 + 32  # MiB, 32 of slack for the allocator and the stacks
        grew = rss_mib(proc.pid, "VmHWM") - baseline
        assert grew < limit, (grew, limit)
        assert proc.poll() is None
        for s, _ in floods:
            s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# ---- field names -------------------------------------------------------------------


def test_long_field_names_come_back_whole(tmp_path, daemons, monkeypatch, larder_bin):
    """Field names past an op's 63 bytes (a packed HDF5 dataset's path
    often is): two sharing their first 70 bytes stay two, in the daemon
    and in this process, and zstd's '.zst' comes off the whole name."""
    src = tmp_path / "src"
    src.mkdir()
    stem = "a_dataset_path_that_is_long_" * 3  # 84 bytes
    assert len(stem) > 70
    a = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    b = np.arange(5, dtype=np.int16) - 2
    np.save(src / f"s0.{stem}first.npy", a)
    np.save(src / f"s0.{stem}second.npy", b)
    payload = b"payload " * 100
    (src / f"s0.{stem}packed.bin.zst").write_bytes(zstd_tool(payload))
    larder_cli("pack", src, "-o", tmp_path / "ds", "--no-shuffle")
    index = str(tmp_path / "ds" / "index.larder")
    normal, _, _ = daemons
    for sock in (None, normal):
        ds = open_with(index, monkeypatch, sock, cache="")
        cast = fields(ds.get(0, transform="npy_cast:float32"))
        names = {k for k in cast if not k.startswith("__")}
        assert names == {stem + "first", stem + "second", stem + "packed.bin.zst"}, names
        assert same(cast[stem + "first"], a.astype(np.float32))
        assert same(cast[stem + "second"], b.astype(np.float32))
        unzipped = fields(ds.get(0, transform="zstd_decompress"))
        names = {k for k in unzipped if not k.startswith("__")}
        assert names == {stem + "first", stem + "second", stem + "packed.bin"}, names
        assert bytes(unzipped[stem + "packed.bin"]) == payload


def test_two_fields_of_one_name_after_a_transform_are_an_error(tmp_path, daemons, monkeypatch,
                                                                larder_bin):
    src = tmp_path / "src"
    src.mkdir()
    (src / "s0.bin").write_bytes(b"plain bytes")
    (src / "s0.bin.zst").write_bytes(zstd_tool(b"other bytes"))
    larder_cli("pack", src, "-o", tmp_path / "ds", "--no-shuffle")
    index = str(tmp_path / "ds" / "index.larder")
    normal, _, _ = daemons
    for sock in (None, normal):
        ds = open_with(index, monkeypatch, sock, cache="")
        with pytest.raises(larder.LarderError) as e:
            ds.get(0, transform="zstd_decompress")
        message = str(e.value)
        assert "'bin'" in message and "'bin.zst'" in message and "one name" in message, message


# ---- JPEG decoding's memory ----------------------------------------------------------


def test_jpegs_whose_decode_would_take_too_much_memory_are_refused(tmp_path, monkeypatch,
                                                                   larder_bin):
    """docs/transforms.md: the rows' pass of the resize (height x N x 3)
    is bounded like the scaled decode (96 MiB): a 1 x 65500 JPEG to 4096
    would take 65500 * 4096 * 3 = 768 MiB.  A progressive JPEG's
    coefficients (width x height x components x 2) are bounded by 96 MiB:
    4200 x 4200 x 3 x 2 = 101 MiB is refused, and the same picture as a
    baseline JPEG (decoded at 1/8) is not."""
    PIL = pytest.importorskip("PIL.Image")
    monkeypatch.delenv("LARDER_SOCKET", raising=False)
    monkeypatch.delenv("LARDER_CACHE", raising=False)
    src = tmp_path / "src"
    src.mkdir()
    PIL.new("RGB", (1, 65500), (10, 200, 30)).save(src / "s0.jpg", quality=90)
    assert 65500 * 4096 * 3 > 96 << 20 and 4200 * 4200 * 3 * 2 > 96 << 20
    y, x = np.mgrid[0:4200, 0:4200]
    big = PIL.fromarray(np.stack([x % 256, y % 256, (x + y) % 256], -1).astype(np.uint8))
    big.save(src / "s1.jpg", quality=80, progressive=True)
    big.save(src / "s2.jpg", quality=80)
    larder_cli("pack", src, "-o", tmp_path / "ds", "--no-shuffle")
    ds = larder.Dataset(str(tmp_path / "ds" / "index.larder"), cache="")
    with pytest.raises(larder.LarderError) as e:
        ds.get(0, transform="jpeg_decode_resize:4096")
    message = str(e.value)
    assert "sample 0" in message and "1 x 65500" in message and "rows' pass" in message, message
    assert f"at most {96 << 20}" in message, message
    assert ds.get(0, transform="jpeg_decode_resize:16")["jpg"].shape == (16, 16, 3)
    with pytest.raises(larder.LarderError) as e:
        ds.get(1, transform="jpeg_decode_resize:48")
    message = str(e.value)
    assert "sample 1" in message and "progressive" in message, message
    assert str(4200 * 4200 * 3 * 2) in message and f"at most {96 << 20}" in message, message
    assert ds.get(2, transform="jpeg_decode_resize:48")["jpg"].shape == (48, 48, 3)
