"""Eviction by next use, as a user meets it: larder.torch.IterableDataset
with cache_size at half the dataset, 3 epochs over an HTTP origin that
counts the bytes it sends (tests/tools/range_origin.py).  With the clock
(LARDER_EVICT=clock, the policy before) every epoch after the first
fetches about the whole dataset again; by next use, about the half that
does not fit (the offline optimum is exactly half: the arithmetic of a
cache holding half the blocks).
"""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, larder_cli

torch = pytest.importorskip("torch")
import larder.torch  # noqa: E402

SAMPLES, SIZE, BATCH = 240, 20000, 16


@pytest.fixture
def origin(tmp_path, larder_bin):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(SAMPLES):
        (src / f"s{i:04d}.bin").write_bytes(bytes((i * 7 + k) % 251 for k in range(SIZE)))
    larder_cli("pack", src, "-o", tmp_path / "www", "--shard-size", "1M")
    log = tmp_path / "requests.jsonl"
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "tools",
                                                           "range_origin.py"),
                               str(tmp_path / "www"), str(port_file), str(log), "0", ".none"])
    for _ in range(200):
        if port_file.exists():
            break
        time.sleep(0.05)
    shards = sum(os.path.getsize(tmp_path / "www" / n) for n in os.listdir(tmp_path / "www")
                 if n != "index.larder")
    yield f"http://127.0.0.1:{port_file.read_text()}/index.larder", log, shards
    server.terminate()
    server.wait()


def shard_bytes(log):
    """Bytes of shards the origin has sent so far."""
    if not os.path.exists(log):
        return 0
    total = 0
    with open(log) as f:
        for line in f:
            r = json.loads(line)
            if r["body"] and not r["path"].endswith("index.larder"):
                total += r["hi"] - r["lo"] + 1
    return total


def run_epochs(url, log, shards, cache):
    """Origin bytes of each of 3 epochs, as multiples of the shards' size
    (in this process: LARDER_EVICT is what it was started with)."""
    ds = larder.torch.IterableDataset(url, cache=str(cache), cache_size=shards // 2,
                                      block_size=4096, batch_size=BATCH, seed=5,
                                      yield_batches=True, prefetch=2)
    loader = larder.torch.DataLoader(ds, num_workers=2, batch_size=None)
    fetched = []
    for epoch in range(3):
        ds.set_epoch(epoch)
        before = shard_bytes(log)
        seen = sum(len(batch) for batch in loader)
        assert seen == SAMPLES // BATCH * BATCH
        fetched.append((shard_bytes(log) - before) / shards)
    ds.dataset.close()
    return fetched


def epochs_of(url, log, shards, cache, policy):
    """run_epochs in a process of its own started with LARDER_EVICT=policy,
    so that its DataLoader workers (forked, or from a fork server) have it."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), url, str(log), str(shards),
                          str(cache)], env={**os.environ, "LARDER_EVICT": policy},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_next_use_fetches_half_of_what_the_clock_does(origin, tmp_path):
    url, log, shards = origin
    clock = epochs_of(url, log, shards, tmp_path / "cache-clock", "clock")
    plan = epochs_of(url, log, shards, tmp_path / "cache-plan", "plan")
    print("origin bytes per epoch, clock", clock, "next use", plan)
    # the first epoch reads everything once either way
    assert 0.95 < plan[0] < 1.15, plan
    # later epochs: what does not fit, about half; the clock about all of it
    for e in (1, 2):
        assert plan[e] <= 0.62, plan
        assert clock[e] >= 0.75, clock
        assert plan[e] < 0.7 * clock[e], (plan, clock)


if __name__ == "__main__":
    if "libasan" in os.environ.get("LD_PRELOAD", ""):  # as conftest.py does, for the same reason
        import multiprocessing

        multiprocessing.set_start_method("forkserver", force=True)
    print(json.dumps(run_epochs(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])))
