"""What a fault during a replay is (``aidclab replay --fault "AT WHAT"``, a lab's ``faults:`` in its vars),
pure: the words a user writes, checked, expanded and put in time order (docs/faults.md). Running them is
the experiment's (``orchestrator.experiment.fault_runner``); the lab's plan checks its own at configure.

A fault is a time and an action:

* ``AT link NODE:IF down|up|bandwidth BW|loss ...``: ``aidclab link set`` at that moment (both ends,
  as the command does); ``... loss ... one-way`` (or ``delay``) at NODE's end only, what leaves NODE on
  that link (a gray failure: one direction drops, the carrier stays);
* ``AT link NODE:IF down for D`` and ``AT link NODE:IF loss ... for D``: the change, and its undoing D
  later (``up``, ``loss 0``); ``AT link NODE:IF flap D N``: down for D, up for D, N times;
* ``AT restart NODE``: the node's agent restarts in place (the same process id, a fresh program): every
  state it held is gone (BIFT, aggregation windows, BGP sessions) and comes back from its node file;
* ``AT node NODE down [for D]``: a dead node as the rest of the lab sees it, every link of NODE down (and
  up again D later): :func:`expand_nodes` makes it one link fault per link, at the same time, once the
  lab's links are known.

AT is fabric time after the run's zero (``20us``, ``0.5ms``, ``1e-5s``; a bare number is seconds): the
moment the senders start, which is the trace's ``t = 0``, on the same clock as the trace's ops, so a fault
falls at the same point of a run at any time scale.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.lab.linkset import ACTIONS as LINK_ACTIONS
from orchestrator.lab.linkset import parse_endpoint
from orchestrator.lab.roles import ROLES, role_named

FORMS = (
    "AT link NODE:IF down|up|bandwidth BW|loss P ... [one-way] [for D], AT link NODE:IF flap D N, "
    "AT node NODE down [for D], or AT restart NODE (AT, D: fabric time, e.g. 20us or 0.5ms)"
)
ONE_WAY = "one-way"
# The actions `aidclab link set --one-way` takes: the others change both ends of a link at once.
ONE_WAY_ACTIONS = ("loss", "delay")
_TIME = re.compile(r"^(?P<n>(?:\d+(?:\.\d*)?|\.\d+)(?:e-?\d+)?)(?P<unit>ns|us|µs|ms|s)?$")
_UNIT_S = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


# The link change that undoes each one ("for D", and Fault.gives_back).
_UNDO: dict[str, tuple[str, ...]] = {"down": ("up",), "loss": ("loss", "0"), "delay": ("delay", "0")}


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str  # "link" or "restart"
    target: str  # NODE:IF for link, NODE for restart
    words: tuple[str, ...] = ()  # link: the action and its values, as `aidclab link set` takes them
    text: str = ""
    one_way: bool = False  # link loss or delay at the target's end only (`aidclab link set --one-way`)

    @property
    def node(self) -> str:
        return self.target.split(":", 1)[0]

    def describe(self) -> str:
        return " ".join((self.kind, self.target, *self.words, *((ONE_WAY,) if self.one_way else ())))

    @property
    def action(self) -> str:
        """A link fault's action (``down``, ``up``, ``loss``, ``bandwidth``, ``delay``); "" for a restart."""
        return self.words[0] if self.kind == "link" and self.words else ""

    @property
    def gives_back(self) -> bool:
        """A link fault that undoes one (``up``, ``loss 0``, ``delay 0``, as ``for D`` writes them)."""
        return self.kind == "link" and self.words in _UNDO.values()


def parse_seconds(text: str) -> float:
    """Fabric seconds from ``20us``, ``0.5ms``, ``1e-5s`` or a bare number of seconds."""
    m = _TIME.match(text)
    if m is None:
        raise FaultSpecError(
            f"{text!r} is not a time: fabric time after the run's zero, e.g. 20us, 0.5ms or 1e-5s"
        )
    return float(m["n"]) * _UNIT_S[m["unit"]]


def parse_fault(text: str) -> Fault:
    """One fault that happens once (no ``for`` or ``flap``: :func:`parse_faults` expands those)."""
    faults = parse_faults(text)
    if len(faults) != 1:
        raise FaultSpecError(f"fault {text!r}: is {len(faults)} faults; want one ({FORMS})")
    return faults[0]


def parse_faults(text: str) -> list[Fault]:
    """One ``--fault`` value as the faults it makes (``for D`` and ``flap`` make several, each with its own
    time); FaultSpecError says what is wrong and shows the forms."""
    words = text.split()
    if len(words) < 3:
        raise FaultSpecError(f"fault {text!r}: too short; want {FORMS}")
    at_s = _seconds_of(text, words[0])
    kind, target, rest = words[1], words[2], tuple(words[3:])
    if kind == "restart":
        if rest or ":" in target:
            raise FaultSpecError(f"fault {text!r}: restart takes one node name; want AT restart NODE")
        return [Fault(at_s, kind, target, (), text)]
    if kind == "node":
        return _node(text, at_s, target, rest)
    if kind != "link":
        raise FaultSpecError(f"fault {text!r}: {kind!r} is not a fault; want {FORMS}")
    try:
        parse_endpoint(target)
    except ValueError as exc:
        raise FaultSpecError(f"fault {text!r}: {exc}") from None
    if rest[:1] == ("flap",):
        return _flap(text, at_s, target, rest[1:])
    lasting_s = None
    if len(rest) >= 2 and rest[-2] == "for":
        lasting_s, rest = _seconds_of(text, rest[-1]), rest[:-2]
    one_way = rest[-1:] == (ONE_WAY,)
    rest = rest[:-1] if one_way else rest
    _check_action(text, rest, one_way)
    change = Fault(at_s, kind, target, rest, text, one_way)
    if lasting_s is None:
        return [change]
    undo = _UNDO.get(rest[0])
    if undo is None:
        raise FaultSpecError(f"fault {text!r}: 'for D' undoes down, loss or delay, not {rest[0]}")
    return [change, Fault(at_s + lasting_s, kind, target, undo, text, one_way)]


def _seconds_of(text: str, word: str) -> float:
    try:
        return parse_seconds(word)
    except FaultSpecError as exc:
        raise FaultSpecError(f"fault {text!r}: {exc}") from None


def _check_action(text: str, rest: tuple[str, ...], one_way: bool) -> None:
    if not rest or rest[0] not in LINK_ACTIONS:
        raise FaultSpecError(
            f"fault {text!r}: a link fault is one of {', '.join(LINK_ACTIONS)} or flap after NODE:IF"
        )
    if rest[0] in ("down", "up") and len(rest) > 1:
        raise FaultSpecError(f"fault {text!r}: {rest[0]} takes no value")
    if rest[0] in ("bandwidth", "loss") and len(rest) < 2:
        raise FaultSpecError(f"fault {text!r}: {rest[0]} needs a value (see aidclab link set --help)")
    if one_way and rest[0] not in ONE_WAY_ACTIONS:
        raise FaultSpecError(
            f"fault {text!r}: {ONE_WAY} applies to {' and '.join(ONE_WAY_ACTIONS)}; {rest[0]} changes "
            "both ends"
        )


def _flap(text: str, at_s: float, target: str, args: tuple[str, ...]) -> list[Fault]:
    """``flap D N``: down at AT, up D later, down D after that, ... N times (2N faults)."""
    if len(args) != 2 or not args[1].isdigit() or int(args[1]) < 1:
        raise FaultSpecError(f"fault {text!r}: flap takes a duration and a count, e.g. flap 5us 3")
    period_s, count = _seconds_of(text, args[0]), int(args[1])
    if period_s <= 0:
        raise FaultSpecError(f"fault {text!r}: a flap's duration must be above zero")
    return [
        Fault(at_s + i * period_s, "link", target, ("down",) if i % 2 == 0 else ("up",), text)
        for i in range(2 * count)
    ]


def _node(text: str, at_s: float, target: str, rest: tuple[str, ...]) -> list[Fault]:
    """``node NODE down [for D]``: the node fault and, with ``for D``, its undoing (``up``) D later."""
    if ":" in target:
        raise FaultSpecError(f"fault {text!r}: node takes a node name; want AT node NODE down [for D]")
    if rest == ("down",):
        return [Fault(at_s, "node", target, ("down",), text)]
    if len(rest) == 3 and rest[:2] == ("down", "for"):
        lasting_s = _seconds_of(text, rest[2])
        return [
            Fault(at_s, "node", target, ("down",), text),
            Fault(at_s + lasting_s, "node", target, ("up",), text),
        ]
    raise FaultSpecError(
        f"fault {text!r}: a node goes down, for a time or for good; want AT node NODE down [for D]"
    )


def expand_nodes(faults: Iterable[Fault], ports: Mapping[str, Sequence[str]]) -> list[Fault]:
    """Every ``node`` fault as one link fault per link of its node (``ports``: node -> its link interfaces),
    at the node fault's time and with its text; the other faults as they are. A node fault on a node with
    no link is an error."""
    out: list[Fault] = []
    for fault in faults:
        if fault.kind != "node":
            out.append(fault)
            continue
        interfaces = ports.get(fault.node, ())
        if not interfaces:
            raise FaultSpecError(f"fault {fault.text!r}: {fault.node} has no link to take down")
        out += [
            Fault(fault.at_s, "link", f"{fault.node}:{ifname}", fault.words, fault.text)
            for ifname in interfaces
        ]
    return out


def schedule(texts: Iterable[str]) -> list[Fault]:
    """Every ``--fault``, expanded and parsed, in time order (the order given among equal times)."""
    faults = [fault for text in texts for fault in parse_faults(text)]
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
