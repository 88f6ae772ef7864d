"""The driver's verdict on an AllReduce (orchestrator.allreduce.judge), on replies built here: exact
digests for order-independent arithmetic, one agreed result plus a tolerance for float32 sums."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from aidcnet.ina.header import DType, Op
from aidcnet.ina.worker import digest, exact_result, job_fixed_point_scale, reference, worker_array
from orchestrator.configure.plan.schema import PlanInaJob
from orchestrator.experiment.modes.collective import check_supported, judge
from orchestrator.experiment.session import ExperimentError as ReplayError


def reply(values: np.ndarray, with_values: bool = True) -> dict:
    big = np.ascontiguousarray(values).astype(">f4" if values.dtype.kind == "f" else ">i4")
    r = {"digest": digest(values)}
    if with_values:
        r["values"] = base64.b64encode(big.tobytes()).decode()
    return r


ARRAYS = [worker_array(4, w, 300, DType.FLOAT32) for w in range(1, 5)]


def orders() -> tuple[np.ndarray, np.ndarray]:
    """The same float32 sum in two orders: different bits, both within the bound."""
    a = ((ARRAYS[0] + ARRAYS[1]) + (ARRAYS[2] + ARRAYS[3])).astype(np.float32)
    b = (((ARRAYS[3] + ARRAYS[1]) + ARRAYS[0]) + ARRAYS[2]).astype(np.float32)
    assert digest(a) != digest(b)
    return a, b


def test_int32_is_judged_by_digest_alone() -> None:
    arrays = [worker_array(4, w, 300, DType.INT32) for w in range(1, 5)]
    good = reference(arrays, Op.SUM)
    bad = good.copy()
    bad[0] += 1
    replies = {"w1": reply(good, False), "w2": reply(bad, False), "w3": reply(good, False)}
    assert judge(arrays, Op.SUM, DType.INT32, 0, replies) == (["w2"], digest(good), 0.0)


def test_float32_sum_needs_one_agreed_result_within_tolerance() -> None:
    a, b = orders()
    wrong, agreed, err = judge(ARRAYS, Op.SUM, DType.FLOAT32, 0, {f"w{i}": reply(a) for i in range(1, 5)})
    assert (wrong, agreed) == ([], digest(a)) and 0 < err < 1e-5
    # Within tolerance but not what the others hold: the root disseminates one result, so this is wrong.
    split = {"w1": reply(a), "w2": reply(b), "w3": reply(a), "w4": reply(a)}
    assert judge(ARRAYS, Op.SUM, DType.FLOAT32, 0, split)[0] == ["w2"]
    # All agree on values beyond the tolerance: all wrong.
    off = (a + np.float32(1e-3)).astype(np.float32)
    assert judge(ARRAYS, Op.SUM, DType.FLOAT32, 0, {"w1": reply(off), "w2": reply(off)})[0] == ["w1", "w2"]
    # Values missing, or not hashing to the digest the worker reported, cannot vouch for a digest (once
    # one worker's values have, equal digests are equal arrays and need not be sent again).
    liar = dict(reply(a), values=reply(b)["values"])
    assert judge(ARRAYS, Op.SUM, DType.FLOAT32, 0, {"w1": reply(a, False)})[0] == ["w1"]
    assert judge(ARRAYS, Op.SUM, DType.FLOAT32, 0, {"w1": liar, "w2": reply(a)})[0] == ["w1"]
    assert judge(ARRAYS, Op.SUM, DType.FLOAT32, 0, {"w1": reply(a), "w2": liar})[0] == []


def test_fixed32_is_bit_exact_and_within_tolerance() -> None:
    s = job_fixed_point_scale(4)
    exact = exact_result(ARRAYS, Op.SUM, DType.FIXED32, s)
    assert exact is not None
    assert judge(ARRAYS, Op.SUM, DType.FIXED32, s, {"w1": reply(exact), "w2": reply(exact)})[0] == []
    # A plain float32 sum is within tolerance, but it is not the fixed-point result every switch makes.
    a, _ = orders()
    assert judge(ARRAYS, Op.SUM, DType.FIXED32, s, {"w1": reply(exact), "w2": reply(a)})[0] == ["w2"]


def job(op: str, dtype: str) -> PlanInaJob:
    return PlanInaJob.model_construct(job=3, workers=["w1", "w2"], op=op, dtype=dtype)


@pytest.mark.parametrize(
    ("mode", "op", "dtype", "words"),
    [("ring", "max", "float32", "mode ring reduces sums only"), ("ps", "prod", "float32", "float32 prod")],
)
def test_the_driver_refuses_what_it_cannot_run_or_judge(mode, op, dtype, words) -> None:
    with pytest.raises(ReplayError, match=words):
        check_supported(job(op, dtype), mode)
    check_supported(job("sum", dtype), mode)
    check_supported(job(op, "int32"), "ina")


def test_an_allreduce_line_shows_fabric_time_or_labelled_wall_time() -> None:
    """The issue's line: 16 MiB x 4 workers in 20.377 s was wall time at 1:20000 (1.02 ms of fabric)."""
    from orchestrator.experiment.clock import Clock
    from orchestrator.experiment.modes.collective import AllreduceRun, allreduce_line

    replies = {w: {"finished": 120.377, "retransmits": 0} for w in ("h1", "h2", "h3", "h4")}
    run = AllreduceRun(1, "ina", 4 << 20, "d", replies, start_at=100.0)
    assert allreduce_line(run, Clock.of(20000)) == (
        "allreduce job 1 ina: 16.00 MiB x 4 workers in 1.02 ms, 0 retransmits, exact on every worker"
    )
    assert "in 20.377 s (wall)," in allreduce_line(run, Clock.of(None))
