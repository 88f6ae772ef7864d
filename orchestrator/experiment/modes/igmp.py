"""``igmp``: network BIER with the BitString learned from the receivers' own joins (docs/igmp.md).

Each receiver of an op joins the op's (S,G) through its kernel (``IP_ADD_SOURCE_MEMBERSHIP``) at the op's
``t``, when its receivers are known, and leaves once it has the whole message; the kernel's IGMPv3
reports reach its leaf, which reports over BIER to every BFIR. The source sends plain multicast ``lead``
seconds later; its leaf imposes BIER with whatever BitString it has learned by then. Groups are one per
(source, receivers) as in net-bier, from their own pool so that a net-bier run's static groups on the
same lab never answer for these.

:class:`MembershipMode` is what ``igmp`` and ``proxy`` share: the checks of the lab's ``igmp`` section,
the groups, the lead and the judgement of membership windows
(:mod:`orchestrator.experiment.membership`).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from aidcnet.agent.control import Op
from aidcnet.agent.replay.protocol import DEFAULT_HOLD_S, ReplayLoad, ReplayOp
from aidcnet.igmp.leaf import GROUP_SOURCES
from aidcnet.modes import Mode
from aidcnet.timescale import TimeScale
from orchestrator.experiment import membership
from orchestrator.experiment.clock import format_seconds, wall
from orchestrator.experiment.modes import register
from orchestrator.experiment.modes.base import ModeOutcome, Say
from orchestrator.experiment.modes.messages import IpMulticastMode
from orchestrator.experiment.session import ExperimentError, LabSession
from orchestrator.workloads.trace import TraceOp

# Away from net-bier's 239.100.0.0/16 (its static groups may still be on the leaves).
POOL = ipaddress.IPv4Network("239.101.0.0/16")
# Where a leaf's BitStrings may come from (igmp.groups): each mode needs its own one kept.
STATIC, LEARNED, PROXIED = GROUP_SOURCES


class MembershipMode(IpMulticastMode):
    """The membership modes' common steps; subclasses say what each host is told."""

    # The igmp.groups source the leaves must keep for this mode's signalling to count.
    group_source: ClassVar[str]

    def lead_s(self, time_scale: TimeScale) -> float:
        """Wall seconds from an op's t to its data at ``time_scale``: the user's ``--lead``, or the default
        from the lab's modelled control plane and the trace (:func:`membership.default_lead_s`)."""
        lead = self.options.lead_s
        return (
            membership.default_lead_s(self.name, self.modelled_path_s, time_scale) if lead is None else lead
        )

    def predicted_as(self) -> tuple[Mode, str] | None:
        # The data is network-BIER's, lead_s after each op's t: the memberships' own latency is not
        # modelled, only the lead the run waits for it.
        lead = self.lead_s(self.time_scale) * 1e3
        return Mode.NET_BIER, f"its data {lead:g} ms (wall) after each op's t"

    def data_delay_fabric_s(self, session: LabSession) -> float:
        return session.time_scale.fabric_s(self.lead_s(session.time_scale))

    def prepare(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        from orchestrator.experiment.replay_groups import ReplayGroupsError, derive_groups

        super().prepare(session, ops, say)
        self._say = say
        igmp = session.plan.igmp
        lab = session.topo.name
        if not igmp.enabled:
            raise ExperimentError(
                f"lab {lab}: {self.name} replay needs IGMP on the leaves; set igmp.enabled: true in the "
                "lab's vars file and run aidclab configure (docs/igmp.md)"
            )
        source = self.group_source
        if source not in igmp.groups:
            raise ExperimentError(
                f"lab {lab}: igmp.groups {igmp.groups} leaves out {source!r}, so the leaves would ignore "
                f"what a {self.name} replay signals; add it to igmp.groups in the vars and configure"
            )
        static = [g.group for g in session.plan.bier.groups]
        try:
            self.groups, self.op_group = derive_groups(ops, pool=POOL, avoid=static)
        except ReplayGroupsError as exc:
            raise ExperimentError(f"lab {lab}: {exc}") from exc
        self.loopbacks = {n: h.loopback for n, h in self.all_hosts.items()}
        self.leaf_of = host_leaves(session, list(self.all_hosts))
        model = membership.ControlModel(igmp.control_cost, igmp.control_cost_record, igmp.robustness)
        leaves = {h: leaf for h, (leaf, _port, _bfr) in self.leaf_of.items()}
        self.modelled_path_s = membership.modelled_join_path_s(self.name, ops, self.op_group, leaves, model)
        self.time_scale = session.time_scale
        say(
            f"{len(self.groups)} groups, lead {self.lead_s(self.time_scale) * 1e3:g} ms before each op's data"
        )

    def host_load(self, session: LabSession, host: str, ops: list[ReplayOp]) -> ReplayLoad:
        lead = self.lead_s(session.time_scale)
        return replace(super().host_load(session, host, ops), lead_s=lead, hold_s=DEFAULT_HOLD_S)

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        # The leaves' histories are read from here on: what the joins and reports changed (and what the
        # proxy receivers' standing joins did) is all after it.
        self.load_ns = time.time_ns()
        super().load(session, ops)
        if session.plan.igmp.control_cost > 0:
            quiet_control_planes(session, self._say)
        self.settings.update(
            groups=len(self.groups),
            lead_s=self.lead_s(session.time_scale),
            hold_s=DEFAULT_HOLD_S,
            control_cost_s=session.plan.igmp.control_cost,
            control_cost_record_s=session.plan.igmp.control_cost_record,
        )

    def run(self, session: LabSession, ops: list[TraceOp], say: Say) -> None:
        super().run(session, ops, say)
        if session.plan.igmp.control_cost > 0:
            # The run's last leaves and withdrawals are still queued at the leaves: serve them before the
            # counters are read, so the control traffic counted is the run's own and all of it.
            quiet_control_planes(session, say)

    def windows(self, ops: list[TraceOp]) -> list[membership.Window]:
        """The membership windows from the hosts' replies."""
        raise NotImplementedError

    def carriages(self, ops: list[TraceOp]) -> list[membership.Carriage]:
        """What carries each new receiver, from the join or report its host says it issued."""
        raise NotImplementedError

    def carriage(self, op: TraceOp, host: str, start_ns: int) -> membership.Carriage:
        """Receiver ``host`` of ``op`` from ``start_ns``: the flow at the source's leaf, its leaf's port."""
        bfir = self.leaf_of[op.src][0]
        leaf, port, bfer = self.leaf_of[host]
        source, group = self.loopbacks[op.src], self.op_group[op.id]
        return membership.Carriage(op.id, host, int(start_ns), bfir, source, group, bfer, leaf, port)

    def collect(self, session: LabSession, ops: list[TraceOp]) -> ModeOutcome:
        outcome = super().collect(session, ops)
        # The scale the run ran at: the automatic scale may have changed it after prepare.
        self.time_scale = scale = session.time_scale
        histories = leaf_histories(
            session, {leaf for leaf, _port, _bfr in self.leaf_of.values()}, self.load_ns
        )
        deliveries = membership.deliveries_from(self.records, self.start_ns, scale)
        changes = membership.membership_changes(self.name, ops, self.op_group)
        due = {op.id: self.start_ns + scale.wall_ns(op.t) for op in ops}
        result = membership.judge(
            self.windows(ops), deliveries, changes, scale, self.carriages(ops), histories, due
        )
        summary = result.to_dict()
        outcome.settings["membership"] = summary
        outcome.lines.append(membership_line(self.name, summary))
        if (result.wrong or result.missed) and outcome.problem is None:
            outcome.problem = self.lead_problem(result, session.time_scale)
        return outcome

    def lead_problem(self, result: membership.MembershipResult, time_scale: TimeScale) -> str:
        """Why a run with wrong or missed deliveries failed, and which lead would do."""
        lead = self.lead_s(time_scale) * 1e3
        head = (
            f"membership: {result.wrong} deliveries outside their receiver's membership window, "
            f"{result.missed} members without their packet (lead {lead:g} ms"
        )
        if result.lead_needed_s is None:
            return head + "; no receiver's membership reached its BFIR's flow: see the leaves' igmp counters)"
        needed = result.lead_needed_s * 1e3
        tail = f"; the memberships were in place up to {needed:.0f} ms (wall) after their op's t"
        if result.never_carried:
            tail += f", {result.never_carried} never"
        if needed <= lead:
            return head + tail + ": not the lead; see the leaves' igmp counters and the run's verdict)"
        return head + tail + f": --lead {membership.suggested_lead_ms(round(needed * 1e6))} would do)"


def host_leaves(session: LabSession, hosts: list[str]) -> dict[str, tuple[str, str, int]]:
    """Per GPU host: its leaf, the leaf's port toward it and the leaf's BFR-id (its BFER)."""
    from orchestrator.configure.plan.bier import host_leaf_port

    out = {}
    for host in hosts:
        found = host_leaf_port(session.plan, host)
        if found is not None:
            out[host] = (found[0], found[1], int(session.plan.nodes[found[0]].bfr_id))
    return out


def leaf_histories(session: LabSession, leaves: set[str], since_ns: int) -> dict[str, membership.LeafHistory]:
    """Each leaf's flows and member ports as they changed from ``since_ns`` on (a leaf that does not
    answer has none: its receivers count as never carried)."""
    out = {}
    for leaf in sorted(leaves):
        agent = session.agent(leaf)
        reply = session.lost.call(leaf, lambda a=agent: a.call(Op.IGMP, 30.0, history_since_ns=since_ns))
        if reply is not None:
            out[leaf] = membership.LeafHistory.from_reply(reply)
    return out


# How long the leaves' modelled control planes get to work off what earlier runs left them.
QUIET_TIMEOUT_S = 300.0


def quiet_control_planes(session: LabSession, say: Say, timeout_s: float = QUIET_TIMEOUT_S) -> None:
    """Wait until no leaf's modelled control plane holds a message (docs/igmp.md): a run starts from an
    idle control plane as from an idle fabric, not behind the leaves and joins of the run before."""
    from orchestrator.configure.plan.bier import host_leaf_port

    leaves = sorted({found[0] for h in session.gpu_hosts() if (found := host_leaf_port(session.plan, h))})

    def queued() -> dict[str, int]:
        out = {}
        for leaf in leaves:
            # Every admitted message is served once: what is neither is queued.
            c = session.agent(leaf).counters()
            waiting = int(c.get("igmp.control.admitted", 0)) - int(c.get("igmp.control.served", 0))
            if waiting:
                out[leaf] = waiting
        return out

    wait_until(
        queued,
        say,
        timeout_s,
        "waiting for the leaves' control planes to finish earlier messages: {} queued",
        lambda left: (
            f"lab {session.topo.name}: the leaves' control planes still hold {left} messages after "
            f"{timeout_s:g} s; igmp.control_cost x time.scale is the wall time each takes: lower one"
        ),
    )


def wait_until(
    pending: Callable[[], dict[str, int]],
    say: Say,
    timeout_s: float,
    waiting: str,
    failed: Callable[[dict[str, int]], str],
    poll_s: float = 0.5,
) -> None:
    """Poll ``pending`` (what is left, per node) until it is empty; say ``waiting`` (formatted with what is
    left) every 5 s, and raise ``failed(left)`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    told = 0.0
    while left := pending():
        now = time.monotonic()
        if now > deadline:
            raise ExperimentError(failed(left))
        if now - told >= 5.0:
            say(waiting.format(left))
            told = now
        time.sleep(poll_s)


def membership_line(mode: str, m: dict[str, Any]) -> str:
    """One line for the run's summary: changes, latency quantiles (fabric time, or wall time labelled on
    an unshaped lab), wrong and missed deliveries."""

    def shown(v: float | None) -> str:
        return format_seconds(v) if m["time"] == "fabric" else wall(v)

    return (
        f"{mode}: {m['changes']} receiver-set changes; membership latency p50 "
        f"{shown(m['latency_p50_s'])}, p99 {shown(m['latency_p99_s'])}, max {shown(m['latency_max_s'])} "
        f"over {m['latency_samples']} new receivers; wrong {m['wrong']}, missed {m['missed']}"
    )


@register
class Igmp(MembershipMode):
    name = Mode.IGMP
    group_source = LEARNED
    summary = (
        "plain IP multicast as net-bier, the BitString learned from IGMP: receivers join each op's (S,G) "
        "through their kernels when it is known and leave once they have it; the data follows --lead later"
    )

    def load(self, session: LabSession, ops: list[TraceOp]) -> None:
        self.joins = membership.host_joins(ops, self.op_group, self.loopbacks)
        super().load(session, ops)
        # The receivers run a schedule of their own (their joins and leaves): start and wait for them too.
        self.senders = [*self.senders, *(h for h in self.joins if h not in self.senders)]

    def host_load(self, session: LabSession, host: str, ops: list[ReplayOp]) -> ReplayLoad:
        return replace(super().host_load(session, host, ops), joins=tuple(self.joins.get(host, ())))

    def windows(self, ops: list[TraceOp]) -> list[membership.Window]:
        joins = {n: rep.get("joins", []) for n, rep in self.replies.items()}
        op_t = {op.id: op.t for op in ops}
        return membership.igmp_windows(joins, op_t, self.start_ns, self.time_scale)

    def carriages(self, ops: list[TraceOp]) -> list[membership.Carriage]:
        by_id = {op.id: op for op in ops}
        return [
            self.carriage(by_id[int(op_id)], host, join_ns)
            for host, rep in self.replies.items()
            for op_id, join_ns, _leave_ns in rep.get("joins", [])
        ]
