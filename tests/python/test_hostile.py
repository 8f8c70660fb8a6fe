"""Hostile indexes and bad bytes, from Python (issue 9, "Trust").

The indexes come from tests/tools/craft_index.py, a writer of the index
format built from docs/format.md alone, never from larder: the expected
errors are the contract of issue 9, not what the code happens to do.

- shard names that leave the index's directory, and shard sizes above
  2^56, are refused when the dataset is opened (LarderError with .code
  larder.EBADINDEX, naming the shard); trust_index=True lifts the name
  check only;
- a sample past its shard's end, a field past its sample: EBADINDEX when
  that sample is used, naming it; the other samples read;
- a duplicate key: EDUPKEY naming the key when it is looked up;
- origin bytes that went bad: ECHECKSUM naming the sample, nothing of it
  cached; staged blocks zeroed under their bits (a power loss): the right
  bytes or a clean error, never the zeros.
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

import larder

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
import craft_index  # noqa: E402  (tests/tools, not a package)

LARDER = os.environ.get("LARDER") or os.path.join(REPO, "build", "larder")

NAME_VARIANTS = ["abs-path", "dotdot", "inner-dotdot", "file-url", "http-url", "https-url",
                 "etc-passwd"]
TRUSTED_READS = ["abs-path", "dotdot", "file-url"]  # names that still reach the real shard
SIZE_VARIANTS = ["size-2p63", "size-2p64-1", "size-2p64-4096", "size-2p56+64k"]
SAMPLE_VARIANTS = ["sample-past-end", "sample-offset-wraps"]
FIELD_VARIANTS = ["field-past-sample", "field-offset-wraps"]


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """A good dataset (one tar, one flat shard), every variant of its index
    beside it, and each variant's expectations: name -> dict."""
    root = str(tmp_path_factory.mktemp("crafted") / "ds")
    craft_index.make(root, seed=21)
    out = {"root": root}
    for name in craft_index.VARIANTS:
        if name != "stolen-id":
            out[name] = craft_index.variant(root, name)
    return out


def expected(crafted, key):
    with open(os.path.join(crafted["root"], "expect", key), "rb") as f:
        return f.read()


def assert_error(excinfo, code, *needles):
    e = excinfo.value
    assert e.code == code, f"code {e.code} ({e}), want {code} ({larder.strerror(code)})"
    for needle in needles:
        alternatives = needle.split("|")
        assert any(a in str(e) for a in alternatives), f"{needle!r} not in {str(e)!r}"


def test_the_crafted_index_is_a_real_index(crafted):
    """The writer agrees with larder's reader (a cross-check of the test
    tool, not of larder): the good index verifies and reads."""
    if not os.access(LARDER, os.X_OK):
        pytest.skip(f"larder CLI not built: {LARDER}")
    index = os.path.join(crafted["root"], "index.larder")
    result = subprocess.run([LARDER, "verify", index], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    ds = larder.Dataset(index, cache="")
    layout = json.load(open(os.path.join(crafted["root"], "layout.json")))
    assert ds.info.dataset_id == layout["dataset_id"]
    for s in layout["samples"]:
        assert ds.read(ds.index_of(s["key"])) == expected(crafted, s["key"])


# ---- shard names and sizes: refused at open ---------------------------------


@pytest.mark.parametrize("name", NAME_VARIANTS)
@pytest.mark.parametrize("with_cache", [False, True])
def test_shard_names_outside_the_index_are_refused(crafted, tmp_path, name, with_cache):
    v = crafted[name]
    cache = str(tmp_path / "cache") if with_cache else ""
    with pytest.raises(larder.LarderError) as excinfo:
        larder.Dataset(v["path"], cache=cache)
    assert_error(excinfo, larder.EBADINDEX, f"shard {v['shard']}", v["name"],
                 "index file is corrupt or not an index")


@pytest.mark.parametrize("name", ["subdir", "dots-in-name"])
def test_names_below_the_index_are_taken(crafted, tmp_path, name):
    v = crafted[name]
    ds = larder.Dataset(v["path"], cache=str(tmp_path / "cache"))
    assert ds.read(ds.index_of(v["good_key"])) == expected(crafted, v["good_key"])


@pytest.mark.parametrize("name", NAME_VARIANTS)
def test_trust_index_takes_the_names_as_they_are(crafted, tmp_path, name):
    v = crafted[name]
    ds = larder.Dataset(v["path"], cache=str(tmp_path / "cache"), trust_index=True)
    assert len(ds) == len(json.load(open(os.path.join(crafted["root"], "layout.json")))["samples"])
    assert ds.read(ds.index_of(v["good_key"])) == expected(crafted, v["good_key"])
    if name in TRUSTED_READS:
        assert ds.read(ds.index_of(v["trust_key"])) == expected(crafted, v["trust_key"])


_CHILD = r"""
import json, resource, signal, sys
import larder
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))
if not sys.argv[3]:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
try:
    trust = {"trust_index": True} if sys.argv[4] == "1" else {}
    ds = larder.Dataset(sys.argv[1], cache=sys.argv[2], **trust)
    for i in range(len(ds)):
        ds[i]
    print(json.dumps({"opened": True}))
except larder.LarderError as e:
    print(json.dumps({"code": e.code, "message": str(e)}))
except Exception as e:
    print(json.dumps({"other": f"{type(e).__name__}: {e}"}))
"""


@pytest.mark.parametrize("name", SIZE_VARIANTS)
@pytest.mark.parametrize("trust", [False, True])
def test_absurd_shard_sizes_are_refused(crafted, tmp_path, name, trust):
    """In a child process with 1 GiB files and 4 GiB of memory at most: a
    reader that believes a 2^56-byte shard would otherwise size a block
    bitmap of 128 GiB."""
    v = crafted[name]
    sanitized = "libasan" in os.environ.get("LD_PRELOAD", "")
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, v["path"], str(tmp_path / "cache"),
         "1" if sanitized else "", "1" if trust else "0"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode >= 0, (
        f"killed by {signal.Signals(-result.returncode).name}: {result.stderr[-2000:]}")
    assert result.returncode == 0, result.stderr[-2000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer.get("code") == larder.EBADINDEX, answer
    assert "shard 0" in answer["message"], answer


# ---- records that run past their container -------------------------------------


@pytest.mark.parametrize("name", SAMPLE_VARIANTS)
def test_a_sample_past_its_shard_fails_alone(crafted, tmp_path, name):
    v = crafted[name]
    ds = larder.Dataset(v["path"], cache=str(tmp_path / "cache"))
    bad = v["bad_sample"]
    for use in (lambda: ds[bad], lambda: ds.read(bad), lambda: ds.sample_info(bad)):
        with pytest.raises(larder.LarderError) as excinfo:
            use()
        assert_error(excinfo, larder.EBADINDEX, f"sample {bad}|{v['bad_key']}")
    good = ds.index_of(v["good_key"])
    # with a cache, the fill engine must know which bytes are whose: it
    # refuses the index, naming the bad record; without one, others read
    with pytest.raises(larder.LarderError) as excinfo:
        ds.read(good)
    assert_error(excinfo, larder.EBADINDEX, f"sample {bad}")
    uncached = larder.Dataset(v["path"], cache="")
    assert uncached.read(good) == expected(crafted, v["good_key"])


@pytest.mark.parametrize("name", FIELD_VARIANTS)
def test_a_field_past_its_sample_fails_alone(crafted, tmp_path, name):
    v = crafted[name]
    ds = larder.Dataset(v["path"], cache=str(tmp_path / "cache"))
    bad = v["bad_sample"]
    for use in (lambda: ds[bad], lambda: ds.fields(bad)):
        with pytest.raises(larder.LarderError) as excinfo:
            use()
        assert_error(excinfo, larder.EBADINDEX, f"sample {bad}|{v['bad_key']}",
                     f"field {v['bad_field_number']}|'{v['bad_field']}'")
    good = ds.index_of(v["good_key"])
    assert ds.read(good) == expected(crafted, v["good_key"])
    assert ds[good]["bin"] == expected(crafted, v["good_key"] + ".bin")


def test_a_duplicate_key_is_an_error_naming_it(crafted, tmp_path):
    v = crafted["duplicate-key"]
    ds = larder.Dataset(v["path"], cache=str(tmp_path / "cache"))
    with pytest.raises(larder.LarderError) as excinfo:
        ds.index_of(v["dup_key"])
    assert_error(excinfo, larder.EDUPKEY, v["dup_key"])
    assert ds.read(ds.index_of(v["good_key"])) == expected(crafted, v["good_key"])


def test_overlapping_samples_refuse_a_cache_and_leave_the_others_readable(crafted, tmp_path):
    v = crafted["overlap"]
    ds = larder.Dataset(v["path"], cache=str(tmp_path / "cache"))
    good = ds.index_of(v["good_key"])
    with pytest.raises(larder.LarderError) as excinfo:  # a byte with two checksums
        ds.read(good)
    assert_error(excinfo, larder.EBADINDEX, "overlap")
    uncached = larder.Dataset(v["path"], cache="")
    assert uncached.read(good) == expected(crafted, v["good_key"])


# ---- bad bytes -------------------------------------------------------------------


@pytest.fixture
def small_blocks(tmp_path):
    """A dataset in 4 KiB blocks, its layout, and the flat shard's path."""
    root = str(tmp_path / "ds")
    layout = craft_index.make(root, seed=8, per_shard=8, sample_size=24000, block_size=4096)
    return root, layout, os.path.join(root, layout["shards"][-1]["name"])


def _blocks(layout, s):
    bs = layout["block_size"]
    return {(s["shard"], b) for b in range(s["offset"] // bs, (s["offset"] + s["length"] - 1) // bs + 1)}


def test_corrupt_origin_bytes_are_a_checksum_error_and_not_cached(small_blocks, tmp_path):
    root, layout, shard = small_blocks
    samples = layout["samples"]
    flat = len(layout["shards"]) - 1
    bad = max((i for i, s in enumerate(samples) if s["shard"] == flat),
              key=lambda i: samples[i]["length"])
    s = samples[bad]
    with open(shard, "r+b") as f:
        f.seek(s["offset"] + s["length"] // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    ds = larder.Dataset(os.path.join(root, "index.larder"), cache=str(tmp_path / "cache"))
    with pytest.raises(larder.LarderError) as excinfo:
        ds.read(bad)
    assert_error(excinfo, larder.ECHECKSUM, f"sample {bad}|{s['key']}", "checksum mismatch")
    assert ds.stats()["resident_bytes"] == 0, "a sample that failed its checksum was staged"
    for i, other in enumerate(samples):
        if i != bad:
            assert ds.read(i) == expected({"root": root}, other["key"])
    good_blocks = set().union(*(_blocks(layout, o) for i, o in enumerate(samples) if i != bad))
    assert ds.stats()["resident_bytes"] <= len(good_blocks) * layout["block_size"]
    with pytest.raises(larder.LarderError) as excinfo:  # and again, now that neighbours are staged
        ds.read(bad)
    assert excinfo.value.code == larder.ECHECKSUM


def test_a_power_loss_never_serves_zeros(small_blocks, tmp_path):
    """Blocks staged, then their data zeroed (one punched out, one written
    over) while the bitmap still says resident: a new reader gets the
    right bytes (refetched) or a clean error."""
    root, layout, shard = small_blocks
    index, cache = os.path.join(root, "index.larder"), str(tmp_path / "cache")
    ds = larder.Dataset(index, cache=cache)
    for i in range(len(ds)):
        ds.read(i)
    dataset_id = ds.info.dataset_id
    ds.close()
    bs, flat = layout["block_size"], len(layout["shards"]) - 1
    data = os.path.join(cache, dataset_id, f"{flat:06d}.data")
    assert os.path.exists(data), os.listdir(os.path.join(cache, dataset_id))
    victims = [(i, s) for i, s in enumerate(layout["samples"])
               if s["shard"] == flat and s["length"] > 3 * bs][:2]
    fd = os.open(data, os.O_WRONLY)
    try:
        for _, s in victims:
            at = (s["offset"] + s["length"] // 2) // bs * bs
            if shutil.which("fallocate"):
                subprocess.run(["fallocate", "--punch-hole", "--offset", str(at), "--length",
                                str(bs), data], check=True)
            os.pwrite(fd, bytes(bs), at + bs)
    finally:
        os.close(fd)
    ds = larder.Dataset(index, cache=cache)
    for i, s in victims:
        try:
            got = ds.read(i)
        except larder.LarderError:
            continue  # clean
        assert got == expected({"root": root}, s["key"]), f"sample {i} read wrong after the loss"
