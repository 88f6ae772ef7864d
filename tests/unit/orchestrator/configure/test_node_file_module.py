"""The checks the aidcnet_node_file module runs inside a node before installing its file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
MODULE = ROOT / "playbooks" / "roles" / "aidcnet_node" / "library" / "aidcnet_node_file.py"


def _module():
    spec = importlib.util.spec_from_file_location("aidcnet_node_file", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_missing_interface_and_a_wrong_sysctl_are_named():
    node_problems = _module().node_problems
    forwarding = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
    ports = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    expected = {"ipv4/ip_forward": forwarding, "ipv4/ip_local_port_range": " ".join(ports)}
    assert node_problems(["lo"], expected) == []
    wrong = "0" if forwarding == "1" else "1"
    problems = node_problems(["lo", "nosuch9"], {"ipv4/ip_forward": wrong})
    assert problems == [
        "interface nosuch9 is missing: is the lab deployed as planned? (aidclab linkcheck)",
        f"net.ipv4.ip_forward is {forwarding}, want {wrong} (set at docker run by aidclab deploy)",
    ]
