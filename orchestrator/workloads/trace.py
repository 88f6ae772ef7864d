"""The aidclab workload trace format, versions 1 and 2 (JSON Lines).

Line 1 is a header object, every further line one operation::

    {"format": "aidclab-trace", "version": 1, "generator": "moe", "params": {...}, "hosts": ["h1", ...]}
    {"t": 0.0, "op": "multicast", "src": "h1", "dst": ["h3", "h5"], "bytes": 14816, "tag": "step0", "id": 0}

Version 2 adds dependencies (closed loop): an op may name the earlier ops it waits for (``after``), and
a ``compute`` op is a phase of work on one GPU host, in fabric seconds::

    {"t": 0.0, "op": "compute", "src": "h1", "seconds": 2.5e-05, "after": [0], "tag": "L0 experts", "id": 7}

A version-1 trace reads unchanged; a trace without dependencies is written as version 1.

The reader streams: it holds one line at a time (and, for version 2, the hosts of each op id, which the
dependency checks need), so a trace of any size can be replayed or summarised. The writer applies exactly
the reader's checks, so a file it produced always reads back. The full specification, with the
versioning rules, is ``docs/trace-format.md``.

This module lives in ``aidcnet`` because host agents inside the containers read traces; it therefore
depends on pydantic and the standard library only.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from orchestrator.units import format_bytes

FORMAT_NAME = "aidclab-trace"
# The version a trace without dependencies is written in (every reader of ours takes it), and the one that
# added them: ``after`` on any op and the ``compute`` op (closed loop, docs/trace-format.md).
TRACE_VERSION = 1
DEPENDENCIES_VERSION = 2
SUPPORTED_VERSIONS: tuple[int, ...] = (1, 2)

Source = str | os.PathLike[str] | TextIO | Iterable[str]
# The kinds of trace op (what the workload does), not transport modes (aidcnet.modes: how a run carries it).
OpKind = Literal["multicast", "unicast", "allreduce"]
MULTICAST_OP: OpKind = "multicast"
UNICAST_OP: OpKind = "unicast"
ALLREDUCE_OP: OpKind = "allreduce"
# Version 2: a phase of work on one GPU host (no bytes move).
COMPUTE_OP = "compute"

# Containerlab node names; anything looser would not survive being an inventory host or a file name.
HOST_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_HOST_RE = re.compile(HOST_PATTERN)

_OP_FIELDS = ("t", "op", "src", "dst", "bytes", "after", "tag", "id")
_COMPUTE_FIELDS = ("t", "op", "src", "seconds", "after", "tag", "id")
_HEADER_FIELDS = ("format", "version", "generator", "params", "hosts")


class TraceError(ValueError):
    """A trace that cannot be read or written; the message names the file, line and field."""

    def __init__(self, name: str, line: int | None, problems: list[tuple[str, str]]) -> None:
        self.name = name
        self.line = line
        # (field path or "" for the whole line, message) pairs, in pydantic's order.
        self.problems = problems
        where = f"{name} line {line}" if line is not None else name
        parts = [f"{where}: field '{f}': {m}" if f else f"{where}: {m}" for f, m in problems]
        super().__init__("\n".join(parts))

    @property
    def field(self) -> str:
        return self.problems[0][0] if self.problems else ""


class TraceHeader(BaseModel):
    """Line 1 of every trace: what made it, with which parameters, over which hosts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["aidclab-trace"]
    version: int
    generator: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    hosts: list[str] = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _supported(cls, v: int) -> int:
        if v not in SUPPORTED_VERSIONS:
            raise ValueError(_unsupported_version(v))
        return v

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        _check_names(v, "host")
        dup = _first_duplicate(v)
        if dup is not None:
            raise ValueError(f"host {dup!r} is listed twice")
        return v


class _Op(BaseModel):
    """What every line after the header checks the same way: its source is a host of the header, and
    ``after`` lists op ids. The fields are each kind's own (their order is the line's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("after", check_fields=False)
    @classmethod
    def _after(cls, v: list[int]) -> list[int]:
        return _check_after(v)

    @field_validator("src", check_fields=False)
    @classmethod
    def _src_known(cls, v: str, info: ValidationInfo) -> str:
        return _known_host(v, info)


class TraceOp(_Op):
    """One operation: at time ``t`` host ``src`` sends ``bytes`` bytes to every host in ``dst``.

    For ``multicast`` the same data goes to all of ``dst``, so a multicast fabric carries it once per
    link while unicast needs ``len(dst)`` copies. ``allreduce``: ``src`` and ``dst`` each contribute
    ``bytes`` and all receive the reduction (docs/trace-format.md, docs/allreduce.md).
    """

    t: float = Field(ge=0, allow_inf_nan=False)
    op: OpKind
    src: str
    dst: list[str] = Field(min_length=1)
    bytes: int = Field(gt=0)
    # Version 2: the earlier ops this one waits for (docs/trace-format.md, "Dependencies").
    after: list[int] = Field(default_factory=list)
    tag: str | None = None
    id: int = Field(ge=0)

    @field_validator("dst")
    @classmethod
    def _dst(cls, v: list[str], info: ValidationInfo) -> list[str]:
        _check_names(v, "host")
        dup = _first_duplicate(v)
        if dup is not None:
            raise ValueError(f"host {dup!r} is listed twice")
        hosts = (info.context or {}).get("hosts")
        if hosts is not None:
            unknown = [h for h in v if h not in hosts]
            if unknown:
                raise ValueError(f"host {unknown[0]!r} is not in the header's hosts")
        # info.data holds only the fields that validated, so a bad src does not add a second error here.
        src = info.data.get("src")
        if src is not None and src in v:
            raise ValueError(f"contains the source {src!r}; a host never sends to itself")
        if info.data.get("op") == UNICAST_OP and len(v) != 1:
            raise ValueError(f"a unicast op has exactly one receiver, got {len(v)}")
        return v

    @property
    def fanout(self) -> int:
        return len(self.dst)

    @property
    def hosts(self) -> frozenset[str]:
        """Every host the op involves: its source and its receivers (an AllReduce's workers)."""
        return frozenset((self.src, *self.dst))

    @property
    def actors(self) -> frozenset[str]:
        """The hosts that act on it and so wait for its ``after``: the source of a message, every worker
        of an AllReduce."""
        return self.hosts if self.op == ALLREDUCE_OP else frozenset((self.src,))

    def to_json(self) -> str:
        d: dict[str, Any] = {
            "t": self.t,
            "op": self.op,
            "src": self.src,
            "dst": self.dst,
            "bytes": self.bytes,
        }
        if self.after:
            d["after"] = self.after
        if self.tag is not None:
            d["tag"] = self.tag
        d["id"] = self.id
        return json.dumps(d, separators=(",", ":"))


class ComputeOp(_Op):
    """Version 2: host ``src`` computes for ``seconds`` of fabric time once the ops it waits for
    (``after``) are done there; it moves no bytes. A host's compute ops run one at a time (one GPU), in
    the order they become ready. ``dst`` is empty and ``bytes`` 0, so code that sums an op stream's
    transfers may pass it by."""

    t: float = Field(ge=0, allow_inf_nan=False)
    op: Literal["compute"]
    src: str
    seconds: float = Field(ge=0, allow_inf_nan=False)
    after: list[int] = Field(default_factory=list)
    tag: str | None = None
    id: int = Field(ge=0)

    @property
    def dst(self) -> list[str]:
        return []

    @property
    def bytes(self) -> int:
        return 0

    @property
    def fanout(self) -> int:
        return 0

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset((self.src,))

    @property
    def actors(self) -> frozenset[str]:
        return self.hosts

    def to_json(self) -> str:
        d: dict[str, Any] = {"t": self.t, "op": self.op, "src": self.src, "seconds": self.seconds}
        if self.after:
            d["after"] = self.after
        if self.tag is not None:
            d["tag"] = self.tag
        d["id"] = self.id
        return json.dumps(d, separators=(",", ":"))


# Any line after the header: a transfer (message or AllReduce) or, in version 2, a compute phase.
AnyOp = TraceOp | ComputeOp


def _known_host(v: str, info: ValidationInfo) -> str:
    _check_names([v], "host")
    hosts = (info.context or {}).get("hosts")
    if hosts is not None and v not in hosts:
        raise ValueError(f"host {v!r} is not in the header's hosts")
    return v


def _check_after(v: list[int]) -> list[int]:
    for i in v:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise ValueError(f"must list op ids (integers >= 0), got {i!r}")
    dup = _first_duplicate([str(i) for i in v])
    if dup is not None:
        raise ValueError(f"op {dup} is listed twice")
    return v


def is_compute(op: AnyOp) -> bool:
    return op.op == COMPUTE_OP


def is_message(op: AnyOp) -> bool:
    """A unicast or multicast op: what the message modes carry."""
    return op.op in (MULTICAST_OP, UNICAST_OP)


def transfers(ops: Iterable[AnyOp]) -> list[TraceOp]:
    """The ops that move bytes (messages and AllReduces), compute phases left out."""
    return [op for op in ops if not isinstance(op, ComputeOp)]


def message_ops(ops: Iterable[AnyOp]) -> list[TraceOp]:
    """The unicast and multicast ops."""
    return [op for op in ops if isinstance(op, TraceOp) and is_message(op)]


def closed_loop(ops: Iterable[AnyOp]) -> bool:
    """Whether any op waits for another or computes: the trace is a step to replay closed loop."""
    return any(op.after or isinstance(op, ComputeOp) for op in ops)


def header_to_json(header: TraceHeader) -> str:
    return json.dumps(header.model_dump(mode="json"), separators=(",", ":"))


def _unsupported_version(v: object) -> str:
    supported = ", ".join(str(s) for s in SUPPORTED_VERSIONS)
    return (
        f"unsupported version {v!r}; this reader supports version(s) {supported} "
        "(a newer trace needs a newer aidclab)"
    )


def _check_names(names: list[str], what: str) -> None:
    for n in names:
        if not _HOST_RE.match(n):
            raise ValueError(f"{what} name {n!r} is not a node name (letters, digits, '.', '_', '-'; max 64)")


def _first_duplicate(items: list[str]) -> str | None:
    seen: set[str] = set()
    for x in items:
        if x in seen:
            return x
        seen.add(x)
    return None


# ---------------------------------------------------------------------------------------------- errors


def _problems(exc: ValidationError, known_fields: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for e in exc.errors(include_url=False):
        loc = e.get("loc", ())
        path = ""
        for part in loc:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        out.append((path, explain_error(e, known_fields)))
    return out


def explain_error(e: Any, known_fields: tuple[str, ...] = ()) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) as a short 'must be ...' phrase."""
    kind = e["type"]
    ctx = e.get("ctx") or {}
    got = e.get("input")
    names = {
        "int_type": "an integer",
        "float_type": "a number",
        "string_type": "a string",
        "list_type": "a list",
        "dict_type": "an object",
        "bool_type": "true or false",
    }
    if kind in names:
        return f"must be {names[kind]}, got {json.dumps(got) if _jsonable(got) else type(got).__name__}"
    match kind:
        case "greater_than":
            return f"must be > {_num(ctx['gt'])}, got {got!r}"
        case "greater_than_equal":
            return f"must be >= {_num(ctx['ge'])}, got {got!r}"
        case "finite_number":
            return "must be a finite number"
        case "too_short":
            n = ctx.get("min_length", 1)
            return "must not be empty" if n == 1 else f"must have at least {n} items"
        case "missing":
            return "is required but missing"
        case "extra_forbidden":
            if not known_fields:
                return "unknown field"
            return f"unknown field (known fields: {', '.join(known_fields)})"
        case "literal_error":
            return f"must be {ctx['expected']}, got {got!r}"
        case "json_invalid":
            return f"not valid JSON: {ctx.get('error', e['msg'])}"
        case "model_type" | "model_attributes_type":
            return "must be a JSON object"
        case "value_error":
            return str(ctx.get("error", e["msg"]))
    msg = str(e["msg"])
    return msg[:1].lower() + msg[1:]


def _num(v: object) -> object:
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _jsonable(v: object) -> bool:
    return v is None or isinstance(v, str | int | float | bool | list | dict)


# ---------------------------------------------------------------------------------------------- parsing


def parse_header(line: str, *, name: str = "<trace>") -> TraceHeader:
    """Parse line 1. The version is checked before anything else, so a newer trace says so plainly
    instead of failing on fields this reader does not know."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise TraceError(name, 1, [("", f"not valid JSON: {e.msg} at column {e.colno}")]) from None
    if not isinstance(obj, dict):
        raise TraceError(name, 1, [("", "the first line must be the trace header object")])
    if obj.get("format") != FORMAT_NAME:
        hint = "the first line must be the header, e.g. " + json.dumps(
            {
                "format": FORMAT_NAME,
                "version": TRACE_VERSION,
                "generator": "...",
                "params": {},
                "hosts": ["h1"],
            }
        )
        got = "missing" if "format" not in obj else f"got {obj['format']!r}"
        raise TraceError(name, 1, [("format", f"must be {FORMAT_NAME!r} ({got}); {hint}")])
    if "version" in obj and obj["version"] not in SUPPORTED_VERSIONS:
        raise TraceError(name, 1, [("version", _unsupported_version(obj["version"]))])
    try:
        return TraceHeader.model_validate(obj, strict=True)
    except ValidationError as e:
        raise TraceError(name, 1, _problems(e, _HEADER_FIELDS)) from None


class _Sequence:
    """Checks that need the ops before: time never goes back and ids strictly increase (both let a
    replayer stream the file in order without sorting it), and in version 2 every op an op waits for is
    an earlier op that concerns one of its actors. Waiting only for earlier ops makes every trace a DAG.
    """

    def __init__(self, name: str, version: int = TRACE_VERSION) -> None:
        self.name = name
        self.version = version
        self.last_t = 0.0
        self.last_id = -1
        self.last_line = 0
        # Version 2: the hosts each op id involves (what a dependency on it may be checked against).
        self.hosts_of: dict[int, frozenset[str]] = {}

    def check(self, op: AnyOp, line: int | None) -> None:
        prev = f"line {self.last_line}" if line is not None else "the previous op"
        if op.t < self.last_t:
            msg = f"must not go back in time: {op.t!r} < {self.last_t!r} at {prev}"
            raise TraceError(self.name, line, [("t", msg)])
        if op.id <= self.last_id:
            raise TraceError(
                self.name, line, [("id", f"must increase: {op.id} after {self.last_id} at {prev}")]
            )
        if self.version >= DEPENDENCIES_VERSION:
            self._dependencies(op, line)
            self.hosts_of[op.id] = op.hosts
        elif op.after or isinstance(op, ComputeOp):
            what = "after" if op.after else "op"
            raise TraceError(self.name, line, [(what, _needs_v2(what, self.version))])
        self.last_t, self.last_id = op.t, op.id
        self.last_line = line or 0

    def _dependencies(self, op: AnyOp, line: int | None) -> None:
        for dep in op.after:
            hosts = self.hosts_of.get(dep)
            if hosts is None:
                msg = f"op {dep} is not an op above this one (an op waits only for earlier ops)"
                raise TraceError(self.name, line, [("after", msg)])
            if not hosts & op.actors:
                who = " or ".join(sorted(op.actors))
                msg = (
                    f"op {dep} involves {', '.join(sorted(hosts))}, not {who}: a host waits only for "
                    "ops it sends, receives, computes or reduces in"
                )
                raise TraceError(self.name, line, [("after", msg)])


def _needs_v2(what: str, version: int) -> str:
    feature = "'after'" if what == "after" else f"op {COMPUTE_OP!r}"
    return (
        f"{feature} needs trace version {DEPENDENCIES_VERSION} (the header says {version}); "
        f"set \"version\": {DEPENDENCIES_VERSION} in the header"
    )


def parse_op(raw: str, context: dict[str, Any], name: str, line: int, version: int = TRACE_VERSION) -> AnyOp:
    """One op line, validated against the header's hosts (``context``): a compute op in version 2, a
    transfer otherwise."""
    model: type[TraceOp] | type[ComputeOp] = TraceOp
    known = _OP_FIELDS
    if version >= DEPENDENCIES_VERSION and f'"{COMPUTE_OP}"' in raw:
        try:
            kind = json.loads(raw).get("op")
        except (json.JSONDecodeError, AttributeError):
            kind = None
        if kind == COMPUTE_OP:
            model, known = ComputeOp, _COMPUTE_FIELDS
    try:
        return model.model_validate_json(raw, strict=True, context=context)
    except ValidationError as e:
        raise TraceError(name, line, _problems(e, known)) from None


def _source_name(source: object) -> str:
    if isinstance(source, str | os.PathLike):
        return os.path.basename(os.fspath(source))
    name = getattr(source, "name", None)
    return os.path.basename(name) if isinstance(name, str) else "<stream>"


class TraceReader:
    """Streaming reader: ``header`` is parsed on construction, iterating yields validated ``TraceOp``.

    ``source`` is a path, an open text stream, or any iterable of lines. Only the current line is held.
    Blank lines are skipped (but counted, so line numbers match an editor's).
    """

    def __init__(self, source: Source, *, name: str | None = None) -> None:
        self.name = name or _source_name(source)
        self._owned: TextIO | None = None
        if isinstance(source, str | os.PathLike):
            self._owned = open(source, encoding="utf-8")  # noqa: SIM115 - closed by close()/__exit__
            self._lines: Iterator[str] = iter(self._owned)
        else:
            self._lines = iter(source)
        self._lineno = 0
        self._consumed = False
        try:
            self.header = self._read_header()
        except BaseException:
            self.close()
            raise
        self._hosts = frozenset(self.header.hosts)

    def _read_header(self) -> TraceHeader:
        for raw in self._lines:
            self._lineno += 1
            if raw.strip():
                if self._lineno != 1:
                    raise TraceError(self.name, self._lineno, [("", "the header must be on line 1")])
                return parse_header(raw, name=self.name)
        raise TraceError(self.name, None, [("", "empty trace: expected a header line")])

    def __iter__(self) -> Iterator[AnyOp]:
        if self._consumed:
            raise RuntimeError("a TraceReader can be iterated once; open the trace again")
        self._consumed = True
        seq = _Sequence(self.name, self.header.version)
        ctx = {"hosts": self._hosts}
        try:
            for raw in self._lines:
                self._lineno += 1
                if not raw.strip():
                    continue
                op = parse_op(raw, ctx, self.name, self._lineno, self.header.version)
                seq.check(op, self._lineno)
                yield op
        finally:
            self.close()

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_trace(source: Source) -> tuple[TraceHeader, Iterator[AnyOp]]:
    """Header now, ops lazily. The file (if a path) closes when the iterator is exhausted or collected."""
    reader = TraceReader(source)
    return reader.header, iter(reader)


# ---------------------------------------------------------------------------------------------- writing


class TraceWriter:
    """Writes a header then ops, checking each op as the reader would (hosts, order, ids).

    Output is byte-deterministic: fixed key order, compact separators, ``\\n`` line ends.
    """

    def __init__(self, sink: str | os.PathLike[str] | TextIO, header: TraceHeader) -> None:
        self.name = _source_name(sink)
        self._owned: TextIO | None = None
        if isinstance(sink, str | os.PathLike):
            self._owned = open(sink, "w", encoding="utf-8", newline="\n")  # noqa: SIM115 - closed by close()
            self._out: TextIO = self._owned
        else:
            self._out = sink
        self.header = header
        self._hosts = frozenset(header.hosts)
        self._seq = _Sequence(self.name, header.version)
        self.summary = SummaryAccumulator(header)
        self._out.write(header_to_json(header) + "\n")

    def write(self, op: AnyOp) -> None:
        if op.src not in self._hosts:
            raise TraceError(self.name, None, [("src", f"host {op.src!r} is not in the header's hosts")])
        unknown = [h for h in op.dst if h not in self._hosts]
        if unknown:
            raise TraceError(self.name, None, [("dst", f"host {unknown[0]!r} is not in the header's hosts")])
        self._seq.check(op, None)
        self._out.write(op.to_json() + "\n")
        self.summary.add(op)

    def write_all(self, ops: Iterable[AnyOp]) -> None:
        for op in ops:
            self.write(op)

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trace(
    sink: str | os.PathLike[str] | TextIO, header: TraceHeader, ops: Iterable[AnyOp]
) -> TraceSummary:
    with TraceWriter(sink, header) as w:
        w.write_all(ops)
        return w.summary.result()


def dumps_trace(header: TraceHeader, ops: Iterable[AnyOp]) -> str:
    buf = io.StringIO()
    write_trace(buf, header, ops)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- summary


@dataclass
class TraceSummary:
    header: TraceHeader
    ops: int = 0
    ops_by_kind: dict[str, int] = field(default_factory=dict)
    # Payload the sources emit once per op (what a multicast fabric injects).
    bytes: int = 0
    # bytes × fan-out: what the receivers get, and what a unicast fabric has to send.
    delivered_bytes: int = 0
    fanout_hist: dict[int, int] = field(default_factory=dict)
    duration: float = 0.0
    tx_bytes: dict[str, int] = field(default_factory=dict)
    rx_bytes: dict[str, int] = field(default_factory=dict)
    # The same totals per op kind: a summary speaks of each kind in its own terms.
    bytes_by_kind: dict[str, int] = field(default_factory=dict)
    delivered_by_kind: dict[str, int] = field(default_factory=dict)
    receivers_by_kind: dict[str, int] = field(default_factory=dict)
    # Version 2: fabric seconds of compute over all hosts, and the dependencies (``after`` entries).
    compute_seconds: float = 0.0
    dependencies: int = 0

    @property
    def fanout_mean(self) -> float:
        """Receivers per transfer (compute ops move nothing and are left out)."""
        n = sum(self.fanout_hist.values())
        return sum(k * v for k, v in self.fanout_hist.items()) / n if n else 0.0

    def _messages(self) -> tuple[int, int, int, int]:
        """(ops, bytes, delivered bytes, receivers) of the message ops: unicast and multicast."""
        ops = self.ops - self.ops_by_kind.get(ALLREDUCE_OP, 0) - self.ops_by_kind.get(COMPUTE_OP, 0)
        nbytes = self.bytes - self.bytes_by_kind.get(ALLREDUCE_OP, 0)
        delivered = self.delivered_bytes - self.delivered_by_kind.get(ALLREDUCE_OP, 0)
        receivers = sum(n for kind, n in self.receivers_by_kind.items() if kind != ALLREDUCE_OP)
        return ops, nbytes, delivered, receivers

    @property
    def multicast_saving(self) -> float:
        """Fraction of the message ops' source bytes multicast avoids compared with one unicast copy per
        receiver (an AllReduce op has no receivers to copy to: its bytes do not count)."""
        _ops, nbytes, delivered, _receivers = self._messages()
        return 1 - nbytes / delivered if delivered else 0.0

    def one_line(self) -> str:
        """The trace in a line, each kind of op in its own terms: messages by fan-out and what multicast
        saves, AllReduce ops by their size and workers."""
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.ops_by_kind.items()))
        parts = [f"{self.header.generator}: {self.ops} ops ({kinds})"]
        ops, nbytes, delivered, receivers = self._messages()
        if ops:
            words = (
                f"{format_bytes(nbytes)} sent, {format_bytes(delivered)} delivered, "
                f"fan-out mean {receivers / ops:.2f}"
            )
            if self.ops_by_kind.get(MULTICAST_OP):
                words += f", multicast saves {self.multicast_saving:.1%}"
            parts.append(words)
        if reduced := self.ops_by_kind.get(ALLREDUCE_OP, 0):
            nbytes = self.bytes_by_kind[ALLREDUCE_OP]
            # An AllReduce op names one worker as src and the others in dst.
            workers = (self.receivers_by_kind[ALLREDUCE_OP] + reduced) / reduced
            parts.append(
                f"AllReduce {format_bytes(nbytes)} in total ({format_bytes(nbytes / reduced)} per op), "
                f"{workers:g} workers per op"
            )
        if self.ops_by_kind.get(COMPUTE_OP) or self.dependencies:
            parts.append(
                f"closed loop: {self.dependencies} dependencies, {self.compute_seconds * 1e6:.4g} µs of "
                "compute over all hosts"
            )
        parts.append(f"{len(self.header.hosts)} hosts, last op at t={self.duration:g} s")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "generator": self.header.generator,
            "version": self.header.version,
            "hosts": len(self.header.hosts),
            "ops": self.ops,
            "ops_by_kind": dict(sorted(self.ops_by_kind.items())),
            "bytes": self.bytes,
            "delivered_bytes": self.delivered_bytes,
            "fanout_mean": self.fanout_mean,
            "fanout_hist": {str(k): v for k, v in sorted(self.fanout_hist.items())},
            "multicast_saving": self.multicast_saving,
            "duration": self.duration,
            "tx_bytes": self.tx_bytes,
            "rx_bytes": self.rx_bytes,
        } | (
            {"compute_seconds": self.compute_seconds, "dependencies": self.dependencies}
            if self.header.version >= DEPENDENCIES_VERSION
            else {}
        )


class SummaryAccumulator:
    """Running totals over an op stream (shared by summarize() and the writer)."""

    def __init__(self, header: TraceHeader) -> None:
        self._s = TraceSummary(header)
        self._s.tx_bytes = {h: 0 for h in header.hosts}
        self._s.rx_bytes = {h: 0 for h in header.hosts}

    def add(self, op: AnyOp) -> None:
        s = self._s
        s.ops += 1
        s.ops_by_kind[op.op] = s.ops_by_kind.get(op.op, 0) + 1
        s.dependencies += len(op.after)
        s.duration = max(s.duration, op.t)
        if isinstance(op, ComputeOp):
            s.compute_seconds += op.seconds
            return
        n = len(op.dst)
        s.bytes += op.bytes
        s.delivered_bytes += op.bytes * n
        s.bytes_by_kind[op.op] = s.bytes_by_kind.get(op.op, 0) + op.bytes
        s.delivered_by_kind[op.op] = s.delivered_by_kind.get(op.op, 0) + op.bytes * n
        s.receivers_by_kind[op.op] = s.receivers_by_kind.get(op.op, 0) + n
        s.fanout_hist[n] = s.fanout_hist.get(n, 0) + 1
        s.tx_bytes[op.src] += op.bytes
        for d in op.dst:
            s.rx_bytes[d] += op.bytes

    def result(self) -> TraceSummary:
        self._s.fanout_hist = dict(sorted(self._s.fanout_hist.items()))
        return self._s


def summarize(source: Source) -> TraceSummary:
    """Stream a trace once, validating it, and return its totals."""
    with TraceReader(source) as reader:
        acc = SummaryAccumulator(reader.header)
        for op in reader:
            acc.add(op)
    return acc.result()
