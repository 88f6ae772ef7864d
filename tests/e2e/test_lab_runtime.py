"""Deploy, check, inspect and destroy real labs; destroy must leave nothing behind, even after a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from orchestrator.lab.deploy import deploy, destroy
from orchestrator.lab.linkcheck import check_lab
from orchestrator.lab.runtime.docker import NETNS_DIR, netns_links
from orchestrator.lab.topology import load_topology

from .conftest import ROOT, aidclab, host_veths, lab_copy

# Each lab here gets a management network of its own, so "the network is gone" is about the network this
# lab created, whatever other labs (or other tests) left on the shared default one.
MGMT = {
    "t-ls": {"network": "t-ls-mgmt", "ipv4-subnet": "172.20.21.0/24"},
    "t-crash": {"network": "t-crash-mgmt", "ipv4-subnet": "172.20.22.0/24"},
}


def assert_nothing_left(runtime, lab: str, veths_before: set[str]) -> None:
    assert runtime.lab_containers(lab) == []
    assert netns_links(f"clab-{lab}-") == []
    assert host_veths() <= veths_before
    network = MGMT[lab]["network"]
    assert [n for n in runtime.client.networks.list(names=[network]) if n.name == network] == []


def test_deploy_check_every_link_then_destroy(runtime, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    veths_before = host_veths()
    topo = load_topology(lab_copy(tmp_path, "leaf-spine", "t-ls", MGMT["t-ls"]))
    try:
        lab_dir = deploy(topo, runtime)
        containers = runtime.lab_containers("t-ls")
        assert len(containers) == 14 and all(c["State"] == "running" for c in containers)
        assert (lab_dir / "ansible-inventory.yml").exists() and (lab_dir / "topology-data.json").exists()

        results = check_lab(topo)
        assert len(results) == 16
        assert [r for r in results if not r.ok] == []

        for node in topo.nodes:
            ns = topo.container_name(node)
            assert (NETNS_DIR / ns).is_symlink()
            routes = subprocess.run(
                ["ip", "netns", "exec", ns, "ip", "route", "show", "default"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert routes.strip() == "", f"{node} has a default route out: {routes}"
            mtu = subprocess.run(
                ["ip", "netns", "exec", ns, "cat", "/sys/class/net/eth1/mtu"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert mtu.strip() == "9500"
        net = runtime.client.networks.get(MGMT["t-ls"]["network"])
        assert net.attrs["Internal"] is True

        listing = json.loads(aidclab("inspect", str(topo.path), "--format", "json").stdout)
        assert sorted(c["name"] for c in listing["containers"]) == sorted(
            topo.container_name(n) for n in topo.nodes
        )
        assert aidclab("exec", str(topo.path), "spine2", "--", "hostname").stdout.strip() == "spine2"
        health = json.loads(aidclab("exec", str(topo.path), "h3", "--", "aidcnet", "ctl", "health").stdout)
        assert health["ok"] and health["role"] == "gpu-host"

        # A second deploy refuses rather than clobbering a running lab.
        again = aidclab("deploy", str(topo.path), check=False)
        assert again.returncode == 1 and "already has 14 container(s)" in again.stderr
    finally:
        destroy("t-ls", runtime, cleanup=True)
    assert_nothing_left(runtime, "t-ls", veths_before)
    assert not (tmp_path / "clab-t-ls").exists()
    # Idempotent: a second destroy finds nothing and succeeds.
    assert destroy("t-ls", runtime) == 0


def test_destroy_cleans_up_after_killed_deploy(runtime, tmp_path):
    veths_before = host_veths()
    path = lab_copy(tmp_path, "superpod", "t-crash", MGMT["t-crash"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "deploy", str(path), "-q"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(runtime.lab_containers("t-crash")) < 12:
            assert proc.poll() is None, "deploy finished before it could be killed"
            assert time.monotonic() < deadline, "deploy never started containers"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        started = len(runtime.lab_containers("t-crash"))
        assert 12 <= started < 68, "the deploy was not killed midway"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = aidclab("destroy", str(path), "--cleanup", cwd=tmp_path)
    assert "removed" in out.stderr
    assert_nothing_left(runtime, "t-crash", veths_before)


def test_bad_topology_is_refused_before_anything_starts(runtime, tmp_path):
    bad = tmp_path / "bad.clab.yml"
    bad.write_text(
        "name: t-bad\ntopology:\n  nodes:\n    a: {kind: linux, image: aidclab/bfr:latest}\n"
        "  links:\n    - endpoints: [a:eth1, b:eth1]\n"
    )
    out = aidclab("deploy", str(bad), check=False, cwd=tmp_path)
    assert out.returncode == 1
    assert "unknown node 'b'" in out.stderr and str(bad) in out.stderr
    assert runtime.lab_containers("t-bad") == []


def test_missing_image_is_named(runtime, tmp_path):
    bad = tmp_path / "noimg.clab.yml"
    bad.write_text(
        "name: t-noimg\ntopology:\n  nodes:\n    a: {kind: linux, image: aidclab-test/missing:latest}\n"
    )
    out = aidclab("deploy", str(bad), check=False, cwd=tmp_path)
    assert out.returncode == 1 and "aidclab-test/missing:latest (nodes a)" in out.stderr
    assert "make images" in out.stderr


def test_shipped_lab_graph_cli():
    out = aidclab("graph", str(ROOT / "labs" / "ina-fig1.clab.yml"), "--format", "dot")
    assert out.stdout.startswith('graph "ina-fig1"') and out.stdout.count(" -- ") == 14


def test_lab_too_large_for_its_management_subnet_is_refused_before_anything_starts(runtime, tmp_path):
    """leaf-spine's 14 nodes on a /28 (13 containers): refused at validation, naming the count, the subnet
    and what to set; no container, network or veth is left."""
    veths_before = host_veths()
    mgmt = {"network": "t-tiny-mgmt", "ipv4-subnet": "172.20.23.0/28"}
    path = lab_copy(tmp_path, "leaf-spine", "t-tiny", mgmt)
    out = aidclab("deploy", str(path), check=False, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "14 nodes do not fit 172.20.23.0/28, which holds 13 containers" in out.stderr
    assert "/27 or wider" in out.stderr and str(path) in out.stderr
    assert runtime.lab_containers("t-tiny") == []
    assert [n for n in runtime.client.networks.list(names=["t-tiny-mgmt"]) if n.name == "t-tiny-mgmt"] == []
    assert host_veths() <= veths_before


# Run in a node: every aidcnet module the agent imports has its bytecode in the image (a node never writes
# any: PYTHONDONTWRITEBYTECODE), and pydantic skips its plugin lookup.
AGENT_IMPORTS = """
import importlib.util, json, os, sys
import aidcnet.agent.daemon, aidcnet.agent.bier.ebpf, aidcnet.cli
files = [getattr(m, "__file__", None) or "" for m in list(sys.modules.values())]
ours = [f for f in files if f.startswith("/opt/aidcnet/src/")]
uncompiled = [f for f in ours if not os.path.exists(importlib.util.cache_from_source(f))]
print(json.dumps([len(ours), uncompiled, os.environ.get("PYDANTIC_DISABLE_PLUGINS")]))
"""


def test_node_images_carry_the_agents_bytecode():
    out = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "/opt/aidcnet/bin/python",
         "aidclab/node", "-c", AGENT_IMPORTS],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    count, uncompiled, plugins = json.loads(out.stdout)
    assert count > 20 and uncompiled == [] and plugins == "1", out.stdout
