"""What a model run counts, in the shape of a replay's run (``docs/results-format.md``), plus what only a
model can say: which link counters are exact and which are the expectation of a kernel hash.

Links are indexed by direction: ``2*i`` is link ``i`` of the plan from its a end to its b end, ``2*i+1``
back. Deterministic traffic adds integers; traffic the kernel spreads with its ECMP hash (whose seed is
random per boot, so no model can replay it) adds its expected share as a float and marks the direction
*hashed*. Sums over a whole tier boundary stay exact: every path crosses it the same number of times,
whichever member of the ECMP group the hash picks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aidcnet.modes import MODELLED, Mode, in_order
from orchestrator.experiment.records import LinkCounters, link_id

# The message modes both engines model (the plan engine also the collectives), in report order.
MODES: tuple[Mode, ...] = in_order(MODELLED)


@dataclass
class LinkLoad:
    """One link's model counters. ``*_exact`` says the direction carried no hashed traffic, so its
    counters must equal the kernel's to the byte; otherwise they are the expectation."""

    link: str
    a: str
    b: str
    a_to_b_bytes: float
    a_to_b_packets: float
    b_to_a_bytes: float
    b_to_a_packets: float
    a_to_b_exact: bool = True
    b_to_a_exact: bool = True

    @property
    def a_node(self) -> str:
        return self.a.split(":", 1)[0]

    @property
    def b_node(self) -> str:
        return self.b.split(":", 1)[0]

    def counters(self) -> LinkCounters:
        """As a replay's ``links[]`` entry (expectations rounded to whole bytes and packets)."""
        return LinkCounters(
            link=self.link,
            a_to_b_bytes=round(self.a_to_b_bytes),
            a_to_b_packets=round(self.a_to_b_packets),
            b_to_a_bytes=round(self.b_to_a_bytes),
            b_to_a_packets=round(self.b_to_a_packets),
        )


class Tally:
    """Accumulators over the link directions of one fabric and the agents' counters."""

    def __init__(self, n_links: int):
        self.exact_bytes = np.zeros(2 * n_links, dtype=np.int64)
        self.exact_packets = np.zeros(2 * n_links, dtype=np.int64)
        self.spread_bytes = np.zeros(2 * n_links, dtype=np.float64)
        self.spread_packets = np.zeros(2 * n_links, dtype=np.float64)
        self.hashed = np.zeros(2 * n_links, dtype=bool)
        self.agents: dict[str, Counter[str]] = {}

    def add(self, direction: int, nbytes: int, packets: int) -> None:
        self.exact_bytes[direction] += nbytes
        self.exact_packets[direction] += packets

    def add_share(self, direction: int, share: float, nbytes: int, packets: int) -> None:
        if share == 1:
            self.add(direction, nbytes, packets)
            return
        self.spread_bytes[direction] += share * nbytes
        self.spread_packets[direction] += share * packets
        self.hashed[direction] = True

    def count(self, node: str, name: str, n: int = 1) -> None:
        self.agents.setdefault(node, Counter())[name] += n

    def bytes(self) -> np.ndarray:
        return self.exact_bytes + self.spread_bytes

    def packets(self) -> np.ndarray:
        return self.exact_packets + self.spread_packets


@dataclass
class ModelRun:
    """What a replay of one trace in one mode would count, computed instead of measured."""

    lab: str
    mode: Mode
    links: list[LinkLoad]
    # node -> agent counter (the names of the agents' ``show counters``) -> count over the run
    agents: dict[str, dict[str, int]]
    # "tx_tier>rx_tier" (0 host, 1 leaf, 2 spine, ...) -> [bytes, packets]; exact even where hashed
    tier_sums: dict[str, list[int]]
    sources: list[str]
    source_egress_bytes: int
    source_egress_packets: int
    # Mode-specific figures: BIER packets per op, header vs payload bytes, INA bytes, plane shares, ...
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def total_fabric_bytes(self) -> float:
        return sum(lk.a_to_b_bytes + lk.b_to_a_bytes for lk in self.links)

    @property
    def total_fabric_packets(self) -> float:
        return sum(lk.a_to_b_packets + lk.b_to_a_packets for lk in self.links)

    def link(self, name: str) -> LinkLoad:
        for lk in self.links:
            if lk.link == name:
                return lk
        raise KeyError(f"no link {name!r} in the model of lab {self.lab}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "lab": self.lab,
            "mode": self.mode,
            "sources": self.sources,
            "source_egress_bytes": self.source_egress_bytes,
            "source_egress_packets": self.source_egress_packets,
            "total_fabric_bytes": self.total_fabric_bytes,
            "total_fabric_packets": self.total_fabric_packets,
            "tier_sums": self.tier_sums,
            "stats": self.stats,
            "links": [lk.__dict__ for lk in self.links],
            "agents": self.agents,
        }


def link_loads(endpoints: list[tuple[str, str]], tally: Tally) -> list[LinkLoad]:
    b, p = tally.bytes(), tally.packets()
    out = []
    for i, (a, z) in enumerate(endpoints):
        out.append(
            LinkLoad(
                link=link_id(a, z),
                a=a,
                b=z,
                a_to_b_bytes=_num(b[2 * i]),
                a_to_b_packets=_num(p[2 * i]),
                b_to_a_bytes=_num(b[2 * i + 1]),
                b_to_a_packets=_num(p[2 * i + 1]),
                a_to_b_exact=not tally.hashed[2 * i],
                b_to_a_exact=not tally.hashed[2 * i + 1],
            )
        )
    return out


def _num(x: float) -> float:
    """Whole numbers as int (exact counters print without '.0'), expectations as float."""
    return int(x) if float(x).is_integer() else float(x)


def tier_sums(
    endpoints: list[tuple[str, str]], tiers: dict[str, int | None], bytes_: np.ndarray, packets: np.ndarray
) -> dict[str, list[int]]:
    """Bytes and packets summed per (transmitting tier, receiving tier). Integers: every path crosses a
    tier boundary the same number of times whichever ECMP member carries it, so these sums are exact."""
    sums: dict[str, list[float]] = {}
    for i, (a, z) in enumerate(endpoints):
        ta, tz = tiers.get(a.split(":", 1)[0]), tiers.get(z.split(":", 1)[0])
        for d, key in ((0, f"{ta}>{tz}"), (1, f"{tz}>{ta}")):
            s = sums.setdefault(key, [0.0, 0.0])
            s[0] += bytes_[2 * i + d]
            s[1] += packets[2 * i + d]
    return {k: [round(v[0]), round(v[1])] for k, v in sorted(sums.items())}


def source_egress(links: list[LinkLoad], sources: set[str]) -> tuple[int, int]:
    """As ``orchestrator.experiment.metrics.source_egress``: what the sources put on all of their data
    ports."""
    nbytes = npackets = 0.0
    for lk in links:
        if lk.a_node in sources:
            nbytes += lk.a_to_b_bytes
            npackets += lk.a_to_b_packets
        if lk.b_node in sources:
            nbytes += lk.b_to_a_bytes
            npackets += lk.b_to_a_packets
    return round(nbytes), round(npackets)
