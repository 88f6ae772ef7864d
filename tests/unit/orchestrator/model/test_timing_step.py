"""The time model of a closed-loop step (orchestrator/model/timing_step.py): compute phases as timers, each
op once its inputs are there, on cases worked out by hand and the generators' steps."""

from __future__ import annotations

import pytest

from aidcnet.modes import Mode, StepModes
from orchestrator.model.exact import ModelError
from orchestrator.model.timing import TimeModel
from orchestrator.workloads.step import host_items
from orchestrator.workloads.trace import ComputeOp, TraceOp
from orchestrator.workloads.training import MoEStepParams, moe_step_ops
from tests.unit.orchestrator.model.test_timing import UDP, C, allreduce, chunk_frame, star, timer


def compute(i: int, host: str, seconds: float, after: list[int] | None = None) -> ComputeOp:
    return ComputeOp(t=0.0, op="compute", src=host, seconds=seconds, after=after or [], id=i)


def test_a_message_leaves_when_its_compute_is_done_and_the_next_compute_waits_for_it() -> None:
    ops = [
        compute(0, "h1", 10e-6),
        TraceOp(t=0.0, op="unicast", src="h1", dst=["h2"], bytes=8000, after=[0], id=1),
        compute(2, "h2", 5e-6, [1]),
    ]
    p = timer().predict(ops, Mode.UNICAST)  # h1 -> leaf1 -> h2: two hops
    wire = 2 * (8000 + UDP) / C
    assert p.completion_s == pytest.approx(wire, rel=1e-9)  # what a replay measures: the message's span
    assert p.step is not None and p.step.step_s == pytest.approx(10e-6 + wire + 5e-6, rel=1e-9)
    assert p.step.compute_only_s == pytest.approx(15e-6) and p.step.exposed_s == pytest.approx(wire, rel=1e-9)
    h2 = p.step.gpus["h2"]
    assert h2.total("barrier") == pytest.approx(10e-6)
    assert h2.total("network") == pytest.approx(wire, rel=1e-9)
    assert p.mode == "unicast" and "the step" in p.describe()


@pytest.mark.parametrize("mode", [Mode.INA, Mode.RING, Mode.PS])
def test_an_allreduce_starts_when_its_last_worker_has_computed(mode: Mode) -> None:
    n = 3
    op = allreduce(n, 2048).model_copy(update={"id": 3, "after": [0, 1, 2]})
    ops = [compute(i, f"w{i + 1}", (i + 1) * 1e-6) for i in range(n)] + [op]
    alone = TimeModel(star(n)).predict([allreduce(n, 2048)], mode).completion_s
    p = TimeModel(star(n)).predict(ops, StepModes(None, mode))
    assert p.step is not None and p.step_times is not None
    assert p.step_times["w1"].start[3] == pytest.approx(1e-6)  # each joins when its compute is done
    assert p.step.step_s == pytest.approx(3e-6 + alone, rel=1e-9)
    assert p.step.straggler == "w3"
    assert p.step.gpus["w1"].total("barrier") == pytest.approx(2e-6)  # waiting at the AllReduce for w3
    assert p.mode == str(mode)
    f, _ = chunk_frame()
    assert alone > f / C


@pytest.mark.parametrize("messages", [Mode.UNICAST, Mode.HOST_BIER, Mode.NET_BIER])
def test_a_moe_step_on_leaf_spine_keeps_every_dependency(messages: Mode) -> None:
    from tests.unit.orchestrator.model.test_timing import HOSTS

    ops = moe_step_ops(MoEStepParams(hosts=tuple(HOSTS), layers=1, tokens_per_host=4, seed=2))
    ops = [o for o in ops if o.op != "allreduce"]  # leaf-spine has no INA job
    p = timer().predict(ops, StepModes(messages))
    assert p.step is not None and p.step_times is not None
    for host, items in host_items(ops).items():
        t = p.step_times[host]
        for item in items:
            assert all(t.start[item.id] >= t.event(dep) for dep in item.after)
    assert p.step.step_s > p.step.compute_only_s > 0
    assert 0 < p.step.mean_share("compute") < 1


def test_a_step_needs_the_modes_of_its_kinds() -> None:
    ops = [compute(0, "w1", 1e-6), allreduce(2, 16).model_copy(update={"id": 1, "after": [0]})]
    with pytest.raises(ModelError, match="op 1 is an AllReduce: name the collective mode"):
        TimeModel(star(2)).predict(ops, StepModes(Mode.UNICAST))
    with pytest.raises(ValueError, match="a step's AllReduces run in ina, ring, ps, not unicast"):
        StepModes(Mode.HOST_BIER, Mode.UNICAST)
    assert str(StepModes(Mode.HOST_BIER, Mode.RING)) == "host-bier+ring"
