#!/usr/bin/python3
"""Where the wall time of bench/eviction.sh's runs goes: the per-step data
waits of each run (what train.py recorded: the slowest rank's wait for its
batch, per step), summed by quarter of each epoch, beside the origin
misses of the same quarters under Belady's rule (bench/belady.py replayed
over the run's recorded block sequence).

    eviction_waits.py WORK [--capacity-share 0.5] [--policy plan] [--tag=-rN]

WORK is the bench's work directory (bench/work/eviction): it reads
run-full.json, run-SHARE-POLICY.json and trace-SHARE-POLICY.txt (with
--tag, the round's: run-full-r2.json ...).  Prints a
markdown table.  A cache that keeps the blocks needed first in the next
epoch (Belady's choice among equally costly ones) fetches nothing in the
first half of each later epoch and everything in the second: the origin
then serves at epoch 1's full rate for half the epoch, and its stalls show
as waits there.
"""
import argparse
import heapq
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import belady  # noqa: E402

QUARTERS = 4
MASK = (1 << 64) - 1


def spread(x):
    """splitmix64's output function (docs/cache.md, "Next use")."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def lead_steps(run, capacity_share, total_blocks, block):
    """The next epoch's head in global steps (docs/cache.md, "Next use"):
    K x (window + 1), the window as prefetch.c sizes it with every reader
    of the run live (an eighth of the capacity over the readers, in steps
    of the dataset's mean sample size, 1 to 8)."""
    readers = run["world"] * run["workers"]
    step_bytes = total_blocks * block // run["samples"] * (run["batch"] // run["world"])
    window = int(total_blocks * block * capacity_share) // (8 * readers) // max(step_bytes, 1)
    return run["workers"] * (min(max(window, 1), 8) + 1)


def replay_spread(requests, capacity, epoch_reads, head):
    """Misses of each request when blocks needed later in the current epoch
    or in the next epoch's first `head` requests are ranked by when, and
    blocks next needed later in the next epoch by a fixed key of their own
    (here spread(block)) instead: the rule of docs/cache.md, replayed with
    bypass like belady.replay."""
    accesses, owner, following, never = belady.next_uses(requests)

    def key(epoch, nxt, b):  # larger goes first
        if nxt == never or nxt // epoch_reads > epoch + 1:
            return (3, 0, -b)
        if nxt // epoch_reads > epoch:  # the next epoch: its head where it is
            return (2, spread(b), -b) if nxt % epoch_reads >= head else (1, nxt, -b)
        return (0, nxt, -b)

    resident, heap, misses, epoch = {}, [], [0] * len(requests), 0
    for k, b in enumerate(accesses):
        i, nxt = owner[k], following[k]
        if i // epoch_reads != epoch:  # ranks change at an epoch's start: rebuild
            epoch = i // epoch_reads
            heap = [(tuple(-x for x in key(epoch, n, c)), c) for c, n in resident.items()]
            heapq.heapify(heap)
        if b in resident:
            resident[b] = nxt
            heapq.heappush(heap, (tuple(-x for x in key(epoch, nxt, b)), b))
            continue
        misses[i] += 1
        if len(resident) < capacity:
            resident[b] = nxt
            heapq.heappush(heap, (tuple(-x for x in key(epoch, nxt, b)), b))
            continue
        while heap and (heap[0][1] not in resident or tuple(-x for x in heap[0][0])
                        != key(epoch, resident[heap[0][1]], heap[0][1])):
            heapq.heappop(heap)
        victim = heap[0][1]
        if resident[victim] == i or key(epoch, resident[victim], victim) <= key(epoch, nxt, b):
            continue  # bypass
        heapq.heappop(heap)
        del resident[victim]
        resident[b] = nxt
        heapq.heappush(heap, (tuple(-x for x in key(epoch, nxt, b)), b))
    return misses


def quarter_sums(values, quarters=QUARTERS):
    n = len(values)
    return [sum(values[q * n // quarters:(q + 1) * n // quarters]) for q in range(quarters)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("work")
    p.add_argument("--capacity-share", type=float, default=0.5)
    p.add_argument("--policy", default="plan")
    p.add_argument("--block", type=int, default=65536)
    p.add_argument("--tag", default="", help="a round's suffix (-r2) with REPEAT")
    args = p.parse_args()
    name = f"{args.capacity_share:g}-{args.policy}{args.tag}"
    full = json.load(open(os.path.join(args.work, f"run-full{args.tag}.json")))
    run = json.load(open(os.path.join(args.work, f"run-{name}.json")))
    compute = run["compute_ms"] / 1000.0
    lines = [f"| run | epoch | wait s, quarters 1-4 of the epoch | steps waiting > 50 ms | "
             f"steps waiting > {compute * 1000:g} ms | AU |", "|---|---|---|---|---|---|"]
    for label, result in (("no limit", full), (name, run)):
        for e in result["epochs"]:
            waits = e["waits"]
            lines.append(f"| {label} | {e['epoch']} | "
                         + " / ".join(f"{w:.2f}" for w in quarter_sums(waits)) + " | "
                         + f"{sum(1 for w in waits if w > 0.05)} | "
                         + f"{sum(1 for w in waits if w > compute)} | "
                         + f"{e['compute_s'] / e['wall_s']:.3f} |")
    trace = os.path.join(args.work, f"trace-{name}.txt")
    if os.path.exists(trace):
        requests, costs, demand = [], [], []  # demand: request index of each reader's miss
        windows = []  # (window, workers) of each prefetcher, as it registered
        with open(trace) as f:
            for line in f:
                if line.startswith("# window"):
                    windows.append((int(line.split()[2]), int(line.split()[4])))
                    continue
                if line.startswith("# miss"):
                    demand.append(max(len(requests) - 1, 0))
                    continue
                if line.startswith("#"):
                    costs.append(line.split())
                    continue
                first, last = map(int, line.split())
                requests.append(list(range(first, last + 1)))
        epoch_reads = len(requests) // len(run["epochs"])
        total_blocks = len({b for r in requests for b in r})
        capacity = int(total_blocks * args.capacity_share)
        head = lead_steps(run, args.capacity_share, total_blocks, args.block)
        if windows:  # as the prefetchers said: the median reader's head
            heads = sorted(k * (w + 1) for w, k in windows)
            head = heads[len(heads) // 2]
        rules = (("Belady (next epoch by its order)", belady.replay(requests, capacity)),
                 (f"next epoch past its first {head} steps (the readers' lead) by a fixed key",
                  replay_spread(requests, capacity, epoch_reads, min(head * run["batch"], epoch_reads))))
        lines += ["", f"Blocks fetched by quarter of each epoch, replayed over the run's "
                  f"recorded block sequence with bypass, capacity {capacity} blocks of "
                  f"{total_blocks}:", "",
                  "| rule | epoch | quarters 1-4 | in all |", "|---|---|---|---|"]
        for label, misses in rules:
            for e in range(len(run["epochs"])):
                part = misses[e * epoch_reads:(e + 1) * epoch_reads]
                lines.append(f"| {label} | {e + 1} | "
                             + " / ".join(str(m) for m in quarter_sums(part))
                             + f" | {sum(part)} |")
        if demand:  # the reader's own misses (not staged in time), by eighth of each epoch
            lines += ["", "Samples the readers themselves fetched (missed: not staged by the "
                      "prefetcher in time) by eighth of each epoch, from the trace's "
                      "\"# miss\" lines:", "", "| epoch | eighths 1-8 | in all |", "|---|---|---|"]
            for e in range(len(run["epochs"])):
                counts = [0] * 8
                for k in demand:
                    if k // epoch_reads == e:
                        counts[min(k % epoch_reads * 8 // epoch_reads, 7)] += 1
                lines.append(f"| {e + 1} | " + " / ".join(map(str, counts))
                             + f" | {sum(counts)} |")
        if windows:
            seen = {}
            for w, k in windows:
                seen[w] = seen.get(w, 0) + 1
            lines += ["", "Prefetch windows as the prefetchers registered them (their reader's "
                      "steps; from the trace's \"# window\" lines): "
                      + ", ".join(f"{w} step{'s' if w != 1 else ''} x {n}"
                                  for w, n in sorted(seen.items())) + "."]
        if costs:  # "# pid P scans N scan_cpu_us U admits A admit_wait_us W" per process
            fields = [dict(zip(c[1::2], map(int, c[2::2]))) for c in costs]
            lines += ["", f"Eviction decisions over the whole run ({len(fields)} processes that "
                      "evicted or admitted, what each wrote at its close):", "",
                      "| candidate scans | their CPU ms | CPU ms per scan | admission checks "
                      "| ms waited for the eviction lock in them |", "|---|---|---|---|---|"]
            scans = sum(f.get("scans", 0) for f in fields)
            cpu = sum(f.get("scan_cpu_us", 0) for f in fields) / 1000
            lines.append(f"| {scans} | {cpu:.0f} | {cpu / scans if scans else 0:.2f} | "
                         f"{sum(f.get('admits', 0) for f in fields)} | "
                         f"{sum(f.get('admit_wait_us', 0) for f in fields) / 1000:.0f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
