"""What the replay service's tests share: a loopback of their own."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


@pytest.fixture
def private_lo():
    """A network namespace of our own: its lo carries nothing but this test's packets (the machine's lo
    is shared with every other process, whose traffic could overflow a capture or hold the QP ports), and
    takes multicast."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for a network namespace (and AF_PACKET to capture)")
    from tests.unit.aidcnet.agent.bier.test_net_bier import netns

    name = f"igR-lo{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=15)
    try:
        subprocess.run(
            ["ip", "-n", name, "link", "set", "lo", "up", "multicast", "on"],
            check=True,
            capture_output=True,
            timeout=15,
        )
        with netns(name):
            yield
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=15)
