"""Faults during a replay (``aidclab replay ... --fault "AT WHAT"``), pure: what a user wrote, checked, and
the record a run keeps of each fault (docs/faults.md).

A fault is a time and an action:

* ``AT link NODE:IF down|up|bandwidth BW|loss ...``: ``aidclab link set`` at that moment (both ends,
  as the command does);
* ``AT restart NODE``: the node's agent restarts in place (the same process id, a fresh program): every
  state it held is gone (BIFT, aggregation windows, BGP sessions) and comes back from its node file.

AT is wall seconds after the run's zero (``2``, ``2.5s``, ``750ms``): the moment the senders start, which
is the trace's ``t = 0`` (the driver's run step begins ``lead_s`` earlier). Wall, because a fault is an act
on the emulation; the run records when each took effect, and at a time scale of 1:N that is 1/N of it in
fabric time.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aidcnet.roles import Role
from orchestrator.lab.linkset import ACTIONS as LINK_ACTIONS
from orchestrator.lab.linkset import parse_endpoint

FORMS = "AT link NODE:IF down|up|bandwidth BW|loss P ... or AT restart NODE (AT: seconds, e.g. 2.5s or 750ms)"
_TIME = re.compile(r"^(?P<n>\d+(?:\.\d*)?|\.\d+)(?P<unit>ms|s)?$")
# Nodes whose agent a run may restart: forwarding nodes. A GPU host's agent holds the run itself (its
# sends and receives), so restarting it ends its part of the run rather than testing the fabric.
RESTARTABLE_ROLES = (Role.BFR, Role.INA_SWITCH)


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
    m = _TIME.match(text)
    if m is None:
        raise FaultSpecError(f"{text!r} is not a time: seconds after the run's zero, e.g. 2, 2.5s or 750ms")
    value = float(m["n"])
    return value / 1e3 if m["unit"] == "ms" else value


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
        if fault.kind == "restart" and role not in RESTARTABLE_ROLES:
            raise FaultSpecError(
                f"fault {fault.text!r}: {fault.node} is a {role}; only a {' or '.join(RESTARTABLE_ROLES)} "
                "restarts during a run (a GPU host's agent holds its part of the run)"
            )


@dataclass
class FaultRecord:
    """What became of one fault in a run (``settings.faults``); seconds after the run's zero."""

    fault: Fault
    started_s: float | None = None
    done_s: float | None = None
    lines: list[str] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "fault": self.fault.text,
            "at_s": self.fault.at_s,
            "started_s": self.started_s,
            "done_s": self.done_s,
            "lines": self.lines,
            "error": self.error,
        }

    def problem(self) -> str | None:
        """Why the run did not get the fault it asked for, or None."""
        if self.error is not None:
            return f"fault {self.fault.text!r} failed: {self.error}"
        if self.started_s is None:
            return f"fault {self.fault.text!r} never happened: the run ended before {self.fault.at_s:g} s"
        return None


def fault_lines(records: Iterable[FaultRecord], scale: int | None) -> list[str]:
    """One line per fault for the run's summary, with fabric time at the lab's scale."""
    out = []
    for r in records:
        if r.started_s is None or r.error is not None:
            out.append(f"fault {r.fault.describe()} at {r.fault.at_s:g} s: {r.problem()}")
            continue
        fabric = "" if not scale else f" (= {r.started_s / scale * 1e6:.1f} µs fabric)"
        took = "" if r.done_s is None else f", done after {(r.done_s - r.started_s) * 1e3:.0f} ms"
        out.append(f"fault {r.fault.describe()} at {r.started_s:.3f} s{fabric}{took}")
    return out


def counters_across_restarts(segments: list[Mapping[str, int]], after: Mapping[str, int]) -> dict[str, int]:
    """A node's counters after a run in which its agent restarted, as one snapshot the driver's delta
    step can take from the one before the run: an agent counts from zero again after a restart, so the
    counters read just before each restart (``segments``) are added to the ones read after the run."""
    total = Counter(after)
    for segment in segments:
        total.update(segment)
    return dict(total)
