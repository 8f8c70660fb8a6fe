#!/usr/bin/env python3
"""Next use of every cache block, and the eviction order it implies,
computed from docs/plan.md and docs/cache.md ("Eviction") alone: a
reference for tests/unit/test_cache_nextuse.c, written apart from the C.

Where the C inverts the order (sample -> position) and does arithmetic per
reader, this walks every reader's future reads in time order, as the
reader will make them (plan.md: its steps T + w, T + w + K, ... of this
epoch from where it is, then w, w + K, ... of the next; its slice
[t*G + r*G/W, t*G + (r+1)*G/W) of each step), and gives each block the
first step at which one of its samples is read (a read in the next epoch
counting where cache.md says: its step in the epoch's head -- the steps
the reader's workers read or stage as it starts, workers x (window + 1),
or the first eighth for a reader that did not say its window -- else a
fixed step of the sample's own).

    nextuse_reference.py DOC INPUT.json

INPUT: {"block_size", "shard_blocks": [blocks per shard], "samples":
[[shard, offset, length], ...], "plans": [{"seed", "epoch",
"global_batch", "world", "rank", "workers", "worker", "start_step",
"consumed", "window" (optional, 0: not said)}], "resident": [global blocks], "limit": blocks}
Prints one line per global block (its next use in steps, -1 for never),
then "evict" and the blocks that go to bring the resident ones down to
the limit, in the order they go (farthest first, lower block first among
equals).
"""
import json
import re
import sys

NEVER = float("inf")
MASK = (1 << 64) - 1


def spread(x):
    """splitmix64's output function over x (docs/cache.md, "Next use")."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def head_of(steps, workers, window):
    """cache.md: the next epoch's head is what a reader's workers read or
    stage as it starts: each worker's first step and its prefetch window
    of `window` of its own steps; the first eighth when it said no window;
    at least one step, at most the epoch."""
    head = workers * (window + 1) if window else steps // 8
    return max(1, min(head, steps))


def next_step(steps, head, t, sample):
    """cache.md: a read at step t of the next epoch counts at t in the
    epoch's head, else at a fixed step of the sample's own among the rest."""
    if t < head or steps <= head:
        return t
    return head + spread(sample) % (steps - head)


def main():
    doc, path = sys.argv[1], sys.argv[2]
    spec = {}
    exec(re.search(r"```python\n(.*?)```", open(doc).read(), re.S).group(1), spec)
    Permutation = spec["Permutation"]
    cfg = json.load(open(path))
    bs = cfg["block_size"]
    base = [0]
    for count in cfg["shard_blocks"]:
        base.append(base[-1] + count)
    samples = cfg["samples"]
    n = len(samples)
    # the global blocks holding each sample's bytes
    blocks_of = []
    for shard, offset, length in samples:
        first, last = offset // bs, (offset + max(length, 1) - 1) // bs
        blocks_of.append([base[shard] + b for b in range(first, last + 1)])
    use = [NEVER] * base[-1]
    orders = {}

    def order(seed, epoch):  # position -> sample id (global mode, nothing denied)
        if (seed, epoch) not in orders:
            perm = Permutation(n, seed, epoch, 1, 0)
            orders[seed, epoch] = [perm.forward(p) for p in range(n)]
        return orders[seed, epoch]

    for plan in cfg["plans"]:
        g, w_, r = plan["global_batch"], plan["world"], plan["rank"]
        k, w, start = plan["workers"], plan["worker"], plan["start_step"]
        local = g // w_
        steps = n // g
        head = head_of(steps, k, plan.get("window", 0))
        cur = min(start + w + plan["consumed"] * k, steps)
        reads = []  # (steps from now, epoch, step)
        t = cur
        while t < steps:
            reads.append((t - cur, plan["epoch"], t))
            t += k
        for t in range(w, steps, k):
            reads.append((None, plan["epoch"] + 1, t))
        for distance, epoch, t in reads:
            sequence = order(plan["seed"], epoch)
            for p in range(t * g + r * local, t * g + (r + 1) * local):
                d = distance if distance is not None else steps - cur + next_step(
                    steps, head, t, sequence[p])
                for b in blocks_of[sequence[p]]:
                    use[b] = min(use[b], d)
    for u in use:
        print(-1 if u == NEVER else u)
    resident = cfg.get("resident", [])
    limit = cfg.get("limit", len(resident))
    ranked = sorted(resident, key=lambda b: (-use[b], b))
    print("evict")
    for b in ranked[: max(0, len(resident) - limit)]:
        print(b)


if __name__ == "__main__":
    main()
