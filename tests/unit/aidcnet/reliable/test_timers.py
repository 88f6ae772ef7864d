"""The reliable transport's timers over long links: every wait for an answer from across the path grows by
its round trip, the local ones stay, and a path without delay keeps the tuned values."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.reliable.timers import WALL, timers
from aidcnet.timescale import TimeScale

LOCAL = {"ack_delay", "report_delay", "report_max"}


def test_a_path_without_delay_keeps_the_tuned_timers() -> None:
    assert WALL.over(0.0) is WALL
    assert timers(TimeScale(20000), 0.0) == timers(TimeScale(20000))


def test_the_interdc_round_trip_lifts_the_rto_ceiling_above_it_and_the_budget_covers_it() -> None:
    # The interdc lab's 2 ms DCI link, there and back, at 1:1000: the tuned ceiling (2.0 s of wall time at
    # 1:20000) is 100 µs of fabric time, 40 times shorter than the round trip.
    base, far = timers(TimeScale(1000)), timers(TimeScale(1000), 0.004)
    assert base.max_rto == pytest.approx(100e-6) and base.inflight == pytest.approx(5e-6)
    # A full budget queues a round trip behind the source's link: the first answers take up to two.
    assert far.min_rto == pytest.approx(base.min_rto + 0.008) and far.initial_rto > far.min_rto
    assert far.max_rto == pytest.approx(base.max_rto + 0.024)
    assert far.inflight == pytest.approx(base.inflight + 0.004)
    assert far.fail_after > 10 * far.max_rto


@given(
    rtt=st.floats(1e-7, 1.0, allow_nan=False),
    more=st.floats(1e-7, 1.0, allow_nan=False),
    factor=st.sampled_from([1000, 20000, 250000]),
)
def test_every_wait_across_the_path_grows_with_its_round_trip_and_the_local_ones_stay(
    rtt: float, more: float, factor: int
) -> None:
    base = timers(TimeScale(factor))
    near, far = base.over(rtt), base.over(rtt + more)
    for f in dataclasses.fields(base):
        b, n, x = getattr(base, f.name), getattr(near, f.name), getattr(far, f.name)
        if f.name in LOCAL:
            assert b == n == x, f.name
        else:
            assert b < n < x and n >= b + rtt * (1 - 1e-9), f.name
    # What the senders and receivers were given is still ordered as the tuned values are.
    assert near.min_rto <= near.initial_rto and near.min_rto < near.max_rto < near.fail_after
    assert near.nack_interval <= near.nack_max_interval
