"""larder.Dataset against datasets packed by the CLI: fields, arrays,
keys, errors, the node cache, pickling and processes, threads."""

import errno
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import threading

import pytest

import larder
from conftest import ARRAY_DTYPES, PYTHON_DIR, REPO, TREE_SAMPLES, larder_cli, tree_content

np = pytest.importorskip("numpy")


def number(key):
    return int(key[len("sample"):])


def test_len_info_and_keys(tree_index):
    with larder.Dataset(tree_index) as ds:
        assert len(ds) == TREE_SAMPLES
        info = ds.info
        assert info.num_samples == TREE_SAMPLES and info.num_shards > 1
        assert len(info.dataset_id) == 32 and int(info.dataset_id, 16) >= 0
        assert info.total_bytes > sum(len(tree_content(i)) for i in range(TREE_SAMPLES))
        keys = [ds.key(i) for i in range(len(ds))]
        assert sorted(keys) == [f"sample{i:05d}" for i in range(TREE_SAMPLES)]
        assert keys != sorted(keys), "pack shuffles by default"
        for i, key in enumerate(keys):
            assert ds.index_of(key) == i
        assert "sample00007" in ds and "nope" not in ds
        with pytest.raises(KeyError):
            ds.index_of("sample99999")
        assert ds.sample_info(3).key == keys[3]


def test_getitem_gives_every_field(tree_index):
    ds = larder.Dataset(tree_index)
    for i in range(len(ds)):
        sample = ds[i]
        n = number(sample["__key__"])
        assert sample["__index__"] == i
        assert set(sample) == {"__key__", "__index__", "txt", "cls"}
        assert sample["txt"] == tree_content(n)
        assert sample["cls"] == f"{n % 10}\n".encode()
        assert isinstance(sample["txt"], bytes)
    assert [f.name for f in ds.fields(0)] == ["cls", "txt"]
    assert all(f.dtype is None and f.shape is None for f in ds.fields(0))
    assert [s["__key__"] for s in ds] == [ds.key(i) for i in range(len(ds))]


def test_negative_indices_and_out_of_range(tree_index):
    ds = larder.Dataset(tree_index)
    assert ds[-1] == ds[TREE_SAMPLES - 1]
    assert ds[-TREE_SAMPLES]["__key__"] == ds.key(0)
    assert ds.key(-2) == ds.key(TREE_SAMPLES - 2)
    assert ds[np.int64(5)] == ds[5]
    for bad in (TREE_SAMPLES, -TREE_SAMPLES - 1, 1 << 62):
        with pytest.raises(IndexError):
            ds[bad]
        with pytest.raises(IndexError):
            ds.read_many([0, bad])
    with pytest.raises(TypeError):
        ds[1.5]
    with pytest.raises(TypeError):
        ds["sample00001"]


def test_read_and_read_many(tree_index):
    ds = larder.Dataset(tree_index)
    raw = ds.read(7)
    assert isinstance(raw, bytes) and len(raw) == ds.sample_info(7).length
    # the field spans lie inside the sample's bytes (tar: with headers)
    sample = ds[7]
    for f in ds.fields(7):
        assert raw[f.offset:f.offset + f.length] == sample[f.name]
    ids = [5, 0, 99, 5, -1, 42]
    assert ds.read_many(ids) == [ds.read(i) for i in ids]
    assert ds.read_many([]) == []
    assert ds.get_many(ids) == [ds[i] for i in ids]
    assert ds.get_many(range(3)) == [ds[0], ds[1], ds[2]]


def check_arrays(ds, sources):
    assert len(ds) == 12
    for i in range(12):
        key = f"a{i:03d}"
        sample = ds[ds.index_of(key)]
        assert sample["txt"] == f"text of {i}".encode()
        fields = {f.name: f for f in ds.fields(ds.index_of(key))}
        for dtype in ARRAY_DTYPES:
            want = np.load(sources / f"{key}.{dtype}.npy")
            got = sample[dtype]
            assert isinstance(got, np.ndarray), dtype
            assert got.dtype == want.dtype and got.dtype.byteorder in "<=|", dtype
            assert got.shape == want.shape, (dtype, got.shape, want.shape)
            assert np.array_equal(got, want), dtype
            assert got.tobytes() == want.astype(want.dtype.newbyteorder("<")).tobytes()
            assert got.flags.owndata and got.flags.writeable and got.flags.aligned
            assert got.flags.c_contiguous
            assert fields[dtype].dtype == np.dtype(dtype) and fields[dtype].shape == want.shape
        assert fields["txt"].dtype is None


def test_npy_arrays_have_dtype_and_shape(array_index, array_sources):
    check_arrays(larder.Dataset(array_index), array_sources)


def test_hdf5_arrays_match_h5py(tmp_path, larder_bin):
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 8))
    y = np.arange(50, dtype=np.int32) * 3
    img = rng.integers(0, 255, (50, 4, 5), dtype=np.uint8)
    with h5py.File(tmp_path / "rows.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(8, 8), compression="gzip")
        f.create_dataset("y", data=y)
        f.create_dataset("img", data=img)
        g = f.create_group("g")
        g.create_dataset("w", data=np.float32(2.5))
    for fmt in ("tar", "flat"):
        out = tmp_path / fmt
        larder_cli("pack", tmp_path / "rows.h5", "-o", out, "--hdf5-rows", "x,y,img",
                   "--format", fmt, "--shard-size", "2K")
        ds = larder.Dataset(out / "index.larder")
        assert len(ds) == 50
        rows = set()
        for i in range(len(ds)):
            sample = ds[i]
            row = int(sample["__key__"])
            rows.add(row)
            assert sample["x"].dtype == np.float64 and sample["x"].shape == (8,)
            assert np.array_equal(sample["x"], x[row])
            assert sample["y"].shape == () and sample["y"] == y[row]
            assert sample["y"].dtype == np.int32
            assert sample["img"].shape == (4, 5) and np.array_equal(sample["img"], img[row])
        assert rows == set(range(50))


def test_bad_path_raises_larder_error_naming_it(tmp_path):
    missing = str(tmp_path / "nowhere" / "index.larder")
    with pytest.raises(larder.LarderError) as e:
        larder.Dataset(missing)
    assert missing in str(e.value)
    assert e.value.code == -errno.ENOENT and e.value.errno == errno.ENOENT
    assert isinstance(e.value, OSError)

    junk = tmp_path / "junk.larder"
    junk.write_bytes(b"not an index at all" * 10)
    with pytest.raises(larder.LarderError) as e:
        larder.Dataset(junk)
    assert e.value.code == larder.EBADINDEX and e.value.errno is None
    assert str(junk) in str(e.value)
    assert larder.strerror(larder.EBADINDEX) in str(e.value)
    # it crosses process boundaries (DataLoader workers pickle exceptions)
    copy = pickle.loads(pickle.dumps(e.value))
    assert copy.code == e.value.code and str(copy) == str(e.value)


def test_checksum_errors_name_the_sample(tree_index, tmp_path):
    ds_dir = tmp_path / "ds"
    shutil.copytree(os.path.dirname(tree_index), ds_dir)
    index = ds_dir / "index.larder"
    clean = larder.Dataset(index)
    victim = 17
    info = clean.sample_info(victim)
    txt = next(f for f in clean.fields(victim) if f.name == "txt")
    shard = ds_dir / info.shard_name
    data = bytearray(shard.read_bytes())
    data[info.offset + txt.offset + 20] ^= 0xFF
    shard.write_bytes(bytes(data))
    # without verification an uncached read hands back what is there
    assert larder.Dataset(index, cache="")[victim]["txt"] != tree_content(
        number(info.key))
    for ds in (larder.Dataset(index, cache="", verify=True),
               larder.Dataset(index, cache=tmp_path / "cache")):
        with pytest.raises(larder.LarderError) as e:
            ds[victim]
        assert e.value.code == larder.ECHECKSUM
        with pytest.raises(larder.LarderError) as e:
            ds.read_many([1, victim, 2])
        assert e.value.code == larder.ECHECKSUM and f"sample {victim}" in str(e.value)
        assert ds[victim + 1]["txt"] == clean[victim + 1]["txt"]


def test_closed_dataset(tree_index):
    with larder.Dataset(tree_index) as ds:
        assert ds[0]
    assert ds.closed
    with pytest.raises(ValueError):
        ds[0]
    ds.close()  # idempotent


def test_cache_hits_on_the_second_pass(tree_index, tmp_path):
    cache = tmp_path / "cache"
    ds = larder.Dataset(tree_index, cache=cache, block_size=4096)
    before = ds.stats()
    assert before["cached"] and before["hits"] == before["misses"] == 0
    first = ds.read_many(range(len(ds)))
    after1 = ds.stats()
    assert after1["misses"] > 0 and after1["hits"] + after1["misses"] == TREE_SAMPLES
    assert after1["origin_bytes"] >= ds.info.total_bytes
    assert after1["block_size"] == 4096
    assert [ds.read(i) for i in range(len(ds))] == first
    after2 = ds.stats()
    assert after2["hits"] == after1["hits"] + TREE_SAMPLES
    assert after2["misses"] == after1["misses"]
    assert after2["origin_bytes"] == after1["origin_bytes"]
    assert after2["resident_bytes"] > 0 and after2["total_bytes"] >= after2["resident_bytes"]
    assert sum(after2["fill_latency_us"]) > 0 and after2["fill_p99_us"] >= after2["fill_p50_us"]
    # another handle on the same cache (as another process would) finds it warm
    other = larder.Dataset(tree_index, cache=cache, block_size=4096)
    assert other[3] == ds[3]
    assert other.stats()["misses"] == after1["misses"]
    assert not larder.Dataset(tree_index, cache="").stats()["cached"]


def test_cache_capacity_evicts(tree_index, tmp_path):
    ds = larder.Dataset(tree_index, cache=tmp_path / "cache", block_size=4096,
                        cache_size=64 * 1024, max_inflight=2)
    want = larder.Dataset(tree_index, cache="")
    for _ in range(2):
        assert ds.read_many(range(len(ds))) == want.read_many(range(len(ds)))
    stats = ds.stats()
    assert stats["evictions"] > 0
    assert stats["resident_bytes"] < stats["total_bytes"]


def test_pickle_reopens_lazily(tree_index):
    ds = larder.Dataset(tree_index, cache="", max_inflight=4)
    blob = pickle.dumps(ds)
    assert len(blob) < 500, "only the url and options travel"
    copy = pickle.loads(blob)
    assert copy._handle is None
    assert copy.options == ds.options and copy.url == ds.url
    assert copy[3] == ds[3] and len(copy) == len(ds)
    ds.close()
    with pytest.raises(ValueError):
        pickle.loads(pickle.dumps(ds))[0]


def _child_reads(ds, ids):
    return ds.read_many(ids), ds[ids[0]]["__key__"]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_other_processes_get_their_own_handle(tree_index, method):
    ds = larder.Dataset(tree_index, cache="")
    ids = [4, 8, 15, 16, 23, 42]
    want = ds.read_many(ids)  # the parent's handle now has reader threads
    context = multiprocessing.get_context(method)
    with context.Pool(1) as pool:
        got, key = pool.apply(_child_reads, (ds, ids))
    assert got == want and key == ds.key(4)
    assert ds.read_many(ids) == want


def test_threads_read_concurrently(tree_index):
    ds = larder.Dataset(tree_index, cache="")
    want = [ds.read(i) for i in range(len(ds))]
    errors, results = [], {}

    def reader(t):
        try:
            results[t] = [ds[i]["txt"] for i in range(t, len(ds), 4)]
            results[t + 4] = ds.read_many(range(len(ds)))
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for t in range(4):
        assert results[t] == [tree_content(number(ds.key(i))) for i in range(t, len(ds), 4)]
        assert results[t + 4] == want


def run_python(code, env=None, cwd=None):
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environment, cwd=cwd or "/")


def test_import_without_torch_and_library_lookup(tree_index):
    # larder alone never imports torch
    result = run_python(
        "import sys; sys.modules['torch'] = None\n"
        "import larder\n"
        f"print(len(larder.Dataset({tree_index!r})), 'torch' in sys.modules and "
        "sys.modules['torch'] is not None)",
        env={"PYTHONPATH": PYTHON_DIR})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(TREE_SAMPLES), "False"]
    # without LARDER_LIBRARY the build tree is found beside the package
    if not os.path.exists(os.path.join(REPO, "build", "liblarder.so")):
        return
    result = run_python("import larder; print(larder.library_path())",
                        env={"PYTHONPATH": PYTHON_DIR, "LARDER_LIBRARY": ""})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == os.path.join(REPO, "build", "liblarder.so")
    # a wrong LARDER_LIBRARY is an ImportError that says what was tried
    result = run_python("import larder", env={"PYTHONPATH": PYTHON_DIR,
                                              "LARDER_LIBRARY": "/nonexistent/liblarder.so"})
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "/nonexistent/liblarder.so" in result.stderr
