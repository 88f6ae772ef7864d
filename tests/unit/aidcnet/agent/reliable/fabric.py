"""The event loop the in-memory reliable fabrics share (test_node.py over host-BIER,
test_net_bier.py over network-BIER): links with a delay and a seeded loss, a timer tick that
polls every node, BIER tables from the project's routing."""

from __future__ import annotations

import heapq
import random
from collections import Counter

from aidcnet.agent.reliable.node import ReliableNode
from aidcnet.bier.bift import build_bifts
from aidcnet.bier.bitstring import bfr_id_to_si_bit
from aidcnet.bier.forwarding import forward
from aidcnet.bier.routing import compute_birts, undirected

BSL = 64
TTL = 64
DELAY = 50e-6
TICK = 250e-6


class EventFabric:
    """``edges`` between named nodes, BFR-ids ``ids``, addresses ``addr``; subclasses make the nodes and
    say what an arriving item does (:meth:`arrive`)."""

    def __init__(
        self, edges: list[tuple[str, str]], ids: dict[str, int], addr: dict[str, str], loss: float, seed: int
    ) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        self.addr = addr
        self.now = 0.0
        self.events: list[tuple[float, int, str, tuple]] = []
        self.n = 0
        self.adj = undirected(edges)
        self.bift = {node: build_bifts(birt, BSL)[0] for node, birt in compute_birts(self.adj, ids).items()}
        self.dropped: Counter[str] = Counter()  # items lost on a link, by kind
        self.nodes: dict[str, ReliableNode] = {}

    def toward(self, node: str, bfr_id: int) -> str | None:
        _si, bit = bfr_id_to_si_bit(bfr_id, BSL)
        alts = self.bift[node].entries[bit]
        return self.addr[alts[0][1]] if alts else None

    def _link(self, frm: str, to: str, item: tuple, hops: int = 1) -> None:
        for _ in range(hops):
            if self.rng.random() < self.loss:
                self.dropped[item[0]] += 1
                return
        self.n += 1
        heapq.heappush(self.events, (self.now + hops * DELAY, self.n, to, (frm, *item)))

    def replicate(self, node: str, inner: bytes, bits: int) -> tuple[int, int]:
        """A BIER packet forwarded at ``node`` (RFC 8279 §6.5): its copies onto the links; returns the
        downstream id-mask (the copies' BitStrings and the own bit) and the own bit (local delivery)."""
        res = forward(self.bift[node], bits, TTL)
        down = res.local
        for nbr, cbits, _ in res.copies:
            down |= cbits
            self._link(node, nbr, ("bier", inner, cbits))
        return down, res.local

    def arrive(self, node: str, frm: str, kind: str, rest: list) -> None:
        raise NotImplementedError

    def run(self, until: float = 20.0) -> None:
        next_tick = 0.0
        while self.now < until and not self.finished():
            if self.events and self.events[0][0] <= next_tick:
                self.now, _, node, (frm, kind, *rest) = heapq.heappop(self.events)
                self.arrive(node, frm, kind, rest)
                continue
            self.now = next_tick
            next_tick += TICK
            for node in self.nodes.values():
                node.poll(self.now)

    def finished(self) -> bool:
        return all(n.sending_done for n in self.nodes.values()) and not self.events

    def counters(self, node: str) -> Counter[str]:
        return Counter(self.nodes[node].totals())
