"""Fixtures for the Python tests: datasets packed with the larder CLI.

Run from the repository root:
    PYTHONPATH=python /usr/bin/python3 -m pytest -q tests/python
tests/run sets LARDER (the CLI) and LARDER_LIBRARY (the library) to the
build under test; by default both come from build/.
"""

import multiprocessing
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(REPO, "python")
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

# Under AddressSanitizer (tests/run preloads its runtime into Python), a
# forked DataLoader worker can deadlock on its first allocation: the runtime
# of gcc 12 does not take its allocator's locks around fork(), so a lock
# another thread of the parent held at that moment (torch's queue feeder
# threads allocate while the next worker is forked) stays locked in the
# child forever.  Seen from one full run in two to one in fifteen; gdb on
# the stuck worker showed a thread in SizeClassAllocator64::GetFromAllocator
# waiting on a mutex no thread of that process holds.  Under ASan the
# workers are forked from a fork server instead, a process that does
# nothing else while it forks (their datasets travel pickled, as with
# spawn); the normal build's runs cover fork() from the training process.
if "libasan" in os.environ.get("LD_PRELOAD", ""):
    multiprocessing.set_start_method("forkserver", force=True)
    # imported once, by the server: its children start with them
    multiprocessing.set_forkserver_preload(["torch", "larder", "larder.torch"])

LARDER = os.environ.get("LARDER") or os.path.join(REPO, "build", "larder")

# the samples of the tree dataset: key -> (txt bytes, cls bytes)
TREE_SAMPLES = 100


def larder_cli(*args, check=True):
    """Run the larder CLI; returns its stdout (text)."""
    result = subprocess.run([LARDER, *map(str, args)], capture_output=True, text=True,
                            env={**os.environ, "LARDER_NO_PROGRESS": "1"})
    if check and result.returncode != 0:
        raise AssertionError(f"larder {' '.join(map(str, args))} exited "
                             f"{result.returncode}: {result.stderr}")
    return result.stdout


def tree_content(i):
    """Deterministic bytes of sample i's .txt field, of varying length."""
    body = bytes((i * 31 + k * 7) % 256 for k in range((i * 997) % 3000 + 1))
    return f"sample{i:05d}:".encode() + body


@pytest.fixture(scope="session")
def larder_bin():
    if not os.access(LARDER, os.X_OK):
        pytest.skip(f"larder CLI not built: {LARDER}")
    return LARDER


@pytest.fixture(scope="session")
def tree_index(tmp_path_factory, larder_bin):
    """100 samples (sample00000 .. sample00099), each .txt and .cls, packed
    shuffled into several tar shards."""
    root = tmp_path_factory.mktemp("tree")
    src = root / "src"
    src.mkdir()
    for i in range(TREE_SAMPLES):
        (src / f"sample{i:05d}.txt").write_bytes(tree_content(i))
        (src / f"sample{i:05d}.cls").write_bytes(f"{i % 10}\n".encode())
    larder_cli("pack", src, "-o", root / "ds", "--shard-size", "40K")
    return str(root / "ds" / "index.larder")


# every dtype larder records, with the shapes the array tests use
ARRAY_DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
                "float16", "float32", "float64", "bool"]


def array_value(i, dtype):
    import numpy as np

    rng = np.random.default_rng(1000 + i)
    shape = [(), (5,), (3, 4), (2, 3, 2)][i % 4]
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith("float"):
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.fixture(scope="session")
def array_sources(tmp_path_factory):
    """A directory of 12 samples, one .npy field per dtype plus a .txt."""
    np = pytest.importorskip("numpy")
    src = tmp_path_factory.mktemp("arrays") / "src"
    src.mkdir()
    for i in range(12):
        for dtype in ARRAY_DTYPES:
            np.save(src / f"a{i:03d}.{dtype}.npy", array_value(i, dtype))
        (src / f"a{i:03d}.txt").write_bytes(f"text of {i}".encode())
    return src


@pytest.fixture(scope="session", params=["tar", "flat"])
def array_index(request, array_sources, larder_bin):
    out = array_sources.parent / f"ds-{request.param}"
    larder_cli("pack", array_sources, "-o", out, "--format", request.param,
               "--shard-size", "8K")
    return str(out / "index.larder")
