"""A restart storm: N nodes x R ranks read every byte of one checkpoint.

The checkpoint is a set of files split into chunks of C bytes (a file's
last chunk may be shorter; chunks never span files).  Every node runs a
daemon with a cache; its R ranks read the checkpoint in file order, and
the daemon keeps W chunks in flight for them.  Policies:

- direct: no daemon; every rank reads every chunk from the origin (the
  baseline: origin bytes = N x R x S).
- file: one owner per file (rendezvous over the nodes); the owner reads a
  chunk from the origin once (single flight) and every other node copies
  it from the owner.
- striped: one owner per (file, chunk), rendezvous per chunk; otherwise
  as file.
- hinted: before the readers start, every daemon pulls every chunk from
  its striped owner (replication at HINTED priority, W_hint chunks in
  flight per daemon); the readers then read their node's cache.  Its time
  is the readers' time; the replication's is reported beside it.

Links (engine.py shares them max-min fairly): the origin (bandwidth B_o,
latency L_o per request), each node's NIC in (B_n), each node's NIC out
(min(B_n, serve rate): what its daemon can serve), each node's local copy
path to its ranks (B_local, multiplicity R: every rank gets its own copy
of every byte).  A peer request costs L_p before its bytes move; a chunk
is forwarded only once it is whole (store and forward, as the daemon
verifies a fill before serving it).

Two ways to run the same model:

- full: every node separately; N x K transfers.  Exact, for small N.
  The only mode that knows a reading order per node ("staggered": node i
  starts at chunk i x K / N and wraps around).
- symmetric: the storm as it happens at restart, every node reading the
  same chunks in the same order at the same time.  Then every node that
  does not own chunk k does the same thing at the same moment, so one
  flow of multiplicity N - 1 stands for the N - 1 copies of chunk k out
  of its owner, and one representative node stands for every receiver:
  K transfers in all, whatever N.  (Owners' own NICs in carry their
  origin fills only: the peer streams they also receive are charged to
  the representative, the busiest receiver.)  Checked against full mode
  by tests/python/test_sim.py where both run.
"""

import math

import numpy as np

from engine import Engine

POLICIES = ("direct", "file", "striped", "hinted")

MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x):
    """splitmix64's finalizer over a numpy uint64 array (wraps mod 2^64)."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & MASK
        return x ^ (x >> np.uint64(31))


def rendezvous(keys, nodes):
    """Owner of each key (uint64 array): the node with the highest
    splitmix64(key ^ splitmix64(node)).  Blocks of keys keep memory low."""
    node_keys = splitmix64(np.arange(nodes, dtype=np.uint64) + np.uint64(0x5EED))
    owners = np.empty(len(keys), dtype=np.int64)
    block = max(1, (1 << 22) // max(nodes, 1))
    for start in range(0, len(keys), block):
        part = keys[start:start + block]
        scores = splitmix64(part[:, None] ^ node_keys[None, :])
        owners[start:start + block] = np.argmax(scores, axis=1)
    return owners


def split_sizes(total, fractions):
    """Sizes of files that share total bytes in the given proportions
    (whole bytes, summing exactly to total)."""
    weights = np.asarray(fractions, dtype=float)
    sizes = np.floor(weights / weights.sum() * total).astype(np.int64)
    sizes[0] += total - int(sizes.sum())
    return [int(s) for s in sizes]


class Chunks:
    """The checkpoint's chunks: file index, size, owners."""

    def __init__(self, file_sizes, chunk):
        files, sizes, index = [], [], []
        for f, size in enumerate(file_sizes):
            count = max(1, math.ceil(size / chunk))
            for c in range(count):
                files.append(f)
                index.append(c)
                sizes.append(min(chunk, size - c * chunk))
        self.file = np.array(files, dtype=np.int64)
        self.index = np.array(index, dtype=np.int64)
        self.size = np.array(sizes, dtype=np.float64)
        self.count = len(sizes)
        self.total = float(sum(file_sizes))

    def owners(self, policy, nodes):
        """Owner node of each chunk under a policy (None for direct)."""
        if policy == "direct":
            return None
        if policy == "file":
            keys = splitmix64(self.file.astype(np.uint64) + np.uint64(1))
        else:  # striped and hinted: per (file, chunk)
            keys = splitmix64((self.file.astype(np.uint64) << np.uint64(32)) |
                              self.index.astype(np.uint64))
        return rendezvous(keys, nodes)


class Result(dict):
    """The figures of one run (a dict: time_s, origin_bytes, served per
    node, replication_s for hinted, events)."""


def simulate(p, policy, mode="auto", order="same"):
    """Run one storm.  p: the parameters (see params/*.json); returns a
    Result."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    nodes, ranks = int(p["nodes"]), int(p["ranks"])
    chunks = Chunks(p["file_sizes"], int(p["chunk_bytes"]))
    if mode == "auto":
        mode = "full" if nodes * chunks.count <= 200_000 or nodes <= 2 else "symmetric"
    if mode == "symmetric" and order != "same":
        raise ValueError("symmetric mode models every node reading in the same order")
    if mode == "symmetric" and int(p.get("reading_nodes") or nodes) != nodes:
        raise ValueError("symmetric mode models every node reading")
    owners = chunks.owners(policy, nodes)
    if mode == "full":
        storm = FullStorm(p, policy, chunks, owners, order)
    else:
        storm = SymmetricStorm(p, policy, chunks, owners)
    return storm.run()


def capacities(p, nodes):
    out = min(float(p["nic_bw"]), float(p["serve_bw"]))
    caps = {"origin": float(p["origin_bw"])}
    for n in nodes:
        caps[("in", n)] = float(p["nic_bw"])
        caps[("out", n)] = out
        caps[("local", n)] = float(p.get("local_bw") or math.inf)
    return caps


class FullStorm:
    """Every node separately (see the module's comment)."""

    def __init__(self, p, policy, chunks, owners, order):
        self.p, self.policy, self.chunks, self.owners = p, policy, chunks, owners
        self.nodes, self.ranks = int(p["nodes"]), int(p["ranks"])
        self.engine = Engine(capacities(p, range(self.nodes)))
        count = chunks.count
        self.state = np.zeros((self.nodes, count), dtype=np.int8)  # 0 absent, 1 filling, 2 held
        self.waiters = {}
        self.origin_bytes = 0.0
        self.served = np.zeros(self.nodes)
        base = np.arange(count)
        if order == "staggered":
            self.orders = [np.roll(base, -(d * count // self.nodes)) for d in range(self.nodes)]
        else:
            self.orders = [base] * self.nodes

    def run(self):
        p, engine = self.p, self.engine
        replication = None
        if self.policy == "hinted":
            self.readers(window=int(p.get("hint_window", p["window"])), local=False)
            engine.run()
            replication = engine.now
            self.readers(window=int(p["window"]), local=True)
            engine.run()
        else:
            self.readers(window=int(p["window"]), local=True)
            engine.run()
        start = replication or 0.0
        return Result(time_s=max(self.finished[:self.reading]) - start, replication_s=replication,
                      origin_bytes=self.origin_bytes, served=self.served,
                      events=engine.events, mode="full", chunks=self.chunks.count)

    def readers(self, window, local):
        """Start every node's reading of the whole checkpoint."""
        self.finished = [0.0] * self.nodes
        self.next = [0] * self.nodes
        self.inflight = [0] * self.nodes
        self.done = [0] * self.nodes
        self.window, self.local = window, local
        self.admitting = [False] * self.nodes
        self.reading = int(self.p.get("reading_nodes") or self.nodes)
        for d in range(self.reading):
            self.admit(d)

    def admit(self, d):
        # a chunk already held completes at once, inside this loop: the
        # loop itself goes on rather than recursing once per chunk
        if self.admitting[d]:
            return
        self.admitting[d] = True
        count = self.chunks.count
        while self.inflight[d] < self.window and self.next[d] < count:
            k = int(self.orders[d][self.next[d]])
            self.next[d] += 1
            self.inflight[d] += 1
            self.fetch(d, k, lambda d=d, k=k: self.deliver(d, k))
        self.admitting[d] = False

    def deliver(self, d, k):
        """The node holds chunk k: copy it to its ranks."""
        p = self.p
        if self.policy == "direct" or not self.local:
            return self.chunk_done(d)
        self.engine.start(self.chunks.size[k], [(("local", d), self.ranks)],
                          float(p.get("local_latency", 0)), lambda: self.chunk_done(d))

    def chunk_done(self, d):
        self.inflight[d] -= 1
        self.done[d] += 1
        if self.done[d] == self.chunks.count:
            self.finished[d] = self.engine.now
        self.admit(d)

    def fetch(self, d, k, then):
        p, size = self.p, self.chunks.size[k]
        if self.policy == "direct":
            self.origin_bytes += size * self.ranks
            self.engine.start(size, [("origin", self.ranks), (("in", d), self.ranks)],
                              float(p["origin_latency"]), then)
            return
        self.when_held(d, k, then)

    def when_held(self, d, k, then):
        """then() once node d holds chunk k, fetching it (once) if needed."""
        state = self.state[d, k]
        if state == 2:
            return then()
        self.waiters.setdefault((d, k), []).append(then)
        if state == 1:
            return
        self.state[d, k] = 1
        owner, size, p = int(self.owners[k]), self.chunks.size[k], self.p
        if owner == d:
            self.origin_bytes += size
            self.engine.start(size, [("origin", 1), (("in", d), 1)], float(p["origin_latency"]),
                              lambda: self.held(d, k))
        else:
            def copy():
                self.served[owner] += size
                self.engine.start(size, [(("out", owner), 1), (("in", d), 1)],
                                  float(p["peer_latency"]), lambda: self.held(d, k))
            self.when_held(owner, k, copy)

    def held(self, d, k):
        self.state[d, k] = 2
        for callback in self.waiters.pop((d, k), []):
            callback()


class SymmetricStorm:
    """Every node reading the same chunks at the same time, aggregated
    (see the module's comment).  Node "rep" stands for every receiver."""

    def __init__(self, p, policy, chunks, owners):
        self.p, self.policy, self.chunks, self.owners = p, policy, chunks, owners
        self.nodes, self.ranks = int(p["nodes"]), int(p["ranks"])
        used = sorted(set(owners.tolist())) if owners is not None else []
        self.engine = Engine(capacities(p, used + ["rep"]))
        self.state = np.zeros(chunks.count, dtype=np.int8)  # at the owner
        self.waiters = {}
        self.origin_bytes = 0.0
        self.served = np.zeros(self.nodes)

    def run(self):
        p, engine = self.p, self.engine
        replication = None
        if self.policy == "hinted":
            self.reader(window=int(p.get("hint_window", p["window"])), local=False)
            engine.run()
            replication = engine.now
            self.reader(window=int(p["window"]), local=True)
            engine.run()
        else:
            self.reader(window=int(p["window"]), local=True)
            engine.run()
        start = replication or 0.0
        return Result(time_s=self.finished - start, replication_s=replication,
                      origin_bytes=self.origin_bytes, served=self.served,
                      events=engine.events, mode="symmetric", chunks=self.chunks.count)

    def reader(self, window, local):
        self.next = self.inflight = self.done = 0
        self.finished = 0.0
        self.window, self.local = window, local
        self.held_by_rep = getattr(self, "held_by_rep", np.zeros(self.chunks.count, dtype=bool))
        self.admitting = False
        self.admit()

    def admit(self):
        if self.admitting:  # see FullStorm.admit
            return
        self.admitting = True
        while self.inflight < self.window and self.next < self.chunks.count:
            k = self.next
            self.next += 1
            self.inflight += 1
            self.fetch(k)
        self.admitting = False

    def fetch(self, k):
        p, size, nodes, ranks = self.p, self.chunks.size[k], self.nodes, self.ranks
        if self.policy == "direct":
            self.origin_bytes += size * nodes * ranks
            self.engine.start(size, [("origin", nodes * ranks), (("in", "rep"), ranks)],
                              float(p["origin_latency"]), self.chunk_done)
            return
        if self.held_by_rep[k]:
            return self.deliver(k)
        owner = int(self.owners[k])

        def copy():
            if nodes == 1:
                return self.held(k)
            self.served[owner] += size * (nodes - 1)
            self.engine.start(size, [(("out", owner), nodes - 1), (("in", "rep"), 1)],
                              float(p["peer_latency"]), lambda: self.held(k))

        if self.state[k] == 2:
            return copy()
        self.waiters.setdefault(k, []).append(copy)
        if self.state[k] == 1:
            return
        self.state[k] = 1
        self.origin_bytes += size
        self.engine.start(size, [("origin", 1), (("in", owner), 1)], float(p["origin_latency"]),
                          lambda: self.owner_holds(k))

    def owner_holds(self, k):
        self.state[k] = 2
        for callback in self.waiters.pop(k, []):
            callback()

    def held(self, k):
        self.held_by_rep[k] = True
        self.deliver(k)

    def deliver(self, k):
        if not self.local:
            return self.chunk_done()
        self.engine.start(self.chunks.size[k], [(("local", "rep"), self.ranks)],
                          float(self.p.get("local_latency", 0)), self.chunk_done)

    def chunk_done(self):
        self.inflight -= 1
        self.done += 1
        if self.done == self.chunks.count:
            self.finished = self.engine.now
        self.admit()
