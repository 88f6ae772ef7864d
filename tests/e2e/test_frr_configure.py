"""An FRR router (Debian's frr) configured by the frr role from the same plan as our nodes: it installs
the planned addresses and static routes, and traffic crosses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.configure.ansible import configure

from .conftest import deployed
from .test_configure import unreachable_loopbacks

LAB = "t-frr"


@pytest.fixture(scope="module")
def lab(runtime, tmp_path_factory):
    frr_spine = {"spine2": {"kind": "linux", "image": "aidclab/frr:latest"}}
    with deployed(runtime, tmp_path_factory.mktemp("frr"), "leaf-spine", LAB, nodes=frr_spine) as topo:
        yield topo


def test_frr_node_takes_the_plan_and_forwards(runtime, lab):
    assert configure(lab).ok
    container = lab.container_name("spine2")
    code, out = runtime.exec(container, ["vtysh", "-c", "show ip route static json"])
    assert code == 0, out
    static = json.loads(out)
    plan = yaml.safe_load((Path.cwd() / lab.lab_dir_name / "host_vars" / f"{container}.yml").read_text())
    planned = {r["prefix"] for r in plan["aidclab_node"]["routes"]}
    assert planned and planned <= set(static)
    before = forwarded(runtime, container)
    assert unreachable_loopbacks(runtime, lab) == []
    # ECMP spreads the 182 loopback pairs over both spines, so some of them cross the FRR spine.
    assert forwarded(runtime, container) > before
    assert configure(lab).changed == 0


def forwarded(runtime, container: str) -> int:
    """IP ForwDatagrams from the node's /proc/net/snmp: packets its kernel forwarded."""
    _code, out = runtime.exec(container, ["cat", "/proc/net/snmp"])
    header, values = [line.split() for line in out.splitlines() if line.startswith("Ip:")][:2]
    return int(values[header.index("ForwDatagrams")])
