"""The scale search's decisions: halve while faithful, double while not, narrow the gap, stop."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.experiment.scale_search import (
    PRECISION,
    Trial,
    against_reference,
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


def test_a_run_whose_fabric_time_strays_from_the_reference_is_not_faithful():
    reference = Trial(20000, True, 0.40)  # 20 µs of fabric time
    same = against_reference(Trial(10000, True, 0.21), reference)  # 21 µs: within 15%
    slow = against_reference(Trial(1250, True, 0.076), reference)  # 60.8 µs: our software's pace
    assert same.faithful and not slow.faithful
    assert "204% above the 20.00 µs at 1:20000" in slow.reasons[0]
    # An unfaithful reference proves nothing: the trial keeps its own verdict.
    assert against_reference(Trial(1250, True, 0.076), Trial(20000, False, 0.4)).faithful


def test_the_search_uses_the_reference():
    # Every verdict says faithful, but below 1:5000 the fabric time grows: the answer is 5000.
    fabric_us = {20000: 20.0, 10000: 20.5, 5000: 22.0, 2500: 30.0, 1250: 60.0}
    trials = find_scale(
        20000,
        lambda s: Trial(s, True, fabric_us.get(s, 20.0 if s > 5000 else 40.0) * 1e-6 * s),
        max_runs=8,
        say=lambda _: None,
    )
    assert smallest_faithful(trials).scale in range(3600, 5001)
