"""The collective family: AllReduce ops of a trace on a deployed, configured lab (INA, ring or PS).

Each worker's agent generates its own array (``aidcnet.ina.worker.worker_array(seed, BFR-id, n)``),
runs the AllReduce and reports the sha256 of its result; this side recomputes every worker's array and
judges every worker (:func:`judge`):

* int32, fixed32, float32 min/max: the result is order-independent, so every worker's digest must equal
  that of numpy's reduction (int32 wraps; fixed32 is computed in int32 on ``rint(x * 2**scale)``);
  fixed32 results must in addition lie within the stated tolerance of numpy's float64 sum;
* float32 sum: the switches add in arrival order, so there is no single exact answer; every worker must
  still hold the identical bits (the root disseminates one result by BIER: digests must all agree), and
  those values must lie within ``gamma_(n-1) sum |x_i|`` of numpy's sum (aidcnet.ina.worker.float_tolerance).

Float jobs return their whole result (``values``) so the tolerance is checked on what the worker holds.
Workers start together at an agreed wall-clock time; completion time is the last worker's finish minus
that start.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aidcnet.ina.header import DType, Op
from aidcnet.ina.worker import DEFAULT_TIMEOUT_S, job_fixed_point_scale
from aidcnet.modes import Mode
from aidcnet.roles import Role
from orchestrator.configure.plan.schema import LabPlan, PlanInaJob
from orchestrator.experiment.clock import Clock
from orchestrator.experiment.modes.base import ExperimentMode, Family, ModeOutcome, RunOptions, Say
from orchestrator.experiment.modes.closed_loop import ClosedLoop
from orchestrator.experiment.modes.jobs import (
    DEADLINE_S,
    find_job,
    job_arrays,
    job_for,
    job_round_trip_s,
    judge,
    worker_timers,
)
from orchestrator.experiment.records import MessageResult
from orchestrator.experiment.session import ExperimentError, LabSession
from orchestrator.workloads.trace import ALLREDUCE_OP, TraceOp, closed_loop

START_LEAD_S = 0.5


@dataclass
class AllreduceRun:
    job: int
    mode: str
    elements: int
    expected: str
    replies: dict[str, dict[str, Any]]
    start_at: float
    wrong: list[str] = field(default_factory=list)
    dtype: str = "int32"
    max_error: float = 0.0  # float jobs: largest |result - numpy's float64 reduction| seen

    @property
    def ok(self) -> bool:
        return not self.wrong

    @property
    def verdict(self) -> str:
        if self.wrong:
            return f"WRONG on {', '.join(self.wrong)}"
        if self.dtype == "int32":
            return "exact on every worker"
        return f"identical on every worker, {self.dtype} within tolerance (max error {self.max_error:.3g})"

    @property
    def seconds(self) -> float:
        return max(r["finished"] for r in self.replies.values()) - self.start_at

    @property
    def retransmits(self) -> int:
        return sum(int(r["retransmits"]) for r in self.replies.values())


def check_supported(job: PlanInaJob, mode: Mode) -> None:
    """Refuse, naming the mode and dtype, what ``mode`` cannot run or the driver cannot judge."""
    from orchestrator.experiment.modes import mode_class

    cls = mode_class(mode)
    if not issubclass(cls, CollectiveMode):
        raise ExperimentError(f"mode {mode} is not a collective mode; it cannot run an AllReduce job")
    cls().check_job(job)


def default_ps_host(plan: LabPlan, job: PlanInaJob) -> str:
    """The parameter server of the baseline: the first gpu-host that is not a worker of the job."""
    for name, node in plan.nodes.items():
        if node.role == Role.GPU_HOST and name not in job.workers:
            return name
    raise ExperimentError(
        f"job {job.job}: every {Role.GPU_HOST} is a worker; name a parameter server host (--ps-host)"
    )


class CollectiveMode(ExperimentMode):
    start_lead_s = START_LEAD_S
    """An AllReduce algorithm. Subclasses say which jobs they can run and what the agents need for one
    op beyond the common request (:meth:`before_op`)."""

    family = Family.COLLECTIVE
    # Whose clock the run's lines show times on: the session's time scale (prepare); unshaped until known.
    clock = Clock()
    # Set by check_trace when the trace is a closed-loop step of compute phases and AllReduces.
    closed: ClosedLoop | None = None

    def predicted_as(self) -> tuple[Any, str] | None:
        if self.closed is not None:
            return self.closed.modes, ""
        return super().predicted_as()

    # -- hooks for the modes ------------------------------------------------------------------------
    def aggregation_point(self, plan: LabPlan, job: PlanInaJob) -> str | None:
        """The node every worker's data converges on, whose ingress the report shows (the parameter
        server, the job's root switch: the modes say); None, as for ring, when the load is spread over the
        workers."""
        return None

    def check_job(self, job: PlanInaJob) -> None:
        op, dtype = Op[job.op.upper()], DType[job.dtype.upper()]
        if dtype is DType.FLOAT32 and op is Op.PROD:
            raise ExperimentError(
                f"job {job.job}: mode {self.name}: float32 prod has no tolerance the driver could check it "
                "against (use int32 prod, or float32 sum/min/max)"
            )

    def before_op(self, session: LabSession, job: PlanInaJob, request: dict[str, Any]) -> None:
        """Prepare the lab for one AllReduce of ``job`` and add what the workers need to ``request``: a
        ring's ``addresses``, a tree's root ``to`` when it is not the job's own (the worker reads what to
        run from them, ``aidcnet.agent.ina.worker``)."""

    # -- one AllReduce ------------------------------------------------------------------------------
    def allreduce(
        self,
        session: LabSession,
        job_id: int,
        elements: int,
        seed: int = 1,
        timeout_s: float = DEFAULT_TIMEOUT_S,  # the workers' initial RTO (RFC 6298: then it adapts)
        deadline_s: float = DEADLINE_S,
        start_at: float | None = None,
        chunk_elements: int | None = None,
    ) -> AllreduceRun:
        plan = session.plan
        job = find_job(plan, job_id)
        self.check_job(job)
        op, dtype = Op[job.op.upper()], DType[job.dtype.upper()]
        arrays = job_arrays(plan, job, elements, seed)
        fixed_point_scale = job_fixed_point_scale(len(job.workers)) if dtype is DType.FIXED32 else 0
        # The lab's scale and a long path's round trip raise the timers (never below what the caller asked).
        timers = worker_timers(
            job_round_trip_s(plan, session.delays, job, self.aggregation_point(plan, job)),
            session.time_scale,
            deadline_s,
        )
        deadline_s = timers["deadline_s"]
        request: dict[str, Any] = {
            "job": job.job,
            "mode": self.name,
            "elements": elements,
            "seed": seed,
            **timers,
            "timeout_s": max(timeout_s, timers["timeout_s"]),
            "scale": fixed_point_scale,
        }
        if dtype is not DType.INT32:
            request["values"] = True  # float results are judged on their values, not only their digest
        self.before_op(session, job, request)
        if chunk_elements:
            request["chunk_elements"] = chunk_elements
        request["start_at"] = start_at if start_at is not None else time.time() + START_LEAD_S

        def one(worker: str) -> tuple[str, dict[str, Any]]:
            return worker, session.agent(worker).allreduce(timeout=deadline_s + 10, **request)

        with ThreadPoolExecutor(len(job.workers)) as pool:
            replies = dict(pool.map(one, job.workers))
        wrong, expected, max_error = judge(arrays, op, dtype, fixed_point_scale, replies)
        for r in replies.values():
            r.pop("values", None)  # judged; runs are kept in memory and written to results
        return AllreduceRun(
            job.job, self.name, elements, expected, replies, request["start_at"], wrong, job.dtype, max_error
        )

    # -- the experiment steps -----------------------------------------------------------------------
    def check_trace(self, ops: list[TraceOp], trace: Path) -> None:
        self.trace = trace
        if closed_loop(ops):
            self.closed = ClosedLoop(self, ops, trace)  # type: ignore[arg-type]
            return
        others = [op for op in ops if op.op != ALLREDUCE_OP]
        if others:
            raise ExperimentError(
                f"{trace}: mode {self.name} replays allreduce ops only; op {others[0].id} is {others[0].op} "
                "(replay it with a message mode: unicast, host-bier or net-bier)"
            )
        for op in ops:
            if op.bytes % 4:
                raise ExperimentError(
                    f"{trace}: op {op.id}: bytes {op.bytes} is not a whole number of 4-octet elements "
                    "(int32, float32 and fixed32 are all 4 octets)"
                )

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        self.clock = Clock(session.time_scale)
        if self.closed is not None:
            self.closed.prepare(session, say)
            return
        self.jobs = {op.id: job_for(session.plan, op) for op in ops}
        for op in ops:
            self.check_job(self.jobs[op.id])  # before any op runs, not halfway through the trace

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        """Nothing before the start: each AllReduce carries its whole request when it runs (a closed-loop
        step's hosts are told their items now)."""
        if self.closed is not None:
            self.closed.load(session, None)

    def run(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        """Ops issued at the same ``t`` for different jobs run concurrently (tenants sharing the fabric)."""
        if self.closed is not None:
            self.closed.run(session, say)
            return
        self.runs: list[AllreduceRun] = []
        self.t0 = time.time() + START_LEAD_S
        # Wall seconds the emulator sat between waves beyond what the trace asked for (each wave's requests
        # go out START_LEAD_S ahead of it): taken out of the run's timeline, as a fabric runs a job's next
        # AllReduce when its inputs are ready.
        self.idle_before: dict[int, float] = {}
        idle, prev_end = 0.0, self.t0
        i = 0
        while i < len(ops):
            # One wave: ops at the same t, each job at most once (a job runs one AllReduce at a time).
            wave: list[TraceOp] = []
            seen: set[int] = set()
            while (
                i < len(ops) and self.jobs[ops[i].id].job not in seen and (not wave or ops[i].t == wave[0].t)
            ):
                wave.append(ops[i])
                seen.add(self.jobs[ops[i].id].job)
                i += 1
            asked = self.t0 + session.time_scale.wall_s(wave[0].t)
            start = max(asked, time.time() + START_LEAD_S)
            idle += max(0.0, start - max(asked, prev_end))
            seed = self.options.seed
            with ThreadPoolExecutor(len(wave)) as pool:
                futures = [
                    pool.submit(
                        self.allreduce,
                        session,
                        self.jobs[op.id].job,
                        op.bytes // 4,
                        seed=seed + op.id,
                        start_at=start,
                    )
                    for op in wave
                ]
                done = [f.result() for f in futures]
            self.runs += done
            prev_end = max(r.start_at + r.seconds for r in done)
            for op, run in zip(wave, done, strict=True):
                self.idle_before[op.id] = idle
                say(
                    f"op {op.id} job {run.job}: {self.clock.time(run.seconds)}, "
                    f"{run.retransmits} retransmits, "
                    + (run.verdict if not run.ok else "exact" if run.dtype == "int32" else "within tolerance")
                    + f" ({len(self.runs)}/{len(ops)})"
                )

    def collect(self, session: LabSession, ops: list[TraceOp]) -> ModeOutcome:
        if self.closed is not None:
            return self.closed.collect(session)
        messages = []
        for op, run in zip(ops, self.runs, strict=True):
            exact = [w for w in run.replies if w not in run.wrong]
            messages.append(
                MessageResult(
                    id=op.id,
                    op=ALLREDUCE_OP,
                    src=op.src,
                    expected=[op.src, *op.dst],
                    delivered=exact,
                    bytes=op.bytes,
                    sent_at=run.start_at - self.t0 - self.idle_before.get(op.id, 0.0),
                    latency={w: max(0.0, run.replies[w]["finished"] - run.start_at) for w in exact},
                )
            )
        rows = [
            {
                "id": op.id,
                "tag": op.tag,
                "job": run.job,
                "mode": self.name,
                "bytes": op.bytes,
                "seconds": round(run.seconds, 6),
                "retransmits": run.retransmits,
                "exact": run.ok,
                "wrong": run.wrong,
                "digest": run.expected,
                "dtype": run.dtype,
                "max_error": run.max_error,
            }
            for op, run in zip(ops, self.runs, strict=True)
        ]
        lines = [allreduce_line(run, self.clock) for run in self.runs]
        wrong = [r for r in self.runs if not r.ok]
        doc = {"lab": session.topo.name, "trace": str(self.trace), "ops": rows}
        return ModeOutcome(
            messages,
            settings={
                "seed": self.options.seed,
                "ps_host": self.options.ps_host,
                "aggregation_points": sorted(
                    {p for op in ops if (p := self.aggregation_point(session.plan, self.jobs[op.id]))}
                ),
            },
            lines=lines,
            files={ALLREDUCE_FILE: json.dumps(doc, indent=2)},
            problem=f"{len(wrong)} AllReduce ops gave a wrong result" if wrong else None,
            detail=self.runs,
        )


ALLREDUCE_FILE = "allreduce.json"


def allreduce_line(run: AllreduceRun, clock: Clock) -> str:
    """One AllReduce for the run's summary, its time on the lab's clock (fabric, or wall labelled)."""
    return (
        f"allreduce job {run.job} {run.mode}: {run.elements * 4 / (1 << 20):.2f} MiB x "
        f"{len(run.replies)} workers in {clock.time(run.seconds)}, {run.retransmits} retransmits, "
        f"{run.verdict}"
    )


def run_allreduce(
    session: LabSession, job_id: int, mode: Mode, elements: int, ps_host: str | None = None, **kw: Any
) -> AllreduceRun:
    """One AllReduce of ``job_id`` in a collective ``mode`` outside a recorded run (tests, benches)."""
    from orchestrator.experiment.modes import mode_class

    cls = mode_class(mode)
    if not issubclass(cls, CollectiveMode):
        raise ExperimentError(f"mode {mode} is not a collective mode")
    return cls(RunOptions(ps_host=ps_host)).allreduce(session, job_id, elements, **kw)


def run_concurrent(
    session: LabSession, jobs: list[int], mode: Mode, elements: int, seed: int = 1, **kw: Any
) -> list[AllreduceRun]:
    """Several jobs at once (tenants sharing the fabric), all starting at the same instant."""
    start_at = time.time() + START_LEAD_S + 0.2 * len(jobs)
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [
            pool.submit(run_allreduce, session, j, mode, elements, seed=seed + j, start_at=start_at, **kw)
            for j in jobs
        ]
        return [f.result() for f in futures]
