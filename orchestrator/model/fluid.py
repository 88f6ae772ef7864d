"""Flows sharing links at max-min fair rates, in fabric time: the engine of the time model
(``orchestrator.model.timing``). Pure numpy: no I/O, no clock, no time scale.

A :class:`Flow` is one transfer as the links see it: the bytes (and packets) it puts on each link
direction, whatever the mode made of it (a unicast copy along its path, with ECMP's expected shares; a
BIER replication tree, one copy per tree edge; one INA packet over one hop). Its *volume* is its bytes
on its most loaded direction, and it progresses at one rate in volume bytes per second: on a direction
where it carries ``b`` bytes it uses ``rate * b / volume`` of the capacity. So a tree flow moves at the
pace of its slowest branch (its source sends each packet once, and our senders are lossless and
back-pressured: docs/time-and-fidelity.md), and a flow split by ECMP uses each member in proportion.

Rates are max-min fair over every direction (progressive filling), recomputed whenever a flow starts
or ends (:func:`max_min_rates`). A flow's last byte leaves its bottleneck at its *finish*; it is
*delivered* ``latency`` later (the store-and-forward of its last packet over the other hops, computed by
the caller), and only then may what depends on it start (:meth:`FluidNetwork.run`'s ``on_delivered``).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Relative tolerance: shares this close count as equal, a flow with this little of its volume left is
# done (float rounding over many rate changes, never a modelling choice).
REL = 1e-9


class FluidError(ValueError):
    pass


@dataclass(eq=False)
class Flow:
    """One transfer's bytes and packets per link direction. ``tag`` is the caller's, handed back on
    delivery; ``latency`` is added between the last byte leaving the bottleneck and the delivery.
    Flows with the same ``queue`` leave one after the other in the order they started (a socket, a port:
    first in, first out); flows without one share their links with every other from the start."""

    key: Hashable
    directions: np.ndarray
    nbytes: np.ndarray
    packets: np.ndarray
    latency: float = 0.0
    tag: Any = None
    queue: Hashable | None = None
    volume: float = field(init=False)
    weight: np.ndarray = field(init=False)  # capacity used per unit of rate, per direction
    packet_weight: np.ndarray = field(init=False)  # packets per volume byte, per direction

    def __post_init__(self) -> None:
        self.directions = np.asarray(self.directions, dtype=np.int64)
        self.nbytes = np.asarray(self.nbytes, dtype=np.float64)
        self.packets = np.asarray(self.packets, dtype=np.float64)
        if not len(self.directions) or not len(self.directions) == len(self.nbytes) == len(self.packets):
            raise FluidError(f"flow {self.key!r}: give bytes and packets for each of its link directions")
        if (self.nbytes <= 0).any():
            raise FluidError(f"flow {self.key!r}: every direction it lists must carry bytes")
        self.volume = float(self.nbytes.max())
        self.weight = self.nbytes / self.volume
        self.packet_weight = self.packets / self.volume


def max_min_rates(
    capacity: np.ndarray, inc_flow: np.ndarray, inc_dir: np.ndarray, inc_w: np.ndarray, n_flows: int
) -> tuple[np.ndarray, np.ndarray]:
    """Max-min fair rates of ``n_flows`` flows and the capacity each direction has left.

    Incidences (flow, direction, weight) come grouped by flow, every flow with at least one. Each round
    freezes the flows of every direction whose fair share is the smallest along all of its flows' paths
    (a *local* bottleneck: none of its flows could get more anywhere else), so a round settles many
    bottlenecks at once and the rounds follow the longest chain of bottlenecks, not their number. The
    result is the progressive filling's: raising every unfrozen flow together until a direction fills,
    freezing the flows through it, and so on. Frozen flows leave the arrays, so rounds get cheaper.
    """
    n_dirs = len(capacity)
    left = np.array(capacity, dtype=np.float64)
    rate = np.zeros(n_flows)
    f, d, w = inc_flow, inc_dir, inc_w
    while len(f):
        first = np.concatenate(([True], f[1:] != f[:-1]))
        segment = np.cumsum(first) - 1
        load = np.bincount(d, weights=w, minlength=n_dirs)
        share = np.full(n_dirs, np.inf)
        np.divide(left, load, out=share, where=load > 0)
        mine = share[d]
        flow_min = np.minimum.reduceat(mine, np.flatnonzero(first))
        # A direction is a local bottleneck when none of its flows has a smaller share elsewhere.
        elsewhere = flow_min[segment] * (1 + REL) < mine
        tight = np.bincount(d, weights=elsewhere, minlength=n_dirs) == 0
        frozen = np.bincount(segment, weights=tight[d]) > 0
        done = frozen[segment]
        rate[f[first][frozen]] = flow_min[frozen]
        left -= np.bincount(d[done], weights=w[done] * flow_min[segment[done]], minlength=n_dirs)
        np.maximum(left, 0.0, out=left)
        f, d, w = f[~done], d[~done], w[~done]
    return rate, left


@dataclass
class FlowTimes:
    start: float
    finish: float  # its last byte left its bottleneck
    delivered: float  # finish + latency: its last receiver holds it


@dataclass
class FluidRun:
    """What :meth:`FluidNetwork.run` saw: every flow's times, and per direction and node what paced them."""

    flows: dict[Hashable, FlowTimes]
    end: float
    saturated_s: np.ndarray  # per direction: fabric seconds it was full (a bottleneck of some flow)
    carried: np.ndarray  # per direction: bytes
    carried_packets: np.ndarray  # per direction: packets
    clock: np.ndarray  # the moments rates changed, fabric seconds
    sent: np.ndarray  # [moment, node]: packets each node had sent by then (linear in between)
    received: np.ndarray  # [moment, node]: packets each node had received by then


class FluidNetwork:
    """Link directions with capacities (bytes per fabric second; 0 is a link that is down) and the nodes
    that transmit and receive on each. :meth:`start` flows, then :meth:`run` them to the end."""

    def __init__(
        self,
        capacity: np.ndarray,
        sender: np.ndarray,
        receiver: np.ndarray,
        n_nodes: int,
        names: list[str] | None = None,
    ):
        self.capacity = np.asarray(capacity, dtype=np.float64)
        self.sender = np.asarray(sender, dtype=np.int64)
        self.receiver = np.asarray(receiver, dtype=np.int64)
        self.n_nodes = n_nodes
        self.names = names
        self._starts: list[tuple[float, int, Flow]] = []
        self._deliveries: list[tuple[float, int, Flow]] = []
        # Moments the caller asked to be called at (a compute phase ending): (at, seq, callback).
        self._timers: list[tuple[float, int, Callable[[float], None]]] = []
        self._seq = itertools.count()
        self.times: dict[Hashable, FlowTimes] = {}

    def start(self, flow: Flow, at: float) -> None:
        down = flow.directions[self.capacity[flow.directions] <= 0]
        if len(down):
            where = self.names[int(down[0])] if self.names else f"direction {int(down[0])}"
            raise FluidError(f"its flow {flow.key!r} crosses {where}, which is down: nothing of it arrives")
        if flow.key in self.times:
            raise FluidError(f"flow {flow.key!r} started twice")
        self.times[flow.key] = FlowTimes(at, np.inf, np.inf)
        heapq.heappush(self._starts, (at, next(self._seq), flow))

    def call_at(self, at: float, callback: Callable[[float], None]) -> None:
        """Call ``callback(at)`` when the run's clock reaches ``at`` (after the deliveries due then); it may
        start flows and set further timers. What the links do in between is not its concern: a compute
        phase, a release time."""
        heapq.heappush(self._timers, (at, next(self._seq), callback))

    def run(self, on_delivered: Callable[[Flow, float], None] | None = None) -> FluidRun:
        state = _Active(self)
        firsts = [q[0][0] for q in (self._starts, self._timers) if q]
        now = min(firsts) if firsts else 0.0
        while self._starts or self._deliveries or self._timers or state.busy:
            state.settle()
            nxt = min(
                self._starts[0][0] if self._starts else np.inf,
                self._deliveries[0][0] if self._deliveries else np.inf,
                self._timers[0][0] if self._timers else np.inf,
                now + state.time_to_next_finish(),
            )
            state.advance(nxt - now)
            now = nxt
            state.mark(now)
            for flow in state.take_finished(force=not self._due(now)):
                self.times[flow.key].finish = now
                heapq.heappush(self._deliveries, (now + flow.latency, next(self._seq), flow))
            while self._starts and self._starts[0][0] <= now:
                state.add(heapq.heappop(self._starts)[2])
            while self._deliveries and self._deliveries[0][0] <= now:
                flow = heapq.heappop(self._deliveries)[2]
                self.times[flow.key].delivered = now
                if on_delivered is not None:
                    on_delivered(flow, now)
            while self._timers and self._timers[0][0] <= now:
                heapq.heappop(self._timers)[2](now)
        counts = np.asarray(state.curve).reshape(len(state.clock), 2 * self.n_nodes)
        return FluidRun(
            flows=self.times,
            end=now,
            saturated_s=state.saturated_s,
            carried=state.carried,
            carried_packets=state.carried_packets,
            clock=np.asarray(state.clock),
            sent=counts[:, : self.n_nodes],
            received=counts[:, self.n_nodes :],
        )

    def _due(self, now: float) -> bool:
        return any(bool(q) and q[0][0] <= now for q in (self._starts, self._deliveries, self._timers))


class _Active:
    """The flows under way in numbered slots, their incidences as flat arrays for :func:`max_min_rates`
    (kept from one change to the next: appended to, masked), the flows waiting behind another in their
    queue, and what the links and nodes did."""

    def __init__(self, net: FluidNetwork):
        self.net = net
        self.slots: list[Flow | None] = []
        self.alive = np.zeros(0, dtype=bool)
        self.left = np.zeros(0)  # volume bytes each slot's flow has still to send
        self.volume = np.zeros(0)
        self.rate = np.zeros(0)
        self.count = 0
        self.new: list[int] = []  # slots filled since the arrays were last built
        self.inc_slot = np.zeros(0, dtype=np.int64)
        self.inc_dir = np.zeros(0, dtype=np.int64)
        self.inc_w = np.zeros(0)
        self.inc_pw = np.zeros(0)
        self.waiting: dict[Hashable, deque[Flow]] = {}  # queue -> flows behind its head
        self.dirty = True
        n_dirs = len(net.capacity)
        self.saturated_s = np.zeros(n_dirs)
        self.carried = np.zeros(n_dirs)
        self.carried_packets = np.zeros(n_dirs)
        self.packets = np.zeros(2 * net.n_nodes)  # sent by each node, then received by each
        self.clock: list[float] = []
        self.curve: list[np.ndarray] = []

    @property
    def busy(self) -> bool:
        return self.count > 0

    def add(self, flow: Flow) -> None:
        if flow.queue is not None:
            if flow.queue in self.waiting:
                self.waiting[flow.queue].append(flow)
                return
            self.waiting[flow.queue] = deque()
        self._begin(flow)

    def _begin(self, flow: Flow) -> None:
        self.new.append(len(self.slots))
        self.slots.append(flow)
        self.count += 1
        self.dirty = True

    def settle(self) -> None:
        """Rates for the current set of flows (only when it changed)."""
        if not self.dirty:
            return
        self.dirty = False
        self._arrays()
        capacity = self.net.capacity
        self.rate, spare = max_min_rates(capacity, self.inc_slot, self.inc_dir, self.inc_w, len(self.slots))
        self.full = (capacity - spare > 0) & (spare <= REL * capacity)
        slot_rate = self.rate[self.inc_slot]
        self.dir_rate = np.bincount(self.inc_dir, weights=slot_rate * self.inc_w, minlength=len(capacity))
        n = self.net.n_nodes
        pps = slot_rate * self.inc_pw
        self.dir_pps = np.bincount(self.inc_dir, weights=pps, minlength=len(capacity))
        self.node_pps = np.bincount(self.net.sender[self.inc_dir], weights=pps, minlength=2 * n)
        self.node_pps[n:] = np.bincount(self.net.receiver[self.inc_dir], weights=pps, minlength=n)

    def _arrays(self) -> None:
        """Drop the incidences of flows that ended, append those of flows that began."""
        grown = len(self.slots) - len(self.alive)
        if grown:
            self.alive = np.append(self.alive, np.ones(grown, dtype=bool))
            volume = np.fromiter((f.volume for f in self.slots[-grown:] if f), dtype=np.float64, count=grown)
            self.volume = np.append(self.volume, volume)
            self.left = np.append(self.left, volume)
        keep = self.alive[self.inc_slot]
        parts = [(self.inc_slot[keep], self.inc_dir[keep], self.inc_w[keep], self.inc_pw[keep])]
        for i in self.new:
            flow = self.slots[i]
            assert flow is not None
            parts.append((np.full(len(flow.directions), i), flow.directions, flow.weight, flow.packet_weight))
        self.new = []
        columns = (np.concatenate(a) for a in zip(*parts, strict=True))
        self.inc_slot, self.inc_dir, self.inc_w, self.inc_pw = columns
        if len(self.slots) > 2 * self.count + 1024:
            self._renumber()

    def _renumber(self) -> None:
        index = np.cumsum(self.alive) - 1
        self.inc_slot = index[self.inc_slot]
        self.slots = [f for f, a in zip(self.slots, self.alive, strict=True) if a]
        self.left, self.volume = self.left[self.alive], self.volume[self.alive]
        self.alive = np.ones(len(self.slots), dtype=bool)

    def time_to_next_finish(self) -> float:
        if not self.count:
            return np.inf
        return float((self.left[self.alive] / self.rate[self.alive]).min())

    def advance(self, dt: float) -> None:
        if dt <= 0 or not self.count:
            return
        self.left -= self.rate * dt
        self.saturated_s[self.full] += dt
        self.carried += self.dir_rate * dt
        self.carried_packets += self.dir_pps * dt
        self.packets += self.node_pps * dt

    def mark(self, now: float) -> None:
        if self.clock and self.clock[-1] == now:
            self.curve[-1] = self.packets.copy()
            return
        self.clock.append(now)
        self.curve.append(self.packets.copy())

    def take_finished(self, force: bool) -> list[Flow]:
        """Flows with (next to) nothing left, each queue's next flow taking its place; with ``force`` and
        none done, the nearest one (rounding must not stall the clock)."""
        if not self.count:
            return []
        done = self.alive & (self.left <= REL * self.volume)
        if not done.any():
            if not force:
                return []
            eta = np.where(self.alive, self.left / np.maximum(self.rate, 1e-300), np.inf)
            done[int(np.argmin(eta))] = True
        out = []
        for i in np.flatnonzero(done):
            flow = self.slots[i]
            assert flow is not None
            out.append(flow)
            behind = self.waiting.get(flow.queue) if flow.queue is not None else None
            if behind and _same_shape(behind[0], flow):
                # The queue's next flow takes the same links in the same proportions: every rate stays.
                nxt = self.slots[i] = behind.popleft()
                self.left[i] = self.volume[i] = nxt.volume
                continue
            self.slots[i] = None
            self.alive[i] = False
            self.left[i] = 0.0
            self.count -= 1
            self.dirty = True
            if behind:
                self._begin(behind.popleft())
            elif flow.queue is not None:
                del self.waiting[flow.queue]
        return out


def _same_shape(a: Flow, b: Flow) -> bool:
    return (
        np.array_equal(a.directions, b.directions)
        and np.array_equal(a.weight, b.weight)
        and np.array_equal(a.packet_weight, b.packet_weight)
    )
