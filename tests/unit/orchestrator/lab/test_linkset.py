"""``aidclab link set``: which ends it acts on, what it asks their agents, and its errors."""

from __future__ import annotations

import json

import pytest

from aidcnet.agent.client import AgentError
from aidcnet.agent.control import Op
from orchestrator.lab.linkset import LinkSetError, link_ends, link_set, parse_endpoint

# --- aidclab link set -----------------------------------------------------------------------------------

TOPO_DATA = {
    "nodes": {
        "G1": {"longname": "clab-x-G1", "image": "aidclab/gpu-host:latest"},
        "L1": {"longname": "clab-x-L1", "image": "aidclab/bfr:latest"},
        "F1": {"longname": "clab-x-F1", "image": "aidclab/frr:latest"},
    },
    "links": [
        {"a": {"node": "G1", "interface": "eth1"}, "z": {"node": "L1", "interface": "eth1"}},
        {"a": {"node": "G1", "interface": "eth2"}, "z": {"node": "F1", "interface": "eth1"}},
    ],
}


class FakeAgent:
    """Records what ``link set`` asks a node's agent; refuses like an agent when told to."""

    def __init__(self, runtime: FakeRuntime, container: str) -> None:
        self.runtime, self.container = runtime, container

    def _call(self, op: Op, *args: object) -> dict:
        self.runtime.calls.append((self.container, op, *args))
        if self.runtime.code:
            raise AgentError(self.container, op, {"ok": False, "error": "boom"})
        return {"ok": True}

    def bgp_link(self, interface: str, bandwidth: str) -> dict:
        return self._call(Op.BGP_LINK, interface, bandwidth)

    def drop(self, interface: str, probability: float) -> dict:
        return self._call(Op.DROP, interface, probability)


class FakeRuntime:
    def __init__(self, code: int = 0) -> None:
        self.calls: list[tuple] = []
        self.code = code

    def exec(self, container, cmd, timeout=None):
        self.calls.append((container, cmd))
        return self.code, "boom" if self.code else "{}"

    def agent(self, container, node=None, timeout=10.0):
        return FakeAgent(self, container)


def test_link_set_down_acts_at_the_named_end_only(tmp_path) -> None:
    (tmp_path / "topology-data.json").write_text(json.dumps(TOPO_DATA))
    rt = FakeRuntime()
    lines = link_set(rt, tmp_path, "L1:eth1", "down")
    assert rt.calls == [("clab-x-L1", ["ip", "link", "set", "dev", "eth1", "down"])]
    assert "peer G1:eth1" in lines[0]


def test_link_set_bandwidth_tells_both_agents_and_skips_frr(tmp_path) -> None:
    (tmp_path / "topology-data.json").write_text(json.dumps(TOPO_DATA))
    rt = FakeRuntime()
    link_set(rt, tmp_path, "G1:eth1", "bandwidth", "400G")
    assert rt.calls == [
        ("clab-x-G1", Op.BGP_LINK, "eth1", "400G"),
        ("clab-x-L1", Op.BGP_LINK, "eth1", "400G"),
    ]
    rt = FakeRuntime()
    lines = link_set(rt, tmp_path, "G1:eth2", "bandwidth", "200G")
    assert [c[0] for c in rt.calls] == ["clab-x-G1"] and "skipped" in lines[1]


def test_link_set_loss_asks_the_named_agent_only(tmp_path) -> None:
    (tmp_path / "topology-data.json").write_text(json.dumps(TOPO_DATA))
    rt = FakeRuntime()
    lines = link_set(rt, tmp_path, "L1:eth1", "loss", "0.02")
    assert rt.calls == [("clab-x-L1", Op.DROP, "eth1", 0.02)]
    assert "2.00%" in lines[0]
    rt = FakeRuntime()
    assert "removed" in link_set(rt, tmp_path, "L1:eth1", "loss", "0")[0]
    assert rt.calls == [("clab-x-L1", Op.DROP, "eth1", 0.0)]


@pytest.mark.parametrize(
    ("endpoint", "action", "value", "needle"),
    [
        ("G1:eth1", "loss", None, "probability 0..1"),
        ("G1:eth1", "loss", "2", "probability 0..1"),
        ("G1:eth1", "loss", "lots", "got 'lots'"),
        ("F1:eth1", "loss", "0.1", "not an aidcnet node"),
        ("G1", "down", None, "NODE:INTERFACE"),
        ("G9:eth1", "down", None, "no node 'G9'"),
        ("G1:eth7", "down", None, "its links: eth1, eth2"),
        ("G1:eth1", "bandwidth", None, "needs a value"),
        ("G1:eth1", "bandwidth", "800GB/s", "bytes/s units"),
    ],
)
def test_link_set_errors_name_the_problem(tmp_path, endpoint, action, value, needle) -> None:
    (tmp_path / "topology-data.json").write_text(json.dumps(TOPO_DATA))
    with pytest.raises(LinkSetError, match=needle):
        link_set(FakeRuntime(), tmp_path, endpoint, action, value)


def test_link_set_failure_in_the_node_is_reported(tmp_path) -> None:
    (tmp_path / "topology-data.json").write_text(json.dumps(TOPO_DATA))
    with pytest.raises(LinkSetError, match="G1: ip link set eth1 down failed: boom"):
        link_set(FakeRuntime(code=1), tmp_path, "G1:eth1", "down")
    with pytest.raises(LinkSetError, match=r"L1: loss 0\.02 on eth1: node clab-x-L1: drop: boom"):
        link_set(FakeRuntime(code=1), tmp_path, "L1:eth1", "loss", "0.02")
    with pytest.raises(LinkSetError, match="is the lab deployed"):
        link_set(FakeRuntime(), tmp_path / "nope", "G1:eth1", "down")


def test_parse_endpoint_and_ends() -> None:
    assert parse_endpoint("G1:eth2") == ("G1", "eth2")
    here, peer = link_ends(TOPO_DATA, "L1", "eth1", "t.json")
    assert (peer.node, peer.interface, here.runs_agent) == ("G1", "eth1", True)
