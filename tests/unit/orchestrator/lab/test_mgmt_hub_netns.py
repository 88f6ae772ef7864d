"""A lab's own management hub (orchestrator.lab.mgmtbridge) built in namespaces made here (``hub-<pid>-*``),
each held by a process as a container holds its own. Needs root and iproute2, like
tests/unit/fabric_netns.py. Every device is removed after."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from orchestrator.lab.mgmtbridge import (
    MgmtBridge,
    MgmtError,
    attach_node,
    bridge_name,
    configure_eth0,
    ensure_bridge,
    gateway_name,
    remove_bridges,
    subnet_lock,
)
from orchestrator.lab.netns import netlink
from orchestrator.lab.topology import Topology, parse_topology
from tests.unit.fabric_netns import held_namespaces, require_root, require_tool, sh

PREFIX = f"hub-{os.getpid()}"
NODES = ("n1", "n2", "n3")
PORT = 7777
SERVE = (
    "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
    f"s.bind(('0.0.0.0', {PORT})); s.listen(); c, a = s.accept(); c.sendall(a[0].encode()); c.close()"
)
ASK = (
    "import socket, sys; "
    f"print(socket.create_connection((sys.argv[1], {PORT}), timeout=3).recv(64).decode())"
)


def topology(name: str, nodes: tuple[str, ...] = NODES) -> Topology:
    defaults = {"kind": "linux", "image": "x"}
    doc = {"name": name, "topology": {"defaults": defaults, "nodes": {n: {} for n in nodes}}}
    return parse_topology(doc, f"{name}.clab.yml")


def host_devices(lab: str) -> list[str]:
    out = sh("ip", "-d", "-j", "link", "show").stdout
    return sorted(d["ifname"] for d in json.loads(out) if d.get("ifalias") == f"aidclab-mgmt:{lab}")


@pytest.fixture
def nodes() -> Iterator[dict[str, tuple[str, int]]]:
    require_root()
    require_tool("ip", "iproute2")
    labs = [f"{PREFIX}-a", f"{PREFIX}-b"]
    try:
        with held_namespaces(PREFIX, NODES) as made:
            yield made
    finally:
        for lab in labs:
            remove_bridges(lab)


def wire(topo: Topology, nodes: dict[str, tuple[str, int]]) -> MgmtBridge:
    hub = ensure_bridge(topo, [])
    with IPRoute() as ipr:
        for node in topo.nodes:
            attach_node(ipr, hub, node, nodes[node][1])
    for node in topo.nodes:
        with netlink(f"/proc/{nodes[node][1]}/ns/net") as ns:
            configure_eth0(ns, ns.link_lookup(ifname="eth0")[0], hub.interface(node))
    return hub


def ask(address: str, server_ns: str, client_ns: str | None) -> str:
    server = subprocess.Popen(["ip", "netns", "exec", server_ns, "python3", "-c", SERVE])
    try:
        time.sleep(0.3)
        prefix = ["ip", "netns", "exec", client_ns] if client_ns else []
        return sh(*prefix, "python3", "-c", ASK, address).stdout.strip()
    finally:
        server.kill()
        server.wait()


def test_nodes_reach_each_other_and_the_host_reaches_them_with_no_way_out(nodes):
    topo = topology(f"{PREFIX}-a")
    hub = wire(topo, nodes)
    assert topo.mgmt.ipv4_subnet == str(hub.subnet)
    gw = str(hub.subnet.network_address + 1)
    for node in NODES:
        ns = nodes[node][0]
        addrs = sh("ip", "-n", ns, "-4", "-br", "addr", "show", "eth0").stdout.split()
        assert addrs[1] == "UP" and addrs[2] == hub.interface(node), addrs
        # No default route: a lab packet to anywhere else has nowhere to go.
        assert sh("ip", "-n", ns, "route", "show", "default").stdout.strip() == ""
    # Node to node: macvlan switches it itself, past the host's iptables (FORWARD DROP under Docker).
    assert ask(str(hub.addresses["n2"]), nodes["n2"][0], nodes["n1"][0]) == str(hub.addresses["n1"])
    # Host to node, from the gateway address, as Docker's bridge gateway does.
    assert ask(str(hub.addresses["n3"]), nodes["n3"][0], None) == gw
    gw_dev = gateway_name(topo)
    assert Path(f"/proc/sys/net/ipv4/conf/{gw_dev}/forwarding").read_text().strip() == "0"
    assert Path(f"/proc/sys/net/ipv6/conf/{gw_dev}/disable_ipv6").read_text().strip() == "1"


def test_a_second_lab_takes_another_subnet_and_destroy_leaves_nothing(nodes):
    first, second = topology(f"{PREFIX}-a", NODES[:1]), topology(f"{PREFIX}-b", NODES[1:])
    hub_a, hub_b = wire(first, nodes), wire(second, nodes)
    assert not hub_a.subnet.overlaps(hub_b.subnet)
    # Deploying again finds the lab's own hub and keeps its subnet.
    again = ensure_bridge(topology(f"{PREFIX}-a", NODES[:1]), [])
    assert (again.index, again.subnet) == (hub_a.index, hub_a.subnet)
    assert host_devices(first.name) == sorted([bridge_name(first), gateway_name(first)])
    assert remove_bridges(first.name) == [bridge_name(first)]
    assert host_devices(first.name) == []
    # The node's eth0 went with the hub; the other lab's is untouched.
    assert sh("ip", "-n", nodes["n1"][0], "link", "show", "eth0", check=False).returncode != 0
    assert sh("ip", "-n", nodes["n2"][0], "link", "show", "eth0").returncode == 0


def test_a_subnet_in_use_on_the_host_is_refused_naming_what_to_set(nodes):
    first = topology(f"{PREFIX}-a", NODES[:1])
    hub = wire(first, nodes)
    doc = {
        "name": f"{PREFIX}-b",
        "mgmt": {"ipv4-subnet": str(hub.subnet)},
        "topology": {"nodes": {"n2": {"kind": "linux", "image": "x"}}},
    }
    clash = parse_topology(doc, "clash.clab.yml")
    with pytest.raises(MgmtError) as info:
        ensure_bridge(clash, [])
    assert f"clash.clab.yml: mgmt.ipv4-subnet {hub.subnet} overlaps" in str(info.value)
    assert host_devices(clash.name) == []


def test_an_interface_of_another_owner_with_the_bridge_name_is_not_taken(nodes):
    topo = topology(f"{PREFIX}-a")
    name = bridge_name(topo)
    sh("ip", "link", "add", name, "type", "bridge")
    try:
        with pytest.raises(MgmtError) as info:
            ensure_bridge(topo, [ipaddress.ip_network("172.16.0.0/12")])
        assert f"interface {name} exists on the host and is not lab" in str(info.value)
    finally:
        sh("ip", "link", "del", name)


def test_deploys_take_turns_choosing_a_subnet_and_leave_no_lock_file():
    """A second deploy waits while one holds the lock (a process of its own here), and nothing is created
    for it."""
    require_root()
    before = set(os.listdir("/run"))
    holder = subprocess.Popen(
        ["python3", "-c", "import fcntl, os, time; fd = os.open('/run', os.O_RDONLY | os.O_DIRECTORY); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(0.6)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with subnet_lock():
            waited = time.monotonic() - t0
        assert waited > 0.3, waited
    finally:
        holder.kill()
        holder.wait()
    assert set(os.listdir("/run")) - before == set()
