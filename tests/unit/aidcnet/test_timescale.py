"""The one wall/fabric conversion: round trips, the veth rate, the TBF limit, and what files hold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.timescale import MAX_SHAPED_BPS, TimeScale, TimeScaleError


def test_fabric_time_is_wall_time_over_the_factor() -> None:
    ts = TimeScale(20000)
    assert ts.fabric_s(0.365) == pytest.approx(18.25e-6)
    assert ts.wall_s(1e-6) == pytest.approx(0.02)  # one fabric microsecond is 20 ms of wall time
    assert ts.wall_ns(1e-6) == 20_000_000
    assert ts.label == "1:20000" and ts.value == 20000


def test_a_400g_link_is_20_mbit_on_its_veth_at_20000() -> None:
    assert TimeScale(20000).veth_bps(400_000_000_000) == 20_000_000
    assert TimeScale.unshaped().veth_bps(400_000_000_000) == 0


def test_unshaped_reports_no_fabric_time_and_runs_timers_as_written() -> None:
    ts = TimeScale.of("off")
    assert not ts.shaped and ts.value is None and ts.label == "unshaped"
    assert ts.reported_s(1.5) is None
    assert ts.wall_s(2.0) == 2.0


@pytest.mark.parametrize("value", [0, -3, 1.5, "fast", True])
def test_bad_values_are_refused(value: object) -> None:
    with pytest.raises(TimeScaleError):
        TimeScale.of(value)


def test_the_tbf_limit_names_the_smallest_scale() -> None:
    bw = 800_000_000_000
    need = TimeScale.minimum_for(bw)
    assert TimeScale(need).check_link(bw) is None
    assert need == 1 or TimeScale(need - 1).check_link(bw) is not None
    assert TimeScale(need).veth_bps(bw) <= MAX_SHAPED_BPS


@given(st.integers(1, 10**7), st.floats(0, 1e4, allow_nan=False))
def test_round_trip(factor: int, wall: float) -> None:
    ts = TimeScale(factor)
    assert ts.wall_s(ts.fabric_s(wall)) == pytest.approx(wall, rel=1e-12, abs=1e-15)


@given(st.integers(1, 10**6), st.floats(1.01, 8))
def test_a_second_scale_is_larger(factor: int, k: float) -> None:
    assert TimeScale(factor).times(k).factor >= factor
