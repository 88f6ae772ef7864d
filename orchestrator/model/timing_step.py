"""A closed-loop step in the time model (docs/training.md "The prediction"): each host's items
(:mod:`aidcnet.step`, the agents' own rules) started as their inputs arrive on the fluid network, compute
phases as timers of their fabric seconds, messages as the flows of their mode
(``orchestrator.model.timing.TimeModel.message_flows``), AllReduces as the packets of their collective mode
(``orchestrator.model.timing_collectives``) once every worker has joined.

Its times are the step's (``orchestrator.workloads.step.StepTimes``), analysed as a replay's are
(``orchestrator.workloads.step_metrics``). Pure: no files, no containers, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from aidcnet.modes import Mode, StepModes
from aidcnet.step import HostSchedule, Item, Kind, Start
from orchestrator.model.exact import ModelError
from orchestrator.model.fluid import Flow, FluidError, FluidNetwork, FluidRun
from orchestrator.workloads.step import HostTimes, StepTimes, host_items, unfinished
from orchestrator.workloads.trace import ALLREDUCE_OP, AnyOp, ComputeOp, TraceOp, message_ops


class StepModel:
    """One step on one fluid network: :meth:`run` it, then read :attr:`times`."""

    def __init__(
        self, tm: Any, net: FluidNetwork, ops: Sequence[AnyOp], modes: StepModes, ps_host: str | None
    ) -> None:
        self.tm, self.net, self.modes = tm, net, modes
        self.ops = {op.id: op for op in ops}
        messages = message_ops(ops)
        reductions = [op for op in ops if isinstance(op, TraceOp) and op.op == ALLREDUCE_OP]
        if messages and modes.messages is None:
            raise ModelError(f"op {messages[0].id} is a message: name the message mode its step travels in")
        if reductions and modes.collective is None:
            raise ModelError(f"op {reductions[0].id} is an AllReduce: name the collective mode it runs in")
        self.groups = tm.model.net_bier_groups(messages) if modes.messages == Mode.NET_BIER else {}
        self.driver = None
        job_of = None
        if reductions:
            from orchestrator.model.timing_collectives import _Driver

            assert modes.collective is not None
            self.driver = _Driver(
                tm, net, modes.collective, reductions, {}, ps_host, on_finished=self._reduced
            )
            job_of = partial(_job, self.driver.jobs)
        items = host_items(ops, job_of)
        hosts = sorted(set().union(*(op.hosts for op in ops)))
        self.schedules = {h: HostSchedule.of(items.get(h, ())) for h in hosts}
        self.times: StepTimes = {h: HostTimes() for h in hosts}
        self.joined: dict[int, dict[str, float]] = {}

    def run(self) -> FluidRun:
        for host, schedule in self.schedules.items():
            self._launch(host, schedule.begin(0.0))
        run = self.net.run(self._delivered)
        stalled = unfinished(list(self.ops.values()), self.times)
        if stalled:
            op, host = stalled[0]
            raise ModelError(f"op {op} never ended at {host} in the model (a dependency or a window stalled)")
        return run

    # -- the step's moves ---------------------------------------------------------------------------
    def _launch(self, host: str, starts: list[Start]) -> None:
        for s in starts:
            self.times[host].ready[s.item.id] = self.schedules[host].ready[s.item.id]
            self.net.call_at(s.at, partial(self._start, host, s.item))

    def _start(self, host: str, item: Item, now: float) -> None:
        self.times[host].start[item.id] = now
        op = self.ops[item.id]
        if item.kind is Kind.COMPUTE:
            assert isinstance(op, ComputeOp)
            self.net.call_at(now + op.seconds, partial(self._event, host, item.id))
        elif item.kind is Kind.REDUCE:
            joined = self.joined.setdefault(item.id, {})
            joined[host] = now
            assert isinstance(op, TraceOp) and self.driver is not None
            if len(joined) == len(op.hosts):
                self.driver.begin(op, now)
        else:
            assert isinstance(op, TraceOp)
            self._send(op, now)
            self._event(host, item.id, now)

    def _send(self, op: TraceOp, now: float) -> None:
        mode = self.modes.messages
        assert mode is not None
        for flow in self.tm.message_flows(op, mode, self.groups.get(op.id)):
            flow.tag = ("message", op.id, (flow.key[1],) if isinstance(flow.key, tuple) else tuple(op.dst))
            try:
                self.net.start(flow, now)
            except FluidError as exc:
                where = f"lab {self.tm.model.plan.lab}, {mode} op {op.id} from {op.src}"
                raise ModelError(f"{where}: {exc}") from None

    def _event(self, host: str, op_id: int, at: float) -> None:
        t = self.times[host]
        if op_id in t.start or self.ops[op_id].op == ALLREDUCE_OP:
            t.end[op_id] = at
        else:
            t.arrived.setdefault(op_id, at)
        self._launch(host, self.schedules[host].happened(op_id, at))

    def _delivered(self, flow: Flow, t: float) -> None:
        tag = flow.tag
        if isinstance(tag, tuple) and tag and tag[0] == "message":
            for receiver in tag[2]:
                self._event(receiver, tag[1], t)
        elif self.driver is not None:
            self.driver.delivered(flow, t)

    def _reduced(self, op: TraceOp, t: float) -> None:
        for worker in sorted(op.hosts):
            self._event(worker, op.id, t)

    # -- what the driver's judgement needs ----------------------------------------------------------
    def spans(self) -> dict[int, tuple[float, float]]:
        """(issued, last receiver has it) of every message, (last worker joined, result everywhere) of every
        AllReduce: what a replay's completion is measured over (compute phases move nothing)."""
        out: dict[int, tuple[float, float]] = {}
        for op in self.ops.values():
            if isinstance(op, ComputeOp):
                continue
            if op.op == ALLREDUCE_OP:
                start = max(self.times[w].start[op.id] for w in op.hosts)
                out[op.id] = (start, max(self.times[w].end[op.id] for w in op.hosts))
            else:
                last = max(self.times[d].arrived[op.id] for d in op.dst)
                out[op.id] = (self.times[op.src].start[op.id], last)
        return out


def _job(jobs: dict[int, Any], op: TraceOp) -> int:
    return int(jobs[op.id].job)
