"""Parsing and validation of containerlab topology files: every bad input names what is wrong."""

from __future__ import annotations

import copy

import pytest
import yaml

from orchestrator.lab.graph import to_dot, to_mermaid
from orchestrator.lab.roles import role_of
from orchestrator.lab.topology import DEFAULT_MTU, TopologyError, load_topology, parse_topology
from orchestrator.paths import LABS as LABS_DIR

LABS = LABS_DIR

BASE = {
    "name": "t",
    "topology": {
        "defaults": {"kind": "linux", "env": {"A": "1"}},
        "kinds": {"linux": {"image": "aidclab/bfr:latest", "labels": {"k": "kind"}}},
        "groups": {"hosts": {"image": "aidclab/gpu-host:latest", "sysctls": {"net.x": "1"}}},
        "nodes": {
            "r1": {"env": {"B": "2"}},
            "h1": {"group": "hosts", "labels": {"n": "node"}},
        },
        "links": [
            {"endpoints": ["r1:eth1", "h1:eth1"]},
            {
                "type": "veth",
                "mtu": 1500,
                "endpoints": [{"node": "r1", "interface": "eth2"}, {"node": "h1", "interface": "eth2"}],
            },
        ],
    },
}


def doc(**changes):
    d = copy.deepcopy(BASE)
    for path, value in changes.items():
        cur = d
        keys = path.split("__")
        for k in keys[:-1]:
            cur = cur[k]
        cur[keys[-1]] = value
    return d


def problems_of(d) -> list[str]:
    with pytest.raises(TopologyError) as info:
        parse_topology(d, "lab.clab.yml")
    assert info.value.path == "lab.clab.yml"
    return info.value.problems


def test_inheritance_defaults_kinds_groups_node():
    topo = parse_topology(doc(), "lab.clab.yml")
    r1, h1 = topo.nodes["r1"], topo.nodes["h1"]
    assert r1.image == "aidclab/bfr:latest"
    assert h1.image == "aidclab/gpu-host:latest"  # group beats kind
    assert r1.env == {"A": "1", "B": "2"}  # maps merge
    assert h1.labels == {"k": "kind", "n": "node"}
    assert h1.sysctls == {"net.x": "1"}
    assert role_of(r1).name == "bfr" and role_of(h1).name == "gpu-host"


def test_both_link_forms_and_mtu():
    topo = parse_topology(doc(), "lab.clab.yml")
    assert [str(link) for link in topo.links] == ["r1:eth1 <-> h1:eth1", "r1:eth2 <-> h1:eth2"]
    assert topo.links[0].mtu == DEFAULT_MTU and topo.links[1].mtu == 1500
    assert [(ep.interface, peer.node) for _l, ep, peer in topo.links_of("h1")] == [
        ("eth1", "r1"),
        ("eth2", "r1"),
    ]


def test_container_names_follow_prefix_rules():
    assert parse_topology(doc(), "x").container_name("r1") == "clab-t-r1"
    assert parse_topology(doc(prefix=""), "x").container_name("r1") == "r1"
    assert parse_topology(doc(prefix="lab"), "x").container_name("r1") == "lab-t-r1"
    assert parse_topology(doc(prefix="__lab-name"), "x").container_name("r1") == "t-t-r1"


def test_unknown_node_in_link_is_named():
    d = doc()
    d["topology"]["links"].append({"endpoints": ["r1:eth3", "ghost:eth1"]})
    (p,) = problems_of(d)
    assert "topology/links/2" in p and "unknown node 'ghost'" in p


def test_interface_used_twice_names_both_links():
    d = doc()
    d["topology"]["links"].append({"endpoints": ["r1:eth1", "h1:eth3"]})
    (p,) = problems_of(d)
    assert "r1:eth1 is already used by topology/links/0" in p and "topology/links/2" in p


def test_missing_image_names_node():
    d = doc()
    del d["topology"]["kinds"]
    (p,) = problems_of(d)
    assert p.startswith("topology/nodes/r1/image: missing")


def test_duplicate_mgmt_address_names_both_nodes():
    d = doc()
    d["topology"]["nodes"]["r1"]["mgmt-ipv4"] = "172.20.20.5"
    d["topology"]["nodes"]["h1"]["mgmt-ipv4"] = "172.20.20.5"
    (p,) = problems_of(d)
    assert "topology/nodes/h1/mgmt-ipv4" in p and "'r1'" in p


def test_mgmt_address_outside_subnet():
    d = doc()
    d["topology"]["nodes"]["r1"]["mgmt-ipv4"] = "10.0.0.5"
    (p,) = problems_of(d)
    assert "outside the management subnet 172.20.20.0/24" in p


def test_schema_violation_is_reported_with_path():
    d = doc()
    d["topology"]["nodes"]["r1"]["bogus-key"] = 1
    ps = problems_of(d)
    assert any("containerlab schema" in p and "topology/nodes/r1" in p for p in ps)


def test_bad_lab_name_fails_schema():
    ps = problems_of(doc(name="-bad"))
    assert any(p.startswith("name:") for p in ps)


def test_unsupported_kind_and_link_type():
    d = doc()
    d["topology"]["nodes"]["r1"]["kind"] = "nokia_srlinux"
    d["topology"]["links"].append(
        {"type": "host", "endpoint": {"node": "h1", "interface": "eth9"}, "host-interface": "x"}
    )
    ps = problems_of(d)
    assert any("topology/nodes/r1/kind: 'nokia_srlinux' is not deployable" in p for p in ps)
    assert any("topology/links/2: link type 'host' is not supported" in p for p in ps)


def test_reserved_and_long_interface_names():
    d = doc()
    d["topology"]["links"] = [{"endpoints": ["r1:eth0", "h1:averyveryverylongname"]}]
    ps = problems_of(d)
    assert any("'eth0' on r1 is reserved" in p for p in ps)
    assert any("longer than 15" in p for p in ps)


def test_undefined_group():
    d = doc()
    d["topology"]["nodes"]["r1"]["group"] = "nope"
    assert any("group 'nope' is not defined" in p for p in problems_of(d))


def test_invalid_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.clab.yml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(TopologyError, match="not valid YAML"):
        load_topology(bad)
    with pytest.raises(TopologyError, match="file not found"):
        load_topology(tmp_path / "none.clab.yml")


@pytest.mark.parametrize(
    ("lab", "nodes", "links"), [("leaf-spine", 14, 16), ("ina-fig1", 15, 14), ("superpod", 68, 256)]
)
def test_shipped_labs_validate(lab, nodes, links):
    topo = load_topology(LABS / f"{lab}.clab.yml")
    assert (len(topo.nodes), len(topo.links)) == (nodes, links)
    assert to_mermaid(topo).count(" ---|") == links
    assert to_dot(topo).count(" -- ") == links


def test_superpod_every_gpu_on_every_plane():
    topo = load_topology(LABS / "superpod.clab.yml")
    for g in range(1, 65):
        peers = sorted(peer.node for _l, _ep, peer in topo.links_of(f"G{g}"))
        assert peers == ["L1", "L2", "L3", "L4"]


def test_ina_fig1_wired_as_drawn():
    topo = load_topology(LABS / "ina-fig1.clab.yml")
    pairs = {frozenset((link.a.node, link.b.node)) for link in topo.links}
    expected = {("s7", "s5"), ("s7", "s6"), ("s5", "s1"), ("s5", "s2"), ("s6", "s3"), ("s6", "s4")}
    expected |= {(f"s{(w - 1) // 2 + 1}", f"w{w}") for w in range(1, 9)}
    assert pairs == {frozenset(p) for p in expected}


def test_lab_files_are_yaml_containerlab_can_read():
    for path in LABS.glob("*.clab.yml"):
        d = yaml.safe_load(path.read_text())
        assert d["name"] == path.name.removesuffix(".clab.yml")
