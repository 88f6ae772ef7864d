"""Configure a deployed leaf-spine through Ansible: loopbacks reach each other, a second run changes
nothing, plain ansible-playbook works, and bad values fail clearly while nodes keep their config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.configure.ansible import configure, run_playbook
from orchestrator.paths import ROOT

from .conftest import aidclab, deployed

LAB = "t-cfg"


@pytest.fixture(scope="module")
def lab(runtime, tmp_path_factory):
    with deployed(runtime, tmp_path_factory.mktemp("cfg"), "leaf-spine", LAB) as topo:
        yield topo


def node_file(topo, node: str) -> dict:
    path = Path.cwd() / topo.lab_dir_name / "host_vars" / f"{topo.container_name(node)}.yml"
    return yaml.safe_load(path.read_text())["aidclab_node"]


def unreachable_loopbacks(runtime, topo) -> list[str]:
    loopbacks = {n: node_file(topo, n)["loopback"].split("/")[0] for n in topo.nodes}
    failures = []
    for node, own in loopbacks.items():
        targets = " ".join(ip for n, ip in loopbacks.items() if n != node)
        script = f"for ip in {targets}; do ping -c1 -W1 -q -I {own} $ip >/dev/null 2>&1 || echo $ip; done"
        _code, out = runtime.exec(topo.container_name(node), script)
        failures += [f"{node} ({own}) -> {ip}" for ip in out.split()]
    return failures


def running_config(runtime, topo, node: str) -> dict:
    code, out = runtime.exec(topo.container_name(node), ["aidcnet", "ctl", "show", "config"])
    assert code == 0, out
    return json.loads(out)["config"]


def test_configure_then_every_loopback_pings_every_other(runtime, lab):
    report = configure(lab)
    assert report.ok and report.changed > 0
    assert unreachable_loopbacks(runtime, lab) == []
    for node in ("spine1", "leaf3", "h8"):
        assert running_config(runtime, lab, node) == node_file(lab, node)


def test_second_configure_changes_nothing(lab):
    # Through the CLI, as a user runs it.
    out = aidclab("configure", str(lab.path), cwd=Path.cwd())
    assert "changed=0 failed=0" in out.stderr, out.stderr[-2000:]


def test_check_mode_reports_no_change(lab):
    report = configure(lab, check=True)
    assert report.ok and report.changed == 0


def test_plain_ansible_playbook_works(lab):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    inventory = Path.cwd() / lab.lab_dir_name / "ansible-inventory.yml"
    out = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), "playbooks/site.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    recap = out.stdout[out.stdout.index("PLAY RECAP") :]
    assert "changed=0" in recap and "failed=0" in recap
    assert "changed=1" not in recap


def test_broken_value_fails_clearly_and_node_keeps_config(runtime, lab):
    node = "leaf2"
    before = running_config(runtime, lab, node)
    broken = {**node_file(lab, node)}
    broken["interfaces"] = [{**broken["interfaces"][0], "mtu": 10}, *broken["interfaces"][1:]]
    inventory = Path.cwd() / lab.lab_dir_name / "ansible-inventory.yml"
    report = run_playbook(inventory, extra_vars={"aidclab_node": broken}, limit=lab.container_name(node))
    assert not report.ok
    (failure,) = report.failures
    assert failure.startswith(f"{lab.container_name(node)}: task 'Node file /etc/aidcnet/node.yml' failed")
    assert "interfaces.0.mtu" in failure and "greater than or equal to 68" in failure
    assert running_config(runtime, lab, node) == before
    assert unreachable_loopbacks(runtime, lab) == []


def test_agent_reload_rejects_bad_file_and_kernel_refusal(runtime, lab):
    node = "h2"
    container = lab.container_name(node)
    before = running_config(runtime, lab, node)
    # A file that does not validate: rejected with the field path, agent stays up with the old config.
    code, out = runtime.exec(
        container,
        "sed 's/^version: 1/version: 7/' /etc/aidcnet/node.yml > /tmp/bad.yml"
        " && aidcnet ctl reload --file /tmp/bad.yml",
    )
    assert code == 1 and "version: version 7 is not supported" in out and "running config is unchanged" in out
    # A file that validates but the kernel refuses (a gateway that is not on the link): rolled back.
    off_link = {
        **before,
        "routes": [{"prefix": "10.99.0.1/32", "nexthops": [{"via": "10.98.0.1", "dev": "eth1"}]}],
    }
    runtime.exec(container, f"cat > /tmp/offlink.yml <<'EOF'\n{yaml.safe_dump(off_link)}EOF")
    code, out = runtime.exec(container, ["aidcnet", "ctl", "reload", "--file", "/tmp/offlink.yml"])
    assert code == 1 and "kernel refused to route 10.99.0.1/32" in out
    assert running_config(runtime, lab, node) == before
    code, routes = runtime.exec(container, ["ip", "route", "show", "proto", "aidcnet"])
    assert "10.99.0.1" not in routes and len(routes.strip().splitlines()) == len(before["routes"])
    code, out = runtime.exec(container, ["aidcnet", "ctl", "health"])
    assert code == 0 and json.loads(out)["configured"] is True
