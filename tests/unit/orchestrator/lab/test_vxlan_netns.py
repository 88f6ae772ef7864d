"""VXLAN link ends built by netlink, in namespaces made here (``vxA-<pid>-*``) and removed after.

Two "nodes" (a namespace each, held by a sleeping process the way a container holds its own) and two
underlay "hosts" (orchestrator.lab.vxlan.local_underlay): both ends of a cut link have the same VNI and
port, which one namespace could not hold. Needs root and iproute2, like tests/unit/fabric_netns.py.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from orchestrator.lab.topology import Endpoint, VxlanLink
from orchestrator.lab.vxlan import (
    VxlanError,
    create_end,
    local_underlay,
    remove_lab_devices,
    remove_local_underlay,
)
from tests.unit.fabric_netns import held_namespaces, require_root, require_tool, sh

PREFIX = f"vxA-{os.getpid()}"


@pytest.fixture
def world() -> Iterator[dict]:
    require_root()
    require_tool("ip", "iproute2")
    underlay = local_underlay({"a": "198.18.0.1", "b": "198.18.0.2"}, PREFIX)
    try:
        with held_namespaces(PREFIX, ("n1", "n2", "n3")) as nodes:
            yield {"underlay": underlay, "nodes": nodes}
    finally:
        remove_local_underlay(PREFIX, ["a", "b"])


def rx_packets(ns: str, ifname: str) -> int:
    out = json.loads(sh("ip", "-j", "-s", "-n", ns, "link", "show", ifname).stdout)[0]
    return out["stats64"]["rx"]["packets"]


def wire(world: dict, interface: str, vni: int, stitched: bool) -> None:
    (n1, pid1), (n2, pid2) = world["nodes"]["n1"], world["nodes"]["n2"]
    ends = [
        (
            "lab-a",
            VxlanLink(Endpoint("n1", interface), "198.18.0.2", vni, 14789, mtu=9450, stitched=stitched),
            pid1,
            "a",
        ),
        (
            "lab-b",
            VxlanLink(Endpoint("n2", interface), "198.18.0.1", vni, 14789, mtu=9450, stitched=stitched),
            pid2,
            "b",
        ),
    ]
    for lab, vx, pid, host in ends:
        create_end(lab, vx, pid, world["underlay"][host])
    for ns, addr in ((n1, "10.99.0.1/24"), (n2, "10.99.0.2/24")):
        sh("ip", "-n", ns, "addr", "add", addr, "dev", interface)
        sh("ip", "-n", ns, "link", "set", interface, "up")


def send(ns: str, n: int) -> None:
    code = (
        "import socket; s = socket.socket(2, 2); "
        + f"[s.sendto(b'x' * 999, ('10.99.0.2', 9)) for _ in range({n})]"
    )
    sh("ip", "netns", "exec", ns, "python3", "-c", code)


@pytest.mark.parametrize("stitched", [False, True], ids=["vxlan", "vxlan-stitch"])
def test_frames_cross_between_two_underlay_hosts_and_destroy_removes_every_device(world, stitched):
    wire(world, "eth1", 1004, stitched)
    n1, n2 = world["nodes"]["n1"][0], world["nodes"]["n2"][0]
    link = json.loads(sh("ip", "-j", "-d", "-n", n1, "link", "show", "eth1").stdout)[0]
    assert link["mtu"] == 9450
    if not stitched:
        info = link["linkinfo"]["info_data"]
        assert (info["id"], info["remote"], info["port"]) == (1004, "198.18.0.2", 14789)
    before = rx_packets(n2, "eth1")
    send(n1, 5)
    deadline = time.monotonic() + 3
    while rx_packets(n2, "eth1") < before + 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    # 5 datagrams, plus the ARP exchange that had to cross first.
    assert rx_packets(n2, "eth1") >= before + 5
    ua = world["underlay"]["a"]
    left = sh("ip", "-br", "-n", ua, "link").stdout
    assert ("vxt3ec" in left) == stitched and ("vxh3ec" in left) == stitched
    assert remove_lab_devices("lab-a", ua) == (2 if stitched else 0)
    assert remove_lab_devices("lab-a", ua) == 0  # idempotent
    assert "vxt" not in sh("ip", "-br", "-n", ua, "link").stdout


def test_same_vni_twice_in_one_underlay_is_refused_naming_the_link(world):
    wire(world, "eth1", 1004, False)
    _n1, pid1 = world["nodes"]["n1"]
    again = VxlanLink(Endpoint("n1", "eth2"), "198.18.0.2", 1004, 14789, index=7)
    with pytest.raises(VxlanError, match=r"n1:eth2 -> vxlan .*topology/links/7.*VNI 1004 on UDP 14789"):
        create_end("lab-a", again, pid1, world["underlay"]["a"])


def test_deploy_wiring_builds_veth_and_vxlan_ends_of_two_parts(world):
    """The deploy's own wiring (orchestrator.lab.wiring) on two parts of one split lab."""
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator.lab.topology import parse_topology
    from orchestrator.lab.wiring import IncrementalWiring

    def part(name, nodes, links):
        doc = {"name": name, "topology": {"defaults": {"kind": "linux", "image": "x"}, "nodes": nodes}}
        doc["topology"]["links"] = links
        return parse_topology(doc, f"{name}.clab.yml")

    def vxlan(node, remote):
        end = {"node": node, "interface": "eth2" if node == "n2" else "eth1"}
        return {
            "type": "vxlan",
            "endpoint": end,
            "remote": remote,
            "vni": 1001,
            "dst-port": 14789,
            "mtu": 9450,
        }

    a = part(
        "lab-a", {"n1": {}, "n2": {}}, [{"endpoints": ["n1:eth1", "n2:eth1"]}, vxlan("n2", "198.18.0.2")]
    )
    b = part("lab-b", {"n3": {}}, [vxlan("n3", "198.18.0.1")])
    pids = {n: pid for n, (_ns, pid) in world["nodes"].items()}
    with ThreadPoolExecutor(2) as pool:
        for topo, host in ((a, "a"), (b, "b")):
            wiring = IncrementalWiring(topo, pool, world["underlay"][host])
            for node in topo.nodes:
                wiring.node_started(node, pids[node])
            assert wiring.finish() == len(topo.links) + len(topo.vxlan_links)
    up = {
        (n, i["ifname"]): i["operstate"]
        for n, (ns, _pid) in world["nodes"].items()
        for i in json.loads(sh("ip", "-j", "-n", ns, "link").stdout)
        if i["ifname"].startswith("eth")
    }
    assert set(up) == {("n1", "eth1"), ("n2", "eth1"), ("n2", "eth2"), ("n3", "eth1")}
    n2, n3 = world["nodes"]["n2"][0], world["nodes"]["n3"][0]
    sh("ip", "-n", n2, "addr", "add", "10.99.0.1/24", "dev", "eth2")
    sh("ip", "-n", n3, "addr", "add", "10.99.0.2/24", "dev", "eth1")
    before = rx_packets(n3, "eth1")
    send(n2, 3)
    time.sleep(0.5)
    assert rx_packets(n3, "eth1") >= before + 3
