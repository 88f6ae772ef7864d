"""The scale search's decisions: halve while faithful, double while not, narrow the gap, stop."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.experiment.scale_search import (
    PRECISION,
    Trial,
    describe,
    find_scale,
    next_scale,
    smallest_faithful,
)
from orchestrator.lab.fabric import EndShaper, Fabric, tbf_burst


def test_halves_while_faithful_and_doubles_while_not():
    assert next_scale([Trial(20000, True)]) == 10000
    assert next_scale([Trial(20000, False)]) == 40000
    assert next_scale([Trial(20000, False), Trial(40000, False)]) == 80000


def test_narrows_between_the_smallest_faithful_and_the_largest_unfaithful_below_it():
    trials = [Trial(20000, True), Trial(10000, True), Trial(5000, False)]
    assert next_scale(trials) == round((10000 * 5000) ** 0.5)
    close = [Trial(10000, True), Trial(8000, False)]  # within PRECISION: nothing finer to learn
    assert PRECISION >= 10000 / 8000 and next_scale(close) is None


def test_stops_at_the_floor_the_links_allow():
    assert next_scale([Trial(20, True)], floor=12) is None
    assert next_scale([Trial(30, True)], floor=12) == 15


def test_a_search_needs_a_first_trial():
    with pytest.raises(ValueError, match="first trial"):
        next_scale([])


@given(threshold=st.integers(2, 200_000), start=st.sampled_from([1000, 20000, 100_000]))
def test_the_search_brackets_any_threshold_it_can_reach(threshold, start):
    # A lab that is faithful exactly at scales >= threshold: the answer is within PRECISION of it.
    seen = []
    trials = find_scale(
        start, lambda s: seen.append(s) or Trial(s, s >= threshold), max_runs=40, say=lambda _: None
    )
    best = smallest_faithful(trials)
    assert best is not None and best.scale >= threshold
    unfaithful_below = [t.scale for t in trials if not t.faithful and t.scale < best.scale]
    if threshold > 1 and unfaithful_below:
        worst = max(unfaithful_below)
        assert best.scale / worst <= PRECISION or best.scale - worst == 1  # no integer left between
    assert len(seen) == len(set(seen)), "a scale was run twice"


def test_describe_names_the_answer_and_each_run():
    lines = describe(
        [Trial(20000, True, 0.4), Trial(10000, False, 0.3, reasons=["node leaf1: CPU saturated"])]
    )
    assert lines[0].startswith("1:10000: 0.300 s wall") and "CPU saturated" in lines[0]
    assert lines[-1] == "smallest faithful scale: 20000 (time.scale in the lab's vars)"
    assert "no faithful scale" in describe([Trial(10, False)])[-1]


def test_a_fabric_at_another_scale_keeps_bandwidth_and_queue():
    end = EndShaper(
        "h1", "eth1", "leaf1:eth1", 400_000_000_000, 20_000_000, 4 << 20, tbf_burst(20_000_000, 9500), 9500
    )
    fabric = Fabric("x", 20000, {end.name: end}).with_scale(10000)
    got = fabric.ends["h1:eth1"]
    assert fabric.scale == 10000 and got.rate_bps == 40_000_000 and got.queue_bytes == 4 << 20
    assert got.burst_bytes == tbf_burst(40_000_000, 9500) and got.bandwidth_bps == 400_000_000_000
