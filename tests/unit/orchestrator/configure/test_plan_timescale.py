"""The time-scale feature: shaped rate = plan bandwidth / time.scale at both ends, queue limits in bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aidcnet.timescale import MAX_SHAPED_BPS
from orchestrator.configure.plan import PlanError, dump_plan
from tests.unit.orchestrator.configure.test_plan import lab, leaf_spine_doc, plan_of


def test_by_default_the_scale_is_auto_and_configure_starts_400g_at_20_mbit_with_four_mebibyte_queues():
    plan = plan_of(leaf_spine_doc(1, 1, 1))
    assert plan.time.scale == 20000 and plan.time.auto
    got = {(x.bandwidth_bps, x.shaped_bps, x.queue_bytes) for x in plan.links}
    assert got == {(400_000_000_000, 20_000_000, 4 << 20)}


def test_a_pinned_scale_is_not_auto():
    plan = plan_of(leaf_spine_doc(1, 1, 1), {"time": {"scale": 20000}})
    assert plan.time.scale == 20000 and not plan.time.auto


@pytest.mark.parametrize("value", [0, "fast", 1.5])
def test_a_bad_scale_names_the_field(value: object) -> None:
    # The vars model refuses it (a ValueError naming the field; the CLI adds the vars file's name).
    with pytest.raises(ValueError, match=r"time\.scale"):
        plan_of(leaf_spine_doc(1, 1, 1), {"time": {"scale": value}})


def test_scale_off_leaves_links_unshaped():
    plan = plan_of(leaf_spine_doc(1, 1, 1), {"time": {"scale": "off"}})
    assert plan.time.scale is None and {x.shaped_bps for x in plan.links} == {0}


def test_a_scale_divides_every_link():
    plan = plan_of(leaf_spine_doc(1, 1, 1), {"time": {"scale": 10000}})
    assert plan.time.scale == 10000
    assert {(x.bandwidth_bps, x.shaped_bps, x.queue_bytes) for x in plan.links} == {
        (400_000_000_000, 40_000_000, 4 << 20)
    }


def test_superpod_800g_at_scale_1000_is_800_mbit():
    plan = plan_of(leaf_spine_doc(1, 1, 1), {"bandwidth": {"host": "800G"}, "time": {"scale": 1000}})
    host_links = [x for x in plan.links if x.a.node.startswith("h")]
    assert [x.shaped_bps for x in host_links] == [800_000_000]


def test_sublinks_do_not_change_the_shaped_rate_of_the_port():
    # A Y-cable is one veth: the port's whole bandwidth is what the shaper carries.
    plan = plan_of(leaf_spine_doc(1, 1, 1), {"bandwidth": {"host_sublinks": 2}, "time": {"scale": 100}})
    assert {x.shaped_bps for x in plan.links} == {4_000_000_000}


def test_link_pins_for_bandwidth_and_queue():
    plan = plan_of(
        leaf_spine_doc(1, 2, 1),
        {
            "time": {"scale": 1000},
            "bandwidth": {"queue": "256KiB"},
            "links": {"h1:eth1": {"bandwidth": "100G", "queue": "2MB"}},
        },
    )
    pinned = next(x for x in plan.links if x.endpoint("h1", "eth1"))
    assert (pinned.shaped_bps, pinned.queue_bytes) == (100_000_000, 2_000_000)
    others = [x for x in plan.links if x is not pinned]
    assert {(x.shaped_bps, x.queue_bytes) for x in others} == {(400_000_000, 256 << 10)}


def test_scale_and_rates_are_in_the_plan_file():
    text = dump_plan(plan_of(leaf_spine_doc(1, 1, 1), {"time": {"scale": 500}}))
    assert "time:\n  scale: 500\n" in text
    assert "shaped_bps: 800000000" in text and "queue_bytes: 4194304" in text


def test_a_scale_too_small_for_tbf_names_the_key_and_the_fix():
    with pytest.raises(PlanError, match=r"time\.scale.*raise time\.scale to at least 12"):
        plan_of(leaf_spine_doc(1, 1, 1), {"time": {"scale": 1}})


def test_a_queue_below_one_jumbo_frame_is_refused_with_its_key():
    with pytest.raises(PlanError, match=r"links\.leaf1:eth1\.queue.*one jumbo frame"):
        plan_of(leaf_spine_doc(1, 1, 1), {"links": {"leaf1:eth1": {"queue": "4KiB"}}})


def test_a_queue_that_is_not_a_size_names_the_key():
    with pytest.raises(PlanError, match=r"bandwidth\.queue.*not a size"):
        plan_of(leaf_spine_doc(1, 1, 1), {"bandwidth": {"queue": "lots"}})


def test_scale_zero_is_refused_by_the_model():
    with pytest.raises(ValueError, match=r"time\.scale"):
        plan_of(leaf_spine_doc(1, 1, 1), {"time": {"scale": 0}})


def test_lab_files_are_shaped_at_the_default_scale_but_superpod_frr_whose_8g_links_want_100():
    for name in ("leaf-spine", "superpod", "ina-fig1"):
        plan = lab(name)
        assert plan.time.scale == 20000 and 0 not in {link.shaped_bps for link in plan.links}
    frr = lab("superpod-frr")
    assert frr.time.scale == 100
    assert {link.shaped_bps for link in frr.links if link.bandwidth_bps == 8_000_000_000} == {80_000_000}


@given(bw_gbit=st.integers(1, 3200), scale=st.integers(1, 10**6))
def test_shaped_rate_is_bandwidth_over_scale_or_a_clear_error(bw_gbit, scale):
    doc = leaf_spine_doc(1, 1, 1)
    vars_doc = {"bandwidth": {"default": f"{bw_gbit}G"}, "time": {"scale": scale}}
    if bw_gbit * 1e9 / scale > MAX_SHAPED_BPS:
        with pytest.raises(PlanError, match=r"time\.scale"):
            plan_of(doc, vars_doc)
        return
    plan = plan_of(doc, vars_doc)
    for link in plan.links:
        assert abs(link.shaped_bps - bw_gbit * 1e9 / scale) <= 0.5 or link.shaped_bps == 1
