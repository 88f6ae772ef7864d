"""Propagation delay along a plan's paths (fabric seconds), and the INA workers' timers (delay, scale)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.ina.worker import DEFAULT_MAX_RTO_S, DEFAULT_MIN_RTO_S, DEFAULT_RTO_MARGIN_S, DEFAULT_TIMEOUT_S
from aidcnet.timescale import TimeScale
from orchestrator.configure.plan import build_plan
from orchestrator.experiment.modes.jobs import DEADLINE_S, TIMERS_HOLD_TO, job_round_trip_s, worker_timers
from orchestrator.lab.fabric import fabric_from_plan
from orchestrator.lab.propagation import (
    PropagationError,
    fabric_delays,
    path_delays,
    plan_delays,
    worst_round_trip_s,
)
from orchestrator.lab.topology import load_topology
from orchestrator.paths import LABS


@pytest.fixture(scope="module")
def regional():
    return build_plan(load_topology(LABS / "regional.clab.yml"))


@pytest.fixture(scope="module")
def interdc():
    return build_plan(load_topology(LABS / "interdc.clab.yml"))


def test_a_path_adds_the_delays_of_the_links_it_crosses(regional):
    delays = plan_delays(regional)
    # h1 -> l1 -> s1 -> b0 -(1 ms)- c1 then the shorter way round the ring to c3 (2 x 2 ms), 5 ms to e3.
    assert path_delays(regional, delays, "h1", "h9") == pytest.approx((0.010, 0.010))
    assert path_delays(regional, delays, "h1", "h11") == pytest.approx((0.013, 0.013))  # via c4, 10 ms
    assert path_delays(regional, delays, "h1", "h2") == (0.0, 0.0)
    assert worst_round_trip_s(regional, delays, [("h5", "b0"), ("h11", "b0")]) == pytest.approx(0.026)


def test_equal_cost_paths_give_the_least_and_the_most(interdc):
    delays = plan_delays(interdc)
    # two DCI links, 2 ms each
    assert path_delays(interdc, delays, "h1", "h5") == pytest.approx((0.002, 0.002))
    delays["b1:eth3"] = 0.005  # one DCI link made longer (link set b1:eth3 delay 5ms --one-way)
    assert path_delays(interdc, delays, "h1", "h5") == pytest.approx((0.002, 0.005))


def test_the_live_fabric_has_the_same_delays_as_its_plan(interdc):
    assert fabric_delays(fabric_from_plan(interdc)) == plan_delays(interdc)


def test_an_unreachable_destination_is_named(interdc):
    for node in interdc.nodes.values():
        node.routes = [r for r in node.routes if r.to != "h8"] if node.name == "l1" else node.routes
    with pytest.raises(PropagationError, match="l1 has no route to h8"):
        path_delays(interdc, plan_delays(interdc), "h1", "h8")


def test_ina_timers_wait_for_the_wan_round_trip(regional):
    job = regional.ina[0]
    rtt = job_round_trip_s(regional, plan_delays(regional), job, "b0")
    assert rtt == pytest.approx(0.026)  # h11/h12 behind e4: 13 ms each way
    timers = worker_timers(rtt, TimeScale(1000))
    assert timers["timeout_s"] == pytest.approx(52.0) and timers["max_rto_s"] == pytest.approx(104.0)
    # Inside a DC, up to the scale the defaults were measured good at, the defaults stand: they are our
    # software's pace.
    inside = worker_timers(8e-6, TIMERS_HOLD_TO)
    assert (inside["timeout_s"], inside["max_rto_s"]) == (DEFAULT_TIMEOUT_S, DEFAULT_MAX_RTO_S)
    # A ring waits on its neighbours; the farthest pair is h10 -> h11, e3 to e4 (5 + 2 + 10 ms each way).
    assert job_round_trip_s(regional, plan_delays(regional), job, None) == pytest.approx(0.034)


@given(st.integers(TIMERS_HOLD_TO.factor, 10**7), st.integers(2, 64), st.floats(0, 0.05))
def test_from_the_scale_they_hold_to_the_ina_timers_are_the_same_fabric_time(
    factor: int, times: int, round_trip_s: float
) -> None:
    """A run and its confirmation at ``times`` its scale wait as long in fabric time for everything."""
    one, other = TimeScale(factor), TimeScale(factor * times)
    a, b = worker_timers(round_trip_s, one), worker_timers(round_trip_s, other)
    assert a.keys() == b.keys() == {"timeout_s", "min_rto_s", "max_rto_s", "rto_margin_s", "deadline_s"}
    for name in a:
        assert one.fabric_s(a[name]) == pytest.approx(other.fabric_s(b[name]), rel=1e-9), name


@given(st.integers(1, TIMERS_HOLD_TO.factor))
def test_below_it_no_ina_timer_is_shorter_on_the_wall_clock_than_its_default(factor: int) -> None:
    timers = worker_timers(0.0, TimeScale(factor))
    assert timers == {
        "timeout_s": DEFAULT_TIMEOUT_S, "min_rto_s": DEFAULT_MIN_RTO_S, "max_rto_s": DEFAULT_MAX_RTO_S,
        "rto_margin_s": DEFAULT_RTO_MARGIN_S, "deadline_s": DEADLINE_S,
    }  # fmt: skip
    assert worker_timers(0.0, TimeScale.unshaped()) == timers
