"""The igmp and proxy modes' orchestrator side against a fake lab session: what they refuse, what each
agent is told, and how a run is judged."""

from __future__ import annotations

from ipaddress import IPv4Address
from types import SimpleNamespace
from typing import Any

import pytest

from aidcnet.agent.control import Op
from aidcnet.agent.replay.protocol import Join, OpTimes, ReplayLoad, Report
from aidcnet.modes import Mode
from aidcnet.timescale import TimeScale
from orchestrator.configure.plan.schema import PlanIgmp
from orchestrator.experiment.modes import mode_class
from orchestrator.experiment.modes.base import RunOptions
from orchestrator.experiment.modes.igmp import POOL
from orchestrator.experiment.session import ExperimentError, HostInfo
from orchestrator.workloads.trace import TraceOp
from tests.unit.node_files import igmp_knobs

HOSTS = {f"h{i}": HostInfo(f"h{i}", f"10.0.0.{i}", i) for i in range(1, 5)}
MS = 1_000_000


# Each host's leaf and the leaf's port toward it (orchestrator.configure.plan.bier.host_leaf_port).
LEAF_OF = {"h1": ("leaf1", "eth3"), "h2": ("leaf1", "eth4"), "h3": ("leaf2", "eth3"), "h4": ("leaf2", "eth4")}
LEAF_IDS = {"leaf1": 11, "leaf2": 12}


@pytest.fixture(autouse=True)
def _leaves(monkeypatch):
    import orchestrator.configure.plan.bier as bier

    monkeypatch.setattr(bier, "host_leaf_port", lambda _plan, host: LEAF_OF.get(host))


class FakeAgent:
    def __init__(self, name: str, session: FakeSession) -> None:
        self.name, self.session = name, session
        self.loads: list[ReplayLoad] = []

    def replay_load(self, load: ReplayLoad) -> dict[str, Any]:
        self.loads.append(load)
        self.session.joined += [(self.name, g) for g in load.groups]  # the kernel joins at load
        return {"ok": True}

    def call(self, op: Op, timeout: float | None = None) -> dict[str, Any]:
        assert op == Op.REPLAY_RESULTS
        return {"ok": True, **self.session.results.get(self.name, {"records": []})}


class FakeLeaf:
    """A leaf's agent: its member ports follow the hosts' joins once it has been asked ``slow`` times
    (its IGMP still at work before that); its history is what a test gives it."""

    def __init__(self, name: str, session: FakeSession, slow: float = 0) -> None:
        self.name, self.session, self.slow, self.asked = name, session, slow, 0
        self.history: dict[str, Any] = {"flows": [], "member_ports": []}
        self.since: list[int] = []

    def igmp(self) -> dict[str, Any]:
        self.asked += 1
        members: dict[str, list[str]] = {}
        if self.asked > self.slow:
            for host, group in self.session.joined:
                leaf, port = LEAF_OF[host]
                if leaf == self.name:
                    members.setdefault(group, []).append(port)
        return {"ok": True, "member_ports": members}

    def call(self, op: Op, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        assert op == Op.IGMP
        self.since.append(fields["history_since_ns"])
        return {"ok": True, **self.history}

    def counters(self) -> dict[str, int]:
        return {}


class FakeSession:
    def __init__(self, igmp: PlanIgmp, scale: int | None = None) -> None:
        self.topo = SimpleNamespace(name="lab1")
        nodes = {leaf: SimpleNamespace(bfr_id=i) for leaf, i in LEAF_IDS.items()}
        self.plan = SimpleNamespace(
            igmp=igmp, bier=SimpleNamespace(groups=[]), time=SimpleNamespace(scale=scale), nodes=nodes
        )
        self.time_scale = TimeScale.of(scale)
        self.delays: dict[str, float] = {}  # no link is long (LabSession.delays)
        self.fabric_queued = None  # no sampler (LabSession.fabric_queued)
        self.agents: dict[str, Any] = {n: FakeAgent(n, self) for n in HOSTS}
        self.agents.update({leaf: FakeLeaf(leaf, self) for leaf in LEAF_IDS})
        self.lost = SimpleNamespace(call=lambda node, fn: fn(), nodes={})
        self.results: dict[str, dict[str, Any]] = {}
        self.joined: list[tuple[str, str]] = []

    def hosts(self, names):
        return {n: HOSTS[n] for n in names}

    def gpu_hosts(self):
        return list(HOSTS)

    def require_configured(self, hosts) -> None:
        pass

    def fabric_interface(self, host: str) -> str:
        return "eth1"

    def agent(self, name: str) -> Any:
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


PROXY_PORTS = {"leaf1": ["eth3"]}  # h1, the source


def test_igmp_receivers_get_their_joins_and_run_a_schedule_of_their_own() -> None:
    spec, session = _prepared(Mode.IGMP, PlanIgmp(**igmp_knobs(), enabled=True))
    groups = [op.group for op in session.agents["h1"].loads[0].ops]
    assert all(IPv4Address(g) in POOL for g in groups) and groups[0] != groups[1]
    h3 = session.agents["h3"].loads[0]
    # the default lead, unmodelled: a second of wall time for the joins to reach the BFIRs
    assert h3.mode == Mode.IGMP and h3.interface == "eth1" and h3.lead_s == 1.0
    assert h3.joins == (Join(0, 0.0, groups[0], "10.0.0.1"), Join(1, 0.001, groups[1], "10.0.0.1"))
    assert session.agents["h1"].loads[0].joins == ()
    assert set(spec.senders) == {"h1", "h2", "h3"}  # h4 neither sends nor receives


def test_proxy_sources_get_reports_and_receivers_standing_joins() -> None:
    spec, session = _prepared(
        Mode.PROXY, PlanIgmp(**igmp_knobs(), enabled=True, proxy_ports=PROXY_PORTS), lead_s=0.002
    )
    h1 = session.agents["h1"].loads[0]
    g0, g1 = (op.group for op in h1.ops)
    assert h1.lead_s == 0.002
    assert h1.reports == (
        Report(0, True, g0, ("10.0.0.2", "10.0.0.3")),
        Report(0, False, g0, ()),
        Report(1, True, g1, ("10.0.0.3",)),
        Report(1, False, g1, ()),
    )
    assert session.agents["h3"].loads[0].groups == (g0, g1)
    assert spec.senders == ["h1"]


def test_the_lab_must_run_igmp_and_let_the_mode_signal(monkeypatch) -> None:
    import orchestrator.configure.plan.bier as bier

    with pytest.raises(ExperimentError, match=r"igmp\.enabled: true"):
        _prepared(Mode.IGMP, PlanIgmp(**igmp_knobs(), enabled=False))
    with pytest.raises(ExperimentError, match="leaves out 'igmp'"):
        _prepared(Mode.IGMP, PlanIgmp(**igmp_knobs(groups=["static", "proxy"]), enabled=True))
    monkeypatch.setattr(bier, "host_leaf_port", lambda plan, host: ("leaf1", f"eth{host[1:]}"))
    with pytest.raises(ExperimentError, match=r"sources h1 may not send .*igmp.proxy_hosts"):
        _prepared(Mode.PROXY, PlanIgmp(**igmp_knobs(), enabled=True, proxy_ports={"leaf1": ["eth2"]}))


def _record(i: int, first_ms: float) -> dict[str, Any]:
    ns = int(first_ms * MS)
    return {"id": i, "checksum_ok": True, "send_ns": 0, "complete_ns": ns, "first_ns": ns, "duplicates": 0}


def test_a_member_without_its_packet_fails_the_run_and_says_which_lead_would_do() -> None:
    """h3 joined op 1 at its t (1 ms of fabric time, 1 s on the wall clock at 1:1000) but its BFER (leaf2,
    12) reached the BFIR's flow 1.2 s later, after the data had left: missed, and the run says which lead
    would have had it."""
    spec, session = _prepared(Mode.IGMP, PlanIgmp(**igmp_knobs(), enabled=True))
    spec.start_ns = 0
    spec.send_errors = {}
    g0, g1 = (spec.op_group[op.id] for op in OPS)
    sent = [OpTimes(0, 0, first_ns=1 * MS, last_ns=2 * MS, datagrams=1, bytes=1000), OpTimes(1, 1 * MS)]
    session.results = {
        "h1": {"records": [], "op_times": [t.to_wire() for t in sent]},
        "h2": {"records": [_record(0, 50)], "joins": [[0, 0, 60 * MS]]},
        "h3": {"records": [_record(0, 51)], "joins": [[0, 0, 61 * MS], [1, 1000 * MS, 3000 * MS]]},
    }
    # leaf1 is the BFIR (h1's leaf): BFER 11 (h2) 2 ms after the joins, BFER 12 (h3) 3 ms; op 1's 1.2 s
    session.agents["leaf1"].history = {
        "flows": [
            ["10.0.0.1", g0, [[2 * MS, [11]], [3 * MS, [11, 12]]]],
            ["10.0.0.1", g1, [[2200 * MS, [12]]]],
        ],
        "member_ports": [[g0, [[1 * MS, ["eth4"]]]]],
    }
    session.agents["leaf2"].history = {
        "member_ports": [[g0, [[1 * MS, ["eth3"]]]], [g1, [[2 * MS, ["eth3"]]]]]
    }
    out = spec.collect(session, OPS)
    m = out.settings["membership"]
    assert m["changes"] == 3 and m["missed"] == 1 and m["wrong"] == 0
    # 2 ms, 3 ms and 1200 ms of wall time from each join, at 1:1000: fabric µs
    assert m["time"] == "fabric" and m["latency_max_s"] == pytest.approx(1.2e-3) and m["latency_samples"] == 3
    assert m["lead_needed_s"] == pytest.approx(1.2)
    assert out.missing == [(1, "h3")] and "1 members without their packet" in out.problem
    assert "up to 1200 ms (wall) after their op's t: --lead 1800 would do" in out.problem
    assert "3 receiver-set changes" in out.lines[-1]
    assert out.op_times == {"h1": sent}  # what the source did with each op, for the fidelity verdict
    assert session.agents["leaf1"].since == [spec.load_ns]  # the histories from the load on


def test_latency_is_in_the_time_scale_the_run_ran_at() -> None:
    """The automatic scale reshapes the lab after the mode prepared: the run is judged at the scale it
    ran at (before, at the one it was prepared at: 3x off at 1:60000 against 1:20000)."""
    session = FakeSession(PlanIgmp(**igmp_knobs(), enabled=True), scale=1000)
    spec = mode_class(Mode.IGMP)(RunOptions())
    spec.prepare(session, OPS, lambda _: None)
    session.time_scale = TimeScale(3000)  # what choose_time_scale does
    spec.load(session, OPS)
    assert session.agents["h3"].loads[0].lead_s == 1.0
    spec.start_ns, spec.send_errors = 0, {}
    g0 = spec.op_group[0]
    session.results = {"h2": {"records": [_record(0, 50)], "joins": [[0, 0, 60 * MS]]}}
    session.agents["leaf1"].history = {"flows": [["10.0.0.1", g0, [[3 * MS, [11]]]]]}
    session.agents["leaf1"].history["member_ports"] = [[g0, [[0, ["eth4"]]]]]
    m = spec.collect(session, OPS).settings["membership"]
    assert m["latency_max_s"] == pytest.approx(3 * MS / 1e9 / 3000)


def test_a_proxy_run_starts_once_the_receivers_joins_are_member_ports() -> None:
    """The receivers join their groups at load; the run must not start before their leaves made them
    member ports (before, it started 1 s later whatever the leaves were at: no member port, no packet)."""
    from orchestrator.experiment.modes.proxy import wait_member_ports

    session = FakeSession(PlanIgmp(**igmp_knobs(), enabled=True, proxy_ports=PROXY_PORTS), scale=1000)
    session.agents["leaf2"].slow = 3  # leaf2 takes three looks to show h3's joins
    spec = mode_class(Mode.PROXY)(RunOptions())
    spec.prepare(session, OPS, lambda _: None)
    spec.load(session, OPS)
    assert session.agents["leaf2"].asked == 4 and session.joined
    session.agents["leaf2"].slow = float("inf")
    with pytest.raises(ExperimentError, match=r"still not member ports at \{'leaf2': 2\}"):
        wait_member_ports(session, {"leaf2": {spec.op_group[0]: {"eth3"}, spec.op_group[1]: {"eth3"}}},
                          lambda _: None, timeout_s=0.3)  # fmt: skip


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
    session = FakeSession(PlanIgmp(**igmp_knobs(control_cost=1e-6), enabled=True))
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


def test_the_membership_line_says_whose_clock() -> None:
    from orchestrator.experiment.modes.igmp import membership_line

    m = {"changes": 3, "latency_samples": 3, "latency_p50_s": 0.004, "latency_p99_s": 0.008,
         "latency_max_s": 0.008, "wrong": 0, "missed": 1}  # fmt: skip
    assert membership_line("igmp", {**m, "time": "fabric"}) == (
        "igmp: 3 receiver-set changes; membership latency p50 4.00 ms, p99 8.00 ms, max 8.00 ms over 3 new "
        "receivers; wrong 0, missed 1"
    )
    assert "p50 4.00 ms (wall), p99 8.00 ms (wall), max 8.00 ms (wall)" in membership_line(
        "igmp", {**m, "time": "wall"}
    )
