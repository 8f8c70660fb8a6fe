"""larder.hint, larder.replicate and larder.hints through a real larderd.

The daemon runs as a process of its own with a node cache and a socket;
after a hint that waits, the hinted samples are in the daemon's cache:
a reader of that cache gets their bytes (checked against the tree
fixture's content) with no origin request of its own.
"""

import os
import subprocess
import time

import pytest

import larder
from conftest import LARDER, tree_content

LARDERD = os.path.join(os.path.dirname(LARDER), "larderd")


@pytest.fixture
def daemon(tmp_path):
    if not os.access(LARDERD, os.X_OK):
        pytest.skip(f"larderd not built: {LARDERD}")
    cache, sock = tmp_path / "cache", tmp_path / "sock"
    log = open(tmp_path / "daemon.log", "w")
    proc = subprocess.Popen([LARDERD, "--cache", str(cache), "--socket", str(sock)], stderr=log)
    for _ in range(400):  # answering, not only bound: the file appears before listen()
        if sock.exists():
            try:
                larder.hints(socket=str(sock))
                break
            except larder.LarderError:
                pass
        time.sleep(0.025)
    else:
        proc.kill()
        raise AssertionError("larderd did not start: " + (tmp_path / "daemon.log").read_text())
    yield str(sock), str(cache)
    proc.terminate()
    proc.wait(timeout=20)
    log.close()


def test_hint_stages_and_pins(daemon, tree_index):
    sock, cache = daemon
    keys = ["sample00007", "sample00042"]
    result = larder.hint(tree_index, keys=keys, ttl=60, wait=True, socket=sock)
    assert result.nodes == 1 and result.failed == 0 and result.done and not result.partial
    assert result.samples == 2
    ds = larder.Dataset(tree_index, cache=cache)
    # the bytes asked: the two samples' ranges, as the index says
    assert result.bytes == sum(ds.sample_info(ds.index_of(k)).length for k in keys)
    # the hinted samples are in the daemon's cache: read them from it alone
    before = ds.stats()["origin_requests"]
    for key in keys:
        sample = ds[ds.index_of(key)]
        assert bytes(sample["txt"]) == tree_content(int(key[len("sample"):]))
    assert ds.stats()["origin_requests"] == before, "a hinted sample was not staged"
    listed = larder.hints(socket=sock)
    assert len(listed) == 1 and listed[0]["samples"] == 2
    assert 0 < listed[0]["ttl_left_ms"] <= 60000
    assert listed[0]["url"] == os.path.realpath(tree_index)


def test_hint_errors(daemon, tree_index):
    sock, _ = daemon
    with pytest.raises(larder.LarderError) as e:
        larder.hint(tree_index, keys=["sample00001", "no-such-key"], socket=sock)
    assert e.value.code == larder.ENOTFOUND and "no-such-key" in str(e.value)
    with pytest.raises(larder.LarderError) as e:
        larder.replicate(tree_index, to="127.0.0.1:1", socket=sock)
    assert e.value.code == larder.EUSAGE and "not a member" in str(e.value)
    with pytest.raises(ValueError):
        larder.hint(tree_index, ttl=0, socket=sock)
    with pytest.raises(ValueError):
        larder.hint(tree_index, replicas=2, all_nodes=True, socket=sock)
    assert larder.hints(socket=sock) == []


def test_many_keys_go_in_batches(daemon, tree_index):
    """1100 keys (each sample 11 times) do not fit one HINT (1024 keys at
    most): the library sends two and sums their answers."""
    sock, _ = daemon
    keys = [f"sample{i:05d}" for i in range(100)] * 11
    result = larder.hint(tree_index, keys=keys, ttl=60, wait=True, socket=sock)
    assert result.samples == 1100 and result.nodes == 1 and result.done
    assert len(larder.hints(socket=sock)) == 2


def test_hint_by_published_name(daemon, tmp_path):
    """larder.hint(name=...) on a name published through the same daemon:
    the daemon resolves it to the publication's index and stages all of
    its files; a name never published is ENOTFOUND (at once: a daemon
    without members has nobody to learn it from)."""
    sock, cache = daemon
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    files = {"a.bin": os.urandom(300001), "sub/b.bin": os.urandom(70000), "c.json": b"{}"}
    for rel, data in files.items():
        (ckpt / rel).write_bytes(data)
    larder.publish(str(ckpt), "jobs/ckpt-latest", socket=sock)
    result = larder.hint(name="jobs/ckpt-latest", ttl=60, wait=True, socket=sock)
    assert result.nodes == 1 and result.done and not result.partial
    assert result.samples == len(files)
    assert result.bytes == sum(len(d) for d in files.values())
    listed = larder.hints(socket=sock)
    assert len(listed) == 1 and listed[0]["url"] == os.path.join(os.path.realpath(ckpt), "index.larder")
    start = time.monotonic()
    with pytest.raises(larder.LarderError) as e:
        larder.hint(name="jobs/never-published", socket=sock)
    assert e.value.code == larder.ENOTFOUND and "jobs/never-published" in str(e.value)
    assert time.monotonic() - start < 10
    with pytest.raises(ValueError):
        larder.hint(socket=sock)
    with pytest.raises(ValueError):
        larder.replicate(name="jobs/ckpt-latest", socket=sock)
