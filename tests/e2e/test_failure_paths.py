"""Failures clean up after themselves (issue 42): a deploy that fails rolls back what it started, a split
lab's parts run on one machine through one command and leave nothing behind, and destroy removes a named
management network the lab's deploy made, also when no container of the lab is left. Labs are named
``fp-*`` and small; each test checks the host before and after (containers, Docker networks, netns,
veths, VXLAN devices)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.lab.runtime.docker import DockerRuntime
from orchestrator.lab.split import load_split
from orchestrator.lab.topology import free_mgmt_subnet
from tests.e2e.conftest import aidclab, lab_copy

BFR = {"kind": "linux", "image": "aidclab/bfr:latest"}
HOST = {"kind": "linux", "image": "aidclab/gpu-host:latest"}
# Named management networks of these tests come from here, away from the labs' own (172.16.0.0/12).
TEST_POOL = "10.213.0.0/16"


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def vxlan_devices(netns: str) -> set[str]:
    cmd = ["ip", "-n", netns, "-br", "link", "show", "type", "vxlan"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()}


def fp_containers(runtime: DockerRuntime, *labs: str) -> list[str]:
    return [c["Names"][0].lstrip("/") for lab in labs for c in runtime.lab_containers(lab)]


def fp_footprint(runtime: DockerRuntime) -> dict[str, set[str]]:
    """What ``fp-*`` labs have on this host (other labs come and go beside these tests): Docker networks,
    network namespaces (nodes' links, stand-in hosts), host devices with an aidclab alias (management
    hubs, underlay devices)."""
    shown = subprocess.run(["ip", "-d", "-j", "link", "show"], capture_output=True, text=True, check=True)
    links = json.loads(shown.stdout)
    return {
        "networks": {n.name for n in runtime.client.networks.list() if "fp-" in n.name},
        "netns": {n for n in netns_names() if n.startswith(("clab-fp-", "aidclab-fp-"))},
        "devices": {d["ifname"] for d in links if ":fp-" in (d.get("ifalias") or "")},
    }


def assert_nothing_left(runtime: DockerRuntime, *labs: str) -> None:
    assert fp_containers(runtime, *labs) == []
    assert fp_footprint(runtime) == {"networks": set(), "netns": set(), "devices": set()}


def tiny_lab(tmp: Path, name: str, mgmt: dict | None = None, nodes: dict | None = None) -> Path:
    """h1 - r1 - r2 - h2: split in two, r1-r2 is the one cut link; or ``nodes`` with no links."""
    topology: dict = {"nodes": nodes or {"r1": BFR, "r2": BFR, "h1": HOST, "h2": HOST}}
    if not nodes:
        topology["links"] = [
            {"endpoints": ["r1:eth1", "r2:eth1"]},
            {"endpoints": ["h1:eth1", "r1:eth2"]},
            {"endpoints": ["h2:eth1", "r2:eth2"]},
        ]
    doc: dict = {"name": name, "topology": topology, **({"mgmt": mgmt} if mgmt else {})}
    path = tmp / f"{name}.clab.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def clean(runtime: DockerRuntime) -> None:
    """No ``fp-*`` lab is on the host when a test starts (a test run killed half way would show here)."""
    assert fp_footprint(runtime) == {"networks": set(), "netns": set(), "devices": set()}


def test_a_split_part_whose_vxlan_end_is_taken_rolls_back_its_containers(runtime, tmp_path, clean):
    """The issue's case: leaf-spine's part b (6 containers) with VNI 1004 already taken in its underlay."""
    lab = lab_copy(tmp_path, "leaf-spine", "fp-ls")
    out = aidclab("split", str(lab), "--hosts", "a,b", "--local", "-o", "parts", cwd=tmp_path).stdout
    manifest = tmp_path / "parts" / "fp-ls.split.yml"
    split = load_split(manifest)
    part_b = next(p for p in split.parts if p["host"] == "b")
    netns, vni = part_b["underlay-netns"], min(c["vni"] for c in yaml.safe_load(manifest.read_text())["cuts"])
    assert f"--underlay-netns {netns}" in out and netns in netns_names()
    try:
        subprocess.run(
            ["ip", "-n", netns, "link", "add", "squat", "type", "vxlan", "id", str(vni), "dstport", "14789",
             "remote", part_b["underlay"]],
            check=True,
        )  # fmt: skip
        failed = aidclab(
            "deploy", str(tmp_path / "parts" / part_b["file"]), "-q", "--underlay-netns", netns,
            cwd=tmp_path, check=False,
        )  # fmt: skip
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert f"VNI {vni}" in failed.stderr and "rolled back: removed its 6 container(s)" in failed.stderr
        assert fp_containers(runtime, "fp-ls-b") == []
        assert not [n for n in netns_names() if n.startswith("clab-fp-ls-b-")]
        assert vxlan_devices(netns) == {"squat"}  # not the deploy's to remove
    finally:
        aidclab("destroy", str(manifest), "--cleanup", cwd=tmp_path, check=False)
    assert_nothing_left(runtime, "fp-ls-a", "fp-ls-b")


def test_split_local_runs_on_one_machine_and_destroy_leaves_nothing(runtime, tmp_path, clean):
    lab = tiny_lab(tmp_path, "fp-sl")
    aidclab("split", str(lab), "--hosts", "a,b", "--local", "-o", "parts", cwd=tmp_path)
    manifest = tmp_path / "parts" / "fp-sl.split.yml"
    try:
        aidclab("deploy", str(manifest), "-q", cwd=tmp_path)
        assert len(fp_containers(runtime, "fp-sl-a", "fp-sl-b")) == 4
        aidclab("plan", str(manifest), cwd=tmp_path)  # what configure writes for the whole lab
        assert (tmp_path / "clab-fp-sl" / "ansible-inventory.yml").exists()
    finally:
        done = aidclab("destroy", str(manifest), "--cleanup", cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_nothing_left(runtime, "fp-sl-a", "fp-sl-b")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("clab-")) == []


def free_test_subnet(runtime: DockerRuntime) -> str:
    subnet = free_mgmt_subnet(4, runtime.network_subnets(), pool=TEST_POOL)
    assert subnet is not None, f"no free /29 left in {TEST_POOL}"
    return str(subnet)


def test_a_deploy_that_starts_no_container_leaves_no_named_network(runtime, tmp_path, clean):
    subnet = ipaddress.ip_network(free_test_subnet(runtime))
    gateway = str(subnet.network_address + 1)  # Docker's: a node that asks for it never starts
    lab = tiny_lab(
        tmp_path, "fp-gw", {"network": "fp-gw-net", "ipv4-subnet": str(subnet)},
        nodes={"r1": {**BFR, "mgmt-ipv4": gateway}},
    )  # fmt: skip
    failed = aidclab("deploy", str(lab), "-q", cwd=tmp_path, check=False)
    assert failed.returncode == 1 and "Address already in use" in failed.stderr
    assert "rolled back" in failed.stderr
    assert_nothing_left(runtime, "fp-gw")


def test_destroy_removes_the_named_network_its_deploy_made_with_no_container_left(
    runtime, tmp_path, clean
):
    lab = tiny_lab(
        tmp_path, "fp-mg", {"network": "fp-mg-net", "ipv4-subnet": free_test_subnet(runtime)},
        nodes={"r1": BFR, "r2": BFR},
    )  # fmt: skip
    try:
        aidclab("deploy", str(lab), "-q", cwd=tmp_path)
        assert fp_footprint(runtime)["networks"] == {"fp-mg-net"}
        # The lab's containers go behind destroy's back (a crash, `docker rm -f`): destroy by the lab's
        # name must still find the network.
        for name in fp_containers(runtime, "fp-mg"):
            runtime.remove(name)
        aidclab("destroy", "fp-mg", cwd=tmp_path)
        assert fp_footprint(runtime)["networks"] == set()
    finally:
        aidclab("destroy", str(lab), "--cleanup", cwd=tmp_path, check=False)
    assert_nothing_left(runtime, "fp-mg")
