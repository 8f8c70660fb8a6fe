"""larder.torch: the global sequence does not depend on the world size or
the number of DataLoader workers, a run stopped on one world size resumes
exactly on another, every sample comes once per epoch, and
torch.distributed ranks split the same sequence."""

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

import larder
from conftest import ARRAY_DTYPES, PYTHON_DIR, TREE_SAMPLES

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
import larder.torch as lt  # noqa: E402

G = 8  # global batch of most tests: 100 samples give 12 steps, 4 dropped
SEED = 21


def global_steps(index, seed=SEED, epoch=0, global_batch=G, **options):
    """The world-1 sequence, one list of ids per global step."""
    with larder.Plan(index, seed=seed, epoch=epoch, global_batch=global_batch,
                     **options) as plan:
        return [plan.batch(t) for t in range(plan.steps)]


def in_process_batches(ds):
    """Iterate ds in this process; its samples grouped into steps."""
    ids = [sample["__index__"] for sample in ds]
    b = ds.local_batch
    assert len(ids) % b == 0
    return [ids[k:k + b] for k in range(0, len(ids), b)]


def loader_batches(ds, num_workers, ours=True, stop=None, **kwargs):
    """The batches a rank's DataLoader hands out, as lists of ids."""
    if ours:
        loader = lt.DataLoader(ds, num_workers=num_workers, **kwargs)
    else:
        loader = torch.utils.data.DataLoader(ds, batch_size=ds.local_batch,
                                             num_workers=num_workers, **kwargs)
    out = []
    for batch in loader:
        out.append(batch["__index__"].tolist())
        if stop is not None and len(out) == stop:
            break
    return out


def assemble(per_rank):
    """Global steps from each rank's batches: step t is rank 0's t-th batch,
    then rank 1's, ..."""
    lengths = {len(batches) for batches in per_rank}
    assert len(lengths) == 1, f"ranks have different numbers of steps: {lengths}"
    return [sum((batches[t] for batches in per_rank), []) for t in range(lengths.pop())]


def make(index, rank=0, world=1, **kwargs):
    kwargs.setdefault("seed", SEED)
    kwargs.setdefault("batch_size", G)
    return lt.IterableDataset(index, rank=rank, world=world, **kwargs)


@pytest.mark.parametrize("mode", ["global", "locality", "none"])
def test_same_sequence_on_every_world_size(tree_index, mode):
    want = global_steps(tree_index, mode=mode, locality_window=2)
    assert len(want) == TREE_SAMPLES // G
    for world in (1, 2, 4, 8):
        per_rank = [in_process_batches(make(tree_index, r, world, mode=mode,
                                            locality_window=2)) for r in range(world)]
        assert all(len(b) == G // world for batches in per_rank for b in batches)
        assert assemble(per_rank) == want, f"world {world}"


@pytest.mark.parametrize("num_workers", [0, 2, 4])
def test_same_sequence_with_dataloader_workers(tree_index, num_workers):
    want = global_steps(tree_index)
    for world in (1, 2):
        for ours in (True, False):
            per_rank = [loader_batches(make(tree_index, r, world), num_workers, ours)
                        for r in range(world)]
            assert assemble(per_rank) == want, (world, ours)


def test_stop_on_4_resume_on_2_and_8(tree_index):
    want = global_steps(tree_index)
    stop = 5
    first, states = [], []
    for r in range(4):
        ds = make(tree_index, r, 4)
        first.append(loader_batches(ds, num_workers=2, stop=stop))
        states.append(ds.state_dict())
    assert all(s["epoch"] == 0 and s["step"] == stop for s in states)
    assert all(s == states[0] for s in states)
    head = assemble(first)
    assert head == want[:stop]
    for world, workers in ((2, 3), (8, 2)):
        rest = []
        for r in range(world):
            ds = make(tree_index, r, world)
            ds.load_state_dict(states[r % 4])
            ds.set_epoch(0)  # the same epoch: keeps the step
            rest.append(loader_batches(ds, num_workers=workers))
            assert ds.state_dict()["epoch"] == 1 and ds.state_dict()["step"] == 0
        assert head + assemble(rest) == want, f"resume on world {world}"


def test_loader_continues_where_the_last_pass_stopped(tree_index):
    want = global_steps(tree_index)
    ds = make(tree_index)
    loader = lt.DataLoader(ds, num_workers=2)
    head = []
    for batch in loader:  # the workers read ahead; only 3 batches are consumed
        head.append(batch["__index__"].tolist())
        if len(head) == 3:
            break
    assert ds.state_dict()["step"] == 3
    assert head + [b["__index__"].tolist() for b in loader] == want


def test_resume_in_process_mid_epoch(tree_index):
    want = global_steps(tree_index, epoch=3)
    ds = make(tree_index, yield_batches=True)
    ds.set_epoch(3)
    got = []
    for batch in ds:
        got.append([s["__index__"] for s in batch])
        if len(got) == 7:
            break
    state = ds.state_dict()
    assert (state["epoch"], state["step"]) == (3, 7)
    # in the same process the next pass continues where the last stopped
    again = make(tree_index, yield_batches=True)
    again.load_state_dict(state)
    got += [[s["__index__"] for s in batch] for batch in again]
    assert got == want


def test_epochs_advance_and_set_epoch(tree_index):
    ds = make(tree_index)
    assert in_process_batches(ds) == global_steps(tree_index, epoch=0)
    assert (ds.epoch, ds.state_dict()["step"]) == (1, 0)
    ds.set_epoch(1)  # what a training loop calls: nothing to change
    assert in_process_batches(ds) == global_steps(tree_index, epoch=1)
    ds.set_epoch(5)
    assert in_process_batches(ds) == global_steps(tree_index, epoch=5)
    # the loader advances the main process's state as well, with workers
    ds.set_epoch(7)
    loader = lt.DataLoader(ds, num_workers=2)
    assert len(loader) == len(global_steps(tree_index))
    assert [b["__index__"].tolist() for b in loader] == global_steps(tree_index, epoch=7)
    assert [b["__index__"].tolist() for b in loader] == global_steps(tree_index, epoch=8)
    assert loader.state_dict()["epoch"] == 9


def test_state_dict_checks(tree_index):
    ds = make(tree_index)
    state = ds.state_dict()
    assert {"epoch", "step", "seed", "global_batch"} <= set(state)
    with pytest.raises(ValueError):
        make(tree_index, seed=SEED + 1).load_state_dict(state)
    with pytest.raises(ValueError):
        make(tree_index, batch_size=2 * G).load_state_dict(state)
    with pytest.raises(ValueError):
        make(tree_index, shuffle=False).load_state_dict(state)
    other = make(tree_index, seed=SEED + 1)
    other.load_state_dict({**state, "step": 3}, strict=False)
    assert (other.epoch, other.state_dict()["step"]) == (0, 3)
    # the end of an epoch is the start of the next
    ds.load_state_dict({**state, "epoch": 4, "step": ds.steps})
    assert (ds.epoch, ds.state_dict()["step"]) == (5, 0)


def test_every_sample_once_per_epoch(tree_index):
    ds0 = larder.Dataset(tree_index)
    denied = {0, 5, 9, ds0.index_of("sample00042")}
    deny = [0, 5, 9, "sample00042"]
    n = TREE_SAMPLES - len(denied)
    with larder.Plan(ds0, seed=SEED, global_batch=G, deny=deny) as plan:
        order = [plan.sample_at(p) for p in range(n)]
    for drop_last in (True, False):
        seen = []
        for r in range(4):
            ds = make(tree_index, r, 4, deny=deny, drop_last=drop_last)
            seen += [i for batch in loader_batches(ds, num_workers=2) for i in batch]
        if drop_last:
            kept = n - n % G
            assert sorted(seen) == sorted(order[:kept])
            assert len(set(seen)) == len(seen) == kept
        else:
            assert len(seen) == -(-n // G) * G
            assert set(seen) == set(range(TREE_SAMPLES)) - denied
            extra = sorted(seen)
            for i in set(seen):
                extra.remove(i)
            assert sorted(extra) == sorted(order[:len(seen) - n])
        assert not denied & set(seen)


def test_len_and_yield_batches(tree_index):
    ds = make(tree_index, 1, 4)
    steps = TREE_SAMPLES // G
    assert ds.steps == steps and ds.local_batch == 2 and len(ds) == steps * 2
    batched = make(tree_index, 1, 4, yield_batches=True)
    assert len(batched) == steps
    items = list(lt.DataLoader(batched, num_workers=2))
    assert len(items) == steps and all(len(batch) == 2 for batch in items)
    assert [[s["__index__"] for s in batch] for batch in items] == in_process_batches(ds)
    assert len(lt.DataLoader(ds)) == steps


def label(sample):
    return int(sample["cls"])


def test_decode_runs_in_the_workers(tree_index):
    ds = make(tree_index, decode=label)
    labels = [int(x) for batch in lt.DataLoader(ds, num_workers=2) for x in batch]
    plain = larder.Dataset(tree_index)
    want = [int(plain[i]["cls"]) for step in global_steps(tree_index) for i in step]
    assert labels == want


def without_uint64(sample):
    sample = dict(sample)
    del sample["uint64"]  # full-range test values: no torch dtype holds them
    return lt.torch_dtypes(sample)


def test_arrays_collate_into_tensors(array_index):
    # the samples' arrays differ in shape, so batches of one sample
    # (torch 1.13 has no uint16/32/64: torch_dtypes widens them)
    ds = lt.IterableDataset(array_index, batch_size=1, seed=1, decode=without_uint64)
    plain = larder.Dataset(array_index)
    batches = list(lt.DataLoader(ds, num_workers=0))
    assert len(batches) == len(plain)
    wider = {"uint16": "int32", "uint32": "int64", "uint64": "int64"}
    for batch in batches:
        sample = plain[int(batch["__index__"][0])]
        assert batch["__key__"] == [sample["__key__"]]
        assert batch["txt"] == [sample["txt"]]
        assert "uint64" not in batch
        for name in (d for d in ARRAY_DTYPES if d != "uint64"):
            tensor = batch[name][0]
            assert tensor.dtype == getattr(torch, wider.get(name, name)), name
            want = sample[name].astype(wider.get(name, name))
            assert torch.equal(tensor, torch.from_numpy(want)), name
    np = pytest.importorskip("numpy")
    small = lt.torch_dtypes({"a": np.arange(4, dtype=np.uint64), "b": b"x"})
    assert small["a"].dtype == np.int64 and small["b"] == b"x"
    with pytest.raises(ValueError):
        lt.torch_dtypes({"a": np.array([1 << 63], dtype=np.uint64)})


def test_topology_from_environment(tree_index, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    ds = lt.IterableDataset(tree_index, batch_size=G, seed=SEED)
    assert ds.topology() == (0, 1) and ds.local_batch == G
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    assert ds.topology() == (3, 8) and ds.local_batch == 1
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert ds.topology() == (1, 4) and len(ds) == ds.steps * 2
    assert in_process_batches(ds) == [step[2:4] for step in global_steps(tree_index)]
    assert lt.IterableDataset(tree_index, batch_size=G, rank=0, world=2).topology() == (0, 2)
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ValueError):
        ds.topology()
    with pytest.raises(ValueError):
        lt.IterableDataset(tree_index, batch_size=G, rank=2, world=2).topology()


def test_wait_stats_include_the_workers(tree_index):
    ds = make(tree_index, read_ahead=0)
    empty = ds.wait_stats()
    assert empty["count"] == 0
    loader = lt.DataLoader(ds, num_workers=2)
    list(loader)
    stats = ds.wait_stats(threshold=10.0)
    assert set(stats) == {"count", "total", "mean", "p50", "p95", "p99", "max", "over"}
    assert stats["count"] == ds.steps, "every step's wait reached the main process"
    assert 0 < stats["p50"] <= stats["p95"] <= stats["p99"] <= stats["max"]
    assert stats["over"] == 0.0
    assert len(ds.step_waits()) == ds.steps
    assert loader.wait_stats()["count"] == ds.steps
    ds.reset_wait_stats()
    assert ds.wait_stats()["count"] == 0
    in_process_batches(ds)
    assert ds.wait_stats()["count"] == ds.steps


def test_loader_needs_one_step_per_batch(tree_index):
    ds = make(tree_index, 0, 2)
    with pytest.raises(ValueError):
        iter(lt.DataLoader(ds, batch_size=3)).__next__()
    with pytest.raises(TypeError):
        lt.DataLoader(larder.Dataset(tree_index))


def test_spawned_workers(tree_index, tmp_path):
    cache = tmp_path / "cache"
    ds = make(tree_index, 1, 2, cache=cache)
    got = loader_batches(ds, num_workers=2, multiprocessing_context="spawn")
    assert got == [step[4:] for step in global_steps(tree_index)]
    assert ds.wait_stats()["count"] == ds.steps
    stats = larder.Dataset(tree_index, cache=cache).stats()
    # the workers shared the node cache (prefetch fills count as misses too)
    assert stats["misses"] > 0 and stats["hits"] + stats["misses"] >= len(ds)
    assert stats["resident_bytes"] > 0


def free_port():
    """A port for gloo's rendezvous, reserved (tests/tools/reserved_ports.py)
    until the test process ends: port 0's answer is an ephemeral port, which
    an outgoing connection may take before the master binds it."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    from reserved_ports import Reservation
    held_ports.append(Reservation(1))  # closed, it would be free to take
    return held_ports[-1].base


held_ports = []


def test_torch_distributed_gloo(tree_index, tmp_path):
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_worker.py")
    runs = {}
    for world, loader_workers in ((2, 1), (4, 0)):
        port = free_port()
        out = tmp_path / f"world{world}.json"
        procs = []
        for rank in range(world):
            env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                   "RANK": str(rank), "WORLD_SIZE": str(world), "GLOO_SOCKET_IFNAME": "lo",
                   "PYTHONPATH": PYTHON_DIR}
            procs.append(subprocess.Popen(
                [sys.executable, worker, tree_index, str(out), str(loader_workers)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        runs[world] = (out, procs)
    want = global_steps(tree_index)
    for world, (out, procs) in runs.items():
        logs = []
        for p in procs:
            try:
                logs.append(p.communicate(timeout=120)[0])
            except subprocess.TimeoutExpired:
                p.kill()
                logs.append(p.communicate()[0])
        assert all(p.returncode == 0 for p in procs), "\n".join(logs)
        ranks = json.loads(out.read_text())
        assert len(ranks) == world
        assert assemble([r["batches"] for r in ranks]) == want, f"world {world}"
        assert all(r["state"]["epoch"] == 1 and r["state"]["step"] == 0 for r in ranks)
        assert all(r["waits"] == len(want) for r in ranks)


def test_prefetch_stages_ahead(tmp_path, tree_index):
    """With a cache, the C prefetcher stages the reader's next steps: after
    the first step, a reader that pauses between steps finds its samples
    staged (cache hits), and the sequence is the same as without it."""
    import time

    import larder.torch as lt

    def run(prefetch, cache):
        ds = lt.IterableDataset(tree_index, cache=str(cache), block_size=512, seed=5,
                                batch_size=4, read_ahead=0, prefetch=prefetch, rank=0, world=1)
        keys = []
        for i, sample in enumerate(ds):
            keys.append(sample["__key__"])
            if i % 4 == 3:
                time.sleep(0.05)  # "compute": the prefetcher gets ahead
        return keys, ds.dataset.stats()

    with_keys, with_stats = run(8, tmp_path / "c1")
    without_keys, without_stats = run(0, tmp_path / "c2")
    assert with_keys == without_keys
    # without prefetch the reader fills every sample itself; with it, the
    # prefetcher does and the reader mostly hits
    assert with_stats["hits"] > without_stats["hits"]
    assert with_stats["hits"] >= len(with_keys) // 2


@pytest.fixture
def http_tree(tree_index, tmp_path):
    """The tree dataset served over HTTP by tests/tools/faulty_http.py:
    (index URL, a function returning how many requests the index got)."""
    tools = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")
    root = os.path.dirname(os.path.dirname(tree_index))  # .../tree: ds/ holds the dataset
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, os.path.join(tools, "faulty_http.py"), root,
                               str(port_file)])
    try:
        for _ in range(200):
            if port_file.exists():
                break
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port_file.read_text()}"

        def index_reads():
            with urllib.request.urlopen(base + "/__counts") as answer:
                return json.load(answer).get("/ok/ds/index.larder", 0)

        yield base + "/ok/ds/index.larder", index_reads
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("ours", [True, False])
@pytest.mark.parametrize("num_workers", [1, 2])
def test_persistent_workers_follow_set_epoch(tree_index, http_tree, ours, num_workers):
    """set_epoch() between epochs reaches persistent workers (the position
    is in memory shared with them), and they keep their open index: the
    origin sees no index read after the first epoch."""
    url, index_reads = http_tree
    ds = make(url)
    if ours:
        loader = lt.DataLoader(ds, num_workers=num_workers, persistent_workers=True)
    else:
        loader = torch.utils.data.DataLoader(ds, batch_size=ds.local_batch,
                                             num_workers=num_workers, persistent_workers=True)
    opened = index_reads()  # the main process's open
    assert opened > 0
    for epoch in range(3):
        ds.set_epoch(epoch)
        before = index_reads()
        got = [batch["__index__"].tolist() for batch in loader]
        assert got == global_steps(tree_index, epoch=epoch), f"epoch {epoch}"
        if epoch == 0:
            assert index_reads() > before, "the workers opened the index"
        else:
            assert index_reads() == before, f"epoch {epoch} read the index again"
    if ours:
        assert (ds.epoch, ds.state_dict()["step"]) == (3, 0)


def test_persistent_workers_resume_where_the_loader_stopped(tree_index):
    want = global_steps(tree_index)
    ds = make(tree_index)
    loader = lt.DataLoader(ds, num_workers=2, persistent_workers=True)
    head = []
    for batch in loader:
        head.append(batch["__index__"].tolist())
        if len(head) == 5:
            break
    assert ds.state_dict()["step"] == 5
    assert head + [b["__index__"].tolist() for b in loader] == want
    # a state loaded between passes reaches the same workers
    ds.load_state_dict({**ds.state_dict(), "epoch": 4, "step": 7})
    assert [b["__index__"].tolist() for b in loader] == global_steps(tree_index, epoch=4)[7:]
    assert [b["__index__"].tolist() for b in loader] == global_steps(tree_index, epoch=5)


def ids_of(loader, stop=None):
    out = []
    for batch in loader:
        out += batch["__index__"].tolist()
        if stop is not None and len(out) >= stop:
            break
    return out


@pytest.mark.parametrize("global_batch,batch,stop", [(4, 2, 2), (8, 3, 9), (8, 3, 24)])
def test_plain_loader_resumes_mid_step(tree_index, global_batch, batch, stop):
    """A plain DataLoader (num_workers=0) whose batches are smaller than a
    step, stopped after a partial step: the state counts samples, and the
    resumed run repeats and skips nothing."""
    want = [i for step in global_steps(tree_index, global_batch=global_batch) for i in step]
    ds = make(tree_index, batch_size=global_batch)
    head = ids_of(torch.utils.data.DataLoader(ds, batch_size=batch), stop)
    assert head == want[:stop]
    state = ds.state_dict()
    assert (state["epoch"], state["step"], state["sample"]) == \
        (0, stop // global_batch, stop % global_batch)
    again = make(tree_index, batch_size=global_batch)
    again.load_state_dict(state)
    again.set_epoch(0)  # the same epoch: keeps the position
    assert head + ids_of(torch.utils.data.DataLoader(again, batch_size=batch)) == want
    assert (again.epoch, again.state_dict()["step"], again.state_dict()["sample"]) == (1, 0, 0)


def test_mid_step_state_where_it_cannot_be_exact(tree_index):
    # two ranks, each stopped 1 sample into its share of step 2
    states = []
    for r in range(2):
        ds = make(tree_index, r, 2)
        ids_of(torch.utils.data.DataLoader(ds, batch_size=1), stop=2 * ds.local_batch + 1)
        states.append(ds.state_dict())
        assert (states[-1]["step"], states[-1]["sample"], states[-1]["world"]) == (2, 1, 2)
    # the same world resumes exactly
    want = global_steps(tree_index)
    for r in range(2):
        ds = make(tree_index, r, 2)
        ds.load_state_dict(states[r])
        rest = ids_of(torch.utils.data.DataLoader(ds, batch_size=1))
        share = [step[r * 4:(r + 1) * 4] for step in want]
        assert rest == share[2][1:] + sum(share[3:], [])
    # another world size cannot continue mid-step
    with pytest.raises(ValueError, match="world size"):
        make(tree_index, 0, 4).load_state_dict(states[0])
    # nor can workers, or the larder loader (whose batches are whole steps)
    ds = make(tree_index, 0, 2)
    ds.load_state_dict(states[0])
    with pytest.raises(ValueError, match="mid-step"):
        next(iter(lt.DataLoader(ds)))
    with pytest.raises(ValueError, match="mid-step"):
        next(iter(torch.utils.data.DataLoader(ds, batch_size=1, num_workers=1)))


def test_state_of_a_plain_loader_with_workers_is_an_error(tree_index):
    """The main process cannot know what a plain DataLoader's workers
    handed to training: state_dict() says so instead of returning a stale
    position; set_epoch() or load_state_dict() states the position again."""
    ds = make(tree_index)
    ids_of(torch.utils.data.DataLoader(ds, batch_size=G, num_workers=2), stop=3 * G)
    with pytest.raises(RuntimeError, match="plain torch DataLoader"):
        ds.state_dict()
    ds.load_state_dict({"epoch": 0, "step": 3}, strict=False)
    assert ds.state_dict()["step"] == 3
    ids_of(torch.utils.data.DataLoader(ds, batch_size=G, num_workers=1))
    with pytest.raises(RuntimeError):
        ds.state_dict()
    ds.set_epoch(1)
    assert (ds.state_dict()["epoch"], ds.state_dict()["step"]) == (1, 0)
    # larder's own loader is followed exactly
    assert ids_of(lt.DataLoader(ds, num_workers=2)) == \
        [i for step in global_steps(tree_index, epoch=1) for i in step]
    assert (ds.state_dict()["epoch"], ds.state_dict()["step"]) == (2, 0)
