"""``aidclab link set``: which ends it acts on, what it asks their agents, what it sets on the link (both
shapers, the link-fault program), what fabric.json records, and its errors."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from aidcnet.agent.client import AgentError
from aidcnet.agent.control import Op
from aidcnet.ebpf.link_fault import LinkFault
from orchestrator.lab import shaping
from orchestrator.lab.fabric import fabric_from_plan
from orchestrator.lab.labdir import topology_data
from orchestrator.lab.linkset import LinkSetError, link_ends, link_set, parse_endpoint
from tests.unit.orchestrator.configure.test_plan import leaf_spine_doc, plan_of, topo_of

# --- aidclab link set -----------------------------------------------------------------------------------

TOPO_DATA = {
    "nodes": {
        "G1": {"longname": "clab-x-G1", "image": "aidclab/gpu-host:latest"},
        "L1": {"longname": "clab-x-L1", "image": "aidclab/bfr:latest"},
        "F1": {"longname": "clab-x-F1", "image": "aidclab/frr:latest"},
    },
    "links": [
        {"a": {"node": "G1", "interface": "eth1"}, "z": {"node": "L1", "interface": "eth1"}},
        {"a": {"node": "G1", "interface": "eth2"}, "z": {"node": "F1", "interface": "eth1"}},
    ],
}


class FakeAgent:
    """Records what ``link set`` asks a node's agent; refuses like an agent when told to."""

    def __init__(self, runtime: FakeRuntime, container: str) -> None:
        self.runtime, self.container = runtime, container

    def _call(self, op: Op, *args: object) -> dict:
        self.runtime.calls.append((self.container, op, *args))
        if self.runtime.code:
            raise AgentError(self.container, op, {"ok": False, "error": "boom"})
        return {"ok": True}

    def bgp_link(self, interface: str, bandwidth: str) -> dict:
        return self._call(Op.BGP_LINK, interface, bandwidth)


class FakeRuntime:
    def __init__(self, code: int = 0) -> None:
        self.calls: list[tuple] = []
        self.code = code

    def exec(self, container, cmd, timeout=None):
        self.calls.append((container, cmd))
        return self.code, "boom" if self.code else "{}"

    def agent(self, container, node=None, timeout=10.0):
        return FakeAgent(self, container)


def test_link_set_down_acts_at_the_named_end_only(tmp_path) -> None:
    lab_dir = lab_dir_with_fabric(tmp_path)
    rt, io = FakeRuntime(), FakeFabricIO()
    lines = link_set(rt, lab_dir, "L1:eth1", "down", fabric_io=io)
    assert io.calls == [("state", shaping.node_netns("clab-x-L1"), "eth1", False)]
    assert rt.calls == []  # nothing through the container: the host sets it over netlink
    assert "peer G1:eth1" in lines[0]
    assert io.load_fabric(lab_dir).down == ("L1:eth1",)
    io.calls.clear()
    link_set(rt, lab_dir, "L1:eth1", "up", fabric_io=io)
    assert io.calls == [("state", shaping.node_netns("clab-x-L1"), "eth1", True)]
    assert io.load_fabric(lab_dir).down == ()


def lab_dir_with_fabric(tmp_path):
    from orchestrator.lab.fabric import EndShaper, Fabric
    from orchestrator.lab.shaping import write_fabric

    (tmp_path / "topology-data.json").write_text(json.dumps(TOPO_DATA))
    ends = {}
    for link in TOPO_DATA["links"]:
        for here, there in ((link["a"], link["z"]), (link["z"], link["a"])):
            name = f"{here['node']}:{here['interface']}"
            peer = f"{there['node']}:{there['interface']}"
            ends[name] = EndShaper(here["node"], here["interface"], peer, 800e9, 80e6, 1 << 20, 19028, 9500)
    write_fabric(tmp_path, Fabric("x", 10000, ends))
    return tmp_path


class FakeFabricIO:
    def __init__(self) -> None:
        from orchestrator.lab import shaping

        self.load_fabric, self.write_fabric, self.node_netns = (
            shaping.load_fabric,
            shaping.write_fabric,
            shaping.node_netns,
        )
        self.calls: list[tuple] = []
        self.fail = False

    def apply_shapers(self, netns, ends):
        self.calls.append(("shape", netns, [(e.name, e.rate_bps) for e in ends]))
        return len(ends)

    def set_link_fault(self, netns, interface, fault):
        self.calls.append(("fault", netns, interface, fault.describe()))

    def set_link_state(self, netns, interface, up):
        self.calls.append(("state", netns, interface, up))
        if self.fail:
            raise shaping.FabricIOError(f"{netns}: no interface {interface}")


def test_link_set_bandwidth_tells_both_agents_and_skips_frr(tmp_path) -> None:
    lab_dir = lab_dir_with_fabric(tmp_path)
    rt, io = FakeRuntime(), FakeFabricIO()
    link_set(rt, lab_dir, "G1:eth1", "bandwidth", "400G", fabric_io=io)
    assert rt.calls == [
        ("clab-x-G1", Op.BGP_LINK, "eth1", "400G"),
        ("clab-x-L1", Op.BGP_LINK, "eth1", "400G"),
    ]
    assert [c[2] for c in io.calls] == [[("G1:eth1", 40e6)], [("L1:eth1", 40e6)]]
    rt, io = FakeRuntime(), FakeFabricIO()
    lines = link_set(rt, lab_dir, "G1:eth2", "bandwidth", "200G", fabric_io=io)
    # FRR has no agent to tell, but its end of the link is shaped all the same (from the host).
    assert [c[0] for c in rt.calls] == ["clab-x-G1"] and "FARE view unchanged" in lines[1]
    assert [c[1] for c in io.calls] == ["/run/netns/clab-x-G1", "/run/netns/clab-x-F1"]


def test_link_set_loss_sets_the_link_at_both_ends_frr_too(tmp_path) -> None:
    lab_dir = lab_dir_with_fabric(tmp_path)
    rt, io = FakeRuntime(), FakeFabricIO()
    lines = link_set(rt, lab_dir, "F1:eth1", "loss", "0.02", fabric_io=io)
    assert rt.calls == []  # nothing runs in the nodes: the fault is on the link
    assert io.calls == [
        ("fault", "/run/netns/clab-x-F1", "eth1", "2.00% independent loss"),
        ("fault", "/run/netns/clab-x-G1", "eth2", "2.00% independent loss"),
    ]
    assert "2.00%" in lines[0]
    io = FakeFabricIO()
    assert "no loss" in link_set(rt, lab_dir, "F1:eth1", "loss", "0", fabric_io=io)[0]


@pytest.mark.parametrize(
    ("endpoint", "action", "value", "needle"),
    [
        ("G1:eth1", "loss", None, "needs a value"),
        ("G1:eth1", "loss", "2", "between 0 and 1"),
        ("G1:eth1", "loss", "lots", "'lots' is not a number"),
        ("G1", "down", None, "NODE:INTERFACE"),
        ("G9:eth1", "down", None, "no node 'G9'"),
        ("G1:eth7", "down", None, "its links: eth1, eth2"),
        ("G1:eth1", "bandwidth", None, "needs one value"),
        ("G1:eth1", "bandwidth", "800GB/s", "bytes/s units"),
    ],
)
def test_link_set_errors_name_the_problem(tmp_path, endpoint, action, value, needle) -> None:
    lab_dir = lab_dir_with_fabric(tmp_path)
    with pytest.raises(LinkSetError, match=needle):
        link_set(FakeRuntime(), lab_dir, endpoint, action, value, fabric_io=FakeFabricIO())


def test_link_set_failure_in_the_node_is_reported(tmp_path) -> None:
    (tmp_path / "topology-data.json").write_text(json.dumps(TOPO_DATA))
    failing = FakeFabricIO()
    failing.fail = True
    with pytest.raises(LinkSetError, match=r"G1: setting eth1 down failed: .*no interface eth1"):
        link_set(FakeRuntime(), tmp_path, "G1:eth1", "down", fabric_io=failing)
    with pytest.raises(LinkSetError, match=r"G1: bandwidth of eth1 to 400G: node clab-x-G1: bgp_link: boom"):
        link_set(FakeRuntime(code=1), lab_dir_with_fabric(tmp_path), "G1:eth1", "bandwidth", "400G")
    with pytest.raises(LinkSetError, match="is the lab deployed"):
        link_set(FakeRuntime(), tmp_path / "nope", "G1:eth1", "down")


def test_parse_endpoint_and_ends() -> None:
    assert parse_endpoint("G1:eth2") == ("G1", "eth2")
    here, peer = link_ends(TOPO_DATA, "L1", "eth1", "t.json")
    assert (peer.node, peer.interface, here.runs_agent) == ("G1", "eth1", True)


# --- on a leaf-spine plan's fabric ----------------------------------------------------------------------


def fake_io(calls: list) -> SimpleNamespace:
    return SimpleNamespace(
        load_fabric=shaping.load_fabric,
        write_fabric=shaping.write_fabric,
        node_netns=shaping.node_netns,
        apply_shapers=lambda ns, ends: calls.append(("shape", ns, [(e.name, e.rate_bps) for e in ends])),
        set_link_fault=lambda netns, iface, fault: calls.append(("fault", netns, iface, fault)),
    )


@pytest.fixture
def lab_dir(tmp_path: Path) -> Path:
    doc = leaf_spine_doc(1, 1, 1)
    topo = topo_of(doc)
    (tmp_path / "topology-data.json").write_text(json.dumps(topology_data(topo, {}, 24)))
    plan = plan_of(doc, {"time": {"scale": 1000}})
    shaping.write_fabric(tmp_path, fabric_from_plan(plan))
    return tmp_path


def test_bandwidth_changes_fare_view_and_both_shapers(lab_dir):
    runtime, calls = FakeRuntime(), []
    lines = link_set(runtime, lab_dir, "h1:eth1", "bandwidth", ["200G"], fabric_io=fake_io(calls))
    assert runtime.calls == [
        ("clab-x-h1", Op.BGP_LINK, "eth1", "200G"),
        ("clab-x-leaf1", Op.BGP_LINK, "eth2", "200G"),
    ]
    assert calls == [
        ("shape", "/run/netns/clab-x-h1", [("h1:eth1", 200_000_000)]),
        ("shape", "/run/netns/clab-x-leaf1", [("leaf1:eth2", 200_000_000)]),
    ]
    assert "h1:eth1 shaped to 200 Mbit/s (200G / time scale 1000)" in lines
    recorded = shaping.load_fabric(lab_dir)
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
    assert set(shaping.load_fabric(lab_dir).faults) == {"leaf1:eth1", "spine1:eth1"}
    calls.clear()
    link_set(FakeRuntime(), lab_dir, "spine1:eth1", "loss", ["0"], one_way=True, fabric_io=fake_io(calls))
    assert [(c[1], c[3]) for c in calls] == [("/run/netns/clab-x-spine1", LinkFault())]
    assert set(shaping.load_fabric(lab_dir).faults) == {"leaf1:eth1"}


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

    from orchestrator.cli.lab import add_link_parser

    parser = argparse.ArgumentParser()
    add_link_parser(parser.add_subparsers())
    args = parser.parse_args(["link", "set", "--one-way", "s5:eth1", "loss", "5%", "burst", "4"])
    got = (args.endpoint, args.action, args.value, args.one_way)
    assert got == ("s5:eth1", "loss", ["5%", "burst", "4"], True)


class FakeRelay:
    def __init__(self, fail: str | None = None) -> None:
        self.synced: list[dict[str, float]] = []
        self.fail = fail

    def sync(self, lab_dir, fabric):
        from orchestrator.lab.relay import RelayError

        if self.fail:
            raise RelayError(self.fail)
        self.synced.append({name: end.delay_s for name, end in fabric.delayed_ends().items()})
        return f"delay relay holds {len(self.synced[-1])} link end(s)"


def test_delay_is_recorded_for_both_ends_and_the_relay_follows(lab_dir):
    relay = FakeRelay()
    lines = link_set(FakeRuntime(), lab_dir, "leaf1:eth1", "delay", ["2ms", "jitter", "100us"],
                     fabric_io=fake_io([]), relay_io=relay)  # fmt: skip
    assert lines == [
        "leaf1:eth1 -> spine1:eth1: delay 2 ms ± 100 µs (never reordered)",
        "spine1:eth1 -> leaf1:eth1: delay 2 ms ± 100 µs (never reordered)",
        "delay relay holds 2 link end(s)",
    ]
    assert relay.synced == [{"leaf1:eth1": 0.002, "spine1:eth1": 0.002}]
    recorded = shaping.load_fabric(lab_dir)
    assert recorded.end("spine1:eth1").jitter_s == 0.0001
    assert recorded.conditions()["delay_s"] == {"leaf1:eth1": 0.002, "spine1:eth1": 0.002}
    link_set(FakeRuntime(), lab_dir, "spine1:eth1", "delay", ["0"], one_way=True, fabric_io=fake_io([]),
             relay_io=relay)  # fmt: skip
    assert relay.synced[-1] == {"leaf1:eth1": 0.002}


@pytest.mark.parametrize(
    ("words", "match"),
    [([], "want delay D"), (["2"], "give a unit"), (["1us", "jitter", "2us"], "above the delay")],
)
def test_bad_delays_are_refused_before_anything_changes(lab_dir, words, match):
    before = (lab_dir / "fabric.json").read_text()
    relay = FakeRelay()
    with pytest.raises(LinkSetError, match=match):
        link_set(FakeRuntime(), lab_dir, "h1:eth1", "delay", words, fabric_io=fake_io([]), relay_io=relay)
    assert relay.synced == [] and (lab_dir / "fabric.json").read_text() == before


def test_a_relay_that_cannot_follow_is_an_error_naming_the_link(lab_dir):
    needle = r"h1:eth1: fabric\.json has the delay, the relay did not follow: no tun"
    with pytest.raises(LinkSetError, match=needle):
        link_set(FakeRuntime(), lab_dir, "h1:eth1", "delay", ["1us"], fabric_io=fake_io([]),
                 relay_io=FakeRelay("no tun"))  # fmt: skip
