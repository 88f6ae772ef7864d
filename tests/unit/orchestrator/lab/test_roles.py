"""What every role asks of its container's kernel."""

from __future__ import annotations

import pytest

from aidcnet.ipv4 import QP_PORT_BASE
from orchestrator.lab.roles import ROLES
from orchestrator.lab.topology import Node


@pytest.mark.parametrize("role", sorted(ROLES))
def test_ephemeral_ports_stay_below_the_qp_source_ports(role: str) -> None:
    """A kernel-chosen port inside 49152+ once made a FARE per-flow run fail with EADDRINUSE."""
    node = Node(name="n1", kind="linux", image="x")
    low, high = (int(p) for p in ROLES[role].container_sysctls(node)["net.ipv4.ip_local_port_range"].split())
    assert 1024 <= low < high < QP_PORT_BASE
