"""A fluid discrete-event engine: transfers share links max-min fairly.

A transfer (a "flow") moves `size` bytes after a start-up latency.  While
it moves, it crosses links (resources with a capacity in bytes/s): the
origin, a node's NIC in or out, a node's local copy path.  A flow may
stand for several identical transfers at once (its *multiplicity* on a
link: a chunk sent by one owner to 1,023 nodes is one flow of multiplicity
1,023 on the owner's NIC out).  Rates are recomputed whenever a flow
starts or ends, by progressive filling: every unfrozen flow's rate rises
together until a link is full; the flows on it freeze; repeat.  That is
the max-min fair share (what TCP flows sharing links converge to, give or
take), and between two events every rate is constant, so the next event
is exact: no time step.

The engine knows nothing of chunks or nodes; bench/sim/storm.py does.
Events are chunk transfers: the cost of a run is O(transfers x flows in
flight x links they touch), independent of bytes.
"""

import heapq
import math

# a flow is finished when less than this many bytes are left (rates times
# float time leave crumbs)
EPSILON_BYTES = 1e-3


class Flow:
    """One transfer (or a group of identical ones) in flight."""

    __slots__ = ("size", "remaining", "links", "rate", "on_done", "active")

    def __init__(self, size, links, on_done):
        self.size = float(size)
        self.remaining = float(size)
        self.links = links  # [(link, multiplicity)], multiplicity > 0
        self.rate = 0.0  # bytes/s of one of the identical transfers
        self.on_done = on_done
        self.active = False  # False while in its start-up latency


class Engine:
    """Runs flows over links of the given capacities (bytes/s; math.inf
    for a link that never limits).  Links not named in `capacity` are
    unlimited."""

    def __init__(self, capacity):
        self.capacity = dict(capacity)
        self.now = 0.0
        self.flows = []  # active flows
        self.timers = []  # heap of (time, sequence, callback)
        self.sequence = 0
        self.dirty = False
        self.events = 0
        self.link_bytes = {}  # bytes carried per link (times multiplicity)

    def at(self, delay, callback):
        """Call callback() after delay seconds."""
        self.sequence += 1
        heapq.heappush(self.timers, (self.now + delay, self.sequence, callback))

    def start(self, size, links, latency, on_done):
        """Start a transfer of size bytes over links after latency seconds;
        on_done() runs when its last byte arrives."""
        flow = Flow(size, [(l, m) for l, m in links if m > 0], on_done)

        def begin():
            flow.active = True
            self.flows.append(flow)
            self.dirty = True

        if latency > 0:
            self.at(latency, begin)
        else:
            begin()
        return flow

    def allocate(self):
        """Max-min fair rates for the active flows (progressive filling)."""
        flows = self.flows
        load = {}  # link -> sum of multiplicities of unfrozen flows on it
        for flow in flows:
            flow.rate = 0.0
            for link, mult in flow.links:
                if self.capacity.get(link, math.inf) < math.inf:
                    load[link] = load.get(link, 0.0) + mult
        slack = {link: self.capacity[link] for link in load}
        unfrozen = set(range(len(flows)))
        level = 0.0
        while unfrozen:
            step = math.inf
            for link, total in load.items():
                if total > 0:
                    step = min(step, slack[link] / total)
            if step == math.inf:  # nothing limits the rest
                for i in unfrozen:
                    flows[i].rate = math.inf
                break
            level += step
            full = set()
            for link, total in load.items():
                if total > 0:
                    slack[link] -= step * total
                    if slack[link] <= 1e-9 * self.capacity[link]:
                        full.add(link)
            for i in list(unfrozen):
                flow = flows[i]
                if any(link in full for link, _ in flow.links):
                    flow.rate = level
                    unfrozen.discard(i)
                    for link, mult in flow.links:
                        if link in load:
                            load[link] -= mult
            for link in full:
                load[link] = 0.0
        self.dirty = False

    def run(self, until=math.inf):
        """Run until nothing is left to do (or until); returns the time."""
        while self.flows or self.timers:
            if self.dirty:
                self.allocate()
            next_done = math.inf
            for flow in self.flows:
                if flow.rate == math.inf:
                    next_done = 0.0
                    break
                if flow.rate > 0:
                    next_done = min(next_done, flow.remaining / flow.rate)
            next_timer = self.timers[0][0] - self.now if self.timers else math.inf
            step = min(next_done, next_timer)
            if step == math.inf:
                raise RuntimeError("stalled: flows with no rate and nothing scheduled")
            if self.now + step > until:
                return self.now
            step = max(step, 0.0)
            self.now += step
            self.events += 1
            finished = []
            keep = []
            for flow in self.flows:
                if flow.rate == math.inf:
                    flow.remaining = 0.0
                else:
                    flow.remaining -= flow.rate * step
                if flow.remaining <= EPSILON_BYTES:
                    finished.append(flow)
                else:
                    keep.append(flow)
            if finished:
                self.flows = keep
                self.dirty = True
            while self.timers and self.timers[0][0] <= self.now:
                _, _, callback = heapq.heappop(self.timers)
                callback()
            for flow in finished:
                for link, mult in flow.links:
                    self.link_bytes[link] = self.link_bytes.get(link, 0.0) + flow.size * mult
                flow.on_done()
        return self.now
