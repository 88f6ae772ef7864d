"""The igmp and proxy modes' orchestrator side against a fake lab session: what they refuse, what each
agent is told, and how a run is judged."""

from __future__ import annotations

from ipaddress import IPv4Address
from types import SimpleNamespace
from typing import Any

import pytest

from aidcnet.agent.control import Op
from aidcnet.modes import Mode
from orchestrator.configure.plan.model import PlanIgmp
from orchestrator.experiment.modes import mode_class
from orchestrator.experiment.modes.base import RunOptions
from orchestrator.experiment.modes.igmp import POOL
from orchestrator.experiment.session import ExperimentError, HostInfo
from orchestrator.workloads.trace import TraceOp

HOSTS = {f"h{i}": HostInfo(f"h{i}", f"10.0.0.{i}", i) for i in range(1, 5)}
MS = 1_000_000


class FakeAgent:
    def __init__(self, name: str, session: FakeSession) -> None:
        self.name, self.session = name, session
        self.loads: list[dict[str, Any]] = []

    def replay_load(self, **fields: Any) -> dict[str, Any]:
        self.loads.append(fields)
        return {"ok": True}

    def call(self, op: Op, timeout: float | None = None) -> dict[str, Any]:
        assert op == Op.REPLAY_RESULTS
        return {"ok": True, **self.session.results.get(self.name, {"records": []})}


class FakeSession:
    def __init__(self, igmp: PlanIgmp, scale: int | None = None) -> None:
        self.topo = SimpleNamespace(name="lab1")
        self.plan = SimpleNamespace(
            igmp=igmp, bier=SimpleNamespace(groups=[]), time=SimpleNamespace(scale=scale)
        )
        self.agents = {n: FakeAgent(n, self) for n in HOSTS}
        self.lost = SimpleNamespace(call=lambda node, fn: fn(), nodes={})
        self.results: dict[str, dict[str, Any]] = {}

    def hosts(self, names):
        return {n: HOSTS[n] for n in names}

    def gpu_hosts(self):
        return list(HOSTS)

    def require_configured(self, hosts) -> None:
        pass

    def fabric_interface(self, host: str) -> str:
        return "eth1"

    def agent(self, name: str) -> FakeAgent:
        return self.agents[name]


OPS = [
    TraceOp(t=0.0, op="multicast", src="h1", dst=["h2", "h3"], bytes=1000, id=0),
    TraceOp(t=0.001, op="multicast", src="h1", dst=["h3"], bytes=1000, id=1),
]


def _prepared(mode: Mode, igmp: PlanIgmp, **options: Any):
    session = FakeSession(igmp, scale=1000)
    spec = mode_class(mode)(RunOptions(**options))
    spec.prepare(session, OPS, lambda _: None)
    spec.load(session, OPS)
    return spec, session


def test_igmp_receivers_get_their_joins_and_run_a_schedule_of_their_own() -> None:
    spec, session = _prepared(Mode.IGMP, PlanIgmp(enabled=True))
    groups = [op[4] for op in session.agents["h1"].loads[0]["ops"]]
    assert all(IPv4Address(g) in POOL for g in groups) and groups[0] != groups[1]
    h3 = session.agents["h3"].loads[0]
    assert h3["mode"] == Mode.IGMP and h3["interface"] == "eth1" and h3["lead_s"] == 0.05
    assert h3["memberships"] == [[0, 0.0, groups[0], "10.0.0.1"], [1, 0.001, groups[1], "10.0.0.1"]]
    assert session.agents["h1"].loads[0]["memberships"] == []
    assert set(spec.senders) == {"h1", "h2", "h3"}  # h4 neither sends nor receives


def test_proxy_sources_get_reports_and_receivers_standing_joins(monkeypatch) -> None:
    import orchestrator.configure.plan.bier as bier

    monkeypatch.setattr(bier, "host_leaf_port", lambda plan, host: ("leaf1", f"eth{host[1:]}"))
    spec, session = _prepared(
        Mode.PROXY, PlanIgmp(enabled=True, proxy_ports={"leaf1": ["eth1"]}), lead_s=0.002
    )
    h1 = session.agents["h1"].loads[0]
    g0, g1 = (op[4] for op in h1["ops"])
    assert h1["lead_s"] == 0.002
    assert h1["reports"] == [
        [0, True, g0, ["10.0.0.2", "10.0.0.3"]],
        [0, False, g0, []],
        [1, True, g1, ["10.0.0.3"]],
        [1, False, g1, []],
    ]
    assert session.agents["h3"].loads[0]["groups"] == [g0, g1]
    assert spec.senders == ["h1"]


def test_the_lab_must_run_igmp_and_let_the_mode_signal(monkeypatch) -> None:
    import orchestrator.configure.plan.bier as bier

    with pytest.raises(ExperimentError, match=r"igmp\.enabled: true"):
        _prepared(Mode.IGMP, PlanIgmp(enabled=False))
    with pytest.raises(ExperimentError, match="leaves out 'igmp'"):
        _prepared(Mode.IGMP, PlanIgmp(enabled=True, groups=["static", "proxy"]))
    monkeypatch.setattr(bier, "host_leaf_port", lambda plan, host: ("leaf1", f"eth{host[1:]}"))
    with pytest.raises(ExperimentError, match=r"sources h1 may not send .*igmp.proxy_hosts"):
        _prepared(Mode.PROXY, PlanIgmp(enabled=True, proxy_ports={"leaf1": ["eth2"]}))


def test_a_member_without_its_packet_fails_the_run_and_latency_is_in_fabric_time() -> None:
    spec, session = _prepared(Mode.IGMP, PlanIgmp(enabled=True))
    spec.start_ns = 0
    spec.send_errors = {}

    def record(i: int, first_ms: float) -> dict[str, Any]:
        ns = int(first_ms * MS)
        return {
            "id": i,
            "checksum_ok": True,
            "send_ns": 0,
            "complete_ns": ns,
            "first_ns": ns,
            "duplicates": 0,
        }

    session.results = {
        "h2": {"records": [record(0, 50)], "joins": [[0, 0, 60 * MS]]},
        "h3": {"records": [record(0, 51)], "joins": [[0, 0, 61 * MS], [1, 1 * MS, 2001 * MS]]},
    }
    out = spec.collect(session, OPS)
    m = out.settings["membership"]
    assert m["changes"] == 3 and m["missed"] == 1 and m["wrong"] == 0
    assert m["time"] == "fabric" and m["latency_max_s"] == pytest.approx(51e-3 / 1000)
    assert out.missing == [(1, "h3")] and "1 members without their packet" in out.problem
    assert "3 receiver-set changes" in out.lines[-1]


class _Leaf:
    def __init__(self, queued: list[int]) -> None:
        self.queued = queued

    def counters(self) -> dict[str, int]:
        n = self.queued.pop(0) if len(self.queued) > 1 else self.queued[0]
        return {"igmp.control.admitted": 10 + n, "igmp.control.served": 10, "igmp.rx": 3}


def test_a_run_waits_for_the_leaves_modelled_control_planes_to_be_idle(monkeypatch) -> None:
    from orchestrator.configure.plan import bier
    from orchestrator.experiment.modes.igmp import quiet_control_planes

    leaf_of = {"h1": "leaf1", "h2": "leaf1", "h3": "leaf2", "h4": "leaf2"}
    monkeypatch.setattr(bier, "host_leaf_port", lambda _plan, host: (leaf_of[host], "eth1"))
    session = FakeSession(PlanIgmp(enabled=True, control_cost=1e-6))
    leaf1, leaf2 = _Leaf([2, 1, 0]), _Leaf([0])
    session.agents.update(leaf1=leaf1, leaf2=leaf2)  # type: ignore[dict-item]
    said: list[str] = []
    quiet_control_planes(session, said.append)  # type: ignore[arg-type]
    assert leaf1.queued == [0]  # asked until it was idle
    assert said and "leaf1" in said[0]
    stuck = _Leaf([5])
    session.agents["leaf1"] = stuck  # type: ignore[assignment]
    with pytest.raises(ExperimentError, match=r"'leaf1': 5.*lower one"):
        quiet_control_planes(session, said.append, timeout_s=0.6)  # type: ignore[arg-type]
