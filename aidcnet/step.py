"""One host's part of a closed-loop step (trace version 2, docs/trace-format.md "Dependencies"): which of its
items may start, and when, as the events it waits for happen.

A host's *items* are what it does in the step: send a message op (``SEND``), run a compute phase on its GPU
(``COMPUTE``), join an AllReduce (``REDUCE``). Each waits for *events at this host*, named by op id: a
message op arrived here whole (this host receives it), was issued here (this host sends it), a compute
phase ended here, an AllReduce's result is here. An item starts once every event it waits for has
happened and its release time ``t`` has come; besides:

* the GPU runs one compute phase at a time, in the order they become ready (ties by id);
* a job runs one AllReduce at a time, in id order (every worker of the job keeps the same order, and an
  op waits only for ops above it, so the order never deadlocks).

The agent's replay service drives it with its clock (:mod:`aidcnet.agent.replay.step`), the time model with
its fluid network, the tests with a simulated one: all three see the same rules. Pure: no clock, no I/O;
times are whatever the caller counts in (fabric seconds in the model, wall ns in the agent).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    SEND = "send"
    COMPUTE = "compute"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True)
class Item:
    """What one host does for op ``id``: waits for the events ``after`` (op ids) at this host and its
    release time ``t``, then sends, computes ``seconds`` (fabric) or joins the AllReduce of ``job``."""

    id: int
    kind: Kind
    t: float = 0.0
    after: tuple[int, ...] = ()
    seconds: float = 0.0
    job: int | None = None


@dataclass(frozen=True, slots=True)
class Start:
    """``item`` may start at ``at`` (never before its release time, the GPU or its job being free)."""

    item: Item
    at: float


@dataclass
class HostSchedule:
    """The items of one host and what of them has happened. :meth:`begin` gives what starts at once,
    :meth:`happened` what an event lets start; the caller starts each :class:`Start` at its ``at`` and
    reports the item's own end as an event (``happened(item.id, end)``: a send when issued, a compute when
    done, an AllReduce when its result is here)."""

    items: dict[int, Item]
    missing: dict[int, set[int]] = field(default_factory=dict)
    waiters: dict[int, list[int]] = field(default_factory=dict)
    events: dict[int, float] = field(default_factory=dict)
    ready: dict[int, float] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)
    gpu_busy: int | None = None
    gpu_queue: list[tuple[float, int]] = field(default_factory=list)
    job_busy: dict[int, int] = field(default_factory=dict)
    job_queue: dict[int, list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, items: Iterable[Item]) -> HostSchedule:
        by_id: dict[int, Item] = {}
        for item in items:
            if item.id in by_id:
                raise ValueError(f"op {item.id} is two items of one host")
            by_id[item.id] = item
        schedule = cls(by_id)
        for item in by_id.values():
            schedule.missing[item.id] = set(item.after)
            for event in set(item.after):
                schedule.waiters.setdefault(event, []).append(item.id)
        return schedule

    @property
    def done(self) -> bool:
        """Every item has ended here."""
        return all(i in self.events for i in self.items)

    def begin(self, now: float = 0.0) -> list[Start]:
        """The items that wait for nothing, ready at ``now``."""
        out: list[Start] = []
        for item_id in sorted(i for i, m in self.missing.items() if not m):
            out += self._ready(item_id, now)
        return out

    def happened(self, event: int, at: float) -> list[Start]:
        """Event ``event`` happened here at ``at`` (its first report counts; later ones are ignored)."""
        if event in self.events:
            return []
        self.events[event] = at
        out: list[Start] = []
        item = self.items.get(event)
        if item is not None:
            out += self._ended(item, at)
        for waiter in sorted(self.waiters.get(event, ())):
            missing = self.missing[waiter]
            missing.discard(event)
            if not missing and waiter not in self.ready:
                out += self._ready(waiter, at)
        return out

    # -- internals --------------------------------------------------------------------------------------
    def _ready(self, item_id: int, now: float) -> list[Start]:
        self.ready[item_id] = now
        item = self.items[item_id]
        if item.kind is Kind.COMPUTE:
            heapq.heappush(self.gpu_queue, (now, item_id))
            return self._next_compute(now)
        if item.kind is Kind.REDUCE and item.job is not None:
            queue = self.job_queue.setdefault(item.job, [])
            heapq.heappush(queue, item_id)
            return self._next_reduce(item.job, now)
        return [self._start(item, now)]

    def _start(self, item: Item, now: float) -> Start:
        at = max(now, item.t)
        self.started[item.id] = at
        return Start(item, at)

    def _next_compute(self, now: float) -> list[Start]:
        if self.gpu_busy is not None or not self.gpu_queue:
            return []
        _, item_id = heapq.heappop(self.gpu_queue)
        self.gpu_busy = item_id
        return [self._start(self.items[item_id], now)]

    def _next_reduce(self, job: int, now: float) -> list[Start]:
        queue = self.job_queue.get(job)
        if job in self.job_busy or not queue:
            return []
        # In id order: the next one of the job's ops this host has, once it is ready.
        nxt = min(i for i, it in self.items.items() if it.kind is Kind.REDUCE and it.job == job
                  and i not in self.events and i not in self.started)  # fmt: skip
        if queue[0] != nxt:
            return []
        heapq.heappop(queue)
        self.job_busy[job] = nxt
        return [self._start(self.items[nxt], now)]

    def _ended(self, item: Item, at: float) -> list[Start]:
        if item.kind is Kind.COMPUTE and self.gpu_busy == item.id:
            self.gpu_busy = None
            return self._next_compute(at)
        if item.kind is Kind.REDUCE and item.job is not None and self.job_busy.get(item.job) == item.id:
            del self.job_busy[item.job]
            return self._next_reduce(item.job, at)
        return []
