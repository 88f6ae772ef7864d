"""A lab must fit its management subnet: checked from the file alone, and at deploy next to other labs."""

from __future__ import annotations

import ipaddress
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.lab import deploy as deploy_mod
from orchestrator.lab.topology import (
    TopologyError,
    free_mgmt_subnet,
    mgmt_capacity,
    mgmt_prefix_for,
    parse_topology,
)

NODE = {"kind": "linux", "image": "aidclab/bfr:latest"}


def lab(nodes: int, subnet: str) -> dict:
    return {
        "name": "t",
        "mgmt": {"network": "t-mgmt", "ipv4-subnet": subnet},
        "topology": {"nodes": {f"n{i}": NODE for i in range(nodes)}},
    }


def test_capacity_leaves_out_network_broadcast_and_gateway():
    assert mgmt_capacity(ipaddress.ip_network("172.20.20.0/24")) == 253
    assert mgmt_capacity(ipaddress.ip_network("10.0.0.0/30")) == 1


@given(st.integers(min_value=1, max_value=1 << 20))
def test_the_prefix_is_the_longest_that_holds_the_containers(containers):
    prefix = mgmt_prefix_for(containers)
    assert mgmt_capacity(ipaddress.ip_network(f"10.0.0.0/{prefix}")) >= containers
    if prefix < 30:
        assert mgmt_capacity(ipaddress.ip_network(f"10.0.0.0/{prefix + 1}")) < containers


def test_a_free_subnet_overlaps_nothing_taken():
    taken = [ipaddress.ip_network("172.16.0.0/20"), ipaddress.ip_network("172.16.16.0/24")]
    free = free_mgmt_subnet(280, taken)
    assert free is not None and free.prefixlen == 23
    assert not any(free.overlaps(t) for t in taken) and mgmt_capacity(free) >= 280


def test_the_full_default_subnet_refuses_280_nodes_with_what_to_set():
    with pytest.raises(TopologyError) as info:
        parse_topology(lab(280, "172.20.20.0/24"), "big.clab.yml")
    (problem,) = info.value.problems
    assert "280 nodes do not fit 172.20.20.0/24, which holds 253 containers" in problem
    assert "/23 or wider" in problem and "mgmt:" in problem


def test_253_nodes_fit_a_24():
    assert len(parse_topology(lab(253, "172.20.20.0/24"), "ok.clab.yml").nodes) == 253


class Runtime:
    def __init__(self, attached: int):
        self.attached = attached

    def network_endpoints(self, name: str) -> int:
        return self.attached

    def network_subnets(self) -> list[ipaddress.IPv4Network]:
        return [ipaddress.ip_network("172.16.0.0/16")]


def test_deploy_counts_the_containers_other_labs_attached():
    topo = SimpleNamespace(
        path="x.clab.yml", name="x", nodes={f"n{i}": None for i in range(10)},
        mgmt=SimpleNamespace(network="clab", ipv4_subnet="172.20.20.0/24"),
    )  # fmt: skip
    deploy_mod._check_mgmt_room(Runtime(243), topo)  # 243 + 10 = 253: fits
    with pytest.raises(deploy_mod.DeployError) as info:
        deploy_mod._check_mgmt_room(Runtime(244), topo)
    msg = str(info.value)
    assert "x.clab.yml: 10 nodes do not fit management network 'clab'" in msg
    assert "244 attached by other labs" in msg and "ipv4-subnet: 172.17.0.0/28" in msg


def test_a_node_health_deadline_moves_with_the_lab_progress(monkeypatch):
    from orchestrator.lab import deploy as deploy_module

    now = [100.0]
    monkeypatch.setattr(deploy_module.time, "monotonic", lambda: now[0])
    progress = deploy_module._LabProgress()
    deadline = progress.deadline(100.0)
    assert deadline() == 100.0 + deploy_module.HEALTH_TIMEOUT_S
    now[0] = 150.0
    progress.mark()  # another node became healthy: the lab is still coming up
    assert deadline() == 150.0 + deploy_module.HEALTH_TIMEOUT_S
    now[0] = 150.0 + deploy_module.HEALTH_TIMEOUT_S + 1  # nothing since: this node now fails
    assert now[0] > deadline()
