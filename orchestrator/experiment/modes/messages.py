"""The message family: a trace's unicast and multicast ops, sent by the host agents
(``aidcnet/agent/replay_service.py``) at ``start + t`` and accounted for by every receiver.

The three modes differ only in how a host sends (one copy per receiver, one BIER packet, one IP
multicast packet) and what that needs beforehand; everything else is here: each host's schedule,
a common start time, progress, and the judgement of every (message, receiver) pair as exactly once
with the right content.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aidcnet.agent.control import Op
from orchestrator.experiment.modes.base import ExperimentMode, Family, ModeOutcome, Say
from orchestrator.experiment.records import MessageResult
from orchestrator.experiment.session import ExperimentError, HostInfo, LabSession
from orchestrator.workloads.trace import ALLREDUCE_OP, TraceOp

# Keeps each replay_load line well under the agent's 64 KiB request-line limit.
OPS_PER_LOAD = 200
START_LEAD_S = 1.0
POLL_S = 0.2
# A host that misses status polls this long is given up (a paused container); a busy one misses a few.
STATUS_PATIENCE_S = 20.0


def build_messages(
    ops: list[TraceOp], records: dict[str, dict[int, dict[str, Any]]], start_ns: int
) -> tuple[list[MessageResult], list[tuple[int, str]], list[tuple[int, str]]]:
    """MessageResults from the trace ops and each host's receiver records (host -> msg id -> record).
    Returns them with the (message, receiver) pairs missing and delivered to a host not in ``dst``."""
    by_id: dict[int, dict[str, dict[str, Any]]] = {}
    for host, recs in records.items():
        for msg_id, rec in recs.items():
            by_id.setdefault(msg_id, {})[host] = rec
    messages, missing, wrong = [], [], []
    for op in ops:
        got = by_id.pop(op.id, {})
        delivered, latency, dups = [], {}, {}
        sent_at = op.t
        for host in [*op.dst, *sorted(h for h in got if h not in op.dst)]:
            rec = got.get(host)
            if rec is None or not rec["checksum_ok"]:
                if host in op.dst:
                    missing.append((op.id, host))
                continue
            if host not in op.dst:
                wrong.append((op.id, host))
            delivered.append(host)
            sent_at = (rec["send_ns"] - start_ns) / 1e9
            latency[host] = max(0.0, (rec["complete_ns"] - rec["send_ns"]) / 1e9)
            if rec["duplicates"]:
                dups[host] = int(rec["duplicates"])
        messages.append(
            MessageResult(
                id=op.id,
                op=op.op,
                src=op.src,
                expected=list(op.dst),
                delivered=delivered,
                bytes=op.bytes,
                sent_at=sent_at,
                latency=latency,
                duplicates=dups,
            )
        )
    # Records of ids the trace does not have: a stale or foreign sender; count them as wrong.
    wrong.extend((msg_id, host) for msg_id, hosts in sorted(by_id.items()) for host in sorted(hosts))
    return messages, missing, wrong


def _chunks(items: list[Any], n: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


class MessageMode(ExperimentMode):
    start_lead_s = START_LEAD_S
    family = Family.MESSAGES

    # -- hooks for the modes ------------------------------------------------------------------------
    def check_hosts(self, hosts: dict[str, HostInfo]) -> None:
        """Refuse senders or receivers the mode cannot use (host-BIER needs BFR-ids)."""

    def host_id(self, name: str) -> int | None:
        """The id a receiver is known by in the run (its BFR-id; the reliable modes number every host)."""
        return self.hosts[name].bfr_id

    def op_entry(self, op: TraceOp) -> list[Any]:
        """One op of a host's schedule as the agent takes it: ``[id, t, bytes, [receivers]]``."""
        return [op.id, op.t, op.bytes, list(op.dst)]

    def first_load_fields(self, session: LabSession, host: str) -> dict[str, Any]:
        """Fields only the first load of a host carries (the net-bier joins happen once per run)."""
        return {}

    # -- the steps ----------------------------------------------------------------------------------
    def check_trace(self, ops: list[TraceOp], trace: Path) -> None:
        reduce_ops = [op.id for op in ops if op.op == ALLREDUCE_OP]
        if reduce_ops:
            raise ExperimentError(
                f"{trace}: op {reduce_ops[0]} is an allreduce; replay allreduce traces with a collective "
                "mode (ina, ring or ps; docs/allreduce.md)"
            )

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        names = sorted({op.src for op in ops} | {d for op in ops for d in op.dst})
        self.hosts = session.hosts(names)
        self.all_hosts = session.hosts(session.gpu_hosts())
        session.require_configured(self.all_hosts)
        self.check_hosts(self.hosts)

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        per_src: dict[str, list[list[Any]]] = {n: [] for n in self.all_hosts}
        for op in ops:
            per_src[op.src].append(self.op_entry(op))
        self.senders = [n for n, mine in per_src.items() if mine]
        self.expected = sum(len(op.dst) for op in ops)
        o = self.options
        self.settings: dict[str, Any] = {"max_datagram": o.max_datagram, "gap_us": o.gap_us, "qps": o.qps}
        for name in self.all_hosts:
            mine = per_src[name]
            for k, chunk in enumerate(_chunks(mine, OPS_PER_LOAD) if mine else [[]]):
                needed = {d for op in chunk for d in op[3]}
                receivers = {r: [self.hosts[r].loopback, self.host_id(r)] for r in sorted(needed)}
                session.agent(name).replay_load(
                    mode=self.name,
                    ops=chunk,
                    receivers=receivers,
                    append=k > 0,
                    **(self.first_load_fields(session, name) if k == 0 else {}),
                    max_datagram=o.max_datagram,
                    gap_us=o.gap_us,
                    qps=o.qps,
                )

    def run(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        lost = session.lost
        status: dict[str, dict[str, Any]] = {}
        self.start_ns = time.time_ns() + int(START_LEAD_S * 1e9)
        for name in self.senders:
            session.agent(name).replay_start(self.start_ns)
        duration = max((op.t for op in ops), default=0.0)
        deadline = time.monotonic() + START_LEAD_S + duration + self.options.timeout_s
        drain_until: float | None = None
        last = ""
        while True:
            for n in self.all_hosts:
                agent = session.agent(n)
                reply = lost.call(
                    n, lambda agent=agent: agent.replay_status(timeout=2.0), patience_s=STATUS_PATIENCE_S
                )
                if reply is not None:
                    status[n] = reply
            sent = sum(s["sent_ops"] for s in status.values())
            delivered = sum(s["received_complete"] for s in status.values())
            # A sender that stopped answering will send no more: do not wait for it.
            done = all(n in lost.nodes or status.get(n, {}).get("done") for n in self.senders)
            line = f"sent {sent}/{len(ops)} ops, delivered {delivered}/{self.expected}"
            if line != last:
                say(line)
                last = line
            now = time.monotonic()
            if done and drain_until is None:
                drain_until = now + self.options.drain_s
            if done and delivered >= self.expected:
                # A short settle so late duplicates are counted too.
                time.sleep(min(0.3, self.options.drain_s))
                break
            if (drain_until is not None and now > drain_until) or now > deadline:
                say(f"stopped waiting: {line}" + ("" if done else " (senders not done: timeout)"))
                break
            time.sleep(POLL_S)
        self.send_errors = {n: s["send_errors"] for n, s in status.items() if s.get("send_errors")}
        if self.send_errors:
            say(f"send errors: {self.send_errors}")

    def results(self, session: LabSession) -> dict[str, dict[str, Any]]:
        """Every host's ``replay_results`` reply (empty for a host that stopped answering)."""
        replies: dict[str, dict[str, Any]] = {}
        for name in self.all_hosts:
            agent = session.agent(name)
            reply = session.lost.call(name, lambda a=agent: a.call(Op.REPLAY_RESULTS, 30.0))
            replies[name] = reply if reply is not None else {}
        return replies

    def collect(self, session: LabSession, ops: list[TraceOp]) -> ModeOutcome:
        self.replies = self.results(session)
        records = {n: {int(r["id"]): r for r in rep.get("records", [])} for n, rep in self.replies.items()}
        self.records = records
        messages, missing, wrong = build_messages(ops, records, self.start_ns)
        self.settings.update(
            drain_s=self.options.drain_s,
            send_errors=self.send_errors,
            start_lead_s=START_LEAD_S,
            unresponsive=session.lost.nodes,
        )
        return ModeOutcome(messages, self.settings, missing, wrong)
