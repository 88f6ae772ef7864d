"""The ``igmp`` and ``proxy`` replay modes' schedules and judgement, pure (docs/igmp.md).

Built on :mod:`orchestrator.experiment.igmp_plan` (which joins, leaves and reports a trace needs):

* schedules: what each host agent is told: the joins and leaves it makes as a receiver (``igmp``), the
  Receiver Proxy Reports it sends as a source (``proxy``), with the *lead*: the source learns an op's
  receivers at ``t`` (its gating network picked them) and sends the data at ``t + lead``;
* windows: from what the hosts say they did (the moment each join/report was issued, each leave), the
  membership window of every (op, receiver), judged with :func:`igmp_plan.delivery_metrics`;
* control overhead: the IGMP, overlay and proxy packets and bytes from the agents' counter deltas;
* the change-rate search: the fastest time compression of a trace each mode still delivers exactly.

Times from the hosts are wall nanoseconds; latencies are reported in fabric seconds (wall / time scale,
docs/time-and-fidelity.md) when the lab is shaped, else in wall seconds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aidcnet.modes import Mode
from orchestrator.experiment.igmp_plan import (
    Delivery,
    Window,
    delivery_metrics,
    plan_joins,
    plan_reports,
)
from orchestrator.workloads.trace import TraceOp

# How long before its data a receiver set is known, by default (wall seconds). igmp: a kernel join goes
# to the receiver's leaf at once (unsolicited report), the leaf reports it over BIER to every BFIR, and
# only then does the BFIR's BitString include the receiver; the lead covers that path (bench/membership.py
# finds the shortest that still delivers exactly). proxy: the report goes ahead of the data on the same
# link and the FHR reads it first (aidcnet/agent/igmp_service.py, before_lookup), so no lead is needed.
DEFAULT_LEAD_S: dict[Mode, float] = {Mode.IGMP: 0.05, Mode.PROXY: 0.0}
# A receiver leaves when it has the whole message, or this long after the data was due at the latest
# (a message that never completes must not keep its group joined for the rest of the run).
DEFAULT_HOLD_S = 2.0


# -- schedules ------------------------------------------------------------------------------------------
def host_joins(
    ops: Iterable[TraceOp], op_group: Mapping[int, str], loopbacks: Mapping[str, str]
) -> dict[str, list[list[Any]]]:
    """igmp: per receiver host, ``[op id, t join, group, source loopback]`` for every op it receives:
    the join at the op's ``t`` (the moment the receiver set is known), the leave when the message is
    complete. Joins come from :func:`igmp_plan.plan_joins`, so each receiver joins once per op."""
    ops = list(ops)
    by_id = {op.id: op for op in ops}
    out: dict[str, list[list[Any]]] = {}
    for m in plan_joins(ops, op_group):
        if m.join:
            op = by_id[m.op]
            out.setdefault(m.host, []).append([op.id, op.t, m.group, loopbacks[op.src]])
    return out


def host_reports(
    ops: Iterable[TraceOp], op_group: Mapping[int, str], loopbacks: Mapping[str, str]
) -> dict[str, list[list[Any]]]:
    """proxy: per source host, ``[op id, before, group, [receiver loopbacks]]``: a report naming the
    receivers before the first op of a group (sent at the op's ``t``), an empty one withdrawing them
    after the group's last op was sent (the agent waits ``hold_s`` first; :func:`igmp_plan.plan_reports`)."""
    out: dict[str, list[list[Any]]] = {}
    for step in plan_reports(ops, op_group):
        receivers = [loopbacks[h] for h in step.receivers]
        out.setdefault(step.source, []).append([step.op, step.before, step.group, receivers])
    return out


def membership_changes(mode: Mode, ops: Iterable[TraceOp], op_group: Mapping[int, str]) -> int:
    """How many times a receiver set changes in the run: igmp, every receiver of every op (a join);
    proxy, every report naming receivers (a group's receiver set installed at its FHR)."""
    if mode == Mode.IGMP:
        return sum(1 for m in plan_joins(ops, op_group) if m.join)
    return sum(1 for s in plan_reports(ops, op_group) if s.before)


# -- judgement ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MembershipResult:
    """One run's membership figures; latencies in seconds (fabric when ``scale`` is set)."""

    changes: int
    latencies: tuple[float, ...]
    wrong: int
    missed: int
    scale: int | None

    def to_dict(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {
            "changes": self.changes,
            "latency_samples": len(lat),
            "latency_p50_s": statistics.median(lat) if lat else None,
            "latency_p99_s": _quantile(lat, 0.99),
            "latency_max_s": lat[-1] if lat else None,
            "wrong": self.wrong,
            "missed": self.missed,
            "time": "fabric" if self.scale is not None else "wall",
        }


def _quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted ``values``."""
    if not values:
        return None
    return values[max(0, math.ceil(q * len(values)) - 1)]


def igmp_windows(
    joins: Mapping[str, Iterable[list[Any]]], op_t: Mapping[int, float], start_ns: int, scale: int | None
) -> list[Window]:
    """Windows from the receivers' own accounts ``[op id, join ns, leave ns or None]``: from the op's
    ``t`` (when its receivers are known; the join is issued then, and the time a host takes to issue it
    is part of the receiver-driven cost) to the leave. A join the host never made has no window."""
    out = []
    for host, events in joins.items():
        for op_id, _join_ns, leave_ns in events:
            left = None if leave_ns is None else _seconds(leave_ns - start_ns, scale)
            out.append(Window(int(op_id), host, _seconds(int(op_t[int(op_id)] * 1e9), scale), left))
    return out


def proxy_windows(
    ops: Iterable[TraceOp],
    op_group: Mapping[int, str],
    reports: Mapping[str, Iterable[list[Any]]],
    start_ns: int,
    scale: int | None,
) -> tuple[list[Window], set[tuple[int, str]]]:
    """Windows from the sources' accounts ``[op id, before, sent ns]`` of their reports: every op of a
    group is expected at its receivers from the group's first op's ``t`` (when the receivers are known;
    the report is issued then) to the withdrawal. A group whose report was never sent has no windows.
    Also returns the (op, receiver) pairs that are changes (the group's first op), the only ones whose
    latency counts: later ops of the group reuse an installed set."""
    sent: dict[tuple[str, int, bool], int] = {}
    for src, events in reports.items():
        for op_id, before, sent_ns in events:
            sent[(src, int(op_id), bool(before))] = int(sent_ns)
    ops = list(ops)
    first: dict[str, TraceOp] = {}
    last: dict[str, TraceOp] = {}
    for op in ops:
        first.setdefault(op_group[op.id], op)
        last[op_group[op.id]] = op
    windows, changes = [], set()
    for op in ops:
        group = op_group[op.id]
        head, tail = first[group], last[group]
        if (op.src, head.id, True) not in sent:
            continue  # never reported: whatever arrives is wrong, whatever does not is not expected
        withdrawn = sent.get((op.src, tail.id, False))
        left = None if withdrawn is None else _seconds(withdrawn - start_ns, scale)
        for host in dict.fromkeys(op.dst):
            windows.append(Window(op.id, host, _seconds(int(head.t * 1e9), scale), left))
            if op.id == head.id:
                changes.add((op.id, host))
    return windows, changes


def deliveries_from(
    records: Mapping[str, Mapping[int, Mapping[str, Any]]], start_ns: int, scale: int | None
) -> list[Delivery]:
    """Each receiver record's first packet (``first_ns``) as a delivery in run time."""
    return [
        Delivery(int(msg_id), host, _seconds(int(rec["first_ns"]) - start_ns, scale))
        for host, recs in records.items()
        for msg_id, rec in recs.items()
        if rec.get("first_ns") is not None
    ]


def judge(
    windows: list[Window],
    deliveries: list[Delivery],
    changes: int,
    scale: int | None,
    latency_keys: set[tuple[int, str]] | None = None,
) -> MembershipResult:
    """Wrong and missed deliveries over every window; latency over the windows in ``latency_keys``
    (all when None), from the moment the set was known to the first packet at the receiver."""
    m = delivery_metrics(windows, deliveries)
    if latency_keys is not None:
        keep = [w for w in windows if (w.op, w.host) in latency_keys]
        lat = delivery_metrics(keep, [d for d in deliveries if (d.op, d.host) in latency_keys]).latencies
    else:
        lat = m.latencies
    return MembershipResult(changes, lat, m.wrong, m.missed, scale)


def _seconds(ns: int, scale: int | None) -> float:
    return ns / 1e9 / (scale or 1)


# -- control overhead -----------------------------------------------------------------------------------
# Counter names (the agents' `show counters`, docs/igmp.md) -> (what, packets or bytes).
CONTROL_COUNTERS: dict[str, tuple[str, str]] = {
    "igmp.rx": ("igmp from hosts", "packets"),
    "igmp.rx-bytes": ("igmp from hosts", "bytes"),
    "igmp.shell.queries-sent": ("queries", "packets"),
    "igmp.shell.query-bytes-sent": ("queries", "bytes"),
    "igmp.bier-reports-out": ("overlay reports", "packets"),
    "igmp.bier-report-bytes-out": ("overlay reports", "bytes"),
    "igmp.proxy-reports": ("proxy reports", "packets"),
    "replay.proxy-reports-sent": ("proxy reports sent", "packets"),
    "replay.proxy-report-bytes-sent": ("proxy reports sent", "bytes"),
}


def control_overhead(agents: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Counted control traffic of a run, summed over the nodes: kind -> {packets, bytes}.

    ``igmp from hosts`` is every IGMP packet the leaves heard on host ports (kernel reports and
    Receiver Proxy Reports alike, IPv4 header included); ``overlay reports`` the leaves' IGMPv3 reports
    to the BFIRs (the IPv4 packet inside BIER); ``queries`` the leaves' queries; ``proxy reports`` the
    reports the FHRs took as proxy reports. ``total`` is the traffic on the wire: hosts' IGMP, queries
    and overlay (the proxy reports are already in the hosts' IGMP)."""
    out: dict[str, dict[str, int]] = {}
    for counters in agents.values():
        for name, (kind, unit) in CONTROL_COUNTERS.items():
            value = int(counters.get(name, 0))
            if value:
                entry = out.setdefault(kind, {"packets": 0, "bytes": 0})
                entry[unit] += value
    total = {"packets": 0, "bytes": 0}
    for kind in ("igmp from hosts", "queries", "overlay reports"):
        for unit in total:
            total[unit] += out.get(kind, {}).get(unit, 0)
    out["total"] = total
    return out


# -- the modelled control plane ------------------------------------------------------------------------
def control_plane(agents: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """The leaves' modelled control planes over a run (counter deltas summed, docs/igmp.md): messages
    ``served``, ``late`` (applied more than their own service time after their modelled moment),
    ``wait_ns`` (queued behind others), ``service_ns`` (the model's time serving them), ``lateness_ns``
    (ours, past the modelled moments), ``busy_ns`` (our own time applying them), wall nanoseconds;
    ``unstamped``: messages without a kernel receive stamp, counted from when the agent read them."""
    keys = {
        "served": "control.served",
        "late": "control.late",
        "wait_ns": "control.wait-ns",
        "service_ns": "control.service-ns",
        "lateness_ns": "control.lateness-ns",
        "busy_ns": "shell.control-busy-ns",
        "unstamped": "shell.control-unstamped",
    }
    return {key: sum(int(c.get(f"igmp.{name}", 0)) for c in agents.values()) for key, name in keys.items()}


def latency_verdict(cost_s: float, control: Mapping[str, int], run_faithful: bool | None) -> str | None:
    """Why a run's membership latency is not a router's (None: it is). The fabric must have been
    faithful, the control plane modelled (else the latency is our agents' Python), and no modelled
    message late (else our Python, not the model, set its moment)."""
    if not cost_s:
        return "control plane not modelled (igmp.control_cost 0): the latency includes our agents' Python"
    if not run_faithful:
        return "the run was not faithful"
    if control.get("late"):
        return f"{control['late']} control messages applied late (our agents were slower than the model)"
    return None


def latency_is(why: str | None) -> str:
    """What a :func:`latency_verdict` says, in the words the report and the bench print."""
    return "a router's (faithful)" if why is None else f"not a router's: {why}"


# -- the change-rate search -----------------------------------------------------------------------------
@dataclass(frozen=True)
class RateTrial:
    """One run of a trace with op times multiplied by ``stretch``: ``changes`` over ``span_s``."""

    stretch: float
    exact: bool
    changes: int
    span_s: float  # fabric seconds from the first op to the last op's data

    @property
    def rate(self) -> float | None:
        """Receiver-set changes per fabric second."""
        return self.changes / self.span_s if self.span_s > 0 else None


# Stop when the smallest exact stretch is within this factor of the largest inexact one.
RATE_PRECISION = 1.5


def next_stretch(trials: list[RateTrial], *, floor: float = 1e-3, ceiling: float = 1e4) -> float | None:
    """The stretch to try next, or None when found: halve while exact, double while not, then bisect
    geometrically between the smallest exact and the largest inexact stretch below it."""
    if not trials:
        raise ValueError("the search starts from a first trial at stretch 1")
    exact = [t.stretch for t in trials if t.exact]
    inexact = [t.stretch for t in trials if not t.exact]
    if not exact:
        nxt = 2 * max(inexact)
        return nxt if nxt <= ceiling else None
    best = min(exact)
    below = [s for s in inexact if s < best]
    if not below:
        nxt = best / 2
        return nxt if nxt >= floor else None
    worst = max(below)
    if best / worst <= RATE_PRECISION:
        return None
    return (best * worst) ** 0.5


def fastest(trials: list[RateTrial]) -> RateTrial | None:
    """The exact trial with the most changes per second (the rate the mode sustains)."""
    good = [t for t in trials if t.exact and t.rate is not None]
    return max(good, key=lambda t: t.rate or 0.0) if good else None


def stretch_ops(ops: Iterable[TraceOp], stretch: float) -> list[TraceOp]:
    """The same ops with times multiplied by ``stretch`` (< 1: the receiver sets change faster)."""
    return [op.model_copy(update={"t": op.t * stretch}) for op in ops]
