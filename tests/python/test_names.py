"""larder.publish / larder.resolve / larder.Dataset("larder:NAME") on two
real larderd daemons over loopback (issue 12, item 5): a resolve started
before the publication waits for it; the files read on the other node are
the originals, byte for byte (a torch checkpoint loads through them); a
name never published fails after its timeout with ENOTFOUND; bad names
are refused before anything is sent.
"""

import io
import os
import subprocess
import sys
import threading
import time

import pytest

import larder
from conftest import LARDER

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from reserved_ports import Reservation  # noqa: E402

LARDERD = os.path.join(os.path.dirname(LARDER), "larderd")


@pytest.fixture
def cluster(tmp_path):
    """Two daemons (members of one cluster with a secret); their sockets."""
    if not os.access(LARDERD, os.X_OK):
        pytest.skip(f"larderd not built: {LARDERD}")
    ports = Reservation(2)  # never another test's, nor a port in use
    base = ports.base
    members = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
    (tmp_path / "secret").write_text("python-secret\n")
    procs, sockets = [], []
    for n in range(2):
        sock = str(tmp_path / f"sock{n}")
        log = open(tmp_path / f"daemon{n}.log", "wb")
        procs.append(subprocess.Popen(
            [LARDERD, "--cache", str(tmp_path / f"cache{n}"), "--socket", sock,
             "--listen", f"127.0.0.1:{base + n}", "--peers", members,
             "--secret-file", str(tmp_path / "secret")], stderr=log))
        sockets.append(sock)
    # answering, not only bound (the file appears before listen()); a
    # sanitizer build on a loaded machine may take seconds
    for n, sock in enumerate(sockets):
        for _ in range(400):
            if procs[n].poll() is not None:
                break  # exited: its log says why (a port taken, ...)
            try:
                larder.names(socket=sock)
                break
            except larder.LarderError:
                time.sleep(0.05)
        else:
            procs[n].poll()
        if procs[n].returncode is not None or not os.path.exists(sock):
            for p in procs:
                p.kill()
            log = (tmp_path / f"daemon{n}.log").read_text(errors="replace")[-2000:]
            pytest.fail(f"daemon at {sock} did not start: {log}")
    yield sockets
    for p in procs:
        p.terminate()
        p.wait(timeout=10)
    ports.close()


def make_files(root):
    """A small checkpoint: a torch state dict, a 2 MiB blob, a config."""
    torch = pytest.importorskip("torch")
    (root / "model").mkdir(parents=True)
    state = {"weight": torch.arange(1000, dtype=torch.float32).reshape(10, 100),
             "step": torch.tensor(1234)}
    torch.save(state, root / "model" / "state.pt")
    (root / "blob.bin").write_bytes(os.urandom(2 << 20))
    (root / "config.json").write_text('{"lr": 0.1}\n')
    return state


def test_publish_then_read_by_name_on_another_node(cluster, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    state = make_files(tmp_path / "ckpt")
    found = {}

    def early():  # started before the publication: waits for it
        try:
            found["publication"] = larder.lookup("py/ckpt-1", timeout=30, socket=cluster[1])
        except Exception as e:  # noqa: BLE001 - reported below
            found["error"] = e

    waiter = threading.Thread(target=early)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive(), found
    published = larder.publish(tmp_path / "ckpt", "py/ckpt-1", socket=cluster[0])
    waiter.join(30)
    assert "error" not in found, found
    got = found["publication"]
    assert got.name == "py/ckpt-1"
    assert got.dataset_id == published.dataset_id and got.producer == published.producer
    assert got.origin == "" and got.index != published.index  # node 1's own copy
    assert larder.resolve("larder:py/ckpt-1", socket=cluster[1]) == got.index

    monkeypatch.setenv("LARDER_SOCKET", cluster[1])
    ds = larder.Dataset("larder:py/ckpt-1", verify=True)
    assert ds.url == got.index and ds.info.dataset_id == published.dataset_id
    keys = sorted(ds.key(i) for i in range(len(ds)))
    assert keys == ["blob.bin", "config.json", "model/state.pt"]
    for key in keys:
        assert ds.read(ds.index_of(key)) == (tmp_path / "ckpt" / key).read_bytes(), key
    loaded = torch.load(io.BytesIO(ds.read(ds.index_of("model/state.pt"))))
    assert torch.equal(loaded["weight"], state["weight"]) and int(loaded["step"]) == 1234
    ds.close()
    # larder.open by the bare name (LARDER_SOCKET set): torch.load streams it
    with larder.open("py/ckpt-1", "model/state.pt") as f:
        loaded = torch.load(f)
    assert torch.equal(loaded["weight"], state["weight"]) and int(loaded["step"]) == 1234
    with larder.open("larder:py/ckpt-1", "blob.bin") as f:
        assert f.read() == (tmp_path / "ckpt" / "blob.bin").read_bytes()
    listed = larder.names(socket=cluster[1])
    assert [n["name"] for n in listed] == ["py/ckpt-1"]
    assert listed[0]["dataset_id"] == published.dataset_id


def test_a_name_never_published_times_out(cluster):
    start = time.monotonic()
    with pytest.raises(larder.LarderError) as caught:
        larder.resolve("py/never", timeout=0.4, socket=cluster[0])
    elapsed = time.monotonic() - start
    assert caught.value.code == larder.ENOTFOUND
    assert "no publication named py/never" in str(caught.value)
    assert 0.35 <= elapsed < 10


@pytest.mark.parametrize("name", ["", "/abs", "a/../b", "a b", "x" * 129, "tab\there"])
def test_bad_names_are_refused(cluster, tmp_path, name):
    with pytest.raises(larder.LarderError) as caught:
        larder.resolve(name, socket=cluster[0])
    assert caught.value.code == larder.EUSAGE
    (tmp_path / "d").mkdir(exist_ok=True)
    (tmp_path / "d" / "f").write_bytes(b"x")
    with pytest.raises(larder.LarderError) as caught:
        larder.publish(tmp_path / "d", name, socket=cluster[0])
    assert caught.value.code == larder.EUSAGE


def test_publishing_a_name_twice_is_refused(cluster, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"first")
    larder.publish(tmp_path / "d", "py/once", socket=cluster[0])
    with pytest.raises(larder.LarderError) as caught:
        larder.publish(tmp_path / "d", "py/once", socket=cluster[0])
    assert caught.value.code == -17  # -EEXIST
    assert "already published" in str(caught.value)


def test_publish_replace_points_the_name_at_new_files(cluster, tmp_path, monkeypatch):
    """replace=True: the name now names the second directory, on the
    producer at once and on the other member once announced."""
    for version in ("v1", "v2"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "f").write_bytes(version.encode() * 1000)
    first = larder.publish(tmp_path / "v1", "py/latest", socket=cluster[0])
    second = larder.publish(tmp_path / "v2", "py/latest", socket=cluster[0], replace=True)
    assert second.dataset_id != first.dataset_id
    assert larder.lookup("py/latest", socket=cluster[0]).dataset_id == second.dataset_id
    deadline = time.monotonic() + 30  # the announcement reaches the other member
    while time.monotonic() < deadline:
        try:
            if larder.lookup("py/latest", timeout=5, socket=cluster[1]).dataset_id == \
                    second.dataset_id:
                break
        except larder.LarderError as e:  # not learned yet (CI once: 5 s under load)
            if e.code != larder.ENOTFOUND:
                raise
        time.sleep(0.05)
    found = larder.lookup("py/latest", socket=cluster[1])
    assert found.dataset_id == second.dataset_id
    monkeypatch.setenv("LARDER_SOCKET", cluster[1])
    with larder.open("larder:py/latest", "f") as f:
        assert f.read() == b"v2" * 1000
