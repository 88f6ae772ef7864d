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

import base64
import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aidcnet.ina.header import DType, Op
from aidcnet.ina.worker import (
    DEFAULT_TIMEOUT_S,
    digest,
    exact_result,
    job_scale,
    out_of_tolerance,
    worker_array,
)
from aidcnet.modes import Mode
from aidcnet.roles import Role
from orchestrator.configure.plan.model import LabPlan, PlanInaJob
from orchestrator.experiment.modes.base import ExperimentMode, Family, ModeOutcome, RunOptions, Say
from orchestrator.experiment.records import MessageResult
from orchestrator.experiment.session import ExperimentError, LabSession
from orchestrator.workloads.trace import ALLREDUCE_OP, TraceOp

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


def find_job(plan: LabPlan, job: int) -> PlanInaJob:
    for j in plan.ina:
        if j.job == job:
            return j
    known = ", ".join(str(j.job) for j in plan.ina) or "none"
    raise ExperimentError(f"lab {plan.lab} has no INA job {job} in its plan (jobs: {known}; see ina.jobs)")


def check_supported(job: PlanInaJob, mode: str) -> None:
    """Refuse, naming the mode and dtype, what ``mode`` cannot run or the driver cannot judge."""
    from orchestrator.experiment.modes import mode_class

    cls = mode_class(mode)
    if not issubclass(cls, CollectiveMode):
        raise ExperimentError(f"mode {mode} is not a collective mode; it cannot run an AllReduce job")
    cls().check_job(job)


def job_arrays(plan: LabPlan, job: PlanInaJob, elements: int, seed: int) -> list[np.ndarray]:
    dtype = DType[job.dtype.upper()]
    return [worker_array(seed, plan.nodes[w].bfr_id or 0, elements, dtype) for w in job.workers]


def judge(
    arrays: list[np.ndarray], op: Op, dtype: DType, scale: int, replies: dict[str, dict[str, Any]]
) -> tuple[list[str], str, float]:
    """Which workers got a wrong result, the digest all had to hold, and the largest float error.

    A worker is wrong if its digest differs from the exact one (when the arithmetic has one) or from
    the digest most workers agree on (float32 sum), or, for float jobs, if the values it returned do
    not hash to its digest or stray beyond the tolerance from numpy's reduction. Values are judged
    once per distinct digest: equal digests are equal arrays.
    """
    exact = exact_result(arrays, op, dtype, scale)
    if exact is not None:
        expected = digest(exact)
    else:
        counts = Counter(r["digest"] for r in replies.values())
        expected = max(counts, key=lambda d: counts[d])  # first-seen wins a tie: order is deterministic
    wrong = {w for w, r in replies.items() if r["digest"] != expected}
    max_error = 0.0
    if dtype is not DType.INT32:
        verdicts: dict[str, bool] = {}  # digest -> within tolerance, once some worker's values showed it
        for w, r in replies.items():
            d = r["digest"]
            if d not in verdicts:
                raw = r.get("values")
                got = np.frombuffer(base64.b64decode(raw), ">f4") if raw is not None else None
                if got is None or digest(got) != d:
                    wrong.add(w)  # its values are not what it claims to hold: they vouch for nothing
                    continue
                bad, err = out_of_tolerance(arrays, got, op, dtype, scale)
                verdicts[d] = not len(bad)
                max_error = max(max_error, err)
            if not verdicts[d]:
                wrong.add(w)
    return [w for w in replies if w in wrong], expected, max_error


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

    # -- hooks for the modes ------------------------------------------------------------------------
    def aggregation_point(self, plan: LabPlan, job: PlanInaJob) -> str | None:
        """The node every worker's data converges on, whose ingress the report shows: the parameter
        server (ps), the job's root switch (ina); None for ring, whose load is spread over the workers."""
        if self.name == Mode.PS:
            return self.options.ps_host or default_ps_host(plan, job)
        if self.name == Mode.INA:
            return job.root
        return None

    def check_job(self, job: PlanInaJob) -> None:
        op, dtype = Op[job.op.upper()], DType[job.dtype.upper()]
        if dtype is DType.FLOAT32 and op is Op.PROD:
            raise ExperimentError(
                f"job {job.job}: mode {self.name}: float32 prod has no tolerance the driver could check it "
                "against (use int32 prod, or float32 sum/min/max)"
            )

    def before_op(self, session: LabSession, job: PlanInaJob, request: dict[str, Any]) -> None:
        """Prepare the lab for one AllReduce of ``job`` and add what the workers need to ``request``."""

    # -- one AllReduce ------------------------------------------------------------------------------
    def allreduce(
        self,
        session: LabSession,
        job_id: int,
        elements: int,
        seed: int = 1,
        timeout_s: float = DEFAULT_TIMEOUT_S,  # the workers' initial RTO (RFC 6298: then it adapts)
        deadline_s: float = 300.0,
        start_at: float | None = None,
        chunk_elements: int | None = None,
    ) -> AllreduceRun:
        plan = session.plan
        job = find_job(plan, job_id)
        self.check_job(job)
        op, dtype = Op[job.op.upper()], DType[job.dtype.upper()]
        arrays = job_arrays(plan, job, elements, seed)
        scale = job_scale(len(job.workers)) if dtype is DType.FIXED32 else 0
        request: dict[str, Any] = {
            "job": job.job,
            "mode": self.name,
            "elements": elements,
            "seed": seed,
            "timeout_s": timeout_s,
            "deadline_s": deadline_s,
            "scale": scale,
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
        wrong, expected, max_error = judge(arrays, op, dtype, scale, replies)
        for r in replies.values():
            r.pop("values", None)  # judged; runs are kept in memory and written to results
        return AllreduceRun(
            job.job, self.name, elements, expected, replies, request["start_at"], wrong, job.dtype, max_error
        )

    # -- the experiment steps -----------------------------------------------------------------------
    def check_trace(self, ops: list[TraceOp], trace: Path) -> None:
        self.trace = trace
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
        self.jobs = {op.id: job_for(session.plan, op) for op in ops}
        for op in ops:
            self.check_job(self.jobs[op.id])  # before any op runs, not halfway through the trace

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        """Nothing before the start: each AllReduce carries its whole request when it runs."""

    def run(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        """Ops issued at the same ``t`` for different jobs run concurrently (tenants sharing the fabric)."""
        self.runs: list[AllreduceRun] = []
        self.t0 = time.time() + START_LEAD_S
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
            start = max(self.t0 + wave[0].t, time.time() + START_LEAD_S)
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
            for op, run in zip(wave, done, strict=True):
                say(
                    f"op {op.id} job {run.job}: {run.seconds:.3f} s, {run.retransmits} retransmits, "
                    + (run.verdict if not run.ok else "exact" if run.dtype == "int32" else "within tolerance")
                    + f" ({len(self.runs)}/{len(ops)})"
                )

    def collect(self, session: LabSession, ops: list[TraceOp]) -> ModeOutcome:
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
                    sent_at=run.start_at - self.t0,
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
        lines = [
            f"allreduce job {run.job} {run.mode}: {run.elements * 4 / (1 << 20):.2f} MiB x "
            f"{len(run.replies)} workers in {run.seconds:.3f} s, {run.retransmits} retransmits, {run.verdict}"
            for run in self.runs
        ]
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


def job_for(plan: LabPlan, op: TraceOp) -> PlanInaJob:
    members = {op.src, *op.dst}
    for job in plan.ina:
        if set(job.workers) == members:
            return job
    jobs = "; ".join(f"job {j.job}: {', '.join(j.workers)}" for j in plan.ina) or "none"
    raise ExperimentError(
        f"trace op {op.id}: no INA job of lab {plan.lab} has exactly the workers "
        f"{', '.join(sorted(members))} (its jobs: {jobs}); add one under ina.jobs in the lab's vars"
    )


def run_allreduce(
    session: LabSession, job_id: int, mode: str, elements: int, ps_host: str | None = None, **kw: Any
) -> AllreduceRun:
    """One AllReduce of ``job_id`` in a collective ``mode`` outside a recorded run (tests, benches)."""
    from orchestrator.experiment.modes import mode_class

    cls = mode_class(mode)
    if not issubclass(cls, CollectiveMode):
        raise ExperimentError(f"mode {mode} is not a collective mode")
    return cls(RunOptions(ps_host=ps_host)).allreduce(session, job_id, elements, **kw)


def run_concurrent(
    session: LabSession, jobs: list[int], mode: str, elements: int, seed: int = 1, **kw: Any
) -> list[AllreduceRun]:
    """Several jobs at once (tenants sharing the fabric), all starting at the same instant."""
    start_at = time.time() + START_LEAD_S + 0.2 * len(jobs)
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [
            pool.submit(run_allreduce, session, j, mode, elements, seed=seed + j, start_at=start_at, **kw)
            for j in jobs
        ]
        return [f.result() for f in futures]
