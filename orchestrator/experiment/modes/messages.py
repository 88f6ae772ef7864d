"""The message family: a trace's unicast and multicast ops, sent by the host agents
(``aidcnet/agent/replay/``) at ``start + t`` and accounted for by every receiver.

The modes differ in how a host sends (one copy per receiver, one BIER packet, one IP multicast packet;
reliably or not) and what that needs beforehand, which each says in the load it builds for a host
(:meth:`MessageMode.host_load`, typed: ``aidcnet.agent.replay.protocol``); everything else is here:
each host's schedule, a common start time, progress, the judgement of every (message, receiver) pair as
exactly once with the right content, and what each source did with each op (``ModeOutcome.op_times``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from aidcnet.agent.replay.protocol import Receiver, ReplayLoad, ReplayOp
from orchestrator.experiment.modes.base import ExperimentMode, Family, ModeOutcome, Say
from orchestrator.experiment.modes.closed_loop import ClosedLoop
from orchestrator.experiment.modes.replaying import (
    START_LEAD_S,
    build_messages,
    flight_wall_s,
    op_times,
    protocol_waits,
    results_of,
    start_and_wait,
    trace_propagation_s,
)
from orchestrator.experiment.session import ExperimentError, HostInfo, LabSession
from orchestrator.workloads.trace import ALLREDUCE_OP, TraceOp, closed_loop


class MessageMode(ExperimentMode):
    start_lead_s = START_LEAD_S
    family = Family.MESSAGES
    # Set by check_trace when the trace is a closed-loop step (docs/training.md): it runs the steps then.
    closed: ClosedLoop | None = None

    # -- hooks for the modes ------------------------------------------------------------------------
    def check_hosts(self, hosts: dict[str, HostInfo]) -> None:
        """Refuse senders or receivers the mode cannot use (host-BIER needs BFR-ids)."""

    def host_id(self, name: str) -> int | None:
        """The id a receiver is known by in the run (its BFR-id; the reliable modes number every host)."""
        return self.hosts[name].bfr_id

    def op_entry(self, op: TraceOp) -> ReplayOp:
        """One op of a host's schedule as the agent takes it (the IP-multicast modes add its group)."""
        return ReplayOp(op.id, op.t, op.bytes, tuple(op.dst))

    def quiet_wall_s(self, session: LabSession) -> float:
        """Wall seconds a live run of this mode may go with nothing changing at any host (beyond the
        replay's ``--timeout``): none for a mode that sends on its schedule and is done."""
        return 0.0

    def host_load(self, session: LabSession, host: str, ops: list[ReplayOp]) -> ReplayLoad:
        """What ``host`` is told for the run: its ops, the receivers they name, the run's knobs; a mode
        adds what it needs (``dataclasses.replace`` of its base's)."""
        o = self.options
        needed = sorted({d for op in ops for d in op.receivers})
        return ReplayLoad(
            self.name,
            ops=tuple(ops),
            receivers={r: Receiver(self.hosts[r].loopback, self.host_id(r)) for r in needed},
            max_datagram=o.max_datagram,
            gap_us=o.gap_us,
            qps=o.qps,
        )

    # -- the steps ----------------------------------------------------------------------------------
    def predicted_as(self) -> tuple[Any, str] | None:
        if self.closed is not None:
            return self.closed.modes, ""
        return super().predicted_as()

    def check_trace(self, ops: list[TraceOp], trace: Path) -> None:
        if closed_loop(ops):
            self.closed = ClosedLoop(self, ops, trace)  # type: ignore[arg-type]
            return
        reduce_ops = [op.id for op in ops if op.op == ALLREDUCE_OP]
        if reduce_ops:
            raise ExperimentError(
                f"{trace}: op {reduce_ops[0]} is an allreduce; replay allreduce traces with a collective "
                "mode (ina, ring or ps; docs/allreduce.md)"
            )

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        if self.closed is not None:
            self.closed.prepare(session, say)
            self.hosts, self.all_hosts = self.closed.hosts, self.closed.all_hosts
            self.check_hosts(self.hosts)
            return
        names = sorted({op.src for op in ops} | {d for op in ops for d in op.dst})
        self.hosts = session.hosts(names)
        self.all_hosts = session.hosts(session.gpu_hosts())
        session.require_configured(self.all_hosts)
        self.check_hosts(self.hosts)

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        o = self.options
        self.settings: dict[str, Any] = {"max_datagram": o.max_datagram, "gap_us": o.gap_us, "qps": o.qps}
        if self.closed is not None:
            self.closed.load(session, lambda host, sends: self.host_load(session, host, sends))
            return
        per_src: dict[str, list[ReplayOp]] = {n: [] for n in self.all_hosts}
        for op in ops:
            per_src[op.src].append(self.op_entry(op))
        self.senders = [n for n, mine in per_src.items() if mine]
        self.expected = sum(len(op.dst) for op in ops)
        for name in self.all_hosts:
            session.agent(name).replay_load(self.host_load(session, name, per_src[name]))

    def run(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        if self.closed is not None:
            self.closed.run(session, say)
            return
        duration = session.time_scale.wall_s(max((op.t for op in ops), default=0.0))
        self.start_ns, self.send_errors = start_and_wait(
            session, self.senders, self.all_hosts, self.expected, len(ops), duration, self.options, say,
            flight_s=flight_wall_s(session, ops), quiet_s=self.quiet_wall_s(session),
        )  # fmt: skip

    def results(self, session: LabSession) -> dict[str, dict[str, Any]]:
        """Every host's ``replay_results`` reply (empty for a host that stopped answering)."""
        return results_of(session, self.all_hosts)

    def collect(self, session: LabSession, ops: list[TraceOp]) -> ModeOutcome:
        if self.closed is not None:
            outcome = self.closed.collect(session)
            outcome.settings = {**self.settings, "drain_s": self.options.drain_s,
                                "start_lead_s": START_LEAD_S, **outcome.settings}  # fmt: skip
            return outcome
        self.replies = self.results(session)
        records = {n: {int(r["id"]): r for r in rep.get("records", [])} for n, rep in self.replies.items()}
        self.records = records
        messages, missing, wrong = build_messages(ops, records, self.start_ns, session.time_scale)
        self.settings.update(
            drain_s=self.options.drain_s,
            send_errors=self.send_errors,
            start_lead_s=START_LEAD_S,
            unresponsive=session.lost.nodes,
        )
        one_way, _round_trip = trace_propagation_s(session, ops)
        if one_way:
            # What the links' length adds to the completion at least: the farthest receiver's delay.
            self.settings["propagation_s"] = one_way
        outcome = ModeOutcome(messages, self.settings, missing, wrong)
        outcome.op_times = op_times(self.replies)
        outcome.protocol_waits = protocol_waits(self.replies)
        return outcome


class IpMulticastMode(MessageMode):
    """The IP-multicast family (``aidcnet.modes.IP_MULTICAST``): the hosts send each op to its group
    (``op_group``, worked out in ``prepare``) out of their fabric interface; the leaves carry it."""

    op_group: dict[int, str]

    def op_entry(self, op: TraceOp) -> ReplayOp:
        return replace(super().op_entry(op), group=self.op_group[op.id])

    def host_load(self, session: LabSession, host: str, ops: list[ReplayOp]) -> ReplayLoad:
        return replace(super().host_load(session, host, ops), interface=session.fabric_interface(host))
