"""The deploy's veth wiring (orchestrator.lab.wiring) in namespaces made here (``wiA-<pid>-*``), gone after.

The two ends of every link must have different ifindexes: the kernel delays a carrier change on a device
whose ifindex equals its peer's by up to a second, so a failed link's far end would learn of it late, by
chance. Needs root and iproute2, like tests/unit/fabric_netns.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from orchestrator.lab.topology import Topology, parse_topology
from orchestrator.lab.wiring import A_END_IFINDEX_BASE, IncrementalWiring, a_end_ifindexes
from tests.unit.fabric_netns import held_namespaces, require_root, require_tool, sh

PREFIX = f"wiA-{os.getpid()}"
NODES = ("n1", "n2", "n3")


def triangle() -> Topology:
    doc = {
        "name": "wiring",
        "topology": {
            "defaults": {"kind": "linux", "image": "x"},
            "nodes": {node: {} for node in NODES},
            "links": [
                {"endpoints": ["n1:eth1", "n2:eth1"]},
                {"endpoints": ["n2:eth2", "n3:eth1"]},
                {"endpoints": ["n3:eth2", "n1:eth2"]},
                {"endpoints": ["n1:eth3", "n2:eth3"]},
            ],
        },
    }
    return parse_topology(doc, "wiring.clab.yml")


@pytest.fixture
def nodes() -> Iterator[dict[str, tuple[str, int]]]:
    require_root()
    require_tool("ip", "iproute2")
    with held_namespaces(PREFIX, NODES) as made:
        yield made


def wire(topo: Topology, nodes: dict[str, tuple[str, int]]) -> None:
    with ThreadPoolExecutor(2) as pool:
        wiring = IncrementalWiring(topo, pool)
        for node in topo.nodes:
            wiring.node_started(node, nodes[node][1])
        assert wiring.finish() == len(topo.links)


def ifindexes(nodes: dict[str, tuple[str, int]]) -> dict[tuple[str, str], int]:
    return {
        (n, i["ifname"]): i["ifindex"]
        for n, (ns, _pid) in nodes.items()
        for i in json.loads(sh("ip", "-j", "-n", ns, "link").stdout)
        if i["ifname"].startswith("eth")
    }


def test_a_end_numbers_are_unique_per_node_and_above_the_kernels_count():
    topo = triangle()
    numbers = a_end_ifindexes(topo)
    assert set(numbers) == {link.index for link in topo.links}
    for node in NODES:
        mine = [numbers[link.index] for link in topo.links if link.a.node == node]
        assert len(mine) == len(set(mine))
    assert all(n >= A_END_IFINDEX_BASE and n & 0xFF >= 128 for n in numbers.values())


def test_the_two_ends_of_every_link_get_different_ifindexes(nodes):
    topo = triangle()
    wire(topo, nodes)
    index = ifindexes(nodes)
    assert len(index) == 2 * len(topo.links)
    for link in topo.links:
        a, b = index[(link.a.node, link.a.interface)], index[(link.b.node, link.b.interface)]
        assert a == a_end_ifindexes(topo)[link.index]
        assert a != b, f"{link}: both ends are ifindex {a}"


def test_a_taken_number_falls_back_to_the_kernels_choice(nodes):
    """A device holding the a end's number (as Docker's eth0 keeps the host's) does not fail a deploy."""
    topo = triangle()
    first = topo.links[0]
    ns = nodes[first.a.node][0]
    sh(
        "ip",
        "-n",
        ns,
        "link",
        "add",
        "squat",
        "index",
        str(a_end_ifindexes(topo)[first.index]),
        "type",
        "veth",
        "peer",
        "name",
        "squat-peer",
    )
    wire(topo, nodes)
    index = ifindexes(nodes)
    a = index[(first.a.node, first.a.interface)]
    assert a != a_end_ifindexes(topo)[first.index] and len(index) == 2 * len(topo.links)
