"""aidclab link set: bandwidth moves FARE's view and both shapers; loss goes to the link-fault program."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from aidcnet.ebpf.link_fault import LinkFault
from orchestrator import fabric_tc
from orchestrator.fabric import fabric_from_plan
from orchestrator.labdir import topology_data
from orchestrator.linkset import LinkSetError, add_parser, link_set
from tests.unit.test_plan import leaf_spine_doc, plan_of, topo_of


class FakeRuntime:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def exec(self, container, cmd, timeout=None):
        self.calls.append((container, cmd))
        return 0, ""


def fake_io(calls: list) -> SimpleNamespace:
    return SimpleNamespace(
        load_fabric=fabric_tc.load_fabric,
        write_fabric=fabric_tc.write_fabric,
        node_netns=fabric_tc.node_netns,
        apply_shapers=lambda ns, ends: calls.append(("shape", ns, [(e.name, e.rate_bps) for e in ends])),
        set_link_fault=lambda netns, iface, fault: calls.append(("fault", netns, iface, fault)),
    )


@pytest.fixture
def lab_dir(tmp_path: Path) -> Path:
    doc = leaf_spine_doc(1, 1, 1)
    topo = topo_of(doc)
    (tmp_path / "topology-data.json").write_text(json.dumps(topology_data(topo, {}, 24)))
    plan = plan_of(doc, {"time": {"scale": 1000}})
    fabric_tc.write_fabric(tmp_path, fabric_from_plan(plan))
    return tmp_path


def test_bandwidth_changes_fare_view_and_both_shapers(lab_dir):
    runtime, calls = FakeRuntime(), []
    lines = link_set(runtime, lab_dir, "h1:eth1", "bandwidth", ["200G"], fabric_io=fake_io(calls))
    assert [c[1] for c in runtime.calls] == [
        ["aidcnet", "ctl", "link-bandwidth", "eth1", "200G"],
        ["aidcnet", "ctl", "link-bandwidth", "eth2", "200G"],
    ]
    assert calls == [
        ("shape", "/run/netns/clab-x-h1", [("h1:eth1", 200_000_000)]),
        ("shape", "/run/netns/clab-x-leaf1", [("leaf1:eth2", 200_000_000)]),
    ]
    assert "h1:eth1 shaped to 200 Mbit/s (200G / time scale 1000)" in lines
    recorded = fabric_tc.load_fabric(lab_dir)
    leaf = recorded.end("leaf1:eth2")
    assert (leaf.rate_bps, leaf.bandwidth_bps) == (200_000_000, 200e9)


def test_loss_goes_to_both_ends_unless_one_way_and_is_recorded(lab_dir):
    calls: list = []
    lines = link_set(FakeRuntime(), lab_dir, "leaf1:eth1", "loss", ["5%"], fabric_io=fake_io(calls))
    assert [(c[1], c[2], c[3]) for c in calls] == [
        ("/run/netns/clab-x-leaf1", "eth1", LinkFault.independent(0.05)),
        ("/run/netns/clab-x-spine1", "eth1", LinkFault.independent(0.05)),
    ]
    assert lines[0] == "leaf1:eth1 -> spine1:eth1: 5.00% independent loss"
    assert set(fabric_tc.load_fabric(lab_dir).faults) == {"leaf1:eth1", "spine1:eth1"}
    calls.clear()
    link_set(FakeRuntime(), lab_dir, "spine1:eth1", "loss", ["0"], one_way=True, fabric_io=fake_io(calls))
    assert [(c[1], c[3]) for c in calls] == [("/run/netns/clab-x-spine1", LinkFault())]
    assert set(fabric_tc.load_fabric(lab_dir).faults) == {"leaf1:eth1"}


def test_bursty_and_gilbert_words_reach_the_program(lab_dir):
    calls: list = []
    for words in (["0.1", "burst", "4"], ["gilbert", "0.01", "0.3"]):
        link_set(FakeRuntime(), lab_dir, "h1:eth1", "loss", words, one_way=True, fabric_io=fake_io(calls))
    assert [c[3] for c in calls] == [LinkFault.bursty(0.1, 4), LinkFault(p=0.01, r=0.3)]


@pytest.mark.parametrize(
    ("action", "words", "match"),
    [
        ("loss", ["2"], "between 0 and 1"),
        ("loss", [], "needs a value"),
        ("bandwidth", [], "needs one value"),
        ("bandwidth", ["10GB"], "GB"),
        ("bandwidth", ["0"], "above zero"),
    ],
)
def test_bad_values_are_refused_before_anything_changes(lab_dir, action, words, match):
    runtime, calls = FakeRuntime(), []
    before = (lab_dir / "fabric.json").read_text()
    with pytest.raises(LinkSetError, match=match):
        link_set(runtime, lab_dir, "h1:eth1", action, words, fabric_io=fake_io(calls))
    assert runtime.calls == [] and calls == [] and (lab_dir / "fabric.json").read_text() == before


def test_an_unshaped_lab_says_to_configure(lab_dir):
    (lab_dir / "fabric.json").unlink()
    with pytest.raises(LinkSetError, match="aidclab configure"):
        link_set(FakeRuntime(), lab_dir, "h1:eth1", "loss", ["0.1"], fabric_io=fake_io([]))


def test_cli_takes_loss_words_and_one_way():
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["link", "set", "--one-way", "s5:eth1", "loss", "5%", "burst", "4"])
    got = (args.endpoint, args.action, args.value, args.one_way)
    assert got == ("s5:eth1", "loss", ["5%", "burst", "4"], True)
