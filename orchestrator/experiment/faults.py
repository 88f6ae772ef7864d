"""Faults during a replay (``aidclab replay ... --fault "AT WHAT"``), pure: what a user wrote, checked, and
the record a run keeps of each fault (docs/faults.md).

A fault is a time and an action:

* ``AT link NODE:IF down|up|bandwidth BW|loss ...``: ``aidclab link set`` at that moment (both ends,
  as the command does);
* ``AT restart NODE``: the node's agent restarts in place (the same process id, a fresh program): every
  state it held is gone (BIFT, aggregation windows, BGP sessions) and comes back from its node file.

AT is fabric time after the run's zero (``20us``, ``0.5ms``, ``1e-5s``; a bare number is seconds): the
moment the senders start, which is the trace's ``t = 0`` (the driver's run step begins ``lead_s`` earlier),
on the same clock as the trace's ops, so a fault falls at the same point of a run at any time scale. The
run waits AT x scale of wall time, and records when each fault took effect on the wall clock and in fabric
time.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aidcnet.timescale import TimeScale
from orchestrator.experiment.clock import Clock, format_seconds, wall
from orchestrator.lab.linkset import ACTIONS as LINK_ACTIONS
from orchestrator.lab.linkset import parse_endpoint
from orchestrator.lab.roles import ROLES, role_named

FORMS = (
    "AT link NODE:IF down|up|bandwidth BW|loss P ... or AT restart NODE (AT: fabric time, e.g. 20us or 0.5ms)"
)
_TIME = re.compile(r"^(?P<n>(?:\d+(?:\.\d*)?|\.\d+)(?:e-?\d+)?)(?P<unit>ns|us|µs|ms|s)?$")
_UNIT_S = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str  # "link" or "restart"
    target: str  # NODE:IF for link, NODE for restart
    words: tuple[str, ...] = ()  # link: the action and its values, as `aidclab link set` takes them
    text: str = ""

    @property
    def node(self) -> str:
        return self.target.split(":", 1)[0]

    def describe(self) -> str:
        return " ".join((self.kind, self.target, *self.words))


def parse_seconds(text: str) -> float:
    """Fabric seconds from ``20us``, ``0.5ms``, ``1e-5s`` or a bare number of seconds."""
    m = _TIME.match(text)
    if m is None:
        raise FaultSpecError(
            f"{text!r} is not a time: fabric time after the run's zero, e.g. 20us, 0.5ms or 1e-5s"
        )
    return float(m["n"]) * _UNIT_S[m["unit"]]


def parse_fault(text: str) -> Fault:
    """One ``--fault`` value; FaultSpecError says what is wrong and shows the forms."""
    words = text.split()
    if len(words) < 3:
        raise FaultSpecError(f"fault {text!r}: too short; want {FORMS}")
    try:
        at_s = parse_seconds(words[0])
    except FaultSpecError as exc:
        raise FaultSpecError(f"fault {text!r}: {exc}") from None
    kind, target, rest = words[1], words[2], tuple(words[3:])
    if kind == "restart":
        if rest or ":" in target:
            raise FaultSpecError(f"fault {text!r}: restart takes one node name; want AT restart NODE")
        return Fault(at_s, kind, target, (), text)
    if kind != "link":
        raise FaultSpecError(f"fault {text!r}: {kind!r} is not a fault; want {FORMS}")
    try:
        parse_endpoint(target)
    except ValueError as exc:
        raise FaultSpecError(f"fault {text!r}: {exc}") from None
    if not rest or rest[0] not in LINK_ACTIONS:
        raise FaultSpecError(
            f"fault {text!r}: a link fault is one of {', '.join(LINK_ACTIONS)} after NODE:IF"
        )
    if rest[0] in ("down", "up") and len(rest) > 1:
        raise FaultSpecError(f"fault {text!r}: {rest[0]} takes no value")
    if rest[0] in ("bandwidth", "loss") and len(rest) < 2:
        raise FaultSpecError(f"fault {text!r}: {rest[0]} needs a value (see aidclab link set --help)")
    return Fault(at_s, kind, target, rest, text)


def schedule(texts: Iterable[str]) -> list[Fault]:
    """Every ``--fault``, parsed, in time order (the order given among equal times)."""
    faults = [parse_fault(t) for t in texts]
    return sorted(faults, key=lambda f: f.at_s)


def check_targets(faults: Iterable[Fault], roles: Mapping[str, str], lab: str) -> None:
    """Every fault names a node of the lab (``roles``: node -> role), and a restart a forwarding node."""
    for fault in faults:
        role = roles.get(fault.node)
        if role is None:
            known = ", ".join(sorted(roles))
            raise FaultSpecError(f"fault {fault.text!r}: lab {lab} has no node {fault.node} (it has {known})")
        if fault.kind == "restart" and not role_named(role).restartable:
            restartable = " or ".join(r.name for r in ROLES.values() if r.restartable)
            raise FaultSpecError(
                f"fault {fault.text!r}: {fault.node} is a {role}; only a {restartable} "
                "restarts during a run (a GPU host's agent holds its part of the run)"
            )


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "fault": self.fault.text,
            "at_s": self.fault.at_s,
            "started_s": self.started_s,
            "effect_s": self.effect_s,
            "done_s": self.done_s,
            "lines": self.lines,
            "error": self.error,
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
    return out


def counters_across_restarts(segments: list[Mapping[str, int]], after: Mapping[str, int]) -> dict[str, int]:
    """A node's counters after a run in which its agent restarted, as one snapshot the driver's delta
    step can take from the one before the run: an agent counts from zero again after a restart, so the
    counters read just before each restart (``segments``) are added to the ones read after the run."""
    total = Counter(after)
    for segment in segments:
        total.update(segment)
    return dict(total)
