"""Membership planning and delivery metrics for the ``igmp`` and ``proxy`` replay modes (docs/igmp.md).

Pure logic, no I/O. Groups come from :func:`orchestrator.experiment.replay_groups.derive_groups` (one
group per (source, receivers) of the trace), so a group's receiver set never changes; what changes from
op to op is which groups are in use.

``igmp``: every receiver of an op joins the op's group through its kernel just before the op and leaves
just after it, so each op is one membership change per receiver (the worst case the issue asks about).

``proxy``: the source tells its first-hop router the whole receiver set with a Receiver Proxy Report
before the first op of a group, and withdraws it (a report with no receivers) after the group's last op.

Delivery is judged against membership windows: a packet a receiver gets while it is not a member of the
group (before its join or after its leave) is a wrong delivery; a member that never gets an op's packet is
a missed delivery. Latency runs from the moment the receiver set is known at the source (the join or
report was issued) to the first packet at each new receiver, in fabric time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address

from aidcnet.igmp.codec import encode
from aidcnet.igmp.extensions import ProxyReport
from orchestrator.workloads.trace import TraceOp

# IPv4 header with the Router Alert option (RFC 2113): 20 + 4 octets, as IGMPv3 reports are sent.
IPV4_RA_HEADER = 24


@dataclass(frozen=True)
class Membership:
    """Host ``host`` joins (``join``) or leaves ``group`` for op ``op``; before or after it."""

    op: int
    host: str
    group: str
    join: bool


@dataclass(frozen=True)
class ReportStep:
    """The source of op ``op`` sends its first-hop router ``receivers`` for ``group`` (empty: remove)."""

    op: int
    source: str
    group: str
    receivers: tuple[str, ...]
    before: bool


def plan_joins(ops: Iterable[TraceOp], op_group: Mapping[int, str]) -> list[Membership]:
    """Joins before each op and leaves after it, in trace order; each receiver once per op."""
    steps: list[Membership] = []
    for op in ops:
        group = op_group[op.id]
        receivers = list(dict.fromkeys(op.dst))
        steps += [Membership(op.id, h, group, True) for h in receivers]
        steps += [Membership(op.id, h, group, False) for h in receivers]
    return steps


def plan_reports(ops: Iterable[TraceOp], op_group: Mapping[int, str]) -> list[ReportStep]:
    """A report before the first op of each group and an empty one after its last op, in trace order."""
    ops = list(ops)
    last: dict[str, int] = {}
    for i, op in enumerate(ops):
        last[op_group[op.id]] = i
    seen: set[str] = set()
    steps: list[ReportStep] = []
    for i, op in enumerate(ops):
        group = op_group[op.id]
        if group not in seen:
            seen.add(group)
            steps.append(ReportStep(op.id, op.src, group, tuple(dict.fromkeys(op.dst)), True))
        if last[group] == i:
            steps.append(ReportStep(op.id, op.src, group, (), False))
    return steps


def report_bytes(step: ReportStep, source: IPv4Address, addresses: Mapping[str, IPv4Address]) -> int:
    """Octets on the wire for one proxy report: IPv4 with Router Alert plus the IGMPv3 message."""
    report = ProxyReport(IPv4Address(step.group), source, tuple(addresses[h] for h in step.receivers))
    return IPV4_RA_HEADER + len(encode(report.to_report()))


@dataclass(frozen=True)
class Delivery:
    """Receiver ``host`` got a packet of op ``op`` at fabric time ``t``."""

    op: int
    host: str
    t: float


@dataclass(frozen=True)
class Window:
    """``host`` was a member for op ``op`` from ``known`` (join/report issued) to ``left`` (None: still)."""

    op: int
    host: str
    known: float
    left: float | None = None


@dataclass(frozen=True)
class DeliveryMetrics:
    latencies: tuple[float, ...]
    wrong: int
    missed: int


def delivery_metrics(windows: Iterable[Window], deliveries: Iterable[Delivery]) -> DeliveryMetrics:
    """Count wrong and missed deliveries and each member's latency to its first packet.

    A delivery with no window for its (op, host), or outside that window, is wrong. A window with no
    delivery inside it is missed. Latency is first in-window delivery minus ``known``."""
    by_key = {(w.op, w.host): w for w in windows}
    first: dict[tuple[int, str], float] = {}
    wrong = 0
    for d in deliveries:
        w = by_key.get((d.op, d.host))
        if w is None or d.t < w.known or (w.left is not None and d.t > w.left):
            wrong += 1
            continue
        key = (d.op, d.host)
        if key not in first or d.t < first[key]:
            first[key] = d.t
    latencies = tuple(first[k] - by_key[k].known for k in sorted(first))
    missed = sum(1 for k in by_key if k not in first)
    return DeliveryMetrics(latencies, wrong, missed)
