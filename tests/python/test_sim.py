"""The restart-storm simulation (bench/sim/) at tiny scales, against
figures worked out by hand from the model's definition (bench/sim/storm.py):
link capacities, latencies and byte counts, not the simulation's own output.
"""

import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(REPO, "bench", "sim")
sys.path.insert(0, SIM)

from engine import Engine  # noqa: E402
import storm  # noqa: E402

MiB = 1 << 20
HUGE = 1e18  # a link that never limits, but is still a link


def params(**over):
    p = {
        "nodes": 1, "ranks": 1, "checkpoint_bytes": 64 * MiB, "files": [1],
        "chunk_bytes": 4 * MiB, "origin_bw": 100e6, "origin_latency": 0.01,
        "nic_bw": 1e9, "serve_bw": 1e9, "peer_latency": 0.0, "local_bw": 0,
        "local_latency": 0.0, "window": 1000, "hint_window": 1000,
    }
    p.update(over)
    p["file_sizes"] = storm.split_sizes(p["checkpoint_bytes"], p["files"])
    return p


def close(a, b, rel=1e-6):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


# ---- the engine ---------------------------------------------------------------


def test_engine_max_min_shares_a_link_by_the_other_bottleneck():
    # f1 and f2 share link A (10 B/s); f2 also crosses B (2 B/s).  Max-min:
    # f2 gets 2, f1 gets the other 8, so 8 and 2 bytes both end at t = 1.
    engine = Engine({"A": 10.0, "B": 2.0})
    ends = {}
    engine.start(8, [("A", 1)], 0, lambda: ends.setdefault("f1", engine.now))
    engine.start(2, [("A", 1), ("B", 1)], 0, lambda: ends.setdefault("f2", engine.now))
    engine.run()
    assert close(ends["f1"], 1.0) and close(ends["f2"], 1.0)


def test_engine_multiplicity_and_latency():
    # one flow standing for 4 transfers on a 8 B/s link: each moves at 2 B/s;
    # 6 bytes after 0.5 s of latency end at 0.5 + 3
    engine = Engine({"L": 8.0})
    ends = []
    engine.start(6, [("L", 4)], 0.5, lambda: ends.append(engine.now))
    engine.run()
    assert close(ends[0], 3.5)
    assert close(engine.link_bytes["L"], 24)


def test_engine_frees_bandwidth_when_a_flow_ends():
    # two flows of 4 and 12 bytes on 4 B/s: both at 2 until t = 2 (4 bytes
    # done), then the second alone at 4 for its last 8 bytes: t = 4
    engine = Engine({"L": 4.0})
    ends = []
    engine.start(4, [("L", 1)], 0, lambda: ends.append(engine.now))
    engine.start(12, [("L", 1)], 0, lambda: ends.append(engine.now))
    engine.run()
    assert close(ends[0], 2.0) and close(ends[1], 4.0)


# ---- the storm ----------------------------------------------------------------


@pytest.mark.parametrize("policy", ["direct", "file", "striped", "hinted"])
def test_one_node_takes_size_over_origin_bandwidth_plus_latency(policy):
    # one node, one rank, every chunk in flight at once: one latency, then
    # the origin's bandwidth (below the NIC's) carries S bytes
    p = params()
    r = storm.simulate(p, policy, mode="full")
    expected = p["origin_latency"] + p["checkpoint_bytes"] / p["origin_bw"]
    if policy == "hinted":  # the replication takes that; the reader, local, none
        assert close(r["replication_s"], expected)
        assert close(r["time_s"], 0.0)
    else:
        assert close(r["time_s"], expected)
    assert r["origin_bytes"] == p["checkpoint_bytes"]


def test_one_chunk_in_flight_pays_a_latency_per_chunk():
    # window 1: 16 chunks one after another, each latency + 4 MiB / B_o
    p = params(window=1)
    r = storm.simulate(p, "direct", mode="full")
    assert close(r["time_s"], 16 * (p["origin_latency"] + 4 * MiB / p["origin_bw"]))


@pytest.mark.parametrize("mode", ["full", "symmetric"])
@pytest.mark.parametrize("nodes,ranks", [(3, 2), (8, 4)])
def test_origin_bytes(mode, nodes, ranks):
    p = params(nodes=nodes, ranks=ranks, files=[5, 3, 1, 1], window=3)
    size = p["checkpoint_bytes"]
    assert storm.simulate(p, "direct", mode=mode)["origin_bytes"] == nodes * ranks * size
    for policy in ("file", "striped", "hinted"):  # single flight: each byte once
        assert storm.simulate(p, policy, mode=mode)["origin_bytes"] == size, policy


@pytest.mark.parametrize("mode", ["full", "symmetric"])
def test_direct_reads_share_the_origin(mode):
    # 4 nodes x 2 ranks straight from a 100 MB/s origin: 8 S bytes at 100 MB/s
    p = params(nodes=4, ranks=2)
    r = storm.simulate(p, "direct", mode=mode)
    assert close(r["time_s"], p["origin_latency"] + 8 * p["checkpoint_bytes"] / p["origin_bw"])


@pytest.mark.parametrize("mode", ["full", "symmetric"])
@pytest.mark.parametrize("window", [2, 1000])
def test_one_owner_serves_every_other_node(mode, window):
    # one file, an origin and NICs in that never limit, no latency: the
    # owner's NIC out (the serve rate, 200 MB/s) carries S to each of the
    # N - 1 others, whatever the window
    nodes = 5
    p = params(nodes=nodes, origin_bw=HUGE, origin_latency=0.0, nic_bw=HUGE, serve_bw=200e6,
               window=window)
    r = storm.simulate(p, "file", mode=mode)
    size = p["checkpoint_bytes"]
    assert close(r["time_s"], (nodes - 1) * size / 200e6, rel=1e-4)
    assert close(float(r["served"].sum()), (nodes - 1) * size)
    assert close(float(r["served"].max()), (nodes - 1) * size)  # all from one node


@pytest.mark.parametrize("mode", ["full", "symmetric"])
def test_striped_owners_serve_in_parallel(mode):
    # every chunk in flight at once, no latency, origin and NICs in never
    # limiting: owners send in parallel, so the time is the busiest owner's
    # bytes out over its serve rate; every node receives S minus what it owns
    nodes = 6
    p = params(nodes=nodes, origin_bw=HUGE, origin_latency=0.0, nic_bw=HUGE, serve_bw=100e6,
               checkpoint_bytes=96 * MiB, chunk_bytes=2 * MiB)
    r = storm.simulate(p, "striped", mode=mode)
    assert close(float(r["served"].sum()), (nodes - 1) * p["checkpoint_bytes"])
    assert close(r["time_s"], float(r["served"].max()) / 100e6, rel=1e-4)
    assert r["served"].max() < r["served"].sum()  # more than one owner


def test_hinted_readers_read_locally_at_the_local_rate():
    # after replication, R ranks each copy S through the node's 1 GB/s path
    p = params(nodes=4, ranks=8, local_bw=1e9)
    r = storm.simulate(p, "hinted", mode="full")
    assert close(r["time_s"], 8 * p["checkpoint_bytes"] / 1e9)
    assert r["replication_s"] > 0


def test_rendezvous_spreads_chunks_evenly():
    # 40,000 keys over 4 nodes: each count is binomial(40000, 1/4), sd ~87,
    # so every share is within 0.25 +- 0.01 (over 4 sd) for a fair hash
    import numpy as np
    owners = storm.rendezvous(storm.splitmix64(np.arange(40000, dtype=np.uint64)), 4)
    counts = np.bincount(owners, minlength=4) / 40000
    assert all(abs(c - 0.25) < 0.01 for c in counts), counts


def test_symmetric_mode_agrees_with_full_mode():
    # The aggregation stands for nodes in lockstep.  Where no node runs
    # ahead of the others (direct reads; the hinted readers, local after
    # replication; replication, where no local copy lets owners drift) both
    # modes must agree.  With one owner per file, the owners of 4 files out
    # of 64 nodes run ahead by what they own (a few percent).  Striped, every
    # node owns some chunks and drifts ahead on them, spreading its requests
    # over more owners: full mode may only be faster than lockstep.
    p = params(nodes=64, ranks=2, checkpoint_bytes=128 * MiB, files=[4, 2, 1, 1], window=4,
               origin_bw=400e6, origin_latency=0.002, peer_latency=0.0005, serve_bw=300e6,
               nic_bw=1e9, local_bw=2e9)
    runs = {policy: (storm.simulate(p, policy, mode="full"),
                     storm.simulate(p, policy, mode="symmetric"))
            for policy in ("direct", "file", "striped", "hinted")}
    for policy, (full, sym) in runs.items():
        assert full["origin_bytes"] == sym["origin_bytes"]
        assert sym["time_s"] >= full["time_s"] * (1 - 1e-6), policy
    for policy in ("direct", "hinted"):
        full, sym = runs[policy]
        assert math.isclose(full["time_s"], sym["time_s"], rel_tol=1e-3), policy
    full, sym = runs["hinted"]
    assert math.isclose(full["replication_s"], sym["replication_s"], rel_tol=1e-3)
    full, sym = runs["file"]
    assert math.isclose(full["time_s"], sym["time_s"], rel_tol=0.05)


@pytest.mark.parametrize("order", ["same", "staggered"])
def test_never_faster_than_the_links_allow(order):
    sys.path.insert(0, SIM)
    import run
    p = params(nodes=6, ranks=3, checkpoint_bytes=48 * MiB, files=[3, 1, 1], window=4,
               origin_bw=300e6, serve_bw=150e6, nic_bw=500e6, local_bw=800e6,
               peer_latency=0.001)
    for row in run.figures(p, ["direct", "file", "striped", "hinted"], order=order):
        assert row["time_s"] >= row["bound_s"] * (1 - 1e-6), row


def test_command_line_prints_every_policy():
    out = subprocess.run(
        [sys.executable, os.path.join(SIM, "run.py"),
         "--params", os.path.join(SIM, "params", "checkpoint.json"),
         "--params", os.path.join(SIM, "params", "loopback.json"),
         "--loopback-sweep", "1,4"], capture_output=True, text=True, check=True).stdout
    for policy in ("direct", "file", "striped", "hinted"):
        assert f"| {policy} |" in out
    bad = subprocess.run([sys.executable, os.path.join(SIM, "run.py"), "--params",
                          os.path.join(SIM, "params", "loopback.json"), "--policies", "nope"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown policy" in bad.stderr
