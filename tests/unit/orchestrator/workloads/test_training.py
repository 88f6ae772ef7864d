"""The closed-loop step generators (orchestrator.workloads.training): their shape, their dependencies and
that every step they make runs to its end."""

from __future__ import annotations

import io

import pytest

from orchestrator.workloads import moe
from orchestrator.workloads.step import simulate, unfinished
from orchestrator.workloads.trace import TraceReader, dumps_trace
from orchestrator.workloads.training import (
    BF16_TOKEN_BYTES,
    DEEPSEEK_V3,
    FP8_TOKEN_BYTES,
    DecodeStepParams,
    MoEStepParams,
    PipelineStepParams,
    generate_decode_step,
    generate_moe_step,
    generate_pipeline_step,
    stage_order,
)

H8 = tuple(f"h{i}" for i in range(1, 9))


def text(w) -> str:
    return dumps_trace(w.header, w.ops)


def read(w) -> list:
    return list(TraceReader(io.StringIO(text(w))))


def test_deepseek_v3_shape_is_the_published_one():
    s = DEEPSEEK_V3
    # MLA's projections from the config (q_lora 1536, kv_lora 512, 128 heads of 128 + 64 rope, v 128).
    assert s.attention_params == 187_105_280
    assert s.expert_params == 3 * 7168 * 2048
    assert FP8_TOKEN_BYTES == 7408 and BF16_TOKEN_BYTES == 14336


def test_moe_step_is_deterministic_version_2_and_runs_to_its_end():
    p = MoEStepParams(hosts=H8, layers=2, tokens_per_host=8, seed=3)
    assert text(generate_moe_step(p)) == text(generate_moe_step(p))
    ops = read(generate_moe_step(p))
    assert generate_moe_step(p).header.version == 2
    assert unfinished(ops, simulate(ops, lambda op, d: 1e-6, lambda op: 1e-6)) == []


def test_moe_step_dispatch_is_moe_routing_and_combine_returns_what_each_host_served():
    p = MoEStepParams(hosts=H8, layers=2, tokens_per_host=8, seed=5)
    ops = read(generate_moe_step(p))
    dispatch = [o for o in ops if o.tag == "L0 forward dispatch"]
    plain = [o for o in moe.generate(moe.MoEParams(hosts=H8, steps=2, tokens_per_host=8, seed=5)).ops
             if o.tag == "step0"]  # fmt: skip
    assert [(o.src, o.dst, o.bytes) for o in dispatch] == [(o.src, o.dst, o.bytes) for o in plain]
    served: dict[tuple[str, str], int] = {}
    for o in dispatch:
        for d in o.dst:
            served[(d, o.src)] = served.get((d, o.src), 0) + o.bytes // FP8_TOKEN_BYTES
    combine = [o for o in ops if o.tag == "L0 forward combine"]
    assert {(o.src, o.dst[0]): o.bytes // BF16_TOKEN_BYTES for o in combine} == served
    by_id = {o.id: o for o in ops}
    for o in ops:
        if o.op == "compute" and o.tag == "L0 forward experts":
            inbound = {x.id for x in dispatch if o.src in x.dst}
            assert inbound <= set(o.after)  # the experts run once every dispatch to them is there
    for o in combine:
        (expert,) = o.after
        assert by_id[expert].tag == "L0 forward experts" and by_id[expert].src == o.src


def test_moe_step_ends_with_the_gradient_allreduce_over_every_host():
    p = MoEStepParams(hosts=H8, layers=2, tokens_per_host=8, seed=1)
    ops = read(generate_moe_step(p))
    last = ops[-1]
    assert last.op == "allreduce" and {last.src, *last.dst} == set(H8)
    assert last.bytes == p.allreduce_bytes and last.bytes % 4 == 0
    by_id = {o.id: o for o in ops}
    assert sorted(by_id[a].src for a in last.after) == sorted(H8)
    assert all(by_id[a].tag == "L0 attention backward" for a in last.after)
    # Its default: the layers' dense FP32 gradients in the share of the optimizer step's tokens modelled.
    full = 2 * DEEPSEEK_V3.dense_params_per_layer * 4
    assert last.bytes == pytest.approx(full * 8 / 30720, abs=4)
    assert MoEStepParams(hosts=H8, gradient_bytes=4096).allreduce_bytes == 4096
    with pytest.raises(ValueError, match="4-byte"):
        MoEStepParams(hosts=H8, gradient_bytes=6)


def test_decode_step_has_no_backward_and_no_allreduce():
    ops = read(generate_decode_step(DecodeStepParams(hosts=H8[:4], layers=2, tokens_per_host=4, seed=2)))
    assert not any(o.op == "allreduce" or "backward" in (o.tag or "") for o in ops)
    assert [o.tag for o in ops if o.op == "compute"][-4:] == ["head and sampling"] * 4
    assert unfinished(ops, simulate(ops, lambda op, d: 1e-6)) == []


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_pipeline_orders(schedule):
    for stages in (1, 2, 4):
        for m in (1, 3, 8):
            for s in range(stages):
                order = stage_order(s, stages, m, schedule)
                assert sorted(order) == sorted([("B", i) for i in range(m)] + [("F", i) for i in range(m)])
                assert all(order.index(("F", i)) < order.index(("B", i)) for i in range(m))
                if schedule == "1f1b":  # at most stages - s forwards in flight
                    flight = max(sum(1 for k, _ in order[: j + 1] if k == "F")
                                 - sum(1 for k, _ in order[: j + 1] if k == "B") for j in range(len(order)))
                    assert flight <= min(m, stages - s)


def test_pipeline_step_sends_between_neighbours_and_runs_to_its_end():
    p = PipelineStepParams(hosts=H8[:4], micro_batches=4, seed=1)
    ops = read(generate_pipeline_step(p))
    sends = [o for o in ops if o.op == "unicast"]
    assert len(sends) == 2 * 3 * 4  # activations and gradients over each of 3 stage boundaries
    assert all(abs(H8.index(o.src) - H8.index(o.dst[0])) == 1 for o in sends)
    times = simulate(ops, lambda op, d: 5e-6)
    assert unfinished(ops, times) == []


def test_the_training_benchs_step_can_be_routed_on_each_of_its_labs() -> None:
    """bench/training.py's moe-step on every lab it runs: 256 GPUs holding DeepSeek-V3's 256 experts,
    one each, cannot route top-8 on at most 4 nodes, so bsl256 takes 1,024."""
    import pydantic

    from bench.training import COLLECTIVES, EXPERTS, LAYERS, TOKENS_PER_HOST
    from orchestrator.workloads.training import MoEStepParams

    gpus = {"leaf-spine": 8, "bsl256": 256}
    assert set(gpus) == set(COLLECTIVES)
    for lab, n in gpus.items():
        hosts = tuple(f"h{i}" for i in range(1, n + 1))
        shape = {"hosts": hosts, "layers": LAYERS, "tokens_per_host": TOKENS_PER_HOST[lab]}
        p = MoEStepParams(**shape, **({"experts": EXPERTS[lab]} if lab in EXPERTS else {}))
        p.routing(p.tokens_per_host)
    with pytest.raises(pydantic.ValidationError, match="cannot be found on max_nodes"):
        p = MoEStepParams(hosts=tuple(f"h{i}" for i in range(1, 257)), layers=LAYERS)
        p.routing(p.tokens_per_host)
