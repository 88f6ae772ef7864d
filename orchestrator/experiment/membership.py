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

A membership latency runs from the join (igmp) or the report (proxy) a host issued to the moment the
receiver was carried: the BFIR's (S,G) flow of the op held the receiver's BFER and that BFER's member
ports held the receiver's port, as the leaves' histories of both say (:class:`LeafHistory`; with a
modelled control plane, each change at its modelled moment, from the kernel's receive stamps). The lead,
how long a source waits before its data, is no part of it; the moment the last receiver of a run was
carried says how long a lead the run needed (:func:`lead_needed_ns`).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aidcnet.agent.replay.protocol import Join, Report
from aidcnet.modes import Mode
from aidcnet.timescale import TimeScale
from orchestrator.experiment.igmp_plan import (
    Delivery,
    Window,
    delivery_metrics,
    plan_joins,
    plan_reports,
)
from orchestrator.workloads.trace import TraceOp

# The default lead (:func:`default_lead_s`). igmp: a kernel join goes to the receiver's leaf at once (an
# unsolicited report), the leaf reports it over BIER to every BFIR, and only then does the BFIR's BitString
# include the receiver. Unmodelled, that path is our agents' Python and the kernel's: a second of wall
# time, which is also how long Linux takes at most to repeat a join's report (IGMPv3's unsolicited report
# interval, 1 s), so a report lost once still makes it. proxy: the report goes ahead of the data on the
# same link and the FHR reads it first (aidcnet/agent/igmp/service.py, before_lookup): no lead.
BASE_LEAD_S: dict[Mode, float] = {Mode.IGMP: 1.0, Mode.PROXY: 0.0}
# With a modelled control plane, the lead also covers the model's time for the trace's largest burst of
# control messages, with this margin (the count of messages is an estimate: how the kernel coalesces).
MODEL_MARGIN = 2.0
# Group records per IGMPv3 report over BIER (aidcnet/igmp/node.py MAX_RECORDS): a BFER splits its changes.
OVERLAY_RECORDS = 64


# -- schedules ------------------------------------------------------------------------------------------
def host_joins(
    ops: Iterable[TraceOp], op_group: Mapping[int, str], loopbacks: Mapping[str, str]
) -> dict[str, list[Join]]:
    """igmp: per receiver host, a :class:`Join` of (source loopback, group) for every op it receives:
    at the op's ``t`` (the moment the receiver set is known), the leave when the message is complete.
    Joins come from :func:`igmp_plan.plan_joins`, so each receiver joins once per op."""
    ops = list(ops)
    by_id = {op.id: op for op in ops}
    out: dict[str, list[Join]] = {}
    for m in plan_joins(ops, op_group):
        if m.join:
            op = by_id[m.op]
            out.setdefault(m.host, []).append(Join(op.id, op.t, m.group, loopbacks[op.src]))
    return out


def host_reports(
    ops: Iterable[TraceOp], op_group: Mapping[int, str], loopbacks: Mapping[str, str]
) -> dict[str, list[Report]]:
    """proxy: per source host, its :class:`Report` steps: one naming the receivers' loopbacks before the
    first op of a group (sent at the op's ``t``), an empty one withdrawing them after the group's last op
    was sent (the agent waits ``hold_s`` first; :func:`igmp_plan.plan_reports`)."""
    out: dict[str, list[Report]] = {}
    for step in plan_reports(ops, op_group):
        receivers = tuple(loopbacks[h] for h in step.receivers)
        out.setdefault(step.source, []).append(Report(step.op, step.before, step.group, receivers))
    return out


def membership_changes(mode: Mode, ops: Iterable[TraceOp], op_group: Mapping[int, str]) -> int:
    """How many times a receiver set changes in the run: igmp, every receiver of every op (a join);
    proxy, every report naming receivers (a group's receiver set installed at its FHR)."""
    if mode == Mode.IGMP:
        return sum(1 for m in plan_joins(ops, op_group) if m.join)
    return sum(1 for s in plan_reports(ops, op_group) if s.before)


# -- the default lead ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ControlModel:
    """A lab's modelled control plane (``igmp.control_cost``, ``igmp.control_cost_record``, fabric
    seconds) and the hosts' robustness (each state change a host reports that many times)."""

    cost_s: float = 0.0
    cost_record_s: float = 0.0
    robustness: int = 2

    def service_s(self, messages: int, records: int) -> float:
        return messages * self.cost_s + records * self.cost_record_s


def modelled_join_path_s(
    mode: Mode,
    ops: Iterable[TraceOp],
    op_group: Mapping[int, str],
    leaf_of: Mapping[str, str],
    model: ControlModel,
) -> float:
    """The modelled control planes' time (fabric seconds) for the trace's largest burst (the ops of one
    t), estimated: igmp, each receiver's joins coalesced by its kernel into one report, sent
    ``robustness`` times, served at its leaf, whose change reports (``OVERLAY_RECORDS`` records each)
    are then served at the BFIR behind every other BFER's; proxy, the reports of one t served at each
    first-hop router. 0 when the control plane is not modelled."""
    if not model.cost_s and not model.cost_record_s:
        return 0.0
    bursts: dict[float, list[TraceOp]] = {}
    for op in ops:
        bursts.setdefault(op.t, []).append(op)
    worst = 0.0
    for burst in bursts.values():
        if mode == Mode.PROXY:
            reports = Counter(leaf_of[op.src] for op in _first_ops(burst, op_group))
            worst = max(worst, *(model.service_s(n, n) for n in reports.values()), 0.0)
            continue
        joins = Counter(h for op in burst for h in dict.fromkeys(op.dst))
        at_leaf: dict[str, float] = {}
        for host, n in joins.items():
            at_leaf[leaf_of[host]] = at_leaf.get(leaf_of[host], 0.0) + model.service_s(
                model.robustness, model.robustness * n
            )
        overlay = sum(math.ceil(n / OVERLAY_RECORDS) for n in joins.values())
        worst = max(worst, max(at_leaf.values(), default=0.0) + model.service_s(overlay, sum(joins.values())))
    return worst


def _first_ops(ops: Iterable[TraceOp], op_group: Mapping[int, str]) -> list[TraceOp]:
    seen: set[str] = set()
    out = []
    for op in ops:
        if op_group[op.id] not in seen:
            seen.add(op_group[op.id])
            out.append(op)
    return out


def default_lead_s(mode: Mode, modelled_path_s: float, time_scale: TimeScale) -> float:
    """The wall seconds a source waits by default from an op's t to its data: the mode's base
    (:data:`BASE_LEAD_S`) and the modelled control planes' time for the trace's largest burst with a
    margin (:func:`modelled_join_path_s`), on this scale's wall clock."""
    return BASE_LEAD_S[mode] + time_scale.wall_s(MODEL_MARGIN * modelled_path_s)


# -- when a receiver was carried -------------------------------------------------------------------------
History = list[tuple[int, tuple[Any, ...]]]  # (wall ns, value from then on), in time order; () is absent


@dataclass(frozen=True)
class LeafHistory:
    """One leaf's flows (per (source or None, group) the BFR-ids) and member ports (per group) as they
    changed over a run: its ``show igmp`` history (aidcnet/agent/igmp/service.py)."""

    flows: dict[tuple[str | None, str], History]
    ports: dict[str, History]

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any]) -> LeafHistory:
        flows = {(s, g): [(int(ns), tuple(v)) for ns, v in h] for s, g, h in reply.get("flows", [])}
        ports = {g: [(int(ns), tuple(v)) for ns, v in h] for g, h in reply.get("member_ports", [])}
        return cls(flows, ports)


def value_at(history: History, ns: int) -> tuple[Any, ...]:
    """The value in force at ``ns`` (absent before the first change)."""
    value: tuple[Any, ...] = ()
    for at, v in history:
        if at > ns:
            break
        value = v
    return value


def first_holding(history: History, holds: Any, at_ns: int) -> int | None:
    """The first moment from ``at_ns`` on at which the value in force satisfies ``holds``: ``at_ns``
    itself when the value then does; None when it never does."""
    if holds(value_at(history, at_ns)):
        return at_ns
    return next((ns for ns, value in history if ns > at_ns and holds(value)), None)


@dataclass(frozen=True)
class Carriage:
    """What carries receiver ``host`` of op ``op`` from ``start_ns`` (its join or the report, wall ns): the
    flow (``source``, ``group``) at the BFIR leaf ``bfir`` holding ``bfer``, and the member ports of
    ``group`` at the receiver's leaf ``leaf`` holding ``port``. The (S,G) flow is the one both modes'
    signalling makes (an igmp receiver joins (S,G), a proxy report names (S,G)); a (*,G) flow from a proxy
    receiver's standing join also carries the data, but it is not the report's doing."""

    op: int
    host: str
    start_ns: int
    bfir: str
    source: str
    group: str
    bfer: int
    leaf: str
    port: str


def carried_ns(c: Carriage, histories: Mapping[str, LeafHistory]) -> int | None:
    """When ``c``'s receiver was carried (both held), from ``c.start_ns`` on; None if never."""
    bfir, leaf = histories.get(c.bfir), histories.get(c.leaf)
    if bfir is None or leaf is None:
        return None
    at_bfir = first_holding(bfir.flows.get((c.source, c.group), []), lambda ids: c.bfer in ids, c.start_ns)
    at_port = first_holding(leaf.ports.get(c.group, []), lambda ports: c.port in ports, c.start_ns)
    return None if at_bfir is None or at_port is None else max(at_bfir, at_port)


def lead_needed_ns(carried: Mapping[tuple[int, str], int | None], due_ns: Mapping[int, int]) -> int | None:
    """How long after its op's t (``due_ns``: wall ns) the last receiver was carried: the shortest lead
    that would have had every receiver in place before its data (None: nobody was carried)."""
    waits = [ns - due_ns[op] for (op, _host), ns in carried.items() if ns is not None]
    return max(waits, default=None)


def suggested_lead_ms(needed_ns: int) -> int:
    """A lead to tell the user: what the run needed, half again for the next run's spread, in whole
    hundreds of milliseconds."""
    return max(100, math.ceil(needed_ns * 1.5 / 1e8) * 100)


# -- judgement ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MembershipResult:
    """One run's membership figures; latencies in seconds (fabric ones on a shaped lab), from each join
    or report to its receiver carried; ``never_carried``: receivers whose memberships never got there."""

    changes: int
    latencies: tuple[float, ...]
    wrong: int
    missed: int
    time_scale: TimeScale
    never_carried: int = 0
    lead_needed_s: float | None = None  # wall seconds (the lead is the user's, on the wall clock)

    def to_dict(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {
            "changes": self.changes,
            "latency_samples": len(lat),
            "latency_p50_s": statistics.median(lat) if lat else None,
            "latency_p99_s": _quantile(lat, 0.99),
            "latency_max_s": lat[-1] if lat else None,
            "latency_from": "join or report to the BFIR's flow and the BFER's port",
            "never_carried": self.never_carried,
            "lead_needed_s": self.lead_needed_s,
            "wrong": self.wrong,
            "missed": self.missed,
            "time": "fabric" if self.time_scale.shaped else "wall",
        }


def _quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted ``values``."""
    if not values:
        return None
    return values[max(0, math.ceil(q * len(values)) - 1)]


def igmp_windows(
    joins: Mapping[str, Iterable[list[Any]]],
    op_t: Mapping[int, float],
    start_ns: int,
    time_scale: TimeScale,
) -> list[Window]:
    """Windows from the receivers' own accounts ``[op id, join ns, leave ns or None]``: from the op's
    ``t`` (when its receivers are known; the join is issued then, and the time a host takes to issue it
    is part of the receiver-driven cost) to the leave. A join the host never made has no window."""
    out = []
    for host, events in joins.items():
        for op_id, _join_ns, leave_ns in events:
            left = None if leave_ns is None else _seconds(leave_ns - start_ns, time_scale)
            # A trace's t is fabric time already (docs/trace-format.md).
            out.append(Window(int(op_id), host, op_t[int(op_id)], left))
    return out


def proxy_windows(
    ops: Iterable[TraceOp],
    op_group: Mapping[int, str],
    reports: Mapping[str, Iterable[list[Any]]],
    start_ns: int,
    time_scale: TimeScale,
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
        left = None if withdrawn is None else _seconds(withdrawn - start_ns, time_scale)
        for host in dict.fromkeys(op.dst):
            windows.append(Window(op.id, host, head.t, left))
            if op.id == head.id:
                changes.add((op.id, host))
    return windows, changes


def deliveries_from(
    records: Mapping[str, Mapping[int, Mapping[str, Any]]], start_ns: int, time_scale: TimeScale
) -> list[Delivery]:
    """Each receiver record's first packet (``first_ns``) as a delivery in run time."""
    return [
        Delivery(int(msg_id), host, _seconds(int(rec["first_ns"]) - start_ns, time_scale))
        for host, recs in records.items()
        for msg_id, rec in recs.items()
        if rec.get("first_ns") is not None
    ]


def judge(
    windows: list[Window],
    deliveries: list[Delivery],
    changes: int,
    time_scale: TimeScale,
    carriages: Iterable[Carriage] = (),
    histories: Mapping[str, LeafHistory] | None = None,
    due_ns: Mapping[int, int] | None = None,
) -> MembershipResult:
    """Wrong and missed deliveries over every window; a latency per carriage, from its start to the
    moment its receiver was carried (:func:`carried_ns`), and the lead the run needed (``due_ns``: each
    op's t on the wall clock)."""
    m = delivery_metrics(windows, deliveries)
    carried = {(c.op, c.host): (c.start_ns, carried_ns(c, histories or {})) for c in carriages}
    latencies = tuple(
        time_scale.fabric_s_of_ns(end - start) for start, end in carried.values() if end is not None
    )
    never = sum(1 for _start, end in carried.values() if end is None)
    needed = None
    if due_ns is not None:
        ns = lead_needed_ns({k: end for k, (_s, end) in carried.items()}, due_ns)
        needed = None if ns is None else max(0, ns) / 1e9
    return MembershipResult(changes, latencies, m.wrong, m.missed, time_scale, never, needed)


def _seconds(ns: int, time_scale: TimeScale) -> float:
    return time_scale.fabric_s_of_ns(ns)


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
