"""What a closed-loop step cost each GPU (docs/training.md "Metrics"), from its times (measured or predicted,
``orchestrator.workloads.step.StepTimes``, seconds from the step's zero):

* **step time**: when the last GPU was done (its last item ended, its last input arrived);
* per GPU, each moment of the step is **compute** (its GPU ran a compute phase), **network** (it waited
  for bytes already on their way: a message its source had issued, an AllReduce all workers had joined)
  or **barrier** (it waited for another GPU to get there: a message not issued yet, an AllReduce a worker
  had not joined, or the end of the step while others still worked). The shares add up to 1; GPU
  utilisation is the compute share;
* **exposed communication**: how much longer the step took than the same step on an infinitely fast
  network (compute and dependencies only, :func:`orchestrator.workloads.step.simulate`);
* the **straggler**: the GPU the others spent the most barrier time waiting for (the last to finish when
  nobody waited), and what it waited for longest itself.

A gap in a GPU's compute is blamed on the input that came last to the compute (or to the end of its
step) that closed it, followed back through the host's own sends and AllReduce joins to a message from
another GPU or an AllReduce's last joiner. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aidcnet.step import Item, Kind
from orchestrator.workloads.step import (
    BARRIER,
    COMPUTE,
    NETWORK,
    SHARES,
    HostTimes,
    StepTimes,
    host_items,
    simulate,
)
from orchestrator.workloads.trace import ALLREDUCE_OP, AnyOp, ComputeOp, TraceOp


@dataclass(frozen=True)
class Span:
    """[start, end) of one GPU's step spent on ``kind``; ``op``: the op it computed or waited for; ``on``:
    the GPU a barrier waited for."""

    start: float
    end: float
    kind: str
    op: int | None = None
    on: str | None = None

    def to_list(self) -> list[Any]:
        return [self.start, self.end, self.kind, self.op, self.on]


@dataclass
class GpuStep:
    """One GPU's step: its spans, in time order, and their totals."""

    spans: list[Span] = field(default_factory=list)
    finish: float = 0.0

    def total(self, kind: str) -> float:
        return sum(s.end - s.start for s in self.spans if s.kind == kind)

    def longest_wait(self) -> tuple[int | None, str, float, str | None]:
        """(op, network or barrier, seconds, the GPU waited on) of what it waited for longest, summed over
        the spans blamed on one op."""
        waits: dict[tuple[int | None, str, str | None], float] = {}
        for s in self.spans:
            if s.kind != COMPUTE:
                key = (s.op, s.kind, s.on)
                waits[key] = waits.get(key, 0.0) + s.end - s.start
        if not waits:
            return None, COMPUTE, 0.0, None
        (op, kind, on), seconds = max(waits.items(), key=lambda kv: (kv[1], -(kv[0][0] or -1)))
        return op, kind, seconds, on


@dataclass
class StepMetrics:
    step_s: float
    compute_only_s: float
    gpus: dict[str, GpuStep]
    straggler: str | None
    straggler_blame_s: float

    @property
    def exposed_s(self) -> float:
        return max(0.0, self.step_s - self.compute_only_s)

    def share(self, gpu: str, kind: str) -> float:
        return self.gpus[gpu].total(kind) / self.step_s if self.step_s > 0 else 0.0

    def mean_share(self, kind: str) -> float:
        return sum(self.share(g, kind) for g in self.gpus) / len(self.gpus) if self.gpus else 0.0

    def to_dict(self, ops: Mapping[int, AnyOp] | None = None) -> dict[str, Any]:
        """The run.json form (docs/results-format.md, ``settings.step``)."""
        gpus = {}
        for name, g in sorted(self.gpus.items()):
            op, kind, seconds, on = g.longest_wait()
            gpus[name] = {
                "finish_s": g.finish,
                **{f"{k}_s": g.total(k) for k in SHARES},
                "longest_wait": {"op": op, "kind": kind, "seconds": seconds, "on": on,
                                 "tag": _tag(ops, op)},
                "spans": [s.to_list() for s in g.spans],
            }  # fmt: skip
        return {
            "step_s": self.step_s,
            "compute_only_s": self.compute_only_s,
            "exposed_s": self.exposed_s,
            "utilisation": self.mean_share(COMPUTE),
            "network_share": self.mean_share(NETWORK),
            "barrier_share": self.mean_share(BARRIER),
            "straggler": self.straggler,
            "straggler_blame_s": self.straggler_blame_s,
            "gpus": gpus,
        }


def _tag(ops: Mapping[int, AnyOp] | None, op: int | None) -> str | None:
    if ops is None or op is None or op not in ops:
        return None
    return ops[op].tag


def analyse(ops: Sequence[AnyOp], times: StepTimes, compute_only_s: float | None = None) -> StepMetrics:
    """The step's metrics from its ``times`` (every host that acts in ``ops`` should be in them)."""
    if compute_only_s is None:
        compute_only_s = max((h.finish for h in simulate(ops).values()), default=0.0)
    blame = _Blame(ops, times)
    step_s = max((h.finish for h in times.values()), default=0.0)
    last = max(times, key=lambda h: (times[h].finish, h)) if times else None
    gpus = {host: blame.gpu(host, step_s, last) for host in sorted(times)}
    owed: dict[str, float] = {}
    for g in gpus.values():
        for s in g.spans:
            if s.kind == BARRIER and s.on is not None:
                owed[s.on] = owed.get(s.on, 0.0) + s.end - s.start
    straggler, blame_s = (max(owed.items(), key=lambda kv: (kv[1], kv[0])) if owed else (last, 0.0))
    return StepMetrics(step_s, compute_only_s, gpus, straggler, blame_s)


class _Blame:
    """Splits each GPU's idle time by what it waited for (the module's rules)."""

    def __init__(self, ops: Sequence[AnyOp], times: StepTimes) -> None:
        self.ops = {op.id: op for op in ops}
        self.items = {h: {i.id: i for i in items} for h, items in host_items(ops).items()}
        self.times = times

    def gpu(self, host: str, step_s: float, last: str | None) -> GpuStep:
        t = self.times[host]
        out = GpuStep(finish=t.finish)
        cursor = 0.0
        computes = sorted((t.start[i], i) for i, it in self.items.get(host, {}).items()
                          if it.kind is Kind.COMPUTE and i in t.start and i in t.end)  # fmt: skip
        for start, op_id in computes:
            self._held(out, host, cursor, start, op_id, 0)
            if t.end[op_id] > start:
                out.spans.append(Span(start, t.end[op_id], COMPUTE, op_id))
            cursor = max(cursor, t.end[op_id])
        final = max(((v, i) for i, v in [*t.end.items(), *t.arrived.items()]), default=(0.0, None))
        self._wait(out, host, cursor, final[0], final[1])
        if step_s > out.finish:
            out.spans.append(Span(out.finish, step_s, BARRIER, None, None if last == host else last))
        return out

    def _critical(self, host: str, op_id: int) -> int | None:
        """The input of ``host``'s item ``op_id`` that came there last."""
        item: Item | None = self.items.get(host, {}).get(op_id)
        t = self.times[host]
        seen = [(t.event(d), d) for d in (item.after if item else ()) if t.event(d) is not None]
        return max(seen)[1] if seen else None  # type: ignore[type-var]

    def _wait(self, out: GpuStep, host: str, a: float, b: float, cause: int | None, depth: int = 0) -> None:
        if b <= a:
            return
        op = self.ops.get(cause) if cause is not None else None
        t = self.times[host]
        if op is None or depth > len(self.ops):
            out.spans.append(Span(a, b, BARRIER, cause))
            return
        if isinstance(op, ComputeOp):  # its own compute ended before the gap: only a release time is left
            out.spans.append(Span(a, b, BARRIER, op.id))
        elif op.op == ALLREDUCE_OP:
            self._reduce(out, host, a, b, op, depth)
        elif op.src == host:  # its own send: waited for what the send waited for
            issued = min(b, max(a, t.start.get(op.id, b)))
            self._held(out, host, a, issued, op.id, depth + 1)
            if b > issued:
                out.spans.append(Span(issued, b, BARRIER, op.id))
        else:
            issued = self.times.get(op.src, HostTimes()).start.get(op.id, a)
            self._split(out, a, b, issued, op.id, op.src)

    def _reduce(self, out: GpuStep, host: str, a: float, b: float, op: TraceOp, depth: int) -> None:
        started = {w: self.times.get(w, HostTimes()).start for w in op.hosts}
        joins = {w: s[op.id] for w, s in started.items() if op.id in s}
        mine = joins.get(host, a)
        if mine > a:  # before it joined: what its own join waited for
            self._held(out, host, a, min(b, mine), op.id, depth + 1)
        if not joins:
            return
        last = max(joins, key=lambda w: (joins[w], w))
        self._split(out, max(a, mine), b, joins[last], op.id, last)

    def _held(self, out: GpuStep, host: str, a: float, b: float, op_id: int, depth: int) -> None:
        """[a, b) up to the start of ``host``'s item ``op_id``: what its inputs kept it from, then what held
        it once ready (a release time, its job's previous AllReduce): counted at the barrier."""
        ready = self.times[host].ready.get(op_id, b)
        self._wait(out, host, a, min(b, ready), self._critical(host, op_id), depth)
        if b > max(a, ready):
            out.spans.append(Span(max(a, ready), b, BARRIER, op_id))

    @staticmethod
    def _split(out: GpuStep, a: float, b: float, at: float, op_id: int, on: str) -> None:
        """[a, at) waited for ``on`` to get there (barrier), [at, b) for the bytes (network)."""
        if min(b, at) > a:
            out.spans.append(Span(a, min(b, at), BARRIER, op_id, on))
        if b > max(a, at):
            out.spans.append(Span(max(a, at), b, NETWORK, op_id))
