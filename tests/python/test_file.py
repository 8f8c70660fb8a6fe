"""larder.open: a seekable binary file object over a sample or field.

Real files made by real tools (torch.save, numpy.save, h5py, PIL) are
staged with larder and read back through larder.open by the same tools;
what they read is compared with what they read from the original file.
Random seek/read patterns are compared with Python's own open() of the
original.  Reads go through a node cache, without one, and checked.
"""

import ctypes
import io
import json
import os
import random
import subprocess

import pytest

import larder
from conftest import LARDER, larder_cli

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
h5py = pytest.importorskip("h5py")
Image = pytest.importorskip("PIL.Image")


def _index_files_available():
    result = subprocess.run([LARDER, "index", "--help"], capture_output=True, text=True)
    return "--files" in result.stdout + result.stderr


@pytest.fixture(scope="module", params=["index-files", "pack"])
def files(request, tmp_path_factory, larder_bin):
    """A directory of real files staged with larder, both ways:
    (index, {name: (key, path)}, saved state, saved array, way).

    "index-files": `larder index --files` indexes each file in place (key:
    its name; the blob, over 4 MiB, gets checksums per 1 MiB block).
    "pack": the directory is packed into tar shards (key: the name up to
    its first dot, the field its extension); the numpy.save output is
    then named arr.bin, since pack turns an .npy member into a bare array
    field (header dropped), which is not what numpy.load reads."""
    in_place = request.param == "index-files"
    if in_place and not _index_files_available():
        pytest.skip("this larder has no `index --files`")
    root = tmp_path_factory.mktemp("files")
    src = root / "src"
    src.mkdir()
    generator = torch.Generator().manual_seed(12)
    state = {"layer.weight": torch.randn(700, 900, generator=generator),
             "layer.bias": torch.arange(900, dtype=torch.float64),
             "step": 1234, "names": ["a", "b"]}
    torch.save(state, src / "ckpt.pt")
    array = np.random.default_rng(3).standard_normal((300, 257)).astype(np.float32)
    npy_name = "arr.npy" if in_place else "arr.bin"
    with open(src / npy_name, "wb") as out:  # np.save would add .npy to the name
        np.save(out, array)
    with h5py.File(src / "data.h5", "w") as h:
        h["x"] = np.arange(200000, dtype=np.float64)
        h["group/y"] = np.random.default_rng(4).integers(0, 1000, (64, 80), dtype=np.int32)
        h["group/y"].attrs["unit"] = "m"
    pixels = np.random.default_rng(5).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(src / "img.png")
    Image.fromarray(pixels).save(src / "photo.jpg", quality=90)
    (src / "blob.dat").write_bytes(random.Random(6).randbytes(5 * 1024 * 1024 + 123))
    (src / "empty.txt").write_bytes(b"")
    vocabulary = {"model": {"vocab": {f"tok{i}\u00e9": i for i in range(2000)}}, "version": "1.0"}
    (src / "tokenizer.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    names = ["ckpt.pt", npy_name, "data.h5", "img.png", "photo.jpg", "blob.dat", "empty.txt",
             "tokenizer.json"]
    if in_place:
        index = src / "index.larder"
        larder_cli("index", "--files", src, "-o", index)
        keys = {name: name for name in names}
    else:
        larder_cli("pack", src, "-o", root / "packed")
        index = root / "packed" / "index.larder"
        keys = {name: name.split(".")[0] for name in names}
    return (str(index), {name: (keys[name], str(src / name)) for name in names}, state, array,
            request.param)


# the ways a dataset may read: a node cache, none, none but checked
MODES = ["cache", "no-cache", "verify"]


@pytest.fixture(params=MODES)
def dataset(request, files, tmp_path):
    index = files[0]
    if request.param == "cache":
        ds = larder.Dataset(index, cache=tmp_path / "cache")
    else:
        ds = larder.Dataset(index, cache="", verify=request.param == "verify")
    yield ds
    ds.close()


def key_of(files, name):
    return files[1][name][0]


def path_of(files, name):
    return files[1][name][1]


def test_torch_load_reads_the_saved_tensors(files, dataset):
    with dataset.open(key_of(files, "ckpt.pt")) as f:
        loaded = torch.load(f)
    saved = files[2]
    assert loaded.keys() == saved.keys()
    assert torch.equal(loaded["layer.weight"], saved["layer.weight"])
    assert torch.equal(loaded["layer.bias"], saved["layer.bias"])
    assert loaded["step"] == 1234 and loaded["names"] == ["a", "b"]


def test_numpy_load_reads_the_saved_array(files, dataset):
    name = [n for n in files[1] if n.startswith("arr.")][0]
    with dataset.open(key_of(files, name)) as f:
        loaded = np.load(f)
    assert loaded.dtype == files[3].dtype and np.array_equal(loaded, files[3])
    assert np.array_equal(loaded, np.load(path_of(files, name)))


def test_h5py_reads_the_datasets(files, dataset):
    with dataset.open(key_of(files, "data.h5")) as f, h5py.File(f, "r") as h, \
            h5py.File(path_of(files, "data.h5"), "r") as original:
        assert sorted(h.keys()) == sorted(original.keys())
        assert np.array_equal(h["x"][:], original["x"][:])
        assert np.array_equal(h["x"][1000:1010], np.arange(1000, 1010, dtype=np.float64))
        assert np.array_equal(h["group/y"][:], original["group/y"][:])
        assert h["group/y"].attrs["unit"] == "m"


@pytest.mark.parametrize("name", ["img.png", "photo.jpg"])
def test_pil_reads_the_pixels(files, dataset, name):
    with dataset.open(key_of(files, name)) as f, Image.open(f) as image:
        pixels = np.asarray(image.convert("RGB"))
    with Image.open(path_of(files, name)) as original:
        expected = np.asarray(original.convert("RGB"))
    assert pixels.shape == (96, 128, 3)
    assert np.array_equal(pixels, expected)


def test_text_through_textiowrapper(files, dataset):
    """A tokenizer's JSON, read as text the way json.load reads a file."""
    with open(path_of(files, "tokenizer.json"), encoding="utf-8") as original:
        want = json.load(original)
    with io.TextIOWrapper(dataset.open(key_of(files, "tokenizer.json")), encoding="utf-8") as t:
        assert json.load(t) == want


@pytest.mark.parametrize("name", ["blob.dat", "data.h5", "img.png", "empty.txt"])
def test_random_seeks_and_reads_match_the_original(files, dataset, name):
    rng = random.Random(name)
    with open(path_of(files, name), "rb") as want, \
            dataset.open(key_of(files, name), buffer_size=rng.choice([4096, 1 << 20])) as got:
        size = os.path.getsize(path_of(files, name))
        assert got.size == len(got) == size
        for step in range(400):
            op = rng.randrange(7)
            if op == 0:
                offset = rng.randrange(size + 100)
                assert got.seek(offset) == want.seek(offset)
            elif op == 1:
                offset = rng.randrange(-min(want.tell(), 5000), 5000)
                assert got.seek(offset, io.SEEK_CUR) == want.seek(offset, io.SEEK_CUR)
            elif op == 2:
                offset = -rng.randrange(min(size, 70000) + 1)
                assert got.seek(offset, io.SEEK_END) == want.seek(offset, io.SEEK_END)
            elif op == 3:
                n = rng.choice([0, 1, 17, 4096, 65536, 300000, 2 << 20])
                assert got.read(n) == want.read(n)
            elif op == 4:
                n = rng.randrange(1, 200000)
                a, b = bytearray(n), bytearray(n)
                assert got.readinto(a) == want.readinto(b)
                assert a == b
            elif op == 5:
                assert got.readline() == want.readline()
            else:
                data = got.read1(rng.randrange(1, 5000))
                assert data == want.read(len(data))
            assert got.tell() == want.tell()
        want.seek(0)
        got.seek(0)
        assert got.read() == want.read()


def test_reading_past_the_end_gives_nothing(files, dataset):
    with dataset.open(key_of(files, "img.png")) as f:
        size = f.size
        assert f.seek(size + 1000) == size + 1000
        assert f.read() == b""
        assert f.read(10) == b""
        f.seek(size - 3)
        assert len(f.read(100)) == 3
        assert f.read(100) == b""
        # a position past 2**63 is refused, as Python's own files refuse it
        # (never wrapped into C's 64-bit offsets, to read from near the start)
        with pytest.raises((ValueError, OverflowError)):
            f.seek(2**64 + 10)
        with open(path_of(files, "img.png"), "rb") as plain, \
                pytest.raises((ValueError, OverflowError)):
            plain.seek(2**64 + 10)


def test_errors(files, dataset):
    with pytest.raises(KeyError, match="no/such/file"):
        dataset.open("no/such/file")
    with pytest.raises(KeyError, match="nofield"):
        dataset.open(key_of(files, "img.png"), "nofield")
    with pytest.raises(IndexError):
        dataset.open(len(dataset) + 5)
    # a NUL would cut the name short in C: never another file's bytes
    with pytest.raises(KeyError):
        dataset.open(key_of(files, "img.png") + "\0x")
    with pytest.raises(KeyError):
        dataset.open(key_of(files, "img.png"), "png\0x")
    f = dataset.open(key_of(files, "img.png"))
    with pytest.raises(OSError):
        f.seek(-1)
    f.seek(10)
    with pytest.raises(OSError):
        f.seek(-11, io.SEEK_CUR)
    assert f.tell() == 10
    f.close()
    assert f.closed
    for call in (f.read, f.tell, lambda: f.seek(0), lambda: f.readinto(bytearray(4))):
        with pytest.raises(ValueError):
            call()
    f.close()  # twice is fine


def test_attributes_and_context_manager(files, dataset):
    key = key_of(files, "ckpt.pt")
    with dataset.open(key) as f:
        assert f.mode == "rb"
        assert f.name == key
        assert f.readable() and f.seekable() and not f.writable()
        assert f.size == os.path.getsize(path_of(files, "ckpt.pt"))
        assert isinstance(f, io.BufferedIOBase)
        assert repr(f).startswith("<larder file")
    assert f.closed


def test_open_by_path_and_by_id(files):
    index = files[0]
    name = "photo.jpg"
    with open(path_of(files, name), "rb") as original:
        want = original.read()
    with larder.open(index, key_of(files, name), cache="") as f:
        assert f.read() == want
        ds = f.raw._dataset
    assert ds.closed  # the file's own dataset closes with it
    with larder.Dataset(index, cache="") as ds:
        sample = ds.index_of(key_of(files, name))
        with larder.open(ds, sample) as f:
            assert f.read() == want
        assert not ds.closed  # a dataset passed in stays open
        f = ds.open(key_of(files, name))
    assert f.closed  # closing the dataset closes its files


def test_open_uses_larder_cache_from_the_environment(files, tmp_path, monkeypatch):
    cache = tmp_path / "envcache"
    monkeypatch.setenv("LARDER_CACHE", str(cache))
    with larder.open(files[0], key_of(files, "blob.dat")) as f:
        f.read(1000)
        stats = f.raw._dataset.stats()
    assert stats["cached"]
    assert stats["resident_bytes"] >= 1000
    assert any(cache.iterdir())


def test_readinto_fills_the_callers_buffer_directly(files, monkeypatch):
    """A read of at least the buffer's size reaches liblarder with the
    caller's own buffer: no copy in between."""
    seen = []
    real = larder._lib.lib.larder_file_pread

    def spy(handle, buffer, length, offset):
        seen.append((ctypes.addressof(buffer), length, offset))
        return real(handle, buffer, length, offset)

    with larder.Dataset(files[0], cache="") as ds, ds.open(key_of(files, "blob.dat"),
                                                             buffer_size=65536) as f:
        monkeypatch.setattr(larder._lib.lib, "larder_file_pread", spy)
        target = bytearray(1 << 20)
        f.seek(5000)
        assert f.readinto(target) == len(target)
        address = ctypes.addressof((ctypes.c_char * len(target)).from_buffer(target))
        assert seen == [(address, len(target), 5000)]
    with open(path_of(files, "blob.dat"), "rb") as original:
        original.seek(5000)
        assert target == original.read(1 << 20)


def test_packed_array_field_is_its_bare_bytes(files, tmp_path):
    """A field of a packed sample (here an .npy member, which pack stores as
    a bare array) opens by name: its bytes are the array's own."""
    src = tmp_path / "src"
    src.mkdir()
    array = np.arange(5000, dtype="<i8").reshape(50, 100)
    np.save(src / "a.npy", array)
    (src / "a.txt").write_bytes(b"label")
    larder_cli("pack", src, "-o", tmp_path / "packed")
    with larder.Dataset(tmp_path / "packed" / "index.larder", cache="") as ds:
        with ds.open("a", "npy") as f:
            assert f.name == "a.npy"
            assert f.read() == array.tobytes()
        with ds.open("a", "txt") as f:
            assert f.read() == b"label"
        with ds.open("a") as f:  # two fields: the whole sample
            assert f.size == ds.sample_info(0).length
            assert f.read() == ds.read(0)


def test_a_small_read_of_a_large_indexed_file_reads_its_checksum_blocks_alone(files, tmp_path):
    if files[4] != "index-files":
        pytest.skip("packed samples carry one checksum each")
    with open(path_of(files, "blob.dat"), "rb") as original:
        original.seek(4 << 20)
        want = original.read(4096)
    for options in (dict(cache=tmp_path / "cache"), dict(cache="", verify=True)):
        with larder.Dataset(files[0], **options) as ds:
            with ds.open("blob.dat", buffer_size=4096) as f:
                before = ds.stats()["origin_bytes"]
                f.seek(4 << 20)
                assert f.read(4096) == want
                # the 256 KiB read-ahead window lies in one 1 MiB checksum block
                assert ds.stats()["origin_bytes"] - before == 1 << 20


def test_a_forked_child_reads_through_its_own_handle(files):
    with open(path_of(files, "blob.dat"), "rb") as original:
        want = original.read()
    with larder.Dataset(files[0], cache="") as ds, ds.open(key_of(files, "blob.dat")) as f:
        head = f.read(100000)
        pid = os.fork()
        if pid == 0:  # the child goes on where the parent was
            ok = f.read() == want[100000:]
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert head == want[:100000]
        assert f.read(10) == want[100000:100010]


# ---- indexes written by tests/tools/craft_index.py (from docs/format.md
# alone, no larder code): every field of a good one reads as the bytes it
# wrote; a hostile record fails with EBADINDEX naming it, the rest read


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "tools"))
    import craft_index

    root = str(tmp_path_factory.mktemp("crafted") / "ds")
    craft_index.make(root, seed=33)
    variants = {name: craft_index.variant(root, name)
                for name in ["field-past-sample", "field-offset-wraps", "sample-past-end"]}
    return root, variants


@pytest.mark.parametrize("cache", [True, False])
def test_every_field_of_a_crafted_index_reads_as_written(crafted, tmp_path, cache):
    root = crafted[0]
    expect = os.path.join(root, "expect")
    with larder.Dataset(os.path.join(root, "index.larder"),
                        cache=str(tmp_path / "cache") if cache else "") as ds:
        assert len(ds) > 0
        for i in range(len(ds)):
            key = ds.key(i)
            for field in ds.fields(i):
                with open(os.path.join(expect, f"{key}.{field.name}"), "rb") as want, \
                        ds.open(key, field.name) as f:
                    data = want.read()
                    assert f.size == len(data)
                    assert f.read() == data
                    f.seek(len(data) // 3)
                    assert f.read(100) == data[len(data) // 3:len(data) // 3 + 100]
            if len(ds.fields(i)) > 1:  # no field named: the whole sample
                with open(os.path.join(expect, key), "rb") as want, ds.open(i) as f:
                    assert f.read() == want.read()


@pytest.mark.parametrize("name", ["field-past-sample", "field-offset-wraps"])
def test_a_hostile_field_record_is_refused_naming_it(crafted, name):
    v = crafted[1][name]
    with larder.Dataset(v["path"], cache="") as ds:
        bad_key = v["bad_key"]
        with pytest.raises(larder.LarderError) as excinfo:
            ds.open(bad_key, v["bad_field"])
        assert excinfo.value.code == larder.EBADINDEX
        assert str(v["bad_sample"]) in str(excinfo.value) or bad_key in str(excinfo.value)
        with open(os.path.join(crafted[0], "expect", v["good_key"] + ".bin"), "rb") as want, \
                ds.open(v["good_key"], "bin") as f:
            assert f.read() == want.read()


def test_a_sample_past_its_shard_is_refused_naming_it(crafted):
    v = crafted[1]["sample-past-end"]
    with larder.Dataset(v["path"], cache="") as ds:
        with pytest.raises(larder.LarderError) as excinfo:
            ds.open(v["bad_sample"])
        assert excinfo.value.code == larder.EBADINDEX
        assert f"sample {v['bad_sample']}" in str(excinfo.value)
        with open(os.path.join(crafted[0], "expect", v["good_key"]), "rb") as want, \
                ds.open(v["good_key"], None) as f:
            assert len(ds.fields(ds.index_of(v["good_key"]))) > 1  # so: the whole sample
            assert f.read() == want.read()
