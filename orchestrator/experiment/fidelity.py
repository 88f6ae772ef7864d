"""Is a run's timing the fabric's or the emulator's? Fabric time, the bottleneck bound and the verdict.

Pure logic (docs/time-and-fidelity.md). The idea is Mininet-HiFi's (CoNEXT 2012): give every link its rate,
slow the whole fabric down by a known factor (time dilation, NSDI 2006) and then check, from counters,
that the links and nothing else decided the timing:

* every shaper that had a queue drained at its configured rate (else something upstream could not keep
  it busy: a node's CPU, a socket, our own code);
* nothing dropped a packet but a shaper queue (and in a lossless run not even that) or an injected fault;
* no node's CPU was saturated.

Link ends are named ``node:interface`` and carry one direction each (what that end sends). Rates given
here are the veth's (wall) rates; :func:`fabric_time` turns wall seconds into the fabric's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# A shaper draining within this share of its rate is "at its rate" (the e2e bar of issue 12 too).
RATE_TOLERANCE = 0.05
# Less backlogged time than this says too little about a drain rate to judge it (samples are coarse).
MIN_BUSY_S = 0.2
# A counter reading whose moment is known only to within more than this (either way) is left out of a
# drain rate: a dump takes a fraction of a millisecond, so a wider bracket is a stall (see DrainMeter).
MAX_READ_UNCERTAINTY_S = 0.002
# A node whose processes used this share of one core over a sampling window was saturated: our agents
# are single-threaded Python, so one core is all one of them can use.
NODE_CPU_SATURATED = 0.9
# The whole lab using this share of the machine's cores leaves the kernel no room to run the shapers.
HOST_CPU_SATURATED = 0.9
# Agent counters (as `show counters` names them) that mean our own software lost a packet: a send the
# kernel refused (a full buffer past the lossless wait), a receive error, a delivery the application
# socket could not take, an IGMP report a leaf's full receive buffer dropped. Protocol drops (TTL,
# malformed, no entry) are not the emulator's and stay out.
AGENT_LOSS_COUNTERS = (
    "bier.tx.errors",
    "bier.rx.errors",
    "bier.app-dropped",
    "bier.deliver-errors",
    "net-bier.emit-errors",
    "net-bier.impose-errors",
    "net-bier.rx-errors",
    "igmp.shell.rx-drops",
)


# A faithful run this far behind its bottleneck bound gets a note (issue 12's bar for a faithful run).
BOUND_NOTE_RATIO = 1.15
# A BFR that waited for room in its socket: lossless back-pressure, or our software holding every port
# behind one full one. Worth a note next to a run far from its bound, not a reason by itself.
AGENT_WAIT_COUNTERS = ("bier.tx.waits",)


def agent_waits(deltas: Mapping[str, Mapping[str, int]]) -> list[str]:
    return [
        f"node {node}: its BFR waited {counters[name]} times for room to send ({name})"
        for node, counters in sorted(deltas.items())
        for name in AGENT_WAIT_COUNTERS
        if counters.get(name)
    ]


def agent_losses(deltas: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """node -> {"agent <counter>": n} of the :data:`AGENT_LOSS_COUNTERS` that moved during a run."""
    out: dict[str, dict[str, int]] = {}
    for node, counters in deltas.items():
        for name in AGENT_LOSS_COUNTERS:
            if counters.get(name):
                out.setdefault(node, {})[f"agent {name}"] = counters[name]
    return out


def fabric_time(wall_s: float, scale: int) -> float:
    """What ``wall_s`` of emulation stands for on the real fabric. Links ran at bandwidth / scale, so a
    transfer took ``scale`` times longer than on the real links: fabric time = wall time / scale.
    (Issue 12 writes "measured x scale" with the scale as a ratio, 1:1000; ours is the factor, 1000.)"""
    if scale < 1:
        raise ValueError(f"time scale {scale} must be at least 1")
    return wall_s / scale


@dataclass(frozen=True)
class Bound:
    """Completion can be no sooner than the busiest link end takes to send what it sent."""

    link: str
    bytes: int
    rate_bps: int  # the veth's rate
    wall_s: float
    fabric_s: float

    def describe(self) -> str:
        return (
            f"{self.link}: {self.bytes} B at {self.rate_bps / 1e6:g} Mbit/s = {self.wall_s:.3f} s wall, "
            f"{self.fabric_s * 1e6:.3f} µs fabric"
        )


def bottleneck_bound(
    bytes_by_end: Mapping[str, int], rate_bps_by_end: Mapping[str, int], scale: int
) -> Bound:
    """max over link ends of bytes / rate, naming the end. Ties go to the first name in sorted order, so
    the same counters always name the same link."""
    if not bytes_by_end:
        raise ValueError("no link carried any bytes: nothing to bound")
    best: Bound | None = None
    for name in sorted(bytes_by_end):
        if name not in rate_bps_by_end:
            raise ValueError(f"{name} carried bytes but has no rate (not in fabric.json?)")
        rate = rate_bps_by_end[name]
        if rate <= 0:
            raise ValueError(f"{name}: rate {rate} bit/s must be above zero")
        wall = bytes_by_end[name] * 8 / rate
        if best is None or wall > best.wall_s:
            best = Bound(name, bytes_by_end[name], rate, wall, fabric_time(wall, scale))
    assert best is not None
    return best


class DrainMeter:
    """Busy time and bytes of one shaper from periodic samples of its counters.

    A sampling interval counts as busy when the queue held bytes at both of its ends: the shaper had
    something to send throughout (up to the sampling grain), so it should have sent at its rate. Given
    the shaper's ``rate_bps``, an interval counts only when the queue at its start alone could keep the
    shaper sending to its end (backlog ≥ rate × interval): then it was busy throughout, whatever arrived,
    and a bursty queue that ran dry between two samples cannot pass for a slow shaper.

    Each sample says when its counters were read, give or take ``within_s``. One known only to within
    more than :data:`MAX_READ_UNCERTAINTY_S` is skipped (counted in ``skipped``), and the next interval
    spans it. Placed at a guess it would move bytes from one interval into its neighbour, and the two
    would not cancel: the interval after a stall is the long one, which the backlog rule tends to drop,
    so the shaper would look fast.
    """

    def __init__(self, rate_bps: int | None = None) -> None:
        self.rate_bps = rate_bps
        self.busy_s = 0.0
        self.busy_bytes = 0
        self.skipped = 0
        self._last: tuple[float, int, int] | None = None

    def sample(self, t: float, sent_bytes: int, backlog_bytes: int, within_s: float = 0.0) -> None:
        if within_s > MAX_READ_UNCERTAINTY_S:
            self.skipped += 1
            return
        last = self._last
        if last is not None:
            t0, sent0, backlog0 = last
            if t < t0 or sent_bytes < sent0:
                raise ValueError(f"samples go backwards: t {t0} -> {t}, bytes {sent0} -> {sent_bytes}")
            full = self.rate_bps is None or backlog0 * 8 >= self.rate_bps * (t - t0)
            if backlog0 > 0 and backlog_bytes > 0 and full:
                self.busy_s += t - t0
                self.busy_bytes += sent_bytes - sent0
        self._last = (t, sent_bytes, backlog_bytes)

    @property
    def drain_bps(self) -> float | None:
        return self.busy_bytes * 8 / self.busy_s if self.busy_s > 0 else None


class CpuMeter:
    """Peak share of one core a node used over windows of at least ``window_s`` (cgroup CPU time)."""

    def __init__(self, window_s: float = 0.5) -> None:
        self.window_s = window_s
        self.peak = 0.0
        self.total_cpu_s = 0.0
        self.total_wall_s = 0.0
        self._start: tuple[float, float] | None = None
        self._last: tuple[float, float] | None = None

    def sample(self, t: float, cpu_s: float) -> None:
        if self._last is not None:
            t_last, cpu_last = self._last
            if t < t_last or cpu_s < cpu_last:
                raise ValueError(f"samples go backwards: t {t_last} -> {t}, cpu {cpu_last} -> {cpu_s}")
            self.total_cpu_s += cpu_s - cpu_last
            self.total_wall_s += t - t_last
        if self._start is None:
            self._start = (t, cpu_s)
        else:
            t0, cpu0 = self._start
            if t - t0 >= self.window_s:
                self.peak = max(self.peak, (cpu_s - cpu0) / (t - t0))
                self._start = (t, cpu_s)
        self._last = (t, cpu_s)

    @property
    def mean(self) -> float:
        return self.total_cpu_s / self.total_wall_s if self.total_wall_s > 0 else 0.0


@dataclass(frozen=True)
class LinkCounters:
    """One link end over a run. ``busy_s``/``busy_bytes`` come from a :class:`DrainMeter`."""

    name: str
    rate_bps: int
    tx_bytes: int
    busy_s: float = 0.0
    busy_bytes: int = 0
    queue_drops: int = 0  # the shaper's queue overflowed
    injected_drops: int = 0  # the link-fault program dropped on purpose
    burst_bytes: int = 0  # the shaper's token bucket: what it may send above its rate at once
    skipped_readings: int = 0  # counter reads whose moment was too uncertain to time a drain by


@dataclass(frozen=True)
class NodeCounters:
    name: str
    cpu_peak: float  # share of one core, from a CpuMeter
    # Drops anywhere but a shaper or the fault program: socket buffers, agent backlogs, rx drops...
    other_drops: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    faithful: bool
    reasons: list[str]  # why not, each naming its link, queue or node
    notes: list[str]  # what a reader should know but that does not spoil the timing

    def to_dict(self) -> dict[str, Any]:
        return {"faithful": self.faithful, "reasons": list(self.reasons), "notes": list(self.notes)}


def verdict(
    links: Iterable[LinkCounters],
    nodes: Iterable[NodeCounters],
    *,
    host_cpu_peak: float | None = None,
    cores: int | None = None,
    lossless: bool = True,
    tolerance: float = RATE_TOLERANCE,
    min_busy_s: float = MIN_BUSY_S,
) -> Verdict:
    """Faithful or not, with every reason. ``lossless``: the run models a lossless (PFC) fabric, so a
    shaper queue that dropped spoils it; otherwise such drops are congestion loss and only noted."""
    reasons: list[str] = []
    notes: list[str] = []
    for link in sorted(links, key=lambda x: x.name):
        if link.busy_s >= min_busy_s:
            drain = link.busy_bytes * 8 / link.busy_s
            off = drain / link.rate_bps - 1
            # A full bucket leaves at once on top of the rate: over a short busy spell that reads as a
            # faster shaper, never as a slower one, so it widens the bar above the rate only.
            above = tolerance + link.burst_bytes * 8 / (link.rate_bps * link.busy_s)
            if off < -tolerance or off > above:
                word = "below" if off < 0 else "above"
                reasons.append(
                    f"link {link.name}: drained at {drain / 1e6:.3g} Mbit/s while backlogged for "
                    f"{link.busy_s:.2f} s, {abs(off):.0%} {word} its shaper's {link.rate_bps / 1e6:g} Mbit/s"
                )
        elif link.busy_s > 0:
            notes.append(f"link {link.name}: backlogged only {link.busy_s:.2f} s, too short to judge")
        if link.skipped_readings:
            notes.append(
                f"link {link.name}: {link.skipped_readings} counter reads stalled past "
                f"{MAX_READ_UNCERTAINTY_S * 1e3:g} ms and were left out of its drain rate"
            )
        if link.queue_drops:
            text = f"queue {link.name}: the shaper dropped {link.queue_drops} packets"
            if lossless:
                reasons.append(text + " in a lossless run (a sender overran its link)")
            else:
                notes.append(text + " (congestion loss)")
        if link.injected_drops:
            notes.append(f"link {link.name}: {link.injected_drops} packets dropped by the injected fault")
    for node in sorted(nodes, key=lambda x: x.name):
        if node.cpu_peak >= NODE_CPU_SATURATED:
            reasons.append(
                f"node {node.name}: CPU saturated ({node.cpu_peak:.0%} of a core at peak, limit "
                f"{NODE_CPU_SATURATED:.0%}): raise time.scale"
            )
        for where, count in sorted(node.other_drops.items()):
            if count:
                reasons.append(f"node {node.name}: {count} packets dropped at {where}")
    if host_cpu_peak is not None and cores and host_cpu_peak >= HOST_CPU_SATURATED * cores:
        reasons.append(
            f"host: the lab used {host_cpu_peak:.2f} of {cores} cores at peak (limit "
            f"{HOST_CPU_SATURATED:.0%}): raise time.scale"
        )
    return Verdict(not reasons, reasons, notes)
