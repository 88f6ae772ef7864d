"""Is a run's timing the fabric's or the emulator's? Fabric time, the bottleneck bound and the verdict.

Pure logic (docs/time-and-fidelity.md). The idea is Mininet-HiFi's (CoNEXT 2012): give every link its rate,
slow the whole fabric down by a known factor (time dilation, NSDI 2006) and then check, from counters,
that the links and nothing else decided the timing:

* every shaper that had a queue drained at its configured rate (else something upstream could not keep
  it busy: a node's CPU, a socket, our own code);
* nothing dropped a packet but a shaper queue (and in a lossless run not even that) or an injected fault;
* no node's CPU was saturated.

Link ends are named ``node:interface`` and carry one direction each (what that end sends). Rates given
here are the veth's (wall) rates; :class:`aidcnet.timescale.TimeScale` turns wall seconds into the fabric's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aidcnet.timescale import TimeScale

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
# The reason a busy machine gives. It is a sign, not a measure, of a pace our software set: the same
# trace at a second scale taking the same fabric time (replay --confirm) shows the links set it anyway
# (TimingRecord.confirmed_by keeps it as a note then).
MACHINE_BUSY = "host: the machine was busy "
# The reason of a link that drained below its shaper: the kernel's dequeue ran late and the tokens that
# came due meanwhile were lost (a small bucket on a busy machine), the machine's doing as MACHINE_BUSY is.
SHAPER_SLOW = "below its shaper's"


def machine_reason(reason: str) -> bool:
    """Whether ``reason`` is one the machine alone gives (busy, or a shaper it held back): a run spoiled
    only by such reasons is worth running again, where one our software or the links spoiled is not."""
    return reason.startswith(MACHINE_BUSY) or (reason.startswith("link ") and SHAPER_SLOW in reason)


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
    # The eBPF fast path's DATA reports its ring had no room for: the agent fell behind, that window's
    # aggregation state was never made, and its ACKs went end to end (a switch would have kept up).
    "bier.ebpf.report-lost",
)


# A run whose fabric completion is more than this many times its predicted time (the time model's, or the
# busiest link's bound where no model covers the mode) was paced by something other than the links, unless
# the same trace at a second scale confirms the time (time dilation's own test: DieCast, SliceTime).
PREDICTED_LIMIT = 1.25
# Confirmation at a second scale: the same fabric completion within this share, and the same bytes.
CONFIRM_TOLERANCE = 0.05
# ... and by default the second scale is this many times the first.
CONFIRM_FACTOR = 2.0
# A climbing confirmation (replay --confirm-steps) makes at most this many comparisons by default.
CONFIRM_STEPS = 1
# The same bytes: every payload byte delivered, and the links' bytes within this share (what runs on the
# wall clock beside a replay, an ARP or an IGMP query, may fall in one run and not the other).
CONFIRM_LINK_BYTES = 0.001
# A membership mode's links also carry IGMP signalling on the hosts' kernel timers, which run on the wall
# clock (docs/delay.md lists them): a run twice as long carries more of it, so its link bytes get this.
CONFIRM_LINK_BYTES_MEMBERSHIP = 0.01
# A BFR that waited for room in its socket: lossless back-pressure, or our software holding every port
# behind one full one. Worth a note next to a run far from its bound, not a reason by itself.
AGENT_WAIT_COUNTERS = ("bier.tx.waits",)
# The reliable transport's wake-ups that came later than a quarter of its least retransmission timeout
# with work pending, and by how much in all (aidcnet/agent/reliable/service.py, LATE_SHARE).
AGENT_LATE_COUNTERS = ("reliable.late-wakeups", "reliable.late-us")
# ... and the datagrams it took in later than that after the kernel received them (an ACK held in a busy
# agent's socket: a sender's timer fired for it in a run the other checks held, at two scales).
AGENT_LATE_ARRIVAL_COUNTERS = ("reliable.late-arrivals", "reliable.late-arrival-us")
# BFD control packets an agent sent more than half an interval late (aidcnet/agent/bfd/service.py).
BFD_LATE = "bfd.tx.late"


def pace_reason(completion_fabric_s: float, predicted_fabric_s: float, by: str) -> str | None:
    """Why a run that took ``completion_fabric_s`` against a prediction of ``predicted_fabric_s`` (by
    ``by``: the time model, or the bottleneck bound) cannot stand as the fabric's time unconfirmed."""
    if predicted_fabric_s <= 0:
        return None
    ratio = completion_fabric_s / predicted_fabric_s
    if ratio <= PREDICTED_LIMIT:
        return None
    return (
        f"completion {ratio:.2f}x the time its links need ({completion_fabric_s * 1e6:.1f} µs against "
        f"{predicted_fabric_s * 1e6:.1f} µs predicted by {by}): paced by something other than the links "
        f"unless a run at a second scale confirms it (aidclab replay --confirm)"
    )


# A completion this far below the busiest link's bound (its bytes at its rate) is faster than any link can
# carry them: the shapers let bytes through unpaced. A shaper's token bucket starts full and refills while
# its link idles, so the first two frames after an idle spell leave at once. On a trace that puts a few
# frames on each link that is a large share of the run (the superpod's 64-GPU MoE dispatch, about eight
# frames on its busiest link, ended at 0.76x its bound), and no scale helps: the bucket is the same
# number of frames, so the same fabric time, at every scale.
UNDER_BOUND_LIMIT = 0.95


def under_bound_reason(completion_fabric_s: float, bound_fabric_s: float, link: str) -> str | None:
    """Why a run that ended before its busiest link could have carried its bytes is no time of the fabric."""
    if bound_fabric_s <= 0 or completion_fabric_s >= UNDER_BOUND_LIMIT * bound_fabric_s:
        return None
    need, took = bound_fabric_s * 1e6, completion_fabric_s * 1e6
    return (
        f"completion {completion_fabric_s / bound_fabric_s:.2f}x the bound of {link} ({took:.2f} µs against "
        f"the {need:.2f} µs its bytes need at its rate): the shapers let bytes through unpaced (each one's "
        f"bucket of two frames, a large share of so short a run); a trace that puts more frames on each "
        f"link can be timed"
    )


@dataclass(frozen=True)
class Confirmation:
    """Two runs of one trace at two scales, held to time dilation's test: the same fabric completion
    (within :data:`CONFIRM_TOLERANCE`) and the same bytes (every payload byte delivered in both; the
    links' bytes within ``link_tolerance``: :data:`CONFIRM_LINK_BYTES`, or
    :data:`CONFIRM_LINK_BYTES_MEMBERSHIP` for a membership mode)."""

    scales: tuple[int, int]
    fabric_s: tuple[float, float]
    payload_bytes: tuple[int, int]
    link_bytes: tuple[int, int]
    link_tolerance: float = CONFIRM_LINK_BYTES

    @property
    def off(self) -> float:
        a, b = self.fabric_s
        return abs(b - a) / a if a > 0 else float("inf")

    @property
    def same_bytes(self) -> bool:
        (p, q), (x, y) = self.payload_bytes, self.link_bytes
        return p == q and abs(x - y) <= self.link_tolerance * max(x, y)

    @property
    def confirmed(self) -> bool:
        return self.off <= CONFIRM_TOLERANCE and self.same_bytes

    def describe(self) -> str:
        (s1, s2), (a, b), (x, y) = self.scales, self.fabric_s, self.link_bytes
        if self.same_bytes:
            same = "the same bytes"
        else:
            p, q = self.payload_bytes
            same = f"bytes differ (payload {p} B against {q} B, links {x} B against {y} B)"
        word = "confirmed" if self.confirmed else "NOT confirmed"
        return (
            f"{word} at 1:{s2}: {b * 1e6:.2f} µs against {a * 1e6:.2f} µs of fabric time at 1:{s1} "
            f"({self.off:.1%} apart, limit {CONFIRM_TOLERANCE:.0%}), {same}"
        )


def agent_waits(deltas: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Notes: what the agents waited for, and BFD control packets they sent late (``bfd.tx.late``: a peer
    may read a late one as loss; a session that went down for it is a reason of its own,
    ``FaultRunner.late_reasons``)."""
    waits = [
        f"node {node}: its BFR waited {counters[name]} times for room to send ({name})"
        for node, counters in sorted(deltas.items())
        for name in AGENT_WAIT_COUNTERS
        if counters.get(name)
    ]
    late_bfd = [
        f"node {node}: its BFD sent {counters[BFD_LATE]} control packets more than half an interval late"
        for node, counters in sorted(deltas.items())
        if counters.get(BFD_LATE)
    ]
    return [*waits, *late_bfd]


def agent_late(deltas: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Reasons: the nodes whose reliable transport ran late during the run. Its timers are in fabric
    time, so a pass held back by our software (not by the links, which the sampler watches), or a datagram
    left waiting in its socket, times its feedback by our Python's pace, and a timer may fire for an answer
    that was only late."""
    said_of = (
        (AGENT_LATE_COUNTERS, "woke {} times later than a quarter of its least retransmission timeout"),
        (
            AGENT_LATE_ARRIVAL_COUNTERS,
            "took in {} datagrams later than a quarter of its least retransmission timeout after they "
            "arrived",
        ),
    )
    reasons = []
    for node, counters in sorted(deltas.items()):
        said = [
            f"{text.format(counters[count])} ({counters.get(late_us, 0) / 1e3:.0f} ms late in all)"
            for (count, late_us), text in said_of
            if counters.get(count)
        ]
        if said:
            reasons.append(
                f"node {node}: its reliable transport {' and '.join(said)}: paced by our software, not by "
                "its links"
            )
    return reasons


def unresponsive_reasons(lost: Mapping[str, str]) -> list[str]:
    """Reasons: the nodes whose agent stopped answering during the run (``LabSession.lost``). Their sends
    and deliveries could not be accounted, nor whether they held work back, so nothing vouches for the
    run's times: a node throttled or frozen past the polls' patience must not leave a faithful run."""
    return [
        f"node {node}: its agent stopped answering during the run ({why}): what it sent, received and "
        "held back is unknown"
        for node, why in sorted(lost.items())
    ]


def unfinished_reasons(unfinished: Mapping[str, str]) -> list[str]:
    """Reasons: the senders still sending when the run gave up on them (``LabSession.unfinished``, node ->
    what they had sent): the run did not end at its links' pace, and its completion is not a time."""
    return [
        f"node {node}: still sending when the run gave up on it ({what}): the run did not finish"
        for node, what in sorted(unfinished.items())
    ]


# The part of a node-wide loss counter that one port accounts for ({interface}: its name).
PORT_SHARES = {
    "bier.tx.errors": "bier.if.{interface}.tx_errors",
    "net-bier.rx-errors": "net-bier.port.{interface}.rx-errors",
}
IF_DROPS = ("rx drop", "tx drop")


def fault_port_losses(
    drops: Mapping[str, Mapping[str, int]],
    deltas: Mapping[str, Mapping[str, int]],
    downed: Mapping[str, Collection[str]],
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Takes out of a run's drops (node -> {where: n}: ``IF rx drop``, ``IF tx drop``, ``agent COUNTER``)
    the ones at ports a fault took down during the run (``downed``: node -> interfaces): a copy sent into a
    dead port is what the fault costs, the thing the run measures, not a loss of our software. An agent's
    node-wide counter gives up only its port's own share (:data:`PORT_SHARES`, from ``deltas``, the agents'
    counters over the run); what is left of it, and every other drop, is still judged. Returns the drops
    left and one note per node for what was taken out."""
    left: dict[str, dict[str, int]] = {}
    notes: list[str] = []
    for node, counters in drops.items():
        ports = set(downed.get(node, ()))
        kept = dict(counters)
        moved: list[str] = []
        for interface in sorted(ports):
            for kind in IF_DROPS:
                if n := kept.pop(f"{interface} {kind}", 0):
                    moved.append(f"{interface} {kind} {n}")
            for counter, share in PORT_SHARES.items():
                where = f"agent {counter}"
                n = min(kept.get(where, 0), deltas.get(node, {}).get(share.format(interface=interface), 0))
                if n:
                    kept[where] -= n
                    moved.append(f"{interface}'s share of {where} {n}")
        left[node] = {where: n for where, n in kept.items() if n}
        if moved:
            notes.append(
                f"node {node}: counted at ports a fault took down, the fault's loss and not the emulator's "
                f"(one packet may be in two counters): {', '.join(moved)}"
            )
    return left, notes


def agent_losses(deltas: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """node -> {"agent <counter>": n} of the :data:`AGENT_LOSS_COUNTERS` that moved during a run."""
    out: dict[str, dict[str, int]] = {}
    for node, counters in deltas.items():
        for name in AGENT_LOSS_COUNTERS:
            if counters.get(name):
                out.setdefault(node, {})[f"agent {name}"] = counters[name]
    return out


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
    bytes_by_end: Mapping[str, int], rate_bps_by_end: Mapping[str, int], time_scale: TimeScale
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
            best = Bound(name, bytes_by_end[name], rate, wall, time_scale.fabric_s(wall))
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
    """Peak share of one core a node used over any window of ``window_s`` (cgroup CPU time), sliding.

    Every sample closes the shortest window of at least ``window_s`` that ends at it (samples come every
    0.1 s, so windows start on any sample), and the peak is the busiest of them: a spell at 100% is seen
    wherever it falls, not only when it lines up with back-to-back windows from the first sample. A run
    shorter than one window is judged on its mean: a 0.4 s run at 100% of a core read a peak of 0 before.
    """

    def __init__(self, window_s: float = 0.5) -> None:
        self.window_s = window_s
        self._windows_peak = 0.0
        self.total_cpu_s = 0.0
        self.total_wall_s = 0.0
        self._samples: deque[tuple[float, float]] = deque()

    def sample(self, t: float, cpu_s: float) -> None:
        if self._samples:
            t_last, cpu_last = self._samples[-1]
            if t < t_last or cpu_s < cpu_last:
                raise ValueError(f"samples go backwards: t {t_last} -> {t}, cpu {cpu_last} -> {cpu_s}")
            self.total_cpu_s += cpu_s - cpu_last
            self.total_wall_s += t - t_last
        self._samples.append((t, cpu_s))
        # Keep exactly one sample at least a window back: the start of the shortest full window ending now.
        while len(self._samples) > 2 and t - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        t0, cpu0 = self._samples[0]
        if t - t0 >= self.window_s:
            self._windows_peak = max(self._windows_peak, (cpu_s - cpu0) / (t - t0))

    @property
    def peak(self) -> float:
        """The busiest window's share of a core; the mean when the run was shorter than one window."""
        if self.total_wall_s < self.window_s:
            return self.mean
        return self._windows_peak

    @property
    def mean(self) -> float:
        return self.total_cpu_s / self.total_wall_s if self.total_wall_s > 0 else 0.0


# A node held work back for this long, and for this share of the run, while its links could have carried
# it: our software set the pace (a frozen or throttled host, a stalled agent, a slow receiver). Below both,
# a hiccup of one sample period (0.1 s) is noise of the sampling, not a pace.
HELD_LIMIT_S = 0.15
HELD_LIMIT_SHARE = 0.05
# Bytes waiting in a node's UDP sockets that count as "received but not yet read": more than a stray
# datagram or two between two reads of a busy but keeping-up agent.
RX_WAITING_BYTES = 16384


def overlap(spans: Iterable[tuple[float, float]], t0: float, t1: float) -> float:
    """Seconds of [t0, t1] that ``spans`` cover (spans may overlap each other; they are merged)."""
    covered = 0.0
    cursor = t0
    for a, b in sorted((max(a, t0), min(b, t1)) for a, b in spans if b > t0 and a < t1):
        if b <= cursor:
            continue
        covered += b - max(a, cursor)
        cursor = b
    return covered


Span = tuple[float, float]


def without(spans: Iterable[Span], holes: Iterable[Span]) -> list[Span]:
    """``spans`` less the time ``holes`` cover: what is left of each span, in pieces, in order."""
    cut = sorted((a, b) for a, b in holes if b > a)
    out: list[Span] = []
    for a, b in spans:
        cursor = a
        for h0, h1 in cut:
            if h1 <= cursor or h0 >= b:
                continue
            if h0 > cursor:
                out.append((cursor, h0))
            cursor = max(cursor, h1)
            if cursor >= b:
                break
        if cursor < b:
            out.append((cursor, b))
    return out


@dataclass(frozen=True)
class HeldInterval:
    """One sampled interval of a node: how much of its busiest link end's rate it used, and whether
    received bytes waited in its sockets at both ends of the interval (our software behind)."""

    t0: float
    t1: float
    use: float  # sent / (rate x interval) of the node's busiest end; 1 = at its rate
    rx_waiting: bool


class HeldMeter:
    """How long a node held back work while its links sat idle: the signature of a node our software
    slows, whatever the mode.

    A node has work waiting when its agent had data due and not yet handed to the kernel (the replay's
    own account of each op: due, first and last datagram handed over) or, for a node that forwards in
    its agent (``forwards``: a BFR, an INA switch), when received bytes sat in its sockets from one sample
    to the next. A host's own unread deliveries do not count: they are timed by the kernel's receive
    stamp, so a host slow to read them stretches no time the run reports (and a host that is slow
    because it is busy is slow to send too, which does count).

    Over each sampled interval the node is *held* for the part of the interval it had work waiting,
    times the share of its busiest end's rate that went unused. A host frozen for 7 s with data due, its
    link idle, is held 7 s; a host throttled to 60% of its link is held 40% of the time its data was
    due; a host whose link is full behind a deep queue is held 0 s, however much it has waiting (that is
    the link's pace)."""

    def __init__(self, node: str, rates_bps: Mapping[str, int], forwards: bool = True) -> None:
        self.node = node
        self.forwards = forwards
        self.rates_bps = dict(rates_bps)
        self.intervals: list[HeldInterval] = []
        self._last: tuple[float, dict[str, int], bool] | None = None

    def sample(self, t: float, sent_bytes: Mapping[str, int], rx_backlog_bytes: int) -> None:
        waiting = self.forwards and rx_backlog_bytes > RX_WAITING_BYTES
        last = self._last
        if last is not None and t > last[0]:
            t0, sent0, waiting0 = last
            dt = t - t0
            uses = [
                (sent_bytes[end] - sent0[end]) * 8 / (rate * dt)
                for end, rate in self.rates_bps.items()
                if rate > 0 and end in sent_bytes and end in sent0
            ]
            self.intervals.append(HeldInterval(t0, t, max(uses, default=0.0), waiting0 and waiting))
        self._last = (t, dict(sent_bytes), waiting)

    def held(self, due_spans: Iterable[tuple[float, float]] = ()) -> tuple[float, float, float]:
        """(held s, of which with data due, of which with received bytes waiting) over the run;
        ``due_spans`` are [due, last datagram handed over] of each op this node sent, in the sampler's
        clock."""
        spans = list(due_spans)
        total = due_part = rx_part = 0.0
        for iv in self.intervals:
            idle = max(0.0, 1.0 - min(1.0, iv.use))
            if idle <= 0:
                continue
            dt = iv.t1 - iv.t0
            due = overlap(spans, iv.t0, iv.t1) if spans else 0.0
            waited = dt if iv.rx_waiting else due
            total += waited * idle
            due_part += due * idle
            rx_part += (dt if iv.rx_waiting else 0.0) * idle
        return total, due_part, rx_part


def held_reason(node: str, held: tuple[float, float, float], run_s: float) -> str | None:
    """A reason when ``node`` held work back long enough to have set the run's pace, else None."""
    total, due, rx = held
    if total < max(HELD_LIMIT_S, HELD_LIMIT_SHARE * run_s):
        return None
    parts = []
    if due > 0:
        parts.append(f"data due but not yet sent {due:.2f} s")
    if rx > 0:
        parts.append(f"bytes received but not yet read {rx:.2f} s")
    return (
        f"node {node}: its links sat idle for {total:.2f} s of {run_s:.2f} s (wall) while it had work "
        f"waiting ({'; '.join(parts)}): paced by our software, not by its links"
    )


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
    frame_bytes: int = 0  # the largest frame it sends (MTU and Ethernet header): its counters' grain
    skipped_readings: int = 0  # counter reads whose moment was too uncertain to time a drain by


@dataclass(frozen=True)
class NodeCounters:
    name: str
    cpu_peak: float  # share of one core, from a CpuMeter
    # Drops anywhere but a shaper or the fault program: socket buffers, agent backlogs, rx drops...
    other_drops: Mapping[str, int] = field(default_factory=dict)
    # From a HeldMeter: (held s, with data due, with received bytes waiting), wall seconds.
    held: tuple[float, float, float] = (0.0, 0.0, 0.0)


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
    run_s: float = 0.0,
) -> Verdict:
    """Faithful or not, with every reason. ``lossless``: the run models a lossless (PFC) fabric, so a
    shaper queue that dropped spoils it; otherwise such drops are congestion loss and only noted.
    ``run_s``: the run's wall time, against which a node's held time is weighed."""
    reasons: list[str] = []
    notes: list[str] = []
    for link in sorted(links, key=lambda x: x.name):
        if link.busy_s >= min_busy_s:
            drain = link.busy_bytes * 8 / link.busy_s
            off = drain / link.rate_bps - 1
            # A full bucket leaves at once on top of the rate: over a short busy spell that reads as a
            # faster shaper, never as a slower one, so it widens the bar above the rate only.
            above = tolerance + link.burst_bytes * 8 / (link.rate_bps * link.busy_s)
            # The counters move a whole frame at a time, so a busy spell reads up to a frame short: at
            # 1:4000000 a 400G link sends a 7.5 kB frame every 0.6 s of wall time, and an exact shaper
            # sampled every 0.1 s read 33-40% slow over a 1 s spell (tests/unit: the DrainMeter on a
            # simulated shaper). Negligible at the usual rates: 0.2% of a 20 Mbit/s link over 2 s.
            below = tolerance + link.frame_bytes * 8 / (link.rate_bps * link.busy_s)
            if off < -below or off > above:
                side = SHAPER_SLOW if off < 0 else "above its shaper's"
                reasons.append(
                    f"link {link.name}: drained at {drain / 1e6:.3g} Mbit/s while backlogged for "
                    f"{link.busy_s:.2f} s, {abs(off):.0%} {side} {link.rate_bps / 1e6:g} Mbit/s"
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
        if (why := held_reason(node.name, node.held, run_s)) is not None:
            reasons.append(why)
    if host_cpu_peak is not None and cores and host_cpu_peak >= HOST_CPU_SATURATED * cores:
        reasons.append(
            f"{MACHINE_BUSY}{host_cpu_peak:.2f} of {cores} cores at peak (limit "
            f"{HOST_CPU_SATURATED:.0%}; the lab and anything else running beside it): raise time.scale"
        )
    return Verdict(not reasons, reasons, notes)
