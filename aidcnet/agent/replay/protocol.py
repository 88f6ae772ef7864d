"""What travels over the control socket for a replay, as typed records: the load a host is told
(``replay_load``: a :class:`ReplayLoad` with its schedule of :class:`ReplayOp`, the :class:`Receiver`
addresses its ops need, and the membership modes' :class:`Join` and :class:`Report` steps; a closed-loop
step's :class:`Compute` phases and :class:`Reduction` joins besides), and what a sender says afterwards of
each op it sent (:class:`OpTimes`, in ``replay_results``; a step's :class:`ItemTimes`).

The orchestrator's mode classes build them; :class:`aidcnet.agent.client.AgentClient` carries them as JSON
objects, a load cut into as many requests as the socket's line limit needs (:meth:`ReplayLoad.lines`);
the agent parses each request once (:meth:`ReplayLoad.from_wire`), naming the field at fault. The mode
travels as a :class:`~aidcnet.modes.Mode` member: parsing is where its string becomes one, once.
Pure: no I/O. The payload the ops are sent as is ``docs/replay-payload.md``.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

from aidcnet.agent.control import REQUEST_LINE_BYTES
from aidcnet.modes import Mode
from aidcnet.replay import DEFAULT_MAX_DATAGRAM

# Unicast flows (QPs, UDP source ports) per sending host: what per-flow ECMP or FARE hashes over.
DEFAULT_QPS = 8
# The membership modes: a receiver leaves when it has the whole message, or this long (wall seconds) after
# the data was due with nothing arriving (a message that never completes must not keep its group joined).
DEFAULT_HOLD_S = 2.0
# What one request of a load may hold: the control socket's line with room for the request's own keys.
LINE_BUDGET = REQUEST_LINE_BYTES * 3 // 4

T = TypeVar("T")


def _multicast(value: object, where: str) -> str:
    try:
        address = ipaddress.IPv4Address(str(value))
    except ValueError:
        address = None
    if address is None or not address.is_multicast:
        raise ValueError(f"{where}: {value!r} is not an IPv4 multicast group")
    return str(address)


def _address(value: object, where: str) -> str:
    try:
        return str(ipaddress.IPv4Address(str(value)))
    except ValueError:
        raise ValueError(f"{where}: {value!r} is not an IPv4 address") from None


def _bfr_id(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 0xFFFF:
        raise ValueError(f"{where}: {value!r} is not a BFR-id (1..65535)")
    return value


def _parse(cls: type[T], raw: Any, where: str, build: Callable[[Mapping[str, Any]], T]) -> T:
    """``build(raw)``, its field errors named by ``where`` and the fields ``cls`` has."""
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"{where}: want an object with {', '.join(f.name for f in fields(cls))}, not {raw!r}"
        )
    try:
        return build(raw)
    except KeyError as exc:
        raise ValueError(f"{where}: missing {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(where):
            raise
        raise ValueError(f"{where}: {exc}") from None


def _json_size(value: Any) -> int:
    return len(json.dumps(value))


@dataclass(frozen=True, slots=True)
class ReplayOp:
    """One op of a sending host's schedule: message ``id`` of ``size`` bytes, due ``t`` seconds after the
    run's start, to the hosts ``receivers``. The IP-multicast modes add the op's ``group``;
    reliable-net-bier the BFR-ids of that group's BFERs (``bfers``: what its flow is acknowledged per)."""

    id: int
    t: float
    size: int
    receivers: tuple[str, ...]
    group: str | None = None
    bfers: tuple[int, ...] = ()
    # A closed-loop step: the ops whose events at this host it waits for (aidcnet.step).
    after: tuple[int, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "t": self.t,
            "size": self.size,
            "receivers": list(self.receivers),
        }
        if self.group is not None:
            out["group"] = self.group
        if self.bfers:
            out["bfers"] = list(self.bfers)
        if self.after:
            out["after"] = list(self.after)
        return out

    @classmethod
    def from_wire(cls, raw: Any, where: str = "op") -> ReplayOp:
        def build(r: Mapping[str, Any]) -> ReplayOp:
            receivers = r["receivers"]
            if isinstance(receivers, str) or not isinstance(receivers, Iterable):
                raise ValueError(f"{where}.receivers: want a list of host names, not {receivers!r}")
            group = r.get("group")
            return cls(
                int(r["id"]),
                float(r["t"]),
                int(r["size"]),
                tuple(str(d) for d in receivers),
                None if group is None else _multicast(group, f"{where}.group"),
                tuple(_bfr_id(b, f"{where}.bfers") for b in r.get("bfers") or ()),
                _ids(r.get("after"), f"{where}.after"),
            )

        return _parse(cls, raw, where, build)


def _ids(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValueError(f"{where}: want a list of op ids, not {value!r}")
    return tuple(int(i) for i in value)


@dataclass(frozen=True, slots=True)
class Compute:
    """A closed-loop step's compute phase on this host: op ``id``, ``seconds`` of fabric time once the
    events ``after`` happened here and its release time ``t`` came (docs/trace-format.md)."""

    id: int
    t: float
    seconds: float
    after: tuple[int, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "t": self.t, "seconds": self.seconds, "after": list(self.after)}

    @classmethod
    def from_wire(cls, raw: Any, where: str = "compute") -> Compute:
        def build(r: Mapping[str, Any]) -> Compute:
            seconds = float(r["seconds"])
            if not seconds >= 0:
                raise ValueError(f"{where}.seconds: {seconds} must be >= 0")
            return cls(int(r["id"]), float(r["t"]), seconds, _ids(r.get("after"), f"{where}.after"))

        return _parse(cls, raw, where, build)


@dataclass(frozen=True, slots=True)
class Reduction:
    """A closed-loop step's AllReduce op ``id`` this host is a worker of: it joins once the events ``after``
    happened here (and ``t`` came), running the INA worker's ``allreduce`` with ``request`` (job, mode,
    elements, seed, chunk_base and what the mode adds: docs/allreduce.md)."""

    id: int
    t: float
    request: Mapping[str, Any]
    after: tuple[int, ...] = ()

    @property
    def job(self) -> int:
        return int(self.request["job"])

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "t": self.t, "request": dict(self.request), "after": list(self.after)}

    @classmethod
    def from_wire(cls, raw: Any, where: str = "reduction") -> Reduction:
        def build(r: Mapping[str, Any]) -> Reduction:
            request = r["request"]
            if not isinstance(request, Mapping) or "job" not in request or "elements" not in request:
                raise ValueError(f"{where}.request: want the allreduce request (job, mode, elements, ...)")
            return cls(int(r["id"]), float(r["t"]), dict(request), _ids(r.get("after"), f"{where}.after"))

        return _parse(cls, raw, where, build)


@dataclass(frozen=True, slots=True)
class Receiver:
    """A receiver an op names: its loopback ``address`` and its ``id`` in the run (its BFR-id; the
    reliable modes number every host), None when it has none."""

    address: str
    id: int | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"address": self.address, "id": self.id}

    @classmethod
    def from_wire(cls, raw: Any, where: str = "receiver") -> Receiver:
        def build(r: Mapping[str, Any]) -> Receiver:
            rid = r.get("id")
            return cls(_address(r["address"], f"{where}.address"), None if rid is None else int(rid))

        return _parse(cls, raw, where, build)


@dataclass(frozen=True, slots=True)
class Join:
    """igmp: a receiver joins (``source``, ``group``) for op ``op`` at its ``t`` (when its receivers are
    known) and leaves once it has the message (docs/igmp.md)."""

    op: int
    t: float
    group: str
    source: str

    def to_wire(self) -> dict[str, Any]:
        return {"op": self.op, "t": self.t, "group": self.group, "source": self.source}

    @classmethod
    def from_wire(cls, raw: Any, where: str = "join") -> Join:
        def build(r: Mapping[str, Any]) -> Join:
            group = _multicast(r["group"], f"{where}.group")
            return cls(int(r["op"]), float(r["t"]), group, _address(r["source"], f"{where}.source"))

        return _parse(cls, raw, where, build)


@dataclass(frozen=True, slots=True)
class Report:
    """proxy: a Receiver Proxy Report for ``group`` naming the ``receivers`` (their addresses), sent at op
    ``op``'s t ahead of its data (``before``), or after the group's last op, empty: the withdrawal."""

    op: int
    before: bool
    group: str
    receivers: tuple[str, ...]

    def to_wire(self) -> dict[str, Any]:
        return {"op": self.op, "before": self.before, "group": self.group, "receivers": list(self.receivers)}

    @classmethod
    def from_wire(cls, raw: Any, where: str = "report") -> Report:
        def build(r: Mapping[str, Any]) -> Report:
            group = _multicast(r["group"], f"{where}.group")
            receivers = tuple(_address(a, f"{where}.receivers") for a in r["receivers"])
            return cls(int(r["op"]), bool(r["before"]), group, receivers)

        return _parse(cls, raw, where, build)


# The item lists of a load, what each holds, and what :meth:`ReplayLoad.lines` spreads over requests.
_ITEMS: dict[str, type] = {
    "ops": ReplayOp, "joins": Join, "reports": Report, "computes": Compute, "reductions": Reduction,
}  # fmt: skip


@dataclass(frozen=True)
class ReplayLoad:
    """What one host is told for a run in ``mode``: the ops it sends (``ops``, and the ``receivers`` they
    name), and as it needs them: the fabric ``interface`` of the IP-multicast modes and the ``groups``
    it receives there (joined at load); the membership modes' ``lead_s`` (seconds from the moment an op's
    receivers are known to its data), ``hold_s`` and their steps (``joins`` of an igmp receiver,
    ``reports`` of a proxy source); the reliable modes' ``reliable`` settings (``self_id`` and the
    ``ReliableSettings`` fields, docs/reliability.md). A closed-loop step (``closed_loop``) adds this host's
    ``computes`` and ``reductions``, each op starting when what it waits for has happened here
    (:mod:`aidcnet.step`); ``compute_work`` runs each compute phase as real arithmetic for its time
    instead of a wait. ``append`` adds ops, receivers, groups and steps to the run loaded last, whose
    settings stay."""

    mode: Mode
    ops: tuple[ReplayOp, ...] = ()
    receivers: Mapping[str, Receiver] = field(default_factory=dict)
    append: bool = False
    interface: str | None = None
    groups: tuple[str, ...] = ()
    max_datagram: int = DEFAULT_MAX_DATAGRAM
    gap_us: float = 0.0
    qps: int = DEFAULT_QPS
    lead_s: float = 0.0
    hold_s: float = DEFAULT_HOLD_S
    joins: tuple[Join, ...] = ()
    reports: tuple[Report, ...] = ()
    reliable: Mapping[str, Any] | None = None
    closed_loop: bool = False
    computes: tuple[Compute, ...] = ()
    reductions: tuple[Reduction, ...] = ()
    compute_work: bool = False

    def to_wire(self) -> dict[str, Any]:
        """The request's fields as JSON values; a field at its default is left out (the agent's default)."""
        out: dict[str, Any] = {"mode": str(self.mode), "ops": [op.to_wire() for op in self.ops]}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in out or value == _DEFAULTS[f.name]:
                continue
            if f.name == "receivers":
                value = {name: r.to_wire() for name, r in value.items()}
            elif f.name in _ITEMS:
                value = [item.to_wire() for item in value]
            elif f.name == "groups":
                value = list(value)
            elif f.name == "reliable":
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_wire(cls, request: Mapping[str, Any]) -> ReplayLoad:
        """Parse a ``replay_load`` request (its ``op`` aside); ValueError names the field at fault."""
        raw = {k: v for k, v in request.items() if k != "op"}
        unknown = sorted(set(raw) - set(_DEFAULTS))
        if unknown:
            raise ValueError(
                f"replay_load: unknown field(s) {', '.join(unknown)}; known: {', '.join(_DEFAULTS)}"
            )
        if "mode" not in raw:
            raise ValueError(f"replay_load: mode missing (one of {', '.join(Mode)})")
        try:
            mode = Mode(raw["mode"])
        except ValueError:
            raise ValueError(f"mode {raw['mode']!r} does not exist; one of {', '.join(Mode)}") from None
        receivers = raw.get("receivers") or {}
        if not isinstance(receivers, Mapping):
            raise ValueError(f"receivers: want {{host: {{address, id}}}}, not {receivers!r}")
        reliable = raw.get("reliable")
        if reliable is not None and not isinstance(reliable, Mapping):
            raise ValueError(f"reliable: want an object of settings, not {reliable!r}")
        load = cls(
            mode,
            ops=tuple(ReplayOp.from_wire(op, f"ops.{k}") for k, op in enumerate(raw.get("ops") or ())),
            receivers={str(n): Receiver.from_wire(r, f"receivers.{n}") for n, r in receivers.items()},
            append=bool(raw.get("append", False)),
            interface=None if raw.get("interface") is None else str(raw["interface"]),
            groups=tuple(_multicast(g, f"groups.{k}") for k, g in enumerate(raw.get("groups") or ())),
            max_datagram=int(raw.get("max_datagram", DEFAULT_MAX_DATAGRAM)),
            gap_us=float(raw.get("gap_us", 0.0)),
            qps=max(1, int(raw.get("qps", DEFAULT_QPS))),
            lead_s=float(raw.get("lead_s", 0.0)),
            hold_s=float(raw.get("hold_s", DEFAULT_HOLD_S)),
            joins=tuple(Join.from_wire(j, f"joins.{k}") for k, j in enumerate(raw.get("joins") or ())),
            reports=tuple(
                Report.from_wire(r, f"reports.{k}") for k, r in enumerate(raw.get("reports") or ())
            ),
            reliable=None if reliable is None else dict(reliable),
            closed_loop=bool(raw.get("closed_loop", False)),
            computes=tuple(
                Compute.from_wire(c, f"computes.{k}") for k, c in enumerate(raw.get("computes") or ())
            ),
            reductions=tuple(
                Reduction.from_wire(r, f"reductions.{k}") for k, r in enumerate(raw.get("reductions") or ())
            ),
            compute_work=bool(raw.get("compute_work", False)),
        )
        if load.lead_s < 0 or load.hold_s <= 0:
            raise ValueError(f"lead_s {load.lead_s} must be >= 0 and hold_s {load.hold_s} > 0")
        return load

    def lines(self, budget: int = LINE_BUDGET) -> list[ReplayLoad]:
        """This load as the requests the control socket takes, each at most ``budget`` bytes of JSON: the
        first with every setting, then appends; each carries the receivers of its own ops."""
        first = replace(self, receivers={}, groups=(), **{kind: () for kind in _ITEMS})
        out = [_Line(first)]
        items: list[tuple[str, Any]] = [(kind, item) for kind in _ITEMS for item in getattr(self, kind)]
        items += [("groups", g) for g in self.groups]
        for kind, item in items:
            cost = out[-1].cost(kind, item, self.receivers)
            if out[-1].size + cost > budget and out[-1].items:
                out.append(_Line(ReplayLoad(self.mode, append=True)))
                cost = out[-1].cost(kind, item, self.receivers)
                if out[-1].size + cost > budget:
                    raise ValueError(
                        f"one of {kind} is {cost} bytes of JSON alone, over a request's {budget}"
                    )
            out[-1].add(kind, item, self.receivers, cost)
        return [line.load() for line in out]


_DEFAULTS: dict[str, Any] = {
    f.name: (f.default_factory() if callable(f.default_factory) else f.default)  # type: ignore[misc]
    for f in fields(ReplayLoad)
}


class _Line:
    """One request of a load being cut (:meth:`ReplayLoad.lines`): its items and its JSON size so far."""

    def __init__(self, head: ReplayLoad) -> None:
        self.head = head
        self.size = _json_size(head.to_wire())
        self.items: dict[str, list[Any]] = {kind: [] for kind in [*_ITEMS, "groups"]}
        self.receivers: dict[str, Receiver] = {}

    def _new_receivers(self, kind: str, item: Any, known: Mapping[str, Receiver]) -> list[str]:
        if kind != "ops":
            return []
        return [r for r in dict.fromkeys(item.receivers) if r in known and r not in self.receivers]

    def cost(self, kind: str, item: Any, known: Mapping[str, Receiver]) -> int:
        """What ``item`` adds to this request: itself, and the receivers it names that are not in yet."""
        value = item if kind == "groups" else item.to_wire()
        extra = sum(
            _json_size(r) + _json_size(known[r].to_wire()) + 4 for r in self._new_receivers(kind, item, known)
        )
        # A list's first item costs its key and brackets (the head leaves an empty list out): say 16.
        return _json_size(value) + 2 + extra + (0 if self.items[kind] else len(kind) + 16)

    def add(self, kind: str, item: Any, known: Mapping[str, Receiver], cost: int) -> None:
        for r in self._new_receivers(kind, item, known):
            self.receivers[r] = known[r]
        self.items[kind].append(item)
        self.size += cost

    def load(self) -> ReplayLoad:
        return replace(
            self.head,
            ops=tuple(self.items["ops"]),
            receivers=self.receivers,
            joins=tuple(self.items["joins"]),
            reports=tuple(self.items["reports"]),
            groups=tuple(self.items["groups"]),
            computes=tuple(self.items["computes"]),
            reductions=tuple(self.items["reductions"]),
        )


@dataclass(slots=True)
class OpTimes:
    """What a sending host did with op ``id`` (wall-clock ns): when it was due (the run's start + t, plus
    the membership modes' lead), when its first and its last datagram were handed to the kernel (None:
    none was), how many datagrams, and their UDP payload ``bytes`` (every copy; in the reliable modes every
    DATA transmission, its reliable header included, handed to the transport's socket queue)."""

    id: int
    due_ns: int
    first_ns: int | None = None
    last_ns: int | None = None
    datagrams: int = 0
    bytes: int = 0

    def handed(self, now_ns: int, size: int, datagrams: int = 1) -> None:
        """``datagrams`` datagrams of ``size`` payload bytes in all went to the kernel at ``now_ns``."""
        if self.first_ns is None:
            self.first_ns = now_ns
        self.last_ns = now_ns
        self.datagrams += datagrams
        self.bytes += size

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "due_ns": self.due_ns,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "datagrams": self.datagrams,
            "bytes": self.bytes,
        }

    @classmethod
    def from_wire(cls, raw: Any, where: str = "op_times") -> OpTimes:
        def build(r: Mapping[str, Any]) -> OpTimes:
            first, last = r.get("first_ns"), r.get("last_ns")
            return cls(
                int(r["id"]),
                int(r["due_ns"]),
                None if first is None else int(first),
                None if last is None else int(last),
                int(r.get("datagrams", 0)),
                int(r.get("bytes", 0)),
            )

        return _parse(cls, raw, where, build)


@dataclass(slots=True)
class ItemTimes:
    """What a closed-loop step's host did with its item ``id`` (wall-clock ns): when all it waited for was
    there (``ready_ns``: the kernel's stamp of the last input), when it started (a send issued, a compute
    begun, an AllReduce joined) and when it ended (a send: issued; a compute: done; an AllReduce: its
    result here)."""

    id: int
    kind: str
    ready_ns: int
    start_ns: int
    end_ns: int | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "ready_ns": self.ready_ns, "start_ns": self.start_ns,
                "end_ns": self.end_ns}  # fmt: skip

    @classmethod
    def from_wire(cls, raw: Any, where: str = "step") -> ItemTimes:
        def build(r: Mapping[str, Any]) -> ItemTimes:
            end = r.get("end_ns")
            return cls(int(r["id"]), str(r["kind"]), int(r["ready_ns"]), int(r["start_ns"]),
                       None if end is None else int(end))  # fmt: skip

        return _parse(cls, raw, where, build)
