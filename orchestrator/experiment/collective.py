"""Driver of AllReduce runs on a deployed, configured lab: INA, parameter server or ring.

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
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aidcnet.ina.header import DType, Op
from aidcnet.ina.worker import digest, exact_result, job_scale, out_of_tolerance, worker_array
from orchestrator.configure.plan.model import LabPlan, PlanInaJob
from orchestrator.experiment.driver import ReplayError, ask

MODES = ("ina", "ring", "ps")
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
    raise ReplayError(f"lab {plan.lab} has no INA job {job} in its plan (jobs: {known}; see ina.jobs)")


def check_supported(job: PlanInaJob, mode: str) -> None:
    """Refuse, naming the mode and dtype, what the driver cannot run or cannot judge."""
    op, dtype = Op[job.op.upper()], DType[job.dtype.upper()]
    if mode == "ring" and op is not Op.SUM:
        raise ReplayError(
            f"job {job.job}: mode ring reduces sums only, the job is {job.dtype} {job.op} "
            "(run it with --mode ina or ps, or set op: sum in ina.jobs)"
        )
    if dtype is DType.FLOAT32 and op is Op.PROD:
        raise ReplayError(
            f"job {job.job}: mode {mode}: float32 prod has no tolerance the driver could check it against "
            "(use int32 prod, or float32 sum/min/max)"
        )


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
        if node.role == "gpu-host" and name not in job.workers:
            return name
    raise ReplayError(f"job {job.job}: every gpu-host is a worker; name a parameter server host (--ps-host)")


def run_allreduce(
    plan: LabPlan,
    pids: dict[str, int],
    job_id: int,
    mode: str,
    elements: int,
    seed: int = 1,
    ps_host: str | None = None,
    timeout_s: float = 0.2,
    deadline_s: float = 300.0,
    start_at: float | None = None,
    chunk_elements: int | None = None,
) -> AllreduceRun:
    if mode not in MODES:
        raise ReplayError(f"mode {mode!r} is not an AllReduce mode ({', '.join(MODES)})")
    job = find_job(plan, job_id)
    check_supported(job, mode)
    op, dtype = Op[job.op.upper()], DType[job.dtype.upper()]
    arrays = job_arrays(plan, job, elements, seed)
    scale = job_scale(len(job.workers)) if dtype is DType.FIXED32 else 0
    loopbacks = {
        plan.nodes[w].bfr_id: str(plan.nodes[w].loopback.ip)  # type: ignore[union-attr]
        for w in job.workers
    }
    request: dict[str, Any] = {
        "job": job.job, "mode": mode, "elements": elements, "seed": seed, "timeout_s": timeout_s,
        "deadline_s": deadline_s, "scale": scale,
    }
    if dtype is not DType.INT32:
        request["values"] = True  # float results are judged on their values, not only their digest
    if mode == "ina":
        # Chunk numbers restart at 0 every run: the switches must forget the previous run's slots.
        for name in [*job.vat, *job.transit]:
            ask(pids[name], "ina_reset", name, job=job.job)
    elif mode == "ps":
        ps = ps_host or default_ps_host(plan, job)
        ask(pids[ps], "ps_serve", ps, job=job.job, workers=loopbacks, reduce=job.op, dtype=job.dtype,
            slot_budget=job.slot_budget)
        request["ps"] = str(plan.nodes[ps].loopback.ip)  # type: ignore[union-attr]
    else:
        request["addresses"] = loopbacks
    if chunk_elements:
        request["chunk_elements"] = chunk_elements
    request["start_at"] = start_at if start_at is not None else time.time() + START_LEAD_S

    def one(worker: str) -> tuple[str, dict[str, Any]]:
        return worker, ask(pids[worker], "allreduce", worker, timeout=deadline_s + 10, **request)

    with ThreadPoolExecutor(len(job.workers)) as pool:
        replies = dict(pool.map(one, job.workers))
    wrong, expected, max_error = judge(arrays, op, dtype, scale, replies)
    for r in replies.values():
        r.pop("values", None)  # judged; runs are kept in memory and written to results
    return AllreduceRun(
        job.job, mode, elements, expected, replies, request["start_at"], wrong, job.dtype, max_error
    )


def run_concurrent(
    plan: LabPlan, pids: dict[str, int], jobs: list[int], mode: str, elements: int, seed: int = 1, **kw: Any
) -> list[AllreduceRun]:
    """Several jobs at once (tenants sharing the fabric), all starting at the same instant."""
    start_at = time.time() + START_LEAD_S + 0.2 * len(jobs)
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [
            pool.submit(run_allreduce, plan, pids, j, mode, elements, seed + j, start_at=start_at, **kw)
            for j in jobs
        ]
        return [f.result() for f in futures]


# ------------------------------------------------------------------------------------ trace replay


def _job_for(plan: LabPlan, op: Any) -> PlanInaJob:
    members = {op.src, *op.dst}
    for job in plan.ina:
        if set(job.workers) == members:
            return job
    jobs = "; ".join(f"job {j.job}: {', '.join(j.workers)}" for j in plan.ina) or "none"
    raise ReplayError(
        f"trace op {op.id}: no INA job of lab {plan.lab} has exactly the workers "
        f"{', '.join(sorted(members))} (its jobs: {jobs}); add one under ina.jobs in the lab's vars"
    )


def replay_allreduce(
    topo: Any, trace: str, mode: str, results_dir: str, ps_host: str | None = None, seed: int = 1,
    say: Any = None,
) -> tuple[list[AllreduceRun], Path]:
    """Replay a trace's ``allreduce`` ops (docs/trace-format.md) in ``mode``; ops issued at the same
    ``t`` for different jobs run concurrently. Records the run like any replay (``RESULTS_DIR/<run-id>/``,
    docs/results-format.md: one message per op, delivered to the workers whose result was exact, with
    link and agent counter deltas), so ``aidclab report`` compares ina, ring and ps, with ps as the
    baseline; the per-op digests and retransmits go to ``allreduce.json`` beside it."""
    import json
    from datetime import UTC, datetime

    from orchestrator.experiment.driver import (
        AGENT_ROLES,
        agent_snapshot,
        interface_snapshot,
        load_plan,
        node_pids,
    )
    from orchestrator.experiment.metrics import agent_deltas, link_deltas, link_pairs
    from orchestrator.experiment.results import (
        MessageResult,
        RunResult,
        new_meta,
        new_run_id,
        save_run,
        trace_info,
    )
    from orchestrator.lab.runtime.docker import DockerRuntime
    from orchestrator.workloads.trace import TraceReader

    with TraceReader(trace) as reader:
        ops = list(reader)
    others = [op for op in ops if op.op != "allreduce"]
    if others:
        raise ReplayError(
            f"{trace}: mode {mode} replays allreduce ops only; op {others[0].id} is {others[0].op} "
            "(replay it with --mode unicast, host-bier or net-bier)"
        )
    for op in ops:
        if op.bytes % 4:
            raise ReplayError(
                f"{trace}: op {op.id}: bytes {op.bytes} is not a whole number of 4-octet elements "
                "(int32, float32 and fixed32 are all 4 octets)"
            )
    plan = load_plan(topo)
    pids = node_pids(topo, DockerRuntime())
    jobs = {op.id: _job_for(plan, op) for op in ops}
    for op in ops:
        check_supported(jobs[op.id], mode)  # before any op runs, not halfway through the trace
    agents = {n: pids[n] for n, p in plan.nodes.items() if p.role in AGENT_ROLES and n in pids}
    links_before, agents_before = interface_snapshot(topo, pids), agent_snapshot(agents)
    started = datetime.now(UTC)
    runs: list[AllreduceRun] = []
    t0 = time.time() + START_LEAD_S
    i = 0
    while i < len(ops):
        # One wave: ops at the same t, each job at most once (a job runs one AllReduce at a time).
        wave, seen = [], set()
        while i < len(ops) and jobs[ops[i].id].job not in seen and (not wave or ops[i].t == wave[0].t):
            wave.append(ops[i])
            seen.add(jobs[ops[i].id].job)
            i += 1
        start = max(t0 + wave[0].t, time.time() + START_LEAD_S)
        with ThreadPoolExecutor(len(wave)) as pool:
            futures = [
                pool.submit(
                    run_allreduce, plan, pids, jobs[op.id].job, mode, op.bytes // 4, seed=seed + op.id,
                    ps_host=ps_host, start_at=start,
                )
                for op in wave
            ]
            done = [f.result() for f in futures]
        runs += done
        if say is not None:
            for op, run in zip(wave, done, strict=True):
                say(
                    f"op {op.id} job {run.job}: {run.seconds:.3f} s, {run.retransmits} retransmits, "
                    + (run.verdict if not run.ok else "exact" if run.dtype == "int32" else "within tolerance")
                    + f" ({len(runs)}/{len(ops)})"
                )
    finished = datetime.now(UTC)
    messages = []
    for op, run in zip(ops, runs, strict=True):
        exact = [w for w in run.replies if w not in run.wrong]
        messages.append(
            MessageResult(
                id=op.id, op="allreduce", src=op.src, expected=[op.src, *op.dst], delivered=exact,
                bytes=op.bytes, sent_at=run.start_at - t0,
                latency={w: max(0.0, run.replies[w]["finished"] - run.start_at) for w in exact},
            )
        )
    result = RunResult(
        meta=new_meta(
            run_id=new_run_id(topo.name, mode), lab=topo.name, mode=mode, trace=trace_info(trace),
            started=started, finished=finished, topology_file=Path(topo.path).resolve(),
            settings={"seed": seed, "ps_host": ps_host},
        ),
        links=link_deltas(links_before, interface_snapshot(topo, pids), link_pairs(topo)),
        agents=agent_deltas(agents_before, agent_snapshot(agents)),
        messages=messages,
    )
    run_dir = save_run(result, results_dir)
    rows = [
        {
            "id": op.id, "tag": op.tag, "job": run.job, "mode": mode, "bytes": op.bytes,
            "seconds": round(run.seconds, 6), "retransmits": run.retransmits, "exact": run.ok,
            "wrong": run.wrong, "digest": run.expected, "dtype": run.dtype, "max_error": run.max_error,
        }
        for op, run in zip(ops, runs, strict=True)
    ]
    doc = {"lab": topo.name, "trace": trace, "ops": rows}
    (run_dir / "allreduce.json").write_text(json.dumps(doc, indent=2))
    return runs, run_dir
