"""What became of a run's faults (``settings.faults``), pure: the record of each, its lines in the run's
summary and whether it took effect late enough to spoil the run (docs/faults.md). What a fault is, and
how it is written, is ``orchestrator.lab.fault_spec``.

The run waits AT x scale of wall time for each fault, and records when it took effect on the wall clock
and in fabric time.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aidcnet.bier.fast_reroute import bypass_path
from aidcnet.timescale import TimeScale
from orchestrator.experiment.clock import Clock, format_seconds, wall
from orchestrator.experiment.records import MessageResult
from orchestrator.lab.fault_spec import Fault

# A fault that took effect later than this share of the run (zero to end) after its time fell on other
# traffic than the run asked for: the fault runner is one more thread of ours, and a busy machine can wake
# it late. The same share of any run at any scale, as a node's held time is weighed (fidelity.py).
FAULT_LATE_SHARE = 0.05


@dataclass
class FaultRecord:
    """What became of one fault in a run (``settings.faults``); wall seconds after the run's zero."""

    fault: Fault
    started_s: float | None = None
    done_s: float | None = None
    lines: list[str] = field(default_factory=list)
    error: str | None = None
    # By when it had taken effect: a link's change made, a restarting agent told to go (its return is the
    # recovery, done_s). Later than started_s by what it took to get there.
    effect_s: float | None = None
    # A link fault on a lab running BFD (docs/bfd.md): what each end's session did about it (Detection).
    detections: list[Detection] = field(default_factory=list)
    # A link fault under BIER fast reroute (docs/bier.md): each end's bypass around it going on or off.
    reroutes: list[Reroute] = field(default_factory=list)
    # ... and the ends whose plan has no bypass to the neighbour across it (Unprotected).
    unprotected: list[Unprotected] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fault": self.fault.text,
            "at_s": self.fault.at_s,
            "started_s": self.started_s,
            "effect_s": self.effect_s,
            "done_s": self.done_s,
            "lines": self.lines,
            "error": self.error,
            **({"bfd": [d.to_dict() for d in self.detections]} if self.detections else {}),
            **({"fast_reroute": [r.to_dict() for r in self.reroutes]} if self.reroutes else {}),
            **(
                {"fast_reroute_unprotected": [u.to_dict() for u in self.unprotected]}
                if self.unprotected
                else {}
            ),
        }

    def late_s(self, time_scale: TimeScale) -> float | None:
        """Wall seconds between the fault's time and its taking effect; None if it never did."""
        if self.effect_s is None:
            return None
        return self.effect_s - time_scale.wall_s(self.fault.at_s)

    def problem(self) -> str | None:
        """Why the run did not get the fault it asked for, or None."""
        if self.error is not None:
            return f"fault {self.fault.text!r} failed: {self.error}"
        if self.started_s is None:
            return (
                f"fault {self.fault.text!r} never happened: the run ended before "
                f"{format_seconds(self.fault.at_s)} of fabric time"
            )
        return None


def late_faults(records: Iterable[FaultRecord], run_s: float, time_scale: TimeScale) -> list[str]:
    """Reasons the run is not faithful: each fault that took effect more than FAULT_LATE_SHARE of the run
    (``run_s``: wall seconds from its zero to its end) after its time, in fabric and wall time."""
    clock = Clock(time_scale)
    out = []
    for r in records:
        late = r.late_s(time_scale)
        if late is None or late <= FAULT_LATE_SHARE * run_s:
            continue
        out.append(
            f"fault {r.fault.describe()!r} took effect {clock.both(late)} after its time "
            f"({format_seconds(r.fault.at_s)} fabric), more than {FAULT_LATE_SHARE:.0%} of the run "
            f"({wall(run_s)}): the emulator applied it late, so it fell on other traffic than asked for"
        )
    return out


@dataclass(frozen=True)
class Detection:
    """One end's BFD session changing state after a link fault: ``after_s`` wall seconds from when the
    fault began to be applied (the first moment it could have dropped anything) to the agent's decision."""

    node: str
    interface: str
    state: str  # down, or up when the fault undid a change
    reason: str
    after_s: float
    late_s: float  # how late the agent decided it after the protocol's own moment (our Python's share)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bfd_detections(
    record: FaultRecord,
    ends: Iterable[tuple[str, str]],
    events: Mapping[str, Iterable[Mapping[str, Any]]],
    zero: float,
    until_s: float | None,
) -> list[Detection]:
    """The first state change of each end's session (``ends``: the link's (node, interface) pairs) after
    the fault began (``record.started_s``, seconds after the run's ``zero``, a wall time) and before
    ``until_s`` (the next fault on the link, or the run's end): a Down for a fault that takes the link
    away, an Up for one that gives it back. ``events`` are each node's ``aidcnet ctl show bfd`` events."""
    if record.started_s is None:
        return []
    out = []
    for node, interface in ends:
        for event in events.get(node, ()):
            at_s = event["at_ns"] / 1e9 - zero
            if (
                event["interface"] != interface
                or event["reason"] == "loss-cleared"
                or at_s < record.started_s
            ):
                continue
            if until_s is not None and at_s >= until_s:
                break
            if event["state"] in ("down", "up"):
                out.append(
                    Detection(
                        node,
                        interface,
                        event["state"],
                        event["reason"],
                        at_s - record.started_s,
                        event["late_s"],
                    )
                )
                break
    return out


def detection_line(record: FaultRecord, time_scale: TimeScale) -> str | None:
    """``fault ...: BFD took the link down at leaf1:eth1 after 7.4 µs (detection-time), ...``, in fabric
    time beside wall time; None when no session changed."""
    if not record.detections:
        return None
    clock = Clock(time_scale)
    each = [
        f"{d.state} at {d.node}:{d.interface} after {clock.both(d.after_s)} ({d.reason})"
        for d in record.detections
    ]
    return f"fault {record.fault.describe()}: BFD saw it " + ", ".join(each)


@dataclass(frozen=True)
class Reroute:
    """One end of a link fault switching its fast-reroute bypass to the neighbour across the link:
    ``after_s`` wall seconds from when the fault began to be applied to the bypass going ``on`` (or
    ``off``, when the fault gave the link back)."""

    node: str
    neighbor: str
    state: str  # on or off
    after_s: float
    # on: when the first copy went into the bypass (the first packet on the new path), from when the fault
    # began; None when none did before the bypass went off again or the run ended
    first_copy_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Unprotected:
    """One end of a link fault whose plan has no fast-reroute bypass to the neighbour across the link: its
    copies for that neighbour are lost until the link is back (or, with ``bier.bift: bgp``, until the
    senders' routes move off it). ``through_hosts``: a way round exists, but every one passes a GPU host,
    and hosts do not transit (on the superpod, a plane is one switch and its GPUs)."""

    node: str
    neighbor: str
    through_hosts: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Link actions that take a link away (in whole or in part); "up", "loss 0" and the rest give it back or
# change its rate.
_TAKES_AWAY = ("down", "loss")


def unprotected(
    record: FaultRecord,
    across: Iterable[tuple[str, str]],
    adjacency: Mapping[str, Sequence[str]],
    bypassed: Mapping[str, Collection[str]],
) -> list[Unprotected]:
    """The ends of a link fault that takes the link away whose plan has no bypass to the neighbour across
    it. ``across``: (node, the neighbour across the link); ``adjacency``: every BFR's BFR-NBRs;
    ``bypassed``: each BFR's neighbours that have a bypass in the plan. An end that is not a BFR, or whose
    neighbour is not a BFR-NBR, is not listed."""
    if record.fault.gives_back or record.fault.action not in _TAKES_AWAY:
        return []
    out = []
    for node, neighbor in across:
        if neighbor not in adjacency.get(node, ()) or neighbor in bypassed.get(node, ()):
            continue
        around = bypass_path(adjacency, node, neighbor, lambda _node: True)
        out.append(Unprotected(node, neighbor, through_hosts=around is not None))
    return out


def reroutes(
    record: FaultRecord,
    across: Iterable[tuple[str, str]],
    events: Mapping[str, Iterable[Mapping[str, Any]]],
    zero: float,
    until_s: float | None,
    first_copies: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
) -> list[Reroute]:
    """Each end's first bypass switch for the link after the fault began (``record.started_s``, seconds
    after the run's ``zero``) and before ``until_s``. ``across``: (node, the neighbour across the link);
    ``events``: each node's ``fast_reroute.events`` from ``aidcnet ctl show bift`` (``at_ns``, ``on``: the
    neighbours whose bypass is on from then), ``first_copies`` its ``fast_reroute.first_copies``
    (``neighbor``, ``at_ns``). A switch is an event that changes whether the neighbour is in ``on``; an end
    whose bypass never went on for this link (it had another next hop) has none."""
    if record.started_s is None:
        return []
    # a fault that gives the link back turns bypasses off; an "on" then is the agent hearing BGP's routes
    # come back a moment before the carrier, not a reroute
    want_on = not record.fault.gives_back
    out = []
    for node, neighbor in across:
        was_on = False
        for event in events.get(node, ()):
            at_s = event["at_ns"] / 1e9 - zero
            now_on = neighbor in event["on"]
            if until_s is not None and at_s >= until_s:
                break
            if at_s >= record.started_s and now_on != was_on and now_on == want_on:
                first = _first_copy(first_copies, node, neighbor, zero, at_s, until_s) if now_on else None
                state = "on" if now_on else "off"
                since = None if first is None else first - record.started_s
                out.append(Reroute(node, neighbor, state, at_s - record.started_s, since))
                break
            was_on = now_on
    return out


def _first_copy(
    first_copies: Mapping[str, Iterable[Mapping[str, Any]]] | None,
    node: str,
    neighbor: str,
    zero: float,
    from_s: float,
    until_s: float | None,
) -> float | None:
    """When (seconds after ``zero``) ``node`` first sent a copy into its bypass to ``neighbor`` from
    ``from_s`` (the switch) on and before ``until_s``; None when it did not."""
    for copy in (first_copies or {}).get(node, ()):
        at_s = copy["at_ns"] / 1e9 - zero
        if copy["neighbor"] == neighbor and at_s >= from_s and (until_s is None or at_s < until_s):
            return at_s
    return None


def reroute_line(record: FaultRecord, time_scale: TimeScale) -> str | None:
    """``fault ...: fast reroute: spine1's bypass to leaf1 on after 310.0 ns``, in fabric time beside wall
    time; None when no bypass switched. (The BIER modes send through it; the others run beside it.)"""
    if not record.reroutes and not record.unprotected:
        return None
    clock = Clock(time_scale)
    each = [
        f"{r.node}'s bypass to {r.neighbor} {r.state} after {clock.both(r.after_s)}"
        + ("" if r.first_copy_s is None else f", its first copy after {clock.both(r.first_copy_s)}")
        for r in record.reroutes
    ]
    for through_hosts in (True, False):
        ends = [f"{u.node} to {u.neighbor}" for u in record.unprotected if u.through_hosts == through_hosts]
        if ends:
            why = "every way round passes a GPU host" if through_hosts else "there is no other way round"
            each.append(f"no bypass for {' or '.join(ends)} ({why})")
    return f"fault {record.fault.describe()}: fast reroute: " + ", ".join(each)


def unexplained_downs(
    events: Mapping[str, Iterable[Mapping[str, Any]]],
    touched: set[tuple[str, str]],
    zero: float,
    end_s: float | None,
) -> list[Detection]:
    """BFD Downs during the run (from its zero to ``end_s``) on links no fault touched: a session that went
    down with nothing done to its link, e.g. its packets queued behind the run's data. ``after_s`` is
    from the run's zero."""
    out = []
    for node, node_events in sorted(events.items()):
        for e in node_events:
            at_s = e["at_ns"] / 1e9 - zero
            if e["state"] != "down" or e["reason"] == "loss-cleared" or (node, e["interface"]) in touched:
                continue
            if at_s >= 0 and (end_s is None or at_s <= end_s):
                out.append(Detection(node, e["interface"], "down", e["reason"], at_s, e["late_s"]))
    return out


def unexplained_line(downs: Iterable[Detection], time_scale: TimeScale) -> str:
    clock = Clock(time_scale)
    each = ", ".join(f"{d.node}:{d.interface} at {clock.both(d.after_s)} ({d.reason})" for d in downs)
    return (
        f"BFD took down links no fault touched: {each}; each was out of forwarding until its session came "
        "back, so the run's forwarding was not the fabric's (a link carrying more than its BFD packets can "
        "wait behind in the shaper's queue, and a late agent sends late: docs/bfd.md)"
    )


def fault_lines(records: Iterable[FaultRecord], time_scale: TimeScale) -> list[str]:
    """One line per fault for the run's summary: when it took effect in fabric time at the scale the run's
    links were shaped to, beside the wall time that is, and how long applying it took on the
    emulator (wall time: our tools, not a router)."""
    clock = Clock(time_scale)
    out = []
    for r in records:
        if r.started_s is None or r.error is not None:
            out.append(f"fault {r.fault.describe()} at {format_seconds(r.fault.at_s)} fabric: {r.problem()}")
            continue
        late = r.late_s(time_scale)
        effect = "" if late is None else f", in effect {clock.both(late)} after its time"
        took = "" if r.done_s is None else f", done after {wall(r.done_s - r.started_s)}"
        out.append(f"fault {r.fault.describe()} at {clock.both(r.started_s)}{effect}{took}")
        out.extend(line for line in (detection_line(r, time_scale), reroute_line(r, time_scale)) if line)
    return out


def counters_across_restarts(segments: list[Mapping[str, int]], after: Mapping[str, int]) -> dict[str, int]:
    """A node's counters after a run in which its agent restarted, as one snapshot the driver's delta
    step can take from the one before the run: an agent counts from zero again after a restart, so the
    counters read just before each restart (``segments``) are added to the ones read after the run."""
    total = Counter(after)
    for segment in segments:
        total.update(segment)
    return dict(total)


@dataclass(frozen=True)
class Outage:
    """How long one receiver went without (wall seconds after the run's zero), seen where it shows: in the
    arrivals of the source whose messages it missed over the longest span. ``from_s``: when the last
    message of that source it got before its first miss arrived (0.0: none did, from the run's zero);
    ``back_s``: when the first it got after its last miss arrived (None: none did). Messages of a source
    are taken in the order it sends them (their ids), so the gap spans the misses and the spacing of the
    messages around them: a bound from above, as fine as the trace's messages are."""

    source: str
    from_s: float
    back_s: float | None
    # The median gap between that source's arrivals at the receiver, the outage's aside (None: fewer
    # than two): what "without" means against how often that source's messages come anyway.
    usual_s: float | None = None

    @property
    def for_s(self) -> float | None:
        """None: never back. Never below 0: a message sent after the misses may arrive before one sent
        ahead of them (another path), and then that source's arrivals had no gap."""
        return None if self.back_s is None else max(0.0, self.back_s - self.from_s)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "for_s": self.for_s}


@dataclass(frozen=True)
class FailureDomain:
    """Who a run with faults failed (seed 001's minimal failure domain): of the receivers the trace names,
    the messages each one missed (none missing: nothing was lost, whatever broke), and for how long it
    went without them (:class:`Outage`)."""

    receivers: int
    missed: Mapping[str, int]  # receiver -> messages it was owed and did not get whole
    owed: Mapping[str, int]  # receiver -> messages the trace sends it
    outages: Mapping[str, Outage] = field(default_factory=dict)

    @classmethod
    def of(cls, messages: Iterable[MessageResult]) -> FailureDomain:
        owed: Counter[str] = Counter()
        missed: Counter[str] = Counter()
        # (receiver, source) -> [(message id, arrival or None: missed)]
        flows: dict[tuple[str, str], list[tuple[int, float | None]]] = {}
        for message in messages:
            got = set(message.delivered)
            for receiver in message.expected:
                owed[receiver] += 1
                missed[receiver] += receiver not in got
                if receiver not in got:
                    flows.setdefault((receiver, message.src), []).append((message.id, None))
                elif receiver in message.latency:  # (a record without latencies says nothing of when)
                    arrival = message.sent_at + message.latency[receiver]
                    flows.setdefault((receiver, message.src), []).append((message.id, arrival))
        outages: dict[str, Outage] = {}
        for (receiver, source), flow in sorted(flows.items()):
            outage = _flow_outage(source, sorted(flow))
            if outage is not None and _longer(outage, outages.get(receiver)):
                outages[receiver] = outage
        missed_any = {r: n for r, n in sorted(missed.items()) if n}
        return cls(len(owed), missed_any, dict(sorted(owed.items())), outages)

    def to_dict(self) -> dict[str, Any]:
        return {
            "receivers": self.receivers,
            "touched": len(self.missed),
            "missed": dict(self.missed),
            **({"outage": {r: o.to_dict() for r, o in self.outages.items()}} if self.outages else {}),
        }

    def describe(self, time_scale: TimeScale | None = None) -> str:
        """The run's line; with ``time_scale``, each receiver's outage in fabric time beside wall time."""
        if not self.missed:
            return f"failure domain: none of the {self.receivers} receivers missed a message"

        def how_long(receiver: str) -> str:
            outage = self.outages.get(receiver)
            if outage is None or time_scale is None:
                return ""
            if outage.for_s is None:
                return f", {outage.source}'s not back by the run's end"
            if outage.for_s == 0:
                return f", no gap in {outage.source}'s"
            clock = Clock(time_scale)
            usual = "" if outage.usual_s is None else f" (one every {clock.time(outage.usual_s)} otherwise)"
            return f", {clock.both(outage.for_s)} without {outage.source}'s{usual}"

        each = ", ".join(f"{r} {n} of {self.owed[r]}{how_long(r)}" for r, n in self.missed.items())
        return (
            f"failure domain: {len(self.missed)} of the {self.receivers} receivers missed messages ({each})"
        )


def _flow_outage(source: str, flow: list[tuple[int, float | None]]) -> Outage | None:
    """The gap in one source's arrivals at a receiver around the messages it missed (``flow``: (id,
    arrival or None) in send order); None when it missed none."""
    misses = [i for i, (_id, arrival) in enumerate(flow) if arrival is None]
    if not misses:
        return None
    before = [a for _id, a in flow[: misses[0]] if a is not None]
    after = [a for _id, a in flow[misses[-1] + 1 :] if a is not None]
    gaps = [
        later - earlier
        for side in (sorted(before), sorted(after))
        for earlier, later in itertools.pairwise(side)
    ]
    usual = statistics.median(gaps) if gaps else None
    return Outage(source, max(before, default=0.0), min(after) if after else None, usual)


def _longer(outage: Outage, than: Outage | None) -> bool:
    """A source never back outlasts any other; else the longer gap (the first source named, on a tie)."""
    if than is None:
        return True
    if than.for_s is None:
        return False
    return outage.for_s is None or outage.for_s > than.for_s
