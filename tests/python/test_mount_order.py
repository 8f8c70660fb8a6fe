"""larder.mount.register_order and larder.torch.MountOrderSampler against a
real `larder mount` of an h5py file (docs/mount.md, "A registered row
order for an HDF5 file").  Expected values come from torch's own
DistributedSampler and from the file h5py wrote; skipped, with the
reason, where FUSE mounts cannot be made."""

import os
import shutil
import subprocess
import time

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import larder.mount  # noqa: E402
import larder.torch  # noqa: E402
from conftest import LARDER, larder_cli  # noqa: E402

MEMBERS = 96
ROW = 4096  # float32 values of each member's x: all equal to its number


def _skip_without_fuse():
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    if not shutil.which("fusermount3"):
        pytest.skip("fusermount3 missing (scripts/install-deps installs fuse3)")
    probe = subprocess.run([LARDER, "mount", "/nonexistent", "/nonexistent"],
                           capture_output=True, text=True)
    if "built without libfuse3" in probe.stderr:
        pytest.skip("larder was built without libfuse3")


def _mount(index, mnt, log, *options):
    os.makedirs(mnt, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("LARDER_CACHE", "LARDER_SOCKET")}
    result = subprocess.run([LARDER, "mount", str(index), str(mnt), "--log", str(log), *options],
                            capture_output=True, text=True, env=env)
    if result.returncode != 0:
        if any(w in result.stderr.lower() for w in ("permission", "not permitted",
                                                     "device not found")):
            pytest.skip(f"FUSE mounts not permitted here: {result.stderr.strip()}")
        raise AssertionError(f"larder mount: {result.stderr}")


def _unmount(mnt):
    if subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True).returncode != 0:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)


@pytest.fixture(scope="module")
def mounted(tmp_path_factory):
    """(the mount point, the directory of its source files, the index)."""
    _skip_without_fuse()
    root = tmp_path_factory.mktemp("mount_order")
    src = root / "src"
    src.mkdir()
    with h5py.File(src / "samples.h5", "w") as f:
        for i in range(MEMBERS):
            g = f.create_group("s%06d" % i)
            g.create_dataset("x", data=np.full(ROW, i, dtype=np.float32))
            g.create_dataset("y", data=np.arange(i, i + 3))
    (src / "notes.bin").write_bytes(bytes(range(256)) * 64)
    index = root / "files.larder"
    larder_cli("index", "--files", src, "-o", index)
    mnt = root / "mnt"
    # every read reaches the mount, so that it sees the reader move: no whole
    # file staged on open and then read by the kernel itself (passthrough)
    _mount(index, mnt, root / "mnt.log", "--cache", str(root / "cache"), "--no-stage-on-open",
           "--no-passthrough")
    try:
        yield mnt, src, index
    finally:
        _unmount(mnt)


class _Items:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


class _Rows(tud.Dataset):
    """Member i's x, read with h5py from `path` (through the mount); at module
    level so that workers started from a fork server (under ASan) get it."""

    def __init__(self, path):
        self.path = path

    def __len__(self):
        return MEMBERS

    def __getitem__(self, i):
        with h5py.File(self.path, "r") as f:
            return torch.from_numpy(f["s%06d" % i]["x"][...])


def _status(path, epoch, rank, timeout=20):
    """The mount's report of (epoch, rank)'s order once its members are listed."""
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in larder.mount.order_status(path)
                 if e["epoch"] == epoch and e["rank"] == rank]
        if found and found[0]["state"] != "listing":
            return found[0]
        assert time.monotonic() < deadline, f"still listing: {found}"
        time.sleep(0.05)


def test_register_order_names_the_samplers_order(mounted):
    mnt, _, _ = mounted
    path = mnt / "samples.h5"
    sampler = tud.distributed.DistributedSampler(_Items(MEMBERS), num_replicas=2, rank=1,
                                                 shuffle=True, seed=5)
    sampler.set_epoch(3)
    line = larder.mount.register_order(path, sampler, batch_size=8, window=2)
    assert line == "file=samples.h5 sampler=torch seed=5 epoch=3 rank=1 world=2 batch=16 window=2\n"
    entry = _status(path, 3, 1)
    assert entry["state"] == "ready", entry
    assert (entry["seed"], entry["world"], entry["batch"], entry["window"]) == (5, 2, 16, 2)
    assert entry["members"] == MEMBERS  # the groups h5py wrote, listed by the mount
    assert entry["group"] == "/"


def test_sampler_registers_each_epoch_and_reads_byte_exact(mounted):
    mnt, _, _ = mounted
    path = str(mnt / "samples.h5")

    rows = _Rows(path)
    sampler = larder.torch.MountOrderSampler(rows, path, batch_size=6, num_replicas=2, rank=0,
                                             seed=11)
    loader = tud.DataLoader(rows, batch_size=6, sampler=sampler, num_workers=2)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        reference = tud.distributed.DistributedSampler(_Items(MEMBERS), num_replicas=2, rank=0,
                                                       shuffle=True, seed=11)
        reference.set_epoch(epoch)
        expected = list(reference)
        got = [int(v) for batch in loader for v in batch[:, 0]]
        assert got == expected  # the sampler yields torch's order, unchanged
        entry = _status(path, epoch, 0)
        assert (entry["seed"], entry["world"], entry["batch"]) == (11, 2, 12)
        assert entry["members"] == MEMBERS
        if epoch == 0:  # the reader's place: past every member of the rank (in epoch 1 the
            # kernel answers every read from the pages it kept: the mount sees none)
            assert entry["read"] == MEMBERS // 2, entry
    with h5py.File(path, "r") as f:  # byte-exact through the mount, every member
        for i in range(MEMBERS):
            assert np.array_equal(f["s%06d" % i]["x"][...], np.full(ROW, i, dtype=np.float32))


def test_orders_the_mount_does_not_know_are_refused_here(mounted, tmp_path):
    mnt, _, _ = mounted
    path = mnt / "samples.h5"
    items = _Items(MEMBERS)
    plain = tud.distributed.DistributedSampler(items, num_replicas=2, rank=0, shuffle=False)
    with pytest.raises(ValueError, match="shuffle=False"):
        larder.mount.register_order(path, plain, batch_size=4)
    dropping = tud.distributed.DistributedSampler(items, num_replicas=2, rank=0, drop_last=True)
    with pytest.raises(ValueError, match="drop_last=True"):
        larder.mount.register_order(path, dropping, batch_size=4)
    with pytest.raises(TypeError, match="DistributedSampler"):
        larder.mount.register_order(path, tud.RandomSampler(range(4)), batch_size=4)
    good = tud.distributed.DistributedSampler(items, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="batch_size"):
        larder.mount.register_order(path, good, batch_size=0)
    with pytest.raises(ValueError, match="window"):
        larder.mount.register_order(path, good, batch_size=4, window=0)
    with pytest.raises(ValueError, match="not both"):
        larder.mount.register_order(path, good, batch_size=4, group="/", dataset="/x")
    with pytest.raises(ValueError, match="white space"):
        larder.mount.register_order(path, good, batch_size=4, group="/a b")
    elsewhere = tmp_path / "samples.h5"
    elsewhere.write_bytes(b"x")
    with pytest.raises(ValueError, match="not on a larder mount"):
        larder.mount.register_order(elsewhere, good, batch_size=4)
    with pytest.raises(ValueError, match="not on a larder mount"):
        larder.torch.MountOrderSampler(items, elsewhere, batch_size=4, num_replicas=2, rank=0)
    with pytest.raises(FileNotFoundError):
        larder.mount.register_order(mnt / "missing.h5", good, batch_size=4)


def test_what_the_mount_refuses_or_fails_is_reported(mounted, tmp_path):
    mnt, _, index = mounted
    good = tud.distributed.DistributedSampler(_Items(MEMBERS), num_replicas=2, rank=1, seed=2)
    # a file that is not HDF5: taken, then reported failed by the mount
    larder.mount.register_order(mnt / "notes.bin", good, batch_size=4)
    entry = _status(mnt / "notes.bin", 0, 1)
    assert entry["state"] == "failed", entry
    # a mount without a node cache refuses every order: OSError, naming the line
    bare = tmp_path / "bare"
    _mount(index, bare, tmp_path / "bare.log")
    try:
        with pytest.raises(OSError, match="refused the order"):
            larder.mount.register_order(bare / "samples.h5", good, batch_size=4)
        with open(tmp_path / "bare.log") as f:
            assert "needs a node cache" in f.read()
    finally:
        _unmount(bare)
