"""Transforms (docs/transforms.md): the built-ins against references
written here from the documented algorithms and real tools (PIL for JPEG
decoding, numpy's astype for casts, the zstd tool for compression), and
byte-identical results wherever they run: in the node daemon, from its
result cache, in this process, and after the daemon fell back to raw
bytes (a daemon started with --transform-cpu-limit 0, the artificial load
of these tests).  Hostile input gives an error naming the sample, the
field and the transform, and the daemon goes on.
"""

import io
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import larder
from conftest import LARDER, larder_cli

PIL = pytest.importorskip("PIL.Image")
LARDERD = os.path.join(os.path.dirname(LARDER), "larderd")

SIDE = 48
JPEG_SIZES = [(300, 410), (1000, 1000), (97, 131), (40, 30), (517, 389), (222, 223)]
GRAY = 3  # sample s3's JPEG is greyscale
CORRUPT = len(JPEG_SIZES)  # its JPEG is cut short
BOMB = CORRUPT + 1  # its zstd frame claims 200 MB


def zstd_tool(data, *options):
    if not shutil.which("zstd"):
        pytest.skip("the zstd tool is not installed")
    return subprocess.run(["zstd", "-q", "-c", *options], input=data, capture_output=True,
                          check=True).stdout


def float32_specials(rng):
    bits = rng.integers(0, 2**32, size=4000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF,
                        0x7F802000, 0x00000001, 0x80000001, 0x33000000, 0x33000001,
                        0x387FC000, 0x38800000, 0x477FE000, 0x477FF000, 0x477FEFFF,
                        0x47800000, 0x3F801000, 0x3F803000, 0x3F802FFF, 0x3F800FFF],
                       dtype=np.uint32)
    # values near every half's halfway points: round to nearest even there
    halves = np.arange(0, 0x7C00, 37, dtype=np.uint16).view(np.float16).astype(np.float32)
    mid = halves.view(np.uint32) + 0x1000
    return np.concatenate([bits, special, mid, mid - 1, mid + 1]).view(np.float32)


@pytest.fixture(scope="module")
def tdata(tmp_path_factory, larder_bin):
    """Samples s0..s7: a JPEG (s3 grey, s6 cut short), arrays of several
    dtypes, a zstd field (s7's a bomb), and the inputs, for the references."""
    root = tmp_path_factory.mktemp("transform")
    src = root / "src"
    src.mkdir()
    rng = np.random.default_rng(15)
    inputs = {}
    for i in range(BOMB + 1):
        h, w = JPEG_SIZES[i % len(JPEG_SIZES)]
        y, x = np.mgrid[0:h, 0:w]
        image = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                          ((x + y) * 7) % 256], axis=-1).astype(np.uint8)
        image ^= rng.integers(0, 40, size=image.shape, dtype=np.uint8)
        picture = PIL.fromarray(image)
        if i == GRAY:
            picture = picture.convert("L")
        buf = io.BytesIO()
        picture.save(buf, format="JPEG", quality=85)
        jpeg = buf.getvalue()
        if i == CORRUPT:
            jpeg = jpeg[: len(jpeg) // 2]
        (src / f"s{i}.jpg").write_bytes(jpeg)
        f32 = float32_specials(rng)[: 100 + 13 * i]
        f64 = np.concatenate([rng.standard_normal(50) * 10.0 ** rng.integers(-9, 6, 50),
                              [np.inf, -np.inf, np.nan, 65504.0, 65520.0, 65519.99, 2.0**-25,
                               2.0**-24 * 1.5, -0.0, 1e-300]])
        arrays = {"f32": f32.reshape(-1, 1) if i % 2 else f32,
                  "f64": f64, "i16": rng.integers(-2**15, 2**15, size=(3, 7), dtype=np.int16),
                  "u8": rng.integers(0, 256, size=64, dtype=np.uint8),
                  "i64": rng.integers(-2**62, 2**62, size=9, dtype=np.int64),
                  "b": rng.integers(0, 2, size=5).astype(bool)}
        for name, a in arrays.items():
            np.save(src / f"s{i}.{name}.npy", a)
        payload = bytes(rng.integers(0, 8, size=20000 + 999 * i, dtype=np.uint8))
        zst = zstd_tool(payload) if i != BOMB else zstd_tool(bytes(200 << 20), "-1")
        (src / f"s{i}.bin.zst").write_bytes(zst)
        inputs[i] = dict(jpeg=jpeg, arrays=arrays, payload=payload)
    larder_cli("pack", src, "-o", root / "ds", "--no-shuffle")
    return str(root / "ds" / "index.larder"), inputs


@pytest.fixture(autouse=True)
def budget():
    """A reader's budget of 1 s: asked, the daemon takes every request
    (without one, a process runs its first transform itself, to know
    what one costs; test_default_budget)."""
    larder.transform.set_budget(1.0)
    yield
    larder.transform.set_budget(0)


@pytest.fixture
def no_daemon(monkeypatch):
    monkeypatch.delenv("LARDER_SOCKET", raising=False)
    monkeypatch.delenv("LARDER_CACHE", raising=False)


def start_daemon(tmp_path, name, *options):
    if not os.access(LARDERD, os.X_OK):
        pytest.skip(f"larderd not built: {LARDERD}")
    sock = tmp_path / f"{name}.sock"
    log = open(tmp_path / f"{name}.log", "w")
    # CPU never sends the work back (--transform-cpu-limit 100): this
    # machine's other load is not the test's; the options may say otherwise
    proc = subprocess.Popen([LARDERD, "--cache", str(tmp_path / f"{name}-cache"),
                             "--socket", str(sock), "--transform-cpu-limit", "100", *options],
                            stderr=log)
    for _ in range(400):
        if sock.exists():
            break
        if proc.poll() is not None:
            break
        time.sleep(0.025)
    else:
        proc.kill()
    if not sock.exists():
        raise AssertionError("larderd did not start: " + (tmp_path / f"{name}.log").read_text())
    return proc, str(sock)


@pytest.fixture
def daemons(tmp_path, monkeypatch):
    """Two daemons: one that transforms, one that always falls back."""
    # readers wait for them up to 20 s (see open_with), whichever way they connect
    monkeypatch.setenv("LARDER_DAEMON_TIMEOUT_MS", "20000")
    procs = []
    try:
        p1, s1 = start_daemon(tmp_path, "normal")
        procs.append(p1)
        p2, s2 = start_daemon(tmp_path, "busy", "--transform-cpu-limit", "0")
        procs.append(p2)
        yield s1, s2, procs
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)


def open_with(index, monkeypatch, sock=None, cache=""):
    if sock:
        monkeypatch.setenv("LARDER_SOCKET", sock)
        # a loaded machine may take over the default 1 s to answer: the
        # reader would then mark its daemon down and transform here itself,
        # and the tests that expect the daemon's placement would fail
        monkeypatch.setenv("LARDER_DAEMON_TIMEOUT_MS", "20000")
    else:
        monkeypatch.delenv("LARDER_SOCKET", raising=False)
    return larder.Dataset(index, cache=cache)


# ---- references, written from docs/transforms.md ---------------------------


def area_resize_reference(image, n):
    """The documented area resize: overlap weights in units of 1/n source
    pixels, rows then columns, each rounded half up to uint8."""
    def axis(a, to, along):
        size = a.shape[along]
        weights = np.zeros((to, size), dtype=np.int64)
        for x in range(to):
            lo, hi = x * size, (x + 1) * size
            for i in range(lo // to, -(-hi // to)):
                weights[x, i] = max(0, min((i + 1) * to, hi) - max(i * to, lo))
        moved = np.moveaxis(a.astype(np.int64), along, 0)
        out = (np.tensordot(weights, moved, axes=(1, 0)) + size // 2) // size
        return np.moveaxis(out, 0, along).astype(np.uint8)
    return axis(axis(image, n, 1), n, 0)


def jpeg_reference(jpeg, n):
    picture = PIL.open(io.BytesIO(jpeg))
    w, h = picture.size
    divisor = next((d for d in (8, 4, 2) if -(-w // d) >= n and -(-h // d) >= n), 1)
    if divisor > 1:
        picture.draft("RGB", (w // divisor, h // divisor))
        assert picture.size == (-(-w // divisor), -(-h // divisor)), (picture.size, divisor)
    return area_resize_reference(np.asarray(picture.convert("RGB")), n)


def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    return a == b


def fields(sample):
    return {k: v for k, v in sample.items() if k not in ("__placement__",)}


# ---- the built-ins against the references ------------------------------------


def test_jpeg_decode_resize_matches_pil_and_the_area_reference(tdata, no_daemon):
    index, inputs = tdata
    ds = larder.Dataset(index, cache="")
    for i in range(len(JPEG_SIZES)):
        for n in (SIDE, 224, 7):
            got = ds.get(i, transform=f"jpeg_decode_resize:{n}")
            assert got["__placement__"] == "local"
            image = got["jpg"]
            assert image.dtype == np.uint8 and image.shape == (n, n, 3)
            expected = jpeg_reference(inputs[i]["jpeg"], n)
            assert image.tobytes() == expected.tobytes(), (i, n, np.abs(
                image.astype(int) - expected).max())
            # the other fields pass through as they are
            assert ds.get(i)["bin.zst"] == got["bin.zst"]
            assert same(ds.get(i)["f32"], got["f32"])


def test_npy_cast_matches_numpy_astype(tdata, no_daemon):
    index, inputs = tdata
    ds = larder.Dataset(index, cache="")
    for i in (0, 1, 5):
        for target in ("float16", "float32", "float64"):
            got = ds.get(i, transform=f"npy_cast:{target}")
            for name, a in inputs[i]["arrays"].items():
                with np.errstate(over="ignore"):  # to infinity, as it should
                    expected = a.astype(target)
                assert got[name].dtype == np.dtype(target) and got[name].shape == a.shape
                # bits, not values: NaN payloads, signed zeros, rounding
                assert got[name].tobytes() == expected.tobytes(), (i, target, name)
    # float16 sources widen exactly; the jpg and zst fields pass through
    got = ds.get(0, transform="npy_cast:f2")
    assert got["jpg"] == inputs[0]["jpeg"]


def test_zstd_decompress_matches_the_tool(tdata, no_daemon, tmp_path):
    index, inputs = tdata
    ds = larder.Dataset(index, cache="")
    for i in range(CORRUPT + 1):  # streamed frames: no content size in their headers
        got = ds.get(i, transform="zstd_decompress")
        assert "bin.zst" not in got
        assert got["bin"] == inputs[i]["payload"]
    # a file's frame states its size; two frames back to back; a frame cut short
    src = tmp_path / "src"
    src.mkdir()
    payload = bytes(range(256)) * 300
    (tmp_path / "p").write_bytes(payload)
    subprocess.run(["zstd", "-q", str(tmp_path / "p"), "-o", str(src / "a.bin.zst")], check=True)
    (src / "b.bin.zst").write_bytes(zstd_tool(payload[:1000]) + zstd_tool(payload[1000:]))
    (src / "c.bin.zst").write_bytes((src / "a.bin.zst").read_bytes()[:-9])
    larder_cli("pack", src, "-o", tmp_path / "ds", "--no-shuffle")
    two = larder.Dataset(str(tmp_path / "ds" / "index.larder"), cache="")
    keys = {two.key(i): i for i in range(3)}
    assert two.get(keys["a"], transform="zstd_decompress")["bin"] == payload
    assert two.get(keys["b"], transform="zstd_decompress")["bin"] == payload
    with pytest.raises(larder.LarderError) as e:
        two.get(keys["c"], transform="zstd_decompress")
    assert "zstd" in str(e.value) and "'bin.zst'" in str(e.value)


# ---- wherever it runs, the same bytes ------------------------------------------


def test_daemon_cache_in_process_and_fallback_are_byte_identical(tdata, daemons, monkeypatch):
    index, _ = tdata
    normal, busy, procs = daemons
    here = open_with(index, monkeypatch)
    at_daemon = open_with(index, monkeypatch, normal, cache="")
    at_busy = open_with(index, monkeypatch, busy, cache="")
    for spec in ("jpeg_decode_resize:48", "npy_cast:float16", "zstd_decompress"):
        time.sleep(0.6)  # past the back-off of the busy daemon's last "at the readers"
        fell_back, asked = 0, None
        for i in range(CORRUPT):
            local = here.get(i, transform=spec)
            first = at_daemon.get(i, transform=spec)
            again = at_daemon.get(i, transform=spec)
            began = time.monotonic()
            fallback = at_busy.get(i, transform=spec)
            ended = time.monotonic()
            assert (local["__placement__"], first["__placement__"],
                    again["__placement__"]) == ("local", "daemon", "cached")
            # the busy daemon sends raw bytes and says it leaves transforms to
            # its readers: they are not asked again for 0.5 s, and run here.
            # Within 0.5 s of the last asking (counted from before it, to after
            # this read: never less than the back-off that ran) the reader must
            # not ask; later it may (a slow machine, a sanitizer build)
            if asked is None:
                assert fallback["__placement__"] == "fallback"
            elif ended - asked < 0.45:
                assert fallback["__placement__"] == "local", (spec, i, ended - asked)
            else:
                assert fallback["__placement__"] in ("local", "fallback")
            if fallback["__placement__"] == "fallback":
                fell_back, asked = fell_back + 1, began
            a, b, c, d = map(fields, (local, first, again, fallback))
            assert a.keys() == b.keys() == c.keys() == d.keys()
            for k in a:
                assert same(a[k], b[k]) and same(a[k], c[k]) and same(a[k], d[k]), (spec, i, k)
        assert fell_back >= 1
    stat = larder_cli("stat", "--socket", busy)
    assert "run by the readers" in stat, stat
    stat = larder_cli("stat", "--socket", normal, "--json")
    assert '"placement": "daemon"' in stat and '"cached": ' in stat, stat


def test_result_cache_keeps_parameters_apart(tdata, daemons, monkeypatch):
    index, inputs = tdata
    normal, _, _ = daemons
    ds = open_with(index, monkeypatch, normal, cache="")
    small = ds.get(0, transform="jpeg_decode_resize:32")
    large = ds.get(0, transform="jpeg_decode_resize:40")
    cast = ds.get(0, transform="npy_cast:float32")
    assert small["jpg"].shape == (32, 32, 3) and large["jpg"].shape == (40, 40, 3)
    assert large["__placement__"] == "daemon" and cast["__placement__"] == "daemon"
    again = ds.get(0, transform="jpeg_decode_resize:32")
    assert again["__placement__"] == "cached" and same(again["jpg"], small["jpg"])
    assert same(large["jpg"], jpeg_reference(inputs[0]["jpeg"], 40))
    assert cast["f64"].dtype == np.float32


# ---- failures -----------------------------------------------------------------


def test_a_failing_sample_names_itself_and_the_daemon_goes_on(tdata, daemons, monkeypatch):
    index, _ = tdata
    normal, busy, procs = daemons
    for sock in (None, normal, busy):
        ds = open_with(index, monkeypatch, sock, cache="")
        with pytest.raises(larder.LarderError) as e:
            ds.get(CORRUPT, transform="jpeg_decode_resize:48")
        message = str(e.value)
        assert f"sample {CORRUPT}" in message and "'jpg'" in message, message
        assert "jpeg_decode_resize:48" in message and "JPEG" in message, message
        with pytest.raises(larder.LarderError) as e:
            ds.get(BOMB, transform="zstd_decompress")
        # 200 MB of zeros in 1600 blocks of at most 128 KiB: refused before decompressing
        assert f"sample {BOMB}" in str(e.value) and "may decompress to 2098" in str(e.value)
        assert f"at most {48 << 20}" in str(e.value)
        # the next sample is fine, and the daemon still serves it
        ok = ds.get(0, transform="jpeg_decode_resize:48")
        assert ok["jpg"].shape == (48, 48, 3)
    assert all(p.poll() is None for p in procs)
    stat = larder_cli("stat", "--socket", normal, "--json")
    assert '"errors": 2' in stat, stat


@pytest.mark.parametrize("spec, code, words", [
    ("jpeg_decode_resize:0", larder.EUSAGE, "1 to 4096"),
    ("jpeg_decode_resize:abc", -1012, "side N"),
    ("jpeg_decode_resize:99999", -1012, "side N"),
    ("jpeg_decode_resize", -1012, "side N"),
    ("npy_cast:int3", -1012, "float16, float32 or float64"),
    ("zstd_decompress:9", -1012, "no parameters"),
    ("no_such_transform", larder.ENOTFOUND, "no transform named"),
    ("Bad-Name", -1012, "a-z, 0-9 and _"),
    ("x" * 300, -1012, "at most 255"),
    ("jpeg_decode_resize:2\x01", -1012, "printable"),
])
def test_bad_specs_are_refused_with_a_clear_error(tdata, no_daemon, spec, code, words):
    index, _ = tdata
    ds = larder.Dataset(index, cache="")
    with pytest.raises(larder.LarderError) as e:
        ds.get(0, transform=spec)
    assert e.value.code == code and words in str(e.value), str(e.value)
    with pytest.raises(larder.LarderError):
        larder.transform.check_spec(spec)


def test_a_transform_that_applies_to_no_field(tmp_path, no_daemon, larder_bin):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_bytes(b"hello")
    larder_cli("pack", tmp_path / "src", "-o", tmp_path / "ds")
    ds = larder.Dataset(str(tmp_path / "ds" / "index.larder"), cache="")
    with pytest.raises(larder.LarderError) as e:
        ds.get(0, transform="jpeg_decode_resize:8")
    assert "applies to none of its 1 fields" in str(e.value)


# ---- loadable transforms ---------------------------------------------------------

PLUGIN = r"""
#include <larder.h>
#include <stdio.h>
#include <string.h>
static int parse(const char *params, void *state, char *canonical, char *error, size_t size)
{
    unsigned add = 0;
    if (sscanf(params, "%u", &add) != 1 || add > 255) {
        snprintf(error, size, "want a number 0-255");
        return LARDER_EUSAGE;
    }
    memcpy(state, &add, sizeof add);
    snprintf(canonical, LARDER_TRANSFORM_MAX_SPEC, "%u", add);
    return 0;
}
static int applies(const void *state, const larder_field_info *f)
{
    (void)state;
    return strcmp(f->name, "jpg") == 0;
}
static int64_t bound(const void *state, const larder_field_info *f, const void *data, char *e,
                     size_t n)
{
    (void)state, (void)data, (void)e, (void)n;
    return (int64_t)f->length;
}
static int64_t run(const void *state, const larder_field_info *f, const void *data, void *out,
                   size_t capacity, larder_field_info *result, char *name, char *e, size_t n)
{
    unsigned add;
    memcpy(&add, state, sizeof add);
    (void)capacity, (void)e, (void)n;
    const unsigned char *in = data;
    unsigned char *o = out;
    for (uint64_t i = 0; i < f->length; i++)
        o[i] = (unsigned char)(in[i] + add * VERSION);
    result->dtype = LARDER_DTYPE_U8;
    result->ndim = 1;
    result->shape[0] = f->length;
    snprintf(name, LARDER_TRANSFORM_MAX_NAME, "shifted");
    return (int64_t)f->length;
}
static const larder_transform_ops ops = {LARDER_TRANSFORM_ABI, "shift_bytes", VERSION, parse,
                                         applies, bound, run};
const larder_transform_ops *larder_transform_entry(uint32_t abi)
{
    return abi == LARDER_TRANSFORM_ABI ? &ops : NULL;
}
"""


def build_plugin(directory, version):
    directory.mkdir()
    source = directory / "shift.c"
    source.write_text(PLUGIN)
    include = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "include")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-DVERSION={version}", "-I", include,
                    "-o", str(directory / "shift.so"), str(source)], check=True)
    return str(directory)


def test_loadable_transform_in_process_in_the_daemon_and_at_another_version(
        tdata, tmp_path, monkeypatch):
    if not shutil.which("cc"):
        pytest.skip("no C compiler")
    index, inputs = tdata
    v1 = build_plugin(tmp_path / "v1", 1)
    v2 = build_plugin(tmp_path / "v2", 2)
    assert larder.transform.load_dir(v1) == 1
    assert larder.transform.check_spec("shift_bytes:3") == 1
    with pytest.raises(larder.LarderError) as e:  # a name taken
        larder.transform.load_dir(v1)
    assert "loaded already" in str(e.value)
    expected = (np.frombuffer(inputs[0]["jpeg"], np.uint8) + np.uint8(3)).astype(np.uint8)
    here = open_with(index, monkeypatch).get(0, transform="shift_bytes:3")
    assert here["__placement__"] == "local" and same(here["shifted"], expected)
    procs = []
    try:
        p1, same_version = start_daemon(tmp_path, "v1", "--transform-dir", v1)
        procs.append(p1)
        p2, other_version = start_daemon(tmp_path, "v2", "--transform-dir", v2)
        procs.append(p2)
        p3, without = start_daemon(tmp_path, "none")
        procs.append(p3)
        got = open_with(index, monkeypatch, same_version).get(0, transform="shift_bytes:3")
        assert got["__placement__"] == "daemon" and same(got["shifted"], expected)
        # the daemon's version 2 gives other bytes: it must not answer them
        for sock in (other_version, without):
            got = open_with(index, monkeypatch, sock).get(0, transform="shift_bytes:3")
            assert got["__placement__"] == "fallback" and same(got["shifted"], expected)
        assert '"raw_unknown": 1' in larder_cli("stat", "--socket", other_version, "--json")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "junk.so").write_bytes(b"not an ELF file")
    with pytest.raises(larder.LarderError) as e:
        larder.transform.load_dir(str(bad))
    assert "junk.so" in str(e.value)


# ---- PyTorch ---------------------------------------------------------------------


def pick_image(sample):
    return {"jpg": sample["jpg"], "__index__": sample["__index__"],
            "placement": sample["__placement__"]}


def test_torch_iterable_dataset_yields_transformed_arrays(tdata, daemons, monkeypatch):
    torch = pytest.importorskip("torch")
    import larder.torch as lt

    index, inputs = tdata
    normal, _, _ = daemons
    monkeypatch.setenv("LARDER_SOCKET", normal)
    ds = lt.IterableDataset(index, cache="", batch_size=2, shuffle=False,
                            transform="jpeg_decode_resize:24", deny=[CORRUPT, BOMB],
                            prefetch=0, decode=pick_image)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=0)
    seen = 0
    for batch in loader:
        assert set(batch["placement"]) <= {"daemon", "cached"}, batch["placement"]
        assert batch["jpg"].shape == (2, 24, 24, 3) and batch["jpg"].dtype == torch.uint8
        for k, i in enumerate(batch["__index__"].tolist()):
            assert batch["jpg"][k].numpy().tobytes() == jpeg_reference(
                inputs[i]["jpeg"], 24).tobytes()
            seen += 1
    assert seen == 6


def test_default_budget_is_what_a_transform_costs_here(tdata, daemons, monkeypatch):
    """Without a budget, a fresh process runs its first transform itself (to
    know its cost), then asks the daemon with that as its budget."""
    index, _ = tdata
    normal, _, _ = daemons
    script = ("import larder; ds = larder.Dataset(%r, cache='');"
              "print([ds.get(i, transform='jpeg_decode_resize:48')['__placement__']"
              " for i in range(3)])" % index)
    env = {**os.environ, "LARDER_SOCKET": normal}
    env.pop("LARDER_TRANSFORM_BUDGET_MS", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "['local', 'daemon', 'daemon']", out
    stat = larder_cli("stat", "--socket", normal, "--json")
    budget = int(stat.split('"reader_budget_us": ')[1].split(",")[0])
    assert 0 < budget < 1000000, stat


def test_default_budget_is_the_step_budget(tdata, daemons, monkeypatch):
    """Without a budget, a reader tells the daemon its step budget: the
    most transformed reads it had in flight at once lately times what one
    costs it (docs/transforms.md, "Placement").  One read at a time, then
    eight at once: the second budget is the first times that peak."""
    index, _ = tdata
    normal, _, _ = daemons
    script = f"""
import json, subprocess, larder
ds = larder.Dataset({index!r}, cache="")
spec = "jpeg_decode_resize:256"
def budget():
    out = subprocess.run([{LARDER!r}, "stat", "--socket", {normal!r}, "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["transforms"]["reader_budget_us"]
first = ds.get(0, transform=spec)["__placement__"]   # here: what one costs
alone = ds.get(1, transform=spec)["__placement__"]   # the daemon, 1 in flight
one = budget()
many = ds.get_many([0, 1, 2, 3, 4, 5, 0, 1], transform=spec)
print(json.dumps([first, alone, one, budget(), [s["__placement__"] for s in many]]))
"""
    env = {**os.environ, "LARDER_SOCKET": normal}
    env.pop("LARDER_TRANSFORM_BUDGET_MS", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout
    first, alone, one, eight, placements = json.loads(out)
    assert (first, alone) == ("local", "daemon"), out
    # what one costs moves only with transforms run here (a shed one, on a
    # busy machine), by an eighth of the difference each: the budget is
    # about a whole multiple of the first, between 2 (some overlapped) and 8
    assert one > 0 and 1.5 * one <= eight <= 9 * one, out
    assert placements.count("local") == 0, out


def test_fallback_with_the_bytes_in_the_node_cache(tdata, daemons, monkeypatch):
    """A reader sharing the daemon's node cache says it holds the sample:
    the busy daemon answers "run it yourself" without the bytes, and the
    reader reads them from the cache; the same result again."""
    index, _ = tdata
    _, busy, _ = daemons
    node_cache = os.path.join(os.path.dirname(busy), "busy-cache")
    expected = open_with(index, monkeypatch).get(1, transform="jpeg_decode_resize:48")
    ds = open_with(index, monkeypatch, busy, cache=node_cache)
    for _ in range(2):  # the first fills the node cache, the second finds it there
        time.sleep(0.6)  # past the back-off
        got = ds.get(1, transform="jpeg_decode_resize:48")
        assert got["__placement__"] == "fallback"
        assert same(got["jpg"], expected["jpg"]) and same(got["f64"], expected["f64"])
    stat = larder_cli("stat", "--socket", busy, "--json")
    assert '"raw_reader": 2' in stat, stat


def test_get_many_keeps_the_order(tdata, no_daemon):
    index, inputs = tdata
    ds = larder.Dataset(index, cache="")
    ids = [4, 0, 5, 2, 1, 3, 0]
    many = ds.get_many(ids, transform="jpeg_decode_resize:16")
    assert [s["__index__"] for s in many] == ids
    for i, s in zip(ids, many):
        assert same(s["jpg"], jpeg_reference(inputs[i]["jpeg"], 16))



def _fnv1a64(text):
    """FNV-1a's loop with 64-bit FNV's prime and the reader's offset basis
    (1469598103934665603, src/lib/transform_read.c): only to pick two
    socket names that fell in one bucket of the reader's old table."""
    h = 1469598103934665603
    for b in text.encode():
        h = ((h ^ b) * 1099511628211) % (1 << 64)
    return h


def test_one_daemons_back_off_never_holds_back_another(tdata, tmp_path, monkeypatch):
    """A daemon that leaves transforms to its readers is not asked for a
    while; another daemon whose address falls in the same one of 64
    buckets (the reader kept one back-off per bucket) is still asked."""
    index, _ = tdata
    busy_name = "busy"
    bucket = _fnv1a64(str(tmp_path / f"{busy_name}.sock")) % 64
    other = next(f"normal{i}" for i in range(100000)
                 if _fnv1a64(str(tmp_path / f"normal{i}.sock")) % 64 == bucket)
    procs = []
    try:
        p1, busy = start_daemon(tmp_path, busy_name, "--transform-cpu-limit", "0")
        procs.append(p1)
        p2, normal = start_daemon(tmp_path, other)
        procs.append(p2)
        assert busy.endswith(".sock") and normal.endswith(".sock")
        at_busy = open_with(index, monkeypatch, busy, cache="")
        at_normal = open_with(index, monkeypatch, normal, cache="")
        spec = "npy_cast:float16"
        open_with(index, monkeypatch).get(0, transform=spec)  # a first one runs here
        assert at_busy.get(0, transform=spec)["__placement__"] == "fallback"
        # within the busy daemon's 0.5 s back-off
        got = [at_normal.get(1, transform=spec)["__placement__"],
               at_busy.get(1, transform=spec)["__placement__"]]
        assert got == ["daemon", "local"], got
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)
