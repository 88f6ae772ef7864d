"""The flow engine of the time model (orchestrator/model/fluid.py): max-min fair rates worked out by hand,
FIFO queues, delivery after the latency, and what depends on a flow starting only then."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.fluid import Flow, FluidError, FluidNetwork, max_min_rates


def rates(capacity: list[float], flows: list[dict[int, float]]) -> list[float]:
    """Max-min rates of flows given as {direction: weight}."""
    inc = [(f, d, w) for f, uses in enumerate(flows) for d, w in sorted(uses.items())]
    f, d, w = (np.asarray(col) for col in zip(*inc, strict=True))
    got, _left = max_min_rates(
        np.asarray(capacity, float), f.astype(np.int64), d.astype(np.int64), w, len(flows)
    )
    return got.tolist()


def test_the_textbook_example() -> None:
    # Links A (0) and B (1) of capacity 1: f0 on A, f1 on A and B, f2 and f3 on B. B is shared by three
    # (1/3 each); f0 takes what f1 leaves on A.
    got = rates([1.0, 1.0], [{0: 1}, {0: 1, 1: 1}, {1: 1}, {1: 1}])
    assert got == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3])


def test_a_flow_bottlenecked_elsewhere_leaves_its_share() -> None:
    # f0 crosses a slow link 1 (capacity 1) and link 0 (capacity 10), which it shares with f1.
    assert rates([10.0, 1.0], [{0: 1, 1: 1}, {0: 1}]) == pytest.approx([1.0, 9.0])


def test_a_weight_is_the_share_of_capacity_per_unit_of_rate() -> None:
    # f0 puts twice its rate on link 0 (a BIER op whose receivers span two SIs), f1 once: equal rates r,
    # 3r = 6.
    assert rates([6.0], [{0: 2}, {0: 1}]) == pytest.approx([2.0, 2.0])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.5, 10.0), min_size=1, max_size=5).flatmap(
        lambda caps: st.tuples(
            st.just(caps),
            st.lists(
                st.dictionaries(st.integers(0, len(caps) - 1), st.sampled_from([0.25, 0.5, 1.0]), min_size=1),
                min_size=1,
                max_size=7,
            ),
        )
    )
)
def test_max_min_is_feasible_and_every_flow_has_a_full_link_where_it_is_among_the_largest(
    case: tuple[list[float], list[dict[int, float]]],
) -> None:
    capacity, flows = case
    got = rates(capacity, flows)
    used = [sum(got[f] * uses.get(d, 0) for f, uses in enumerate(flows)) for d in range(len(capacity))]
    assert all(u <= c * (1 + 1e-9) for u, c in zip(used, capacity, strict=True))
    for f, uses in enumerate(flows):
        # Max-min: each flow crosses a full link on which no other flow has a larger rate.
        assert any(
            used[d] >= capacity[d] * (1 - 1e-9)
            and all(got[g] <= got[f] * (1 + 1e-9) for g, o in enumerate(flows) if d in o)
            for d in uses
        ), (f, got, used)


def net(capacity: list[float]) -> FluidNetwork:
    zeros = np.zeros(len(capacity), dtype=np.int64)
    return FluidNetwork(np.asarray(capacity), zeros, zeros, 1, [f"d{i}" for i in range(len(capacity))])


def flow(key: str, uses: dict[int, float], latency: float = 0.0, queue: str | None = None) -> Flow:
    dirs = sorted(uses)
    return Flow(key, dirs, [uses[d] for d in dirs], [1.0] * len(dirs), latency, queue=queue)


def test_rates_change_when_a_flow_ends() -> None:
    n = net([10.0])
    n.start(flow("small", {0: 10.0}), 0.0)
    n.start(flow("big", {0: 30.0}), 0.0)
    run = n.run()
    # Both at 5 until small is done at 2; big then has 20 left, alone at 10: done at 4.
    assert run.flows["small"].finish == pytest.approx(2.0)
    assert run.flows["big"].finish == pytest.approx(4.0)
    assert run.saturated_s[0] == pytest.approx(4.0)


def test_a_queue_sends_its_flows_one_after_the_other() -> None:
    n = net([10.0])
    for i in range(3):
        n.start(flow(f"q{i}", {0: 10.0}, queue="socket"), 0.0)
    run = n.run()
    assert [run.flows[f"q{i}"].finish for i in range(3)] == pytest.approx([1.0, 2.0, 3.0])


def test_what_depends_on_a_flow_starts_at_its_delivery() -> None:
    n = net([10.0, 10.0])
    n.start(flow("first", {0: 10.0}, latency=0.5), 0.0)
    seen = []

    def delivered(f: Flow, t: float) -> None:
        seen.append((f.key, t))
        if f.key == "first":
            n.start(flow("second", {1: 20.0}), t)

    run = n.run(delivered)
    assert seen == [("first", pytest.approx(1.5)), ("second", pytest.approx(3.5))]
    assert run.end == pytest.approx(3.5)


def test_a_flow_over_a_link_that_is_down_is_refused_by_name() -> None:
    n = net([10.0, 0.0])
    with pytest.raises(FluidError, match="d1, which is down"):
        n.start(flow("lost", {0: 1.0, 1: 1.0}), 0.0)
