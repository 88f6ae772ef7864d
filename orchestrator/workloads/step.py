"""A closed-loop step (trace version 2) as a DAG: each host's items (:mod:`aidcnet.step`), a simulation of
the step over a network given as a function, and the analysis of a step's times into what a user of an AI
cluster pays for (docs/training.md): the step time, per GPU the share it computed, waited on the network
and sat at a barrier, the exposed communication and the straggler.

The same analysis reads the times a replay measured (the agents' stamps, in fabric seconds) and the times
the time model predicts (``orchestrator.model.timing_step``): one definition for both.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aidcnet.step import HostSchedule, Item, Kind, Start
from orchestrator.workloads.trace import ALLREDUCE_OP, AnyOp, ComputeOp, TraceOp

# What a GPU does at a moment of the step (the timeline's colours).
COMPUTE, NETWORK, BARRIER = "compute", "network", "barrier"
SHARES = (COMPUTE, NETWORK, BARRIER)


def item_kind(op: AnyOp) -> Kind:
    if isinstance(op, ComputeOp):
        return Kind.COMPUTE
    return Kind.REDUCE if op.op == ALLREDUCE_OP else Kind.SEND


def worker_sets(ops: Iterable[AnyOp]) -> dict[frozenset[str], int]:
    """A number per distinct AllReduce worker set, in order of first appearance: the job a pure step
    orders its AllReduces by (a lab gives each set its INA job; the replay passes those)."""
    out: dict[frozenset[str], int] = {}
    for op in ops:
        if op.op == ALLREDUCE_OP:
            out.setdefault(op.hosts, len(out) + 1)
    return out


def host_items(
    ops: Sequence[AnyOp], job_of: Callable[[TraceOp], int] | None = None
) -> dict[str, list[Item]]:
    """Each host's items, in trace order: its sends, its compute phases, the AllReduces it is a worker
    of; each waits for the events of its ``after`` that happen at that host (an AllReduce's worker waits
    only for the ops that concern it)."""
    hosts_of = {op.id: op.hosts for op in ops}
    jobs = worker_sets(ops)
    out: dict[str, list[Item]] = {}
    for op in ops:
        kind = item_kind(op)
        job = None
        if kind is Kind.REDUCE:
            assert isinstance(op, TraceOp)
            job = job_of(op) if job_of is not None else jobs[op.hosts]
        for host in sorted(op.actors):
            after = tuple(dep for dep in op.after if host in hosts_of[dep])
            seconds = op.seconds if isinstance(op, ComputeOp) else 0.0
            out.setdefault(host, []).append(Item(op.id, kind, op.t, after, seconds, job))
    return out


# ------------------------------------------------------------------------------------------------ times


@dataclass
class HostTimes:
    """What one host did in a step, in seconds from the step's zero: when each item was ready (all it
    waited for there), started (a send issued, a compute begun, an AllReduce joined) and ended (a send:
    issued; a compute: done; an AllReduce: its result here), and when each message it receives arrived
    whole."""

    ready: dict[int, float] = field(default_factory=dict)
    start: dict[int, float] = field(default_factory=dict)
    end: dict[int, float] = field(default_factory=dict)
    arrived: dict[int, float] = field(default_factory=dict)

    def event(self, op_id: int) -> float | None:
        """When op ``op_id``'s event happened here (its end if it is this host's item, else its arrival)."""
        return self.end.get(op_id, self.arrived.get(op_id))

    @property
    def finish(self) -> float:
        return max([0.0, *self.end.values(), *self.arrived.values()])

    def to_dict(self) -> dict[str, Any]:
        return {k: {str(i): v for i, v in getattr(self, k).items()} for k in _FIELDS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostTimes:
        return cls(**{k: {int(i): float(v) for i, v in (d.get(k) or {}).items()}
                      for k in _FIELDS})  # fmt: skip


_FIELDS = ("ready", "start", "end", "arrived")
StepTimes = dict[str, HostTimes]


def simulate(
    ops: Sequence[AnyOp],
    transfer_s: Callable[[TraceOp, str], float] = lambda op, dst: 0.0,
    reduce_s: Callable[[TraceOp], float] = lambda op: 0.0,
) -> StepTimes:
    """The step's times over a network where message ``op`` reaches ``dst`` ``transfer_s(op, dst)``
    after it is issued and an AllReduce ends ``reduce_s(op)`` after its last worker joined. With the
    defaults (an infinitely fast network), its step time is what compute and dependencies alone need."""
    by_id = {op.id: op for op in ops}
    items = host_items(ops)
    everyone = sorted(set().union(*(op.hosts for op in ops))) if ops else []
    schedules = {h: HostSchedule.of(items.get(h, ())) for h in everyone}
    times: StepTimes = {h: HostTimes() for h in schedules}
    heap: list[tuple[float, int, str, int, str]] = []  # (at, seq, action, op id, host)
    seq = itertools.count()
    joined: dict[int, dict[str, float]] = {}

    def started(host: str, starts: list[Start]) -> None:
        for s in starts:
            times[host].ready.setdefault(s.item.id, schedules[host].ready[s.item.id])
            heapq.heappush(heap, (s.at, next(seq), "start", s.item.id, host))

    for host, schedule in schedules.items():
        started(host, schedule.begin(0.0))
    while heap:
        at, _, action, op_id, host = heapq.heappop(heap)
        op = by_id[op_id]
        if action == "event":
            if op_id in times[host].start or op.op == ALLREDUCE_OP:
                times[host].end[op_id] = at
            else:
                times[host].arrived[op_id] = at
            started(host, schedules[host].happened(op_id, at))
            continue
        times[host].start[op_id] = at
        if isinstance(op, ComputeOp):
            heapq.heappush(heap, (at + op.seconds, next(seq), "event", op_id, host))
        elif op.op == ALLREDUCE_OP:
            joined.setdefault(op_id, {})[host] = at
            if len(joined[op_id]) == len(op.hosts):
                end = max(joined[op_id].values()) + reduce_s(op)
                for worker in sorted(op.hosts):
                    heapq.heappush(heap, (end, next(seq), "event", op_id, worker))
        else:
            heapq.heappush(heap, (at, next(seq), "event", op_id, host))
            for dst in op.dst:
                heapq.heappush(heap, (at + transfer_s(op, dst), next(seq), "event", op_id, dst))
    return times


def unfinished(ops: Sequence[AnyOp], times: StepTimes) -> list[tuple[int, str]]:
    """(op, host) pairs whose item never ended there or message never arrived: a step that stalled."""
    out = []
    for op in ops:
        for host in sorted(op.actors):
            if op.id not in times.get(host, HostTimes()).end:
                out.append((op.id, host))
        if isinstance(op, TraceOp) and op.op != ALLREDUCE_OP:
            out += [(op.id, d) for d in op.dst if op.id not in times.get(d, HostTimes()).arrived]
    return out
