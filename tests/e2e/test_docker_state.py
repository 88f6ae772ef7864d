"""Docker state after many labs come and go (issue 18): every lab gets a management network of its own,
and destroy leaves no container, network, endpoint, veth or netns behind, also after a deploy killed with
SIGKILL half way. Labs here are tiny (2-3 nodes) and named ``mg*``."""

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
from orchestrator.lab.deploy import deploy, destroy
from orchestrator.lab.runtime.docker import NETWORK_LAB_LABEL, DockerRuntime, netns_links
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
    network_id: str
    bridge: str
    veths: set[str] = field(default_factory=set)


def host_veths(master: str | None = None) -> set[str]:
    cmd = ["ip", "-o", "link", "show", "type", "veth"] + (["master", master] if master else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    return {line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines() if ":" in line}


def host_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    return {line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines() if ":" in line}


def footprint(runtime: DockerRuntime, topo: Topology) -> Footprint:
    net = runtime.client.networks.get(topo.mgmt.network)
    bridge = (net.attrs.get("Options") or {}).get("com.docker.network.bridge.name") or f"br-{net.id[:12]}"
    return Footprint(topo.name, net.name, net.id, bridge, host_veths(bridge))


def assert_up_on_its_own_network(runtime: DockerRuntime, topo: Topology, lab_dir: Path) -> Footprint:
    net = runtime.client.networks.get(topo.mgmt.network)
    assert net.name == f"clab-{topo.name}" and net.attrs["Internal"] is True
    assert net.attrs["Labels"][NETWORK_LAB_LABEL] == topo.name
    subnet = net.attrs["IPAM"]["Config"][0]["Subnet"]
    # Sized to the lab: the smallest subnet that holds its nodes (a /29 holds 5 next to Docker's gateway).
    assert subnet == topo.mgmt.ipv4_subnet and ipaddress.ip_network(subnet).prefixlen == 29
    attached = {e["Name"] for e in net.attrs["Containers"].values()}
    assert attached == {topo.container_name(n) for n in topo.nodes}
    # Recorded in the lab dir: a configure in another process plans around the same subnet.
    data = json.loads((lab_dir / "topology-data.json").read_text())
    assert data["clab"]["config"]["mgmt"] == {"network": net.name, "ipv4-subnet": subnet}
    assert {n["mgmt-ipv4-address"] for n in data["nodes"].values()} <= {
        str(a) for a in ipaddress.ip_network(subnet).hosts()
    }
    fresh = load_topology(topo.path)
    assert fresh.mgmt.ipv4_subnet is None
    build_plan(fresh)
    assert fresh.mgmt.ipv4_subnet == subnet
    fp = footprint(runtime, topo)
    assert len(fp.veths) == len(topo.nodes), f"{fp.bridge}: {fp.veths}"
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
    assert fp.bridge not in host_links(), f"bridge {fp.bridge} left"
    assert not (fp.veths & host_veths()), f"veths of {lab} left: {fp.veths & host_veths()}"
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
            nets = [runtime.client.networks.get(fp.network) for fp in up]
            a, b = (ipaddress.ip_network(n.attrs["IPAM"]["Config"][0]["Subnet"]) for n in nets)
            assert not a.overlaps(b)
        if cycle[0][0] == "mgs4":
            # Redeploy in place: the old network goes with the old containers, and its veths and bridge.
            (old,) = up
            topo = load_topology(tmp_path / "mgs4.clab.yml")
            up = [assert_up_on_its_own_network(runtime, topo, deploy(topo, runtime, reconfigure=True))]
            assert up[0].network_id != old.network_id
            assert not (old.veths & host_veths()), f"redeploy left veths {old.veths & host_veths()}"
            assert old.bridge not in host_links(), f"redeploy left bridge {old.bridge}"
        for fp in up:
            destroy(fp.lab, runtime, cleanup=True)
            assert_nothing_left(runtime, fp)


def test_destroy_after_a_deploy_killed_half_way_leaves_nothing(runtime, tmp_path, labs_cleanup):
    """``aidclab deploy`` killed with SIGKILL once its first containers exist; ``aidclab destroy`` then
    removes the containers, netns links, the lab's own network and its endpoints."""
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
        fp_net = runtime.client.networks.get(network)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Half way: containers exist but the deploy never reached its lab directory (its last step).
    assert runtime.lab_containers(name)
    assert not (tmp_path / f"clab-{name}" / "topology-data.json").exists()
    bridge = f"br-{fp_net.id[:12]}"
    fp = Footprint(name, network, fp_net.id, bridge, host_veths(bridge))
    out = aidclab("destroy", str(path), "--cleanup", cwd=tmp_path)
    assert "removed" in out.stderr
    assert_nothing_left(runtime, fp)
