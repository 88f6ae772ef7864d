"""Plan feature bgp: sessions per link on the plan's ASNs, FARE settings, and what the node files carry."""

from __future__ import annotations

import json

import pytest

from aidcnet.config import parse_config
from orchestrator.linkset import LinkSetError, link_ends, link_set, parse_endpoint
from orchestrator.plan import PlanError, build_plan, node_config
from orchestrator.topology import load_topology
from tests.unit.test_plan import LABS, lab_vars, leaf_spine_doc, plan_of

SUPERPOD_BGP = {"bandwidth": {"host": "800G", "host_sublinks": 2}, "planes": 4, "bgp": {"enabled": True}}


@pytest.fixture(scope="module")
def superpod():
    return build_plan(load_topology(LABS / "superpod.clab.yml"), lab_vars(SUPERPOD_BGP))


def test_gpu_host_has_one_session_per_plane_and_no_static_routes(superpod) -> None:
    g1 = node_config(superpod, "G1")
    assert g1.routes == []
    assert g1.bgp.transit is False and g1.bgp.mode == "per-flow" and g1.bgp.link_bandwidth == "transitive"
    assert [(n.name, n.interface) for n in g1.bgp.neighbors] == [(f"L{p}", f"eth{p}") for p in range(1, 5)]
    assert [n.asn for n in g1.bgp.neighbors] == [superpod.nodes[f"L{p}"].asn for p in range(1, 5)]
    eth1 = next(i for i in g1.interfaces if i.name == "eth1")
    # Sessions on the link addresses, both ends agreeing.
    assert g1.bgp.neighbors[0].local_address == eth1.ipv4.ip
    assert eth1.bandwidth_bps == 800e9
    l1 = node_config(superpod, "L1")
    assert len(l1.bgp.neighbors) == 64 and l1.bgp.transit is True
    back = next(n for n in l1.bgp.neighbors if n.name == "G1")
    assert back.address == eth1.ipv4.ip and back.asn == superpod.nodes["G1"].asn
    # The node file round-trips through the agent's own parser.
    assert parse_config(g1.model_dump(mode="json")) == g1


def test_disabled_by_default_keeps_static_routes_and_only_the_asn() -> None:
    plan = build_plan(load_topology(LABS / "superpod.clab.yml"), lab_vars({"planes": 4}))
    g1 = node_config(plan, "G1")
    assert g1.routes and g1.bgp.neighbors == [] and g1.bgp.asn == plan.nodes["G1"].asn


def test_settings_from_vars() -> None:
    plan = plan_of(
        leaf_spine_doc(2, 2, 1),
        {"bgp": {"enabled": True, "mode": "per-packet", "link_bandwidth": "non-transitive", "hold_time": 30}},
    )
    cfg = node_config(plan, "h1")
    assert (cfg.bgp.mode, cfg.bgp.link_bandwidth, cfg.bgp.hold_time) == ("per-packet", "non-transitive", 30)
    # Leaf-spine: spines share one ASN (RFC 7938), a leaf peers with each spine.
    spines = [n for n in node_config(plan, "leaf1").bgp.neighbors if n.name.startswith("spine")]
    assert len(spines) == 2 and len({n.asn for n in spines}) == 1


def test_bier_over_bgp_turns_bgp_on_and_refuses_a_contradiction() -> None:
    plan = plan_of(leaf_spine_doc(1, 2, 1), {"bier": {"bift": "bgp"}})
    assert plan.bgp.enabled and node_config(plan, "leaf1").bgp.neighbors
    with pytest.raises(PlanError, match=r"bgp.enabled = False contradicts .*bier.bift = bgp"):
        plan_of(leaf_spine_doc(1, 2, 1), {"bier": {"bift": "bgp"}, "bgp": {"enabled": False}})


def test_bad_mode_names_the_key() -> None:
    with pytest.raises(Exception, match="mode"):
        lab_vars({"bgp": {"mode": "per-byte"}})


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


class FakeRuntime:
    def __init__(self, code: int = 0) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.code = code

    def exec(self, container, cmd, timeout=None):
        self.calls.append((container, cmd))
        return self.code, "boom" if self.code else "{}"


def test_link_set_down_acts_at_the_named_end_only(tmp_path) -> None:
    (tmp_path / "topology-data.json").write_text(json.dumps(TOPO_DATA))
    rt = FakeRuntime()
    lines = link_set(rt, tmp_path, "L1:eth1", "down")
    assert rt.calls == [("clab-x-L1", ["ip", "link", "set", "dev", "eth1", "down"])]
    assert "peer G1:eth1" in lines[0]


def lab_dir_with_fabric(tmp_path):
    from orchestrator.fabric import EndShaper, Fabric
    from orchestrator.fabric_tc import write_fabric

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
        from orchestrator import fabric_tc

        self.load_fabric, self.write_fabric, self.node_netns = (
            fabric_tc.load_fabric,
            fabric_tc.write_fabric,
            fabric_tc.node_netns,
        )
        self.calls: list[tuple] = []

    def apply_shapers(self, netns, ends):
        self.calls.append(("shape", netns, [(e.name, e.rate_bps) for e in ends]))
        return len(ends)

    def set_link_fault(self, netns, interface, fault):
        self.calls.append(("fault", netns, interface, fault.describe()))


def test_link_set_bandwidth_tells_both_agents_and_skips_frr(tmp_path) -> None:
    lab_dir = lab_dir_with_fabric(tmp_path)
    rt, io = FakeRuntime(), FakeFabricIO()
    link_set(rt, lab_dir, "G1:eth1", "bandwidth", "400G", fabric_io=io)
    assert rt.calls == [
        ("clab-x-G1", ["aidcnet", "ctl", "link-bandwidth", "eth1", "400G"]),
        ("clab-x-L1", ["aidcnet", "ctl", "link-bandwidth", "eth1", "400G"]),
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
    with pytest.raises(LinkSetError, match="G1: ip link set eth1 down failed: boom"):
        link_set(FakeRuntime(code=1), tmp_path, "G1:eth1", "down")
    with pytest.raises(LinkSetError, match="is the lab deployed"):
        link_set(FakeRuntime(), tmp_path / "nope", "G1:eth1", "down")


def test_parse_endpoint_and_ends() -> None:
    assert parse_endpoint("G1:eth2") == ("G1", "eth2")
    here, peer = link_ends(TOPO_DATA, "L1", "eth1", "t.json")
    assert (peer.node, peer.interface, here.runs_agent) == ("G1", "eth1", True)
