"""Metrics of replay runs: counter deltas, bytes on the fabric, latency, delivery, and run comparison.

Everything here is pure: inputs are plain mappings and ``orchestrator.experiment.results`` models,
outputs are new
models or dataclasses. The definitions (what counts as fabric, source egress, completion time, which
percentile) are the ones ``docs/results-format.md`` documents; change them there too.

Counter snapshots, as the replay driver hands them in, are flat mappings::

    {"h1:eth1": {"rx_bytes": 0, "rx_packets": 0, "tx_bytes": 9876, "tx_packets": 12}, ...}

keyed ``node:interface`` with the four kernel counters of ``/sys/class/net/IF/statistics``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from aidcnet.modes import BASELINES, COLLECTIVE, Mode
from orchestrator.experiment.conditions import Conditions
from orchestrator.experiment.records import (
    DeliveryStats,
    LatencyStats,
    LinkCounters,
    MessageResult,
    RunMetrics,
    RunResult,
    link_id,
)
from orchestrator.workloads.trace import ALLREDUCE_OP, MULTICAST_OP

if TYPE_CHECKING:
    from orchestrator.lab.topology import Topology
    from orchestrator.workloads.trace import TraceOp

# The management interface carries Docker/Ansible/agent control traffic, never workload bytes.
MGMT_INTERFACES = frozenset({"eth0"})
STAT_KEYS = ("rx_bytes", "rx_packets", "tx_bytes", "tx_packets")
PERCENTILES = (50, 90, 99)

IfStats = Mapping[str, int]
Snapshot = Mapping[str, IfStats]


class CounterError(ValueError):
    """Counter snapshots that cannot give a delta; the message names the interface or node."""


# ---------------------------------------------------------------------------------------------- counters


def link_pairs(topology: Topology) -> list[tuple[str, str]]:
    """``("a:ifA", "b:ifB")`` for every data link, in topology-file order."""
    return [(str(link.a), str(link.b)) for link in topology.links]


def _is_mgmt(endpoint: str) -> bool:
    return endpoint.split(":", 1)[-1] in MGMT_INTERFACES


def _stat(snapshot: Snapshot, endpoint: str, key: str, which: str) -> int:
    stats = snapshot[endpoint]
    if key not in stats:
        raise CounterError(
            f"{which} snapshot: {endpoint} has no {key!r} counter; give all of {', '.join(STAT_KEYS)}"
        )
    return int(stats[key])


def _delta(before: Snapshot, after: Snapshot, endpoint: str, key: str) -> int:
    d = _stat(after, endpoint, key, "after") - _stat(before, endpoint, key, "before")
    if d < 0:
        raise CounterError(
            f"{endpoint} {key} went backwards ({d}): the interface was recreated during the run "
            "(node restarted or link re-wired); rerun the replay on a stable lab"
        )
    return d


def _direction(before: Snapshot, after: Snapshot, tx_end: str, rx_end: str) -> tuple[int, int]:
    # The sender's tx counts what entered the link; the receiver's rx is the fallback when the sender's
    # counters were not collected (the two differ only by drops inside the veth pair).
    for end, prefix in ((tx_end, "tx"), (rx_end, "rx")):
        if end in before and end in after:
            return (
                _delta(before, after, end, f"{prefix}_bytes"),
                _delta(before, after, end, f"{prefix}_packets"),
            )
    missing = [
        f"{e} ({'/'.join(w for w, s in (('before', before), ('after', after)) if e not in s)})"
        for e in (tx_end, rx_end)
    ]
    raise CounterError(
        f"no counters for link {link_id(tx_end, rx_end)}: missing {' and '.join(missing)}; the collector "
        "must read every data interface both before and after the run"
    )


def link_deltas(before: Snapshot, after: Snapshot, pairs: Iterable[tuple[str, str]]) -> list[LinkCounters]:
    """Per-link, per-direction deltas between two snapshots; management interfaces are skipped."""
    out = []
    for a, b in pairs:
        if _is_mgmt(a) or _is_mgmt(b):
            continue
        ab_bytes, ab_packets = _direction(before, after, a, b)
        ba_bytes, ba_packets = _direction(before, after, b, a)
        out.append(
            LinkCounters(
                link=link_id(a, b),
                a_to_b_bytes=ab_bytes,
                a_to_b_packets=ab_packets,
                b_to_a_bytes=ba_bytes,
                b_to_a_packets=ba_packets,
            )
        )
    return out


def agent_deltas(
    before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """node -> counter -> delta. A counter absent before started at 0 (agents create them lazily)."""
    out: dict[str, dict[str, int]] = {}
    for node in sorted(after):
        prev = before.get(node, {})
        deltas: dict[str, int] = {}
        for name in sorted(after[node]):
            d = int(after[node][name]) - int(prev.get(name, 0))
            if d < 0:
                raise CounterError(
                    f"node {node}: agent counter {name!r} went backwards ({d}); the agent restarted during "
                    "the run, rerun the replay"
                )
            deltas[name] = d
        out[node] = deltas
    return out


# ---------------------------------------------------------------------------------------------- bytes


def fabric_links(links: Iterable[LinkCounters]) -> list[LinkCounters]:
    return [lc for lc in links if not (_is_mgmt(lc.a) or _is_mgmt(lc.b))]


def total_fabric(links: Iterable[LinkCounters]) -> tuple[int, int]:
    """(bytes, packets) summed over every data link and both directions."""
    fl = fabric_links(links)
    return sum(lc.total_bytes for lc in fl), sum(lc.total_packets for lc in fl)


def source_egress(links: Iterable[LinkCounters], sources: Iterable[str]) -> tuple[int, int]:
    """(bytes, packets) the source hosts transmitted on their data interfaces.

    A host with several fabric ports (one per plane) counts all of them.
    """
    src = set(sources)
    nbytes = npackets = 0
    for lc in fabric_links(links):
        if lc.a_node in src:
            nbytes += lc.a_to_b_bytes
            npackets += lc.a_to_b_packets
        if lc.b_node in src:
            nbytes += lc.b_to_a_bytes
            npackets += lc.b_to_a_packets
    return nbytes, npackets


def node_ingress(links: Iterable[LinkCounters], node: str) -> tuple[int, int]:
    """(bytes, packets) that arrived at ``node`` over its data links: what a parameter server or a VAT
    root takes in (bench/allreduce.py; the scale model's ``bytes_in``, which takes its own link loads)."""
    nbytes = npackets = 0
    for lc in fabric_links(links):
        if lc.b_node == node:
            nbytes += lc.a_to_b_bytes
            npackets += lc.a_to_b_packets
        if lc.a_node == node:
            nbytes += lc.b_to_a_bytes
            npackets += lc.b_to_a_packets
    return nbytes, npackets


def end_tx(links: Iterable[LinkCounters], end: str) -> tuple[int, str] | None:
    """(bytes the link end ``end`` transmitted, the end it sent them to), or None when no data link has
    that end."""
    for lc in fabric_links(links):
        if lc.a == end:
            return lc.a_to_b_bytes, lc.b
        if lc.b == end:
            return lc.b_to_a_bytes, lc.a
    return None


@dataclass(frozen=True)
class LoadedLink:
    link: str | None
    sender: str | None
    bytes: int
    share: float


def most_loaded_link(links: Iterable[LinkCounters]) -> LoadedLink:
    """The busiest single direction of any data link, and its share of all fabric bytes.

    Ties go to the first link in the list (topology order), then a->b before b->a.
    """
    fl = fabric_links(links)
    best: tuple[int, str | None, str | None] = (0, None, None)
    for lc in fl:
        for nbytes, sender in ((lc.a_to_b_bytes, lc.a), (lc.b_to_a_bytes, lc.b)):
            if nbytes > best[0]:
                best = (nbytes, lc.link, sender)
    total = sum(lc.total_bytes for lc in fl)
    return LoadedLink(link=best[1], sender=best[2], bytes=best[0], share=best[0] / total if total else 0.0)


# ---------------------------------------------------------------------------------------------- latency


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest sample with at least p% of the samples <= it.

    ``sorted_values`` must be sorted ascending and non-empty; 0 < p <= 100. The result is always an
    observed sample (no interpolation), the same as ``numpy.percentile(x, p, method="inverted_cdf")``
    except that the rank ceil(p*n/100) is computed in exact decimal arithmetic: p=99.9 of 1000 samples is
    the 999th, where numpy's float product rounds up to the 1000th.
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no samples")
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {p}")
    rank = math.ceil(Fraction(str(p)) * n / 100)
    return sorted_values[min(max(rank, 1), n) - 1]


def latency_stats(values: Iterable[float]) -> LatencyStats:
    xs = sorted(values)
    if not xs:
        return LatencyStats()
    return LatencyStats(
        count=len(xs),
        p50=percentile(xs, 50),
        p90=percentile(xs, 90),
        p99=percentile(xs, 99),
        max=xs[-1],
        mean=math.fsum(xs) / len(xs),
    )


def receiver_latencies(messages: Iterable[MessageResult]) -> list[float]:
    """Every (message, expected receiver) latency that was delivered; wrong receivers do not count."""
    out = []
    for m in messages:
        want = set(m.expected)
        out.extend(s for r, s in m.latency.items() if r in want)
    return out


def message_latencies(messages: Iterable[MessageResult]) -> list[float]:
    """Per fully delivered message, the latency of its slowest receiver (what a collective waits for)."""
    out = []
    for m in messages:
        if not m.missing and all(r in m.latency for r in m.expected):
            out.append(max(m.latency[r] for r in m.expected))
    return out


def completion(messages: Sequence[MessageResult]) -> tuple[float | None, float | None, float | None]:
    """(first send, last delivery, last delivery - first send) on the replay clock; None if unknown."""
    if not messages:
        return None, None, None
    first = min(m.sent_at for m in messages)
    ends = [m.sent_at + s for m in messages for s in m.latency.values()]
    if not ends:
        return first, None, None
    last = max(ends)
    return first, last, last - first


def delivery_stats(messages: Iterable[MessageResult]) -> DeliveryStats:
    s = DeliveryStats()
    for m in messages:
        missing = len(m.missing)
        s.messages += 1
        s.expected += len(m.expected)
        s.delivered += len(m.expected) - missing
        s.missing += missing
        s.wrong_receivers += len(m.wrong)
        s.duplicates += sum(m.duplicates.values())
        s.complete_messages += missing == 0
    return s


def delivery_problems(d: DeliveryStats) -> str | None:
    """What went wrong with a run's deliveries, in words (``3 missing, 1 wrong receiver(s)``), or None."""
    parts = []
    if d.missing:
        parts.append(f"{d.missing} missing")
    if d.wrong_receivers:
        parts.append(f"{d.wrong_receivers} wrong receiver(s)")
    if d.duplicates:
        parts.append(f"{d.duplicates} duplicate(s)")
    return ", ".join(parts) if parts else None


# ---------------------------------------------------------------------------------------------- fan-out


def theoretical_fanout(items: Iterable[tuple[int, float]]) -> float | None:
    """Mean receivers per multicast op, weighted by bytes: sum(bytes * receivers) / sum(bytes).

    ``items`` are (bytes, receivers) of the multicast ops only. This is the factor by which a unicast
    source must send more than a multicast one, so it is the expected source-egress ratio
    unicast/BIER (before header overheads). None for a trace without multicast bytes.
    """
    total = weighted = 0.0
    for nbytes, receivers in items:
        total += nbytes
        weighted += nbytes * receivers
    return weighted / total if total else None


def trace_fanout(ops: Iterable[TraceOp]) -> float | None:
    return theoretical_fanout((op.bytes, len(op.dst)) for op in ops if op.op == MULTICAST_OP)


def message_fanout(messages: Iterable[MessageResult]) -> float | None:
    return theoretical_fanout((m.bytes, len(m.expected)) for m in messages if m.op == MULTICAST_OP)


# ---------------------------------------------------------------------------------------------- one run


def sources_of(result: RunResult) -> list[str]:
    return sorted({m.src for m in result.messages})


def compute_metrics(result: RunResult) -> RunMetrics:
    links = fabric_links(result.links)
    sources = sources_of(result)
    egress_bytes, egress_packets = source_egress(links, sources)
    fabric_bytes, fabric_packets = total_fabric(links)
    busiest = most_loaded_link(links)
    first, last, ct = completion(result.messages)
    # The messages are what was actually replayed (a driver may replay part of a trace), so they win
    # over the trace-file figure when present.
    fanout = message_fanout(result.messages) if result.messages else None
    if fanout is None:
        fanout = result.meta.trace.fanout_weighted
    return RunMetrics(
        sources=sources,
        source_egress_bytes=egress_bytes,
        source_egress_packets=egress_packets,
        total_fabric_bytes=fabric_bytes,
        total_fabric_packets=fabric_packets,
        max_link=busiest.link,
        max_link_from=busiest.sender,
        max_link_bytes=busiest.bytes,
        max_link_share=busiest.share,
        first_send=first,
        last_delivery=last,
        completion_time=ct,
        latency=latency_stats(receiver_latencies(result.messages)),
        message_latency=latency_stats(message_latencies(result.messages)),
        delivery=delivery_stats(result.messages),
        payload_bytes=sum(m.bytes for m in result.messages),
        payload_delivered_bytes=sum(
            m.bytes * len(set(m.delivered) & set(m.expected)) for m in result.messages
        ),
        theoretical_fanout=fanout,
        **timing_metrics(result, ct),
    )


# ---------------------------------------------------------------------------------------------- collectives


def is_collective(result: RunResult) -> bool:
    """An AllReduce run (ring, ps, ina): judged by what converges on one node, not by source fan-out."""
    return result.mode in COLLECTIVE or any(m.op == ALLREDUCE_OP for m in result.messages)


def is_multicast(result: RunResult) -> bool:
    """A run of a trace with multicast ops: the only kind where fan-out and its ratios mean anything."""
    if result.messages:
        return any(m.op == MULTICAST_OP for m in result.messages)
    return result.meta.trace.ops_by_kind.get(MULTICAST_OP, 0) > 0


@dataclass(frozen=True)
class CollectiveLoad:
    """The node a collective's bytes converge on and what arrived there over its data links."""

    node: str
    # "aggregation point" (the PS host, the INA root switch the run recorded) or "busiest worker" (ring, or
    # a run that recorded none)
    kind: str
    bytes_in: int
    # The ops' payload and the run's completion (wall seconds): their quotient, on the run's clock, is
    # the AllReduce "algorithm bandwidth" (orchestrator.experiment.clock.Clock.rate).
    payload_bytes: int
    completion_s: float | None


def collective_load(result: RunResult) -> CollectiveLoad | None:
    """Bytes into the aggregation point (or the busiest worker), the payload and the completion of a
    collective run; None for any other run."""
    if not is_collective(result):
        return None
    links = fabric_links(result.links)
    points = [str(p) for p in result.meta.settings.get("aggregation_points") or []]
    if points:
        node, kind = ", ".join(points), "aggregation point"
        nbytes = sum(node_ingress(links, p)[0] for p in points)
    else:
        workers = sorted({w for m in result.messages for w in m.expected})
        if not workers:
            return None
        loads = {w: node_ingress(links, w)[0] for w in workers}
        node = max(workers, key=loads.__getitem__)  # ties: the first in name order
        kind, nbytes = "busiest worker", loads[node]
    _first, _last, ct = completion(result.messages)
    return CollectiveLoad(node, kind, nbytes, sum(m.bytes for m in result.messages), ct)


def timing_metrics(result: RunResult, completion_s: float | None) -> dict[str, float | None]:
    """Completion in fabric time and against the bottleneck bound, when the run's links were shaped."""
    timing = result.timing
    if timing is None or completion_s is None:
        return {"completion_fabric_time": None, "bound_ratio": None}
    bound = timing.bound
    return {
        "completion_fabric_time": timing.fabric_s(completion_s),
        "bound_ratio": completion_s / bound.wall_s if bound is not None and bound.wall_s > 0 else None,
    }


def metrics_of(result: RunResult) -> RunMetrics:
    return result.metrics if result.metrics is not None else compute_metrics(result)


# ---------------------------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Column:
    label: str
    run: RunResult
    metrics: RunMetrics


@dataclass(frozen=True)
class Ratios:
    """One mode against the unicast baseline; every ratio is None when a side is 0 or unknown."""

    label: str
    baseline: str
    # baseline / this: how many times less the sources sent; compare with the fan-out.
    source_egress: float | None
    fabric_bytes: float | None
    # 1 - this / baseline over all fabric bytes: the bandwidth the mode saved.
    bandwidth_saved: float | None
    max_link: float | None
    # baseline completion time / this one: > 1 means this mode finished sooner.
    completion_speedup: float | None
    fanout: float | None
    # source_egress / fanout: 1.0 means the mode reached the trace's theoretical saving.
    egress_vs_fanout: float | None
    # Why completion_speedup is None although both runs have a completion time (an unfaithful run).
    time_note: str | None = None


@dataclass(frozen=True)
class Comparison:
    """Runs of one lab and trace under one set of conditions: only these are compared with each other."""

    lab: str
    trace: str
    trace_key: str
    columns: list[Column]
    fanout: float | None
    baseline: str | None
    ratios: list[Ratios] = field(default_factory=list)
    conditions: Conditions = field(default_factory=lambda: Conditions(False, None))

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.columns]

    @property
    def multicast(self) -> bool:
        """A group with multicast ops: the only kind where fan-out and its ratios mean anything."""
        return any(is_multicast(c.run) for c in self.columns)


def mode_rank(mode: str) -> tuple[int, str]:
    order = list(Mode)
    return (order.index(Mode(mode)) if mode in order else len(order), mode)


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def time_comparable(run: RunResult, other: RunResult) -> str | None:
    """None when the two runs' times may be compared; else why not, in words for the report. Times are
    the fabric's only on shaped links and only when a run was faithful (docs/time-and-fidelity.md), and a
    run that lost or misdelivered messages finished a different trace. Two faithful runs compare at any
    two scales: a faithful fabric time does not depend on the scale (replay --confirm checks it)."""
    for r in (run, other):
        t = r.timing
        if t is None or t.scale is None:
            return (
                f"{r.meta.mode} ran on unshaped links: its times are the emulator's, not the fabric's "
                "(set time.scale)"
            )
        if not t.faithful:
            return f"{r.meta.mode} was not faithful ({'; '.join(t.reasons)})"
        if (problems := delivery_problems(metrics_of(r).delivery)) is not None:
            return f"{r.meta.mode} did not deliver exactly ({problems}), so its completion is not the trace's"
    return None


def ratios(
    label: str,
    m: RunMetrics,
    baseline_label: str,
    base: RunMetrics,
    fanout: float | None,
    time_note: str | None = None,
) -> Ratios:
    egress = _div(base.source_egress_bytes, m.source_egress_bytes)
    saved = _div(m.total_fabric_bytes, base.total_fabric_bytes)
    return Ratios(
        label=label,
        baseline=baseline_label,
        source_egress=egress,
        fabric_bytes=_div(base.total_fabric_bytes, m.total_fabric_bytes),
        bandwidth_saved=None if saved is None else 1 - saved,
        max_link=_div(base.max_link_bytes, m.max_link_bytes),
        # Fabric time: faithful runs compare at any two scales, their wall times never (a run at 1:10000
        # takes half the wall time of the same run at 1:20000).
        completion_speedup=None if time_note else _div(base.completion_fabric_time, m.completion_fabric_time),
        fanout=fanout,
        egress_vs_fanout=_div(egress, fanout),
        time_note=time_note,
    )


def trace_key(run: RunResult) -> str:
    return run.meta.trace.sha256 or run.meta.trace.name


def _weights(run: RunResult) -> str | None:
    value = run.meta.settings.get("bgp_weights")
    return str(value) if value else None


def compare_runs(runs: Iterable[RunResult]) -> list[Comparison]:
    """Group runs by lab, trace and conditions (``orchestrator.experiment.conditions``): runs under other
    conditions (a lossy link, a link down, another time scale, a fault) are another group, never a column
    beside these. Within a group one column per run, the baseline first.

    Two runs of the same mode in a group get labels ``mode #1``, ``mode #2`` in run-id (time) order.
    The unicast column (the first, if repeated) is the baseline of the ratios; for AllReduce traces, the
    parameter-server (ps) column. Groups are ordered by lab and trace, then clean conditions first.
    """
    groups: dict[tuple[str, str, Conditions], list[RunResult]] = {}
    for run in runs:
        groups.setdefault((run.meta.lab, trace_key(run), Conditions.of(run)), []).append(run)
    ordered = sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[1][0].meta.trace.name, kv[0][1], kv[0][2].rank)
    )
    return [_comparison(lab, key, conditions, members) for (lab, key, conditions), members in ordered]


def _columns(members: list[RunResult]) -> list[Column]:
    # Within a mode, ECMP next hops (the baseline FARE is measured against) come first.
    members = sorted(members, key=lambda r: (mode_rank(r.mode), _weights(r) != "ecmp", r.run_id))
    counts: dict[str, int] = {}
    variants: dict[str, set[str | None]] = {}
    for r in members:
        counts[r.mode] = counts.get(r.mode, 0) + 1
        variants.setdefault(r.mode, set()).add(_weights(r))
    seen: dict[str, int] = {}
    columns = []
    for r in members:
        seen[r.mode] = seen.get(r.mode, 0) + 1
        if counts[r.mode] == 1:
            label = r.mode
        elif len(variants[r.mode]) == counts[r.mode] and _weights(r):
            label = f"{r.mode} {_weights(r)}"  # e.g. "unicast ecmp" against "unicast fare"
        else:
            label = f"{r.mode} #{seen[r.mode]}"
        columns.append(Column(label=label, run=r, metrics=metrics_of(r)))
    return columns


def _comparison(lab: str, key: str, conditions: Conditions, members: list[RunResult]) -> Comparison:
    columns = _columns(members)
    fanout = next((c.metrics.theoretical_fanout for c in columns if c.metrics.theoretical_fanout), None)
    # Unicast is the baseline of the transport modes; the parameter server that of AllReduce.
    base = next((c for c in columns if c.run.mode in BASELINES), None)
    rs = (
        [
            ratios(c.label, c.metrics, base.label, base.metrics, fanout, time_comparable(c.run, base.run))
            for c in columns
            if c is not base
        ]
        if base is not None
        else []
    )
    return Comparison(
        lab=lab,
        trace=members[0].meta.trace.name,
        trace_key=key,
        columns=columns,
        fanout=fanout,
        baseline=None if base is None else base.label,
        ratios=rs,
        conditions=conditions,
    )
