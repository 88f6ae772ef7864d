"""Host and Docker state after many labs come and go (issue 18): every lab gets a management network of its
own (a hub of ours, orchestrator.lab.mgmtbridge, not a Docker network), and destroy leaves no container,
network, endpoint, hub, macvlan or netns behind, also after a deploy killed with SIGKILL half way. Labs
here are tiny (2-3 nodes) and named ``mg*``."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from orchestrator.configure.plan import build_plan
from orchestrator.lab.deploy import MGMT_LABEL, deploy, destroy
from orchestrator.lab.mgmtbridge import ALIAS_PREFIX, bridge_name, gateway_name
from orchestrator.lab.runtime.docker import DockerRuntime, netns_links
from orchestrator.lab.topology import Topology, load_topology

from .conftest import aidclab

BFR = {"kind": "linux", "image": "aidclab/bfr:latest"}
HOST = {"kind": "linux", "image": "aidclab/gpu-host:latest"}
# Small labs of different shapes and sizes: each cycle deploys other containers on another network.
SHAPES: dict[str, tuple[dict[str, dict], list[list[str]]]] = {
    "pair": ({"r1": BFR, "r2": BFR}, [["r1:eth1", "r2:eth1"]]),
    "line": ({"h1": HOST, "r1": BFR, "h2": HOST}, [["h1:eth1", "r1:eth1"], ["r1:eth2", "h2:eth1"]]),
    "hosts": ({"h1": HOST, "h2": HOST}, [["h1:eth1", "h2:eth1"]]),
    "vee": ({"r1": BFR, "r2": BFR, "h1": HOST}, [["r1:eth1", "h1:eth1"], ["r2:eth1", "h1:eth2"]]),
}


def tiny_lab(tmp: Path, name: str, shape: str, nodes: int | None = None) -> Path:
    """A topology file with no ``mgmt:`` at all, so the lab gets a network of its own."""
    node_defs, links = SHAPES[shape]
    doc = {
        "name": name,
        "topology": {"nodes": dict(node_defs), "links": [{"endpoints": ends} for ends in links]},
    }
    if nodes:  # a chain of extra BFRs, for a deploy that takes long enough to be killed half way
        for i in range(nodes - len(node_defs)):
            doc["topology"]["nodes"][f"x{i}"] = BFR
    path = tmp / f"{name}.clab.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass
class Footprint:
    """What a deployed lab put on the host, noted while it was up, to look for after its destroy."""

    lab: str
    network: str
    subnet: str
    hub_index: int
    devices: set[str] = field(default_factory=set)


def host_links(alias: str | None = None) -> dict[str, int]:
    """Host interfaces (name -> ifindex), only those with ``alias`` when given."""
    out = subprocess.run(["ip", "-d", "-j", "link", "show"], capture_output=True, text=True, check=True)
    links = json.loads(out.stdout)
    return {d["ifname"]: d["ifindex"] for d in links if alias is None or d.get("ifalias") == alias}


def footprint(topo: Topology) -> Footprint:
    devices = host_links(f"{ALIAS_PREFIX}{topo.name}")
    hub_index = devices.get(bridge_name(topo), -1)
    return Footprint(topo.name, topo.mgmt.network, str(topo.mgmt.ipv4_subnet), hub_index, set(devices))


def node_eth0(runtime: DockerRuntime, topo: Topology, node: str) -> str:
    code, out = runtime.exec(topo.container_name(node), ["ip", "-4", "-br", "addr", "show", "eth0"])
    assert code == 0, out
    return out.split()[2]


def assert_up_on_its_own_network(runtime: DockerRuntime, topo: Topology, lab_dir: Path) -> Footprint:
    # No Docker network: the containers run on "none" and get eth0 from the lab's hub.
    name = topo.mgmt.network
    assert [n for n in runtime.client.networks.list(names=[name]) if n.name == name] == []
    fp = footprint(topo)
    assert fp.devices == {bridge_name(topo), gateway_name(topo)}, fp.devices
    subnet = ipaddress.ip_network(str(topo.mgmt.ipv4_subnet))
    # Sized to the lab: the smallest subnet that holds its nodes (a /29 holds 5 next to the gateway).
    assert subnet.prefixlen == 29
    gw = subprocess.run(
        ["ip", "-4", "-br", "addr", "show", gateway_name(topo)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert gw[2] == f"{subnet.network_address + 1}/29", gw
    addresses = {}
    for node in topo.nodes:
        info = runtime.inspect(topo.container_name(node))
        # Docker's network controller never sees the node: nothing of it to deadlock on at destroy.
        assert info["HostConfig"]["NetworkMode"] == "none" and info["Config"].get("NetworkDisabled") is True
        assert info["NetworkSettings"]["SandboxKey"] == ""
        addresses[node] = info["Config"]["Labels"][MGMT_LABEL]
        assert node_eth0(runtime, topo, node) == addresses[node]
        assert ipaddress.ip_interface(addresses[node]).network == subnet
    assert len(set(addresses.values())) == len(topo.nodes)
    # Every node resolves localhost and every other node by name, from the /etc/hosts deploy wrote.
    first = next(iter(topo.nodes))
    for node in topo.nodes:
        code, out = runtime.exec(topo.container_name(first), ["getent", "hosts", node, "localhost"])
        assert code == 0, out
        assert out.split()[:2] == [addresses[node].partition("/")[0], node], out
    # Recorded in the lab dir: a configure in another process plans around the same subnet.
    data = json.loads((lab_dir / "topology-data.json").read_text())
    assert data["clab"]["config"]["mgmt"] == {"network": topo.mgmt.network, "ipv4-subnet": str(subnet)}
    assert {n["mgmt-ipv4-address"] for n in data["nodes"].values()} == {
        a.partition("/")[0] for a in addresses.values()
    }
    fresh = load_topology(topo.path)
    assert fresh.mgmt.ipv4_subnet is None
    build_plan(fresh)
    assert fresh.mgmt.ipv4_subnet == str(subnet)
    return fp


def assert_nothing_left(runtime: DockerRuntime, fp: Footprint) -> None:
    lab = fp.lab
    assert runtime.lab_containers(lab) == [], f"containers of {lab} left"
    assert [n.name for n in runtime.client.networks.list(names=[fp.network]) if n.name == fp.network] == []
    assert runtime.lab_networks(lab) == []
    # No network of any name still lists an endpoint of this lab's containers.
    for net in runtime.client.networks.list(greedy=True):
        names = {e.get("Name", "") for e in (net.attrs.get("Containers") or {}).values()}
        assert not {n for n in names if n.startswith(f"clab-{lab}-")}, f"{net.name}: endpoints {names}"
    assert host_links(f"{ALIAS_PREFIX}{lab}") == {}, f"management hub devices of {lab} left"
    assert not (fp.devices & set(host_links())), f"devices of {lab} left: {fp.devices & set(host_links())}"
    assert netns_links(f"clab-{lab}-") == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"clab-{lab}-" not in netns


@pytest.fixture
def labs_cleanup(runtime: DockerRuntime):
    """Whatever a failing test leaves, the ``mg*`` labs it deployed are destroyed."""
    made: list[str] = []
    yield made
    for lab in made:
        destroy(lab, runtime, quiet=True)


def test_deploy_destroy_cycles_leave_nothing(runtime, tmp_path, monkeypatch, labs_cleanup):
    """Six deploys of four shapes over five cycles, two labs up at once twice and one redeploy in place;
    after each destroy, nothing of that lab is left on the host."""
    monkeypatch.chdir(tmp_path)
    cycles = [
        [("mgs1", "pair")],
        [("mgs2", "line"), ("mgs3", "hosts")],  # two labs up at once, each on its own network
        [("mgs4", "vee")],
        [("mgs1", "line"), ("mgs5", "pair")],  # a name used before, another shape: nothing of it left
        [("mgs2", "hosts")],
    ]
    for cycle in cycles:
        up: list[Footprint] = []
        for name, shape in cycle:
            labs_cleanup.append(name)
            topo = load_topology(tiny_lab(tmp_path, name, shape))
            up.append(assert_up_on_its_own_network(runtime, topo, deploy(topo, runtime)))
        if len(up) == 2:
            a, b = (ipaddress.ip_network(fp.subnet) for fp in up)
            assert not a.overlaps(b)
        if cycle[0][0] == "mgs4":
            # Redeploy in place: the old hub goes with the old containers, and a new one is made.
            (old,) = up
            topo = load_topology(tmp_path / "mgs4.clab.yml")
            up = [assert_up_on_its_own_network(runtime, topo, deploy(topo, runtime, reconfigure=True))]
            assert up[0].hub_index != old.hub_index
        for fp in up:
            destroy(fp.lab, runtime, cleanup=True)
            assert_nothing_left(runtime, fp)


def test_destroy_after_a_deploy_killed_half_way_leaves_nothing(runtime, tmp_path, labs_cleanup):
    """``aidclab deploy`` killed with SIGKILL once its first containers exist; ``aidclab destroy`` then
    removes the containers, netns links and the lab's own hub."""
    name = "mgkill"
    labs_cleanup.append(name)
    path = tiny_lab(tmp_path, name, "pair", nodes=12)
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "deploy", str(path), "-q"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    network = f"clab-{name}"
    try:
        deadline = time.monotonic() + 60
        while not runtime.lab_containers(name):
            assert proc.poll() is None, "deploy finished before it could be killed"
            assert time.monotonic() < deadline, "deploy never started a container"
            time.sleep(0.02)
        devices = host_links(f"{ALIAS_PREFIX}{name}")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Half way: containers exist but the deploy never reached its lab directory (its last step).
    assert runtime.lab_containers(name)
    assert not (tmp_path / f"clab-{name}" / "topology-data.json").exists()
    assert len(devices) == 2, devices  # the hub and the gateway's macvlan were up before any container
    fp = Footprint(name, network, "", -1, set(devices))
    out = aidclab("destroy", str(path), "--cleanup", cwd=tmp_path)
    assert "removed" in out.stderr
    assert_nothing_left(runtime, fp)
