"""A router's control plane as a modelled server, pure (docs/igmp.md, "The modelled control plane").

Links have rates and the fabric runs on a known time scale; our agents' Python does not, so the time a
leaf takes to handle an IGMP report is our speed, not a router's. With a modelled control plane each
control message a router handles (a kernel report or a Receiver Proxy Report from a host port, a BFER's
report over BIER) takes a fixed ``cost`` of fabric time, one message at a time, in the order they arrived
at the router (a FIFO single server). A message that arrives at ``a`` while the server is busy until
``b`` takes effect at ``max(a, b) + cost``. The agent holds it until then, so the membership latency a
run measures is the links' time plus the model's, and it is faithful only if the agent had each
message in hand before its modelled moment: a message applied more than one ``cost`` after it is late,
counted, and spoils the run's membership times.

A message may cost more than its base: ``per_record`` adds a cost per IGMPv3 group record it carries
(:func:`group_records`), the per-(S,G) state and forwarding-table work a router does, so a kernel's
report of 40 joins is not as cheap as a Receiver Proxy Report of one.

Times are integers of nanoseconds on one clock (the agent uses the kernel's receive stamps, wall clock);
costs are already scaled to that clock (fabric cost x the lab's time scale).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from typing import Generic, TypeVar

Item = TypeVar("Item")


_V3_REPORT = 0x22
_ONE_RECORD = frozenset({0x12, 0x16, 0x17})  # IGMPv1/v2 reports and the v2 Leave: one group each


def group_records(packet: bytes | bytearray | memoryview) -> int:
    """How many group records the IGMP message in this IPv4 packet carries, from its header alone (the
    message is decoded, and may be refused, only when it is served): a v3 report's count, 1 for a v1/v2
    report or Leave, 0 for a query or anything unreadable."""
    if len(packet) < 20:
        return 0
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl + 8:
        return 0
    kind = packet[ihl]
    if kind == _V3_REPORT:
        return int.from_bytes(packet[ihl + 6 : ihl + 8], "big")
    return 1 if kind in _ONE_RECORD else 0


class ControlPlane(Generic[Item]):
    """One router's control processor. :meth:`admit` what arrived (with its arrival stamp),
    :meth:`pop_due` what has finished by ``now``; :meth:`next_due` says when to look again.

    Service is in arrival order. A message admitted after a later-arrived one has already been served
    (it was read late) starts when the server is free: the model never reorders the past."""

    def __init__(self, cost_ns: int, per_record_ns: int = 0) -> None:
        if cost_ns <= 0 or per_record_ns < 0:
            raise ValueError(
                f"control-plane cost {cost_ns} ns must be above zero (0: do not model), and the cost per "
                f"record {per_record_ns} ns not below zero"
            )
        self.cost_ns = cost_ns
        self.per_record_ns = per_record_ns
        self.busy_until = 0
        self._queue: list[tuple[int, int, int, Item]] = []  # (arrival, order, records, item)
        self._order = itertools.count()
        self.counters: Counter[str] = Counter()

    def admit(self, arrival_ns: int, item: Item, records: int = 0) -> None:
        """Queue ``item`` from its arrival; it takes the base cost plus ``records`` x the cost per record."""
        heapq.heappush(self._queue, (arrival_ns, next(self._order), records, item))
        self.counters["admitted"] += 1
        if len(self._queue) > self.counters["queue-max"]:
            self.counters["queue-max"] = len(self._queue)

    def rescale(self, cost_ns: int, per_record_ns: int) -> None:
        """Other costs (the lab's time scale changed): what is queued is served at the new ones, from its
        arrival; the counters go on."""
        if cost_ns <= 0 or per_record_ns < 0:
            raise ValueError(
                f"control-plane cost {cost_ns} ns must be above zero, per record {per_record_ns} not below"
            )
        self.cost_ns, self.per_record_ns = cost_ns, per_record_ns

    def __len__(self) -> int:
        return len(self._queue)

    def next_due(self) -> int | None:
        """The moment the head of the queue takes effect, or None when nothing waits."""
        if not self._queue:
            return None
        arrival, _, records, _ = self._queue[0]
        return max(arrival, self.busy_until) + self.service_ns(records)

    def service_ns(self, records: int) -> int:
        """The modelled time of a message carrying ``records`` group records."""
        return self.cost_ns + records * self.per_record_ns

    def pop_due(self, now_ns: int, limit: int | None = None) -> list[tuple[int, Item]]:
        """The messages whose modelled moment has come (at most ``limit``), in service order, each with
        that moment. The caller applies them at ``now_ns``; lateness (``now_ns`` - moment) is counted
        here, so a caller that takes one at a time counts its own time on the ones before."""
        out: list[tuple[int, Item]] = []
        while (limit is None or len(out) < limit) and (due := self.next_due()) is not None and due <= now_ns:
            arrival, _, records, item = heapq.heappop(self._queue)
            service = self.service_ns(records)
            self.busy_until = due
            late = now_ns - due
            c = self.counters
            c["served"] += 1
            c["service-ns"] += service
            c["wait-ns"] += due - service - arrival
            c["lateness-ns"] += late
            if late > service:
                c["late"] += 1
            out.append((due, item))
        return out


def modelled_moments(jobs: list[tuple[int, int]]) -> list[int]:
    """The reference: when each of ``jobs`` (arrival, service), in arrival order, takes effect at a FIFO
    server starting idle (Lindley's recursion)."""
    out: list[int] = []
    free = 0
    for arrival, service in sorted(jobs, key=lambda j: j[0]):
        free = max(arrival, free) + service
        out.append(free)
    return out
