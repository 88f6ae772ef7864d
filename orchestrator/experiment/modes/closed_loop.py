"""A closed-loop step in a mode (docs/training.md): a trace whose ops wait for others and whose hosts compute
(trace version 2). The mode a run is in carries the step's kind of op (a message mode its unicast and
multicast ops, a collective mode its AllReduces); ``RunOptions.allreduce`` names the collective mode of a
message-mode run's AllReduces. Every host is told its items once (its sends as the mode sends them, its
compute phases, its AllReduce joins with their requests) and starts each when what it waits for has
happened there (``aidcnet/agent/replay/step.py``); this side starts them on one clock, waits, judges every
delivery and every AllReduce result, and turns the hosts' times into the step's metrics
(``orchestrator.workloads.step_metrics``): ``settings.step`` of the run (docs/results-format.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from aidcnet.agent.replay.protocol import Compute, ItemTimes, Reduction, ReplayLoad, ReplayOp
from aidcnet.ina.header import DType, Op
from aidcnet.ina.worker import (
    DEFAULT_CHUNK_ELEMENTS,
    job_fixed_point_scale,
)
from aidcnet.modes import COLLECTIVE, STEP_COLLECTIVES, STEP_MESSAGES, StepModes, in_order
from orchestrator.experiment.modes.base import ExperimentMode, ModeOutcome, Say
from orchestrator.experiment.modes.jobs import (
    job_arrays,
    job_for,
    job_round_trip_s,
    judge,
    worker_timers,
)
from orchestrator.experiment.modes.replaying import (
    build_messages,
    flight_wall_s,
    op_times,
    results_of,
    start_and_wait,
)
from orchestrator.experiment.records import MessageResult
from orchestrator.experiment.session import ExperimentError, LabSession
from orchestrator.workloads.step import HostTimes, StepTimes, unfinished
from orchestrator.workloads.step_metrics import analyse
from orchestrator.workloads.trace import ALLREDUCE_OP, AnyOp, ComputeOp, TraceOp, message_ops

# How long an AllReduce of a step may take on the agents before they give up (wall seconds).
REDUCE_DEADLINE_S = 600.0
COMPUTE_KINDS = ("wait", "work")


class ClosedLoop:
    """One closed-loop run of ``mode`` (the mode instance delegates its steps here)."""

    def __init__(self, mode: ExperimentMode, ops: list[AnyOp], trace: Path) -> None:
        self.mode, self.ops, self.trace = mode, ops, trace
        self.messages = message_ops(ops)
        self.reductions = [op for op in ops if isinstance(op, TraceOp) and op.op == ALLREDUCE_OP]
        self.modes = self._modes()
        self.predicted: dict[str, Any] | None = None

    # -- check ----------------------------------------------------------------------------------------
    def _modes(self) -> StepModes:
        name, options, trace = self.mode.name, self.mode.options, self.trace
        if options.compute not in COMPUTE_KINDS:
            raise ExperimentError(f"compute {options.compute!r}: a compute phase is a wait or work")
        if name in COLLECTIVE:
            if self.messages:
                op = self.messages[0]
                raise ExperimentError(
                    f"{trace}: op {op.id} is a {op.op} op of a closed-loop step: run the step in a message "
                    f"mode ({', '.join(in_order(STEP_MESSAGES))}) with --allreduce {name}"
                )
            return StepModes(None, name)
        if name not in STEP_MESSAGES:
            messages, collectives = ", ".join(in_order(STEP_MESSAGES)), ", ".join(in_order(STEP_COLLECTIVES))
            raise ExperimentError(
                f"{trace}: a closed-loop step (ops that wait for others, compute phases) travels in "
                f"{messages} (its messages) and {collectives} (its AllReduces, --allreduce); mode {name} "
                "does not carry one"
            )
        if self.reductions and options.allreduce is None:
            raise ExperimentError(
                f"{trace}: op {self.reductions[0].id} is an AllReduce: name the mode it runs in "
                f"(--allreduce {'|'.join(in_order(STEP_COLLECTIVES))})"
            )
        for op in self.reductions:
            if op.bytes % 4:
                raise ExperimentError(
                    f"{trace}: op {op.id}: bytes {op.bytes} is not a whole number of 4-octet elements"
                )
        try:
            return StepModes(name, options.allreduce if self.reductions else None)
        except ValueError as exc:
            raise ExperimentError(f"--allreduce: {exc}") from None

    # -- prepare ----------------------------------------------------------------------------------------
    def prepare(self, session: LabSession, say: Say) -> None:
        from orchestrator.experiment.modes import mode_class

        names = sorted(set().union(*(op.hosts for op in self.ops)))
        self.hosts = session.hosts(names)
        self.all_hosts = session.hosts(session.gpu_hosts())
        session.require_configured(self.all_hosts)
        self.jobs = {op.id: job_for(session.plan, op) for op in self.reductions}
        # The collective mode's own instance: its check_job and before_op (resets, ring ranks, the PS).
        self.collective: Any = None
        if self.modes.collective is not None:
            self.collective = mode_class(self.modes.collective)(self.mode.options)
            for job in {j.job: j for j in self.jobs.values()}.values():
                self.collective.check_job(job)
        predict = self.mode.options.predict_step
        if predict is not None:
            try:
                self.predicted = predict(session, self.ops, self.modes, self.mode.options.ps_host)
            except ValueError as exc:  # the model's refusal: the run goes on without a prediction
                say(f"no step prediction: {exc}")

    # -- load -------------------------------------------------------------------------------------------
    def load(
        self, session: LabSession, host_load: Callable[[str, list[ReplayOp]], ReplayLoad] | None
    ) -> None:
        """Each host its items; ``host_load`` is the message mode's (its receivers, groups, interface)."""
        requests = self._requests(session)
        sends: dict[str, list[ReplayOp]] = {n: [] for n in self.all_hosts}
        computes: dict[str, list[Compute]] = {n: [] for n in self.all_hosts}
        reductions: dict[str, list[Reduction]] = {n: [] for n in self.all_hosts}
        hosts_of = {op.id: op.hosts for op in self.ops}
        for op in self.ops:
            if isinstance(op, ComputeOp):
                computes[op.src].append(Compute(op.id, op.t, op.seconds, tuple(op.after)))
            elif op.op == ALLREDUCE_OP:
                for w in sorted(op.hosts):
                    after = tuple(d for d in op.after if w in hosts_of[d])
                    reductions[w].append(Reduction(op.id, op.t, requests[op.id], after))
            else:
                sends[op.src].append(replace(self.mode.op_entry(op), after=tuple(op.after)))  # type: ignore[attr-defined]
        self.active = [n for n in self.all_hosts if sends[n] or computes[n] or reductions[n]]
        o = self.mode.options
        for name in self.all_hosts:
            base = host_load(name, sends[name]) if host_load is not None else ReplayLoad(self.mode.name)
            load = replace(base, closed_loop=True, computes=tuple(computes[name]),
                           reductions=tuple(reductions[name]), compute_work=o.compute == "work")  # fmt: skip
            session.agent(name).replay_load(load)

    def _requests(self, session: LabSession) -> dict[int, dict[str, Any]]:
        """Each AllReduce op's request to its workers' INA worker: the collective mode's (its switches
        reset, its ring addresses, its parameter server serving), chunk numbers running on per job, the
        timers raised for a long path's round trip as the collective modes raise them (docs/delay.md)."""
        if self.collective is None:
            return {}
        per_job: dict[int, dict[str, Any]] = {}
        chunk_base: dict[int, int] = {}
        out = {}
        for op in self.reductions:
            job = self.jobs[op.id]
            if job.job not in per_job:
                per_job[job.job] = {}
                self.collective.before_op(session, job, per_job[job.job])
            dtype = DType[job.dtype.upper()]
            point = self.collective.aggregation_point(session.plan, job)
            round_trip = job_round_trip_s(session.plan, session.delays, job, point)
            timers = worker_timers(round_trip, session.time_scale, REDUCE_DEADLINE_S)
            elements = op.bytes // 4
            base = chunk_base.get(job.job, 0)
            chunk_base[job.job] = base + math.ceil(elements / DEFAULT_CHUNK_ELEMENTS)
            out[op.id] = {
                **per_job[job.job],
                "job": job.job, "mode": str(self.collective.name), "elements": elements,
                "seed": self.mode.options.seed + op.id, "chunk_base": base,
                **timers,
                "scale": job_fixed_point_scale(len(job.workers)) if dtype is DType.FIXED32 else 0,
            }  # fmt: skip
            if dtype is not DType.INT32:
                out[op.id]["values"] = True
        return out

    # -- run --------------------------------------------------------------------------------------------
    def run(self, session: LabSession, say: Say) -> None:
        busiest = max((sum(op.seconds for op in self.ops if isinstance(op, ComputeOp) and op.src == h)
                       for h in self.active), default=0.0)  # fmt: skip
        self.expected = sum(len(op.dst) for op in self.messages)
        self.start_ns, self.send_errors = start_and_wait(
            session, self.active, list(self.all_hosts), self.expected, len(self.messages),
            session.time_scale.wall_s(busiest), self.mode.options, say,
            flight_s=flight_wall_s(session, self.messages), quiet_s=self.mode.quiet_wall_s(session),
        )  # fmt: skip

    # -- collect ----------------------------------------------------------------------------------------
    def collect(self, session: LabSession) -> ModeOutcome:
        replies = results_of(session, self.all_hosts)
        records = {n: {int(r["id"]): r for r in rep.get("records", [])} for n, rep in replies.items()}
        messages, missing, wrong = build_messages(self.messages, records, self.start_ns, session.time_scale)
        times = self.times(session, replies, records)
        reduced, problems = self._reduced(session, replies, times)
        errors = [f"{n}: {e}" for n, rep in replies.items() for e in rep.get("step_errors", [])]
        stalled = unfinished(self.ops, times)
        if errors:
            problems.append(f"the step failed on {errors[0]}")
        elif stalled:
            problems.append(f"the step did not finish: op {stalled[0][0]} never ended at {stalled[0][1]}")
        settings = {
            "send_errors": self.send_errors,
            "unresponsive": session.lost.nodes,
            "step": self.record(session, times),
        }
        problem = "; ".join(problems) or None
        outcome = ModeOutcome(messages + reduced, settings, missing, wrong, problem=problem)
        outcome.op_times = op_times(replies)
        return outcome

    def times(
        self, session: LabSession, replies: dict[str, dict[str, Any]], records: dict[str, dict[int, Any]]
    ) -> StepTimes:
        """Each host's items and arrivals in seconds from the run's zero: fabric seconds on a shaped lab,
        the emulator's wall seconds on an unshaped one (the time scale converts, and is 1 there)."""
        clock = session.time_scale

        def at(ns: int) -> float:
            return clock.fabric_s_of_ns(ns - self.start_ns)

        out: StepTimes = {}
        wanted = {op.id for op in self.messages}
        for name, reply in replies.items():
            t = out[name] = HostTimes()
            for raw in reply.get("step", []):
                item = ItemTimes.from_wire(raw, f"{name}: step")
                t.ready[item.id], t.start[item.id] = at(item.ready_ns), at(item.start_ns)
                if item.end_ns is not None:
                    t.end[item.id] = at(item.end_ns)
            for msg_id, rec in records.get(name, {}).items():
                if msg_id in wanted and rec.get("complete_ns") is not None and rec.get("checksum_ok"):
                    t.arrived[msg_id] = at(int(rec["complete_ns"]))
        return out

    def _reduced(
        self, session: LabSession, replies: dict[str, dict[str, Any]], times: StepTimes
    ) -> tuple[list[MessageResult], list[str]]:
        """Every AllReduce judged as the collective modes judge it, as a message of its workers: sent when
        its last worker joined, each worker's latency to its result."""
        out, problems = [], []
        for op in self.reductions:
            job = self.jobs[op.id]
            got = {w: replies.get(w, {}).get("reductions", {}).get(str(op.id)) for w in sorted(op.hosts)}
            got = {w: r for w, r in got.items() if r is not None}
            arrays = job_arrays(session.plan, job, op.bytes // 4, self.mode.options.seed + op.id)
            dtype = DType[job.dtype.upper()]
            scale = job_fixed_point_scale(len(job.workers)) if dtype is DType.FIXED32 else 0
            wrong, _, _ = judge(arrays, Op[job.op.upper()], dtype, scale, got) if got else ([], "", 0.0)
            joins = [times[w].start[op.id] for w in got if op.id in times[w].start]
            last = max(joins, default=0.0)
            exact = [w for w in got if w not in wrong]
            latency = {w: max(0.0, times[w].end.get(op.id, last) - last) for w in exact}
            wall = {w: session.time_scale.wall_s(s) for w, s in latency.items()}
            out.append(MessageResult(id=op.id, op=ALLREDUCE_OP, src=op.src, expected=[op.src, *op.dst],
                                     delivered=exact, bytes=op.bytes, sent_at=session.time_scale.wall_s(last),
                                     latency=wall))  # fmt: skip
            if wrong:
                problems.append(f"AllReduce op {op.id} gave a wrong result on {', '.join(wrong)}")
        return out, problems

    def record(self, session: LabSession, times: StepTimes) -> dict[str, Any]:
        """``settings.step`` (docs/results-format.md): how the step travelled, its metrics, the model's."""
        metrics = analyse(self.ops, times)
        return {
            "modes": str(self.modes),
            "messages": None if self.modes.messages is None else str(self.modes.messages),
            "allreduce": None if self.modes.collective is None else str(self.modes.collective),
            "compute": self.mode.options.compute,
            "clock": "fabric" if session.time_scale.shaped else "wall",
            **metrics.to_dict({op.id: op for op in self.ops}),
            "predicted": self.predicted,
        }
