"""A closed-loop step's orchestrator side (orchestrator/experiment/modes/closed_loop.py) against a fake lab
session: which modes carry which ops, what each host is told, how the hosts' times become the step's
metrics, and every AllReduce judged."""

from __future__ import annotations

from ipaddress import IPv4Interface
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from aidcnet.agent.control import Op
from aidcnet.agent.replay.protocol import ReplayLoad
from aidcnet.ina.header import DType
from aidcnet.ina.header import Op as ReduceOp
from aidcnet.ina.worker import (
    DEFAULT_MAX_RTO_S,
    DEFAULT_MIN_RTO_S,
    DEFAULT_RTO_MARGIN_S,
    DEFAULT_TIMEOUT_S,
    digest,
    exact_result,
    worker_array,
)
from aidcnet.modes import Mode, StepModes
from aidcnet.timescale import TimeScale
from orchestrator.experiment.modes import mode_class
from orchestrator.experiment.modes.base import RunOptions
from orchestrator.experiment.session import ExperimentError, HostInfo
from orchestrator.workloads.trace import ComputeOp, TraceOp

HOSTS = {f"h{i}": HostInfo(f"h{i}", f"10.0.0.{i}", i) for i in range(1, 4)}
SCALE = 1000
US = 1_000  # wall ns of one fabric ns at 1:1000: 1 µs


class FakeAgent:
    def __init__(self, name: str, session: FakeSession) -> None:
        self.name, self.session = name, session
        self.loads: list[ReplayLoad] = []
        self.started: list[int] = []

    def replay_load(self, load: ReplayLoad) -> dict[str, Any]:
        self.loads.append(load)
        return {"ok": True}

    def replay_start(self, start_ns: int) -> dict[str, Any]:
        self.started.append(start_ns)
        self.session.start_ns = start_ns
        return {"ok": True}

    def replay_status(self, timeout: float = 2.0) -> dict[str, Any]:
        return {"sent_ops": 1, "received_complete": 2, "done": True, "send_errors": {}}

    def call(self, op: Op, timeout: float | None = None) -> dict[str, Any]:
        assert op == Op.REPLAY_RESULTS
        return {"ok": True, **self.session.results(self.name)}


JOB = SimpleNamespace(job=7, workers=["h1", "h2", "h3"], op="sum", dtype="int32", vat={}, transit={})


class FakeSession:
    def __init__(self) -> None:
        self.topo = SimpleNamespace(name="lab1")
        nodes = {
            n: SimpleNamespace(bfr_id=h.bfr_id, loopback=IPv4Interface(f"{h.loopback}/32"))
            for n, h in HOSTS.items()
        }
        self.plan = SimpleNamespace(lab="lab1", ina=[JOB], nodes=nodes, bier=SimpleNamespace(groups=[]))
        self.time_scale = TimeScale(SCALE)
        self.delays: dict[str, float] = {}  # no link is long (LabSession.delays)
        self.fabric_queued = None  # no sampler (LabSession.fabric_queued)
        self.agents = {n: FakeAgent(n, self) for n in HOSTS}
        self.lost = SimpleNamespace(call=lambda node, fn, patience_s=None: fn(), nodes={})
        self.start_ns = 0
        self.replies: dict[str, dict[str, Any]] = {}

    def hosts(self, names):
        return {n: HOSTS[n] for n in names}

    def gpu_hosts(self):
        return list(HOSTS)

    def require_configured(self, hosts) -> None:
        pass

    def agent(self, name: str) -> FakeAgent:
        return self.agents[name]

    def results(self, name: str) -> dict[str, Any]:
        return self.replies.get(name, {})


# h1 computes 10 µs, multicasts to h2 and h3; each computes 5 µs after it; then all three AllReduce.
OPS = [
    ComputeOp(t=0.0, op="compute", src="h1", seconds=10e-6, id=0),
    TraceOp(t=0.0, op="multicast", src="h1", dst=["h2", "h3"], bytes=1000, after=[0], id=1),
    ComputeOp(t=0.0, op="compute", src="h2", seconds=5e-6, after=[1], id=2),
    ComputeOp(t=0.0, op="compute", src="h3", seconds=5e-6, after=[1], id=3),
    TraceOp(t=0.0, op="allreduce", src="h1", dst=["h2", "h3"], bytes=64, after=[0, 2, 3], id=4),
]


def prepared(mode: Mode, ops=OPS, **options: Any):
    session = FakeSession()
    spec = mode_class(mode)(RunOptions(drain_s=0.0, **options))
    spec.check_trace(ops, Path("step.jsonl"))
    spec.prepare(session, ops, lambda _: None)
    spec.load(session, ops)
    return spec, session


def test_a_step_needs_modes_that_carry_its_kinds() -> None:
    with pytest.raises(ExperimentError, match="op 4 is an AllReduce: name the mode it runs in"):
        prepared(Mode.HOST_BIER)
    with pytest.raises(ExperimentError, match="mode reliable-unicast does not carry one"):
        prepared(Mode.RELIABLE_UNICAST, allreduce=Mode.RING)
    with pytest.raises(ExperimentError, match="op 1 is a multicast op of a closed-loop step: run the"):
        prepared(Mode.RING)
    with pytest.raises(ExperimentError, match="a step's AllReduces run in ina, ring, ps, not unicast"):
        prepared(Mode.HOST_BIER, allreduce=Mode.UNICAST)


def test_every_host_is_told_its_sends_computes_and_joins() -> None:
    spec, session = prepared(Mode.HOST_BIER, allreduce=Mode.RING)
    assert spec.predicted_as() == (StepModes(Mode.HOST_BIER, Mode.RING), "")
    h1, h2 = session.agents["h1"].loads[0], session.agents["h2"].loads[0]
    assert h1.closed_loop and h1.mode == Mode.HOST_BIER and not h1.compute_work
    assert [(op.id, op.after, op.receivers) for op in h1.ops] == [(1, (0,), ("h2", "h3"))]
    assert [(c.id, c.seconds) for c in h1.computes] == [(0, 10e-6)]
    # Each worker waits for the inputs of the AllReduce that concern it.
    assert [(r.id, r.after) for r in h1.reductions] == [(4, (0,))]
    assert [(r.id, r.after) for r in h2.reductions] == [(4, (2,))]
    request = h2.reductions[0].request
    assert request["job"] == 7 and request["mode"] == "ring" and request["elements"] == 16
    assert request["addresses"] == {1: "10.0.0.1", 2: "10.0.0.2", 3: "10.0.0.3"}  # the ring's ranks
    assert request["chunk_base"] == 0 and request["seed"] == 1 + 4
    assert h2.receivers == {} and h1.receivers["h2"].id == 2


def test_a_long_round_trip_raises_the_allreduce_timers_as_the_collective_modes_do(monkeypatch) -> None:
    """On a lab with delay (docs/delay.md) a step's AllReduce requests carry the timers the collective
    modes would give the job: the RTO at least twice the round trip on the wall clock, the largest RTO
    at least four times it; on a lab without delay at 1:1000, the defaults."""
    from orchestrator.experiment.modes import closed_loop

    _spec, session = prepared(Mode.HOST_BIER, allreduce=Mode.RING)
    plain = session.agents["h2"].loads[0].reductions[0].request
    assert (plain["timeout_s"], plain["max_rto_s"]) == (DEFAULT_TIMEOUT_S, DEFAULT_MAX_RTO_S)
    assert (plain["min_rto_s"], plain["rto_margin_s"]) == (DEFAULT_MIN_RTO_S, DEFAULT_RTO_MARGIN_S)
    assert plain["deadline_s"] == closed_loop.REDUCE_DEADLINE_S

    round_trips: list[tuple[str, ...]] = []

    def long_round_trip(plan, delays, job, point) -> float:
        round_trips.append(tuple(job.workers))
        return 0.02  # fabric seconds: 20 s of wall time at 1:1000

    monkeypatch.setattr(closed_loop, "job_round_trip_s", long_round_trip)
    _spec, session = prepared(Mode.HOST_BIER, allreduce=Mode.RING)
    request = session.agents["h2"].loads[0].reductions[0].request
    assert round_trips == [("h1", "h2", "h3")]
    assert request["timeout_s"] == pytest.approx(40.0) and request["max_rto_s"] == pytest.approx(80.0)
    assert request["deadline_s"] >= closed_loop.REDUCE_DEADLINE_S


def fake_results(session: FakeSession) -> None:
    """What the hosts say after the step (wall ns at 1:1000: one fabric µs is 1000 wall µs)."""
    start = session.start_ns

    def at(us: float) -> int:
        return start + round(us * US * SCALE / 1000 * 1000)

    arrays = [worker_array(1 + 4, i, 16, DType.INT32) for i in (1, 2, 3)]
    good = digest(exact_result(arrays, ReduceOp.SUM, DType.INT32))

    def item(i: int, kind: str, ready: float, start_: float, end: float) -> dict[str, Any]:
        return {"id": i, "kind": kind, "ready_ns": at(ready), "start_ns": at(start_), "end_ns": at(end)}

    record = {"id": 1, "checksum_ok": True, "complete_ns": at(12), "send_ns": at(10), "duplicates": 0}
    session.replies = {
        "h1": {"step": [item(0, "compute", 0, 0, 10), item(1, "send", 10, 10, 10),
                        item(4, "reduce", 10, 10, 20)],
               "reductions": {"4": {"digest": good, "finished": 0}}, "records": []},
        "h2": {"step": [item(2, "compute", 12, 12, 17), item(4, "reduce", 17, 17, 20)],
               "reductions": {"4": {"digest": good}}, "records": [record]},
        "h3": {"step": [item(3, "compute", 12, 12, 17), item(4, "reduce", 17, 17, 20)],
               "reductions": {"4": {"digest": "bad"}}, "records": [record]},
    }  # fmt: skip


def test_the_hosts_times_become_the_step_and_every_allreduce_is_judged() -> None:
    spec, session = prepared(Mode.HOST_BIER, allreduce=Mode.RING)
    spec.run(session, OPS, lambda _: None)
    assert [a.started for a in session.agents.values()] == [[session.start_ns]] * 3
    fake_results(session)
    outcome = spec.collect(session, OPS)
    step = outcome.settings["step"]
    assert step["modes"] == "host-bier+ring" and step["allreduce"] == "ring" and step["clock"] == "fabric"
    assert step["step_s"] == pytest.approx(20e-6) and step["compute_only_s"] == pytest.approx(15e-6)
    assert step["exposed_s"] == pytest.approx(5e-6)
    h2 = step["gpus"]["h2"]
    assert h2["compute_s"] == pytest.approx(5e-6)
    assert h2["barrier_s"] == pytest.approx(10e-6) and h2["network_s"] == pytest.approx(5e-6)
    assert h2["longest_wait"]["op"] == 1 and h2["longest_wait"]["on"] == "h1"
    assert step["straggler"] == "h1"  # h2 and h3 waited for h1's compute
    reduced = {m.id: m for m in outcome.messages}[4]
    assert reduced.delivered == ["h1", "h2"] and reduced.expected == ["h1", "h2", "h3"]
    assert outcome.problem == "AllReduce op 4 gave a wrong result on h3"
    assert {m.id for m in outcome.messages} == {1, 4} and outcome.missing == []


def test_a_step_of_computes_and_allreduces_runs_in_its_collective_mode() -> None:
    ops = [
        OPS[0],
        ComputeOp(t=0.0, op="compute", src="h2", seconds=1e-6, id=2),
        TraceOp(t=0.0, op="allreduce", src="h1", dst=["h2", "h3"], bytes=64, after=[0, 2], id=4),
    ]
    spec, session = prepared(Mode.RING, ops)
    assert spec.predicted_as() == (StepModes(None, Mode.RING), "")
    h3 = session.agents["h3"].loads[0]
    assert h3.mode == Mode.RING and h3.ops == () and [r.after for r in h3.reductions] == [()]
