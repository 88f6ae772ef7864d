"""containerlab VXLAN links in topology files: parsed, validated with errors naming the link, drawn."""

from __future__ import annotations

import copy

import pytest

from orchestrator.lab.graph import to_dot, to_mermaid
from orchestrator.lab.topology import TopologyError, VxlanLink, parse_topology

BASE = {
    "name": "part",
    "topology": {
        "defaults": {"kind": "linux", "image": "aidclab/bfr:latest"},
        "nodes": {"leaf1": {}, "h1": {}},
        "links": [
            {"endpoints": ["h1:eth1", "leaf1:eth3"]},
            {
                "type": "vxlan",
                "endpoint": {"node": "leaf1", "interface": "eth1"},
                "remote": "198.18.0.2",
                "vni": 100,
                "dst-port": 14789,
                "mtu": 9450,
            },
            {
                "type": "vxlan-stitch",
                "endpoint": {"node": "leaf1", "interface": "eth2"},
                "remote": "198.18.0.2",
                "vni": 101,
                "dst-port": 14789,
            },
        ],
    },
}


def with_link(i: int, **fields) -> dict:
    d = copy.deepcopy(BASE)
    link = d["topology"]["links"][i]
    for k, v in fields.items():
        if v is None:
            link.pop(k, None)
        else:
            link[k] = v
    return d


def problems_of(d) -> list[str]:
    with pytest.raises(TopologyError) as info:
        parse_topology(d, "part.clab.yml")
    return info.value.problems


def test_vxlan_and_stitched_links_parse_beside_veth():
    topo = parse_topology(copy.deepcopy(BASE), "part.clab.yml")
    assert [str(link) for link in topo.links] == ["h1:eth1 <-> leaf1:eth3"]
    vx, st = topo.vxlan_links
    assert vx == VxlanLink(
        endpoint=vx.endpoint, remote="198.18.0.2", vni=100, dst_port=14789, mtu=9450, stitched=False, index=1
    )
    assert str(vx.endpoint) == "leaf1:eth1"
    assert st.stitched and st.type == "vxlan-stitch" and st.vni == 101 and st.index == 2
    assert vx.overhead == 50


@pytest.mark.parametrize("vni", [0, 16777216, -1])
def test_bad_vni_names_the_link_and_field(vni):
    (problem,) = problems_of(with_link(1, vni=vni))
    assert problem.startswith("topology/links/1/vni (vxlan leaf1:eth1)")
    assert "type vxlan" in problem


def test_missing_remote_names_the_link():
    (problem,) = problems_of(with_link(2, remote=None))
    assert "topology/links/2 (vxlan-stitch leaf1:eth2)" in problem
    assert "'remote' is a required property" in problem


def test_remote_must_be_unicast():
    (problem,) = problems_of(with_link(1, remote="239.1.1.1"))
    assert problem.startswith("topology/links/1 (leaf1:eth1 -> vxlan 239.1.1.1 vni 100 port 14789)")
    assert "unicast" in problem


def test_vni_and_port_clash_names_both_links():
    (problem,) = problems_of(with_link(2, vni=100))
    assert problem.startswith("topology/links/2 (leaf1:eth2 -> vxlan-stitch")
    assert "VNI 100 on UDP port 14789 is already used by topology/links/1 (leaf1:eth1)" in problem


def test_same_vni_on_another_port_is_fine():
    topo = parse_topology(with_link(2, vni=100, **{"dst-port": 14790}), "part.clab.yml")
    assert {(v.vni, v.dst_port) for v in topo.vxlan_links} == {(100, 14789), (100, 14790)}


def test_endpoint_on_unknown_node():
    (problem,) = problems_of(with_link(1, endpoint={"node": "spine9", "interface": "eth1"}))
    assert problem.startswith("topology/links/1 (spine9:eth1 -> vxlan") and "unknown node 'spine9'" in problem


def test_interface_shared_with_a_veth_link():
    (problem,) = problems_of(with_link(1, endpoint={"node": "leaf1", "interface": "eth3"}))
    assert "interface leaf1:eth3 is already used by topology/links/0" in problem


def test_mtu_leaves_room_for_the_outer_headers():
    (problem,) = problems_of(with_link(1, mtu=65535))
    assert "topology/links/1" in problem and "mtu 65535 must be from 68 to 65485" in problem


def test_graph_shows_vxlan_ends():
    topo = parse_topology(copy.deepcopy(BASE), "part.clab.yml")
    mermaid = to_mermaid(topo)
    assert "vx_1_remote" in mermaid and "vxlan vni 100" in mermaid and "198.18.0.2" in mermaid
    dot = to_dot(topo)
    assert '"leaf1" -- "vxlan:198.18.0.2:14789"' in dot and "vni 101" in dot
