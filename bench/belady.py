#!/usr/bin/python3
"""The offline optimum for bench/eviction.sh: Belady's rule replayed over a
recorded block sequence, independent of larder's C code.

    belady.py TRACE --capacity BLOCKS --epoch-reads N [--block-size BYTES]

TRACE is what LARDER_EVICT_TRACE wrote: one line "FIRST LAST" (global
block numbers) per sample a reader asked for, in the order the requests
were made (several processes append to it; lines starting with "#" are
what a process's eviction decisions cost, skipped).  Each sample's blocks are one
request.  A block not in the cache is a miss (one block fetched from the
origin); it is then kept if something can go: when the cache is full, the
block whose next request is farthest away goes -- the new block itself
when it is that one (bypass, as admission allows larder).  That is the
least possible number of fetched blocks for this sequence and capacity
(Belady 1966, with bypass).

Prints JSON: fetched blocks and bytes per epoch (every N requests is one
epoch; the last may be short) and in all.
"""
import argparse
import heapq
import json
import sys


def next_uses(requests):
    """Every access to a block, in order; the request each belongs to; the
    request that next needs the same block (`never` past the last one)."""
    accesses = [b for request in requests for b in request]
    owner = [i for i, request in enumerate(requests) for _ in request]
    never = len(requests) + 1
    following = [never] * len(accesses)
    seen = {}
    for k in range(len(accesses) - 1, -1, -1):
        following[k] = seen.get(accesses[k], never)
        seen[accesses[k]] = owner[k]
    return accesses, owner, following, never


def replay(requests, capacity):
    """Misses of each request under Belady's rule with bypass."""
    accesses, owner, following, never = next_uses(requests)
    resident = {}  # block -> the request that needs it next
    heap = []  # (-next request, block), stale entries skipped
    misses = [0] * len(requests)
    for k, b in enumerate(accesses):
        i, nxt = owner[k], following[k]
        if b in resident:
            resident[b] = nxt
            heapq.heappush(heap, (-nxt, b))
            continue
        misses[i] += 1
        if capacity <= 0:
            continue
        if len(resident) < capacity:
            resident[b] = nxt
            heapq.heappush(heap, (-nxt, b))
            continue
        # the farthest resident block (skipping stale heap entries)
        while heap and resident.get(heap[0][1]) != -heap[0][0]:
            heapq.heappop(heap)
        # a block needed by this same request is never the one to go
        farthest, victim = -heap[0][0], heap[0][1]
        if farthest <= nxt or farthest == i:
            continue  # bypass: the new block is needed last
        heapq.heappop(heap)
        del resident[victim]
        resident[b] = nxt
        heapq.heappush(heap, (-nxt, b))
    return misses


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--capacity", type=int, required=True, help="cache capacity in blocks")
    p.add_argument("--epoch-reads", type=int, required=True, help="sample requests per epoch")
    p.add_argument("--block-size", type=int, default=65536)
    args = p.parse_args()
    requests = []
    with open(args.trace) as f:
        for line in f:
            if line.startswith("#"):  # a process's decision costs, at its close
                continue
            first, last = map(int, line.split())
            requests.append(list(range(first, last + 1)))
    misses = replay(requests, args.capacity)
    epochs = []
    for start in range(0, len(requests), args.epoch_reads):
        blocks = sum(misses[start:start + args.epoch_reads])
        epochs.append({"blocks": blocks, "bytes": blocks * args.block_size})
    json.dump({"capacity_blocks": args.capacity, "requests": len(requests),
               "epochs": epochs, "blocks": sum(misses),
               "bytes": sum(misses) * args.block_size}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
