"""The INA part of the model on Figure 1 of the INA draft (labs/ina-fig1): per chunk, the packets on each
link direction as the draft's walk-through gives them by hand, and the bytes from the header sizes of
docs/ina-header.md."""

from __future__ import annotations

import pytest

from orchestrator.configure.plan import build_plan
from orchestrator.lab.topology import load_topology, resolve_lab
from orchestrator.model.exact import ModelError, PlanModel
from orchestrator.workloads.trace import TraceOp

# One chunk of job 1 (workers w1..w4, VAT s1 {w1,w2}, s7 {w3,w4}, root s6). Up: w1, w2 -> s1, which
# sends their sum on; s2 and s5 only pass packets on; s7 absorbs w3 and w4 and forwards s1's sum (its
# A-BM does not meet that P-BM); s6 gets two packets. Down: s6 imposes BIER to w1..w4.
JOB1_UP = {
    ("w1", "s1"): 1, ("w2", "s1"): 1, ("s1", "s5"): 1,
    ("w3", "s2"): 1, ("w4", "s2"): 1, ("s2", "s5"): 2,
    ("s5", "s7"): 3, ("s7", "s6"): 2,
}
JOB1_DOWN = {
    ("s6", "s7"): 1, ("s7", "s5"): 1, ("s5", "s1"): 1, ("s5", "s2"): 1,
    ("s1", "w1"): 1, ("s1", "w2"): 1, ("s2", "w3"): 1, ("s2", "w4"): 1,
}


@pytest.fixture(scope="module")
def fig1() -> PlanModel:
    return PlanModel(build_plan(load_topology(resolve_lab("ina-fig1"))))


def per_direction(run) -> dict[tuple[str, str], tuple[float, float]]:
    out = {}
    for lk in run.links:
        out[(lk.a_node, lk.b_node)] = (lk.a_to_b_bytes, lk.a_to_b_packets)
        out[(lk.b_node, lk.a_node)] = (lk.b_to_a_bytes, lk.b_to_a_packets)
    return out


@pytest.mark.parametrize("elements", [1, 2048, 5000])
def test_figure1_job1_per_chunk(fig1: PlanModel, elements: int) -> None:
    op = TraceOp(t=0.0, op="allreduce", src="w1", dst=["w2", "w3", "w4"], bytes=4 * elements, id=0)
    run = fig1.run([op], "ina")
    chunks = [min(2048, elements - c) for c in range(0, elements, 2048)]
    bsl = fig1.plan.bier.bsl
    ina = [16 + bsl // 8 + 4 * k for k in chunks]  # fixed header, P-BM, elements
    udp, bier = 14 + 20 + 8, 14 + 20 + 8 + 4 + 8 + bsl // 8 + 20 + 8  # + MPLS label, BIER, inner IPv4/UDP
    got = per_direction(run)
    for key, (nbytes, packets) in got.items():
        up, down = JOB1_UP.get(key, 0), JOB1_DOWN.get(key, 0)
        assert packets == (up + down) * len(chunks), key
        assert nbytes == sum(up * (udp + n) + down * (bier + n) for n in ina), key
    assert run.agents["s6"]["ina.disseminated"] == len(chunks)
    assert run.agents["s7"]["ina.forwarded"] == len(chunks)
    assert run.agents["s2"]["ina.transit"] == 2 * len(chunks)
    assert run.stats["ina_root_bytes_in"] == {"1": sum(2 * (udp + n) for n in ina)}
    assert run.stats["payload_bytes"] == 4 * elements * 4


def test_each_allreduce_restarts_its_chunks(fig1: PlanModel) -> None:
    # The driver resets the job's slots before every AllReduce; chunk 0 of a second run is new, not a
    # duplicate of the first run's chunk 0.
    ops = [
        TraceOp(t=0.0, op="allreduce", src="w1", dst=["w2", "w3", "w4"], bytes=4 * 2048, id=0),
        TraceOp(t=1.0, op="allreduce", src="w1", dst=["w2", "w3", "w4"], bytes=4 * 2048, id=1),
    ]
    run = fig1.run(ops, "ina")
    assert run.agents["s6"]["ina.disseminated"] == 2
    assert not any(k.startswith("ina.dropped") for c in run.agents.values() for k in c)


def test_allreduce_without_a_job_is_refused(fig1: PlanModel) -> None:
    op = TraceOp(t=0.0, op="allreduce", src="w1", dst=["w5"], bytes=64, id=0)
    with pytest.raises(ModelError, match="no INA job"):
        fig1.run([op], "ina")


def test_the_plan_model_counts_the_modelled_and_collective_families_and_refuses_the_rest(
    fig1: PlanModel,
) -> None:
    from aidcnet.modes import COLLECTIVE, MODELLED, RELIABLE, Mode

    assert set(fig1.engines()) == MODELLED | COLLECTIVE
    for mode in (*RELIABLE, Mode.IGMP):
        with pytest.raises(ModelError, match=f"mode '{mode}': the plan model knows unicast, host-bier"):
            fig1.run([], mode)
