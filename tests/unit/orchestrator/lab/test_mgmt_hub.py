"""The address plan of a lab's own management hub (orchestrator.lab.mgmtbridge), without any device."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.lab.mgmtbridge import (
    MgmtBridge,
    MgmtError,
    bridge_name,
    gateway,
    gateway_name,
    plan_addresses,
)
from orchestrator.lab.topology import MAX_IFNAME, mgmt_prefix_for, parse_topology

NODE = {"kind": "linux", "image": "aidclab/bfr:latest"}


def lab(nodes: int, name: str = "hub", pinned: dict[str, str] | None = None, mgmt: dict | None = None):
    raw = {f"n{i}": dict(NODE) for i in range(nodes)}
    for node, addr in (pinned or {}).items():
        raw[node]["mgmt-ipv4"] = addr
    doc = {"name": name, "topology": {"nodes": raw}}
    if mgmt is not None:
        doc["mgmt"] = mgmt
    return parse_topology(doc, f"{name}.clab.yml")


def test_nodes_take_the_addresses_after_the_gateway_in_file_order():
    subnet = ipaddress.ip_network("172.16.0.0/29")
    addresses = plan_addresses(lab(5), subnet)
    assert gateway(subnet) == ipaddress.ip_address("172.16.0.1")
    assert [str(a) for a in addresses.values()] == [f"172.16.0.{i}" for i in range(2, 7)]
    assert list(addresses) == [f"n{i}" for i in range(5)]


def test_a_pinned_address_is_kept_and_skipped_by_the_others():
    topo = lab(3, pinned={"n1": "172.20.20.2"})
    addresses = plan_addresses(topo, ipaddress.ip_network("172.20.20.0/24"))
    got = {n: str(a) for n, a in addresses.items()}
    assert got == {"n0": "172.20.20.3", "n1": "172.20.20.2", "n2": "172.20.20.4"}


# An address outside the subnet altogether is refused by parse_topology already.
@pytest.mark.parametrize("addr", ["172.20.20.1", "172.20.20.255"])
def test_a_pinned_address_outside_the_nodes_range_names_the_node_and_field(addr):
    topo = lab(2, pinned={"n1": addr})
    with pytest.raises(MgmtError) as info:
        plan_addresses(topo, ipaddress.ip_network("172.20.20.0/24"))
    assert "hub.clab.yml: topology/nodes/n1/mgmt-ipv4" in str(info.value) and addr in str(info.value)


def test_a_lab_larger_than_its_subnet_says_what_to_set():
    with pytest.raises(MgmtError) as info:
        plan_addresses(lab(6), ipaddress.ip_network("172.16.0.0/29"))
    msg = str(info.value)
    assert "6 nodes do not fit management subnet 172.16.0.0/29 (5 nodes)" in msg
    assert f"/{mgmt_prefix_for(6)} or wider" in msg


@given(
    st.integers(min_value=1, max_value=300),
    st.integers(min_value=0, max_value=40).map(lambda k: ipaddress.ip_network(f"172.{16 + k % 16}.0.0/16")),
)
def test_planned_addresses_are_unique_node_addresses_of_a_sized_subnet(nodes, pool):
    subnet = next(pool.subnets(new_prefix=mgmt_prefix_for(nodes)))
    addresses = plan_addresses(lab(nodes), subnet)
    values = list(addresses.values())
    assert len(set(values)) == nodes
    reserved = {subnet.network_address, subnet.broadcast_address, gateway(subnet)}
    assert all(a in subnet and a not in reserved for a in values)


@given(st.from_regex(r"[a-z][a-z0-9-]{0,60}", fullmatch=True))
def test_device_names_fit_ifnamsiz_and_differ_per_lab(name):
    topo = lab(1, name=name)
    assert len(bridge_name(topo)) <= MAX_IFNAME and len(gateway_name(topo)) <= MAX_IFNAME
    assert bridge_name(topo) != gateway_name(topo)
    other = lab(1, name=name + "x")
    assert bridge_name(other) != bridge_name(topo)


def test_a_bridge_the_file_names_is_used():
    topo = lab(1, mgmt={"bridge": "labmgmt0"})
    assert (bridge_name(topo), gateway_name(topo)) == ("labmgmt0", "labmgmt0gw")


def test_the_hosts_file_names_localhost_and_every_node_at_its_address():
    topo = lab(3, pinned={"n1": "172.30.0.9"}, mgmt={"ipv4-subnet": "172.30.0.0/28"})
    subnet = ipaddress.IPv4Network("172.30.0.0/28")
    hub = MgmtBridge(topo.name, "amx", 1, subnet, plan_addresses(topo, subnet))
    text = hub.hosts_file({n: topo.container_name(n) for n in topo.nodes})
    entries = [line.split() for line in text.splitlines()]
    assert entries[0] == ["127.0.0.1", "localhost"]
    assert sorted(entries[-3:], key=lambda e: e[1]) == [
        ["172.30.0.2", "n0", "clab-hub-n0"],
        ["172.30.0.9", "n1", "clab-hub-n1"],
        ["172.30.0.3", "n2", "clab-hub-n2"],
    ]
