"""The shaped fabric of a lab: both ends of every link from the plan, fabric.json, and link set changes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.configure.plan.schema import TimeVars
from orchestrator.lab.fabric import (
    ETH_HEADER,
    EndShaper,
    Fabric,
    FabricError,
    conditions_label,
    fabric_from_plan,
    tbf_burst,
)
from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc, plan_of


def superpod_at(scale: int | str):
    from orchestrator.configure.plan import build_plan, load_vars
    from orchestrator.lab.topology import load_topology
    from orchestrator.paths import LABS

    lab_vars = load_vars(LABS / "superpod.vars.yml").model_copy(update={"time": TimeVars(scale=scale)})
    return build_plan(load_topology(LABS / "superpod.clab.yml"), lab_vars)


def test_every_link_is_shaped_at_both_ends_to_the_plan_rate():
    plan = superpod_at(10000)
    fabric = fabric_from_plan(plan)
    assert len(fabric.ends) == 2 * len(plan.links) and fabric.scale == plan.time.scale
    g1 = fabric.end("G1:eth1")
    assert (g1.peer, g1.bandwidth_bps, g1.rate_bps, g1.queue_bytes) == ("L1:eth1", 800e9, 80e6, 4 << 20)
    assert fabric.end("L1:eth1").peer == "G1:eth1" and fabric.end("L1:eth1").rate_bps == 80e6


def test_an_unshaped_lab_has_every_end_at_rate_zero():
    fabric = fabric_from_plan(superpod_at("off"))
    assert fabric.scale is None and {e.rate_bps for e in fabric.ends.values()} == {0}
    after, changed = fabric.with_bandwidth("L1:eth1", 400_000_000_000)
    assert {c.rate_bps for c in changed} == {0} and after.end("G1:eth1").bandwidth_bps == 400_000_000_000


def test_halving_a_y_cable_halves_both_ends_and_nothing_else():
    fabric = fabric_from_plan(superpod_at(10000))
    after, changed = fabric.with_bandwidth("L1:eth1", 400_000_000_000)
    assert sorted(c.name for c in changed) == ["G1:eth1", "L1:eth1"]
    assert {after.end(n).rate_bps for n in ("G1:eth1", "L1:eth1")} == {40_000_000}
    others = {k: v for k, v in after.ends.items() if k not in ("G1:eth1", "L1:eth1")}
    assert others == {k: v for k, v in fabric.ends.items() if k in others}


def test_fabric_json_round_trips_with_faults():
    fabric = fabric_from_plan(plan_of(leaf_spine_doc(1, 2, 1), {"time": {"scale": 1000}}))
    fabric = fabric.with_fault("h1:eth1", {"p": 0.0, "r": 1.0, "loss_bad": 1.0, "loss_good": 0.05})
    text = fabric.to_json()
    doc = json.loads(text)
    assert doc["scale"] == 1000 and doc["ends"]["h1:eth1"]["rate_bps"] == 400_000_000
    assert Fabric.from_json(text) == fabric
    assert fabric.with_fault("h1:eth1", None).faults == {}


def test_unknown_end_and_bad_file_are_named():
    fabric = fabric_from_plan(plan_of(leaf_spine_doc(1, 1, 1)))
    with pytest.raises(FabricError, match="h9:eth1 is not a shaped link end of lab x"):
        fabric.with_bandwidth("h9:eth1", 1)
    with pytest.raises(FabricError, match=r"clab-x/fabric\.json: not a fabric file"):
        Fabric.from_json('{"version": 1}', "clab-x/fabric.json")
    with pytest.raises(FabricError, match="version 7"):
        Fabric.from_json('{"version": 7}')


@given(rate=st.integers(1000, 34_000_000_000), mtu=st.integers(576, 9500))
def test_burst_holds_two_frames_and_at_least_a_millisecond_of_tokens(rate, mtu):
    burst = tbf_burst(rate, mtu)
    assert burst >= 2 * (mtu + ETH_HEADER)
    assert burst >= rate / 8 / 1000
    assert burst <= max(2 * (mtu + ETH_HEADER), rate / 8 / 1000 + 1)


# --- applied to namespaces ------------------------------------------------------------------------------


def test_apply_fabric_shapes_attaches_and_reads_counters(veth_pair, tmp_path):
    from aidcnet.ebpf.link_fault import LinkFault
    from orchestrator.lab.shaping import apply_fabric, link_counters, load_fabric, qdisc_stats, set_link_fault
    from tests.unit.fabric_netns import require_tool

    require_tool("clang", "clang llvm libbpf-dev")
    pair = veth_pair
    rate = 30_000_000
    ends = {
        "a:fab0": EndShaper("a", "fab0", "b:fab1", rate * 1000, rate, 1 << 20, tbf_burst(rate, 1500), 1500),
        "b:fab1": EndShaper("b", "fab1", "a:fab0", rate * 1000, rate, 1 << 20, tbf_burst(rate, 1500), 1500),
    }
    containers = {"a": pair.a, "b": pair.b}
    fabric = apply_fabric(Fabric("fab", 1000, ends), tmp_path, containers.__getitem__)
    assert load_fabric(tmp_path) == fabric
    assert qdisc_stats(pair.a_path)["fab0"].rate_bps == rate
    assert qdisc_stats(pair.b_path)["fab1"].rate_bps == rate
    set_link_fault(pair.a_path, "fab0", LinkFault.independent(1.0))
    send50 = "import socket; s = socket.socket(2, 2)\nfor _ in range(50): s.sendto(b'x', ('10.99.0.1', 9))"
    pair.run_in(pair.a, send50)
    counters = link_counters(fabric, containers.__getitem__)
    assert counters["a:fab0"]["injected_drops"] == 50 and counters["a:fab0"]["tx_packets"] == 0
    assert counters["b:fab1"]["injected_drops"] == 0
    # A second configure keeps the running program (and its loss) and the recorded faults.
    lossy = fabric.with_fault("a:fab0", LinkFault.independent(1.0).to_dict())
    (tmp_path / "fabric.json").write_text(lossy.to_json())
    again = apply_fabric(Fabric("fab", 1000, ends), tmp_path, containers.__getitem__)
    assert again.faults == {"a:fab0": LinkFault.independent(1.0).to_dict()}
    assert link_counters(again, containers.__getitem__)["a:fab0"]["injected_drops"] == 50


def test_delay_goes_to_both_ends_or_one_and_round_trips():
    from orchestrator.lab.delay import LinkDelay

    fabric = fabric_from_plan(plan_of(leaf_spine_doc(2, 2, 1), {"time": {"scale": 1000}}))
    assert fabric.delayed_ends() == {}
    both, changed = fabric.with_delay("leaf1:eth1", LinkDelay(0.002, 1e-4))
    assert {e.name for e in changed} == {"leaf1:eth1", "spine1:eth1"}
    assert set(both.delayed_ends()) == {"leaf1:eth1", "spine1:eth1"}
    one, changed = fabric.with_delay("leaf1:eth1", LinkDelay(1e-6), one_way=True)
    assert [e.name for e in changed] == ["leaf1:eth1"] and set(one.delayed_ends()) == {"leaf1:eth1"}
    again = Fabric.from_json(both.to_json())
    assert again == both and again.end("spine1:eth1").delay == LinkDelay(0.002, 1e-4)
    assert both.conditions()["delay_s"] == {"leaf1:eth1": 0.002, "spine1:eth1": 0.002}
    assert "delay_s" not in fabric.conditions()  # runs from before delays keep their conditions
    assert conditions_label(one.conditions()) == "1:1000, leaf1:eth1 delay 1 µs"
    # A delay survives a rescale; its wall time is the relay's business (delay x scale).
    assert both.with_scale(2000).end("leaf1:eth1").delay_s == 0.002


def test_a_fabric_file_from_before_delays_reads_as_undelayed():
    fabric = fabric_from_plan(plan_of(leaf_spine_doc(1, 1, 1), {"time": {"scale": 1000}}))
    doc = json.loads(fabric.to_json())
    for end in doc["ends"].values():
        del end["delay_s"], end["jitter_s"]
    del doc["delay_set"]
    old = Fabric.from_json(json.dumps(doc))
    assert old.delayed_ends() == {} and old.delay_set == {}
