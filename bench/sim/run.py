#!/usr/bin/python3
"""Run the restart-storm simulation and print its figures.

    bench/sim/run.py --params bench/sim/params/cluster.json
    bench/sim/run.py --params bench/sim/params/loopback.json \\
        --params bench/results/restart-measured.json --loopback-sweep 1,4,16,64

Parameter files are JSON objects read in order, later ones over earlier
ones, then --set KEY=VALUE over all.  Keys (bytes, bytes/s, seconds):
nodes, ranks (per node), reading_nodes (default: all), checkpoint_bytes,
files (relative sizes, one per file), chunk_bytes, origin_bw,
origin_latency, nic_bw, serve_bw (what one daemon serves to peers),
peer_latency, local_bw (one node's copies to its ranks; 0: unlimited),
local_latency, window (chunks a daemon keeps in flight for its readers),
hint_window (for replication).  Keys starting with "_" are comments.

Figures per policy (storm.py describes the policies):
- origin bytes / checkpoint size;
- time until every reader holds the whole checkpoint, over the time of one
  reader alone (one node, one rank, reading from the origin);
- the busiest node's share of the bytes nodes served to each other, and
  that share times the number of nodes (1.0 is perfect balance);
- a lower bound on the time from link capacities alone (what a perfect
  schedule would reach), to show what the window and latencies cost.
Standard library and numpy only; matplotlib is not needed here.
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from storm import POLICIES, Chunks, simulate, split_sizes  # noqa: E402


def load(paths, sets):
    p = {}
    for path in paths:
        with open(path) as f:
            p.update({k: v for k, v in json.load(f).items() if not k.startswith("_")})
    for item in sets:
        key, _, value = item.partition("=")
        p[key] = json.loads(value)
    return finish(p)


def finish(p):
    """Fill in the derived keys (file_sizes) of a parameter set."""
    p = dict(p)
    p["file_sizes"] = split_sizes(int(p["checkpoint_bytes"]), p.get("files", [1]))
    return p


def lower_bound(p, policy, served):
    """Seconds no schedule can beat, from capacities alone."""
    nodes, ranks = int(p["nodes"]), int(p["ranks"])
    reading = int(p.get("reading_nodes") or nodes)
    size = float(p["checkpoint_bytes"])
    nic, origin = float(p["nic_bw"]), float(p["origin_bw"])
    out = min(nic, float(p["serve_bw"]))
    local = float(p.get("local_bw") or math.inf)
    if policy == "direct":
        return max(reading * ranks * size / origin, ranks * size / nic) + p["origin_latency"]
    local_time = ranks * size / local
    if policy == "hinted":
        return local_time
    # every byte leaves the origin once; a reader node receives all but
    # what it owns; the busiest owner sends its share to every other node
    return max(size / origin, size * (1 - 1 / nodes) / nic if nodes > 1 else 0,
               max(served) / out if len(served) else 0, local_time) + p["origin_latency"]


def alone(p):
    one = dict(p, nodes=1, ranks=1, reading_nodes=1)
    return simulate(one, "direct", mode="full")["time_s"]


def figures(p, policies, order="same", mode="auto"):
    """One row per policy: a dict of the figures."""
    size = float(p["checkpoint_bytes"])
    reference = alone(p)
    rows = []
    for policy in policies:
        started = time.perf_counter()
        r = simulate(p, policy, mode=mode, order=order)
        served = r["served"]
        total_served = float(served.sum())
        share = float(served.max()) / total_served if total_served > 0 else None
        rows.append({
            "policy": policy,
            "nodes": int(p["nodes"]),
            "ranks": int(p["ranks"]),
            "reading_nodes": int(p.get("reading_nodes") or p["nodes"]),
            "readers": int(p.get("reading_nodes") or p["nodes"]) * int(p["ranks"]),
            "order": order,
            "origin_ratio": r["origin_bytes"] / size,
            "time_s": r["time_s"],
            "alone_s": reference,
            "time_ratio": r["time_s"] / reference,
            "replication_s": r["replication_s"],
            "busiest_share": share,
            "imbalance": share * int(p["nodes"]) if share is not None else None,
            "bound_s": lower_bound(p, policy, served),
            "mode": r["mode"],
            "chunks": r["chunks"],
            "events": r["events"],
            "wall_s": time.perf_counter() - started,
        })
    return rows


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def markdown(rows):
    lines = ["| policy | nodes x ranks | order | origin bytes / size | time s | vs one reader "
             "| bound s | busiest share | x nodes | replication s | events |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['policy']} | {r['reading_nodes']}/{r['nodes']} x {r['ranks']} | {r['order']} "
            f"| {r['origin_ratio']:.3f} | {r['time_s']:.2f} | {r['time_ratio']:.2f}x "
            f"| {r['bound_s']:.2f} | {fmt(r['busiest_share'], '.4f')} | {fmt(r['imbalance'], '.2f')} "
            f"| {fmt(r['replication_s'], '.2f')} | {r['events']} ({r['mode']}) |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", action="append", required=True, help="JSON parameter file")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--order", default="same", choices=("same", "staggered"))
    ap.add_argument("--mode", default="auto", choices=("auto", "full", "symmetric"))
    ap.add_argument("--loopback-sweep", metavar="N,N,...",
                    help="readers spread over the `nodes` daemons (like bench/restart.sh)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    p = load(args.params, args.set)
    policies = [x for x in args.policies.split(",") if x]
    rows = []
    if args.loopback_sweep:
        daemons = int(p["nodes"])
        for readers in [int(x) for x in args.loopback_sweep.split(",")]:
            reading = min(readers, daemons)
            q = dict(p, reading_nodes=reading, ranks=max(1, readers // reading))
            if "direct" in policies:  # N readers straight from the origin
                rows += figures(dict(q, nodes=reading), ["direct"], args.order, args.mode)
            rows += figures(q, [x for x in policies if x != "direct"], args.order, args.mode)
    else:
        rows = figures(p, policies, args.order, args.mode)
    chunks = Chunks(p["file_sizes"], int(p["chunk_bytes"])).count
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"checkpoint {p['checkpoint_bytes'] / 2**30:.2f} GiB in {len(p['file_sizes'])} files, "
              f"{chunks} chunks of {p['chunk_bytes'] / 2**20:g} MiB")
        print(markdown(rows))


if __name__ == "__main__":
    main()
