"""The closed-loop step: each host's items (aidcnet.step), the simulation and the analysis
(orchestrator.workloads.step, step_metrics). Properties over any DAG and any compute times."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aidcnet.step import HostSchedule, Item, Kind
from orchestrator.workloads.step import BARRIER, COMPUTE, NETWORK, host_items, simulate, unfinished
from orchestrator.workloads.step_metrics import analyse
from orchestrator.workloads.trace import (
    DEPENDENCIES_VERSION,
    FORMAT_NAME,
    ComputeOp,
    TraceHeader,
    TraceOp,
    TraceReader,
    dumps_trace,
)

HOSTS = ["h1", "h2", "h3", "h4"]


@st.composite
def steps(draw: st.DrawFn) -> list:
    """Any DAG of compute, message and AllReduce ops over a few hosts, each waiting for a random set of
    the earlier ops that concern its actors (what a version-2 trace allows)."""
    n = draw(st.integers(1, 24))
    ops: list = []
    t = 0.0
    for i in range(n):
        kind = draw(st.sampled_from(["compute", "multicast", "unicast", "allreduce"]))
        t += draw(st.sampled_from([0.0, 0.0, 0.0, 1e-6]))  # release times, never going back
        if kind == "compute":
            op = ComputeOp(t=t, op="compute", src=draw(st.sampled_from(HOSTS)),
                           seconds=draw(st.floats(0, 1e-4)), id=i)
        elif kind == "allreduce":
            workers = draw(st.lists(st.sampled_from(HOSTS), min_size=2, max_size=4, unique=True))
            op = TraceOp(t=t, op="allreduce", src=workers[0], dst=workers[1:], bytes=64, id=i)
        else:
            src = draw(st.sampled_from(HOSTS))
            others = [h for h in HOSTS if h != src]
            size = 1 if kind == "unicast" else draw(st.integers(1, 3))
            dst = draw(st.lists(st.sampled_from(others), min_size=size, max_size=size, unique=True))
            op = TraceOp(t=t, op=kind, src=src, dst=dst, bytes=draw(st.integers(1, 1 << 16)), id=i)
        allowed = [o.id for o in ops if o.hosts & op.actors]
        after = draw(st.lists(st.sampled_from(allowed), unique=True, max_size=4)) if allowed else []
        ops.append(op.model_copy(update={"after": sorted(after)}))
    # The trace's own reader accepts it: the strategy draws only what the format allows.
    header = TraceHeader(format=FORMAT_NAME, version=DEPENDENCIES_VERSION, generator="test", hosts=HOSTS)
    assert list(TraceReader(dumps_trace(header, ops).splitlines(keepends=True))) == ops
    return ops


delays = st.dictionaries(st.integers(0, 24), st.floats(0, 5e-5), max_size=24)


def network(delay: dict[int, float]):
    def transfer(op, dst):
        return delay.get(op.id, 1e-6) * (1 + HOSTS.index(dst) / 10)

    return transfer, (lambda op: delay.get(op.id, 2e-6))


@settings(max_examples=60, deadline=None)
@given(steps(), delays)
def test_no_op_starts_before_its_inputs_and_every_op_ends(ops, delay):
    transfer, reduce = network(delay)
    times = simulate(ops, transfer, reduce)
    assert unfinished(ops, times) == []
    items = host_items(ops)
    for host, mine in items.items():
        t = times[host]
        for item in mine:
            for dep in item.after:
                assert t.event(dep) is not None and t.start[item.id] >= t.event(dep)
            assert t.start[item.id] >= item.t and t.start[item.id] >= t.ready[item.id]
        # One GPU: compute phases never overlap.
        spans = sorted((t.start[i.id], t.end[i.id]) for i in mine if i.kind is Kind.COMPUTE)
        assert all(a[1] <= b[0] + 1e-15 for a, b in itertools.pairwise(spans))
    by_id = {op.id: op for op in ops}
    for op in ops:
        if op.op == "allreduce":  # nobody has the result before the last worker joined
            last = max(times[w].start[op.id] for w in op.hosts)
            assert all(times[w].end[op.id] >= last for w in op.hosts)
        elif op.op != "compute":
            for d in op.dst:
                assert times[d].arrived[op.id] >= times[op.src].start[op.id]
    assert by_id  # the strategy never draws an empty step


@settings(max_examples=60, deadline=None)
@given(steps(), delays)
def test_every_gpu_moment_is_compute_network_or_barrier_once(ops, delay):
    transfer, reduce = network(delay)
    times = simulate(ops, transfer, reduce)
    m = analyse(ops, times)
    for host, gpu in m.gpus.items():
        total = sum(gpu.total(k) for k in (COMPUTE, NETWORK, BARRIER))
        assert total == pytest.approx(m.step_s, abs=1e-12)
        spans = sorted(gpu.spans, key=lambda s: s.start)
        assert all(a.end <= b.start + 1e-15 for a, b in itertools.pairwise(spans))
        mine = sum(op.seconds for op in ops if op.op == "compute" and op.src == host)
        assert gpu.total(COMPUTE) == pytest.approx(mine, abs=1e-12)
    assert m.exposed_s >= 0 and m.compute_only_s <= m.step_s + 1e-12


@settings(max_examples=40, deadline=None)
@given(steps())
def test_an_infinitely_fast_network_exposes_no_communication(ops):
    m = analyse(ops, simulate(ops))
    assert m.exposed_s == pytest.approx(0.0, abs=1e-12)
    for gpu in m.gpus.values():
        assert gpu.total(NETWORK) == pytest.approx(0.0, abs=1e-12)


def test_a_straggler_is_the_gpu_the_others_waited_for():
    # h2 computes 10 µs before its dispatch to h1 and h3; they wait for it (barrier), then for the bytes.
    ops = [
        ComputeOp(t=0, op="compute", src="h2", seconds=10e-6, id=0),
        TraceOp(t=0, op="multicast", src="h2", dst=["h1", "h3"], bytes=100, after=[0], id=1),
        ComputeOp(t=0, op="compute", src="h1", seconds=1e-6, after=[1], id=2),
        ComputeOp(t=0, op="compute", src="h3", seconds=1e-6, after=[1], id=3),
    ]
    m = analyse(ops, simulate(ops, lambda op, dst: 2e-6))
    assert m.step_s == pytest.approx(13e-6) and m.compute_only_s == pytest.approx(11e-6)
    assert m.exposed_s == pytest.approx(2e-6)
    assert m.straggler == "h2" and m.straggler_blame_s == pytest.approx(20e-6)
    h1 = m.gpus["h1"]
    assert h1.total(BARRIER) == pytest.approx(10e-6) and h1.total(NETWORK) == pytest.approx(2e-6)
    assert h1.longest_wait() == (1, BARRIER, pytest.approx(10e-6), "h2")
    # h2 is done at 10 µs: the rest of the step it waits at the step's end for the others.
    assert m.gpus["h2"].total(BARRIER) == pytest.approx(3e-6)


def test_the_gpu_runs_one_compute_at_a_time_in_ready_order():
    s = HostSchedule.of([
        Item(1, Kind.COMPUTE, seconds=1.0), Item(2, Kind.COMPUTE, seconds=1.0),
        Item(3, Kind.COMPUTE, after=(9,), seconds=1.0),
    ])  # fmt: skip
    first = s.begin(0.0)
    assert [(x.item.id, x.at) for x in first] == [(1, 0.0)]
    assert s.happened(9, 0.5) == []  # 3 is ready but the GPU is busy; 2 was ready first
    assert [(x.item.id, x.at) for x in s.happened(1, 1.0)] == [(2, 1.0)]
    assert [(x.item.id, x.at) for x in s.happened(2, 2.0)] == [(3, 2.0)]
    assert s.happened(3, 3.0) == [] and s.done


def test_a_job_runs_its_allreduces_in_id_order():
    s = HostSchedule.of([Item(5, Kind.REDUCE, after=(1,), job=1), Item(7, Kind.REDUCE, job=1)])
    assert s.begin(0.0) == []  # 7 is ready, but 5 of the same job comes first
    assert [x.item.id for x in s.happened(1, 1.0)] == [5]
    assert [(x.item.id, x.at) for x in s.happened(5, 2.0)] == [(7, 2.0)]


def test_release_time_and_repeated_events():
    s = HostSchedule.of([Item(1, Kind.SEND, t=5.0, after=(0,))])
    assert [(x.item.id, x.at) for x in s.happened(0, 1.0)] == [(1, 5.0)]
    assert s.happened(0, 2.0) == []  # an event counts once
    with pytest.raises(ValueError, match="two items"):
        HostSchedule.of([Item(1, Kind.SEND), Item(1, Kind.COMPUTE)])
