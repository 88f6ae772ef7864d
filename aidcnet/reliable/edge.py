"""The reliable transport at the edge of network-BIER (docs/reliability.md, "Over network-BIER").

In network-BIER the hosts speak plain IP multicast and the leaves are BFIR and BFER: a BitString names
leaves, never hosts. Two things follow for the reliable transport, both at a leaf:

* **At a BFER leaf** the hosts it delivered a window to acknowledge to it, and no BFR above can tell
  them apart: above the leaf its own bit stands for all of them. :class:`EdgeAggregator` aggregates the
  member hosts' ACKs (an :class:`AckAggregator` over the hosts' ids, which the leaf learns from its
  member ports) and speaks for them upstream as one BFER, its own BFR-id: an AGG-ACK when every member
  host has acknowledged a window, a partial naming itself missing when one has not, a NACK of one host
  as its own (with the cumulative point no further than the oldest window some member still lacks:
  the BFIR takes a NACK's cumulative point as an acknowledgment of everything before it).
* **At the BFIR leaf** the source cannot choose a BitString (it does not know BIER), so the leaf
  narrows a retransmission (flag R) itself: :func:`repair_bfers` keeps the BFERs its own aggregation
  entry for that sequence says have not confirmed it. A repair of a window the leaf holds no entry for
  (everyone confirmed it, or the state was lost) goes to the group's every BFER: duplicates, never loss.

No sockets and no clock: every call takes the time ``now``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable

from aidcnet.reliable import serial
from aidcnet.reliable.aggregator import AckAggregator, AggregatorConfig, FlowKey, Out
from aidcnet.reliable.header import Ack, AggAck, AggNack, Data, Feedback, agg_acks, agg_nacks


class EdgeAggregator:
    """A BFER leaf's member hosts, aggregated into the leaf's own bit (``bfr_id``)."""

    def __init__(self, bfr_id: int, config: AggregatorConfig | None = None) -> None:
        if not 1 <= bfr_id <= 0xFFFF:
            raise ValueError(f"a network-BIER BFER needs a BFR-id 1..65535, not {bfr_id!r}")
        self.bfr_id = bfr_id
        self.hosts = AckAggregator(bfr_id, config)

    @property
    def counters(self) -> Counter[str]:
        return self.hosts.counters

    @property
    def entries(self) -> int:
        return self.hosts.entries

    def on_data(self, data: Data, hosts: int, upstream: Hashable | None, now: float) -> None:
        """DATA this leaf delivered to its member hosts of id-mask ``hosts``."""
        self.hosts.on_data(data, hosts, upstream, now)

    def on_feedback(self, msg: Feedback, now: float) -> list[Out]:
        """Feedback from a member host: what goes upstream, said by this leaf for its hosts."""
        key = (msg.bfir_id, msg.flow_id)
        # The oldest window some member lacks, before the aggregator frees what this message completes.
        floor = self._oldest_open(key)
        return self._as_bfer(self.hosts.on_feedback(msg, now), floor)

    def poll(self, now: float) -> list[Out]:
        return self._as_bfer(self.hosts.poll(now), None)

    def next_deadline(self) -> float | None:
        return self.hosts.next_deadline()

    def forget(self) -> int:
        return self.hosts.forget()

    def _oldest_open(self, key: FlowKey) -> int | None:
        oldest: int | None = None
        for start in self.hosts.flows.get(key, {}):
            if oldest is None or serial.lt(start, oldest):
                oldest = start
        return oldest

    def _as_bfer(self, out: Iterable[Out], floor: int | None) -> list[Out]:
        said: list[Out] = []
        for up, msg in out:
            mine = self._translate(msg, floor)
            if mine is None:
                self.counters["edge-ack-unaccounted"] += 1
            else:
                kind = "nack" if isinstance(mine, Ack | AggNack) else "agg-ack"
                self.counters[f"edge-{kind}-sent"] += 1
                said.append((up, mine))
        return said

    def _translate(self, msg: Feedback, floor: int | None) -> Feedback | None:
        if isinstance(msg, AggNack):
            # Member hosts asked (merged per repair round): this BFER, as one, asks.
            (one,) = agg_nacks(
                msg.bfir_id, msg.flow_id, msg.first, msg.last, self.bfr_id, 1 << (self.bfr_id - 1), 0,
                self.hosts.config.bsl, msg.again,
            )  # fmt: skip
            return one
        if isinstance(msg, AggAck):
            # Cumulative and selective AGG-ACKs go when every member host has the window; a partial when
            # one has not: then this BFER, as one, is missing.
            acked, missing = (0, 1) if msg.partial else (1, 0)
            shift = self.bfr_id - 1
            (one,) = agg_acks(
                msg.bfir_id, msg.flow_id, msg.cum, self.bfr_id, acked << shift, missing << shift,
                self.hosts.config.bsl, msg.first,
            )  # fmt: skip
            return one
        if not msg.nack:
            # One host's ACK the aggregator could not account for (stale, or no state here): it does not
            # speak for the other members, and the BFIR's timer covers what it might have said.
            return None
        cum = msg.cum if floor is None or serial.le(msg.cum, floor) else floor
        return Ack(
            bfir_id=msg.bfir_id, flow_id=msg.flow_id, cum=cum, reporter=self.bfr_id, highest=msg.highest,
            ranges=msg.ranges, nack=True,
        )  # fmt: skip


def repair_bfers(aggregator: AckAggregator, data: Data, bfers: tuple[int, ...]) -> tuple[int, ...]:
    """The BFERs a retransmission of ``data`` goes to from its BFIR leaf: those of ``bfers`` (the group's)
    that the leaf's entry for its window has not seen confirm it; all of ``bfers`` for a first
    transmission, or when no entry says (it was freed when everyone confirmed, or lost)."""
    if not data.retransmit:
        return bfers
    start = data.seq & ~(aggregator.config.window - 1)
    entry = aggregator.flows.get((data.bfir_id, data.flow_id), {}).get(start)
    if entry is None:
        aggregator.counters["repair-to-group"] += 1
        return bfers
    missing = entry.expected & ~entry.held
    narrowed = tuple(b for b in bfers if missing >> (b - 1) & 1)
    if not narrowed:
        aggregator.counters["repair-to-group"] += 1
        return bfers
    aggregator.counters["repair-narrowed"] += 1
    return narrowed
