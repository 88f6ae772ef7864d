"""An AllReduce trace op's INA job on a lab, its workers' timers at the lab's scale and delay, and the
judgement of its result on every worker; the collective modes and closed-loop steps both use them (the
rules are in ``orchestrator/experiment/modes/collective.py``'s docstring)."""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import numpy as np

from aidcnet.ina.header import DType, Op
from aidcnet.ina.worker import (
    DEFAULT_MAX_RTO_S,
    DEFAULT_MIN_RTO_S,
    DEFAULT_RTO_MARGIN_S,
    DEFAULT_TIMEOUT_S,
    digest,
    exact_result,
    out_of_tolerance,
    worker_array,
)
from aidcnet.timescale import TimeScale
from orchestrator.configure.plan.schema import LabPlan, PlanInaJob
from orchestrator.experiment.session import ExperimentError
from orchestrator.workloads.trace import TraceOp


def find_job(plan: LabPlan, job: int) -> PlanInaJob:
    for j in plan.ina:
        if j.job == job:
            return j
    known = ", ".join(str(j.job) for j in plan.ina) or "none"
    raise ExperimentError(f"lab {plan.lab} has no INA job {job} in its plan (jobs: {known}; see ina.jobs)")


def job_arrays(plan: LabPlan, job: PlanInaJob, elements: int, seed: int) -> list[np.ndarray]:
    dtype = DType[job.dtype.upper()]
    return [worker_array(seed, plan.nodes[w].bfr_id or 0, elements, dtype) for w in job.workers]


def judge(
    arrays: list[np.ndarray],
    op: Op,
    dtype: DType,
    fixed_point_scale: int,
    replies: dict[str, dict[str, Any]],
) -> tuple[list[str], str, float]:
    """Which workers got a wrong result, the digest all had to hold, and the largest float error.

    A worker is wrong if its digest differs from the exact one (when the arithmetic has one) or from
    the digest most workers agree on (float32 sum), or, for float jobs, if the values it returned do
    not hash to its digest or stray beyond the tolerance from numpy's reduction. Values are judged
    once per distinct digest: equal digests are equal arrays.
    """
    exact = exact_result(arrays, op, dtype, fixed_point_scale)
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
                bad, err = out_of_tolerance(arrays, got, op, dtype, fixed_point_scale)
                verdicts[d] = not len(bad)
                max_error = max(max_error, err)
            if not verdicts[d]:
                wrong.add(w)
    return [w for w in replies if w in wrong], expected, max_error


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


DEADLINE_S = 300.0
# The workers' timer defaults (``aidcnet.ina.worker``) are wall seconds chosen for our software's pace: an
# agent off the CPU for tens of ms, an asyncio timer late. Up to this scale they also cover the swings of
# a round trip through the fabric's queues. Above it those swings, which are fabric time, take longer on
# the wall clock than the defaults wait: measured on leaf-spine's closed-loop MoE step with a ring
# AllReduce (2026-12-05), 0 retransmissions at 1:8000 and 432 at 1:32000 (h2 alone 285), all spurious
# (no loss), with 3.6 MB more on the links, so the two runs were two different runs. The timers therefore
# stay the fabric times they are at this scale, and a run at any larger scale waits as long in fabric time.
TIMERS_HOLD_TO = TimeScale(5000)


def worker_timers(
    round_trip_s: float, time_scale: TimeScale, deadline_s: float = DEADLINE_S
) -> dict[str, float]:
    """The timers of an AllReduce's workers (the request's ``timeout_s``, ``min_rto_s``, ``max_rto_s``,
    ``rto_margin_s`` and ``deadline_s``, wall seconds) for a job whose longest round trip takes
    ``round_trip_s`` of fabric time (docs/delay.md), on a lab at ``time_scale``.

    Each is the larger of its default and the fabric time the default stands for at
    :data:`TIMERS_HOLD_TO`, so that from that scale up a run behaves the same in fabric time at any scale
    (what ``aidclab replay --confirm`` checks). A long path raises them further: the initial RTO to at
    least twice the round trip on the wall clock and the largest RTO to at least four times it, so that a
    long link is waited for instead of retransmitted into; the deadline grows with it."""
    stretch = max(1.0, time_scale.wall_s(TIMERS_HOLD_TO.fabric_s(1.0))) if time_scale.shaped else 1.0
    rtt = time_scale.wall_s(round_trip_s)
    return {
        "timeout_s": max(DEFAULT_TIMEOUT_S * stretch, 2 * rtt),
        "min_rto_s": DEFAULT_MIN_RTO_S * stretch,
        "max_rto_s": max(DEFAULT_MAX_RTO_S * stretch, 4 * rtt),
        "rto_margin_s": DEFAULT_RTO_MARGIN_S * stretch,
        "deadline_s": deadline_s * stretch + 20 * rtt,
    }


def job_round_trip_s(plan: LabPlan, delays: dict[str, float], job: PlanInaJob, point: str | None) -> float:
    """The longest propagation round trip (fabric seconds) a job's workers wait on: to the aggregation
    point (the parameter server, the INA root) and back, or to the next rank of the ring and back; 0 on a
    lab without delay."""
    from orchestrator.lab.propagation import worst_round_trip_s

    if not any(delays.values()):
        return 0.0
    workers = list(job.workers)
    if point is not None:
        pairs = [(w, point) for w in workers if w != point]
    else:
        pairs = list(zip(workers, workers[1:] + workers[:1], strict=True)) if len(workers) > 1 else []
    return worst_round_trip_s(plan, delays, pairs)
